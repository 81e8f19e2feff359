"""Scale profile: the operator with many nodes and PlaceholderJobs, idle and across a restart.

On a cluster started with the scale profile (bench/log: SB_NODES kwok nodes, each an
EXTERNAL node in slurm.conf; SB_PENDING_PARTITION, a DOWN partition; a MinJobAge longer than the
run), it creates --jobs pods in a managed namespace in three kinds, each a PlaceholderJob with a
real Slurm job:

- running: bound to their Slurm node and Running (kwok);
- completed: they succeed a second after starting (kwok's delay annotation); their job is ended
  and its record stays in slurmctld for MinJobAge;
- pending: their job asks for the DOWN partition, so it stays PENDING in Slurm.

Then it measures, printing each figure:

1. the operator's RSS and, over --idle-seconds, its CPU, the Slurm calls per poll period by kind
   (lists should be O(1) a period, per-node and per-job calls zero when nothing changes) and the
   API writes (none expected);
2. a restart of the operator: seconds from the stop until /readyz answers as leader and until its
   work queue is empty, and that nothing was submitted, allocated or cancelled (the new
   process's Slurm calls by kind; the Slurm jobs' ids and states before and after);
3. new pods: created at 5 a second (--new-pods), created-to-bound p50 and p99;

and at the end the whole report, then docs/performance.md's table for the run (bench/pagetables.py).

    .venv/bin/python bench/scale.py --jobs 2000 [--running 0.6 --pending 0.2] [--keep]

Populating is the slow part (about 20 pods a second on the 2-core machine); --keep leaves the
namespace for another measurement with --reuse NAMESPACE.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
import sysstats
from clusterenv import cluster_env
from pipeline_latency import make_namespace, pod_body

REPO = Path(__file__).resolve().parent.parent
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
PARTITION = "slurmjob.slinky.slurm.net/partition"
PHJ = ("slinky.slurm.net", "v1alpha1", "placeholderjobs")
# Calls that change a Slurm job or node (never expected from a restart or an idle period).
MUTATING = ("POST /job/", "DELETE /job/", "POST /new/node", "POST /node/", "DELETE /node/")


def stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats", timeout=10) as r:
        out: dict[str, Any] = json.load(r)
        return out


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
            return r.status == 200 and "standby" not in r.read().decode()
    except OSError:
        return False


def kind_of(i: int, jobs: int, running: float, pending: float) -> str:
    if i < jobs * running:
        return "running"
    if i < jobs * (running + pending):
        return "pending"
    return "completed"


def scale_pod(name: str, kind: str, pending_partition: str) -> dict[str, Any]:
    body = pod_body(name)
    ann = body["metadata"].setdefault("annotations", {})
    if kind == "completed":
        ann[COMPLETE_DELAY] = "1s"
    elif kind == "pending":
        ann[PARTITION] = pending_partition
    return body


def populate(api: k8s.ApiClient, ns: str, args: argparse.Namespace) -> None:
    core = k8s.CoreV1Api(api)
    t0 = time.monotonic()
    # Running and completed first: once pending jobs exist, nothing in their partition allocates at once.
    order = sorted(range(args.jobs), key=lambda i: kind_of(i, args.jobs, args.running, args.pending) == "pending")

    def create(i: int) -> None:
        kind = kind_of(i, args.jobs, args.running, args.pending)
        for attempt in range(5):
            try:
                resp = core.create_namespaced_pod(
                    ns, scale_pod(f"s{i:05d}", kind, args.pending_partition), _preload_content=False
                )
                resp.read()
                resp.release_conn()
                return
            except k8s.exceptions.ApiException as e:
                if e.status == 409:
                    return
                time.sleep(0.5 * (attempt + 1))  # the machine is saturated; try again shortly
        raise SystemExit(f"creating pod s{i:05d} failed 5 times")

    with ThreadPoolExecutor(args.concurrency) as pool:
        for n, _ in enumerate(pool.map(create, order), 1):
            if n % 500 == 0:
                print(f"  created {n}/{args.jobs} pods ({time.monotonic() - t0:.0f} s)", file=sys.stderr)


def phases(api: k8s.ApiClient, ns: str) -> dict[str, int]:
    objs = k8s.CustomObjectsApi(api).list_namespaced_custom_object(*PHJ[:2], ns, PHJ[2])
    out: dict[str, int] = {}
    for o in objs["items"]:
        st = o.get("status") or {}
        phase = st.get("phase") or "-"
        if phase == "Pending" and not st.get("jobId"):
            phase = "Pending (no job)"
        out[phase] = out.get(phase, 0) + 1
    return out


def wait_settled(api: k8s.ApiClient, ns: str, args: argparse.Namespace) -> dict[str, int]:
    """Until every PlaceholderJob is Running, Completed or Pending with a job, and the counts match."""
    n_run = sum(kind_of(i, args.jobs, args.running, args.pending) == "running" for i in range(args.jobs))
    n_pend = sum(kind_of(i, args.jobs, args.running, args.pending) == "pending" for i in range(args.jobs))
    want = {"Running": n_run, "Pending": n_pend, "Completed": args.jobs - n_run - n_pend}
    deadline = time.monotonic() + args.settle_timeout
    got: dict[str, int] = {}
    while time.monotonic() < deadline:
        got = phases(api, ns)
        if {k: got.get(k, 0) for k in want} == want:
            return got
        time.sleep(5)
    raise SystemExit(f"PlaceholderJobs did not settle within {args.settle_timeout:.0f}s: {got}, want {want}")


def slurm_jobs() -> dict[str, str]:
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "cluster.sh"), "slurm", "squeue", "-h", "-t", "all", "-o", "%i %T"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def kinds_delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, int]:
    ka, kb = a.get("slurm_requests_by_kind", {}), b.get("slurm_requests_by_kind", {})
    return {k: n - ka.get(k, 0) for k, n in sorted(kb.items()) if n - ka.get(k, 0)}


def idle(api: k8s.ApiClient, url: str, seconds: float, pids: dict[str, int], bg: sysstats.Background) -> dict[str, Any]:
    s0, w0, t0 = stats(url), sysstats.api_requests(api), time.monotonic()
    with sysstats.ProcSampler(pids) as procs:
        time.sleep(seconds)  # the idle window itself
    s1, w1 = stats(url), sysstats.api_requests(api)
    polls = s1["slurm_polls"] - s0["slurm_polls"]
    calls = kinds_delta(s0, s1)
    skipped = s1.get("slurm_state_polls_skipped", 0) - s0.get("slurm_state_polls_skipped", 0)
    return {
        "slurm_state_polls_skipped": skipped,
        "seconds": round(time.monotonic() - t0, 1),
        "operator_cpu_percent": round(procs.cpu_percent("bridge-operator"), 2),
        "operator_rss_mib": procs.row()["peak_rss_mib"].get("bridge-operator"),
        # what the idle bridge costs Slurm (issue 31: slurmrestd <= 3 % of a core at 10,000 jobs)
        "slurmrestd_cpu_percent": round(procs.cpu_percent("slurmrestd"), 2),
        "slurmctld_cpu_percent": round(procs.cpu_percent("slurmctld"), 2),
        "single_job_reads": calls.get("GET /job/{id}", 0),
        "slurm_polls": polls,
        "slurm_calls_by_kind": calls,
        "slurm_calls_per_poll": {k: round(n / polls, 2) for k, n in calls.items()} if polls else {},
        "slurm_mutating_calls": {k: n for k, n in calls.items() if k.startswith(MUTATING)},
        # lists answered "nothing changed since the last one" (update_time): no body to decode
        "slurm_unchanged_answers": {
            k: s1.get(k, 0) - s0.get(k, 0) for k in ("slurm_node_lists_unchanged", "slurm_full_lists_skipped")
        },
        # background-free writes: what the bridge wrote while nothing changed
        "api_writes": sysstats.write_delta(w0, w1, time.monotonic() - t0, bg),
        "processes": procs.row(),
    }


def restart(url: str, settle: float, expected: int) -> dict[str, Any]:
    """Restart the operator; ``expected``: PlaceholderJobs it must have seen before its queue
    being empty means it went through them all."""
    before = slurm_jobs()
    t0 = time.monotonic()
    subprocess.run(["bash", str(REPO / "hack" / "bridge.sh"), "restart", "operator"], check=True, capture_output=True)
    t_ready = time.monotonic() - t0  # bridge.sh restart returns once /readyz answers and it holds the Lease
    drained = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        s = stats(url)
        if s.get("leader") and s.get("placeholderjobs", 0) >= expected and s.get("queue") == 0:
            drained = time.monotonic() - t0
            break
        time.sleep(0.2)
    time.sleep(settle)  # a restart that resubmits or cancels would do it within a few polls
    s = stats(url)
    after = slurm_jobs()
    changed = {j: (before.get(j), after.get(j)) for j in set(before) | set(after) if before.get(j) != after.get(j)}
    return {
        "stop_to_ready_s": round(t_ready, 1),
        "stop_to_queue_empty_s": round(drained, 1) if drained is not None else None,
        "slurm_calls_since_start": s.get("slurm_requests_by_kind"),
        "slurm_mutating_calls": {
            k: n for k, n in s.get("slurm_requests_by_kind", {}).items() if k.startswith(MUTATING)
        },
        "slurm_jobs": len(after),
        "slurm_jobs_changed": len(changed),
        "slurm_jobs_changed_sample": dict(list(changed.items())[:5]),
    }


def new_pods(api: k8s.ApiClient, ns: str, n: int, rate: float) -> dict[str, Any]:
    core = k8s.CoreV1Api(api)
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    lock, done = threading.Lock(), threading.Event()

    def watcher() -> None:
        w = watch.Watch()
        while not done.is_set():
            for ev in w.stream(core.list_namespaced_pod, ns, label_selector="bench=new", timeout_seconds=5,
                               deserialize=False):  # fmt: skip
                pod = ev["object"]
                if (pod.get("spec") or {}).get("nodeName"):
                    with lock:
                        bound.setdefault(pod["metadata"]["name"], time.monotonic())
                        if len(bound) >= n:
                            done.set()
                if done.is_set():
                    w.stop()
                    break

    th = threading.Thread(target=watcher, daemon=True)
    th.start()
    time.sleep(0.5)  # let the watch establish (not a condition wait)
    start = time.monotonic()
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # open-loop arrivals
        body = pod_body(f"new{i:04d}")
        body["metadata"]["labels"] = {"bench": "new"}
        resp = core.create_namespaced_pod(ns, body, _preload_content=False)
        resp.read()
        resp.release_conn()
        with lock:
            created[body["metadata"]["name"]] = time.monotonic()
    done.wait(120)
    done.set()
    lat = sorted(bound[p] - created[p] for p in bound if p in created)
    if len(lat) < 2:
        return {"bound": len(lat)}
    q = statistics.quantiles(lat, n=100)
    return {"pods": n, "bound": len(lat), "p50_s": round(q[49], 3), "p99_s": round(q[98], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--running", type=float, default=0.6, help="share of running PlaceholderJobs")
    ap.add_argument("--pending", type=float, default=0.2, help="share of pending ones (the rest complete)")
    ap.add_argument("--pending-partition", default="bridge-pending", help="SB_PENDING_PARTITION of the cluster")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--idle-seconds", type=float, default=60)
    ap.add_argument("--restart-settle", type=float, default=15, help="seconds watched after the restart")
    ap.add_argument("--new-pods", type=int, default=50)
    ap.add_argument("--settle-timeout", type=float, default=1800)
    ap.add_argument("--operator-port", type=int, default=28080)
    ap.add_argument("--reuse", metavar="NAMESPACE", help="measure an already populated namespace")
    ap.add_argument("--keep", action="store_true", help="leave the namespace (default: delete it)")
    ap.add_argument("--skip", default="", help="comma-separated phases to skip: idle,restart,new")
    args = ap.parse_args()
    skip = set(args.skip.split(","))

    env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    url = f"http://127.0.0.1:{args.operator_port}"
    pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    core = k8s.CoreV1Api(api)
    nodes = len(core.list_node(label_selector="type=kwok").items)
    report: dict[str, Any] = {"kwok_nodes": nodes, "jobs": args.jobs, **pagetables.stamp()}
    bg = sysstats.Background.measure(api, 10)

    ns = args.reuse or f"bench-scale-{int(time.time()) % 100000}"
    if not args.reuse:
        make_namespace(core, ns, managed=True)
        t0 = time.monotonic()
        populate(api, ns, args)
        report["phases"] = wait_settled(api, ns, args)
        report["populate_s"] = round(time.monotonic() - t0)
    else:
        report["phases"] = phases(api, ns)
    report["slurm_jobs"] = len(slurm_jobs())
    print(json.dumps(report), flush=True)
    try:
        if "idle" not in skip:
            report["idle"] = idle(api, url, args.idle_seconds, pids, bg)
            print(json.dumps({"idle": report["idle"]}), flush=True)
        if "restart" not in skip:
            report["restart"] = restart(url, args.restart_settle, sum(report["phases"].values()))
            print(json.dumps({"restart": report["restart"]}), flush=True)
            pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)  # the new operator
            report["idle_after_restart"] = idle(api, url, min(args.idle_seconds, 30), pids, bg)
            print(json.dumps({"idle_after_restart": report["idle_after_restart"]}), flush=True)
        if "new" not in skip:
            report["new_pods"] = new_pods(api, ns, args.new_pods, 5.0)
            print(json.dumps({"new_pods": report["new_pods"]}), flush=True)
    finally:
        if not args.keep:
            core.delete_namespace(ns)
    print(json.dumps(report, indent=2))
    # docs/performance.md's table for this run (bench/summarize.py reads this output again)
    print("\n" + "\n".join(pagetables.scale_table([report])))


if __name__ == "__main__":
    main()
