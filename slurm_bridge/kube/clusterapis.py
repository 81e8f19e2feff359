"""What the API server serves, found by discovery and remembered for a while.

The operator (which Workload API version to read PodGroups at) and the webhook (whether a pod's
``spec.schedulingGroup`` or DRA request can work at all on this cluster) ask the same questions:
the Kubernetes version (``GET /version``), the served Workload API version, and whether
``resource.k8s.io/v1`` serves ResourceClaims. Each answer is one or two discovery GETs, kept for
``ttl`` seconds (an administrator who turns a feature gate on restarts the API server; the bridge
notices within that time, without a restart of its own). Concurrent askers share one read. The
decisions themselves are pure, in :mod:`slurm_bridge.kube.schedulingapi`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from slurm_bridge.core.objects import Obj
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import KubeError
from slurm_bridge.kube.schedulingapi import KubeVersion

# GET an API path: the document, None when the server answers 404; other errors raise KubeError.
Getter = Callable[[str], Awaitable[Obj | None]]

DEFAULT_TTL: Final = 60.0
# A missing API is looked for again sooner: it appears when an administrator turns it on.
MISSING_TTL: Final = 10.0


class Discovery:
    """Cached discovery answers through ``get``."""

    def __init__(self, get: Getter, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self._get = get
        self.ttl = ttl
        self._clock = clock
        self._cache: dict[str, tuple[float, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _cached(self, key: str, load: Callable[[], Awaitable[Any]], ttl: Callable[[Any], float]) -> Any:
        hit = self._cache.get(key)
        if hit is not None and hit[0] > self._clock():
            return hit[1]
        async with self._locks.setdefault(key, asyncio.Lock()):
            hit = self._cache.get(key)
            if hit is not None and hit[0] > self._clock():
                return hit[1]
            value = await load()  # a KubeError is not cached: the next ask tries again
            self._cache[key] = (self._clock() + ttl(value), value)
            return value

    def forget(self) -> None:
        """Drop every answer: a read at a remembered version failed, so the server changed."""
        self._cache.clear()

    async def kube_version(self) -> KubeVersion:
        """The API server's version; unknown (never an error) when ``/version`` cannot be read."""

        async def load() -> KubeVersion:
            try:
                return schedulingapi.kube_version(await self._get("/version"))
            except KubeError:
                return KubeVersion()

        version: KubeVersion = await self._cached("version", load, lambda v: self.ttl if v.minor else MISSING_TTL)
        return version

    async def workload_versions(self) -> dict[str, frozenset[str]]:
        """Every served version of the Workload API group with its resources (version -> names)."""

        async def load() -> dict[str, frozenset[str]]:
            group = schedulingapi.GROUP
            doc = await self._get(f"/apis/{group}")
            served: dict[str, frozenset[str]] = {}
            for version in schedulingapi.served_versions(doc):
                if version != "v1":  # PriorityClasses only
                    served[version] = schedulingapi.resource_names(await self._get(f"/apis/{group}/{version}"))
            return served

        def ttl(served: dict[str, frozenset[str]]) -> float:
            return self.ttl if schedulingapi.choose_version(served) else MISSING_TTL

        versions: dict[str, frozenset[str]] = await self._cached("workload", load, ttl)
        return versions

    async def workload_version(self) -> str | None:
        """The Workload API version to read PodGroups at (v1beta1 preferred), None when none is served."""
        return schedulingapi.choose_version(await self.workload_versions())

    async def serves_resource_claims(self) -> bool:
        """Whether resource.k8s.io/v1 serves ResourceClaims (the bridge's DRA path needs it)."""

        async def load() -> bool:
            path = f"/apis/{schedulingapi.RESOURCE_GROUP}/{schedulingapi.RESOURCE_VERSION}"
            return schedulingapi.RESOURCE_CLAIMS in schedulingapi.resource_names(await self._get(path))

        served: bool = await self._cached("resource", load, lambda v: self.ttl if v else MISSING_TTL)
        return served

    async def workload_api_missing(self, what: str) -> str | None:
        """Why ``what`` cannot work on this cluster (no Workload API the bridge reads), None when it can."""
        versions = await self.workload_versions()
        if schedulingapi.choose_version(versions):
            return None
        served = [v for v, resources in versions.items() if schedulingapi.PODGROUPS in resources]
        return schedulingapi.not_served_message(what, await self.kube_version(), served)
