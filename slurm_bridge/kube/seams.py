"""The narrow Kubernetes seams a consumer declares instead of taking the whole ``KubeClient``.

The Slurm side does the same (``SlurmJobDevices``, ``SlurmNodes``, ...): a consumer names the
calls it makes, a reader sees what it can do to the API server, and the unit tests give it one
fake per seam (``tests/unit/kubefakes.py``). ``KubeClient`` satisfies every one of them; only the
processes' wiring, which builds the clients, names ``KubeClient`` itself (tests/repo/test_seams.py).

The small seams name one kind of call each; a consumer of several takes their composition, named
for it, below them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import PatchType

# ---- the small seams: one kind of call each -------------------------------------------------------


class KubeGets(Protocol):
    """GETs one object by path (None when absent)."""

    async def get(self, path: str) -> Obj | None: ...


class KubeReads(KubeGets, Protocol):
    """GETs by path (None when absent); a collection with ``params`` (a field selector) lists."""

    async def get(self, path: str, params: dict[str, str] | None = None) -> Obj | None: ...


class KubeCreates(Protocol):
    """Creates (a 409 is ``Conflict``)."""

    async def create(self, path: str, obj: Obj) -> Obj: ...


class KubePatches(Protocol):
    """Patches of the three types (a stale one is ``Conflict``)."""

    async def patch(self, path: str, patch: Any, patch_type: PatchType = "merge") -> Obj: ...


class KubeWrites(KubeCreates, KubePatches, Protocol):
    """Creates and patches (a 409 is ``Conflict``)."""


class KubeDeletes(Protocol):
    """Deletes, optionally that incarnation only (a ``uid`` precondition); None when already gone."""

    async def delete(self, path: str, *, uid: str | None = None, grace_seconds: int | None = None) -> Obj | None: ...


class KubeReplaces(Protocol):
    """PUTs an object whole (``request("PUT", path, body=...)``): its resourceVersion guards the race."""

    async def request(self, method: str, path: str, *, body: Obj) -> Obj: ...


class KubeEvents(Protocol):
    """Events about an object, for the person who owns it."""

    async def event(self, obj: Obj, reason: str, message: str, *, warning: bool = False, action: str = "") -> None: ...


class KubeListWatch(Protocol):
    """A collection's list pages (``request("GET", ...)``) and watch events: an informer's calls."""

    async def request(self, method: str, path: str, *, params: dict[str, str], accept: str | None = None) -> Obj: ...

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        timeout_seconds: int,
        params: dict[str, str],
        accept: str | None = None,
    ) -> AsyncGenerator[Obj, None]: ...


class KubeBinds(Protocol):
    """Binds a pod (that incarnation: its uid) to a node."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class KubeCloses(Protocol):
    """Closes the client's connections (once its Events are posted), at the end."""

    async def aclose(self) -> None: ...


class KubeWriteCounts(Protocol):
    """The writes sent, by verb and resource (``kube.client.write_kind``): the operator's /stats."""

    @property
    def writes(self) -> Mapping[str, int]: ...


# ---- what each consumer takes: the small seams composed -------------------------------------------


class StatusKube(KubeGets, KubePatches, Protocol):
    """The group-condition writers' calls: GET an object by path, patch its status."""


class LeaseKube(KubeGets, KubeCreates, KubeReplaces, Protocol):
    """The leader election's calls: reads its Lease, creates it once, replaces it to take or renew it."""


class CacheKube(KubeGets, KubeListWatch, Protocol):
    """A watch cache's calls: lists and watches a collection, GETs one object the watch has not
    delivered yet (a namespace created a moment ago)."""


class ExtenderKube(KubeBinds, KubeCloses, Protocol):
    """The scheduler extender's calls: binds the pods it placed, closes the client with its app."""


class ConditionKube(KubePatches, KubeEvents, Protocol):
    """The condition writers' calls (a node's, a TenantPolicy's): patch the status, tell of the change."""


class FitKube(KubeReads, ConditionKube, Protocol):
    """The resources-fit check's calls: lists a node's other pods, writes the node's condition."""


class DeviceMatchKube(CacheKube, ConditionKube, Protocol):
    """The device match's calls: watches the ResourceSlices, writes the node's condition."""


class NodeKube(FitKube, DeviceMatchKube, Protocol):
    """The node controller's calls (its parts' too): reads and patches nodes, lists their pods,
    watches the ResourceSlices and the device taint rules, tells of what it did."""


class GuardKube(KubeEvents, KubeListWatch, Protocol):
    """The node guard's calls: watches the other schedulers' pods, tells of a drain."""


class DeviceKube(KubeReads, KubeWrites, KubeEvents, Protocol):
    """The DRA binder's calls: reads slices and claims, creates and patches claims, tells of a miss."""


class ReconfigureKube(KubeGets, KubePatches, KubeEvents, Protocol):
    """The option reconciler's calls: reads and JSON-patches PlaceholderJobs, tells of a refusal."""


class PlacesKube(KubeReads, KubeWrites, KubeDeletes, Protocol):
    """The places' calls: list, create, patch and delete their ConfigMaps."""


class PodWritesKube(KubeGets, KubePatches, KubeDeletes, KubeEvents, Protocol):
    """The member pods' writer's calls: reads, patches and ends pods, tells their owners."""


class MembershipKube(KubeGets, KubeWrites, KubeDeletes, KubeEvents, Protocol):
    """Membership's calls: reads pods and their owners, creates, patches and deletes
    PlaceholderJobs, tells of a refusal."""


class ShellKube(KubeReads, KubeWrites, KubeDeletes, KubeEvents, Protocol):
    """The PlaceholderJob shell's calls (its parts' too): reads, patches and ends pods,
    PlaceholderJobs and claims, tells their owners."""


class PlaceholderJobsKube(ShellKube, KubeListWatch, KubeWriteCounts, Protocol):
    """The PlaceholderJob controller's: its parts' calls, the workloads' annotation watches, and
    the count of writes for /stats."""
