"""A small async Kubernetes client for the calls the bridge makes.

It writes, and lists and watches what the bridge keeps in memory (slurm_bridge/kube/cache.py);
kopf watches only the rest (nodes). Credentials (kubeconfig, exec plugins, in-cluster) come from
slurm_bridge.kube.kubeconfig, without the official ``kubernetes`` package (blocking, and large).
A request goes through the bridge's own HTTP/1.1 exchange (slurm_bridge/core/http1.py): a quarter
less CPU a request than aiohttp's client (bench/kube_requests.py), for the several writes a pod
costs on the operator's hot path. A watch's long-lived stream goes through aiohttp, kopf's own
HTTP stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import ssl
from collections import Counter
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
import pydantic_core

from slurm_bridge import names
from slurm_bridge.core import http1, objects
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH
from slurm_bridge.kube import kubeconfig as kubeconfig_loader
from slurm_bridge.kube.kubeconfig import TokenSource
from slurm_bridge.kube.times import now_iso

log = logging.getLogger(__name__)

EVENT_CONCURRENCY = 8
PatchType = Literal["merge", "json", "strategic"]
_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


# Left as they are in a request's path (with "%": a path is already quoted where it needs to be);
# anything else (a space, a line break, non-ASCII) is percent-encoded, so a name can never end the
# request line.
_PATH_SAFE = "/:@!$&'()*+,;=-._~%?"


def _origin(server: str) -> tuple[http1.Origin, str, str]:
    """The (scheme, host, port) to connect to, the Host header and the path every request's
    starts with (a server behind a proxy's prefix), from the server's URL."""
    url = urlsplit(server)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"the API server's address {server!r} is not an http(s) URL")
    port = url.port or (443 if url.scheme == "https" else 80)
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    default = port == (443 if url.scheme == "https" else 80)
    return (url.scheme, url.hostname, port), host if default else f"{host}:{port}", url.path.rstrip("/")


def _target(path: str, params: Mapping[str, str] | None) -> str:
    """The request line's target: ``path`` with ``params`` as its query."""
    target = quote(path, safe=_PATH_SAFE)
    if params:
        target += ("&" if "?" in target else "?") + urlencode(params, quote_via=quote)
    return target


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP code, ``reason`` the Status reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists on create, or a resourceVersion/precondition conflict on update."""


class Gone(KubeError):
    """410: a watch's or a list's resourceVersion (or continue token) is older than the API server
    keeps: list again."""


class Invalid(KubeError):
    """422: the object fails validation (the same object always will), or a JSON patch's test failed."""


# What a call raises when it failed: an answer that says no (KubeError), or none: the API server
# could not be reached or its answer read (http1's errors for requests, aiohttp's for watches), or
# the client's timeout passed.
FAILED = (KubeError, http1.HttpError, aiohttp.ClientError, TimeoutError)


def _load_credentials(kubeconfig: str | None) -> tuple[str, ssl.SSLContext, TokenSource | None]:
    """Server URL, TLS context and token source (slurm_bridge.kube.kubeconfig: kubeconfig, exec
    plugin or the pod's service account)."""
    creds = kubeconfig_loader.load(kubeconfig)
    return creds.server, creds.ssl_context(), creds.auth


def resource_version(obj: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number (the API server's are etcd revisions), to tell a
    newer version from an older one; 0 when it has none or it is not a number."""
    try:
        return int(objects.meta(obj).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class Accept:
    """The representation a list and a watch ask for (``Accept``): a watch's events are single
    objects, and the API server answers a watch that asks for a List form with events it cannot
    encode ("you requested PartialObjectMetadataList, but the requested object is not a list")."""

    list: str
    watch: str


# Lists and watches that answer each object's metadata only (meta.k8s.io PartialObjectMetadata), as
# Kubernetes' garbage collector reads every kind: no spec, no status.
METADATA_ONLY: Final = Accept(
    list="application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    watch="application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
)


def api_prefix(api_version: str) -> str:
    """Where an API version is served: core (``v1``) under /api, every group under /apis."""
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def resource_path(api_version: str, plural: str, namespace: str | None, name: str | None = None) -> str:
    """The API path of one object, or of the collection when ``name`` is None (cluster-wide when
    ``namespace`` is None too); the name is URL-quoted."""
    base = (
        f"{api_prefix(api_version)}/namespaces/{namespace}/{plural}"
        if namespace
        else f"{api_prefix(api_version)}/{plural}"
    )
    return f"{base}/{quote(name)}" if name else base


def pod_path(namespace: str, name: str | None = None) -> str:
    return resource_path("v1", "pods", namespace, name)


def phj_path(namespace: str | None, name: str | None = None) -> str:
    return resource_path(f"{names.GROUP}/{names.VERSION}", names.PLURAL, namespace, name)


def node_path(name: str) -> str:
    return resource_path("v1", "nodes", None, name)


def object_path(obj: dict[str, Any]) -> str:
    """The API path of an object from its apiVersion/kind/metadata (core and a few known kinds)."""
    api_version: str = obj["apiVersion"]
    kind: str = obj["kind"]
    meta = obj["metadata"]
    plural = {"Pod": "pods", "Node": "nodes", "PlaceholderJob": names.PLURAL, "Job": "jobs"}.get(kind)
    if plural is None:
        plural = kind.lower() + "s"
    return resource_path(api_version, plural, meta.get("namespace"), meta["name"])


def write_kind(method: str, path: str) -> str:
    """``"PATCH pods/status"`` for a write to ``/api/v1/namespaces/ns/pods/p/status``: the verb and
    the resource (and subresource) a write counts under, as the API server's own request metrics
    name them; namespaces and names left out, so that a count per pod can be asserted."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else parts
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return f"{method} -"
    return f"{method} {rest[0]}/{rest[2]}" if len(rest) >= 3 else f"{method} {rest[0]}"


class KubeClient:
    """Async JSON calls against the apiserver; errors become ``KubeError`` subclasses."""

    def __init__(
        self,
        server: str,
        tls: ssl.SSLContext | None = None,
        token: TokenSource | None = None,
        *,
        component: str = names.APP_NAME,
        timeout: float = 30.0,
        max_connections: int = 64,
    ) -> None:
        self.server = server.rstrip("/")
        self.component = component
        self.instance = os.environ.get("POD_NAME") or os.uname().nodename
        self._tls = tls
        self._token = token
        self._timeout = timeout
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None  # watches; made inside the running loop
        self._origin, self._host, self._prefix = _origin(self.server)
        self._agent = f"{component}/0.1"
        self._pool: http1.Http11Pool | None = None  # requests; made inside the running loop
        self._event_seq = itertools.count()
        self._event_tasks: set[asyncio.Task[None]] = set()
        self._event_slots = asyncio.Semaphore(EVENT_CONCURRENCY)
        # Writes sent, by verb and resource (write_kind), whatever their answer: the operator's
        # /stats, which tests/e2e/test_costs.py counts per pod (issue 39).
        self.writes: Counter[str] = Counter()

    @classmethod
    def from_environment(cls, kubeconfig: str | None = None, *, component: str = names.APP_NAME) -> KubeClient:
        server, tls, token = _load_credentials(kubeconfig)
        return cls(server, tls, token, component=component)

    @classmethod
    def from_credentials(
        cls, creds: kubeconfig_loader.Credentials, *, component: str = names.APP_NAME, max_connections: int = 64
    ) -> KubeClient:
        """A client on credentials another user shares (the operator's kopf login): one token
        source, so one exec-plugin run or token-file read serves both."""
        return cls(creds.server, creds.ssl_context(), creds.auth, component=component, max_connections=max_connections)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self._tls or True)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                headers={"User-Agent": self._agent},
            )
        return self._session

    def _requests(self) -> http1.Http11Pool:
        if self._pool is None:
            # The API server closes an idle connection after a while; aiohttp's default keep-alive.
            self._pool = http1.Http11Pool(
                max_connections=self._max_connections,
                keepalive_expiry=15.0,
                ssl_context=self._tls,
                server="the API server",
            )
        return self._pool

    async def aclose(self) -> None:
        await self.drain_events()
        if self._session is not None:
            await self._session.close()
        if self._pool is not None:
            await self._pool.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
    ) -> dict[str, Any]:
        """One API call's JSON answer. ``accept``: another representation (``METADATA_ONLY``)."""
        headers: dict[str, str] = {"Accept": accept} if accept else {}
        data: bytes | None = None
        if method != "GET":
            self.writes[write_kind(method, path)] += 1
        if body is not None:
            headers["Content-Type"] = content_type
            data = pydantic_core.to_json(body)
        for attempt in (1, 2):
            if self._token is not None and (token := await self._token.token()):
                headers["Authorization"] = f"Bearer {token}"
            status, raw = await self._send(method, path, data, params, headers)
            if status != 401 or self._token is None or attempt == 2:
                break
            self._token.invalidate()  # a rotated file or an expired exec token: fetch it anew, once
        if status >= 400:
            try:
                st = pydantic_core.from_json(raw)
                reason, message = st.get("reason", ""), st.get("message", raw.decode(errors="replace"))
            except ValueError:
                reason, message = "", raw.decode(errors="replace")
            exc = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}.get(status, KubeError)
            raise exc(status, reason, message)
        if not raw:
            return {}
        result: dict[str, Any] = pydantic_core.from_json(raw)
        return result

    async def _send(
        self, method: str, path: str, data: bytes | None, params: dict[str, str] | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One HTTP exchange: (status, body). bench/replay.py answers here instead of a server.
        Raises TimeoutError past the client's timeout, :class:`http1.HttpError` when the server
        cannot be reached or its answer read."""
        target = _target(self._prefix + path, params)
        fixed = (("Host", self._host), ("User-Agent", self._agent))
        payload = http1.encode_request(method, target, (*fixed, *headers.items()), data or b"")
        async with asyncio.timeout(self._timeout):
            resp = await self._requests().exchange(self._origin, payload, method)
        return resp.status, resp.body

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path, params=params)
        except NotFound:
            return None

    async def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int = 300,
        params: dict[str, str] | None = None,
        accept: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The watch events of a collection from ``resource_version`` on (bookmarks included), until
        the server ends the watch (about ``timeout_seconds``). An ERROR event is yielded as it came
        (410 Gone: list again). ``params``: more query parameters (a field selector)."""
        query = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        buffer = b""
        async with contextlib.aclosing(self._stream(path, query, timeout_seconds + 30, accept)) as chunks:
            async for chunk in chunks:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        event: dict[str, Any] = pydantic_core.from_json(line)
                        yield event

    async def _stream(
        self, path: str, params: dict[str, str], read_timeout: float, accept: str | None = None
    ) -> AsyncGenerator[bytes, None]:
        """A watch's body as it arrives, in chunks of any size. bench/replay.py feeds its stand-in
        API server's watch lines here."""
        headers: dict[str, str] = {"Accept": accept} if accept else {}
        if self._token is not None and (token := await self._token.token()):
            headers["Authorization"] = f"Bearer {token}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout)
        async with self._http().get(self.server + path, params=params, headers=headers, timeout=timeout) as resp:
            if resp.status >= 400:
                if resp.status == 401 and self._token is not None:
                    self._token.invalidate()  # the next attempt reads the file or runs the plugin again
                raw = await resp.read()
                raise {404: NotFound, 409: Conflict, 410: Gone}.get(resp.status, KubeError)(
                    resp.status, "", raw.decode(errors="replace")[:500]
                )
            async for chunk in resp.content.iter_any():  # not line by line: aiohttp caps a line's length
                yield chunk

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=obj)

    async def patch(self, path: str, patch: Any, patch_type: PatchType = "merge") -> dict[str, Any]:
        return await self.request("PATCH", path, body=patch, content_type=_CONTENT_TYPES[patch_type])

    async def delete(
        self, path: str, *, uid: str | None = None, grace_seconds: int | None = None
    ) -> dict[str, Any] | None:
        """Delete, optionally only that incarnation (``uid`` precondition); None when already gone."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            return await self.request("DELETE", path, body=body)
        except NotFound:
            return None

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(f"{pod_path(namespace, name)}/binding", binding)

    async def event(
        self, obj: dict[str, Any], reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        """Record a core/v1 Event on ``obj`` in the background.

        Events are advisory: they never delay the reconcile that reports them, and a failure to
        record one is logged, not raised. At most ``EVENT_CONCURRENCY`` are in flight.
        """
        task = asyncio.create_task(self._post_event(obj, reason, message, warning=warning, action=action))
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def drain_events(self) -> None:
        """Wait for Events still being posted (call before closing)."""
        if self._event_tasks:
            await asyncio.gather(*self._event_tasks, return_exceptions=True)

    async def _post_event(self, obj: dict[str, Any], reason: str, message: str, *, warning: bool, action: str) -> None:
        meta = objects.meta(obj)
        ns = meta.get("namespace") or "default"
        ts = now_iso()
        suffix = f"{secrets.token_hex(6)}{next(self._event_seq):x}"
        # The object's name may be 253 characters already: shorten it, never the unique suffix.
        base = str(meta.get("name") or "object")[: MAX_NAME_LENGTH - len(suffix) - 1].rstrip("-.")
        name = f"{base}.{suffix}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", "v1"),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self.component},
            "reportingComponent": f"{names.GROUP}/{self.component}",
            "reportingInstance": self.instance[:128],
            "action": action or reason,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        try:
            async with self._event_slots:
                await self.create(f"/api/v1/namespaces/{ns}/events", event)
        except FAILED as e:
            # A namespace being deleted takes no new Events (403): the objects' last Events cannot
            # be kept, and one warning per object of the namespace told nobody anything.
            terminating = isinstance(e, KubeError) and e.status == 403 and "being terminated" in str(e)
            log.log(
                logging.DEBUG if terminating else logging.WARNING,
                "could not record event %s on %s/%s: %s",
                reason,
                ns,
                meta.get("name"),
                e,
            )
