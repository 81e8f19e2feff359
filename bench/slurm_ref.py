"""Benchmark: S_ref, what a job costs Slurm itself on this machine, to set the bridge's CPU against.

N immediate allocations through slurmrestd (external jobs of one CPU in the bridge's partition,
as the bridge allocates a pod's, with the comment the bridge gives them), each read once, then all
cancelled, ``--concurrency`` at a time (the pipeline benchmark's), with the machine's and every
process's CPU sampled over each phase (sysstats.py: steal apart, less an idle baseline measured
first) until slurmctld's hooks for it have run. S_ref is the machine's CPU per job in the first
phase (the allocation, its read, the PrologSlurmctld) less the benchmark client's own (which plays
the bridge's calls): what any allocator through slurmrestd pays Slurm per job started
(slurmctld with its hooks, slurmrestd, slurmdbd, MariaDB, munged), over the same part of a job's
life as the pipeline benchmark's create -> bound window. ``end`` is the same for the cancels
(with the EpilogSlurmctld). A bridge pod's added CPU (pipeline_latency.py's
``added_cpu_ms_per_pod``) less S_ref is what the bridge costs beyond Slurm's own work.

    .venv/bin/python bench/slurm_ref.py [--jobs 200] [--concurrency 16] [--idle-seconds 10] [--json]

The jobs are named ``bench-sref-*`` and carry no bridge mark (the bridge leaves them alone); any a
run left behind are cancelled at the start. Needs the local cluster (`hack/cluster.sh up`).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sysstats  # bench/ is not a package
from clusterenv import cluster_env

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import notice_comment

PREFIX = "bench-sref-"
API = "slurm/v0.0.44"
# Slurm's processes (sysstats' names): their CPU per job is S_ref's breakdown.
SLURM = ("slurmctld", "slurmrestd", "slurmdbd", "mariadb", "munged")


# The comment the bridge gives the jobs it allocates and ends itself: slurmctld's hooks have nothing
# to tell of them and exit in their small shell (a job without it would cost two signed notices).
QUIET = notice_comment(names.NOTIFY_NONE)


def job_body(name: str, partition: str) -> dict[str, Any]:
    """An external job of one CPU and 64 MiB on one node, allocated now or refused; to slurmctld's
    hooks, a job as the bridge allocates a pod's."""
    return {"job": {
        "name": name, "partition": partition, "flags": ["EXTERNAL_JOB"], "immediate": True, "comment": QUIET,
        "minimum_nodes": 1, "maximum_nodes": 1, "tasks_per_node": 1,
        "memory_per_node": {"set": True, "number": 64}, "time_limit": {"set": True, "number": 10},
        "current_working_directory": "/tmp", "environment": ["PATH=/usr/bin:/bin"],
    }}  # fmt: skip


def s_ref(row: dict[str, Any], jobs: int) -> dict[str, Any]:
    """S_ref from a ``ProcSampler.row()`` over ``jobs`` allocated, read and cancelled jobs: the
    machine's CPU ms per job (idle baseline subtracted) less the benchmark client's, and each of
    Slurm's processes' share."""
    ms = sysstats.cpu_ms_per_pod(row, jobs)
    if not ms:
        return {"jobs": jobs}
    machine, client = ms.get(sysstats.MACHINE, 0.0), ms.get(sysstats.BENCH_CLIENT, 0.0)
    return {
        "jobs": jobs,
        "s_ref_ms_per_job": round(max(machine - client, 0.0), 2),
        "machine_ms_per_job": machine,
        "bench_client_ms_per_job": client,
        "slurm_ms_per_job": {n: ms[n] for n in SLURM if n in ms},
        "own_children_ms_per_job": {n: v for n, v in sysstats.cpu_split_ms_per_pod(row, jobs).items() if n in SLURM},
    }


def beyond_slurm(added_ms_per_pod: float | None, s_ref_ms_per_job: float | None) -> float | None:
    """What a bridge pod costs the machine beyond Slurm's own work for its job: its added CPU over a
    default scheduler's pod, less S_ref; None when either is missing."""
    if added_ms_per_pod is None or s_ref_ms_per_job is None:
        return None
    return round(added_ms_per_pod - s_ref_ms_per_job, 2)


@dataclass
class Calls:
    """slurmrestd, as the benchmark's client calls it."""

    url: str
    token: str
    refused: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, method: str, path: str, body: Any = None, api: str = API) -> Any:
        req = urllib.request.Request(
            f"{self.url.rstrip('/')}/{api}/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"X-SLURM-USER-TOKEN": self.token, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def start(self, name: str, partition: str) -> int | None:
        """Allocate and read back, as the bridge starts a pod's job: its id (None: refused)."""
        try:
            job_id = int(self.call("POST", "job/allocate", job_body(name, partition))["job_id"])
        except (urllib.error.HTTPError, KeyError, ValueError) as e:
            with self.lock:
                self.refused.append(f"{name}: {e}")
            return None
        try:
            self.call("GET", f"job/{job_id}")
        except urllib.error.HTTPError:
            self.call("DELETE", f"job/{job_id}")
            raise
        return job_id

    def end(self, job_id: int) -> None:
        self.call("DELETE", f"job/{job_id}")

    def clean(self) -> None:
        """Cancel the jobs an earlier run left."""
        for job in self.call("GET", "jobs/")["jobs"]:
            if str(job.get("name", "")).startswith(PREFIX) and {"PENDING", "RUNNING"} & set(job["job_state"]):
                self.call("DELETE", f"job/{job['job_id']}")


def calibrate(
    env: dict[str, str], pids: dict[str, int], idle: sysstats.IdleBaseline | None, jobs: int, concurrency: int
) -> dict[str, Any]:
    """S_ref on the running cluster, ``concurrency`` calls at a time, with ``pids`` sampled (``idle``:
    the baseline to subtract, measured by the caller), in two phases as a pod's life has them:
    ``jobs`` allocated and read back, with their PrologSlurmctld (``s_ref_ms_per_job``: what the
    pipeline's create -> bound window holds of a bridge pod's job), then all cancelled, with their
    EpilogSlurmctld (``end``); ``life_ms_per_job`` is the two together."""
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip().removeprefix("SLURM_JWT=")
    calls = Calls(env["SLURM_REST_URL"], token)
    calls.clean()
    ctld = pids.get("slurmctld")
    with sysstats.ProcSampler(pids, idle=idle) as started, ThreadPoolExecutor(concurrency) as pool:
        made = [j for j in pool.map(lambda i: calls.start(f"{PREFIX}{i}", env["SB_PARTITION"]), range(jobs)) if j]
        settle(ctld)  # the jobs' prologs are this phase's
    with sysstats.ProcSampler(pids, idle=idle) as ended, ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(calls.end, made))
        settle(ctld)  # and their epilogs the end's
    first, last = s_ref(started.row(), len(made)), s_ref(ended.row(), len(made))
    result = {
        **first,
        "end": last,
        "life_ms_per_job": round(first.get("s_ref_ms_per_job", 0.0) + last.get("s_ref_ms_per_job", 0.0), 2),
        "refused": len(calls.refused),
        "seconds": round(started.row()["seconds"] + ended.row()["seconds"], 2),
    }
    if calls.refused:
        print(f"note: Slurm refused {len(calls.refused)} allocations, e.g. {calls.refused[0]}", file=sys.stderr)
    return result


def children(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The child processes of ``pid`` (every thread's)."""
    out: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return out  # gone meanwhile
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return out


def hooks_running(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether slurmctld (``pid``) runs a hook of a job: a child of its script daemon
    (``slurmscriptd``, a child that lives as long as slurmctld), or a child that is
    not slurmctld's own (a Slurm without that daemon)."""
    for child in children(pid, proc):
        try:
            own = (proc / str(child) / "comm").read_text().strip() in ("slurmscriptd", "slurmctld")
        except OSError:
            continue
        if not own or children(child, proc):
            return True
    return False


def settle(pid: int | None, timeout: float = 60.0) -> None:
    """Wait until slurmctld has run every hook it started (none running for 0.5 s), so that what
    a phase set off is counted in that phase; at most ``timeout`` seconds."""
    if pid is None:
        return
    deadline, quiet_since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if hooks_running(pid):
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 0.5:
            return
        time.sleep(0.05)
    print(f"note: slurmctld still ran hooks {timeout:g} s after the calibration", file=sys.stderr)


# slurm.conf's two hook lines: the handoff script (hack/slurm-policy.conf) and slurmctld's notify
# hook; a site without hybrid nodes runs neither.
HOOK_KEYS = ("PrologSlurmctld=", "EpilogSlurmctld=")


def without_hooks(conf: str) -> str:
    """slurm.conf's text with its PrologSlurmctld and EpilogSlurmctld lines left out."""
    return "".join(line for line in conf.splitlines(keepends=True) if not line.lstrip().startswith(HOOK_KEYS))


class HooksOff:
    """slurmctld without its hooks for the ``with`` block (the local cluster's slurm.conf rewritten,
    ``reconfigure`` through slurmrestd, and put back after), so one benchmark run measures a site
    without hybrid nodes beside the configured one. It waits until Slurm's answer to ``GET conf``
    shows the change and then one settings period of the operator (``wait_s``), which re-reads
    slurm.conf (the released mark is written only where an EpilogSlurmctld reads it)."""

    def __init__(self, env: dict[str, str], wait_s: float) -> None:
        self.path = Path(env["SLURM_ROOT"], "etc", "slurm", "slurm.conf")
        token = Path(env["SLURM_JWT_FILE"]).read_text().strip().removeprefix("SLURM_JWT=")
        self.calls = Calls(env["SLURM_REST_URL"], token)
        self.wait_s = wait_s
        self.saved = ""

    def _apply(self, text: str, hooks: bool) -> None:
        self.path.write_text(text)
        self.calls.call("GET", "reconfigure")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            conf = self.calls.call("GET", "conf", api="slurm/v0.0.45").get("slurm_conf") or {}
            if bool(conf.get("EpilogSlurmctld")) == hooks:  # slurm.conf's names
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"slurmctld did not take {self.path} within 60 s of its reconfigure")
        print(f"note: slurmctld's hooks {'back' if hooks else 'off'}; waiting {self.wait_s:g} s for the "
              "operator's settings reader", file=sys.stderr)  # fmt: skip
        time.sleep(self.wait_s)  # the operator's period: no condition of its own to wait on

    def __enter__(self) -> HooksOff:
        backup = self.path.with_name(self.path.name + ".bench-saved")
        if backup.exists():  # a run killed inside the block: its slurm.conf back first
            self.path.write_text(backup.read_text())
        self.saved = self.path.read_text()
        backup.write_text(self.saved)
        self._apply(without_hooks(self.saved), hooks=False)
        return self

    def __exit__(self, *_: object) -> None:
        self._apply(self.saved, hooks=True)
        self.path.with_name(self.path.name + ".bench-saved").unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16, help="jobs at a time (pipeline_latency.py's default)")
    ap.add_argument("--idle-seconds", type=float, default=10, help="the idle baseline's window")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = cluster_env()
    pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    with sysstats.ProcSampler(pids) as idle:
        time.sleep(args.idle_seconds)  # the idle window itself
    result = calibrate(env, pids, idle.idle_baseline(), args.jobs, args.concurrency)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:28} {v}")


if __name__ == "__main__":
    main()
