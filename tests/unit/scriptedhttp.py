"""A scripted HTTP server on 127.0.0.1 for the HTTP clients' tests: real sockets, raw answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

Answer = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


class Server:
    """Reads one request head (and body) at a time and lets ``answer`` write raw bytes.

    ``answer`` returns False to close the connection. ``requests`` records every request seen and
    ``connections`` counts accepted connections.
    """

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append(head + body)
                if not await self.answer(head + body, reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def serving(answer: Answer) -> AsyncIterator[Server]:
    s = Server(answer)
    s.server = await asyncio.start_server(s._serve, "127.0.0.1", 0)
    try:
        yield s
    finally:
        s.server.close()


def reply(status: int, body: bytes, *extra: bytes, reason: bytes = b"OK") -> bytes:
    head = b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: application/json\r\n" % (status, reason, len(body))
    return head + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body


def keep(data: bytes) -> Answer:
    async def answer(req: bytes, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(data)
        await w.drain()
        return True

    return answer
