"""The metrics each component serves, the calls that move them, and the one JSON log format."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import kopf
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from slurm_bridge import names
from slurm_bridge.core import logs, metrics
from slurm_bridge.core.config import Config
from slurm_bridge.extender.main import serve as serve_extender
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.wiring.kopfsetup import build_registry
from slurm_bridge.operator.wiring.watches import HotWatches
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.webhook.certs import write_certs
from slurm_bridge.webhook.server import WebhookServer

Obj = dict[str, Any]


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ---- Slurm REST ------------------------------------------------------------------------------
def slurm_app(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if path.endswith("/ping"):
        return httpx.Response(200, json={"pings": [{"hostname": "c", "pinged": "UP", "responding": True}]})
    if "/job/" in path and request.method == "GET":
        return httpx.Response(404, json={"errors": [{"error": "Invalid job id", "error_number": 2017}]})
    if path.endswith("/job/allocate"):
        return httpx.Response(500, json={"errors": [{"error": "boom", "error_number": 1}]})
    return httpx.Response(200, json={})


async def test_slurm_requests_are_counted_by_endpoint_template_never_by_id(tmp_path: Path) -> None:
    token = tmp_path / "jwt"
    token.write_text("secret-token")
    client = SlurmClient("http://slurmrestd", token, api_version="v0.0.44", retries=0,
                         transport=httpx.MockTransport(slurm_app))  # fmt: skip
    r = metrics.OPERATOR
    before = value(r, "slurm_bridge_slurm_requests_total", method="GET", endpoint="/job/{id}", outcome="not_found")
    hist = value(r, "slurm_bridge_slurm_request_duration_seconds_count", method="GET", endpoint="/job/{id}")
    assert await client.get_job(123456) is None
    assert await client.get_job(654321) is None
    await client.ping()
    after = value(r, "slurm_bridge_slurm_requests_total", method="GET", endpoint="/job/{id}", outcome="not_found")
    assert after - before == 2
    assert value(r, "slurm_bridge_slurm_request_duration_seconds_count", method="GET", endpoint="/job/{id}") - hist == 2
    assert value(r, "slurm_bridge_slurm_requests_total", method="GET", endpoint="/ping", outcome="ok") >= 1
    with pytest.raises(Exception, match="boom"):
        await client.allocate_external_job(JobRequest(nodes=1), name="x", admin_comment="c")
    assert value(r, "slurm_bridge_slurm_requests_total", method="POST", endpoint="/job/allocate",
                 outcome="server_error") >= 1  # fmt: skip
    text = generate_latest(r).decode()
    assert "123456" not in text and "654321" not in text and "v0.0.44" not in text
    await client.aclose()


# ---- operator ---------------------------------------------------------------------------------
def pod(uid: str, *, node: str = "", created: str = "2020-01-01T00:00:00Z", sched: str = "slurm-bridge") -> Obj:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "n", "creationTimestamp": created},
            "spec": {"schedulerName": sched, **({"nodeName": node} if node else {})}}  # fmt: skip


def test_pod_times_observe_allocation_then_bind_once() -> None:
    r = metrics.OPERATOR
    alloc = value(r, "slurm_bridge_pod_allocation_seconds_count")
    bind = value(r, "slurm_bridge_pod_bind_seconds_count")
    events = value(r, "slurm_bridge_watch_events_total", resource="pods")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    metrics.pod_event("ADDED", pod("u1", created=now), "slurm-bridge")
    metrics.pod_event("ADDED", pod("other", sched="default-scheduler"), "slurm-bridge")  # not ours: only counted
    metrics.pod_released(pod("u1", created=now))
    metrics.pod_released(pod("u1", created=now))  # a second release of the same pod is not timed again
    assert value(r, "slurm_bridge_pod_allocation_seconds_count") - alloc == 1
    # Seen within its creation second: timed from when it was seen, so well under a second.
    assert value(r, "slurm_bridge_pod_allocation_seconds_bucket", le="1.0") - value(
        r, "slurm_bridge_pod_allocation_seconds_bucket", le="0.1") >= 0  # fmt: skip
    metrics.pod_event("MODIFIED", pod("u1", created=now), "slurm-bridge")
    assert value(r, "slurm_bridge_pod_bind_seconds_count") == bind  # not bound yet
    metrics.pod_event("MODIFIED", pod("u1", node="n1", created=now), "slurm-bridge")
    metrics.pod_event("MODIFIED", pod("u1", node="n1", created=now), "slurm-bridge")
    assert value(r, "slurm_bridge_pod_bind_seconds_count") - bind == 1
    assert value(r, "slurm_bridge_watch_events_total", resource="pods") - events == 5


def test_a_pod_seen_long_after_creation_is_timed_from_its_creation() -> None:
    r = metrics.OPERATOR
    over = value(r, "slurm_bridge_pod_allocation_seconds_bucket", le="+Inf") - value(
        r, "slurm_bridge_pod_allocation_seconds_bucket", le="86400.0")  # fmt: skip
    metrics.pod_event("ADDED", pod("old"), "slurm-bridge")  # created in 2020, seen now (a restart)
    metrics.pod_released(pod("old"))
    after = value(r, "slurm_bridge_pod_allocation_seconds_bucket", le="+Inf") - value(
        r, "slurm_bridge_pod_allocation_seconds_bucket", le="86400.0")  # fmt: skip
    assert after - over == 1


def test_operator_collector_reads_phases_queues_and_leadership_at_scrape_time() -> None:
    phjs: list[Obj] = [{"status": {"phase": "Running"}}, {"status": {"phase": "Running"}}, {}]
    leader = asyncio.Event()
    registry = CollectorRegistry()
    store, elector = SimpleNamespace(values=lambda: phjs), SimpleNamespace(is_leader=leader)
    registry.register(metrics.OperatorCollector(store, {"controller": [1, 2, 3]}, elector))
    assert value(registry, "slurm_bridge_placeholderjobs", phase="Running") == 2
    assert value(registry, "slurm_bridge_placeholderjobs", phase="New") == 1
    assert registry.get_sample_value("slurm_bridge_placeholderjobs", {"phase": "Failed"}) == 0
    assert value(registry, "slurm_bridge_workqueue_depth", queue="controller") == 3
    assert value(registry, "slurm_bridge_leader") == 0
    leader.set()
    phjs.append({"status": {"phase": "Pending"}})
    assert value(registry, "slurm_bridge_leader") == 1
    assert value(registry, "slurm_bridge_placeholderjobs", phase="Pending") == 1


async def test_reconciles_and_their_errors_are_counted_by_kind() -> None:
    class Handler:
        @metrics.reconciled
        @logs.work_item
        async def handle(self, item: Any) -> float | None:
            logging.getLogger("t").info("working")
            if item.name == "bad":
                raise RuntimeError("nope")
            return None

    r = metrics.OPERATOR
    runs, errors = value(r, "slurm_bridge_reconciles_total", kind="phj"), value(
        r, "slurm_bridge_reconcile_errors_total", kind="phj")  # fmt: skip
    await Handler().handle(PhjItem("ns", "good"))
    with pytest.raises(RuntimeError):
        await Handler().handle(PhjItem("ns", "bad"))
    assert value(r, "slurm_bridge_reconciles_total", kind="phj") - runs == 2
    assert value(r, "slurm_bridge_reconcile_errors_total", kind="phj") - errors == 1
    assert logs.context() == {}  # the item's fields end with its reconcile


async def test_a_reconciles_lines_name_its_object_and_only_an_objects() -> None:
    """The item's kind, namespace and name are the fields of its reconcile's lines; an item that
    names no object (a node work item's string) adds none. Decided once per item type."""
    seen: list[dict[str, Any]] = []

    class Handler:
        @logs.work_item
        async def handle(self, item: Any) -> None:
            seen.append(logs.context())

    for _ in range(2):
        await Handler().handle(PhjItem("ns", "a"))
        await Handler().handle("node-1")
    named = [{k: c.get(k) for k in ("kind", "namespace", "name")} for c in seen]
    assert (
        named == [{"kind": "phj", "namespace": "ns", "name": "a"}, {"kind": None, "namespace": None, "name": None}] * 2
    )
    assert logs.context() == {}


async def test_the_pod_watch_asks_the_api_server_for_the_bridges_pods_only() -> None:
    """Unmanaged pods are filtered server-side (a field selector the operator's pod informer sends
    with its list and every watch), so they cost the operator nothing (bench/log)."""
    ctrl: Any = SimpleNamespace(config=Config(schedulerName="my-bridge"), on_pod_event=print, on_phj_event=print,
                                pods=ObjectStore(), phjs=ObjectStore())  # fmt: skip
    watches = HotWatches(KubeClient("http://127.0.0.1:0"), ctrl)
    assert watches.pods.params == {"fieldSelector": "spec.schedulerName=my-bridge"}
    assert watches.phjs.params == {}
    assert watches.pods.page == watches.phjs.page == 500, "lists in pages: one page held, not the whole list"
    # kopf watches only the nodes now, listed in pages as well
    registry = build_registry(SimpleNamespace())  # type: ignore[arg-type]
    settings = kopf.OperatorSettings()
    for handler in registry._activities.get_all_handlers():
        if handler.id.endswith(".configure"):
            configure: Any = handler.fn
            await configure(settings=settings)
    assert settings.watching.chunk_size == 500
    watched = {h.selector.any_name for h in registry._watching.get_all_handlers() if h.selector is not None}
    assert watched == {"nodes"}, "pods and PlaceholderJobs are the operator's own watches"


# ---- webhook and extender ---------------------------------------------------------------------
def review(operation: str = "CREATE") -> Obj:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "slurm"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "slurm", "name": "p",
        "operation": operation, "userInfo": {"username": "alice"}, "object": obj}}  # fmt: skip


async def test_webhook_serves_admissions_by_operation_and_result(tmp_path: Path) -> None:
    write_certs(tmp_path, ["127.0.0.1"])
    cfg = Config(managedNamespaces=["slurm"], trustedUsers=["bridge"], webhookCertFile=tmp_path / "tls.crt",
                 webhookKeyFile=tmp_path / "tls.key")  # fmt: skip
    srv = WebhookServer(cfg, listen="127.0.0.1:0")
    await srv.start()
    try:
        async with httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=tmp_path / "ca.crt"), timeout=5
        ) as client:
            base = f"https://127.0.0.1:{srv.port}"

            async def scrape() -> dict[tuple[str, ...], float]:
                text = (await client.get(base + "/metrics")).text
                return {(s.name, *sorted(s.labels.values())): s.value
                        for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip

            before = await scrape()
            assert (await client.post(base + "/mutate", json=review())).status_code == 200
            assert (await client.post(base + "/validate", json=review())).status_code == 200
            assert (await client.post(base + "/mutate", content=b"{nope")).status_code == 400
            after = await scrape()
        key = ("slurm_bridge_webhook_admissions_total", "CREATE", "allowed", "mutate")
        assert after[key] - before.get(key, 0) == 1
        key = ("slurm_bridge_webhook_admissions_total", "CREATE", "allowed", "validate")
        assert after[key] - before.get(key, 0) == 1
        key = ("slurm_bridge_webhook_admissions_total", "UNKNOWN", "error", "mutate")
        assert after[key] - before.get(key, 0) == 1
        count = ("slurm_bridge_webhook_admission_duration_seconds_count", "CREATE", "mutate")
        assert after[count] - before.get(count, 0) == 1
        assert ("process_resident_memory_bytes",) in after
        assert not any(k[0].startswith("slurm_bridge_slurm_") for k in after)  # the operator's, not here
    finally:
        await srv.stop()


async def test_extender_serves_metrics_on_its_health_listener_only(tmp_path: Path) -> None:
    main_port, health_port = free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    listen, health = f"127.0.0.1:{main_port}", f"127.0.0.1:{health_port}"
    cfg = Config(managedNamespaces=["n"], extenderListen=listen, extenderHealthListen=health)
    task = asyncio.create_task(serve_extender(cfg, str(kubeconfig)))
    r = metrics.EXTENDER
    filters = value(r, "slurm_bridge_extender_requests_total", verb="filter", result="passed")
    binds = value(r, "slurm_bridge_extender_requests_total", verb="bind", result="error")
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            for _ in range(100):
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"http://127.0.0.1:{health_port}/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
            pod = {"metadata": {"name": "p", "namespace": "n", "annotations": {names.ANN_SLURM_NODE: "a"}}}
            r1 = await client.post(f"http://127.0.0.1:{main_port}/filter", json={"Pod": pod, "NodeNames": ["a", "b"]})
            assert r1.json()["NodeNames"] == ["a"]
            bind = {"PodName": "p", "PodNamespace": "n", "PodUID": "u", "Node": "a"}
            assert (await client.post(f"http://127.0.0.1:{main_port}/bind", json=bind)).json()["Error"]
            text = (await client.get(f"http://127.0.0.1:{health_port}/metrics")).text
            assert (await client.get(f"http://127.0.0.1:{main_port}/metrics")).status_code == 404
        assert 'slurm_bridge_extender_requests_total{result="passed",verb="filter"}' in text
        assert value(r, "slurm_bridge_extender_requests_total", verb="filter", result="passed") - filters == 1
        assert value(r, "slurm_bridge_extender_requests_total", verb="bind", result="error") - binds == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# ---- logs ---------------------------------------------------------------------------------------
@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    buf = io.StringIO()
    logs.setup_logging("DEBUG", "json")
    root.handlers[0].setStream(buf)  # type: ignore[attr-defined]
    yield buf
    root.handlers[:], _ = saved
    root.setLevel(saved[1])


def lines(buf: io.StringIO) -> list[Obj]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


async def test_one_json_format_with_the_objects_fields_from_context(captured: io.StringIO) -> None:
    log = logging.getLogger("slurm_bridge.test")
    log.info("no object")

    async def reconcile() -> None:
        logs.bind(namespace="ns", name="p")
        log.info("about the pod")
        logs.bind(jobId=42)
        try:
            raise ValueError("bad value")
        except ValueError:
            log.exception("failed", extra={"fields": {"endpoint": "mutate"}})

    await asyncio.create_task(reconcile())
    log.warning("after")  # the task's context did not leak out
    first, pod_line, error, after = [line for line in lines(captured) if line["logger"] == "slurm_bridge.test"]
    assert set(first) == {"ts", "level", "logger", "msg"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert (first["level"], first["logger"], first["msg"]) == ("info", "slurm_bridge.test", "no object")
    assert {k: pod_line[k] for k in ("namespace", "name", "jobId")} == {"namespace": "ns", "name": "p", "jobId": None}
    assert error["jobId"] == 42 and error["level"] == "error" and error["endpoint"] == "mutate"
    assert error["error"] == "ValueError: bad value" and "Traceback" in error["traceback"]
    assert "namespace" not in after


def test_text_format_carries_the_same_fields(captured: io.StringIO) -> None:
    logs.setup_logging("INFO", "text")
    buf = io.StringIO()
    logging.getLogger().handlers[0].setStream(buf)  # type: ignore[attr-defined]
    with logs.scope(namespace="ns", name="p", jobId=7):
        logging.getLogger("t").info("hello")
    assert buf.getvalue().rstrip().endswith("t: hello namespace=ns name=p jobId=7")


def test_every_component_takes_log_level_and_format() -> None:
    from slurm_bridge.webhook.main import _parser

    args = _parser().parse_args(["--log-level", "debug", "--log-format", "text", "serve"])
    assert (args.log_level, args.log_format) == ("DEBUG", "text")


async def test_each_request_starts_without_the_previous_requests_fields() -> None:
    """A kept-alive connection serves many requests in one task: the webhook's and extender's
    middleware gives each request an empty context and restores the caller's afterwards."""
    from aiohttp import web

    seen: list[Obj] = []

    async def handler(_: Any) -> web.StreamResponse:
        seen.append(logs.context())
        logs.bind(namespace="second", name="q")
        return web.Response()

    with logs.scope(namespace="first", name="p"):
        await logs.request_scope(None, handler)  # type: ignore[arg-type]
        assert logs.context()["namespace"] == "first"
    assert seen == [{}]
