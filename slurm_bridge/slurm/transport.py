"""httpx's transport for slurmrestd: the bridge's HTTP/1.1 exchange (:mod:`slurm_bridge.core.http1`,
why it is its own there) under httpx's request and response.

A request may carry a ``body_sink`` extension (a callable taking bytes): a successful (2xx) answer's
body is then handed to it piece by piece as it is read, and never held whole (a job list of
10,000 jobs is 80 MB: :mod:`.jsonlist`); the response says so with ``body_streamed``.

Failures are raised as the httpx exceptions SlurmClient classifies: ConnectError/ConnectTimeout/
PoolTimeout (the request was not sent) and WriteError/WriteTimeout/ReadTimeout/RemoteProtocolError
(it may have been), so retry safety is unchanged. Timeouts come from httpx's request extensions;
the read timeout bounds the whole answer.
"""

from __future__ import annotations

import ssl

import httpx

from slurm_bridge.core import http1

# http1's failures as the httpx exceptions SlurmClient classifies (most specific first).
_AS_HTTPX: tuple[tuple[type[http1.HttpError], type[httpx.TransportError]], ...] = (
    (http1.PoolTimedOut, httpx.PoolTimeout),
    (http1.ConnectTimedOut, httpx.ConnectTimeout),
    (http1.ConnectFailed, httpx.ConnectError),
    (http1.WriteTimedOut, httpx.WriteTimeout),
    (http1.WriteFailed, httpx.WriteError),
    (http1.ReadTimedOut, httpx.ReadTimeout),
    (http1.HttpError, httpx.RemoteProtocolError),
)


class Http11Transport(httpx.AsyncBaseTransport):
    def __init__(
        self, *, max_connections: int = 8, keepalive_expiry: float = 60.0, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._pool = http1.Http11Pool(
            max_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            ssl_context=ssl_context,
            default_tls=httpx.create_ssl_context,
            server="slurmrestd",
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}", request=request)
        origin: http1.Origin = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        t = request.extensions.get("timeout") or {}
        body = await request.aread()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]  # as httpx spelt them
        payload = http1.encode_request(request.method, url.raw_path.decode("ascii"), headers, body)
        timeouts = http1.Timeouts(t.get("pool"), t.get("connect"), t.get("write"), t.get("read"))
        try:
            resp = await self._pool.exchange(
                origin, payload, request.method, timeouts, request.extensions.get("body_sink")
            )
        except http1.HttpError as e:
            kind = next(h for k, h in _AS_HTTPX if isinstance(e, k))
            raise kind(str(e), request=request) from None
        return httpx.Response(
            resp.status,
            headers=resp.headers,
            content=resp.body,
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": resp.reason, "body_streamed": resp.streamed},
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
