"""Benchmark: pod creates through the bridge's mutating webhook against creates without it.

Creates N pods with ``dryRun=All`` (admission runs, mutating webhooks included: they declare
``sideEffects: None``; nothing is stored, so nothing downstream runs) as fast as --concurrency
clients allow, first in a managed namespace (the webhook mutates each pod) and then in an unmanaged
one, and prints creates per second of each and their ratio (issue 31: >= 0.5), with where a
reviewed create's time goes, and at the end docs/performance.md's table of creates for the run
(bench/pagetables.py):

- the API server's own view of the webhook call (``apiserver_admission_webhook_admission_duration_seconds``,
  mean per call, from its /metrics before and after);
- the webhook's own time per review (``slurm_bridge_webhook_admission_duration_seconds``: from the
  request's body read to the answer built), and its CPU per review (/proc);
- the API server's and the webhook's CPU per create.

    .venv/bin/python bench/admission.py [--pods 1000] [--concurrency 16]

Needs the local cluster and the process bridge (hack/cluster.sh up && hack/bridge.sh up).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
import sysstats
from clusterenv import cluster_env
from pipeline_latency import delete_and_wait, make_namespace, pod_body


def creates(core: k8s.CoreV1Api, ns: str, n: int, concurrency: int) -> float:
    """Dry-run creates as fast as ``concurrency`` clients go; the seconds they took."""

    def create(i: int) -> None:
        resp = core.create_namespaced_pod(ns, pod_body(f"a{i:05d}"), dry_run="All", _preload_content=False)
        resp.read()
        resp.release_conn()

    began = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, range(n)))
    return time.monotonic() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    core = k8s.CoreV1Api(api)
    state = Path(env["SB_STATE_DIR"])
    port = (state / "bridge-webhook.port").read_text().strip()
    cafile = str(state / "bridge" / "tls" / "ca.crt")
    pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    suffix = f"{int(time.time() * 10) % 1000000}"
    rows: dict[str, Any] = {"pods": args.pods, **pagetables.stamp()}
    for label, managed in (("through the webhook", True), ("without it", False)):
        ns = f"bench-admit-{'m' if managed else 'u'}-{suffix}"
        make_namespace(core, ns, managed=managed)
        try:
            creates(core, ns, min(50, args.pods), args.concurrency)  # warm: connections, caches
            calls0, reviews0 = sysstats.api_requests(api), sysstats.webhook_reviews(port, cafile)
            with sysstats.ProcSampler(pids) as procs:
                seconds = creates(core, ns, args.pods, args.concurrency)
            calls, reviews = sysstats.api_requests(api), sysstats.webhook_reviews(port, cafile)
        finally:
            delete_and_wait(core, ns, 120)
        row = procs.row()
        cpu = sysstats.cpu_ms_per_pod(row, args.pods)
        rows[label] = {
            "creates_per_s": round(args.pods / seconds, 1),
            "api_server_ms_per_webhook_call": {
                k.rsplit(" ", 1)[0]: ms for k, ms in sysstats.admission_ms_per_call(calls0, calls).items()
            },
            "webhook_ms_per_review": sysstats.review_ms(reviews0, reviews),
            "cpu_ms_per_create": {
                k: cpu[k] for k in ("kube-apiserver", "bridge-webhook", sysstats.MACHINE) if k in cpu
            },
            "machine_busy_percent": row["machine_busy_percent"],
        }
    through, without = rows["through the webhook"], rows["without it"]
    rows["ratio"] = round(through["creates_per_s"] / without["creates_per_s"], 2)
    # docs/performance.md's table for this run (bench/summarize.py: the same over several runs)
    table = "\n" + "\n".join(pagetables.creates_table([rows], []))
    if args.json:
        print(json.dumps(rows, indent=2))
        print(table, file=sys.stderr)
        return
    for label in ("through the webhook", "without it"):
        print(f"{label}: {json.dumps(rows[label])}")
    print(table)
    want = pagetables.TARGETS["webhook_creates_ratio"]
    print(f"targets: creates through the webhook / without it {rows['ratio']} (>= {want:g})", file=sys.stderr)


if __name__ == "__main__":
    main()
