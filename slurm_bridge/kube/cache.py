"""List-then-watch: the bridge's informer, and caches of the few cluster-scoped objects the
tenancy rules read.

:class:`Informer` keeps a consumer current with one collection: a paginated LIST at start, then
one long WATCH after another, each from the last resourceVersion seen (bookmarks included). Only
a 410 Gone (the resourceVersion is older than the API server keeps) lists again, and then every
object the consumer holds that the new list lacks is handed on as DELETED: a delete missed in
the gap must not leak a Slurm job. The operator's pods and PlaceholderJobs
(operator/wiring/watches.py) and the caches below use it.

The webhook and the operator both need every TenantPolicy and every namespace's labels (for the
policies' namespace selectors) at hand: the webhook answers the API server in milliseconds, and the
operator checks each job again before it submits it. :class:`WatchCache` keeps one collection by
name; :class:`TenantCache` pairs the two and rebuilds the pure
:class:`~slurm_bridge.rules.tenancy.TenantIndex` only when something changed. Nothing here decides
anything: until both lists are in, ``synced`` is False and callers fail closed (docs/tenancy.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, Protocol

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube.client import (
    FAILED,
    Accept,
    Gone,
    KubeClient,
    KubeError,
    NotFound,
    resource_path,
    resource_version,
)
from slurm_bridge.kube.seams import CacheKube, KubeListWatch
from slurm_bridge.rules.tenancy import TenantIndex

log = logging.getLogger(__name__)
# A list or watch that failed (an answer refused, none came, or one of a shape that cannot be read).
_LIST_FAILED = (*FAILED, ValueError)

Key = tuple[str, str]
Handler = Callable[[str, Obj], None]
LIST_PAGE: Final = 500
RETRY_MIN_SECONDS: Final = 1.0
RETRY_MAX_SECONDS: Final = 10.0
# A missing CRD is looked for again this often (it may be installed after the bridge).
MISSING_RETRY_SECONDS: Final = 30.0
# How long the API server keeps one watch open (it ends it cleanly; the next goes on from there).
WATCH_SECONDS: Final = 300
# A watch that ends cleanly sooner than this with nothing in it counts as a failure (backoff).
SHORT_WATCH_SECONDS: Final = 1.0

TENANT_POLICIES_PATH: Final = resource_path(f"{names.GROUP}/{names.VERSION}", names.TP_PLURAL, None)
NAMESPACES_PATH: Final = resource_path("v1", "namespaces", None)


def project_namespace(obj: Obj) -> Obj:
    meta = objects.meta(obj)
    return {
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "labels": meta.get("labels") or {},
            "resourceVersion": meta.get("resourceVersion"),
        }
    }


def project_policy(obj: Obj) -> Obj:
    """What the rules and the status writer read: no managedFields or annotations."""
    meta = objects.meta(obj)
    kept = {k: meta.get(k) for k in ("name", "uid", "generation", "resourceVersion", "creationTimestamp")}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind") or names.TP_KIND,
        "metadata": kept,
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }


def key_of(obj: Obj) -> Key:
    meta = objects.meta(obj)
    return (meta.get("namespace") or "", meta.get("name") or "")


class Known(Protocol):
    """What the consumer holds now (the informer's own memory is only the resourceVersion)."""

    def get(self, key: Key) -> Obj | None: ...

    def values(self) -> list[Obj]: ...


class Informer:
    """A collection's events handed to ``handle(type, object)``, kept whole across reconnects.

    - the LIST is paginated (``LIST_PAGE`` objects a page): only one page is held, each object
      is handed on as ADDED as its page arrives; ``synced`` is set once the first list is whole;
    - each WATCH goes on from the last resourceVersion seen (bookmarks asked for, so an idle
      collection's resourceVersion stays recent); a clean end, a broken connection or a read
      timeout resume from there, after a backoff when nothing came through;
    - a 410 Gone (an ERROR event, or the answer to a watch or a page) lists again; after that
      list, every object ``known`` holds that the list lacks (or holds with another uid), and
      that is not newer than the list, is handed on as DELETED;
    - ``missing_ok``: a 404 for the list (the CRD is not installed) counts as an empty, synced
      collection, listed again every ``MISSING_RETRY_SECONDS``.

    ``handle`` runs on the event loop and must not block; an exception in it is logged and the
    event is not seen again (the watch goes on).
    """

    def __init__(
        self,
        kube: KubeListWatch,
        path: str,
        what: str,
        handle: Handler,
        known: Known,
        *,
        params: dict[str, str] | None = None,
        missing_ok: bool = False,
        page: int = LIST_PAGE,
        watch_seconds: int = WATCH_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        accept: Accept | None = None,
    ) -> None:
        self.kube, self.path, self.what = kube, path, what
        # Another representation of the objects (kube.METADATA_ONLY): its List form for lists, its
        # object form for watches.
        self._accept_list: dict[str, str] = {"accept": accept.list} if accept else {}
        self._accept_watch: dict[str, str] = {"accept": accept.watch} if accept else {}
        self._sleep = sleep  # the backoff's (tests pass their own)
        self.handle, self.known = handle, known
        self.params = dict(params or {})
        self.missing_ok, self.page, self.watch_seconds = missing_ok, page, watch_seconds
        self.synced = asyncio.Event()
        self.last_error = ""
        self.resource_version = ""  # where the next watch starts; "" lists first
        self.lists = 0  # complete lists: the first, and one after each 410 Gone
        self.watches = 0  # watch requests
        self.events = 0  # watch events received (bookmarks included)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"watch-{self.what}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait([task])

    async def run(self) -> None:
        delay = RETRY_MIN_SECONDS
        relist_now = True  # a 410 after events came through lists again at once; a second in a row waits
        while True:
            events = self.events
            try:
                if not self.resource_version and not await self._list():  # the kind is not served (yet)
                    await self._sleep(MISSING_RETRY_SECONDS)
                    continue
                started = time.monotonic()
                await self._watch()
                if self.events == events and time.monotonic() - started < SHORT_WATCH_SECONDS:
                    raise KubeError(0, "", "the watch ended at once with nothing in it")
                delay, relist_now = RETRY_MIN_SECONDS, True
                continue
            except asyncio.CancelledError:
                raise
            except Gone as e:
                self.resource_version = ""
                if relist_now or self.events != events:
                    relist_now = False
                    log.info("%s: %s; listing again", self.what, e)
                    continue
                self.last_error = f"cannot list or watch {self.what}: {e}"
            except _LIST_FAILED as e:
                self.last_error = f"cannot list or watch {self.what}: {str(e) or type(e).__name__}"
            except Exception as e:  # an answer of a shape never seen: the watch must not die of it
                log.exception("%s: unexpected error in the list or watch", self.what)
                self.last_error = f"cannot list or watch {self.what}: {type(e).__name__}: {e}"
            if self.events != events:
                delay, relist_now = RETRY_MIN_SECONDS, True
            log.warning("%s; again in %.0fs", self.last_error, delay)
            await self._sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)

    def _hand(self, etype: str, obj: Obj) -> None:
        try:
            self.handle(etype, obj)
        except Exception:
            log.exception("%s: the %s event of %s could not be handled", self.what, etype, key_of(obj))

    async def _list(self) -> bool:
        """One whole list, handed on page by page; False when the kind is not served."""
        listed: dict[Key, str | None] = {}
        params = {**self.params, "limit": str(self.page)}
        snapshot, upto = "", 0  # the list's resourceVersion: its first page's
        while True:
            try:
                page = await self.kube.request("GET", self.path, params=params, **self._accept_list)
            except NotFound:
                if not self.missing_ok:
                    raise
                if not self.synced.is_set() or self.known.values():
                    log.warning("%s: the API server does not serve them (CRD not installed): none apply", self.what)
                self._vanished({}, None)
                self.last_error = ""
                self.synced.set()
                return False
            meta = objects.meta(page)
            if not snapshot:
                snapshot, upto = meta.get("resourceVersion") or "", resource_version(page)
            kind = str(page.get("kind") or "").removesuffix("List")
            api_version = page.get("apiVersion")
            for obj in page.get("items") or []:
                if kind:  # list items come without them; watch events and the stores' projections need them
                    obj.setdefault("kind", kind)
                if api_version:
                    obj.setdefault("apiVersion", api_version)
                key, uid = key_of(obj), objects.uid(obj)
                listed[key] = uid
                held = self.known.get(key)
                if held is not None and objects.uid(held) != uid:
                    if resource_version(held) > upto > 0:
                        continue  # the consumer holds a newer incarnation than the list's
                    self._hand("DELETED", held)  # the one it held is gone: its delete fell in the gap
                self._hand("ADDED", obj)
            cont = meta.get("continue")
            if not cont:
                break
            params = {**self.params, "limit": str(self.page), "continue": cont}
        self._vanished(listed, upto or None)
        self.resource_version = snapshot or "0"
        self.lists += 1
        self.last_error = ""
        self.synced.set()
        return True

    def _vanished(self, listed: dict[Key, str | None], upto: int | None) -> None:
        """DELETED for what the consumer holds that a whole list (at resourceVersion ``upto``)
        lacks. What it holds at a newer resourceVersion came from a write after the list was
        taken (the operator's own, stored from the API's answer): its fate is the watch's."""
        for held in self.known.values():
            key = key_of(held)
            if key in listed and listed[key] == objects.uid(held):
                continue
            if upto is not None and resource_version(held) > upto:
                continue
            self._hand("DELETED", held)

    async def _watch(self) -> None:
        """Hand on events until the watch ends."""
        self.watches += 1
        events = self.kube.watch(
            self.path,
            self.resource_version,
            timeout_seconds=self.watch_seconds,
            params=self.params,
            **self._accept_watch,
        )
        async with contextlib.aclosing(events):  # a 410 or a stop closes the response at once
            await self._consume(events)

    async def _consume(self, events: AsyncIterator[Obj]) -> None:
        async for event in events:
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                code, reason, message = obj.get("code") or 0, obj.get("reason") or "", obj.get("message") or ""
                if code == 410 or reason in ("Expired", "Gone"):
                    raise Gone(410, reason, message or "too old resource version")
                raise KubeError(int(code), reason, message or str(obj))
            self.events += 1
            rv = objects.meta(obj).get("resourceVersion")
            if etype in ("ADDED", "MODIFIED", "DELETED"):
                self._hand(etype, obj)
            elif etype != "BOOKMARK":
                log.warning("%s: ignoring a watch event of type %r", self.what, etype)
            if rv:
                self.resource_version = rv


class WatchCache:
    """One cluster-scoped collection, by name (projected), through an :class:`Informer`.
    ``missing_ok``: a 404 for the list (the CRD is not installed) counts as an empty, synced
    collection, since no such object can exist."""

    def __init__(
        self,
        kube: CacheKube,
        path: str,
        what: str,
        *,
        project: Callable[[Obj], Obj] = lambda o: o,
        on_change: Callable[[str, Obj], None] | None = None,
        missing_ok: bool = False,
    ) -> None:
        self.kube, self.path, self.what = kube, path, what
        self.project, self.on_change = project, on_change
        self.objects: dict[str, Obj] = {}
        self.version = 0  # bumped on every change, so readers rebuild only when it moved
        self.informer = Informer(kube, path, what, self._apply, self, missing_ok=missing_ok)
        self.synced = self.informer.synced

    @property
    def last_error(self) -> str:
        return self.informer.last_error

    async def run(self) -> None:
        await self.informer.run()

    def get(self, key: Key) -> Obj | None:
        return self.objects.get(key[1])

    def values(self) -> list[Obj]:
        return list(self.objects.values())

    def _apply(self, etype: str, obj: Obj) -> None:
        name = objects.name(obj)
        if not name:
            return
        if etype == "DELETED":
            if self.objects.pop(name, None) is None:
                return
        else:
            projected = self.project(obj)
            if self.objects.get(name) == projected:
                return
            self.objects[name] = projected
        self.version += 1
        if self.on_change is not None:
            self.on_change(name, obj)


def namespaces_cache(kube: CacheKube) -> WatchCache:
    """Every namespace's labels (the extender's, for ``managedNamespaceSelector``)."""
    return WatchCache(kube, NAMESPACES_PATH, "namespaces", project=project_namespace)


async def namespace_labels(cache: WatchCache, namespace: str) -> dict[str, str] | None:
    """A namespace's labels from a namespaces cache, read with a GET when the watch has not
    delivered it yet (created a moment ago); None while the cache is not synced, or when the
    namespace does not exist."""
    if not cache.synced.is_set():
        return None
    obj = cache.objects.get(namespace)
    if obj is None:
        got = await cache.kube.get(resource_path("v1", "namespaces", None, namespace))
        if got is None:
            return None
        obj = cache.objects.setdefault(namespace, project_namespace(got))
    return dict(objects.labels(obj))


class TenantCache:
    """Every TenantPolicy and every namespace's labels, and the index built from them."""

    def __init__(
        self, kube: CacheKube | None, on_change: Callable[[str, str], None] | None = None, *, unavailable: str = ""
    ) -> None:
        """``kube`` None: no credentials (``unavailable`` says why); never synced, so every check
        that needs a policy fails closed with that message."""
        self._unavailable = unavailable if kube is None else ""
        kube = kube or KubeClient("http://127.0.0.1:0")  # never called

        def changed(kind: str) -> Callable[[str, Obj], None] | None:
            if on_change is None:
                return None
            return lambda name, _obj: on_change(kind, name)

        self.policies = WatchCache(
            kube,
            TENANT_POLICIES_PATH,
            "TenantPolicies",
            project=project_policy,
            on_change=changed("policy"),
            missing_ok=True,
        )
        self.namespaces = WatchCache(
            kube, NAMESPACES_PATH, "namespaces", project=project_namespace, on_change=changed("namespace")
        )
        self._index = TenantIndex()
        self._built: tuple[int, int] = (-1, -1)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def synced(self) -> bool:
        return self.policies.synced.is_set() and self.namespaces.synced.is_set()

    @property
    def problem(self) -> str:
        """Why the cache is not synced, for refusals and logs."""
        if self._unavailable:
            return self._unavailable
        errors = [c.last_error for c in (self.policies, self.namespaces) if c.last_error]
        return "; ".join(errors) or "the first lists of TenantPolicies and namespaces are not in yet"

    def index(self) -> TenantIndex:
        key = (self.policies.version, self.namespaces.version)
        if key != self._built:
            self._index = TenantIndex.build(self.policies.objects.values(), self.namespaces.objects.values())
            self._built = key
        return self._index

    async def ensure_namespace(self, namespace: str) -> None:
        """Read a namespace the watch has not delivered yet (created a moment ago), so a
        label-selected policy is not missed. A namespace that does not exist stays unknown."""
        if not namespace or namespace in self.namespaces.objects or not self.namespaces.synced.is_set():
            return
        obj = await self.namespaces.kube.get(resource_path("v1", "namespaces", None, namespace))
        if obj is not None and namespace not in self.namespaces.objects:
            self.namespaces.objects[namespace] = project_namespace(obj)
            self.namespaces.version += 1

    async def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """A namespace's labels (slurm_bridge/rules/namespaces.py); None while the namespaces are not
        read yet, or when it does not exist."""
        if self._unavailable:
            return None
        await self.ensure_namespace(namespace)
        return await namespace_labels(self.namespaces, namespace)

    def start(self) -> None:
        if self._unavailable:
            return
        self._tasks = [asyncio.create_task(c.run(), name=f"watch-{c.what}") for c in (self.policies, self.namespaces)]

    async def wait_synced(self) -> None:
        await asyncio.gather(self.policies.synced.wait(), self.namespaces.synced.wait())

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks = []


RESOURCE_SLICES_PATH: Final = resource_path("resource.k8s.io/v1", "resourceslices", None)


def project_slice(obj: Obj) -> Obj:
    """What the bridge reads of a ResourceSlice: its node, driver, pool and devices' Slurm-order and
    kind attributes and shards (slurm_bridge/rules/dra/inventory.py), their taints' key, value and
    effect (operator/nodes/devicetaints.py); uid and resourceVersion for the informer's relist."""
    spec, meta = obj.get("spec") or {}, objects.meta(obj)
    keep = ("type", "index", "parentIndex", "minor", "profile")
    devices = [
        {
            "name": d.get("name"),
            "attributes": {k: v for k, v in (d.get("attributes") or {}).items() if k in keep},
            **({"consumesCounters": True} if d.get("consumesCounters") else {}),
            # a shareable GPU's shards (DRA consumable capacity; docs/gpus.md#shards)
            **(
                {"allowMultipleAllocations": True, "capacity": {"shards": d["capacity"]["shards"]}}
                if d.get("allowMultipleAllocations") is True and "shards" in (d.get("capacity") or {})
                else {}
            ),
            **({"taints": taints} if (taints := project_taints(d.get("taints"))) else {}),
        }
        for d in spec.get("devices") or []
        if isinstance(d, dict)
    ]
    return {
        "metadata": {k: meta.get(k) for k in ("name", "uid", "resourceVersion")},
        "spec": {
            "driver": spec.get("driver"),
            "nodeName": spec.get("nodeName"),
            "pool": spec.get("pool") or {},
            "devices": devices,
        },
    }


def project_taints(taints: Any) -> list[Obj]:
    """A device's taints as the bridge reads them: key, value and effect (not ``timeAdded``, which
    changes nothing the bridge decides)."""
    if not isinstance(taints, list):
        return []
    return [{k: t.get(k) or "" for k in ("key", "value", "effect")} for t in taints if isinstance(t, dict)]


def slices_cache(kube: CacheKube, on_change: Callable[[str, Obj], None] | None = None) -> WatchCache:
    """Every ResourceSlice (the operator's SlurmDevicesMatch condition, the webhook's check that some
    node can hold a pod's DRA request: docs/gpus.md); a cluster without the DRA API has none."""
    return WatchCache(
        kube, RESOURCE_SLICES_PATH, "resourceslices", project=project_slice, on_change=on_change, missing_ok=True
    )


DEVICE_TAINT_RULES_PATH: Final = resource_path("resource.k8s.io/v1", "devicetaintrules", None)


def project_taint_rule(obj: Obj) -> Obj:
    """What the bridge reads of a DeviceTaintRule: which devices it selects and its one taint."""
    spec, meta = obj.get("spec") or {}, objects.meta(obj)
    selector = spec.get("deviceSelector") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "uid", "resourceVersion")},
        "spec": {
            "deviceSelector": {k: selector[k] for k in ("driver", "pool", "device") if selector.get(k) is not None},
            "taint": (project_taints([spec.get("taint")]) or [{}])[0],
        },
    }


def taint_rules_cache(kube: CacheKube, on_change: Callable[[str, Obj], None] | None = None) -> WatchCache:
    """Every DeviceTaintRule (the operator's drains for tainted GPUs: docs/gpus.md, "Device taints");
    an API server that does not serve them (before Kubernetes 1.36, or with the DRADeviceTaints
    gate off) has none."""
    return WatchCache(
        kube,
        DEVICE_TAINT_RULES_PATH,
        "devicetaintrules",
        project=project_taint_rule,
        on_change=on_change,
        missing_ok=True,
    )
