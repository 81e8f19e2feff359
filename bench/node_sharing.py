"""Benchmark: pods/s and CPU per pod of each node-sharing mode, side by side in one run, beside the
default scheduler (bench/log, "Node sharing").

For each mode (``--modes``, default ``coResident,exclusive,timeShared``) it creates ``--pods`` pods
at once in a managed namespace, each naming the mode with the annotation
slurmjob.slinky.slurm.net/node-sharing, with 1 CPU and 64 MiB as requests and limits (what
coResident needs), running ``--run-seconds`` on kwok before they complete; then the same pods in
an unmanaged namespace for the default scheduler. It prints, per mode: pods bound, pods/s (pods /
(last bind - first create)), p50/p99 of create -> bound, the most pods bound at once, Slurm REST
calls per pod (the operator's /stats), and CPU milliseconds per pod of the whole machine and of
the bridge's and Slurm's processes (bench/sysstats.py) over the same window, with the ratios to
the default scheduler; then docs/performance.md's table for the run (bench/pagetables.py).

The pods go to the bridge's default partition: the local cluster's external kwok nodes (4 x 64
CPUs). coResident and timeShared pack 1-CPU jobs onto them; exclusive gives each job a whole node,
so at most one pod per node runs at once and the rest wait in Slurm's queue: its pods/s is set by
how fast a node is handed on (a pod's run, its job's cancel, Slurm's next scheduling pass).

    bash hack/cluster.sh up && bash hack/bridge.sh up
    .venv/bin/python bench/node_sharing.py [--pods 100] [--run-seconds 2] [--modes coResident,exclusive] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
import sysstats
from clusterenv import cluster_env, refuse_node_guard
from pipeline_latency import delete_and_wait, make_namespace, operator_stats

MODE_ANNOTATION = "slurmjob.slinky.slurm.net/node-sharing"
KWOK_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
MANAGED_TAINT = "slinky.slurm.net/managed-node"
MODES = ("exclusive", "timeShared", "coResident")


@dataclass
class Run:
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    most_at_once: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)


def pod_body(name: str, mode: str | None, run_seconds: float) -> dict[str, Any]:
    annotations = {KWOK_COMPLETE_DELAY: f"{run_seconds:g}s"}
    if mode:
        annotations[MODE_ANNOTATION] = mode
    resources = {"cpu": "1", "memory": "64Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            # The default-scheduler baseline may use the bridge's nodes too (same capacity).
            "tolerations": [{"key": MANAGED_TAINT, "operator": "Exists", "effect": "NoExecute"}],
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
            ],
        },
    }


def watch_pods(core: k8s.CoreV1Api, ns: str, run: Run, n: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            for ev in watch.Watch().stream(core.list_namespaced_pod, ns, timeout_seconds=5, deserialize=False):
                pod = ev["object"]
                name, now = pod["metadata"]["name"], time.monotonic()
                phase = (pod.get("status") or {}).get("phase")
                with run.lock:
                    if (pod.get("spec") or {}).get("nodeName"):
                        run.bound.setdefault(name, now)
                    if phase in ("Succeeded", "Failed") or ev["type"] == "DELETED":
                        run.finished.setdefault(name, now)
                    run.most_at_once = max(run.most_at_once, len(set(run.bound) - set(run.finished)))
                    if len(run.bound) >= n:
                        run.done.set()
                if stop.is_set() or run.done.is_set():
                    return
        except (KeyError, k8s.exceptions.ApiException, urllib3.exceptions.HTTPError) as e:
            print(f"note: pod watch of {ns} restarted ({type(e).__name__}: {e})", file=sys.stderr)


def measure(core: k8s.CoreV1Api, ns: str, body: Callable[[str], dict[str, Any]], args: argparse.Namespace) -> Run:
    """``args.pods`` pods made by ``body(name)``, created at once; when each was created and bound."""
    run, stop = Run(), threading.Event()
    watcher = threading.Thread(target=watch_pods, args=(core, ns, run, args.pods, stop), daemon=True)
    watcher.start()
    time.sleep(0.5)  # let the watch establish before the first create (not a condition wait)

    def create(i: int) -> None:
        name = f"s{i:04d}"
        resp = core.create_namespaced_pod(ns, body(name), _preload_content=False)
        resp.read()
        resp.release_conn()
        with run.lock:
            run.created[name] = time.monotonic()

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(create, range(args.pods)))
    if not run.done.wait(args.timeout):
        print(
            f"warning: only {len(run.bound)}/{args.pods} pods bound in {ns} within {args.timeout:.0f}s", file=sys.stderr
        )
    stop.set()
    return run


def one(api: k8s.ApiClient, mode: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """One mode's run (None: the default scheduler's), in a namespace of its own, deleted after."""
    core = k8s.CoreV1Api(api)
    label = mode or "default-scheduler"
    ns = f"bench-share-{label.lower()}-{int(time.time() * 10) % 1000000}"
    make_namespace(core, ns, managed=mode is not None)
    try:
        stats0 = operator_stats(args.operator_url) if mode else None
        with sysstats.ProcSampler(args.pids) as procs:
            run = measure(core, ns, lambda name: pod_body(name, mode, args.run_seconds), args)
        stats1 = operator_stats(args.operator_url) if mode else None
    finally:
        delete_and_wait(core, ns, args.timeout)
    row: dict[str, Any] = {"mode": label, "pods": args.pods, **timing(run)}
    if stats0 and stats1:
        row["slurm_calls_per_pod"] = round((stats1["slurm_requests"] - stats0["slurm_requests"]) / args.pods, 2)
    row["cpu_ms_per_pod"] = sysstats.cpu_ms_per_pod(procs.row(), args.pods)
    row["machine_busy_percent"] = procs.row()["machine_busy_percent"]
    return row


def timing(run: Run) -> dict[str, Any]:
    """Pods bound, pods/s (bound / (last bind - first create)), p50/p99 of create -> bound, and the
    most bound at once."""
    lat = sorted(run.bound[p] - run.created[p] for p in run.bound if p in run.created)
    out: dict[str, Any] = {"bound": len(lat)}
    if lat:
        span = max(run.bound.values()) - min(run.created.values())
        q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0]] * 99
        out |= {"pods_per_s": round(len(lat) / span, 2), "p50_s": round(q[49], 2), "p99_s": round(q[98], 2)}
    out["most_at_once"] = run.most_at_once
    return out


def require_operator(url: str) -> None:
    """The process bridge's operator answers /stats, or the benchmark stops saying what to run."""
    try:
        operator_stats(url)
    except OSError as e:
        raise SystemExit(f"the bridge operator is not reachable at {url} ({e}); run hack/bridge.sh up") from None


COLUMNS = ("mode", "bound", "pods_per_s", "ratio", "p50_s", "p99_s", "most_at_once", "slurm_calls_per_pod",
           "machine_ms", "cpu_ratio", "operator_ms", "slurmctld_ms", "slurmrestd_ms", "apiserver_ms")  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    default = next((r for r in rows if r["mode"] == "default-scheduler"), {})
    lines = ["  ".join(f"{c:>15}" for c in COLUMNS)]
    for r in rows:
        ms = r.get("cpu_ms_per_pod") or {}
        cells = {
            **r,
            "ratio": round(r["pods_per_s"] / default["pods_per_s"], 2)
            if r.get("pods_per_s") and default.get("pods_per_s")
            else "-",
            "machine_ms": ms.get(sysstats.MACHINE),
            "cpu_ratio": sysstats.cpu_ratio(ms, default.get("cpu_ms_per_pod") or {}) or "-",
            "operator_ms": ms.get("bridge-operator"),
            "slurmctld_ms": ms.get("slurmctld"),
            "slurmrestd_ms": ms.get("slurmrestd"),
            "apiserver_ms": ms.get("kube-apiserver"),
        }
        lines.append("  ".join(f"{cells.get(c, '-')!s:>15}" for c in COLUMNS))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--run-seconds", type=float, default=2.0, help="how long each pod runs before kwok completes it")
    ap.add_argument("--modes", default="coResident,exclusive,timeShared")
    ap.add_argument("--concurrency", type=int, default=16, help="parallel pod creates")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--operator-port", type=int, default=28080, help="the process bridge's operator port")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise SystemExit(f"--modes {args.modes!r}: expected a comma-separated list of {', '.join(MODES)}")
    env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    args.operator_url = f"http://127.0.0.1:{args.operator_port}"
    require_operator(args.operator_url)
    policies = k8s.AdmissionregistrationV1Api(api).list_validating_admission_policy().items
    refuse_node_guard([p.metadata.name for p in policies])
    args.pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    rows = [one(api, mode, args) for mode in modes]
    rows.append(one(api, None, args))
    recorded = pagetables.stamp()  # the page's labels: date and commit
    rows = [{**r, **recorded} for r in rows]
    # docs/performance.md's table for this run (bench/summarize.py: the same over several runs)
    page = "\n" + "\n".join(pagetables.sharing_table([rows]))
    if args.json:
        print(json.dumps(rows, indent=2))
        print(page, file=sys.stderr)
    else:
        print(f"{args.pods} pods per mode, 1 CPU and 64 MiB each, running {args.run_seconds:g} s; partition "
              f"{env['SB_PARTITION']} ({len(env['SB_NODE_NAMES'].split())} nodes)")  # fmt: skip
        print(table(rows))
        print(page)


if __name__ == "__main__":
    main()
