"""Async client for slurmrestd: the bridge's only way to talk to Slurm.

It finds the REST API version the server speaks, authenticates with a JWT read from a file
(re-read when the file changes, so a rotated token needs no restart), checks every answer's
``errors[]`` (slurmrestd can answer HTTP 200 and still report a failure) and retries what is
safe to retry. Answers come back as the version-neutral models of :mod:`.models`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import httpx
import pydantic_core

from .. import metrics
from .errors import (
    AUTH_ERRORS,
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    ESLURM_JOB_FINISHED,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE,
    NOT_DELIVERED_ERRORS,
    NOT_FOUND_ERRORS,
    TRANSIENT_ERRORS,
    SlurmAuthError,
    SlurmError,
    SlurmErrorDetail,
    SlurmNotFound,
    SlurmUnavailable,
    SlurmUnsupportedVersion,
)
from .jsonlist import parse_with_list
from .models import JobInfo, JobRequest, JobStates, NodeDevices, NodeInfo
from .transport import Http11Transport
from .versions import (
    MIN_SLURM_RELEASE,
    SUPPORTED_VERSIONS,
    Codec,
    codec_for,
    slurm_release,
    too_old,
)
from .wire import ControllerPing, listed

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger(__name__)

# The request never left this process or never reached slurmrestd: always safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The request may have reached slurmrestd (and Slurm) before the failure.
_MAYBE_SENT = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
_GATEWAY_STATUSES = frozenset({502, 503, 504})
_AUTH_STATUSES = frozenset({401, 403, 511})
_VERSION_IN_PATH = re.compile(r"/slurm/(v\d+\.\d+\.\d+)/")
_DB_VERSION_IN_PATH = re.compile(r"^/slurmdb/v\d+\.\d+\.\d+/")
_ID_IN_PATH = re.compile(r"/job/\d+(?=/|$)|/node/[^/]+")


# Keys the Go slurm-bridge's JWT Secret uses: a missing token file is also looked for under these
# names in its directory, so a Secret made for the Go bridge works unchanged (docs/migrating.md).
GO_SECRET_KEYS = ("SLURM_JWT", "auth-token")


class _TokenFile:
    """The JWT file, re-read only when its mtime, size or inode changes.

    A Kubernetes Secret volume swaps a symlink on update, which changes the inode; a plain
    rewrite changes mtime/size. The token itself never leaves this object except into a header.
    """

    def __init__(self, path: Path, source: str = "") -> None:
        self.configured = path
        self.path = path
        # Where the file comes from (e.g. "Secret ns/name, key jwt"), so errors say what to fix.
        self._where = f" (it comes from {source})" if source else ""
        self._key: tuple[int, int, int] | None = None
        self._token = ""

    def __repr__(self) -> str:
        return f"_TokenFile({str(self.path)!r})"

    def _find(self) -> Path:
        """The configured file, or else a Go bridge Secret key's file beside it."""
        if self.configured.exists():
            return self.configured
        for key in GO_SECRET_KEYS:
            alias = self.configured.parent / key
            if alias.exists():
                if alias != self.path:
                    log.info("Slurm JWT: %s is missing; using %s (the Go slurm-bridge's key)", self.configured, alias)
                return alias
        return self.configured

    def get(self) -> str:
        self.path = self._find()
        try:
            st = self.path.stat()
        except OSError as e:
            also = f" (nor {', '.join(GO_SECRET_KEYS)} beside it)"
            raise SlurmAuthError(
                f"cannot read the Slurm JWT file {self.path}{also}{self._where}: {e.strerror}"
            ) from None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._key or not self._token:
            try:
                text = self.path.read_text(encoding="utf-8", errors="replace")
            except OSError as e:
                raise SlurmAuthError(f"cannot read the Slurm JWT file {self.path}{self._where}: {e.strerror}") from None
            token = _parse_token(text)
            if not token:
                raise SlurmAuthError(f"the Slurm JWT file {self.path}{self._where} is empty")
            self._key, self._token = key, token
        return self._token

    def invalidate(self) -> None:
        self._key = None


def _parse_token(text: str) -> str:
    """A bare token, or the ``SLURM_JWT=<token>`` line that ``scontrol token`` prints."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    for ln in lines:
        ln = ln.removeprefix("export ").strip()
        if ln.startswith("SLURM_JWT="):
            return ln.removeprefix("SLURM_JWT=").strip().strip("'\"")
    return lines[0].strip("'\"") if lines else ""


@dataclass(frozen=True)
class _Reply:
    status: int
    body: Any  # parsed JSON (normally a dict), or None (also once ``decode`` took it)
    errors: tuple[SlurmErrorDetail, ...]
    text: str  # the body when it was not JSON, shortened
    value: Any = None  # what ``decode`` made of a successful answer


# The pause of the garbage collector while an answer is decoded (see _gc_paused); answers may be
# decoded in several threads at once.
_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_resume = False


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No garbage collection while an answer is parsed and decoded.

    A Slurm answer decodes into tens of thousands of short-lived objects (jobs/state for 10,000
    jobs: about 30,000; a full job list: millions), freed by reference counting once decoded. A
    collection in the middle moved them to the oldest generation, and Python then ran a full
    collection over all of the operator's objects every few polls: 10 a minute, 0.4 s each, at
    1,000 nodes and 10,000 PlaceholderJobs (docs/performance.md, run 8).
    """
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


# (key, keep): a successful answer's ``key`` list is decoded item by item through ``keep``
# (slurm_bridge/slurm/jsonlist.py).
Listing = tuple[str, Callable[[Any], Any]]


def _parse_reply(
    resp: httpx.Response,
    codec: Codec | None,
    decode: Callable[[int, Any], Any] | None = None,
    listing: Listing | None = None,
) -> _Reply:
    """The answer's JSON and Slurm's errors; with ``decode`` a successful answer is decoded at once
    (``value``) and its JSON dropped, all with the garbage collector paused."""
    body: Any = None
    text = ""
    with _gc_paused():
        if resp.content:
            try:
                if listing is not None and resp.status_code < 400:
                    body = parse_with_list(resp.content, *listing)
                else:
                    # pydantic's Rust parser: job states run to megabytes and are read every period.
                    body = pydantic_core.from_json(resp.content)
            except ValueError:
                text = resp.text.strip()[:500]
        errors: tuple[SlurmErrorDetail, ...] = ()
        if isinstance(body, dict) and isinstance(body.get("errors"), list):
            try:
                env = (codec or codec_for(SUPPORTED_VERSIONS[0])).envelope(body)
                errors = tuple(e.detail() for e in env.errors)
            except SlurmError:
                errors = (SlurmErrorDetail(error=str(body.get("errors"))[:500]),)
        if decode is not None and resp.status_code < 400 and not errors and not text:
            return _Reply(resp.status_code, None, errors, text, decode(resp.status_code, body))
    return _Reply(resp.status_code, body, errors, text)


class SlurmClient:
    """One slurmrestd endpoint. Use as ``async with SlurmClient(...) as c:`` or call ``aclose()``.

    ``retries`` is how many times a failed request is sent again (connection errors, timeouts,
    HTTP 5xx and Slurm's "controller busy/unreachable" errors; never 4xx). A job submit is only
    sent again when it certainly did not reach Slurm, because a second copy would be a second job.
    ``request_count`` counts every HTTP request sent, retries included.
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
        self._token = _TokenFile(Path(token_file), token_source)
        self._pinned = api_version
        self._codec: Codec | None = codec_for(api_version) if api_version else None
        self._version_lock = asyncio.Lock()
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            # A lean HTTP/1.1 transport (see .transport); tests pass httpx.MockTransport. slurmctld
            # serialises job writes anyway: a few kept-alive connections are enough.
            transport=transport if transport is not None else Http11Transport(max_connections=8, keepalive_expiry=60),
            headers={"Accept": "application/json"},
            follow_redirects=False,
        )

    @classmethod
    def from_config(cls, cfg: Config) -> SlurmClient:
        return cls(
            cfg.slurmRestApi,
            cfg.slurmJwtFile,
            user=cfg.slurmUser or None,
            timeout=cfg.slurmRequestTimeoutSeconds,
            token_source=cfg.slurmJwtSource,
        )

    def __repr__(self) -> str:
        version = self._codec.version if self._codec else "not yet known"
        return f"SlurmClient({self.base_url!r}, user={self.user!r}, api_version={version!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- version -------------------------------------------------------------------------------

    async def api_version(self) -> str:
        """The highest supported REST API version the server offers, found once and cached."""
        return (await self._get_codec()).version

    async def _get_codec(self) -> Codec:
        if self._codec is not None:
            return self._codec
        async with self._version_lock:
            if self._codec is None:
                self._codec = codec_for(await self._discover_version())
                log.info("Slurm REST API %s at %s", self._codec.version, self.base_url)
        return self._codec

    async def _discover_version(self) -> str:
        # A ping per candidate (highest first) costs one small request on a current server; the
        # OpenAPI document is hundreds of kilobytes, so it is only read to explain a failure.
        for version in SUPPORTED_VERSIONS:
            reply = await self._request("GET", f"/slurm/{version}/ping", not_found_ok=True, probe=True)
            if reply.status != 404:
                return version
        offered = await self._offered_versions()
        release = await self._release(offered[0]) if offered else None
        apis = ", ".join(offered) if offered else "no recognisable version"
        needs = f"slurm-bridge needs Slurm {MIN_SLURM_RELEASE[0]}.{MIN_SLURM_RELEASE[1]:02d} or newer"
        if release is not None and too_old(release):
            speaks = ", ".join(SUPPORTED_VERSIONS)
            message = (f"slurmrestd at {self.base_url} is Slurm {release} (REST API {apis}); {needs}, whose "
                       f"external jobs it submits (REST API {speaks}): upgrade Slurm")  # fmt: skip
        else:
            found = f"Slurm {release}, " if release else ""
            message = (f"slurmrestd at {self.base_url} ({found}REST API {apis}) offers none of "
                       f"{', '.join(SUPPORTED_VERSIONS)}, which {needs} speaks: load a matching data_parser "
                       "plugin (slurmrestd -d) or upgrade Slurm")  # fmt: skip
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
        return sorted(found, key=lambda v: tuple(int(x) for x in v[1:].split(".")), reverse=True)

    # --- operations ----------------------------------------------------------------------------

    async def ping(self) -> list[ControllerPing]:
        """Every slurmctld's ping result; raises SlurmUnavailable when none responds."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("ping"))
        pings = codec.decode_ping(reply.body)
        if not any(p.responding for p in pings):
            hosts = ", ".join(p.hostname for p in pings) or "none listed"
            raise SlurmUnavailable(f"no slurmctld responds to slurmrestd's ping (controllers: {hosts})")
        return pings

    async def submit_external_job(self, req: JobRequest, *, name: str, admin_comment: str) -> int:
        """Submit ``req`` as an external job and return its id.

        On a timeout after the request was sent this raises SlurmUnavailable with
        ``maybe_applied=True`` instead of sending it again: the caller finds out by listing jobs
        (``admin_comment`` identifies the job) whether Slurm made it.
        """
        codec = await self._get_codec()
        body = codec.submit_body(req, name=name, admin_comment=admin_comment)
        reply = await self._request("POST", codec.path("job/submit"), json_body=body, idempotent=False)
        return codec.decode_submit(reply.body)

    async def submit_het_job(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> int:
        """Submit one heterogeneous external job, a component per request (in offset order), and
        return its leader's id (component 0's; component ``i`` has its own id, and cancelling the
        leader cancels every component).

        Always queued: Slurm 26.05 refuses a heterogeneous immediate allocation (``job/allocate``
        with ``hetjob`` and ``immediate``: error 2078, even on an idle cluster) and starts such a
        job only in a backfill pass (``SchedulerParameters=bf_interval``, 30 s by default). Never
        sent twice, as :meth:`submit_external_job`.
        """
        codec = await self._get_codec()
        body = codec.het_submit_body(reqs, name=name, admin_comment=admin_comment)
        reply = await self._request("POST", codec.path("job/submit"), json_body=body, idempotent=False)
        return codec.decode_submit(reply.body)

    async def allocate_external_job(self, req: JobRequest, *, name: str, admin_comment: str) -> int:
        """Allocate ``req`` as an external job only if Slurm can start it this instant.

        Slurm decides inside the call (the same checks as its scheduler, queue priority included),
        so an allocated job is RUNNING with its nodes when this returns -- no wait for the next
        scheduling pass (``batch_sched_delay``, 3 s by default). When it cannot start now Slurm
        refuses (SlurmError, e.g. "Requested nodes are busy") and the caller queues the job with
        :meth:`submit_external_job`. Always ``immediate``: a *queued* allocation would be killed
        by slurmctld when it starts later, because nothing listens for its "allocated" message.
        Like a submit, it is never sent twice (SlurmUnavailable with ``maybe_applied``).
        """
        codec = await self._get_codec()
        body = codec.allocate_body(req, name=name, admin_comment=admin_comment)
        reply = await self._request("POST", codec.path("job/allocate"), json_body=body, idempotent=False)
        return codec.decode_submit(reply.body)

    async def job_states(self, previous: JobStates | None = None) -> JobStates:
        """Every job's id and state flags, in one small request (no names, nodes or reasons).

        About 80 bytes per job against about 8 KB in a full list: cheap enough to ask every poll.
        With ``previous`` (the last answer) an identical answer comes back ``unchanged`` and is
        not decoded again.
        """
        codec = await self._get_codec()
        reply = await self._request(
            "GET", codec.path("jobs/state/"), decode=lambda _, body: codec.decode_job_states(body, previous)
        )
        states: JobStates = reply.value
        return states

    async def update_job(self, job_id: int, req: JobRequest) -> None:
        """Change a pending job to match ``req`` (see :meth:`.versions.Codec.update_body`).

        Slurm applies the change and still answers "Requested partition/node configuration not
        available now" when the job cannot run even after it; that is not a failure here (the job
        stays pending with that reason). A job that is no longer pending raises SlurmError.
        """
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        reply = await self._request("POST", path, json_body=codec.update_body(req), ok_errors=_UPDATE_OK)
        if reply.errors:
            log.info("job %d updated but still cannot run: %s", job_id, "; ".join(map(str, reply.errors)))
        failed = codec.decode_update(reply.body)
        if failed:
            raise _classify(f"POST {path}: Slurm refused the job update", reply.status, failed)

    async def list_jobs(self) -> list[JobInfo]:
        """Every job slurmctld still knows (hidden partitions included), in one request."""
        return (await self.list_jobs_since(None))[0] or []

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]:
        """Every job, or None when no job changed after ``since`` (a ``last_update`` this method
        returned; Slurm's clock), and the ``last_update`` to pass next time. One request; an
        unchanged table costs a few bytes, a changed one the whole list (slurmctld sends every job
        or none). With ``admin_comment_prefix`` only those jobs are decoded (a shared Slurm holds
        many jobs that are none of the caller's business)."""
        codec = await self._get_codec()
        params = dict(_JOB_QUERY)
        if since is not None:
            params["update_time"] = str(int(since))

        def keep(raw: Any) -> JobInfo | None:
            """Each job as it is parsed: only the caller's are decoded and kept."""
            prefix = admin_comment_prefix
            if (
                prefix is not None
                and isinstance(raw, dict)
                and not str(raw.get("admin_comment") or "").startswith(prefix)
            ):
                return None
            return codec.decode_job(raw)

        def decode(status: int, body: Any) -> tuple[list[JobInfo] | None, int | None]:
            if since is not None and codec.unchanged_since(status, body, "jobs"):
                return None, since
            return listed(body, "jobs", "jobs"), codec.last_update(body)

        reply = await self._request(
            "GET",
            codec.path("jobs"),
            params=params,
            time_limit=max(self.timeout, FULL_LIST_TIMEOUT_SECONDS),
            decode=decode,
            listing=("jobs", keep),
        )
        jobs: tuple[list[JobInfo] | None, int | None] = reply.value
        return jobs

    async def get_job(self, job_id: int) -> JobInfo | None:
        """The job, or None when Slurm does not know it (never existed, or purged after MinJobAge)."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params=_JOB_QUERY, not_found_ok=True)
        if reply.status == 404:
            return None
        jobs = codec.decode_jobs(reply.body)
        return next((j for j in jobs if j.job_id == job_id), jobs[0] if jobs else None)

    async def get_jobs(self, job_id: int) -> list[JobInfo]:
        """Every job record the answer for ``job_id`` holds: the job, or a heterogeneous job's
        every component when ``job_id`` is its leader; [] when Slurm does not know it."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params=_JOB_QUERY, not_found_ok=True)
        if reply.status == 404:
            return []
        return codec.decode_jobs(reply.body)

    async def job_devices(self, job_id: int) -> dict[str, NodeDevices] | None:
        """Node -> the devices (GRES indices, CPUs) the job holds there; None when Slurm does not
        know the job. Read fresh: the allocation is only complete once the job runs."""
        codec = await self._get_codec()
        # flags=DETAIL: with flags=ALL (which _JOB_QUERY uses) slurmrestd leaves gres_detail and
        # job_resources empty (Slurm 26.05, checked).
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params={"flags": "DETAIL"},
                                    not_found_ok=True)  # fmt: skip
        if reply.status == 404:
            return None
        return codec.decode_job_devices(reply.body, job_id)

    async def cancel_job(self, job_id: int) -> None:
        """Cancel the job; a job that is unknown or already finished counts as cancelled."""
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        reply = await self._request("DELETE", path, not_found_ok=True, ok_errors=_CANCEL_OK)
        if reply.status == 404:
            return
        failed = [e for e in codec.decode_kill(reply.body) if e.error_number not in _CANCEL_OK]
        if failed:
            raise _classify(f"DELETE {path}: Slurm could not cancel job {job_id}", reply.status, failed)

    async def list_nodes(self) -> list[NodeInfo]:
        """Every node, in one request."""
        return (await self.list_nodes_since(None))[0] or []

    async def list_nodes_since(self, since: int | None) -> tuple[list[NodeInfo] | None, int | None]:
        """Every node, or None when no node changed after ``since`` (a ``last_update`` this method
        returned; Slurm's clock), and the ``last_update`` to pass next time.

        An unchanged table is answered with no body (slurmrestd's 304), so a poll of 1,000 idle
        nodes costs a few bytes instead of about 2.5 MB to send and decode. slurmctld answers
        "unchanged" only when nothing changed from the second of ``since`` on, so a change made
        in the same second as the last list is not missed (checked on Slurm 26.05).
        """
        codec = await self._get_codec()
        params = {"update_time": str(int(since))} if since is not None else None

        def decode(status: int, body: Any) -> tuple[list[NodeInfo] | None, int | None]:
            if since is not None and codec.unchanged_since(status, body, "nodes"):
                return None, since
            return codec.decode_nodes(body), codec.last_update(body)

        reply = await self._request("GET", codec.path("nodes"), params=params, decode=decode)
        nodes: tuple[list[NodeInfo] | None, int | None] = reply.value
        return nodes

    async def update_node(
        self, name: str, *, state: str | None = None, reason: str | None = None, comment: str | None = None
    ) -> None:
        """Set a node's state and/or reason, or its comment.

        ``state`` is one of the state verbs of ``scontrol update node`` as the REST API names them:
        DRAIN (Slurm requires a ``reason``), RESUME (ends DRAIN and DOWN), UNDRAIN (ends only DRAIN),
        DOWN, FAIL, FUTURE, POWER_DOWN, POWER_UP, ... (``Codec.node_update_states``).
        """
        if state is None and reason is None and comment is None:
            raise ValueError("update_node needs a state, a reason or a comment")
        codec = await self._get_codec()
        body = codec.node_update_body(state, reason, comment)
        await self._request("POST", codec.path(f"node/{name}"), json_body=body)

    async def create_node(self, node_conf: str) -> None:
        """Create a dynamic node from one slurm.conf node line (``NodeName=... State=EXTERNAL``).

        Never sent twice: a second copy would fail with "Node already exists", so the caller
        looks at the node list first. slurmctld needs ``MaxNodeCount`` for dynamic nodes.
        """
        codec = await self._get_codec()
        await self._request("POST", codec.path("new/node/"), json_body=codec.create_node_body(node_conf),
                            idempotent=False)  # fmt: skip

    async def delete_node(self, name: str) -> bool:
        """Delete a dynamic node; False when Slurm has no such node. Slurm refuses a node that still
        runs jobs ("Requested nodes are busy"): drain it and wait until it is idle."""
        codec = await self._get_codec()
        reply = await self._request("DELETE", codec.path(f"node/{name}"), not_found_ok=True)
        return reply.status != 404

    async def list_accounts(self) -> list[str] | None:
        """The names of every account in Slurm's accounting; None when slurmrestd serves no
        accounting endpoints (started without its slurmdbd plugin, or no slurmdbd)."""
        return await self._db_names("accounts")

    async def list_qos(self) -> list[str] | None:
        """The names of every QOS in Slurm's accounting; None as for :meth:`list_accounts`."""
        return await self._db_names("qos")

    async def _db_names(self, key: str) -> list[str] | None:
        codec = await self._get_codec()
        reply = await self._request("GET", codec.db_path(f"{key}/"), not_found_ok=True)
        if reply.status == 404:
            return None
        return codec.decode_db_names(reply.body, key)

    async def list_partitions(self) -> list[str]:
        """The names of every partition, in one request."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("partitions/"))
        return codec.decode_partition_names(reply.body)

    # --- transport -----------------------------------------------------------------------------

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
    ) -> _Reply:
        """Send one REST call with retries; return the reply or raise a typed SlurmError.

        ``not_found_ok`` returns 404-like answers (status 404 or Slurm's invalid job/node id) as a
        reply with status 404 instead of raising. An answer whose errors all have numbers in
        ``ok_errors`` counts as success. ``probe`` returns every answer but an auth failure
        unexamined (version discovery only needs to know whether the path exists). ``time_limit``
        replaces the client's timeout for this call (connect, send and the whole answer).
        ``decode(status, body)`` turns a successful answer into ``reply.value`` as it is parsed
        (off the event loop for a large one, with the garbage collector paused: ``_gc_paused``);
        ``listing`` decodes one list of it item by item as it is parsed (see ``Listing``).
        """
        what = f"{method} {path}"
        attempt = 0
        auth_retried = False
        while True:
            token = self._token.get()
            headers = {"X-SLURM-USER-TOKEN": token}
            if self.user:
                headers["X-SLURM-USER-NAME"] = self.user
            self.request_count += 1
            unversioned = _VERSION_IN_PATH.sub("/", _DB_VERSION_IN_PATH.sub("/slurmdb/", path))
            endpoint = _ID_IN_PATH.sub(_placeholder, unversioned)
            kind = f"{method} {endpoint}"
            self.requests_by_kind[kind] = self.requests_by_kind.get(kind, 0) + 1
            maybe_applied = False
            sent = time.monotonic()
            try:
                resp = await self._http.request(
                    method,
                    path,
                    json=json_body,
                    params=params,
                    headers=headers,
                    timeout=httpx.Timeout(time_limit) if time_limit is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except _NOT_SENT as e:
                metrics.slurm_request(method, endpoint, "connect_error", time.monotonic() - sent)
                problem = f"cannot reach slurmrestd at {self.base_url}: {self._scrub(_describe(e))}"
            except _MAYBE_SENT as e:
                metrics.slurm_request(method, endpoint, "no_answer", time.monotonic() - sent)
                problem = f"no complete answer from slurmrestd at {self.base_url}: {self._scrub(_describe(e))}"
                maybe_applied = True
                if not idempotent:
                    raise SlurmUnavailable(
                        f"{what}: {problem}; the request may have reached Slurm, so it is not sent again",
                        maybe_applied=True,
                    ) from None  # the message has the cause, scrubbed of the JWT
            except httpx.HTTPError as e:
                metrics.slurm_request(method, endpoint, "error", time.monotonic() - sent)
                raise SlurmError(f"{what}: {self._scrub(_describe(e))}") from None
            else:
                try:
                    if len(resp.content) > _LARGE_BODY:
                        # Job lists run to megabytes: parse them off the event loop.
                        reply = await asyncio.to_thread(_parse_reply, resp, self._codec, decode, listing)
                    else:
                        reply = _parse_reply(resp, self._codec, decode, listing)
                except SlurmError:  # an answer ``decode`` could not read
                    metrics.slurm_request(method, endpoint, "slurm_error", time.monotonic() - sent)
                    raise
                metrics.slurm_request(method, endpoint, _outcome(reply), time.monotonic() - sent)
                status = reply.status
                if reply.errors and all(e.error_number in ok_errors for e in reply.errors):
                    return reply
                numbers = {e.error_number for e in reply.errors if e.error_number}
                if status in _AUTH_STATUSES or numbers & AUTH_ERRORS:
                    if not auth_retried and self._token_changed(token):
                        auth_retried = True  # the file was rotated meanwhile: one more try
                        continue
                    self._token.invalidate()
                    raise SlurmAuthError(
                        f"{what}: slurmrestd rejected the request's credentials; check the Slurm JWT file "
                        f"{self._token.path} (a valid, unexpired token"
                        f"{f' for user {self.user}' if self.user else ''}, allowed to do this)"
                        + self._text_suffix(reply),
                        status=status,
                        errors=self._scrub_errors(reply.errors),
                    )
                if probe:
                    return reply
                transient = (numbers & TRANSIENT_ERRORS) or (
                    status >= 500 and (status in _GATEWAY_STATUSES or not reply.errors)
                )
                if transient:
                    not_delivered = bool(numbers) and numbers <= NOT_DELIVERED_ERRORS
                    maybe_applied = not not_delivered
                    problem = f"Slurm is unavailable (HTTP {status})" + self._text_suffix(reply)
                    if not idempotent and not not_delivered:
                        raise SlurmUnavailable(
                            f"{what}: {problem}; the request may have reached Slurm, so it is not sent again",
                            status=status,
                            errors=self._scrub_errors(reply.errors),
                            maybe_applied=True,
                        )
                    if attempt >= self.retries:
                        raise SlurmUnavailable(
                            f"{what}: {problem}; gave up after {attempt + 1} attempts",
                            status=status,
                            errors=self._scrub_errors(reply.errors),
                            maybe_applied=maybe_applied,
                        )
                else:
                    if not_found_ok and (status == 404 or numbers & NOT_FOUND_ERRORS):
                        return _Reply(404, reply.body, reply.errors, reply.text)
                    if status >= 400 or reply.errors:
                        raise _classify(
                            f"{what}: Slurm refused the request" + self._text_suffix(reply),
                            status,
                            self._scrub_errors(reply.errors),
                        )
                    return reply
            if attempt >= self.retries:
                raise SlurmUnavailable(
                    f"{what}: {problem}; gave up after {attempt + 1} attempts", maybe_applied=maybe_applied
                )
            delay = min(self._backoff_max, self._backoff_base * 2**attempt)
            delay = delay / 2 + random.uniform(0, delay / 2)
            attempt += 1
            log.warning("%s: %s; retry %d/%d in %.2fs", what, problem, attempt, self.retries, delay)
            await asyncio.sleep(delay)

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

    def _scrub_errors(self, errors: tuple[SlurmErrorDetail, ...]) -> tuple[SlurmErrorDetail, ...]:
        return tuple(
            SlurmErrorDetail(self._scrub(e.error), e.error_number, self._scrub(e.description), e.source) for e in errors
        )

    def _text_suffix(self, reply: _Reply) -> str:
        return f" ({self._scrub(reply.text)})" if reply.text and not reply.errors else ""


# SHOW_ALL without slurmrestd's default SHOW_DETAIL: the same jobs and fields minus the per-node
# job_resources core bitmaps, which made up about 70% of a jobs answer on the local cluster.
_JOB_QUERY = {"flags": "ALL"}
_LARGE_BODY = 512 * 1024
# A list of every job grows with Slurm's job count (about 8 KB a job: 80 MB and several seconds of
# slurmrestd's time with 10,000 jobs, longer on a busy machine), so it gets at least this long.
FULL_LIST_TIMEOUT_SECONDS = 120.0
_CANCEL_OK = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED})
_UPDATE_OK = frozenset({ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE})


def _outcome(reply: _Reply) -> str:
    """The metric's outcome of one answer: ok, not_found, auth_error, server_error or slurm_error
    (a 4xx, or Slurm's errors[] in any answer)."""
    numbers = {e.error_number for e in reply.errors if e.error_number}
    if reply.status in _AUTH_STATUSES or numbers & AUTH_ERRORS:
        return "auth_error"
    if reply.status == 404 or numbers & NOT_FOUND_ERRORS:
        return "not_found"
    if reply.status >= 500:
        return "server_error"
    if reply.status >= 400 or reply.errors:
        return "slurm_error"
    return "ok"


def _placeholder(m: re.Match[str]) -> str:
    return "/job/{id}" if m.group(0).startswith("/job/") else "/node/{name}"


def _classify(message: str, status: int | None, errors: Sequence[SlurmErrorDetail]) -> SlurmError:
    numbers = {e.error_number for e in errors}
    if status == 404 or numbers & NOT_FOUND_ERRORS:
        return SlurmNotFound(message, status=status, errors=errors)
    if numbers & TRANSIENT_ERRORS:
        return SlurmUnavailable(message, status=status, errors=errors)
    return SlurmError(message, status=status, errors=errors)


def _describe(e: Exception) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
