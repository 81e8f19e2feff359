"""An allocation kube-scheduler cannot bind is released after ``bindTimeoutSeconds``, measured from
Slurm's record of the job's start (operator/placeholderjobs/decisions/bindtimeout.py;
docs/design/placeholderjob-lifecycle.md, the decision table's row "an allocation not bound")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import parse_config
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from tests.builders import make_pod, slurm_job
from tests.unit.operator.placeholderjobs.test_lifecycle import JOB, NODE, NOW, PERIOD, phj, summary
from tests.unit.situations import decide_in

Obj = dict[str, Any]
TIMEOUT = 60.0


def released(bound: bool = False) -> Obj:
    """A member released to NODE (annotated, gate lifted), bound there or not yet."""
    built = make_pod("p").uid("p-uid").scheduler().phase("Pending").annotation(names.ANN_SLURM_NODE, NODE)
    if bound:
        built.node(NODE).phase("Running")
    return built.obj()


def side(started_ago: float) -> lc.SlurmSide:
    j = slurm_job(JOB, "RUNNING", nodes=(NODE,), start_time=NOW.wall - timedelta(seconds=started_ago))
    return lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=j, found=j, taken_at=NOW.mono)


def decide(started_ago: float, member: Obj, timeout: float | None = TIMEOUT, phase: str = "Allocated") -> pl.Plan:
    return decide_in(
        PlaceholderJob.parse(phj(phase)), side(started_ago), {"p": member}, NOW, scheduler="s", bind_timeout=timeout
    )


def test_an_allocation_not_bound_in_time_is_released_with_the_reason() -> None:
    plan = decide(TIMEOUT + 1, released())
    got = [summary(a) for a in plan.actions]
    reason = names.REASON_ALLOCATION_NOT_BOUND
    assert got == [("status", "Failed", reason), ("event", reason), ("end", ("p",), reason)]
    status = plan.actions[0]
    assert isinstance(status, pl.WriteStatus)
    ended = next(c for c in status.status.conditions or [] if c.type == names.COND_ENDED)
    assert (ended.status, ended.reason) == ("True", reason)
    assert f"Slurm job {JOB}" in ended.message and f"p on {NODE}" in ended.message
    assert "bindTimeoutSeconds" in ended.message and names.NODE_COND_SLURM_RESOURCES_FIT in ended.message


def test_before_the_timeout_the_allocation_stays_and_is_looked_at_again_when_it_comes() -> None:
    plan = decide(TIMEOUT - 20, released())
    assert not any(isinstance(a, pl.EndPods) for a in plan.actions)
    assert plan.requeue == pytest.approx(20.0)


@pytest.mark.parametrize(
    ("member", "timeout"),
    [
        (released(bound=True), TIMEOUT),  # bound: nothing waits
        (make_pod("p").uid("p-uid").scheduler().phase("Pending").gated().obj(), TIMEOUT),  # not released yet
        (released(), None),  # no timeout configured
    ],
)
def test_only_a_released_pod_that_is_not_bound_counts(member: Obj, timeout: float | None) -> None:
    plan = decide(TIMEOUT * 10, member, timeout, phase="Running" if member["spec"].get("nodeName") else "Allocated")
    assert not any(isinstance(a, pl.EndPods) for a in plan.actions)
    assert all(
        not (isinstance(a, pl.WriteStatus) and a.status.reason == names.REASON_ALLOCATION_NOT_BOUND)
        for a in plan.actions
    )


def test_the_released_phj_then_cancels_its_job_once_the_pod_ended() -> None:
    """The terminal rows take over: the unbound pod turned Failed, so the job is cancelled."""
    failed = make_pod("p").uid("p-uid").scheduler().phase("Failed").obj()
    obj = phj("Failed", reason=names.REASON_ALLOCATION_NOT_BOUND)
    plan = decide_in(PlaceholderJob.parse(obj), side(TIMEOUT * 2), {"p": failed}, NOW, {"p": failed}, scheduler="s")
    assert ("cancel", JOB) in [summary(a) for a in plan.actions]


def test_the_timeout_is_a_key_of_the_one_config() -> None:
    assert parse_config({}).bindTimeoutSeconds == 300.0
    assert parse_config({"bindTimeoutSeconds": 20}).bindTimeoutSeconds == 20.0
    with pytest.raises(Exception, match="bindTimeoutSeconds"):
        parse_config({"bindTimeoutSeconds": 1})


def test_the_wait_counts_from_the_allocated_condition_when_slurms_clock_says_earlier() -> None:
    """A slurmctld clock behind the operator's (or an old job adopted): start_time an hour ago, the
    Allocated condition written 10 s ago by the operator: 50 s are left, nothing is released."""
    written = (NOW.wall - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    allocated = {"type": names.COND_ALLOCATED, "status": "True", "reason": names.REASON_ALLOCATED,
                 "message": "m", "lastTransitionTime": written, "observedGeneration": 1}  # fmt: skip
    obj = phj("Allocated", conditions=[allocated])
    plan = decide_in(PlaceholderJob.parse(obj), side(3600), {"p": released()}, NOW, scheduler="s", bind_timeout=TIMEOUT)
    assert not any(isinstance(a, pl.EndPods) for a in plan.actions)
    assert plan.requeue == pytest.approx(50.0)


def test_nothing_is_released_while_the_allocations_status_is_held_back() -> None:
    held = pl.Held(PlaceholderJob.parse(phj("Pending")).status, NOW.mono + 10)
    plan = decide_in(
        PlaceholderJob.parse(phj("Pending", job_id=None)), side(TIMEOUT * 10), {"p": released()}, NOW,
        scheduler="s", held=held, bind_timeout=TIMEOUT,
    )  # fmt: skip
    assert not any(isinstance(a, pl.EndPods) for a in plan.actions)
