"""Benchmark: what a *waiting* pod costs in API writes (issue 22, "why is my pod pending?").

Creates --pods pods whose Slurm job waits: they ask for the DOWN partition of a cluster started
with SB_PENDING_PARTITION (hack/lib.sh), so Slurm keeps each job PENDING (reason PartitionDown).
Once every PlaceholderJob shows Slurm's reason, it keeps them waiting for --hold seconds (many
poll periods, pending-reason reads every 10 s and full lists every 30 s), then prints the API
writes per waiting pod by verb and resource (the API server's counters, background subtracted,
as bench/pipeline_latency.py counts them) and the SlurmJobPending Events per pod. The pods are
then deleted with their namespace.

    SB_PENDING_PARTITION=bridge-pending bash hack/cluster.sh up && bash hack/bridge.sh up
    .venv/bin/python bench/waiting_pods.py [--pods 50] [--hold 120]

Expected (bench/log): the pod's create, its PlaceholderJob's create (with its
finalizer), the status at submit (a second status write if Slurm names its reason only after the
submit), an Event on the PlaceholderJob (Submitted) and one SlurmJobPending on each of pod and
PlaceholderJob: 6 or 7, and nothing more while the wait goes on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sysstats  # bench/ is not a package
from clusterenv import cluster_env
from pipeline_latency import delete_and_wait, make_namespace, pod_body, settle

PARTITION = "slurmjob.slinky.slurm.net/partition"
PENDING_EVENT = "SlurmJobPending"  # slurm_bridge.names.EVENT_SLURM_JOB_PENDING


def waiting_pod(name: str, partition: str) -> dict[str, Any]:
    body = pod_body(name)
    body["metadata"]["annotations"] = {PARTITION: partition}
    return body


def per_pod(writes: dict[str, float], pods: int) -> tuple[float, dict[str, float]]:
    """API writes per waiting pod: the total and by "VERB resource"."""
    return round(sum(writes.values()) / pods, 2), {k: round(n / pods, 2) for k, n in sorted(writes.items())}


def events_per_pod(events: list[dict[str, Any]], reason: str = PENDING_EVENT) -> dict[str, Any]:
    """How many ``reason`` Events each object kind got: the most on one object and the mean."""
    by_object: Counter[tuple[str, str]] = Counter(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in events if e.get("reason") == reason
    )
    out: dict[str, Any] = {}
    for kind in sorted({k for k, _ in by_object}):
        counts = [n for (k, _), n in by_object.items() if k == kind]
        out[kind] = {"objects": len(counts), "max": max(counts), "mean": round(sum(counts) / len(counts), 2)}
    return out


def unready(phjs: list[dict[str, Any]], pods: int) -> str | None:
    """Why the run cannot be measured yet (None: every pod's job waits with Slurm's reason)."""
    if len(phjs) < pods:
        return f"{len(phjs)}/{pods} PlaceholderJobs exist"
    rejected = [p for p in phjs if (p.get("status") or {}).get("reason") == "SubmitRejected"]
    if rejected:
        message = (rejected[0].get("status") or {}).get("message", "")
        return f"Slurm refused {len(rejected)} jobs ({message}); is the cluster up with SB_PENDING_PARTITION?"
    waiting = [p for p in phjs if (p.get("status") or {}).get("jobId") and (p.get("status") or {}).get("reason")]
    return None if len(waiting) == pods else f"{len(waiting)}/{pods} jobs wait with Slurm's reason"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=50)
    ap.add_argument("--hold", type=float, default=120, help="seconds the pods wait once every job has its reason")
    ap.add_argument("--partition", default="bridge-pending", help="SB_PENDING_PARTITION of the cluster")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--background-seconds", type=float, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    bg = sysstats.Background.measure(api, args.background_seconds)
    ns = f"bench-waiting-{int(time.time() * 10) % 1000000}"
    make_namespace(core, ns, managed=True)
    try:
        before, t0 = sysstats.api_requests(api), time.monotonic()
        for i in range(args.pods):
            core.create_namespaced_pod(ns, waiting_pod(f"w{i:04d}", args.partition), _preload_content=False).read()
        deadline = time.monotonic() + args.timeout
        why: str | None = "not looked yet"
        while time.monotonic() < deadline:
            phjs = custom.list_namespaced_custom_object("slinky.slurm.net", "v1alpha1", ns, "placeholderjobs")["items"]
            why = unready(phjs, args.pods)
            if why is None or "refused" in why:
                break
            time.sleep(1)
        if why is not None:
            raise SystemExit(f"the pods' jobs are not waiting in Slurm: {why}")
        time.sleep(args.hold)  # the measured wait itself (many poll periods)
        after = settle(api)
        writes = sysstats.write_delta(before, after, time.monotonic() - t0, bg)
        total, by_kind = per_pod(writes, args.pods)
        told = events_per_pod([api.sanitize_for_serialization(e) for e in core.list_namespaced_event(ns).items])
        row = {"pods": args.pods, "hold_s": args.hold, "api_writes_per_waiting_pod": total,
               "api_writes_per_waiting_pod_by_kind": by_kind, "slurm_job_pending_events": told}  # fmt: skip
        if args.json:
            print(json.dumps(row, indent=2))
        else:
            print(f"API writes per waiting pod over {args.hold:g} s of waiting: {total}")
            print(f"by verb and resource: {by_kind}")
            print(f"{PENDING_EVENT} Events per object: {told}")
    finally:
        delete_and_wait(core, ns, args.timeout)


if __name__ == "__main__":
    main()
