"""In-memory views fed by watches (the work queue the controllers drain is :mod:`.workqueue`).

Nothing here is the source of truth: PlaceholderJob status and Slurm are. A restart rebuilds
these from the watches' initial lists and the first Slurm poll.

The views hold projections, not whole objects: only the fields some part of the bridge reads
(``project``). With thousands of pods and PlaceholderJobs the whole objects -- managedFields,
container commands, environments, volumes, container statuses -- were most of the operator's
memory. A reader that needs a field not kept here must add it to the projection (and its test).
"""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.kubeformats import exit_codes
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import resource_version

log = logging.getLogger(__name__)

Key = tuple[str, str]
# How long a deleted object's resourceVersion is remembered (see ObjectStore._deleted_rv).
TOMBSTONE_SECONDS = 600.0
# How many parsed objects a ParsedStore keeps (the most recently used): a PlaceholderJob is looked
# at about ten times in its pod's life, in bursts, so a small cache parses each version once.
PARSED_CACHE_SIZE = 1024
P = TypeVar("P")


# ---- projections --------------------------------------------------------------------------------
# What the bridge reads of each kind (grep the readers before dropping anything: operator/*.py,
# slurm_bridge/rules/translate.py, nodeplacement.py and dra/ read pods; nodesync.py and registration.py
# read nodes). Lists such as taints, annotations and labels are kept whole: the bridge's patches
# are computed from them.
_META = ("name", "namespace", "uid", "resourceVersion", "generation", "generateName", "labels",
         "annotations", "ownerReferences", "finalizers", "deletionTimestamp", "creationTimestamp")  # fmt: skip
# Pod spec fields read: the Slurm job request (translate.py: resources, overhead, placement,
# DRA claims), the grouping rules (groups.py), the release (schedulingGates) and the state.
_POD_SPEC = ("resources", "overhead", "restartPolicy", "affinity", "nodeSelector", "topologySpreadConstraints",
             "resourceClaims", "schedulingGates", "schedulerName", "nodeName", "schedulingGroup", "workloadRef",
             "activeDeadlineSeconds", "terminationGracePeriodSeconds")  # fmt: skip
_CONTAINER = ("name", "resources", "restartPolicy")  # resources add up (init: restartPolicy = sidecar)
_POD_STATUS = ("phase", "reason", "message", "resourceClaimStatuses")
_NODE_SPEC = ("taints", "unschedulable", "providerID")
_NODE_STATUS = ("allocatable", "capacity", "addresses")


def _pick(d: Any, keys: tuple[str, ...]) -> Obj:
    return {k: d[k] for k in keys if k in d} if isinstance(d, dict) else {}


def _meta(obj: Obj) -> Obj:
    return _pick(obj.get("metadata"), _META)


def project_pod(pod: Obj) -> Obj:
    spec = pod.get("spec") or {}
    out_spec = _pick(spec, _POD_SPEC)
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            out_spec[key] = [_pick(c, _CONTAINER) for c in spec[key]]
    status = _pick(pod.get("status"), _POD_STATUS)
    # The exit codes of its ended containers, only (the job's outcome written for sacct:
    # decisions/pods.highest_exit_code): a running container's state stays out, so it is no change.
    ended = [{"state": {"terminated": {"exitCode": code}}} for code in exit_codes(pod)]
    if ended:
        status["containerStatuses"] = ended
    return {
        "apiVersion": pod.get("apiVersion", "v1"),
        "kind": "Pod",
        "metadata": _meta(pod),
        "spec": out_spec,
        "status": status,
    }


# The node conditions the bridge reads: its own (operator/nodes/resourcesfit.py, devicematch.py). The others
# (the kubelet's heartbeats) stay out, so a heartbeat is no change.
_NODE_CONDITIONS = frozenset({names.NODE_COND_SLURM_RESOURCES_FIT, names.NODE_COND_SLURM_DEVICES_MATCH})


def project_node(node: Obj) -> Obj:
    status = _pick(node.get("status"), _NODE_STATUS)
    conditions = (node.get("status") or {}).get("conditions")
    ours = [c for c in conditions or [] if isinstance(c, dict) and c.get("type") in _NODE_CONDITIONS]
    if ours:
        status["conditions"] = ours
    return {
        "apiVersion": node.get("apiVersion", "v1"),
        "kind": "Node",
        "metadata": _meta(node),
        "spec": _pick(node.get("spec"), _NODE_SPEC),
        "status": status,
    }


def project_other(obj: Obj) -> Obj:
    """The bridge's own objects (PlaceholderJob: spec and status are all read) without the API
    server's bookkeeping (managedFields)."""
    out = {k: v for k, v in obj.items() if k != "metadata"}
    out["metadata"] = _meta(obj)
    return out


PROJECTIONS = {"Pod": project_pod, "Node": project_node}
# Strings up to this long are interned: keys, phases, node names, reasons repeat across thousands
# of objects, and each decoded copy costs its own allocation. Interned strings are freed again
# once nothing refers to them.
_INTERN_MAX = 64


def _compact(value: Any) -> Any:
    """A deep copy with interned keys and short strings: about half the memory of the decoded
    JSON, and nothing of the watch's own object is kept alive."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = sys.intern(k) if isinstance(k, str) else k
            # A decoded string, the most common value, is answered here (a call each cost more).
            if type(v) is str:
                out[key] = sys.intern(v) if len(v) <= _INTERN_MAX else v
            else:
                out[key] = _compact(v)
        return out
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if isinstance(value, str) and len(value) <= _INTERN_MAX:
        return sys.intern(value)
    return value


def project(obj: Obj) -> Obj:
    """The stored form of ``obj``: the fields the bridge reads, by its ``kind``, compacted."""
    out: Obj = _compact(PROJECTIONS.get(str(obj.get("kind", "")), project_other)(obj))
    return out


class ObjectStore:
    """Latest known version of each object by (namespace, name); never goes back in time.

    Writes the bridge makes are stored from the API's answer at once, so the next reconcile
    sees them even before the watch delivers them. Stored objects are projections (``project``):
    ``get`` and ``values`` return them, not the objects given to ``upsert``.
    """

    def __init__(self, index: Callable[[Obj], Iterable[Hashable]] | None = None) -> None:
        self._objs: dict[Key, Obj] = {}
        # An optional secondary index: ``index(obj)`` gives the values an object is found by
        # (``indexed``), e.g. the member pods of a PlaceholderJob.
        self._index_by = index
        self._index: dict[Hashable, set[Key]] = {}
        # key -> (resourceVersion, when) of deleted objects, oldest first: a late event or API
        # answer from before the delete must not bring the object back. Kept TOMBSTONE_SECONDS,
        # so a long-running operator's memory does not grow with every pod it ever saw.
        self._deleted_rv: dict[Key, tuple[int, float]] = {}

    @staticmethod
    def key_of(obj: Obj) -> Key:
        meta = objects.meta(obj)
        return (meta.get("namespace", ""), meta.get("name", ""))

    def upsert(self, obj: Obj) -> bool:
        """Store ``obj`` unless an equal or newer version is known; True when stored."""
        key = self.key_of(obj)
        rv = resource_version(obj)
        cur = self._objs.get(key)
        if cur is not None and resource_version(cur) >= rv and objects.uid(cur) == objects.uid(obj):
            return False
        if self._deleted_rv.get(key, (-1, 0.0))[0] >= rv:
            return False
        stored = project(obj)
        self._reindex(key, cur, stored)
        self._objs[key] = stored
        return True

    def observe(self, obj: Obj) -> bool:
        """``upsert`` a watch event's object; False only when it provably changes nothing a reader
        sees: a later version (same uid) of the stored object, projected equal but for its
        resourceVersion (a kubelet's condition update, managedFields). The operator's own writes
        are stored from their answers, so their echoes carry the stored resourceVersion and count
        as changes: the reconcile that wrote may wait for them."""
        key = self.key_of(obj)
        cur = self._objs.get(key)
        if cur is None or resource_version(obj) <= resource_version(cur) or objects.uid(cur) != objects.uid(obj):
            self.upsert(obj)
            return True
        stored = project(obj)
        unchanged = {
            **stored,
            "metadata": {**stored["metadata"], "resourceVersion": cur["metadata"].get("resourceVersion")},
        } == cur
        self._reindex(key, cur, stored)
        self._objs[key] = stored
        return not unchanged

    def delete(self, obj: Obj) -> None:
        key = self.key_of(obj)
        cur = self._objs.get(key)
        if cur is not None and objects.uid(cur) != objects.uid(obj):
            return  # a newer incarnation with the same name already replaced it
        self._reindex(key, self._objs.pop(key, None), None)
        now = time.monotonic()
        self._deleted_rv.pop(key, None)  # re-inserted last: the dict stays ordered by time
        self._deleted_rv[key] = (resource_version(obj), now)
        while self._deleted_rv:
            oldest = next(iter(self._deleted_rv))
            if now - self._deleted_rv[oldest][1] < TOMBSTONE_SECONDS:
                break
            del self._deleted_rv[oldest]

    def get(self, key: Key) -> Obj | None:
        return self._objs.get(key)

    def indexed(self, value: Hashable) -> list[Obj]:
        """The stored objects the index finds by ``value`` (none without an index)."""
        return [self._objs[k] for k in self._index.get(value, ())]

    def index_values(self) -> list[Hashable]:
        """Every value the index finds some stored object by."""
        return list(self._index)

    def _reindex(self, key: Key, old: Obj | None, new: Obj | None) -> None:
        if self._index_by is None:
            return
        before = set(self._index_by(old)) if old is not None else set()
        after = set(self._index_by(new)) if new is not None else set()
        for value in before - after:
            keys = self._index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[value]
        for value in after - before:
            self._index.setdefault(value, set()).add(key)

    def values(self) -> list[Obj]:
        return list(self._objs.values())

    def __len__(self) -> int:
        return len(self._objs)


class ParsedStore(ObjectStore, Generic[P]):
    """An ObjectStore that also hands out each stored object parsed (``model``), parsed once per
    stored version for the PARSED_CACHE_SIZE objects used last: the PlaceholderJob's spec and
    status were validated again on each of its reconciles (bench/log)."""

    def __init__(self, parse: Callable[[Obj], P], index: Callable[[Obj], Iterable[Hashable]] | None = None) -> None:
        super().__init__(index)
        self._parse = parse
        self._parsed: OrderedDict[Key, tuple[Obj, P]] = OrderedDict()

    def model(self, key: Key) -> P | None:
        """The stored object at ``key``, parsed; None when there is none."""
        obj = self.get(key)
        return None if obj is None else self.model_of(obj)

    def model_of(self, obj: Obj) -> P:
        """``obj`` parsed: from the cache when it is the stored version (stored objects are never
        changed in place), else parsed now."""
        key = self.key_of(obj)
        hit = self._parsed.get(key)
        if hit is not None and hit[0] is obj:
            self._parsed.move_to_end(key)
            return hit[1]
        model = self._parse(obj)
        if self.get(key) is obj:
            self._parsed[key] = (obj, model)
            self._parsed.move_to_end(key)
            if len(self._parsed) > PARSED_CACHE_SIZE:
                self._parsed.popitem(last=False)
        return model

    def delete(self, obj: Obj) -> None:
        super().delete(obj)
        if self.get(self.key_of(obj)) is None:
            self._parsed.pop(self.key_of(obj), None)
