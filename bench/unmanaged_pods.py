"""Benchmark: what pods the bridge does not manage cost its operator (nothing, is the goal).

Creates N pods (5,000 by default) in a namespace the bridge does not manage while the process
bridge runs, lets kwok run them, then deletes the namespace, and prints the operator's CPU time
and RSS (from /proc, by the pid hack/bridge.sh recorded) and its own counters (`/metrics`: pod
watch events received, pod reconciles) in three windows of the same kind: idle, while the pods
are created and run, and while they are deleted. CPU is shown as cores (CPU seconds per wall
second) so windows of different lengths compare.

    .venv/bin/python bench/unmanaged_pods.py [--pods 5000] [--idle-seconds 20] [--json]

Needs the local cluster and the process bridge (`hack/cluster.sh up && hack/bridge.sh up`); run it
through sbrun. The pods are bound straight to the extra kwok node (spec.nodeName), which kwok
runs without a scheduler, so the cluster's own work per pod stays small.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clusterenv import cluster_env  # bench/ is not a package
from sysstats import cpu_seconds, rss_mib


def scrape(url: str) -> dict[str, float]:
    """The operator's samples, keyed like `name{labels}` as the text format writes them."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, val = line.rpartition(" ")
            out[key] = float(val)
    return out


@dataclass
class Window:
    name: str
    seconds: float = 0.0
    cpu_s: float = 0.0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_max_mib: float = 0.0
    pod_events: float = 0.0
    pod_reconciles: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {
            "window": self.name,
            "seconds": round(self.seconds, 1),
            "cpu_cores": round(self.cpu_s / self.seconds, 3) if self.seconds else 0.0,
            "cpu_s": round(self.cpu_s, 2),
            "rss_start_mib": round(self.rss_start_mib, 1),
            "rss_end_mib": round(self.rss_end_mib, 1),
            "rss_max_mib": round(self.rss_max_mib, 1),
            "pod_watch_events": int(self.pod_events),
            "pod_reconciles": int(self.pod_reconciles),
            **self.extra,
        }


class Measure:
    """A window of the operator's CPU time, RSS (sampled every 0.2 s for the peak) and counters."""

    EVENTS = 'slurm_bridge_watch_events_total{resource="pods"}'
    RECONCILES = 'slurm_bridge_reconciles_total{kind="pod"}'

    def __init__(self, name: str, pid: int, url: str) -> None:
        self.w = Window(name)
        self.pid, self.url = pid, url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.w.rss_max_mib = max(self.w.rss_max_mib, rss_mib(self.pid))

    def __enter__(self) -> Window:
        self._m0 = scrape(self.url)
        self._t0, self._c0 = time.monotonic(), cpu_seconds(self.pid)
        self.w.rss_start_mib = self.w.rss_max_mib = rss_mib(self.pid)
        self._thread.start()
        return self.w

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.w.seconds = time.monotonic() - self._t0
        self.w.cpu_s = cpu_seconds(self.pid) - self._c0
        self.w.rss_end_mib = rss_mib(self.pid)
        self.w.rss_max_mib = max(self.w.rss_max_mib, self.w.rss_end_mib)
        m1 = scrape(self.url)
        self.w.pod_events = m1.get(self.EVENTS, 0.0) - self._m0.get(self.EVENTS, 0.0)
        self.w.pod_reconciles = m1.get(self.RECONCILES, 0.0) - self._m0.get(self.RECONCILES, 0.0)


def pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "unmanaged"}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1m"}}}],
        },
    }


def wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1.0)


def running(core: k8s.CoreV1Api, ns: str) -> int:
    pods = core.list_namespaced_pod(ns, label_selector="bench=unmanaged", field_selector="status.phase=Running",
                                    resource_version="0", limit=0)  # fmt: skip
    return len(pods.items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=16, help="parallel pod creates")
    ap.add_argument("--idle-seconds", type=float, default=20, help="length of the idle window")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--operator-port", type=int, default=28080, help="the process bridge's operator port")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()

    env = cluster_env()
    state = Path(env["SB_STATE_DIR"])
    try:
        pid = int((state / "pids" / "bridge-operator.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        raise SystemExit("the bridge operator is not running; run hack/bridge.sh up first") from None
    url = f"http://127.0.0.1:{args.operator_port}"
    try:
        scrape(url)
    except OSError as e:
        raise SystemExit(f"the operator's /metrics at {url} is not reachable ({e})") from None
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    core = k8s.CoreV1Api(api)
    prefix = env.get("SB_EXTRA_NODE_PREFIX", "kwok-plain-")
    node = sorted(n.metadata.name for n in core.list_node().items if n.metadata.name.startswith(prefix))
    if not node:
        raise SystemExit(f"no kwok node named {prefix}* (SB_EXTRA_NODES of hack/cluster.sh)")
    ns = f"bench-unmanaged-{secrets.token_hex(3)}"

    windows: list[Window] = []
    with Measure("idle", pid, url) as w:
        time.sleep(args.idle_seconds)
    windows.append(w)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    wait("the default ServiceAccount", lambda: core.list_namespaced_service_account(ns).items, 60)
    try:
        with Measure(f"create+run {args.pods}", pid, url) as w:
            with ThreadPoolExecutor(args.concurrency) as pool:
                list(pool.map(lambda i: core.create_namespaced_pod(ns, pod(f"p-{i}", node[0])), range(args.pods)))
            wait(f"{args.pods} pods Running", lambda: running(core, ns) >= args.pods, args.timeout)
            time.sleep(5)  # the last status events reach every watcher
        windows.append(w)
    finally:
        with Measure(f"delete {args.pods}", pid, url) as w:
            core.delete_namespace(ns)

            def gone() -> bool:
                try:
                    core.read_namespace(ns)
                    return False
                except k8s.exceptions.ApiException as e:
                    return bool(e.status == 404)

            wait(f"namespace {ns} deleted", gone, args.timeout)
            time.sleep(5)
        windows.append(w)

    rows = [w.row() for w in windows]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    cols = ["window", "seconds", "cpu_cores", "cpu_s", "rss_start_mib", "rss_max_mib", "rss_end_mib",
            "pod_watch_events", "pod_reconciles"]  # fmt: skip
    print("  ".join(f"{c:>16}" for c in cols))
    for r in rows:
        print("  ".join(f"{r.get(c, '-')!s:>16}" for c in cols))


if __name__ == "__main__":
    main()
