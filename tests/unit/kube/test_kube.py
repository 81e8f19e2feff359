"""Credential loading and small helpers of the async Kubernetes client."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from slurm_bridge import names
from slurm_bridge.core.kubeformats import (
    MAX_LABEL_VALUE_LENGTH,
    MAX_NAME_LENGTH,
    bounded,
    escape_pointer,
    is_dns_label,
    is_dns_subdomain,
    label_value,
)
from slurm_bridge.kube.client import Conflict, Gone, KubeClient, KubeError, NotFound, _load_credentials, object_path
from slurm_bridge.kube.kubeconfig import TokenSource

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


async def test_token_kubeconfig_sends_the_bearer_token(tmp_path: Path) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.path.endswith("/missing"):
            return web.json_response({"reason": "NotFound", "message": "gone"}, status=404)
        if request.method == "POST":
            return web.json_response({"reason": "AlreadyExists", "message": "exists"}, status=409)
        return web.json_response({"ok": True})

    # A fake apiserver on loopback (plain HTTP): this tests the client's own logic only.
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("https://127.0.0.1:6443", f"http://127.0.0.1:{port}"))
    server, tls, token = _load_credentials(str(path))
    assert server == f"http://127.0.0.1:{port}"
    kube = KubeClient(server, tls, token)
    try:
        assert await kube.get("/api/v1/namespaces/default") == {"ok": True}
        assert await kube.get("/api/v1/missing") is None
        with pytest.raises(Conflict) as conflict:
            await kube.create("/api/v1/namespaces/default/pods", {})
        assert conflict.value.reason == "AlreadyExists"
        with pytest.raises(NotFound):
            await kube.request("GET", "/api/v1/missing")
    finally:
        await kube.aclose()
        await runner.cleanup()
    assert seen and all(h == "Bearer secret-token" for h in seen)


def test_json_pointer_escaping() -> None:
    assert escape_pointer(names.ANN_SLURM_NODE) == "slinky.slurm.net~1slurm-node"
    assert escape_pointer("a~b/c") == "a~0b~1c"


def test_object_paths() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "k"}}
    phj = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": {"name": "j", "namespace": "n"}}
    assert object_path(pod) == "/api/v1/namespaces/n/pods/p"
    assert object_path(node) == "/api/v1/nodes/k"
    assert object_path(phj) == f"/apis/{names.API_VERSION}/namespaces/n/placeholderjobs/j"


@pytest.mark.parametrize(
    ("value", "label", "subdomain"),
    [
        ("a", True, True),
        ("0", True, True),
        ("a-0", True, True),
        ("a" * 63, True, True),
        ("a" * 64, False, True),
        ("a" * 253, False, True),
        ("a" * 254, False, False),
        (".".join(["a" * 63] * 3) + "." + "b" * 61, False, True),  # 253 characters, labels of 63
        (".".join(["a" * 63] * 3) + "." + "b" * 62, False, False),  # 254
        ("a.b", False, True),
        ("", False, False),
        ("-a", False, False),
        ("a-", False, False),
        ("a..b", False, False),
        (".a", False, False),
        ("a.", False, False),
        ("a.-b", False, False),
        ("A", False, False),
        ("a_b", False, False),
        ("a\n", False, False),  # '$' would let a trailing newline through
        ("a.b\n", False, False),
    ],
)
def test_dns_label_and_subdomain_at_their_limits(value: str, label: bool, subdomain: bool) -> None:
    assert is_dns_label(value) is label
    assert is_dns_subdomain(value) is subdomain


def test_dns_subdomain_takes_a_tighter_limit() -> None:
    assert is_dns_subdomain("a" * 224, 224)
    assert not is_dns_subdomain("a" * 225, 224)


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize(
    "name",
    [
        "p",
        "a" * 63,
        "a" * 64,
        "a" * 253,
        ("x." * 126) + "y",
        "a" * 52 + "-.-.-.-.-.-.-" + "b" * 100,
        "job-" + "9" * 249,
    ],
)
def test_label_value_keeps_short_names_and_bounds_long_ones(name: str) -> None:
    value = label_value(name)
    assert len(value) <= MAX_LABEL_VALUE_LENGTH and LABEL_VALUE.match(value), value
    assert (value == name) == (len(name) <= MAX_LABEL_VALUE_LENGTH)
    assert label_value(name) == value, "the same name always gives the same value"


def test_long_names_that_share_a_head_get_different_label_values() -> None:
    a, b = "p" * 200 + "-a", "p" * 200 + "-b"
    assert label_value(a) != label_value(b)
    assert bounded(a, MAX_NAME_LENGTH) == a and len(bounded(a + "x" * 60, MAX_NAME_LENGTH)) == MAX_NAME_LENGTH


@contextlib.asynccontextmanager
async def posting_to(handler: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[KubeClient]:
    """A KubeClient whose POSTs ``handler`` answers on a loopback server."""
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = KubeClient(f"http://127.0.0.1:{port}", None, None)
    try:
        yield kube
    finally:
        await kube.aclose()
        await runner.cleanup()


async def test_events_on_an_object_with_a_253_character_name_get_valid_distinct_names() -> None:
    posted: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        posted.append(await request.json())
        return web.json_response({})

    long_name = ("a" * 120) + "." + ("b" * 132)
    assert len(long_name) == 253
    pod = {"kind": "Pod", "metadata": {"name": long_name, "namespace": "ns", "uid": "u"}}
    async with posting_to(handler) as kube:
        for _ in range(3):
            await kube.event(pod, "SlurmJobPending", "waiting")
        await kube.drain_events()
    event_names = [e["metadata"]["name"] for e in posted]
    assert len(set(event_names)) == 3, "each Event has its own name (none collides with the last)"
    assert all(len(n) <= MAX_NAME_LENGTH and DNS_SUBDOMAIN.match(n) for n in event_names), event_names
    assert all(e["involvedObject"]["name"] == long_name for e in posted)


@pytest.mark.parametrize(
    ("message", "level"),
    [
        (
            'events "p.1" is forbidden: unable to create new content in namespace ns because it is being terminated',
            "DEBUG",
        ),
        ('events is forbidden: User "x" cannot create resource "events"', "WARNING"),
    ],
)
async def test_an_event_refused_by_a_terminating_namespace_is_not_a_warning(
    message: str, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleting a namespace of 200 bridge pods logged 200 warnings that told nobody anything; a
    refusal for another reason (RBAC) still warns."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                  "message": message}, status=403)  # fmt: skip

    caplog.set_level("DEBUG", logger="slurm_bridge.kube.client")
    async with posting_to(handler) as kube:
        await kube.event({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}, "PodsDeleted", "x")
        await kube.drain_events()
    records = [r for r in caplog.records if "could not record event PodsDeleted" in r.getMessage()]
    assert [r.levelname for r in records] == [level]


async def test_watch_sends_its_parameters_decodes_lines_across_chunks_and_types_410() -> None:
    """The client's watch on a loopback server: the query (field selector, bookmarks, the
    resourceVersion, the server-side timeout), events split across writes, and a 410 answer."""
    seen: list[dict[str, str]] = []

    class Tokens(TokenSource):
        invalidated = 0

        async def token(self) -> str:
            return "t"

        def invalidate(self) -> None:
            Tokens.invalidated += 1

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.query))
        if request.query["resourceVersion"] == "1":
            return web.json_response({"kind": "Status", "code": 410, "reason": "Expired"}, status=410)
        if request.query["resourceVersion"] == "2":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        resp = web.StreamResponse()
        await resp.prepare(request)
        first = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"11"}}}\n{"type":"BOOK'
        await resp.write(first)
        await resp.write(b'MARK","object":{"metadata":{"resourceVersion":"12"}}}\n\n')
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/api/v1/pods", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kube = KubeClient(f"http://127.0.0.1:{port}", token=Tokens())
    try:
        selector = {"fieldSelector": "spec.schedulerName=slurm-bridge"}
        events = [e async for e in kube.watch("/api/v1/pods", "10", timeout_seconds=60, params=selector)]
        assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
        assert events[1]["object"]["metadata"]["resourceVersion"] == "12"
        assert seen[0] == selector | {"watch": "true", "resourceVersion": "10", "allowWatchBookmarks": "true",
                                      "timeoutSeconds": "60"}  # fmt: skip
        with pytest.raises(Gone):
            [e async for e in kube.watch("/api/v1/pods", "1")]
        with pytest.raises(KubeError) as refused:
            [e async for e in kube.watch("/api/v1/pods", "2")]
        assert refused.value.status == 401 and Tokens.invalidated == 1, "the next attempt fetches a new token"
    finally:
        await kube.aclose()
        await runner.cleanup()
