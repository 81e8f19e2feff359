"""The bridge's metrics as a real Prometheus server sees them (hack/prometheus.sh scrapes the
process bridge every second), around a real pipeline run: the counters and histograms move by
exactly what the run did."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from slurm_bridge.webhook import podpolicy
from tests.e2e.util import make_pod, read_pod
from tests.harness import REPO, PrerequisiteMissing, cluster_minor, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
PROMETHEUS_SH = REPO / "hack" / "prometheus.sh"
N = 3


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, object]]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        result: list[dict[str, object]] = body["data"]["result"]
        return result

    def value(self, expr: str) -> float:
        """A scalar PromQL expression's value; an empty result (no series yet) is 0."""
        result = self.query(f"sum({expr}) or vector(0)")
        return float(result[0]["value"][1])  # type: ignore[index]

    def fresh(self) -> None:
        """Wait until every target was scraped after now, so what follows reads current values."""
        since = time.time()

        def scraped() -> bool:
            r = httpx.get(f"{self.url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
            jobs = {t["labels"]["job"] for t in r if t["health"] == "up" and _ts(t["lastScrape"]) > since}
            return jobs >= {"slurm-bridge-operator", "slurm-bridge-webhook", "slurm-bridge-extender"}

        wait_for(scraped, 30, "a scrape of every bridge component after now")


def _ts(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")[:26] + "+00:00").timestamp()


@pytest.fixture(scope="module")
def prometheus(bridge: dict[str, str]) -> Iterator[Prometheus]:
    proc = run(["bash", str(PROMETHEUS_SH), "up"], check=False, timeout=600)
    if proc.returncode != 0:
        raise PrerequisiteMissing(f"`hack/prometheus.sh up` failed:\n{proc.stderr[-3000:]}")
    prom = Prometheus(run(["bash", str(PROMETHEUS_SH), "url"]).stdout.strip())
    try:
        wait_for(lambda: prom.value('up{job=~"slurm-bridge-.*"}') == 3, 60, "Prometheus scraping all 3 components")
        yield prom
    finally:
        run(["bash", str(PROMETHEUS_SH), "down"], check=False)


COUNTERS = {
    "submitted": "slurm_bridge_slurm_jobs_submitted_total",
    "immediate": "slurm_bridge_slurm_jobs_allocated_immediately_total",
    "queued": "slurm_bridge_slurm_jobs_queued_total",
    "cancelled": "slurm_bridge_slurm_jobs_cancelled_total",
    "allocation": "slurm_bridge_pod_allocation_seconds_count",
    "bind_seen": "slurm_bridge_pod_bind_seconds_count",
    "mutate": 'slurm_bridge_webhook_admissions_total{endpoint="mutate",operation="CREATE",result="allowed"}',
    "validate": 'slurm_bridge_webhook_admissions_total{endpoint="validate",operation="CREATE",result="allowed"}',
    "admission_latency": 'slurm_bridge_webhook_admission_duration_seconds_count{endpoint="mutate"}',
    "binds": 'slurm_bridge_extender_requests_total{verb="bind",result="bound"}',
    "filters": 'slurm_bridge_extender_requests_total{verb="filter",result="passed"}',
    "bind_latency": 'slurm_bridge_extender_request_duration_seconds_count{verb="bind"}',
    "allocate_calls": 'slurm_bridge_slurm_requests_total{endpoint="/job/allocate"}',
    "allocate_latency": 'slurm_bridge_slurm_request_duration_seconds_count{endpoint="/job/allocate"}',
    "pod_reconciles": 'slurm_bridge_reconciles_total{kind="pod"}',
    "reconcile_errors": "slurm_bridge_reconcile_errors_total",
}


def test_a_pipeline_run_moves_the_counters_by_what_it_did(prometheus: Prometheus, core: k8s.CoreV1Api, ns: str) -> None:
    prometheus.fresh()
    before = {k: prometheus.value(expr) for k, expr in COUNTERS.items()}
    # The last pod carries a slurmjob annotation: only its create has something for the validating
    # webhook to check (webhook/render.py, PLAIN_POD_CREATE_CHECK); the plain ones skip that call.
    for i in range(N):
        annotations = {names.ANN_TIMELIMIT: "30"} if i == N - 1 else None
        core.create_namespaced_pod(ns, make_pod(f"m-{i}", annotations=annotations))

    def all_running() -> bool:
        pods = [read_pod(core, ns, f"m-{i}") for i in range(N)]
        return all(p is not None and p.status.phase == "Running" for p in pods)

    wait_for(all_running, 90, f"{N} managed pods Running")

    def moved(key: str) -> float:
        return prometheus.value(COUNTERS[key]) - before[key]

    # Exact: one Slurm job, one allocation and one bind per pod. Each component is scraped on its
    # own (every second), so each expectation is waited for.
    def expect(what: str, check: Callable[[], bool]) -> None:
        wait_for(check, 20, what)

    expect(f"{N} binds seen by the operator", lambda: moved("bind_seen") == N)
    expect(f"{N} Slurm jobs submitted", lambda: moved("submitted") == N)
    expect(f"{N} jobs allocated at once or queued", lambda: moved("immediate") + moved("queued") == N)
    expect(f"{N} pod allocations timed", lambda: moved("allocation") == N)
    expect(f"{N} extender binds", lambda: moved("binds") == N and moved("bind_latency") == N)
    expect(f">= {N} filters passed", lambda: moved("filters") >= N)
    if cluster_minor() >= podpolicy.FIRST_MINOR:
        # Plain pods: the pod policy hands them to the bridge in the API server (webhook/podpolicy.py).
        none = "no mutating admission (the pod policy's pods)"
        expect(none, lambda: moved("mutate") == moved("admission_latency") == 0)
    else:
        expect(f">= {N} mutating admissions", lambda: min(moved("mutate"), moved("admission_latency")) >= N)
    expect("one validating admission (the annotated pod's)", lambda: moved("validate") == 1)
    expect(
        "an allocate request per immediate allocation at least", lambda: moved("allocate_calls") >= moved("immediate")
    )
    expect("every allocate request timed", lambda: moved("allocate_latency") == moved("allocate_calls"))
    expect(f">= {N} pod reconciles", lambda: moved("pod_reconciles") >= N)
    assert moved("reconcile_errors") == 0
    running = 'slurm_bridge_placeholderjobs{phase="Running"} * on(instance) slurm_bridge_leader'
    expect(f">= {N} PlaceholderJobs Running on the leader", lambda: prometheus.value(running) >= N)
    assert prometheus.value("slurm_bridge_leader") == 1
    # Allocation and bind latencies of these pods: immediate allocations take well under a minute.
    p99 = prometheus.query("histogram_quantile(0.99, sum by (le) (slurm_bridge_pod_allocation_seconds_bucket))")
    assert p99 and float(p99[0]["value"][1]) < 60  # type: ignore[index]
    # Endpoints are templates: no series names a job id.
    assert not prometheus.query('slurm_bridge_slurm_requests_total{endpoint=~".*/[0-9]+.*"}')

    # Kubernetes -> Slurm: deleting the pods cancels their jobs, counted once each.
    core.delete_collection_namespaced_pod(ns)
    wait_for(lambda: moved("cancelled") == N, 60, f"{N} Slurm jobs counted as cancelled")
