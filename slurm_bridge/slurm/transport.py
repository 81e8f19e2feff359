"""A small HTTP/1.1 transport for httpx, written for slurmrestd.

Why not httpx's own (httpcore): under load it cost about a third of the operator's event loop
for two Slurm calls per pod -- anyio streams, pool bookkeeping that grows with waiting requests,
and separate socket writes for headers and body. Why not aiohttp: slurmrestd answers an error
with *two* responses on a ``Connection: close`` connection, and aiohttp's parser rejects the
whole answer ("Data after Connection: close") where Slurm's error text is needed. This transport
reads exactly one response, one write per request, and closes the connection when told to.

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
from dataclasses import dataclass, field

import httpx

_MAX_HEAD = 1 << 20  # status line and headers
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


class Http11Transport(httpx.AsyncBaseTransport):
    def __init__(
        self, *, max_connections: int = 8, keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._idle: dict[Key, list[_Conn]] = {}
        self._closed = False

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

        try:
            await asyncio.wait_for(self._slots.acquire(), timeouts.get("pool"))
        except TimeoutError:
            raise httpx.PoolTimeout("no free connection to slurmrestd in time", request=request) from None
        try:
            conn = await self._connect(key, request, timeouts.get("connect"))
            try:
                conn.writer.write(payload)
                await asyncio.wait_for(conn.writer.drain(), timeouts.get("write"))
            except TimeoutError:
                conn.close()
                raise httpx.WriteTimeout("timed out sending the request", request=request) from None
            except OSError as e:
                conn.close()
                raise httpx.WriteError(f"sending the request failed: {e}", request=request) from None
            try:
                resp = await asyncio.wait_for(_read_response(conn.reader, request.method), timeouts.get("read"))
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
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": resp.reason},
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
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context, limit=_MAX_HEAD), connect_timeout
            )
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


async def _read_response(reader: asyncio.StreamReader, method: str) -> _Response:
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
    if method == "HEAD" or status in _NO_BODY_STATUSES:
        body = b""
    elif b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        body = await _read_chunked(reader)
    elif b"content-length" in fields:
        body = await reader.readexactly(int(fields[b"content-length"]))
    else:
        body, keep = await reader.read(), False  # delimited by the end of the connection
    # The body is complete: httpx must not decode a transfer encoding again.
    headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
    return _Response(status, reason, headers, body, keep)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                pass
            return b"".join(chunks)
        data = await reader.readexactly(size + 2)
        if data[-2:] != b"\r\n":
            raise ValueError("chunk not terminated by CRLF")
        chunks.append(data[:-2])
