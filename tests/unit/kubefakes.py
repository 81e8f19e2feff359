"""One fake per Kubernetes seam, composed once into ``FakeKube`` (the Slurm side's
``tests/unit/fakes.py`` does the same for Slurm).

A consumer of the API server declares the calls it makes (``slurm_bridge.kube.seams``:
``KubeReads``, ``KubeWrites``, ``KubeEvents``, ``KubeListWatch`` and the rest, composed per consumer),
and each seam has one fake here over one object table: ``FakeReads`` (GETs by path, lists by field selector,
chosen paths refused), ``FakeWrites`` (create, delete and the three patch types with the API
server's resourceVersion rules), ``FakeEvents`` (every Event as a ``Said``), ``FakeListWatch``
(the caches' scripted list pages and watch events). ``FakeKube`` is all of them.

Every call is written to ``calls`` as ``(verb, path)``; ``reads`` keeps the paths read, in order.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator
from typing import Any, NamedTuple

from slurm_bridge.kube.client import Conflict, KubeError, NotFound

Obj = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(obj: Obj, ops: list[Obj]) -> Obj | None:
    """``obj`` with the ops (test, add, replace, remove on objects) applied; None when a test fails."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = out
        for t in parents:
            target = target[t]
        if op["op"] == "test":
            if target.get(last) != op["value"]:
                return None
        elif op["op"] == "remove":
            target.pop(last, None)
        else:
            target[last] = op["value"]
    return out


def _field(obj: Obj, dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def selects(obj: Obj, selector: str) -> bool:
    """Whether ``obj`` matches a field selector of ``a.b=v`` and ``a.b!=v`` terms."""
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = term.split("=", 1)
            if _field(obj, key) != value:
                return False
    return True


class _Table:
    """The object table (by API path) and call log the Kubernetes fakes share."""

    def __init__(self, objects: dict[str, Obj] | None = None, **more: Any) -> None:
        super().__init__(**more)
        self.objects: dict[str, Obj] = {} if objects is None else objects
        self.calls: list[tuple[str, str]] = []

    def by_prefix(self, prefix: str) -> dict[str, Obj]:
        """The stored objects under a collection path, by name."""
        return {p.removeprefix(prefix): o for p, o in self.objects.items() if p.startswith(prefix)}

    @property
    def nodes(self) -> dict[str, Obj]:
        return self.by_prefix("/api/v1/nodes/")


class FakeReads(_Table):
    """GETs by path (a copy, None when absent); a GET of a collection with a ``fieldSelector`` lists
    ``collections[path]`` by it. ``fail``: paths refused with that HTTP status; ``docs``: discovery
    documents by path."""

    def __init__(self, objects: dict[str, Obj] | None = None, *, fail: dict[str, int] | None = None,
                 docs: dict[str, Obj] | None = None, collections: dict[str, list[Obj]] | None = None,
                 **more: Any) -> None:  # fmt: skip
        super().__init__(objects, **more)
        self.fail, self.docs = fail or {}, docs or {}
        self.collections: dict[str, list[Obj]] = collections or {}
        self.reads: list[str] = []
        self.lists: list[dict[str, str]] = []  # the params of each list

    async def get(self, path: str, params: dict[str, str] | None = None) -> Obj | None:
        self.calls.append(("get", path))
        self.reads.append(path)
        await asyncio.sleep(0)  # a real request yields to the loop: concurrent readers interleave
        if path in self.fail:
            code = self.fail[path]
            raise KubeError(code, "Forbidden" if code == 403 else "Error", f"GET {path}")
        if path in self.docs:
            return self.docs[path]
        if params and "fieldSelector" in params:
            self.lists.append(dict(params))
            items = [o for o in self.collections.get(path, []) if selects(o, params["fieldSelector"])]
            return {"items": copy.deepcopy(items)}
        return copy.deepcopy(self.objects.get(path))


class FakeWrites(_Table):
    """Writes as the API server makes them: a create of a stored name is a 409; a patch bumps the
    resourceVersion (and the generation when the spec changes), is a 409 when its
    ``metadata.resourceVersion`` (merge) or a ``test`` op (json) no longer holds, and a 404 for an
    absent object unless ``stub_absent`` (then it patches an empty object of that name).
    ``conflicts``: that many next writes find the object changed just before them;
    ``require_rv``: every merge patch must name the resourceVersion it was computed from;
    ``refuse``: every create and patch is refused with this error (a create still counts in
    ``creates``, a refused patch is not in ``patches``)."""

    def __init__(self, objects: dict[str, Obj] | None = None, *, stub_absent: bool = False,
                 require_rv: bool = False, refuse: KubeError | None = None, **more: Any) -> None:  # fmt: skip
        super().__init__(objects, **more)
        self.stub_absent, self.require_rv, self.refuse = stub_absent, require_rv, refuse
        self.conflicts = 0
        self.creates = 0
        self.refused = 0  # patches refused as stale (a resourceVersion or a ``test`` op no longer held)
        self.patches: list[str] = []
        self.bodies: list[Any] = []
        self.patch_types: list[str] = []

    async def create(self, path: str, obj: Obj) -> Obj:
        self.calls.append(("create", path))
        self.creates += 1
        if self.refuse is not None:
            raise self.refuse
        key = f"{path}/{obj['metadata']['name']}"
        if key in self.objects:
            raise Conflict(409, "AlreadyExists", "exists")
        # What the API server assigns: a uid, the first resourceVersion and generation.
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("resourceVersion", "1")
        meta.setdefault("generation", 1)
        self.objects[key] = obj
        return obj

    async def delete(self, path: str, *, uid: str | None = None, grace_seconds: int | None = None) -> Obj | None:
        self.calls.append(("delete", path))
        return None

    async def patch(self, path: str, body: Any, patch_type: str = "merge") -> Obj:
        self.calls.append(("patch", path))
        await asyncio.sleep(0)  # a real request yields to the loop: concurrent writers interleave
        if self.refuse is not None:
            raise self.refuse
        self.patches.append(path)
        self.bodies.append(body)
        self.patch_types.append(patch_type)
        key = path.removesuffix("/status")
        cur = self._current(key)
        if patch_type == "json":
            new = json_patch(cur, body)
        elif patch_type == "strategic":
            new = _strategic(cur, body)
        else:
            want = (body.get("metadata") or {}).get("resourceVersion")
            assert want is not None or not self.require_rv, f"a patch of {path} without its resourceVersion"
            stale = want is not None and want != cur["metadata"].get("resourceVersion")
            new = None if stale else merge_patch(cur, body)
        if new is None:
            self.refused += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        new["metadata"]["resourceVersion"] = str(int(cur["metadata"].get("resourceVersion", "1")) + 1)
        if "generation" in cur["metadata"] and new.get("spec") != cur.get("spec"):
            new["metadata"]["generation"] = cur["metadata"]["generation"] + 1
        self.objects[key] = new
        return copy.deepcopy(new)

    def _current(self, key: str) -> Obj:
        if key not in self.objects:
            if not self.stub_absent:
                raise NotFound(404, "NotFound", key)
            self.objects[key] = {"metadata": {"name": key.rsplit("/", 1)[-1], "namespace": "ns", "uid": "u"}}
        cur = self.objects[key]
        if self.conflicts:
            self.conflicts -= 1
            self.edit(key, lambda _: None)
        return cur

    def edit(self, key: str, change: Any) -> Obj:
        """Someone else's write (an administrator's): a new resourceVersion, as a watch then
        delivers it. ``key``: a path, or a node's name."""
        obj = self.objects[key if key.startswith("/") else f"/api/v1/nodes/{key}"]
        change(obj)
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(obj)


def _strategic(cur: Obj, body: Obj) -> Obj:
    """A strategic merge patch as far as the bridge uses one: status conditions merged by type."""
    new: Obj = merge_patch(cur, {k: v for k, v in body.items() if k != "status"})
    status = dict(new.get("status") or {})
    for key, value in (body.get("status") or {}).items():
        if key == "conditions":
            kept = [c for c in status.get("conditions") or [] if c["type"] not in {v["type"] for v in value}]
            status["conditions"] = kept + copy.deepcopy(value)
        else:
            status[key] = merge_patch(status.get(key), value)
    new["status"] = status
    return new


class Said(NamedTuple):
    """One Event the bridge posted."""

    name: str
    kind: str
    reason: str
    message: str
    warning: bool


class FakeEvents:
    """Every Event posted, in order, as a ``Said``."""

    def __init__(self, **more: Any) -> None:
        super().__init__(**more)
        self.log: list[Said] = []

    async def event(self, obj: Obj, reason: str, message: str, *, warning: bool = False, action: str = "") -> None:
        kind = obj.get("kind", "PlaceholderJob")
        self.log.append(Said(obj["metadata"]["name"], kind, reason, message, warning))

    @property
    def reasons(self) -> list[str]:
        return [s.reason for s in self.log]

    @property
    def said(self) -> list[tuple[str, str, str]]:
        """(kind, reason, message) of each Event."""
        return [(s.kind, s.reason, s.message) for s in self.log]

    def told(self, *fields: str) -> list[tuple[Any, ...]]:
        """The chosen fields of each Event, e.g. ``told("name", "reason")``."""
        return [tuple(getattr(s, f) for f in fields) for s in self.log]


class FakeListWatch:
    """A cache's list (``pages``: the first, then the continued one) and watch (``watch_events``,
    then silence); ``missing``: the resource is not served."""

    def __init__(self, *, pages: list[Obj] | None = None, watch_events: list[Obj] | None = None,
                 missing: bool = False, **more: Any) -> None:  # fmt: skip
        super().__init__(**more)
        self.pages, self.watch_events, self.missing = pages or [], watch_events or [], missing
        self.list_calls = 0

    async def request(
        self, method: str, path: str, *, params: dict[str, str] | None = None, accept: str | None = None
    ) -> Obj:
        self.list_calls += 1
        if self.missing:
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        return self.pages[0] if not params or "continue" not in params else self.pages[1]

    async def watch(
        self, path: str, rv: str, *, timeout_seconds: int, params: dict[str, str], accept: str | None = None
    ) -> AsyncGenerator[Obj, None]:
        for e in self.watch_events:
            yield e
        self.watch_events = []
        await asyncio.sleep(3600)
        yield {}


class FakeKube(FakeReads, FakeWrites, FakeEvents, FakeListWatch):
    """The API server for a consumer of several seams (the PlaceholderJob shell): all the fakes over
    one object table."""


class FakeStatusAPI:
    """GET and status PATCH of one object (a PodGroup, a CompositePodGroup): the seam of the group
    condition reporters. A PATCH answers Conflict (``conflict``) or another error (``error``)
    when told to, else replaces the status; ``gets``, ``paths`` and ``patches`` record the calls."""

    def __init__(self, obj: Obj | None, conflict: bool = False, error: int | None = None) -> None:
        self.obj = obj
        self.patches: list[tuple[str, Obj]] = []
        self.paths: list[str] = []
        self.gets = 0
        self.conflict = conflict
        self.error = error

    async def get(self, path: str) -> Obj | None:
        self.gets += 1
        self.paths.append(path)
        return self.obj

    async def patch(self, path: str, body: Obj, patch_type: str = "merge") -> Obj:
        if self.conflict:
            raise Conflict(409, "Conflict", "changed")
        if self.error:
            raise KubeError(self.error, "Forbidden", "no")
        self.patches.append((path, body))
        assert self.obj is not None
        self.obj = {**self.obj, "status": body["status"]}
        return self.obj
