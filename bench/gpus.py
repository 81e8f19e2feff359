"""Benchmark: pods/s of GPU and MIG pods on hybrid nodes with native GPU jobs beside them, against
CPU-only pods, in one run (issue 37; docs/gpus.md, bench/log "GPU pods on hybrid
nodes").

The local cluster's hybrid nodes (partition ``hybrid``, kwok nodes served by real slurmd):
kwok-hybrid-1 has 4 CPUs and two whole GPUs (``gpu:h100:2``), kwok-hybrid-2 4 CPUs and one GPU as
MIG slices (``gpu:1g.10gb:4,gpu:3g.40gb:1``). Before the first profile it submits two native batch
jobs (root's, ``sbatch --gres``, 1 CPU each) that hold one whole GPU on kwok-hybrid-1 and the
3g.40gb slice on kwok-hybrid-2 for the whole run, and cancels them at the end. Then, one profile
after the other (``--profiles``, default ``cpu,gpu,mig``), it creates ``--pods`` pods at once in
a managed namespace of their own, each ``coResident`` in the hybrid partition, with 1 CPU and 64
MiB as requests and limits, running ``--run-seconds`` on kwok before they complete:

- ``cpu``: no GPU (the baseline): six CPUs are free beside the native jobs;
- ``gpu``: one whole GPU each (``deviceclass.resource.kubernetes.io/gpu.nvidia.com: 1``): one GPU
  is free, so one pod runs at a time and the rest wait in Slurm's queue;
- ``mig``: one 1g.10gb slice each (``deviceclass.resource.kubernetes.io/mig-1g.10gb.nvidia.com:
  1``): four slices are free, but kwok-hybrid-2 has three CPUs left, so three run at a time.

It prints, per profile, what bench/node_sharing.py prints per mode: pods bound, pods/s (pods /
(last bind - first create)), p50/p99 of create -> bound, the most pods bound at once, Slurm REST
calls per pod (the operator's /stats), CPU milliseconds per pod of the whole machine and of the
bridge's processes (bench/sysstats.py), and the ratio of each profile's pods/s (and machine CPU
per pod) to the cpu profile's; then docs/performance.md's table for the run (bench/pagetables.py).
With one GPU free, the gpu profile's pods/s is set by how fast the GPU is handed on (a pod's run,
its job's cancel, Slurm's next scheduling pass).

    bash hack/cluster.sh up && bash hack/bridge.sh up
    .venv/bin/python bench/gpus.py [--pods 20] [--run-seconds 1] [--profiles cpu,gpu,mig] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
import sysstats
from clusterenv import REPO, cluster_env
from node_sharing import KWOK_COMPLETE_DELAY, measure, require_operator, timing
from pipeline_latency import delete_and_wait, make_namespace, operator_stats

from slurm_bridge import names

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
# Each profile's DeviceClass (None: CPU only), one device per pod.
PROFILES: dict[str, str | None] = {"cpu": None, "gpu": "gpu.nvidia.com", "mig": "mig-1g.10gb.nvidia.com"}
# The native jobs beside the pods: (index into the hybrid nodes, the GRES it holds).
NATIVE_GRES = ((0, "gpu:1"), (1, "gpu:3g.40gb:1"))
# Each profile in docs/performance.md's words: what a pod asks for, and what is free for it beside
# the native jobs on the local cluster's hybrid nodes (see the module's docstring).
WHAT = {"cpu": "CPU only", "gpu": "one whole GPU each", "mig": "one 1g.10gb slice each"}
FREE = {"cpu": "6 CPUs", "gpu": "1 GPU", "mig": "4 slices (3 CPUs on their node)"}
BRIDGE_PROCESSES = ("bridge-operator", "bridge-webhook", "bridge-extender", "bridge-scheduler")


def pod_body(name: str, device_class: str | None, partition: str, run_seconds: float) -> dict[str, Any]:
    annotations = {
        KWOK_COMPLETE_DELAY: f"{run_seconds:g}s",
        names.ANN_PARTITION: partition,
        names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT,
    }
    resources = {"cpu": "1", "memory": "64Mi"}
    if device_class:
        resources[DEVICE_CLASS_PREFIX + device_class] = "1"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": resources, "limits": dict(resources)}}
            ],
        },
    }


# ---- native jobs ----------------------------------------------------------------------------------
def slurm(*argv: str) -> subprocess.CompletedProcess[str]:
    """A Slurm command as root in the local cluster's Slurm root (hack/cluster.sh slurm)."""
    return subprocess.run(
        ["bash", str(REPO / "hack" / "cluster.sh"), "slurm", *argv], capture_output=True, text=True, check=False
    )


def submit_native(node: str, gres: str, partition: str) -> int:
    proc = slurm("sbatch", "--parsable", "-p", partition, "-w", node, f"--gres={gres}", "-c", "1", "--mem=64M",
                 "-J", "bench-gpus-native", "-o", "/dev/null", "--wrap", "exec sleep 3600")  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"sbatch -w {node} --gres={gres} was refused: {proc.stderr.strip()}")
    return int(proc.stdout.strip().split(";")[0])


def wait_running(job_ids: list[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pending = list(job_ids)
    while pending and time.monotonic() < deadline:
        pending = [j for j in pending if "JobState=RUNNING" not in slurm("scontrol", "show", "job", str(j)).stdout]
        if pending:
            time.sleep(0.5)
    if pending:
        shown = "; ".join(slurm("squeue", "-h", "-j", str(j), "-o", "%i %T %r").stdout.strip() for j in pending)
        raise SystemExit(f"native jobs {pending} did not start within {timeout:.0f}s ({shown})")


# ---- one profile ----------------------------------------------------------------------------------
def one(api: k8s.ApiClient, profile: str, args: argparse.Namespace) -> dict[str, Any]:
    """One profile's run, in a managed namespace of its own, deleted after."""
    core = k8s.CoreV1Api(api)
    ns = f"bench-gpus-{profile}-{int(time.time() * 10) % 1000000}"
    make_namespace(core, ns, managed=True)
    try:
        stats0 = operator_stats(args.operator_url)
        with sysstats.ProcSampler(args.pids) as procs:
            run = measure(
                core, ns, lambda name: pod_body(name, PROFILES[profile], args.partition, args.run_seconds), args
            )
        stats1 = operator_stats(args.operator_url)
    finally:
        delete_and_wait(core, ns, args.timeout)
    row: dict[str, Any] = {"profile": profile, "what": WHAT[profile], "free": FREE[profile], "pods": args.pods}
    row |= timing(run)
    row["slurm_calls_per_pod"] = round((stats1["slurm_requests"] - stats0["slurm_requests"]) / args.pods, 2)
    ms = sysstats.cpu_ms_per_pod(procs.row(), args.pods)
    ms["bridge"] = round(sum(ms.get(p, 0.0) for p in BRIDGE_PROCESSES), 2)
    row["cpu_ms_per_pod"] = ms
    row["machine_busy_percent"] = procs.row()["machine_busy_percent"]
    return row


COLUMNS = ("profile", "bound", "pods_per_s", "ratio", "p50_s", "p99_s", "most_at_once", "slurm_calls_per_pod",
           "machine_ms", "cpu_ratio", "bridge_ms", "operator_ms", "slurmctld_ms", "slurmrestd_ms")  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    cpu = next((r for r in rows if r["profile"] == "cpu"), {})
    lines = ["  ".join(f"{c:>15}" for c in COLUMNS)]
    for r in rows:
        ms = r.get("cpu_ms_per_pod") or {}
        ratio = round(r["pods_per_s"] / cpu["pods_per_s"], 2) if r.get("pods_per_s") and cpu.get("pods_per_s") else "-"
        cells = {
            **r,
            "ratio": ratio,
            "machine_ms": ms.get(sysstats.MACHINE),
            "cpu_ratio": sysstats.cpu_ratio(ms, cpu.get("cpu_ms_per_pod") or {}) or "-",
            "bridge_ms": ms.get("bridge"),
            "operator_ms": ms.get("bridge-operator"),
            "slurmctld_ms": ms.get("slurmctld"),
            "slurmrestd_ms": ms.get("slurmrestd"),
        }
        lines.append("  ".join(f"{cells.get(c, '-')!s:>15}" for c in COLUMNS))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=20, help="pods per profile")
    ap.add_argument("--run-seconds", type=float, default=1.0, help="how long each pod runs before kwok completes it")
    ap.add_argument("--profiles", default="cpu,gpu,mig")
    ap.add_argument("--concurrency", type=int, default=16, help="parallel pod creates")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--operator-port", type=int, default=28080, help="the process bridge's operator port")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    if not profiles or any(p not in PROFILES for p in profiles):
        raise SystemExit(f"--profiles {args.profiles!r}: expected a comma-separated list of {', '.join(PROFILES)}")
    env = cluster_env()
    hybrid = env["SB_HYBRID_NODE_NAMES"].split()
    if len(hybrid) < len(NATIVE_GRES):
        raise SystemExit(
            f"the cluster has hybrid nodes {hybrid}, want {len(NATIVE_GRES)} (hack/lib.sh SB_HYBRID_NODES)"
        )
    args.partition = env["SB_HYBRID_PARTITION"]
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    args.operator_url = f"http://127.0.0.1:{args.operator_port}"
    require_operator(args.operator_url)
    args.pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    natives: list[tuple[int, str, str]] = []
    try:
        for i, gres in NATIVE_GRES:
            natives.append((submit_native(hybrid[i], gres, args.partition), hybrid[i], gres))
        wait_running([j for j, _, _ in natives], 60)
        rows = [one(api, profile, args) for profile in profiles]
    finally:
        for job_id, _, _ in natives:
            slurm("scancel", str(job_id))
    recorded = pagetables.stamp()  # the page's labels: date and commit
    rows = [{**r, **recorded} for r in rows]
    # docs/performance.md's table for this run (bench/summarize.py: the same over several runs)
    page = "\n" + "\n".join(pagetables.gpus_table([rows]))
    if args.json:
        print(json.dumps(rows, indent=2))
        print(page, file=sys.stderr)
    else:
        beside = ", ".join(f"job {j} {gres} on {node}" for j, node, gres in natives)
        print(f"{args.pods} pods per profile, coResident, 1 CPU and 64 MiB each (gpu: + 1 whole GPU, mig: + 1 "
              f"1g.10gb slice), running {args.run_seconds:g} s; partition {args.partition} ({' '.join(hybrid)}); "
              f"native jobs beside them: {beside}")  # fmt: skip
        print(table(rows))
        print(page)


if __name__ == "__main__":
    main()
