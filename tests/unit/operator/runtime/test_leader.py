"""Leader election: expiry judged by the local monotonic clock (never by the holder's timestamps),
takeover, and release at shutdown. The Lease store is a dict with resourceVersion conflicts."""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurm_bridge.kube.client import Conflict
from slurm_bridge.operator.runtime.leader import LeaderElector
from tests.harness import wait_for_async

PATH = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/bridge-operator"


class FakeLeases:
    """One Lease, stored as the API server would: create once, PUT only at the current version."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.puts = 0
        self.fail_puts = 0  # the next PUTs that fail as a broken connection would
        self.hang = asyncio.Event()  # set: PUTs never answer (a dead connection without RST)
        self.target_puts, self.reached = 0, asyncio.Event()  # set once puts >= target_puts
        self.lost_answers = False  # writes are applied, but their answers never come back
        self.gate: asyncio.Event | None = None  # set to an unset Event: writes wait for it, then apply
        self.waiting = asyncio.Event()  # set once a write waits at the gate

    async def get(self, path: str) -> dict[str, Any] | None:
        assert path == PATH
        return copy.deepcopy(self.lease)

    async def _at_gate(self) -> None:
        """A write the API server received but has not applied yet."""
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        await self._at_gate()
        if self.lease is not None:
            raise Conflict(409, "AlreadyExists", "exists")
        self.version += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        if self.lost_answers:
            await asyncio.Event().wait()
        return copy.deepcopy(self.lease)

    async def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        assert (method, path) == ("PUT", PATH) and self.lease is not None
        if self.hang.is_set():
            await asyncio.Event().wait()
        await self._at_gate()
        if self.fail_puts:
            self.fail_puts -= 1
            raise ConnectionResetError("connection reset by peer")
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "the object has been modified")
        self.version += 1
        self.puts += 1
        if self.target_puts and self.puts >= self.target_puts:
            self.reached.set()
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        if self.lost_answers:
            await asyncio.Event().wait()
        return copy.deepcopy(self.lease)

    def holder(self) -> str | None:
        assert self.lease is not None
        holder: str | None = self.lease["spec"].get("holderIdentity")
        return holder


class Clocks:
    """A replica's monotonic clock and its wall clock, which may be skewed from the others'."""

    def __init__(self, skew: timedelta = timedelta(0)) -> None:
        self.mono = 1000.0
        self.skew = skew

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> datetime:
        return datetime(2026, 11, 22, 12, 0, tzinfo=UTC) + timedelta(seconds=self.mono) + self.skew


def elector(store: FakeLeases, identity: str, clocks: Clocks) -> LeaderElector:
    return LeaderElector(
        store,
        "ns",
        "bridge-operator",
        identity=identity,
        lease_seconds=15,
        clock=clocks.monotonic,
        wall_clock=clocks.wall,
    )


async def test_the_first_candidate_creates_the_lease_and_the_second_waits() -> None:
    store, ca, cb = FakeLeases(), Clocks(), Clocks()
    a, b = elector(store, "a", ca), elector(store, "b", cb)
    assert await a.try_acquire()
    assert store.holder() == "a"
    assert not await b.try_acquire()


@pytest.mark.parametrize("skew", [timedelta(hours=-1), timedelta(hours=1), timedelta(0)])
async def test_a_renewing_holder_keeps_the_lease_whatever_the_clock_skew(skew: timedelta) -> None:
    # The holder's wall clock is an hour behind or ahead of the candidate's: comparing its
    # renewTime with the local clock would steal a live lease (behind) or never expire (ahead).
    store, holder_clock, candidate_clock = FakeLeases(), Clocks(skew), Clocks()
    holder, candidate = elector(store, "holder", holder_clock), elector(store, "candidate", candidate_clock)
    assert await holder.try_acquire()
    for _ in range(10):  # 50 s of renewals every 5 s: far longer than the 15 s lease
        assert not await candidate.try_acquire()
        holder_clock.mono += 5
        candidate_clock.mono += 5
        assert await holder.try_acquire()
    assert store.holder() == "holder"


@pytest.mark.parametrize("skew", [timedelta(hours=-1), timedelta(hours=1)])
async def test_a_silent_holder_loses_the_lease_after_its_duration_of_local_time(skew: timedelta) -> None:
    store, holder_clock, candidate_clock = FakeLeases(), Clocks(skew), Clocks()
    holder, candidate = elector(store, "holder", holder_clock), elector(store, "candidate", candidate_clock)
    assert await holder.try_acquire()
    assert not await candidate.try_acquire()  # first sight of this record starts the local timer
    candidate_clock.mono += 14.9
    assert not await candidate.try_acquire()
    candidate_clock.mono += 0.2
    assert await candidate.try_acquire()
    assert store.holder() == "candidate"
    assert store.lease is not None and store.lease["spec"]["leaseTransitions"] == 1


async def test_the_timer_restarts_at_every_renewal_the_candidate_sees() -> None:
    store, holder_clock, candidate_clock = FakeLeases(), Clocks(), Clocks()
    holder, candidate = elector(store, "holder", holder_clock), elector(store, "candidate", candidate_clock)
    assert await holder.try_acquire()
    assert not await candidate.try_acquire()
    candidate_clock.mono += 10
    holder_clock.mono += 10
    assert await holder.try_acquire()  # renewed: a new record
    candidate_clock.mono += 10  # 20 s since the first sight, 10 s since the renewal
    assert not await candidate.try_acquire()
    candidate_clock.mono += 15.1
    assert await candidate.try_acquire()


async def test_release_hands_the_lease_over_at_once() -> None:
    store, ca, cb = FakeLeases(), Clocks(), Clocks()
    a, b = elector(store, "a", ca), elector(store, "b", cb)
    assert await a.try_acquire()
    a.is_leader.set()
    assert not await b.try_acquire()
    await a.release()
    assert store.lease is not None
    assert store.holder() is None and store.lease["spec"]["leaseDurationSeconds"] == 1
    assert not a.is_leader.is_set()
    assert await b.try_acquire(), "an empty holder is free to take, with no wait for expiry"
    assert store.holder() == "b"


async def test_release_writes_nothing_unless_this_replica_holds_the_lease() -> None:
    store, ca, cb = FakeLeases(), Clocks(), Clocks()
    a, b = elector(store, "a", ca), elector(store, "b", cb)
    await b.release()  # never led: no Lease to touch
    assert store.lease is None
    assert await a.try_acquire()
    b.is_leader.set()  # believes it leads, but the Lease says otherwise
    puts = store.puts
    await b.release()
    assert store.puts == puts and store.holder() == "a"


async def test_a_holder_whose_wall_clock_steps_back_still_renews() -> None:
    # An NTP step moves the holder's clock back an hour between renewals: its renewTime goes
    # backwards, which is still a change of the record, so the lease stays alive.
    store, holder_clock, candidate_clock = FakeLeases(), Clocks(), Clocks()
    holder, candidate = elector(store, "holder", holder_clock), elector(store, "candidate", candidate_clock)
    assert await holder.try_acquire()
    assert not await candidate.try_acquire()
    for step in range(6):
        holder_clock.skew -= timedelta(hours=1) if step == 2 else timedelta(0)
        holder_clock.mono += 5
        candidate_clock.mono += 5
        assert await holder.try_acquire()
        assert not await candidate.try_acquire()
    assert store.holder() == "holder"


@pytest.mark.parametrize("skew", [timedelta(days=-3), timedelta(days=3)])
async def test_an_unchanged_renew_time_expires_after_the_duration_even_far_in_the_future_or_past(
    skew: timedelta,
) -> None:
    store, holder_clock, candidate_clock = FakeLeases(), Clocks(skew), Clocks()
    holder, candidate = elector(store, "holder", holder_clock), elector(store, "candidate", candidate_clock)
    assert await holder.try_acquire()
    for _ in range(3):  # the candidate keeps looking: the unchanged record does not restart the timer
        assert not await candidate.try_acquire()
        candidate_clock.mono += 5
    candidate_clock.mono += 0.1  # 15.1 s of local time since it first saw the record
    assert await candidate.try_acquire()


async def leases_left_by_a_gone_replica() -> FakeLeases:
    """A Lease that exists, released by its last holder: acquiring it is a PUT, not a create."""
    store = FakeLeases()
    other = elector(store, "gone", Clocks())
    assert await other.try_acquire()
    other.is_leader.set()
    await other.release()
    return store


@pytest.mark.parametrize("existing", [False, True], ids=["create", "put"])
async def test_a_stop_that_cuts_an_acquisition_short_still_releases_what_it_took(existing: bool) -> None:
    # SIGTERM while the acquiring write is in flight: the API server applied it, the answer never
    # came. The replica never knew it led, but the Lease names it: release must empty it.
    store, lost = await leases_left_by_a_gone_replica() if existing else FakeLeases(), asyncio.Event()
    store.lost_answers = True
    e = running_elector(store, lost)
    task = asyncio.create_task(e.run())
    await wait_for_async(lambda: store.lease is not None and store.holder() == "leader", 5, "the write to land")
    task.cancel()
    await asyncio.wait([task])
    store.lost_answers = False
    assert not e.is_leader.is_set()
    await e.release()
    assert store.holder() is None, "the Lease is free at once, not after its 15 s"


@pytest.mark.parametrize("existing", [False, True], ids=["create", "put"])
async def test_a_stop_during_an_acquisition_waits_for_its_write_then_releases_what_it_took(existing: bool) -> None:
    # SIGTERM while the acquiring write is on its way: the API server has not applied it yet when
    # the stop reads the Lease, and applies it after. The write must not be cut off client-side
    # (the server may apply it anyway); the release waits for its answer, then empties the Lease.
    store, lost = await leases_left_by_a_gone_replica() if existing else FakeLeases(), asyncio.Event()
    store.gate = asyncio.Event()
    e = running_elector(store, lost)
    task = asyncio.create_task(e.run())
    await asyncio.wait_for(store.waiting.wait(), 5)
    task.cancel()
    await asyncio.wait([task])
    stop = asyncio.create_task(e.release())
    done, _ = await asyncio.wait([stop], timeout=0.1)
    assert not done, "the release read the Lease while this replica's write could still land"
    store.gate.set()
    await asyncio.wait_for(stop, 5)
    assert store.holder() is None, "the Lease is free at once, not after its 15 s"
    assert not lost.is_set() and not e.is_leader.is_set()


async def test_a_release_the_api_server_does_not_answer_gives_up_within_its_time() -> None:
    store, lost = FakeLeases(), asyncio.Event()
    e = running_elector(store, lost)
    assert await e.try_acquire()
    e.is_leader.set()
    store.lost_answers = True
    started = time.monotonic()
    await asyncio.wait_for(e.release(seconds=0.2), 5)
    assert time.monotonic() - started < 1.0, "a stop must not wait on an API server that does not answer"
    assert not e.is_leader.is_set()


def running_elector(store: FakeLeases, lost: asyncio.Event, **kw: Any) -> LeaderElector:
    return LeaderElector(
        store,
        "ns",
        "bridge-operator",
        identity="leader",
        lease_seconds=15,
        renew_seconds=0.05,
        renew_deadline=1.0,
        retry_seconds=0.05,
        on_lost=lost.set,
        **kw,
    )


async def test_a_hanging_renewal_ends_leadership_at_the_renew_deadline() -> None:
    store, lost = FakeLeases(), asyncio.Event()
    e = running_elector(store, lost)
    task = asyncio.create_task(e.run())
    await asyncio.wait_for(e.is_leader.wait(), 5)
    store.hang.set()
    started = time.monotonic()
    await asyncio.wait_for(lost.wait(), 5)
    # Cut off at the renew deadline (1 s after the last renewal), far before the 15 s lease
    # runs out on a standby, although the PUT itself never returned.
    assert time.monotonic() - started < 3.0
    assert not e.is_leader.is_set()
    await asyncio.wait_for(task, 1)


async def test_failed_renewals_are_retried_within_the_deadline() -> None:
    store, lost = FakeLeases(), asyncio.Event()
    e = running_elector(store, lost)
    task = asyncio.create_task(e.run())
    await asyncio.wait_for(e.is_leader.wait(), 5)
    store.fail_puts = 3  # 3 failures at 0.05 s intervals fit in the 1 s deadline
    store.target_puts = store.puts + 3
    await asyncio.wait_for(store.reached.wait(), 5)  # renewals resumed after the failures
    assert not lost.is_set() and e.is_leader.is_set()
    await e.release()
    await asyncio.wait_for(task, 1)
    assert store.holder() is None and not lost.is_set()


def test_the_renew_deadline_must_fit_in_the_lease() -> None:
    with pytest.raises(ValueError, match="renew_deadline < lease_seconds"):
        LeaderElector(FakeLeases(), "ns", "x", lease_seconds=10, renew_deadline=10)
