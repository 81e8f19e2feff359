"""A small HTTP/1.1 transport for httpx, written for slurmrestd.

Why not httpx's own (httpcore): under load it cost about a third of the operator's event loop
for two Slurm calls per pod -- anyio streams, pool bookkeeping that grows with waiting requests,
and separate socket writes for headers and body. Why not aiohttp: slurmrestd answers an error
with *two* responses on a ``Connection: close`` connection, and aiohttp's parser rejects the
whole answer ("Data after Connection: close") where Slurm's error text is needed. This transport
reads exactly one response, one write per request, and closes the connection when told to.

A request may carry a ``body_sink`` extension (a callable taking bytes): a successful (2xx) answer's
body is then handed to it piece by piece as it is read, and never held whole (a job list of
10,000 jobs is 80 MB: :mod:`.jsonlist`); the response says so with ``body_streamed``.

Failures are raised as the httpx exceptions SlurmClient classifies: ConnectError/ConnectTimeout
(the request was not sent) and WriteError/WriteTimeout/ReadTimeout/RemoteProtocolError (it may
have been), so retry safety is unchanged. Timeouts come from httpx's request extensions; the read
timeout bounds the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

_MAX_HEAD = 1 << 20  # status line and headers (also the socket buffer's size: a streamed body's window)
_PIECE = 1 << 18  # a streamed body is handed over this much at a time
_NO_BODY_STATUSES = frozenset({204, 304})
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding"})

Key = tuple[str, str, int]


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self, expiry: float) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing() and time.monotonic() - self.idle_since < expiry

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class _Response:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes
    keep: bool  # the connection may carry the next request
    streamed: bool = False  # the body went to the request's body_sink


class Http11Transport(httpx.AsyncBaseTransport):
    def __init__(
        self, *, max_connections: int = 8, keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._idle: dict[Key, list[_Conn]] = {}
        self._closed = False

    async def _take_slot(self, request: httpx.Request, within: float | None) -> None:
        try:
            async with asyncio.timeout(within):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection to slurmrestd in time", request=request) from None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise httpx.ConnectError("the transport is closed", request=request)
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        key: Key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts = request.extensions.get("timeout") or {}
        body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), url.raw_path)]
        head += [k + b": " + v + b"\r\n" for k, v in request.headers.raw if k.lower() not in _HOP_BY_HOP]
        if body and b"content-length" not in {k.lower() for k, _ in request.headers.raw}:
            head.append(b"Content-Length: %d\r\n" % len(body))
        payload = b"".join(head) + b"\r\n" + body

        await self._take_slot(request, timeouts.get("pool"))
        try:
            conn = await self._connect(key, request, timeouts.get("connect"))
            try:
                conn.writer.write(payload)
                async with asyncio.timeout(timeouts.get("write")):
                    await conn.writer.drain()
            except TimeoutError:
                conn.close()
                raise httpx.WriteTimeout("timed out sending the request", request=request) from None
            except OSError as e:
                conn.close()
                raise httpx.WriteError(f"sending the request failed: {e}", request=request) from None
            try:
                sink = request.extensions.get("body_sink")
                async with asyncio.timeout(timeouts.get("read")):
                    resp = await _read_response(conn.reader, request.method, sink)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout("timed out waiting for the answer", request=request) from None
            except asyncio.IncompleteReadError as e:
                conn.close()
                what = "closed the connection without answering" if not e.partial else "sent a truncated answer"
                raise httpx.RemoteProtocolError(f"the server {what}", request=request) from None
            except (OSError, ValueError, asyncio.LimitOverrunError) as e:
                conn.close()
                raise httpx.RemoteProtocolError(f"unreadable answer: {e}", request=request) from None
            if resp.keep and not self._closed:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(key, []).append(conn)
            else:
                conn.close()  # whatever follows a "Connection: close" answer is not read
        finally:
            self._slots.release()
        return httpx.Response(
            resp.status,
            headers=resp.headers,
            content=resp.body,
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": resp.reason, "body_streamed": resp.streamed},
        )

    async def _connect(self, key: Key, request: httpx.Request, connect_timeout: float | None) -> _Conn:
        idle = self._idle.get(key, [])
        while idle:
            conn = idle.pop()
            if conn.usable(self._expiry):
                return conn
            conn.close()
        scheme, host, port = key
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            context = self._ssl
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=_MAX_HEAD)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}", request=request) from None
        except OSError as e:  # refused, unreachable, TLS handshake failures (ssl.SSLError)
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {e}", request=request) from None
        return _Conn(reader, writer)

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


async def _read_response(
    reader: asyncio.StreamReader, method: str, sink: Callable[[bytes], None] | None = None
) -> _Response:
    while True:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
        status = int(parts[1])
        if not 100 <= status < 200:  # interim answers (100 Continue) are skipped
            break
    version, reason = parts[0], parts[2] if len(parts) > 2 else b""
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name.strip():
            raise ValueError(f"malformed header line {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    fields = {k.lower(): v for k, v in headers}
    tokens = {t.strip().lower() for t in fields.get(b"connection", b"").split(b",")}
    keep = version == b"HTTP/1.1" and b"close" not in tokens
    chunks: list[bytes] = []
    out = sink if sink is not None and 200 <= status < 300 else chunks.append
    if method == "HEAD" or status in _NO_BODY_STATUSES:
        pass
    elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        await _read_chunked(reader, out)
    elif b"content-length" in fields:
        await _read_exactly(reader, int(fields[b"content-length"]), out)
    else:
        keep = False  # delimited by the end of the connection
        while piece := await reader.read(_PIECE):
            await _hand(out, piece)
    # The body is complete: httpx must not decode a transfer encoding again.
    headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
    return _Response(status, reason, headers, b"".join(chunks), keep, streamed=out is sink)


async def _hand(out: Callable[[bytes], None], piece: bytes) -> None:
    out(piece)
    if len(piece) >= _PIECE // 4:  # a large answer: a read from the buffer did not yield, decoding
        await asyncio.sleep(0)  # each piece takes a while: let others run between pieces


async def _read_exactly(reader: asyncio.StreamReader, size: int, out: Callable[[bytes], None]) -> None:
    while size > 0:
        piece = await reader.read(min(size, _PIECE))
        if not piece:
            raise asyncio.IncompleteReadError(b"...", size)  # the answer was cut short
        size -= len(piece)
        await _hand(out, piece)


async def _read_chunked(reader: asyncio.StreamReader, out: Callable[[bytes], None]) -> None:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return
        await _read_exactly(reader, size, out)
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("chunk not terminated by CRLF")
