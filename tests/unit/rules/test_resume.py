"""Preempted work comes back at its place (slurm_bridge/rules/resume.py): the decision, table-tested."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slurm_bridge import names
from slurm_bridge.rules import resume
from slurm_bridge.rules.resume import Place, ResumePolicy
from slurm_bridge.slurm.models import JobRequest

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
POLICY = ResumePolicy(keep_place=True, max_returns=3, window_seconds=600)
JOBSET = "ns/0b0e-uid/jobset-train"


@pytest.mark.parametrize(("qos_mode", "cluster_mode", "mode"), [
    (("REQUEUE",), ("CANCEL",), "REQUEUE"),  # the QOS's own mode wins
    (("CANCEL",), ("REQUEUE",), "CANCEL"),
    ((), ("REQUEUE",), "REQUEUE"),  # none: the cluster's
    (("CLUSTER",), ("REQUEUE",), "REQUEUE"),  # CLUSTER defers to slurm.conf
    (("requeue",), (), "REQUEUE"),  # any case
    (("SUSPEND", "GANG"), (), "SUSPEND"),
    (("GANG",), (), "GANG"),
    ((), ("OFF",), "OFF"),
    ((), (), "CANCEL"),  # Slurm's default
    (("WITHIN",), ("REQUEUE", "WITHIN"), "REQUEUE"),  # WITHIN says where, not how
])  # fmt: skip
def test_the_mode_slurm_was_asked_for_is_the_qos_unless_it_defers_to_the_cluster(
    qos_mode: tuple[str, ...], cluster_mode: tuple[str, ...], mode: str
) -> None:
    assert resume.preempt_mode(qos_mode, cluster_mode) == mode


@pytest.mark.parametrize(("kind", "uid", "slot", "key"), [
    ("JobSet", "u1", "jobset-train", "ns/u1/jobset-train"),
    ("Job", "u2", "index-3", "ns/u2/index-3"),
    ("Job", "u2", "", "ns/u2/"),  # a non-indexed Job: any replacement takes any place
    ("Pod", "u3", "", None),  # a bare pod: nothing makes it again
    ("Job", "", "", None),  # no uid read: nothing to recognise it by
])  # fmt: skip
def test_a_workload_is_known_by_its_uid_and_slot_never_by_names(
    kind: str, uid: str, slot: str, key: str | None
) -> None:
    assert resume.workload_key("ns", kind, uid, slot) == key


@pytest.mark.parametrize(("annotations", "slot"), [
    ({names.ANN_K8S_JOB_COMPLETION_INDEX: "2"}, "index-2"),
    ({names.ANN_K8S_JOB_COMPLETION_INDEX: "x"}, ""),  # not an index
    ({}, ""),
])  # fmt: skip
def test_a_single_pods_slot_is_its_completion_index(annotations: dict[str, str], slot: str) -> None:
    assert resume.single_slot({"metadata": {"annotations": annotations}}) == slot


def decide(workload: str | None = JOBSET, mode: resume.Mode = "REQUEUE", *, priority: int | None = 4242,
           returns: int = 0, policy: ResumePolicy = POLICY) -> resume.AtPreemption:  # fmt: skip
    return resume.at_preemption(
        policy, workload, mode, job_id=17, priority=priority, preempted_at=T0, by="likely Slurm job 9", returns=returns
    )


def test_a_requeued_workload_keeps_its_jobs_priority_as_its_place() -> None:
    got = decide()
    assert got.place == Place(JOBSET, 17, 4242, T0.isoformat(), "likely Slurm job 9", 0)
    assert got.disrupted and "priority 4242" in got.message and "return 1 of 3" in got.message


@pytest.mark.parametrize(("case", "why", "disrupted"), [
    (dict(mode="CANCEL"), "does not come back", False),  # its pods fail for the workload to count
    (dict(workload=None), "without a controller", True),
    (dict(policy=ResumePolicy(keep_place=False)), "returnToPlace", True),
    (dict(mode="SUSPEND"), "SUSPEND", True),
    (dict(mode="OFF"), "OFF", True),
    (dict(priority=None), "did not say", True),
    (dict(returns=3), "3 times already", True),  # past the bound: the back of the queue
])  # fmt: skip
def test_no_place_is_kept_and_the_reason_is_said(case: dict[str, object], why: str, disrupted: bool) -> None:
    got = decide(**case)  # type: ignore[arg-type]
    assert got.place is None and why in got.message and got.disrupted is disrupted


def test_the_bound_counts_returns_across_successive_jobs() -> None:
    first = decide(returns=0).place
    assert first is not None and first.next_returns == 1
    assert decide(returns=2).place is not None  # the third return is still at its place
    assert decide(returns=3).place is None


def test_a_zero_priority_place_is_still_ahead_of_nothing_lower() -> None:
    got = decide(priority=0).place
    assert got is not None and got.priority == 1  # Slurm's 0 is "held": never set that


def place(job: int, priority: int = 100, minutes: float = 1, taken_by: str = "", workload: str = JOBSET) -> Place:
    return Place(workload, job, priority, (T0 - timedelta(minutes=minutes)).isoformat(), "", 0, taken_by)


@pytest.mark.parametrize(("places", "taker", "chosen"), [
    ([], "p", None),
    ([place(1)], "p", 1),
    ([place(1, taken_by="other")], "p", None),  # taken by another replacement
    ([place(1, taken_by="p")], "p", 1),  # its own, after a restart
    ([place(1, minutes=11)], "p", None),  # past the window: new work
    ([place(1, priority=5), place(2, priority=9)], "p", 2),  # the best place first
    ([place(1, minutes=2), place(2, minutes=1)], "p", 1),  # equal: the earlier preempted
    ([place(1, taken_by="other"), place(2)], "p", 2),
])  # fmt: skip
def test_a_replacement_takes_one_free_place_of_its_workload(
    places: list[Place], taker: str, chosen: int | None
) -> None:
    got = resume.choose_place(places, taker, POLICY, T0)
    assert (got.job_id if got is not None else None) == chosen
    if got is not None:
        assert got.taken_by == taker


@pytest.mark.parametrize(
    "raw", [None, "", "{", "[]", '{"workload": "w"}', '{"workload":"w","job_id":0,"priority":1,"preempted_at":"t"}']
)
def test_anything_but_a_place_is_no_place(raw: str | None) -> None:
    assert resume.decode_place(raw) is None


def test_a_place_round_trips() -> None:
    p = place(7, taken_by="x")
    assert resume.decode_place(p.encode()) == p


@pytest.mark.parametrize(("delegated", "priority"), [(None, 100), (50, 100), (500, 500)])
def test_the_place_is_a_floor_for_the_new_jobs_priority(delegated: int | None, priority: int) -> None:
    assert resume.at_place(JobRequest(priority=delegated), place(1, priority=100)).priority == priority


def test_the_resumed_event_names_the_job_the_time_and_the_preemptor() -> None:
    p = Place(JOBSET, 17, 4242, T0.isoformat(), "likely preempted by Slurm job 9", 1)
    message = resume.resumed_message(p, POLICY)
    assert "Slurm job 17" in message and T0.isoformat() in message and "Slurm job 9" in message
    assert "priority 4242" in message and "return 2 of 3" in message
