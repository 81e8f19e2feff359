"""Lease-based leader election (coordination.k8s.io/v1), as Kubernetes controllers do it.

Only the leader talks to Slurm and writes; standby replicas keep their watch caches warm.
Losing the lease ends the process: a restart is the only way to be sure no old work continues.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

from slurm_bridge.kube import Conflict, KubeClient

log = logging.getLogger(__name__)


def _micro(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    return datetime.strptime(ts.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")


class LeaderElector:
    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        name: str,
        *,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
        identity: str | None = None,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.namespace, self.name = namespace, name
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.is_leader = asyncio.Event()

    def _spec(self, acquire: datetime, transitions: int) -> dict[str, Any]:
        now = datetime.now(UTC)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": _micro(acquire),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    async def try_acquire(self) -> bool:
        lease = await self.kube.get(self.path)
        now = datetime.now(UTC)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, 0)}  # fmt: skip
            try:
                await self.kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body)
                return True
            except Conflict:
                return False
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime")) or datetime.fromtimestamp(0, UTC)
        duration = timedelta(seconds=spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and renewed + duration > now:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        acquire = (_parse(spec.get("acquireTime")) or now) if holder == self.identity else now
        lease["spec"] = self._spec(acquire, transitions)
        try:
            await self.kube.request("PUT", self.path, body=lease)  # resourceVersion guards the race
            return True
        except Conflict:
            return False

    async def run(self) -> None:
        """Acquire, then renew until the process ends; exits the process if the lease is lost."""
        while not self.is_leader.is_set():
            try:
                if await self.try_acquire():
                    log.info("became leader (%s, lease %s/%s)", self.identity, self.namespace, self.name)
                    self.is_leader.set()
                    break
            except Exception as e:
                log.warning("leader election: %s", e)
            await asyncio.sleep(self.renew_seconds / 2)
        deadline = asyncio.get_running_loop().time() + self.lease_seconds
        while True:
            await asyncio.sleep(self.renew_seconds)
            try:
                if await self.try_acquire():
                    deadline = asyncio.get_running_loop().time() + self.lease_seconds
                    continue
                log.error("lost the leader lease to another replica; exiting")
            except Exception as e:
                if asyncio.get_running_loop().time() < deadline:
                    log.warning("lease renewal failed, will retry: %s", e)
                    continue
                log.error("could not renew the leader lease before it expired (%s); exiting", e)
            os._exit(1)
