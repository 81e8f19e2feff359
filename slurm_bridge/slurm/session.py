"""One slurmrestd endpoint: the HTTP connection, the JWT, the REST API version, and the sending of
every request with its retries.

``_request`` is the only way a call reaches slurmrestd. Each attempt is one exchange
(``_send``: count, send, time, read); what the answer means is decided without I/O in
:mod:`.outcomes`, and ``_request`` acts on it: return, raise, or send again after a backoff. The
calls themselves live in :mod:`.jobcalls`, :mod:`.nodecalls` and :mod:`.clustercalls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from ..core import metrics
from .errors import SlurmAuthError, SlurmError, SlurmUnsupportedVersion
from .jwtfile import JwtFile
from .outcomes import (
    Answer,
    AuthRejected,
    Expect,
    Failed,
    Listing,
    Outcome,
    Reply,
    StreamedList,
    classify_failure,
    classify_reply,
    failure_metric,
    gc_paused,
    metric_outcome,
    read_reply,
)
from .transport import Http11Transport
from .versions import (
    MIN_SLURM_RELEASE,
    PREFERENCE,
    PROVISIONAL_VERSIONS,
    SPOKEN_VERSIONS,
    Codec,
    codec_for,
    slurm_release,
    too_old,
    version_key,
)

# The client logs under one name, whichever of its modules writes the line.
log = logging.getLogger("slurm_bridge.slurm.client")

_VERSION_IN_PATH = re.compile(r"/slurm/(v\d+\.\d+\.\d+)/")
_DB_VERSION_IN_PATH = re.compile(r"^/slurmdb/v\d+\.\d+\.\d+/")
_ID_IN_PATH = re.compile(r"/job/\d+(?=/|$)|/node/[^/]+|/reservation/[^/]+")
# Answers larger than this are parsed off the event loop (job lists run to megabytes).
_LARGE_BODY = 512 * 1024
# How many request URLs the client keeps (the paths used last: jobs' own, and the fixed ones).
_KEPT_URLS = 1024
# The requests' User-Agent (slurmrestd logs it).
_USER_AGENT = "slurm-bridge"


class SlurmSession:
    """The connection, credentials and version of one slurmrestd, and ``_request``.

    ``retries`` is how many times a failed request is sent again (connection errors, timeouts,
    HTTP 5xx and Slurm's "controller busy/unreachable" errors; never 4xx). ``request_count``
    counts every HTTP request sent, retries included.
    """

    def __init__(
        self,
        base_url: str,
        token_file: Path,
        user: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        api_version: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        token_source: str = "",
        backoff_base: float = 0.2,
        backoff_max: float = 5.0,
    ) -> None:
        if api_version is not None:
            codec_for(api_version)  # fail fast on a version this client cannot speak
        self.base_url = base_url.rstrip("/")
        self.user = user or None
        self.timeout = timeout
        self.retries = max(0, retries)
        self.request_count = 0
        # "GET /job/{id}" -> count: what the calls were, for /stats and the benchmark
        self.requests_by_kind: dict[str, int] = {}
        self._token = JwtFile(Path(token_file), token_source)
        self._pinned = api_version
        self._codec: Codec | None = codec_for(api_version) if api_version else None
        self._version_lock = asyncio.Lock()
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        # httpx's request and response over a transport, without httpx's client around them: the
        # client's layers (base URL merge, default headers, cookies, auth and redirect flows, event
        # hooks) did nothing the bridge needs and cost about 40 us a call, a third of what a call
        # costs the bridge besides the exchange itself (bench/log). A lean HTTP/1.1 transport (see
        # .transport); tests pass httpx.MockTransport. slurmctld serialises job writes anyway: a
        # few kept-alive connections are enough.
        self._transport = (
            transport if transport is not None else Http11Transport(max_connections=8, keepalive_expiry=60)
        )
        self._timeouts = httpx.Timeout(timeout).as_dict()
        self._urls: OrderedDict[str, httpx.URL] = OrderedDict()

    def __repr__(self) -> str:
        version = self._codec.version if self._codec else "not yet known"
        return f"{type(self).__name__}({self.base_url!r}, user={self.user!r}, api_version={version!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    # --- version -------------------------------------------------------------------------------

    async def api_version(self) -> str:
        """The REST API version spoken with the server: the first of
        :data:`.versions.PREFERENCE` it offers (a tested version before a provisional one), found
        once and cached."""
        return (await self._get_codec()).version

    async def _get_codec(self) -> Codec:
        if self._codec is not None:
            return self._codec
        async with self._version_lock:
            if self._codec is None:
                self._codec = codec_for(await self._discover_version())
                if self._codec.version in PROVISIONAL_VERSIONS:
                    log.warning(
                        "Slurm REST API %s at %s: the server offers no version the bridge was tested "
                        "with; %s is decoded from Slurm's OpenAPI description and not yet tested",
                        self._codec.version,
                        self.base_url,
                        self._codec.version,
                    )
                else:
                    log.info("Slurm REST API %s at %s", self._codec.version, self.base_url)
        return self._codec

    async def _discover_version(self) -> str:
        # A ping per candidate (in the order of preference) costs one small request on a current
        # server; the OpenAPI document is hundreds of kilobytes, so it is only read to explain a failure.
        for version in PREFERENCE:
            reply = await self._request("GET", f"/slurm/{version}/ping", not_found_ok=True, probe=True)
            if reply.status != 404:
                return version
        offered = await self._offered_versions()
        release = await self._release(offered[0]) if offered else None
        apis = ", ".join(offered) if offered else "no recognisable version"
        needs = f"slurm-bridge needs Slurm {MIN_SLURM_RELEASE[0]}.{MIN_SLURM_RELEASE[1]:02d} or newer"
        if release is not None and too_old(release):
            speaks = ", ".join(SPOKEN_VERSIONS)
            message = (
                f"slurmrestd at {self.base_url} is Slurm {release} (REST API {apis}); {needs}, whose "
                f"external jobs it submits (REST API {speaks}): upgrade Slurm"
            )
        else:
            found = f"Slurm {release}, " if release else ""
            message = (
                f"slurmrestd at {self.base_url} ({found}REST API {apis}) offers none of "
                f"{', '.join(SPOKEN_VERSIONS)}, which {needs} speaks: load a matching data_parser "
                "plugin (slurmrestd -d) or upgrade Slurm"
            )
        raise SlurmUnsupportedVersion(message, offered=offered, release=release)

    async def _release(self, version: str) -> str | None:
        """The Slurm release behind a REST API version the bridge does not speak (its ping's meta)."""
        try:
            reply = await self._request("GET", f"/slurm/{version}/ping", not_found_ok=True, probe=True)
        except SlurmError:
            return None
        return slurm_release(reply.body)

    async def _offered_versions(self) -> list[str]:
        try:
            reply = await self._request("GET", "/openapi/v3", not_found_ok=True, probe=True)
        except SlurmError:
            return []
        paths = reply.body.get("paths", {}) if isinstance(reply.body, dict) else {}
        found = {m.group(1) for p in paths for m in [_VERSION_IN_PATH.search(p)] if m}
        return sorted(found, key=version_key, reverse=True)

    # --- sending -------------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
        not_found_ok: bool = False,
        ok_errors: frozenset[int] = frozenset(),
        probe: bool = False,
        time_limit: float | None = None,
        decode: Callable[[int, Any], Any] | None = None,
        listing: Listing | None = None,
        as_user: str | None = None,
    ) -> Reply:
        """Send one REST call with retries; return the reply or raise a typed SlurmError.

        ``not_found_ok`` returns 404-like answers (status 404 or Slurm's invalid job/node id) as a
        reply with status 404 instead of raising. An answer whose errors all have numbers in
        ``ok_errors`` counts as success. ``probe`` returns every answer but an auth failure
        unexamined (version discovery only needs to know whether the path exists). ``time_limit``
        replaces the client's timeout for this call (connect, send and the whole answer).
        ``decode(status, body)`` turns a successful answer into ``reply.value`` as it is parsed
        (off the event loop for a large one, with the garbage collector paused: see
        :func:`.outcomes.read_reply`); ``listing`` decodes one list of it item by item as it is
        parsed (see ``Listing``). ``as_user``: the call runs as this Slurm user (the
        ``X-SLURM-USER-NAME`` header, which a token of SlurmUser or root may name anyone in),
        instead of the client's ``user``.
        """
        what = f"{method} {path}"
        expect = Expect(idempotent, not_found_ok, ok_errors, probe)
        call = _Call(method, path, json_body, params, time_limit, decode, listing, as_user)
        attempt = 0
        auth_retried = False
        while True:
            token = self._token.get()
            outcome = await self._send(call, token, expect)
            if isinstance(outcome, Answer):
                return outcome.reply
            if isinstance(outcome, Failed):
                raise outcome.error
            if isinstance(outcome, AuthRejected):
                if not auth_retried and self._token_changed(token):
                    auth_retried = True  # the file was rotated meanwhile: one more try
                    continue
                self._token.invalidate()
                raise outcome.error(what, self._token.path, as_user or self.user)
            if attempt >= self.retries:
                raise outcome.gave_up(what, attempt + 1)
            attempt += 1
            await self._pause(what, outcome.problem, attempt)

    async def _pause(self, what: str, problem: str, attempt: int) -> None:
        """Wait before retry ``attempt``: a backoff doubling from ``backoff_base`` up to
        ``backoff_max``, half of it jittered, so clients that failed together do not retry together."""
        delay = min(self._backoff_max, self._backoff_base * 2 ** (attempt - 1))
        delay = delay / 2 + random.uniform(0, delay / 2)
        log.warning("%s: %s; retry %d/%d in %.2fs", what, problem, attempt, self.retries, delay)
        await asyncio.sleep(delay)

    async def _send(self, call: _Call, token: str, expect: Expect) -> Outcome:
        """One HTTP exchange: counted (``request_count``, ``requests_by_kind``, the metric),
        sent, read and classified. Raises only what ``call.decode`` raises."""
        method, path = call.method, call.path
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT, "X-SLURM-USER-TOKEN": token}
        if call.as_user or self.user:
            headers["X-SLURM-USER-NAME"] = call.as_user or self.user or ""
        self.request_count += 1
        endpoint = _endpoint(path)
        kind = f"{method} {endpoint}"
        self.requests_by_kind[kind] = self.requests_by_kind.get(kind, 0) + 1
        what = f"{method} {path}"
        sent = time.monotonic()
        # A list decoded item by item is decoded as it is read (.jsonlist): never held whole.
        stream = StreamedList(*call.listing) if call.listing is not None else None
        timeouts = self._timeouts if call.time_limit is None else httpx.Timeout(call.time_limit).as_dict()
        extensions: dict[str, Any] = {"timeout": timeouts}
        if stream is not None:
            extensions["body_sink"] = stream.feed
        request = httpx.Request(
            method, self._url(path), params=call.params, headers=headers, json=call.json_body, extensions=extensions
        )
        try:
            with gc_paused() if stream is not None else contextlib.nullcontext():
                resp = await self._transport.handle_async_request(request)
                await resp.aread()
        except httpx.HTTPError as e:
            metrics.slurm_request(method, endpoint, failure_metric(e), time.monotonic() - sent)
            return classify_failure(what, e, expect, self.base_url, self._scrub)
        streamed = stream if resp.extensions.get("body_streamed") else None
        try:
            if len(resp.content) > _LARGE_BODY:
                reply = await asyncio.to_thread(read_reply, resp, self._codec, call.decode, call.listing, streamed)
            else:
                reply = read_reply(resp, self._codec, call.decode, call.listing, streamed)
        except SlurmError:  # an answer ``decode`` could not read
            metrics.slurm_request(method, endpoint, "slurm_error", time.monotonic() - sent)
            raise
        metrics.slurm_request(method, endpoint, metric_outcome(reply), time.monotonic() - sent)
        return classify_reply(what, reply, expect, self._scrub)

    def _url(self, path: str) -> httpx.URL:
        """The URL of ``path`` under the base URL, kept for the paths used last: parsing one costs
        about 20 us, and a job's come again (its read, its released mark, its cancel) while the
        others are the same few. The query is the request's (a poll's ``update_time`` changes
        each time: keeping it would crowd out the jobs' paths)."""
        urls = self._urls
        url = urls.get(path)
        if url is None:
            url = urls[path] = httpx.URL(self.base_url + path)
            if len(urls) > _KEPT_URLS:
                urls.popitem(last=False)
        else:
            urls.move_to_end(path)
        return url

    def _token_changed(self, used: str) -> bool:
        self._token.invalidate()
        try:
            return self._token.get() != used
        except SlurmAuthError:
            return False

    def _scrub(self, text: str) -> str:
        """Never let the JWT into an exception, whatever the server echoed."""
        token = self._token._token
        return text.replace(token, "<redacted>") if token and token in text else text


@dataclass(frozen=True)
class _Call:
    """What one REST call sends, and how its answer is decoded (``_request``'s arguments)."""

    method: str
    path: str
    json_body: Any
    params: dict[str, str] | None
    time_limit: float | None
    decode: Callable[[int, Any], Any] | None
    listing: Listing | None
    as_user: str | None


def _endpoint(path: str) -> str:
    """The path without its API version and with ids replaced: the metric's ``endpoint``."""
    unversioned = _VERSION_IN_PATH.sub("/", _DB_VERSION_IN_PATH.sub("/slurmdb/", path))
    return _ID_IN_PATH.sub(_placeholder, unversioned)


def _placeholder(m: re.Match[str]) -> str:
    found = m.group(0)
    if found.startswith("/job/"):
        return "/job/{id}"
    return "/reservation/{name}" if found.startswith("/reservation/") else "/node/{name}"
