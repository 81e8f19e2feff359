"""submit.Placer (operator/placeholderjobs/slurmjobs/submit.py): immediate allocation first, the queue
when Slurm cannot start the job now, and the per-partition pause after refusals (a fake Slurm
client: pure decision logic only)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from slurm_bridge.core.config import Config
from slurm_bridge.operator.placeholderjobs.slurmjobs import submit as controller_module
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import decode_admin_comment, encode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import Placer
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmErrorDetail, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, JobRequest
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


@pytest.mark.parametrize(("identity", "as_user"), [({"user_id": 2001}, "2001"), ({"user_name": "alice"}, "alice")])
async def test_a_job_for_another_user_is_allocated_as_that_user_never_as_the_token_user(
    clock: list[float], identity: dict[str, Any], as_user: str
) -> None:
    """slurmrestd's job/allocate ignores user_id (the job would run as the bridge's Slurm user),
    but runs as the user the call names (X-SLURM-USER-NAME, with SlurmUser's token)."""
    slurm = FakeSubmits()
    assert await make(slurm).place(JobRequest(partition="p", **identity), "n", "c") == 101
    assert slurm.calls == [f"allocate as {as_user} p", "mark 101"] and slurm.as_users == [as_user]


async def test_an_allocated_jobs_comment_asks_slurmctlds_hook_for_its_end_only(clock: list[float]) -> None:
    """Its start is in the allocation's answer (slurm-bridge-notify.sh reads the comment); a job
    allocated as a tenant carries the bridge's marker in the same comment until it is marked."""
    slurm = FakeSubmits()
    marker = encode_admin_comment(PhjRef("b", "ns", "pod", "uid"), handoff="cores")
    await make(slurm).place(JobRequest(partition="p"), "n", marker)
    await make(slurm).place(JobRequest(partition="p", user_name="alice"), "n", marker)
    plain, tenants = slurm.job_comments
    assert plain == 'slurm-bridge:{"notify":"ended"}'
    assert tenants is not None and '"notify":"ended"' in tenants
    assert decode_admin_comment(tenants) == decode_admin_comment(marker), "a tenant's job is still found by its comment"


@pytest.mark.parametrize("identity", [{"group_id": 2001}, {"group_name": "team-a"}])
async def test_a_job_that_names_only_a_group_is_queued(clock: list[float], identity: dict[str, Any]) -> None:
    """Only job/submit sets a group; an allocation as the token's user would ignore it."""
    slurm = FakeSubmits()
    assert await make(slurm).place(JobRequest(partition="p", **identity), "n", "c") == 101
    assert slurm.calls == ["submit p"]


def _ran_as(job_id: int, user: str, uid: int, group: str, gid: int) -> JobInfo:
    return JobInfo(job_id=job_id, states=("RUNNING",), user_name=user, user_id=uid, group_name=group, group_id=gid)


async def test_a_tenants_job_in_their_primary_group_is_kept(clock: list[float]) -> None:
    slurm, req = FakeSubmits(), JobRequest(partition="p", user_name="alice", group_id=2001)
    placer = make(slurm)
    job_id = await placer.place(req, "n", "c")
    assert placer.verify(req, job_id, _ran_as(job_id, "alice", 2001, "team-a", 2001))
    assert await placer.place(req, "n", "c") == 102 and slurm.calls[-2:] == ["allocate as alice p", "mark 102"]


async def test_a_tenants_job_in_another_group_is_refused_and_later_ones_are_queued(clock: list[float]) -> None:
    """The request names group 3000; Slurm allocated as alice in her primary group 2001: the
    job must not be used (the caller cancels it) and alice's jobs for group 3000 are queued."""
    slurm, req = FakeSubmits(), JobRequest(partition="p", user_name="alice", group_id=3000)
    placer = make(slurm)
    job_id = await placer.place(req, "n", "c")
    assert not placer.verify(req, job_id, _ran_as(job_id, "alice", 2001, "team-a", 2001))
    assert await placer.place(req, "n", "c") == 102 and slurm.calls[-1] == "submit p"
    assert placer.verify(req, 102, None), "a queued job is not checked: job/submit set its group"
    same = JobRequest(partition="p", user_name="alice", group_id=2001)
    await placer.place(same, "n", "c")
    assert slurm.calls[-2] == "allocate as alice p", "her primary group still allocates at once"


async def test_an_unread_tenants_job_is_kept_only_when_no_group_is_asked_for(clock: list[float]) -> None:
    slurm = FakeSubmits()
    placer = make(slurm)
    plain, grouped = JobRequest(user_name="bob"), JobRequest(user_name="alice", group_id=2001)
    assert placer.verify(plain, await placer.place(plain, "n", "c"), None), "the user is certain"
    assert not placer.verify(grouped, await placer.place(grouped, "n", "c"), None), "the group is not"
    await placer.place(grouped, "n", "c")
    assert slurm.calls[-1] == "submit", "alice's group is unknown: queued"


async def test_a_token_that_may_not_act_as_another_user_queues_tenants_from_then_on(clock: list[float]) -> None:
    slurm = FakeSubmits()
    slurm.as_user_refusal = SlurmAuthError("511 Protocol authentication error", status=511)
    placer = make(slurm)
    assert await placer.place(JobRequest(partition="p", user_name="alice"), "n", "c") == 101
    assert slurm.calls == ["allocate as alice", "submit p"] and not placer.as_tenant
    assert "p" not in placer.queue_only, "the partition is not paused: it was not full"
    await placer.place(JobRequest(partition="p", user_name="bob"), "n", "c")
    assert slurm.calls[-1] == "submit p"
    await placer.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls[-1] == "allocate p", "the bridge's own jobs still allocate at once"


@pytest.mark.parametrize(
    "failure", [SlurmUnavailable("down"), SlurmError("no", errors=[SlurmErrorDetail("denied", 2002)])]
)
async def test_a_tenants_job_that_cannot_be_marked_as_the_bridges_is_cancelled(
    clock: list[float], failure: SlurmError
) -> None:
    """A user may not set admin_comment: the job carries the mark in comment until the bridge sets
    it. Unmarked, nothing would find it again after a restart: it is cancelled, and the submit
    counts as failed (a refusal also stops allocating as tenants)."""
    slurm = FakeSubmits()
    slurm.mark_refusal = failure
    placer = make(slurm)
    with pytest.raises(SlurmUnavailable) as failed:
        await placer.place(JobRequest(partition="p", user_name="alice"), "n", "c")
    assert slurm.calls == ["allocate as alice p", "mark 101", "cancel 101"]
    assert not failed.value.maybe_applied, "cancelled: nothing is left"
    assert placer.as_tenant is isinstance(failure, SlurmUnavailable)
