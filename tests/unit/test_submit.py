"""submit.Placer (operator/placeholderjobs/slurmjobs/submit.py): immediate allocation first, the queue
when Slurm cannot start the job now, and the per-partition pause after refusals (a fake Slurm
client: pure decision logic only)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from slurm_bridge.config import Config
from slurm_bridge.operator.placeholderjobs.slurmjobs import submit as controller_module
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import Placer
from slurm_bridge.slurm.errors import SlurmError, SlurmErrorDetail, SlurmUnavailable
from slurm_bridge.slurm.models import JobRequest
from tests.unit.fakes import FakeSubmits

BUSY = SlurmError("refused", errors=[SlurmErrorDetail("Requested nodes are busy", 2016)])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


def make(slurm: FakeSubmits, **cfg: Any) -> Placer:
    return Placer(slurm, Config(**cfg).immediateAllocation)


async def test_allocates_at_once_when_slurm_can(clock: list[float]) -> None:
    slurm = FakeSubmits()
    c = make(slurm)
    assert await c.place(JobRequest(partition="p"), "n", "c") == 101
    assert slurm.calls == ["allocate p"]


async def test_refusal_queues_the_job_and_pauses_the_partition(clock: list[float]) -> None:
    slurm = FakeSubmits()
    c = make(slurm)
    slurm.allocate_refusal = BUSY
    assert await c.place(JobRequest(partition="p"), "n", "c") == 101
    assert slurm.calls == ["allocate p", "submit p"]
    slurm.calls.clear()
    await c.place(JobRequest(partition="p"), "n", "c")
    await c.place(JobRequest(partition="q"), "n", "c")
    assert slurm.calls == ["submit p", "allocate q", "submit q"], "only the refused partition queues directly"

    slurm.calls.clear()
    clock[0] += controller_module.IMMEDIATE_RETRY_MIN_SECONDS
    await c.place(JobRequest(partition="p"), "n", "c")  # refused again: the pause doubles
    clock[0] += controller_module.IMMEDIATE_RETRY_MIN_SECONDS
    await c.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls == ["allocate p", "submit p", "submit p"]

    slurm.calls.clear()
    slurm.allocate_refusal = None
    clock[0] += 2 * controller_module.IMMEDIATE_RETRY_MIN_SECONDS
    await c.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls == ["allocate p"] and "p" not in c.queue_only, "a success starts over"


async def test_pause_is_capped(clock: list[float]) -> None:
    slurm = FakeSubmits()
    slurm.allocate_refusal = BUSY
    c = make(slurm)
    for _ in range(10):
        await c.place(JobRequest(partition="p"), "n", "c")
        clock[0] += c.queue_only["p"][1]
    assert c.queue_only["p"][1] == controller_module.IMMEDIATE_RETRY_MAX_SECONDS


async def test_a_request_slurm_refuses_outright_does_not_pause_the_partition(clock: list[float]) -> None:
    slurm = FakeSubmits()
    slurm.allocate_refusal = slurm.submit_refusal = SlurmError(
        "refused", errors=[SlurmErrorDetail("Invalid account or account/partition combination specified", 2045)]
    )
    c = make(slurm)
    with pytest.raises(SlurmError, match="refused"):
        await c.place(JobRequest(partition="p"), "n", "c")
    assert "p" not in c.queue_only


@pytest.mark.parametrize("failure", [SlurmUnavailable("down", maybe_applied=True)])
async def test_an_allocation_that_may_have_happened_is_never_followed_by_a_submit(
    clock: list[float], failure: SlurmError
) -> None:
    slurm = FakeSubmits()
    slurm.allocate_refusal = failure
    c = make(slurm)
    with pytest.raises(SlurmUnavailable):
        await c.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls == ["allocate p"], "a second job would be a duplicate"


async def test_immediate_allocation_off_always_queues(clock: list[float]) -> None:
    slurm = FakeSubmits()
    c = make(slurm, immediateAllocation=False)
    await c.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls == ["submit p"]


@pytest.mark.parametrize(
    "identity", [{"user_id": 2001}, {"group_id": 2001}, {"user_name": "alice"}, {"group_name": "team-a"}]
)
async def test_a_job_for_another_user_is_queued_never_allocated_as_the_token_user(
    clock: list[float], identity: dict[str, Any]
) -> None:
    """slurmrestd's job/allocate ignores user_id: the job would run as the bridge's Slurm user."""
    slurm = FakeSubmits()
    assert await make(slurm).place(JobRequest(partition="p", **identity), "n", "c") == 101
    assert slurm.calls == ["submit p"]
