"""List-then-watch caches of the few cluster-scoped objects the tenancy rules read.

The webhook and the operator both need every TenantPolicy and every namespace's labels (for the
policies' namespace selectors) at hand: the webhook answers the API server in milliseconds, and the
operator checks each job again before it submits it. :class:`WatchCache` keeps one collection
current with one list and one long watch (re-listed after a 410 Gone or a broken connection);
:class:`TenantCache` pairs the two and rebuilds the pure :class:`~slurm_bridge.tenancy.TenantIndex`
only when something changed. Nothing here decides anything: until both lists are in, ``synced`` is
False and callers fail closed (docs/tenancy.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

import aiohttp

from slurm_bridge import names
from slurm_bridge.kube import KubeClient, KubeError, NotFound, resource_path
from slurm_bridge.tenancy import TenantIndex

log = logging.getLogger(__name__)

Obj = dict[str, Any]
LIST_PAGE: Final = 500
RETRY_MIN_SECONDS: Final = 1.0
RETRY_MAX_SECONDS: Final = 10.0
# A missing CRD is looked for again this often (it may be installed after the bridge).
MISSING_RETRY_SECONDS: Final = 30.0

TENANT_POLICIES_PATH: Final = resource_path(f"{names.GROUP}/{names.VERSION}", names.TP_PLURAL, None)
NAMESPACES_PATH: Final = resource_path("v1", "namespaces", None)


def project_namespace(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {},
                         "resourceVersion": meta.get("resourceVersion")}}  # fmt: skip


def project_policy(obj: Obj) -> Obj:
    """What the rules and the status writer read: no managedFields or annotations."""
    meta = obj.get("metadata") or {}
    kept = {k: meta.get(k) for k in ("name", "uid", "generation", "resourceVersion", "creationTimestamp")}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind") or names.TP_KIND, "metadata": kept,
            "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}  # fmt: skip


class WatchCache:
    """One cluster-scoped collection, by name. ``missing_ok``: a 404 for the list (the CRD is not
    installed) counts as an empty, synced collection, since no such object can exist."""

    def __init__(
        self,
        kube: KubeClient,
        path: str,
        what: str,
        *,
        project: Callable[[Obj], Obj] = lambda o: o,
        on_change: Callable[[str, Obj], None] | None = None,
        missing_ok: bool = False,
    ) -> None:
        self.kube, self.path, self.what = kube, path, what
        self.project, self.on_change, self.missing_ok = project, on_change, missing_ok
        self.objects: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.last_error = ""
        self.version = 0  # bumped on every change, so readers rebuild only when it moved

    async def run(self) -> None:
        delay = RETRY_MIN_SECONDS
        while True:
            try:
                rv = await self._list()
                if rv is None:  # the kind does not exist (yet)
                    await asyncio.sleep(MISSING_RETRY_SECONDS)
                    continue
                delay = RETRY_MIN_SECONDS
                while rv is not None:
                    rv = await self._watch(rv)
            except asyncio.CancelledError:
                raise
            except (KubeError, aiohttp.ClientError, TimeoutError, ValueError) as e:
                self.last_error = f"cannot list or watch {self.what}: {e}"
                log.warning("%s; again in %.0fs", self.last_error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    async def _list(self) -> str | None:
        items: dict[str, Obj] = {}
        params = {"limit": str(LIST_PAGE)}
        while True:
            try:
                page = await self.kube.request("GET", self.path, params=params)
            except NotFound:
                if not self.missing_ok:
                    raise
                if not self.synced.is_set() or self.objects:
                    log.warning("%s: the API server does not serve them (CRD not installed): none apply", self.what)
                self._replace({})
                return None
            for obj in page.get("items") or []:
                items[obj["metadata"]["name"]] = self.project(obj)
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                break
            params = {"limit": str(LIST_PAGE), "continue": cont}
        self._replace(items)
        rv: str = (page.get("metadata") or {}).get("resourceVersion") or "0"
        return rv

    def _replace(self, items: dict[str, Obj]) -> None:
        before = self.objects
        self.objects = items
        self.version += 1
        self.last_error = ""
        self.synced.set()
        if self.on_change is not None:
            for name in set(before) | set(items):
                if before.get(name) != items.get(name):
                    self.on_change(name, items.get(name) or before[name])

    async def _watch(self, rv: str) -> str | None:
        """Apply events until the watch ends; the resourceVersion to go on from, None to list again."""
        async for event in self.kube.watch(self.path, rv):
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                return None  # 410 Gone (compacted) or another error: list again
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            if etype == "BOOKMARK":
                continue
            name = meta.get("name")
            if not name:
                continue
            if etype == "DELETED":
                self.objects.pop(name, None)
            else:
                self.objects[name] = self.project(obj)
            self.version += 1
            if self.on_change is not None:
                self.on_change(name, obj)
        return rv


class TenantCache:
    """Every TenantPolicy and every namespace's labels, and the index built from them."""

    def __init__(
        self, kube: KubeClient | None, on_change: Callable[[str, str], None] | None = None, *, unavailable: str = ""
    ) -> None:
        """``kube`` None: no credentials (``unavailable`` says why); never synced, so every check
        that needs a policy fails closed with that message."""
        self._unavailable = unavailable if kube is None else ""
        kube = kube or KubeClient("http://127.0.0.1:0")  # never called

        def changed(kind: str) -> Callable[[str, Obj], None] | None:
            if on_change is None:
                return None
            return lambda name, _obj: on_change(kind, name)

        self.policies = WatchCache(kube, TENANT_POLICIES_PATH, "TenantPolicies", project=project_policy,
                                   on_change=changed("policy"), missing_ok=True)  # fmt: skip
        self.namespaces = WatchCache(kube, NAMESPACES_PATH, "namespaces", project=project_namespace,
                                     on_change=changed("namespace"))  # fmt: skip
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

    def start(self) -> None:
        if self._unavailable:
            return
        self._tasks = [asyncio.create_task(c.run(), name=f"watch-{c.what}") for c in (self.policies, self.namespaces)]

    async def wait_synced(self) -> None:
        await asyncio.gather(self.policies.synced.wait(), self.namespaces.synced.wait())

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks = []
