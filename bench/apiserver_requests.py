"""kube-apiserver's and etcd's CPU per request, by the kinds of write a bridge pod adds.

A bridge pod costs the API server three writes a default scheduler's pod does not (its
PlaceholderJob's create and status, the pod's release), each with its watch events, and its create
goes through the bridge's pod policy (a MutatingAdmissionPolicy) where a default pod's does not.
This measures each such request's cost to the API server on the local cluster, beside a ConfigMap's
of the same shape (a built-in type stored as protobuf), in alternating blocks:

- create, merge-patch status and JSON-patch metadata, delete: a PlaceholderJob (a custom resource:
  JSON, its schema's validation, its CEL rules) against a ConfigMap;
- a gated pod's create in a namespace the bridge manages (through its pod policy) against one it
  does not, and a JSON patch of the pod (the release's kind of write).

Each block sends ``--requests`` requests, 8 at a time, and reads kube-apiserver's and etcd's CPU
(``/proc``) before and after, less the idle rate measured first. The watchers are the cluster's
own (the scheduler, the controller manager, kwok, the add-ons, the bridge's webhook and extender):
the bridge's operator must be stopped (it would allocate a Slurm job for each PlaceholderJob), and
the script refuses to run while it is up.

    bash hack/bridge.sh stop operator
    .venv/bin/python bench/apiserver_requests.py [--requests 300] [--reps 3] [--json]
    bash hack/bridge.sh start operator

Prints, per request kind, kube-apiserver's CPU ms per request as min - max (median) over the
blocks, and etcd's median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sysstats  # bench/ is not a package
from clusterenv import cluster_env

from slurm_bridge import names
from slurm_bridge.kube.client import KubeClient, phj_path, resource_path

UNMANAGED, MANAGED = "sb-bench-apireq", "sb-bench-apireq-managed"
CONCURRENCY = 8
Send = Callable[[int], Awaitable[Any]]


def phj(i: int, partition: str) -> dict[str, Any]:
    """A PlaceholderJob as the operator makes a bare pod's (no owner: the pod does not exist)."""
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": names.KIND,
        "metadata": {"name": f"j-{i}", "labels": {"app.kubernetes.io/managed-by": "slurm-bridge"},
                     "finalizers": [names.FINALIZER_PLACEHOLDER_JOB]},
        "spec": {"pods": [f"p-{i}"], "minMember": 1,
                 "slurm": {"partition": partition, "nodes": 1, "tasksPerNode": 1, "cpusPerTask": 1}},
    }  # fmt: skip


def configmap(i: int) -> dict[str, Any]:
    """A ConfigMap of about a PlaceholderJob's size."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c-{i}"}, "data": {"x": "y" * 600}}


def pod(i: int) -> dict[str, Any]:
    """A pod that no scheduler places: gated, as the bridge's pods wait for Slurm."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{i}"},
        "spec": {"schedulingGates": [{"name": "bench/hold"}],
                 "containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    }  # fmt: skip


STATUS = {"status": {"jobId": 1, "slurmState": "RUNNING", "phase": "Running", "nodeList": "kwok-node-0"}}


def annotate(value: str) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/metadata/annotations", "value": {"bench": value}}]


class Meter:
    """kube-apiserver's and etcd's CPU over a block, less their idle rate."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.idle = dict.fromkeys(pids, 0.0)

    def read(self) -> dict[str, float]:
        return {n: sysstats.cpu_seconds(p) for n, p in self.pids.items()}

    async def measure_idle(self, seconds: float) -> None:
        before, t0 = self.read(), time.monotonic()
        await asyncio.sleep(seconds)
        after, dt = self.read(), time.monotonic() - t0
        self.idle = {n: (after[n] - before[n]) / dt for n in self.pids}

    async def block(self, send: Send, n: int) -> dict[str, float]:
        """CPU ms per request over ``n`` requests, CONCURRENCY at a time."""
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> None:
            async with gate:
                await send(i)

        before, t0 = self.read(), time.monotonic()
        await asyncio.gather(*(one(i) for i in range(n)))
        after, dt = self.read(), time.monotonic() - t0
        return {k: round(1000 * (after[k] - before[k] - self.idle[k] * dt) / n, 3) for k in self.pids}


async def gone(kube: KubeClient, path: str, prefix: str) -> None:
    """Wait until the collection at ``path`` has no object named ``prefix``... (pods' deletes and
    finalized objects take a moment; a namespace's own ConfigMap stays)."""
    for _ in range(120):
        listed = await kube.get(path)
        if listed is not None and not any(o["metadata"]["name"].startswith(prefix) for o in listed["items"]):
            return
        await asyncio.sleep(0.5)
    raise SystemExit(f"{path} still has objects after 60 s: delete the namespaces {UNMANAGED}, {MANAGED}")


def cluster_pids() -> tuple[dict[str, str], dict[str, int]]:
    """The local cluster's environment and pids; refuses while the bridge's operator runs."""
    env = cluster_env()
    pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES)
    if "bridge-operator" in pids and Path(f"/proc/{pids['bridge-operator']}").exists():
        raise SystemExit(
            "the bridge's operator is running: it would allocate a Slurm job for each "
            "PlaceholderJob this makes. Stop it first: bash hack/bridge.sh stop operator"
        )
    missing = [n for n in ("kube-apiserver", "etcd") if n not in pids]
    if missing:
        raise SystemExit(f"no pid file for {', '.join(missing)}: is the local cluster up (hack/cluster.sh up)?")
    return env, pids


async def run(args: argparse.Namespace, env: dict[str, str], pids: dict[str, int]) -> dict[str, list[dict[str, float]]]:
    meter = Meter({n: pids[n] for n in ("kube-apiserver", "etcd")})
    kube = KubeClient.from_environment(env["KUBECONFIG"], component="bench")
    namespaces = resource_path("v1", "namespaces", None)
    for ns, labels in ((UNMANAGED, {}), (MANAGED, {env.get("SB_MANAGED_LABEL", "slurm-bridge.local/managed"): "true"})):
        if await kube.get(f"{namespaces}/{ns}") is None:
            await kube.create(namespaces, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": labels}})  # fmt: skip
    cms, phjs = resource_path("v1", "configmaps", UNMANAGED), phj_path(UNMANAGED)
    pods = {ns: resource_path("v1", "pods", ns) for ns in (UNMANAGED, MANAGED)}
    partition = env.get("SB_PARTITION", "slurm-bridge")

    async def unfinalize(i: int) -> None:
        await kube.patch(f"{phjs}/j-{i}", [{"op": "remove", "path": "/metadata/finalizers"}], "json")

    steps: list[tuple[str, Send]] = [
        ("ConfigMap create", lambda i: kube.create(cms, configmap(i))),
        ("ConfigMap JSON patch", lambda i: kube.patch(f"{cms}/c-{i}", annotate("x"), "json")),
        ("ConfigMap delete", lambda i: kube.delete(f"{cms}/c-{i}")),
        ("PlaceholderJob create", lambda i: kube.create(phjs, phj(i, partition))),
        ("PlaceholderJob status merge patch", lambda i: kube.patch(f"{phjs}/j-{i}/status", STATUS)),
        ("PlaceholderJob JSON patch (its finalizer's removal)", unfinalize),
        ("PlaceholderJob delete", lambda i: kube.delete(f"{phjs}/j-{i}")),
        ("pod create, namespace not managed", lambda i: kube.create(pods[UNMANAGED], pod(i))),
        ("pod JSON patch", lambda i: kube.patch(f"{pods[UNMANAGED]}/p-{i}", annotate("x"), "json")),
        ("pod delete", lambda i: kube.delete(f"{pods[UNMANAGED]}/p-{i}", grace_seconds=0)),
        ("pod create, managed (the pod policy)", lambda i: kube.create(pods[MANAGED], pod(i))),
        ("pod delete, managed", lambda i: kube.delete(f"{pods[MANAGED]}/p-{i}", grace_seconds=0)),
    ]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in steps}
    try:
        await meter.measure_idle(args.idle_seconds)
        for rep in range(args.reps + 1):  # the first round warms up (connections, caches) and is not kept
            for name, send in steps:
                got = await meter.block(send, args.requests)
                if rep:
                    results[name].append(got)
            for path, prefix in ((cms, "c-"), (phjs, "j-"), *((p, "p-") for p in pods.values())):
                await gone(kube, path, prefix)
    finally:
        for ns in (UNMANAGED, MANAGED):
            await kube.delete(f"{namespaces}/{ns}")
        await kube.aclose()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300, help="requests per block")
    ap.add_argument("--reps", type=int, default=3, help="blocks per kind, alternating (after one to warm up)")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="how long the idle rate is measured")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    results = asyncio.run(run(args, *cluster_pids()))
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"CPU ms per request ({args.reps} blocks of {args.requests}, {CONCURRENCY} at a time, idle subtracted)")
    for name, blocks in results.items():
        api = [b["kube-apiserver"] for b in blocks]
        etcd = statistics.median(b["etcd"] for b in blocks)
        print(f"  {name:<52} kube-apiserver {min(api):5.2f} - {max(api):5.2f} "
              f"(median {statistics.median(api):5.2f})   etcd {etcd:4.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
