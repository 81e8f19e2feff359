"""The chart-installed bridge's CPU and memory, per component, from the real node's kubelet.

Reads the kubelet's summary API through the API server (`/api/v1/nodes/NODE/proxy/stats/summary`:
cAdvisor's per-container CPU rate and working set) about once a second. Standalone it measures the
idle bridge; `pipeline_latency.py --deployed` samples it around each run.

    .venv/bin/python bench/bridge_resources.py [--seconds 60]

Needs the local cluster and the bridge installed with `hack/deploy.sh install`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclass
class Usage:
    """Samples of one component (all its pods and containers summed): CPU in cores, memory in bytes."""

    cpu: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        if not self.cpu:
            return {"samples": 0}
        return {
            "samples": len(self.cpu),
            "cpu_mean_millicores": round(statistics.fmean(self.cpu) * 1000),
            "cpu_max_millicores": round(max(self.cpu) * 1000),
            "memory_max_mib": round(max(self.memory) / 2**20, 1),
        }


def summary(api: k8s.ApiClient, node: str) -> dict[str, Any]:
    reply = k8s.CoreV1Api(api).connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
    data: dict[str, Any] = json.loads(reply.data)
    return data


class Sampler:
    """Samples the release's pods on the real node in a thread until ``stop``."""

    def __init__(self, api: k8s.ApiClient, node: str, namespace: str, period: float = 1.0) -> None:
        self.api, self.node, self.namespace, self.period = api, node, namespace, period
        self.components = self._components()
        self.usage: dict[str, Usage] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _components(self) -> dict[str, str]:
        pods = k8s.CoreV1Api(self.api).list_namespaced_pod(self.namespace).items
        return {p.metadata.name: (p.metadata.labels or {}).get(COMPONENT_LABEL, "?") for p in pods}

    def sample(self) -> None:
        totals: dict[str, tuple[float, int]] = {}
        for pod in summary(self.api, self.node).get("pods", []):
            ref = pod["podRef"]
            if ref["namespace"] != self.namespace:
                continue
            component = self.components.get(ref["name"])
            if component is None:  # a pod started since: learn its component
                self.components = self._components()
                component = self.components.get(ref["name"], "?")
            cpu, mem = totals.get(component, (0.0, 0))
            for c in pod.get("containers", []):
                cpu += (c.get("cpu", {}).get("usageNanoCores") or 0) / 1e9
                mem += c.get("memory", {}).get("workingSetBytes") or 0
            totals[component] = (cpu, mem)
        for component, (cpu, mem) in totals.items():
            u = self.usage.setdefault(component, Usage())
            u.cpu.append(cpu)
            u.memory.append(mem)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as e:  # a missed sample is not a reason to stop measuring
                print(f"bridge_resources: sample failed: {e}")
            self._stop.wait(self.period)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def rows(self) -> dict[str, dict[str, Any]]:
        return {c: u.row() for c, u in sorted(self.usage.items())}


def print_rows(title: str, rows: dict[str, dict[str, Any]]) -> None:
    print(title)
    print(f"  {'component':>10}  {'samples':>7}  {'cpu mean (m)':>12}  {'cpu max (m)':>11}  {'memory max (MiB)':>16}")
    for c, r in rows.items():
        print(f"  {c:>10}  {r['samples']:>7}  {r.get('cpu_mean_millicores', '-')!s:>12}  "
              f"{r.get('cpu_max_millicores', '-')!s:>11}  {r.get('memory_max_mib', '-')!s:>16}")  # fmt: skip


def main() -> None:
    from clusterenv import cluster_env, deploy_env  # the bench's own helpers (bench/ is not a package)
    from kubernetes import config as k8s_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60, help="how long to sample (default: %(default)s)")
    args = ap.parse_args()
    env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    with Sampler(api, env["SB_REAL_NODE"], deploy_env()["RELEASE_NAMESPACE"]) as sampler:
        time.sleep(args.seconds)  # the measurement window, not a wait for a condition
    print_rows(f"idle, {args.seconds:g} s", sampler.rows())


if __name__ == "__main__":
    main()
