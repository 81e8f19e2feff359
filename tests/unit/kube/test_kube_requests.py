"""KubeClient's requests over the bridge's HTTP/1.1 exchange, against scripted servers on 127.0.0.1
(real sockets): the exact request sent, kept-alive connections, and what a failure leaves."""

from __future__ import annotations

import asyncio
import json

import pytest

from slurm_bridge.core import http1
from slurm_bridge.kube.client import FAILED, KubeClient, NotFound, _origin, _target
from tests.unit.scriptedhttp import Answer, Server, keep, reply, serving


class Token:
    async def token(self) -> str:
        return "t0k"

    def invalidate(self) -> None:
        pass


def ok(obj: object) -> bytes:
    return reply(200, json.dumps(obj).encode())


async def test_a_patch_is_one_exact_request_on_one_kept_connection() -> None:
    async with serving(keep(ok({"kind": "Pod"}))) as srv:
        port = srv.url.rsplit(":", 1)[1]
        kube = KubeClient(srv.url, token=Token(), component="slurm-bridge-operator")  # type: ignore[arg-type]
        try:
            for _ in range(3):
                assert await kube.patch("/api/v1/namespaces/ns/pods/p", {"a": 1}) == {"kind": "Pod"}
        finally:
            await kube.aclose()
    assert srv.connections == 1, "the kept-alive connection carried every request"
    assert srv.requests[0] == (
        b"PATCH /api/v1/namespaces/ns/pods/p HTTP/1.1\r\n"
        b"Host: 127.0.0.1:" + port.encode() + b"\r\n"
        b"User-Agent: slurm-bridge-operator/0.1\r\n"
        b"Content-Type: application/merge-patch+json\r\n"
        b"Authorization: Bearer t0k\r\n"
        b"Content-Length: 7\r\n\r\n"
        b'{"a":1}'
    )
    assert kube.writes == {"PATCH pods": 3}


async def test_query_parameters_and_the_servers_path_prefix() -> None:
    async with serving(keep(ok({"items": []}))) as srv:
        kube = KubeClient(srv.url + "/k8s/clusters/c-1/")
        try:
            await kube.get("/api/v1/pods", {"labelSelector": "a=b,c!=d", "fieldSelector": "spec.nodeName=n 1"})
        finally:
            await kube.aclose()
    line = srv.requests[0].split(b"\r\n", 1)[0]
    assert line == (
        b"GET /k8s/clusters/c-1/api/v1/pods?labelSelector=a%3Db%2Cc%21%3Dd&fieldSelector=spec.nodeName%3Dn%201 HTTP/1.1"
    )


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/api/v1/namespaces/a b/pods", "/api/v1/namespaces/a%20b/pods"),
        ("/api/v1/pods/x\r\nEvil: 1", "/api/v1/pods/x%0D%0AEvil:%201"),
        ("/api/v1/pods/caf\u00e9", "/api/v1/pods/caf%C3%A9"),
        ("/apis/x/v1/thing:sub?dryRun=All", "/apis/x/v1/thing:sub?dryRun=All"),
        ("/api/v1/pods/already%2Fquoted", "/api/v1/pods/already%2Fquoted"),
    ],
)
def test_a_path_can_never_end_the_request_line(path: str, target: str) -> None:
    assert _target(path, None) == target


@pytest.mark.parametrize(
    ("server", "origin", "host", "prefix"),
    [
        ("https://10.96.0.1:443", ("https", "10.96.0.1", 443), "10.96.0.1", ""),
        ("https://kubernetes.default.svc", ("https", "kubernetes.default.svc", 443), "kubernetes.default.svc", ""),
        ("https://127.0.0.1:6443", ("https", "127.0.0.1", 6443), "127.0.0.1:6443", ""),
        ("http://[::1]:8080/prefix", ("http", "::1", 8080), "[::1]:8080", "/prefix"),
    ],
)
def test_where_a_request_goes(server: str, origin: tuple[str, str, int], host: str, prefix: str) -> None:
    assert _origin(server) == (origin, host, prefix)


def test_an_address_that_is_not_http_is_refused_with_its_reason() -> None:
    with pytest.raises(ValueError, match="not an http"):
        KubeClient("unix:///var/run/k8s.sock")


async def test_a_chunked_answer_and_an_error_status() -> None:
    body = json.dumps({"kind": "Status", "reason": "NotFound", "message": 'pods "p" not found'}).encode()
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    async with serving(keep(chunked)) as srv:
        kube = KubeClient(srv.url)
        try:
            assert await kube.get("/api/v1/namespaces/ns/pods/p") is None
            with pytest.raises(NotFound, match='pods "p" not found'):
                await kube.patch("/api/v1/namespaces/ns/pods/p", {})
        finally:
            await kube.aclose()
    assert srv.connections == 1


async def test_no_answer_in_time_is_a_timeout_and_the_connection_is_not_used_again() -> None:
    answers = 0

    async def slow_first(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        nonlocal answers
        answers += 1
        if answers == 1:
            await asyncio.sleep(2)  # past the client's timeout: its answer must never be read as the next one's
        w.write(ok({"n": answers}))
        await w.drain()
        return True

    async with serving(slow_first) as srv:
        kube = KubeClient(srv.url, timeout=0.2)
        try:
            with pytest.raises(TimeoutError):
                await kube.get("/x")
            assert await kube.get("/x") == {"n": 2}
        finally:
            await kube.aclose()
    assert srv.connections == 2


async def test_a_request_cancelled_midway_leaves_no_connection_to_reuse() -> None:
    arrived = asyncio.Event()

    async def hold(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        arrived.set()
        await asyncio.sleep(5)
        return False

    async with serving(hold) as srv:
        kube = KubeClient(srv.url)
        try:
            task = asyncio.create_task(kube.get("/x"))
            await asyncio.wait_for(arrived.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            pool = kube._pool
            assert pool is not None and not any(pool._idle.values()), "a half-read connection was kept"
        finally:
            await kube.aclose()


async def test_an_unreachable_server_is_a_failure_every_caller_handles() -> None:
    async with serving(keep(b"")) as srv:
        url = srv.url
    kube = KubeClient(url)
    try:
        with pytest.raises(FAILED) as failed:
            await kube.get("/x")
    finally:
        await kube.aclose()
    assert isinstance(failed.value, http1.ConnectFailed) and not failed.value.sent
    assert isinstance(failed.value, OSError)


async def hangup(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
    """Closes the connection without a word."""
    return False


async def test_a_hangup_is_a_bad_answer_that_may_have_been_applied() -> None:
    async with serving(hangup) as srv:
        kube = KubeClient(srv.url)
        try:
            with pytest.raises(http1.BadAnswer, match="the API server closed the connection without answering") as e:
                await kube.create("/api/v1/namespaces/ns/pods", {})
        finally:
            await kube.aclose()
    assert e.value.sent


def test_the_scripted_server_is_the_one_shared_with_slurms_transport_tests() -> None:
    assert Server.__module__ == "tests.unit.scriptedhttp"


def closes_the_second_request_unanswered() -> tuple[Answer, list[int]]:
    """Answers each connection's first request, then closes it unanswered when the next comes on
    it: a server that dropped a kept-alive connection just as a request went out."""
    seen: list[int] = []

    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        n = len(seen)
        seen.append(n)
        if n % 2 == 1:
            return False  # the kept connection's second request: closed, nothing sent back
        w.write(ok({"n": n}))
        await w.drain()
        return True

    return answer, seen


@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("DELETE", True), ("PATCH", False), ("POST", False)])
async def test_a_kept_connection_closed_under_a_request_retries_only_an_idempotent_one(
    method: str, retried: bool
) -> None:
    answer, seen = closes_the_second_request_unanswered()
    async with serving(answer) as srv:
        kube = KubeClient(srv.url)
        try:
            assert await kube.request("GET", "/x") == {"n": 0}
            if retried:
                assert await kube.request(method, "/x") == {"n": 2}, "sent again on a new connection"
            else:
                with pytest.raises(http1.BadAnswer, match="without answering") as e:
                    await kube.request(method, "/x", body={})
                assert e.value.unanswered and e.value.sent
        finally:
            await kube.aclose()
    assert len(seen) == (3 if retried else 2)
    assert srv.connections == (2 if retried else 1)


async def test_a_new_connection_closed_unanswered_is_not_retried() -> None:
    async with serving(hangup) as srv:
        kube = KubeClient(srv.url)
        try:
            with pytest.raises(http1.BadAnswer):
                await kube.get("/x")
        finally:
            await kube.aclose()
    assert srv.connections == 1 and len(srv.requests) == 1


async def test_a_truncated_answer_on_a_kept_connection_is_not_retried() -> None:
    count = 0

    async def truncate_second(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        nonlocal count
        count += 1
        w.write(ok({"n": count}) if count == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{")
        await w.drain()
        return count == 1

    async with serving(truncate_second) as srv:
        kube = KubeClient(srv.url)
        try:
            await kube.get("/x")
            with pytest.raises(http1.BadAnswer, match="truncated") as e:
                await kube.get("/x")
            assert not e.value.unanswered
        finally:
            await kube.aclose()
    assert len(srv.requests) == 2
