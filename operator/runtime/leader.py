"""Lease-based leader election (coordination.k8s.io/v1), as client-go does it.

Only the leader talks to Slurm and writes; standby replicas keep their watch caches warm.
Losing the lease ends the process: a restart is the only way to be sure no old work continues.

Expiry is judged by this process's monotonic clock: a Lease counts as expired once its record
(holder and renew time) has not changed for ``leaseDurationSeconds`` of local time since this
replica first saw it. The holder's timestamps are never compared with the local wall clock, so
clock skew between nodes can neither steal a live lease nor keep a dead one.

The leader gives up (ends the process) when it has not renewed for ``renew_deadline`` seconds,
shorter than the lease, as client-go's RenewDeadline: every attempt is cut off at that deadline,
so a renewal hanging on a dead connection cannot keep a leader working after a standby may have
taken over. At shutdown (SIGTERM) ``release`` empties the holder so a rollout hands over at once,
also when the stop came while an acquisition's write was in flight: that write is never cut off
(the API server may apply a request whose client went away), so the release waits for its answer
and then reads a Lease that no write of this replica can still change.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slurm_bridge.kube.client import Conflict
from slurm_bridge.kube.seams import LeaseKube

log = logging.getLogger(__name__)
# The release at shutdown waits no longer for the API server: a stop must end within seconds.
RELEASE_SECONDS = 2.0


def _micro(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class _Record:
    """What identifies one renewal of a Lease: a change of any field is a sign of life."""

    holder: str
    renew_time: str
    duration: float


class LeaderElector:
    def __init__(
        self,
        kube: LeaseKube,
        namespace: str,
        name: str,
        *,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
        renew_deadline: float = 10.0,
        retry_seconds: float = 1.0,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_lost: Callable[[], None] = lambda: os._exit(1),
    ) -> None:
        if not renew_seconds < renew_deadline < lease_seconds:
            raise ValueError(
                f"need renew_seconds < renew_deadline < lease_seconds, got "
                f"{renew_seconds} < {renew_deadline} < {lease_seconds}"
            )
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.namespace, self.name = namespace, name
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.renew_deadline = renew_deadline
        self._on_lost = on_lost
        self.retry_seconds = retry_seconds
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}"
        self.is_leader = asyncio.Event()
        self._clock = clock
        self._wall = wall_clock
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._stopping = False  # set by release(): never acquire or renew again
        # The last acquiring or renewing write; None: none was ever sent, so no Lease can name this one.
        self._write: asyncio.Future[Any] | None = None

    def _spec(self, acquire: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": acquire,
            "renewTime": _micro(self._wall()),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: dict[str, Any]) -> _Record:
        record = _Record(
            holder=spec.get("holderIdentity") or "",
            renew_time=spec.get("renewTime") or "",
            duration=float(spec.get("leaseDurationSeconds") or self.lease_seconds),
        )
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        return record

    def _held_by_other(self, record: _Record) -> bool:
        if not record.holder or record.holder == self.identity:
            return False
        return self._clock() < self._observed_at + record.duration

    async def try_acquire(self) -> bool:
        if self._stopping:
            return False
        lease = await self.kube.get(self.path)
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(_micro(self._wall()), 0),
            }
            try:
                await self._send(
                    lambda: self.kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body)
                )
                return True
            except Conflict:
                return False
        spec = lease.get("spec", {})
        record = self._observe(spec)
        if self._held_by_other(record):
            return False
        ours = record.holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (not ours)
        acquire = (spec.get("acquireTime") or _micro(self._wall())) if ours else _micro(self._wall())
        lease["spec"] = self._spec(acquire, transitions)
        try:
            await self._send(lambda: self.kube.request("PUT", self.path, body=lease))  # resourceVersion guards the race
        except Conflict:
            return False
        self._observe(lease["spec"])
        return True

    async def _send(self, write: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Send an acquiring or renewing write that runs to its answer even if its caller is
        cancelled (a stop, a renew deadline): a request cut off on the client side may still be
        applied by the API server, after the release has read the Lease. ``release`` waits for it."""
        await self._settle()  # one write at a time: a renewal never races this replica's last one
        task = asyncio.ensure_future(write())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its failure is the caller's
        self._write = task
        return await asyncio.shield(task)

    async def _settle(self, within: float | None = None) -> None:
        """Wait for this replica's last write to be answered, whatever its outcome (at most
        ``within`` seconds: an answer can be lost on a broken connection)."""
        if self._write is not None and not self._write.done():
            await asyncio.wait([self._write], timeout=within)

    async def release(self, seconds: float = RELEASE_SECONDS) -> None:
        """Give the Lease up at shutdown, so a standby takes over at once rather than after expiry.

        Called only after this replica has stopped working; from then on it neither acquires nor
        renews. Like client-go, it empties the holder and shortens the duration to one second; a
        failure, or no answer within ``seconds``, just leaves the Lease to expire. A replica that
        is not leader reads the Lease only if it ever sent an acquisition; a write still in flight
        is waited for first, since the API server may apply it after any earlier read.
        """
        self._stopping = True
        was_leader = self.is_leader.is_set()
        self.is_leader.clear()
        if not (was_leader or self._write is not None):
            return
        try:
            async with asyncio.timeout(seconds):
                # A write the stop came during lands before the Lease is read; an answer that does
                # not come within half the time was lost, and the Lease shows what the write did.
                await self._settle(seconds / 2)
                await self._release()
        except Exception as e:
            log.warning(
                "could not release the leader lease %s/%s (it expires by itself): %s",
                self.namespace,
                self.name,
                str(e) or type(e).__name__,
            )

    async def _release(self) -> None:
        lease = await self.kube.get(self.path)
        if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
            return
        now = _micro(self._wall())
        lease["spec"] = {
            "holderIdentity": None,
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(lease["spec"].get("leaseTransitions") or 0),
        }
        await self.kube.request("PUT", self.path, body=lease)
        log.info("released the leader lease %s/%s", self.namespace, self.name)

    async def run(self) -> None:
        """Acquire, then renew until the process ends; exits the process if the lease is lost."""
        while not self.is_leader.is_set():
            if self._stopping:
                return
            try:
                if await self.try_acquire():
                    log.info("became leader (%s, lease %s/%s)", self.identity, self.namespace, self.name)
                    self.is_leader.set()
                    break
            except Exception as e:
                log.warning("leader election: %s", e)
            await asyncio.sleep(self.retry_seconds)
        deadline = self._clock() + self.renew_deadline
        pause = self.renew_seconds
        while True:
            await asyncio.sleep(pause)
            if self._stopping:
                return
            try:
                async with asyncio.timeout(max(deadline - self._clock(), 0.0)):
                    renewed = await self.try_acquire()
                if renewed:
                    deadline, pause = self._clock() + self.renew_deadline, self.renew_seconds
                    continue
                log.error("lost the leader lease to another replica; exiting")
            except Exception as e:
                if self._clock() < deadline:
                    log.warning("lease renewal failed, will retry: %s", e)
                    pause = min(self.retry_seconds, max(deadline - self._clock(), 0.0))
                    continue
                log.error(
                    "could not renew the leader lease within %.0f s (%s); exiting",
                    self.renew_deadline,
                    e or type(e).__name__,
                )
            if self._stopping:  # released while the last attempt was in flight: not a loss
                return
            self.is_leader.clear()
            self._on_lost()
            return
