"""What many jobs in Slurm cost the parts that list them: slurmrestd, slurmctld and the operator.

A part of the 10x scale profile that this machine can hold (docs/scaling.md): N held batch jobs
(never started: they need no node) are submitted through slurmrestd to the local cluster, then it
measures, printing one JSON line:

- slurmctld's and slurmrestd's RSS (and slurmrestd's peak) before and after;
- one full ``GET jobs/`` and one ``GET jobs/state``: seconds and bytes, and slurmrestd's peak after each;
- the operator (``hack/bridge.sh up``) over ``--idle-seconds`` with those jobs in Slurm (none of
  them its own): its CPU and RSS, as every site with that many native jobs has it.

The jobs are cancelled at the end (``scancel --name``).

    .venv/bin/python bench/slurm_list_memory.py --jobs 50000 [--concurrency 8] [--idle-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sysstats  # bench/ is not a package
from clusterenv import REPO, cluster_env
from slurm_ref import API, Calls

NAME = "bench-list-memory"


def held_job(partition: str) -> dict[str, Any]:
    """A batch job that never runs (held): a record in slurmctld and in every full list."""
    return {"job": {
        "name": NAME, "partition": partition, "hold": True, "script": "#!/bin/sh\ntrue\n",
        "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"],
        "time_limit": {"set": True, "number": 10},
    }}  # fmt: skip


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def timed_get(calls: Calls, path: str) -> dict[str, float]:
    req = urllib.request.Request(f"{calls.url.rstrip('/')}/{API}/{path}", headers={"X-SLURM-USER-TOKEN": calls.token})
    began = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        size = len(r.read())
    return {"seconds": round(time.monotonic() - began, 2), "mib": round(size / 2**20, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle-seconds", type=float, default=60)
    args = ap.parse_args()
    env = cluster_env()
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip().removeprefix("SLURM_JWT=")
    calls = Calls(env["SLURM_REST_URL"], token)
    pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    missing = [n for n in ("slurmctld", "slurmrestd", "bridge-operator") if n not in pids]
    if missing:
        raise SystemExit(f"not running: {', '.join(missing)} (hack/cluster.sh up, then hack/bridge.sh up)")
    slurm = ("slurmctld", "slurmrestd")
    report: dict[str, Any] = {"jobs": args.jobs, "before": {n: memory_kib(pids[n]) for n in slurm}}
    began = time.monotonic()
    body = held_job(env["SB_PARTITION"])
    with ThreadPoolExecutor(args.concurrency) as pool:
        ids = list(pool.map(lambda _: calls.call("POST", "job/submit", body)["job_id"], range(args.jobs)))
    report["submit_per_s"] = round(len(ids) / (time.monotonic() - began), 1)
    try:
        report["full_list"] = timed_get(calls, "jobs/")
        report["after_full_list"] = {n: memory_kib(pids[n]) for n in slurm}
        report["state_list"] = timed_get(calls, "jobs/state")
        operator = pids["bridge-operator"]
        cpu0, t0 = sysstats.cpu_seconds(operator), time.monotonic()
        time.sleep(args.idle_seconds)  # a measuring window, not a wait for a condition
        used = sysstats.cpu_seconds(operator) - cpu0
        report["operator_idle"] = {
            "cpu_percent": round(100 * used / (time.monotonic() - t0), 2),
            **memory_kib(operator),
        }
    finally:
        subprocess.run(["bash", str(REPO / "hack" / "cluster.sh"), "slurm", "scancel", f"--name={NAME}"], check=False)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
