"""The narrow Kubernetes seams a consumer declares instead of taking the whole ``KubeClient``.

The Slurm side does the same (``SlurmJobDevices``, ``SlurmNodes``, ...): a consumer names the
calls it makes, a reader sees what it can do to the API server, and the unit tests give it one
fake per seam (``tests/unit/kubefakes.py``). ``KubeClient`` satisfies every one of them.
"""

from __future__ import annotations

from typing import Any, Protocol

from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import PatchType


class KubeReads(Protocol):
    """GETs by path (None when absent); a collection with ``params`` (a field selector) lists."""

    async def get(self, path: str, params: dict[str, str] | None = None) -> Obj | None: ...


class KubeWrites(Protocol):
    """Creates and patches (a 409 is ``Conflict``)."""

    async def create(self, path: str, obj: Obj) -> Obj: ...

    async def patch(self, path: str, patch: Any, patch_type: PatchType = "merge") -> Obj: ...


class KubeEvents(Protocol):
    """Events about an object, for the person who owns it."""

    async def event(self, obj: Obj, reason: str, message: str, *, warning: bool = False, action: str = "") -> None: ...


class StatusKube(Protocol):
    """The group-condition writers' calls: GET an object by path, patch its status."""

    async def get(self, path: str) -> Obj | None: ...

    async def patch(self, path: str, patch: Any, patch_type: PatchType = "merge") -> Obj: ...


class DeviceKube(KubeReads, KubeWrites, KubeEvents, Protocol):
    """The DRA binder's calls: reads slices and claims, creates and patches claims, tells of a miss."""


class ReconfigureKube(KubeReads, KubeWrites, KubeEvents, Protocol):
    """The option reconciler's calls: reads and JSON-patches PlaceholderJobs, tells of a refusal."""
