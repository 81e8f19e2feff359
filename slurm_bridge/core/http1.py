"""HTTP/1.1 exchanges over kept-alive connections: the transport under both of the bridge's API
clients, slurmrestd's (:mod:`slurm_bridge.slurm.transport`) and kube-apiserver's
(:mod:`slurm_bridge.kube.client`).

Why its own: a request is one socket write and its answer is read with a handful of buffer
operations. httpx's own transport (httpcore) cost about a third of the operator's event loop for
two Slurm calls a pod (anyio streams, pool bookkeeping that grows with waiting requests, separate
writes for headers and body); aiohttp's client costs a third more CPU a request to the API server
than this (bench/kube_requests.py), and its parser rejects slurmrestd's error answer, which comes as
*two* responses on a ``Connection: close`` connection ("Data after Connection: close") where
Slurm's error text is needed. Exactly one response is read per request, and the connection is
closed when the server says so.

A caller may pass ``sink`` (a callable taking bytes): a successful (2xx) answer's body is then
handed to it piece by piece as it is read, and never held whole (a job list of 10,000 jobs is
80 MB: :mod:`slurm_bridge.slurm.jsonlist`).

Failures are :class:`HttpError` subclasses (``ConnectionError``, so an ``OSError``) that say
whether the request may have reached the server (``sent``): a retry of a write is safe only when
it did not. A connection is never handed to the next request unless its answer was read whole: an
exchange cancelled or failed midway closes it. A server may close a kept-alive connection just as
a request goes out on it; an idempotent request (GET, PUT, DELETE, ...) that met that, with nothing
read back, is sent once more on a new connection, as aiohttp and Go's client do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

MAX_HEAD = 1 << 20  # status line and headers (also the socket buffer's size: a streamed body's window)
_PIECE = 1 << 18  # a streamed body is handed over this much at a time
_NO_BODY_STATUSES = frozenset({204, 304})
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding"})

Origin = tuple[str, str, int]  # scheme, host, port
# Sent again once when a kept-alive connection was closed under them (RFC 9110, 9.2.2).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class HttpError(ConnectionError):
    """The exchange failed. ``sent``: the request may have reached the server (not safe to repeat
    a write blindly)."""

    sent = True


class ConnectFailed(HttpError):
    """Refused, unreachable, or the TLS handshake failed: nothing was sent."""

    sent = False


class ConnectTimedOut(ConnectFailed):
    pass


class PoolTimedOut(ConnectFailed):
    """No free connection in time: nothing was sent."""


class WriteFailed(HttpError):
    pass


class WriteTimedOut(WriteFailed):
    pass


class ReadTimedOut(HttpError):
    pass


class BadAnswer(HttpError):
    """The server closed the connection without answering, cut the answer short, or answered
    something that is not HTTP/1.x. ``unanswered``: nothing at all came back."""

    unanswered = False


class _Unanswered(asyncio.IncompleteReadError):
    """The connection ended before a single byte of the answer came."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds for each phase; None waits as long as it takes (a caller's own deadline may cover
    the whole exchange instead)."""

    pool: float | None = None
    connect: float | None = None
    write: float | None = None
    read: float | None = None  # the whole answer


NO_TIMEOUTS = Timeouts()


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
class Response:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]  # transfer-encoding left out: the body is already decoded
    body: bytes
    keep: bool  # the connection may carry the next request
    streamed: bool = False  # the body went to the caller's sink


class Http11Pool:
    """Kept-alive connections per origin, at most ``max_connections`` exchanges at a time.
    ``default_tls``: the TLS context for ``https`` when none is given (made on first use)."""

    def __init__(
        self,
        *,
        max_connections: int = 8,
        keepalive_expiry: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
        default_tls: Callable[[], ssl.SSLContext] = ssl.create_default_context,
        server: str = "the server",
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._expiry = keepalive_expiry
        self._ssl = ssl_context
        self._default_tls = default_tls
        self._server = server
        self._idle: dict[Origin, list[_Conn]] = {}
        self.closed = False

    async def exchange(
        self,
        origin: Origin,
        payload: bytes,
        method: str,
        timeouts: Timeouts = NO_TIMEOUTS,
        sink: Callable[[bytes], None] | None = None,
    ) -> Response:
        """Send ``payload`` (a whole request: head and body) and read its one answer."""
        if self.closed:
            raise ConnectFailed("the transport is closed")
        try:
            async with asyncio.timeout(timeouts.pool):
                await self._slots.acquire()
        except TimeoutError:
            raise PoolTimedOut(f"no free connection to {self._server} in time") from None
        try:
            conn, reused = await self._connect(origin, timeouts.connect)
            while True:
                try:
                    resp = await self._exchange(conn, payload, method, timeouts, sink)
                    break
                except BaseException as e:
                    conn.close()  # an answer not read whole (failed, cancelled) leaves nothing reusable
                    if not (reused and method in IDEMPOTENT and _closed_under_it(e)):
                        raise
                # once more, on a new connection (which is not retried again)
                conn, reused = await self._connect(origin, timeouts.connect, reuse=False)
            if resp.keep and not self.closed:
                conn.idle_since = time.monotonic()
                self._idle.setdefault(origin, []).append(conn)
            else:
                conn.close()  # whatever follows a "Connection: close" answer is not read
            return resp
        finally:
            self._slots.release()

    async def _exchange(
        self, conn: _Conn, payload: bytes, method: str, timeouts: Timeouts, sink: Callable[[bytes], None] | None
    ) -> Response:
        try:
            conn.writer.write(payload)
            async with asyncio.timeout(timeouts.write):
                await conn.writer.drain()
        except TimeoutError:
            raise WriteTimedOut("timed out sending the request") from None
        except OSError as e:
            raise WriteFailed(f"sending the request failed: {e}") from None
        try:
            async with asyncio.timeout(timeouts.read):
                return await read_response(conn.reader, method, sink)
        except TimeoutError:
            raise ReadTimedOut("timed out waiting for the answer") from None
        except asyncio.IncompleteReadError as e:
            what = "closed the connection without answering" if not e.partial else "sent a truncated answer"
            bad = BadAnswer(f"{self._server} {what}")
            bad.unanswered = isinstance(e, _Unanswered)
            raise bad from None
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            raise BadAnswer(f"unreadable answer: {e}") from None

    async def _connect(
        self, origin: Origin, connect_timeout: float | None, *, reuse: bool = True
    ) -> tuple[_Conn, bool]:
        """A connection to ``origin``, and whether it was kept from an earlier request."""
        idle = self._idle.get(origin, []) if reuse else []
        while idle:
            conn = idle.pop()
            if conn.usable(self._expiry):
                return conn, True
            conn.close()
        scheme, host, port = origin
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = self._default_tls()
            context = self._ssl
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=MAX_HEAD)
        except TimeoutError:
            raise ConnectTimedOut(f"timed out connecting to {host}:{port}") from None
        except OSError as e:  # refused, unreachable, TLS handshake failures (ssl.SSLError)
            raise ConnectFailed(f"cannot connect to {host}:{port}: {e}") from e
        return _Conn(reader, writer), False

    async def aclose(self) -> None:
        self.closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


def encode_request(method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes = b"") -> bytes:
    """A whole request, head and body, for one socket write: hop-by-hop headers are the
    exchange's to decide (left out), Content-Length added for a body that does not say it, and a
    header value with a line break refused (it would end the head early)."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    sized = False
    for name, value in headers:
        low = name.lower()
        if low.encode() in HOP_BY_HOP:
            continue
        if "\r" in value or "\n" in value:
            raise ValueError(f"the header {name} may not contain a line break")
        sized = sized or low == "content-length"
        lines.append(f"{name}: {value}\r\n")
    if body and not sized:
        lines.append(f"Content-Length: {len(body)}\r\n")
    return "".join(lines).encode("latin-1") + b"\r\n" + body


def _closed_under_it(e: BaseException) -> bool:
    """The server closed the connection before any of the answer came (not a timeout)."""
    if isinstance(e, WriteFailed):
        return not isinstance(e, WriteTimedOut)
    return isinstance(e, BadAnswer) and e.unanswered


async def read_response(
    reader: asyncio.StreamReader, method: str, sink: Callable[[bytes], None] | None = None
) -> Response:
    """One answer (interim 1xx answers skipped), its body de-chunked."""
    first = True
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if first and not e.partial:
                raise _Unanswered(b"", None) from None
            raise
        first = False
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
    # The body is complete: a client must not decode a transfer encoding again.
    headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
    return Response(status, reason, headers, b"".join(chunks), keep, streamed=out is sink)


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
