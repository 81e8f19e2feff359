"""Http11Transport against scripted HTTP servers on 127.0.0.1 (real sockets, scripted answers)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.slurm.transport import Http11Transport
from tests.unit.scriptedhttp import keep, reply, serving


async def test_keeps_the_connection_and_sends_one_exact_request() -> None:
    async with serving(keep(reply(200, b'{"a": 1}'))) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        for _ in range(3):
            r = await c.post(f"{srv.url}/slurm/v0.0.45/jobs/state?job_id=1%2C2", json={"x": 1})
            assert r.status_code == 200 and r.json() == {"a": 1}
    assert srv.connections == 1, "kept-alive connection reused"
    first = srv.requests[0]
    assert first.startswith(b"POST /slurm/v0.0.45/jobs/state?job_id=1%2C2 HTTP/1.1\r\n"), "path sent as encoded"
    assert b"\r\nContent-Length: 7\r\n" in first and first.endswith(b'\r\n\r\n{"x":1}'), first


async def test_reads_only_the_first_of_slurmrestds_two_error_answers() -> None:
    # slurmrestd answers an error with a JSON response and then a text one, both "Connection: Close".
    errors = json.dumps({"errors": [{"error": "Requested nodes are busy", "error_number": 2016}]}).encode()
    data = reply(422, errors, b"Connection: Close", reason=b"UNPROCESSABLE CONTENT") + reply(
        422, b"Requested nodes are busy", b"Connection: Close"
    )

    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(data)
        await w.drain()
        return False

    async with serving(answer) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        r1 = await c.get(f"{srv.url}/x")
        r2 = await c.get(f"{srv.url}/x")
    assert r1.status_code == 422 and r1.json()["errors"][0]["error_number"] == 2016
    assert r2.status_code == 422
    assert srv.connections == 2, "a Connection: close answer ends the connection"


async def test_chunked_answer_and_interim_100() -> None:
    body = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\nT: v\r\n\r\n"
    )
    async with serving(keep(body)) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        r = await c.get(f"{srv.url}/x")
        r2 = await c.get(f"{srv.url}/x")
    assert r.status_code == 200 and r.content == b"abcdefg" and r2.content == b"abcdefg"
    assert srv.connections == 1


async def test_answer_delimited_by_close() -> None:
    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
        await w.drain()
        return False

    async with serving(answer) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        r = await c.get(f"{srv.url}/x")
    assert r.content == b"until the end"


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(reply(200, b"{}"))
        await w.drain()
        return False  # closes without saying so (no Connection: close)

    async with serving(answer) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        await c.get(f"{srv.url}/x")
        transport = c._transport
        assert isinstance(transport, Http11Transport)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        # Wait (with a deadline) until the server's FIN reached the idle connection.
        while not all(conn.reader.at_eof() for conns in transport._pool._idle.values() for conn in conns):
            assert loop.time() < deadline, "the idle connection never saw the server close it"
            await asyncio.sleep(0.01)
        r = await c.get(f"{srv.url}/x")
    assert r.status_code == 200 and srv.connections == 2


async def test_refused_connection_is_a_connect_error() -> None:
    async with serving(keep(b"")) as srv:
        url = srv.url
    async with httpx.AsyncClient(transport=Http11Transport()) as c:
        with pytest.raises(httpx.ConnectError):
            await c.get(f"{url}/x")


async def test_silence_is_a_read_timeout_and_a_hangup_a_protocol_error() -> None:
    async def silent(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(5)
        return False

    async def hangup(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        return False

    async with serving(silent) as srv, httpx.AsyncClient(transport=Http11Transport(), timeout=httpx.Timeout(0.2)) as c:
        with pytest.raises(httpx.ReadTimeout):
            await c.get(f"{srv.url}/x")
    async with serving(hangup) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        with pytest.raises(httpx.RemoteProtocolError, match="without answering"):
            await c.get(f"{srv.url}/x")


async def test_garbage_is_a_protocol_error() -> None:
    async with serving(keep(b"SSH-2.0-OpenSSH\r\n\r\n")) as srv, httpx.AsyncClient(transport=Http11Transport()) as c:
        with pytest.raises(httpx.RemoteProtocolError, match="status line"):
            await c.get(f"{srv.url}/x")


async def test_slurm_client_keeps_retry_safety_on_this_transport(tmp_path: Path) -> None:
    """A submit whose answer never comes is not sent again; a refused allocation carries Slurm's error."""
    token = tmp_path / "jwt"
    token.write_text("tok\n")

    async def hangup(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        return False

    async with serving(hangup) as srv:
        async with SlurmClient(srv.url, token, api_version="v0.0.45", backoff_base=0.0) as c:
            with pytest.raises(SlurmUnavailable) as e:
                await c.submit_external_job(JobRequest(), name="n", admin_comment="c")
            assert e.value.maybe_applied and c.request_count == 1
        assert len(srv.requests) == 1

    errors = json.dumps({"errors": [{"error": "Requested nodes are busy", "error_number": 2016}]}).encode()
    double = reply(422, errors, b"Connection: Close") + reply(422, b"Requested nodes are busy", b"Connection: Close")
    async with serving(keep(double)) as srv, SlurmClient(srv.url, token, api_version="v0.0.45", backoff_base=0.0) as c:
        with pytest.raises(SlurmError) as err:
            await c.allocate_external_job(JobRequest(), name="n", admin_comment="c")
    assert not isinstance(err.value, SlurmUnavailable)
    assert err.value.errors[0].error_number == 2016


def _job_list(n: int) -> bytes:
    jobs = [
        {"job_id": i, "admin_comment": "slurm-bridge:x" if i % 100 == 0 else "", "pad": "p" * 2000} for i in range(n)
    ]
    body = {"jobs": jobs, "last_update": {"set": True, "number": 7}, "errors": [], "warnings": [], "meta": {}}
    return json.dumps(body).encode()


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_job_list_is_decoded_as_it_is_read_and_never_held_whole(tmp_path: Path, chunked: bool) -> None:
    """The transport hands a listing's body to its decoder piece by piece (.jsonlist.ListStream):
    the response keeps no body, and only the caller's jobs are decoded."""
    body = _job_list(3000)  # about 6 MB

    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if b"/ping" in req:
            w.write(reply(200, b'{"pings": [], "errors": []}'))
        elif chunked:
            w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n")
            for at in range(0, len(body), 100_000):
                piece = body[at : at + 100_000]
                w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await w.drain()
            w.write(b"0\r\n\r\n")
        else:
            w.write(reply(200, body))
        await w.drain()
        return True

    token = tmp_path / "jwt"
    token.write_text("t")
    pieces: list[int] = []
    async with serving(answer) as server:
        transport = Http11Transport()
        async with SlurmClient(server.url, token, transport=transport, api_version="v0.0.44") as c:
            real = transport.handle_async_request

            async def spy(request: httpx.Request) -> httpx.Response:
                sink = request.extensions.get("body_sink")
                if sink is not None:

                    def counted(data: bytes) -> None:
                        pieces.append(len(data))
                        sink(data)

                    request.extensions["body_sink"] = counted
                resp = await real(request)
                assert not resp.content or sink is None, "a streamed body is not kept"
                return resp

            transport.handle_async_request = spy  # type: ignore[method-assign]
            jobs, last_update = await c.list_jobs_since(None, admin_comment_prefix="slurm-bridge:")
    assert jobs is not None and [j.job_id for j in jobs] == list(range(0, 3000, 100)) and last_update == 7
    assert len(pieces) > 10 and sum(pieces) == len(body)
