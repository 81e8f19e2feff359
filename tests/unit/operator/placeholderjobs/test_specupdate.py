"""A changed spec and its Slurm job (operator/placeholderjobs/decisions/specupdate.py, through
``lifecycle.decide`` as the shell calls it): each key the update carries, Slurm's answers, the
checks the bridge makes because Slurm skips them, a job Slurm allocated meanwhile, and restarts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.specupdate import differences, partition_problems, wanted
from slurm_bridge.rules import tenancy
from slurm_bridge.slurm.models import JobRequest, JobSettings, PartitionLimits
from tests.builders import make_phj, make_pod, slurm_job
from tests.unit.situations import decide_in

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
JOB = 7
NOW = lc.Clock(1000.0, datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
# What the job asks Slurm for, as submitted: the spec of generation 1 below.
SUBMITTED = JobSettings(job_id=JOB, name="ns/p", partition="main", account="bridge", qos="normal", priority=5,
                        time_limit_minutes=5, node_count=1, max_nodes=1)  # fmt: skip
SPEC: Obj = {"nodes": 1, "partition": "main", "timeLimitMinutes": 5}
PARTITIONS = {
    "main": PartitionLimits(name="main"),
    "short": PartitionLimits(name="short", max_time_minutes=30, default_time_minutes=10),
    "teama": PartitionLimits(name="teama", allow_accounts=("team-a",), deny_qos=("low",)),
}


def placeholderjob(gen: int = 2, observed: int = 1, phase: str = "Pending", **slurm: Any) -> Obj:
    built = make_phj("p").uid("phj-uid").generation(gen).rv(5).finalizer().owned_by_pod("p", "p-uid").pods("p")
    built.spec(slurm={**SPEC, **slurm})
    status: Obj = {"observedGeneration": observed, "phase": phase, "jobId": JOB, "slurmState": "PENDING"}
    if phase == "Running":
        status |= {"slurmState": "RUNNING", "assignments": [{"pod": "p", "node": "n1"}]}
    return built.status(**status).obj()


def gated() -> Obj:
    return make_pod("p").uid("p-uid").scheduler().phase("Pending").gated().obj()


def running() -> Obj:
    return make_pod("p").uid("p-uid").scheduler().phase("Running").node("n1").obj()


def decide(
    obj: Obj,
    *,
    state: str = "PENDING",
    settings: JobSettings | None = SUBMITTED,
    outcome: pl.Outcome | None = None,
    policy: lc.Tenancy | None = None,
    partitions: dict[str, PartitionLimits] | None = None,
) -> pl.Plan:
    nodes = ("n1",) if state == "RUNNING" else ()
    job = slurm_job(JOB, state, nodes=nodes, reason="Resources" if state == "PENDING" else "")
    side = lc.SlurmSide(poll_period=1.0, job_id=JOB, job=job, found=job, taken_at=NOW.mono)
    members = {"p": running() if state == "RUNNING" else gated()}
    return decide_in(
        PlaceholderJob.parse(obj), side, members, NOW, scheduler="s", tenancy=policy, outcome=outcome,
        settings=settings, partitions=PARTITIONS if partitions is None else partitions,
    )  # fmt: skip


def update_of(plan: pl.Plan) -> pl.UpdateJob:
    assert len(plan.actions) == 1 and isinstance(plan.actions[0], pl.UpdateJob), plan.actions
    return plan.actions[0]


def spec_applied(plan: pl.Plan) -> tuple[str, str, str, int | None]:
    """The SpecApplied condition the plan writes (status, reason, message) and observedGeneration."""
    for action in plan.actions:
        if isinstance(action, pl.WriteStatus) and action.status.observed_generation is not None:
            (cond,) = [c for c in action.status.conditions or [] if c.type == names.COND_SPEC_APPLIED]
            return cond.status, cond.reason, cond.message, action.status.observed_generation
    raise AssertionError(f"no SpecApplied write in {plan.actions}")


def told(plan: pl.Plan) -> list[tuple[str, str, bool]]:
    """Every Event the plan posts for the spec: (where, reason, warning)."""
    out = []
    for a in plan.actions:
        if isinstance(a, pl.Event | pl.TellPods | pl.TellGroup) and a.reason != names.EVENT_SLURM_JOB_PENDING:
            where = {pl.Event: "phj", pl.TellPods: "pods", pl.TellGroup: "group"}[type(a)]
            out.append((where, a.reason, a.warning))
    return out


# ---- a pending job: each key the update carries ----------------------------------------------------
KEYS = [
    # (annotation key, the spec's change, what the job's record shows of it after the change)
    (names.ANN_TIMELIMIT, {"timeLimitMinutes": 7}, "time limit 5 min -> 7 min"),
    (names.ANN_PARTITION, {"partition": "short"}, "partition main -> short"),
    (names.ANN_QOS, {"qos": "high"}, "QOS normal -> high"),
    (names.ANN_ACCOUNT, {"account": "team-b"}, "account bridge -> team-b"),
    (names.ANN_PRIORITY, {"priority": 100}, "priority 5 -> 100"),
    (names.ANN_CONSTRAINTS, {"constraints": "fast&big"}, "constraints - -> fast&big"),
    (names.ANN_MIN_NODES, {"nodes": 2, "maxNodes": 2}, "nodes 1-1 -> 2-2"),
    (names.ANN_MAX_NODES, {"maxNodes": 3}, "nodes 1-1 -> 1-3"),
    (names.ANN_JOB_NAME, {"jobName": "train-3"}, "name 'ns/p' -> 'train-3'"),
]


@pytest.mark.parametrize(("key", "change", "said"), KEYS, ids=[k.rsplit("/", 1)[1] for k, _, _ in KEYS])
def test_each_key_reaches_the_pending_job_and_is_said(key: str, change: Obj, said: str) -> None:
    obj = placeholderjob(**change)
    update = update_of(decide(obj))
    assert (update.job_id, update.generation) == (JOB, 2)
    sent = update.request.crd_dict()
    assert {k: sent.get(k) for k in change} == change
    assert update.name == change.get("jobName", "ns/p")
    # Slurm took it: observedGeneration and SpecApplied=True, and the PlaceholderJob, its pods and
    # its workload hear what changed from what.
    plan = decide(obj, outcome=pl.Updated(2))
    applied, reason, message, observed = spec_applied(plan)
    assert (applied, reason, observed) == ("True", names.REASON_SLURM_JOB_UPDATED, 2)
    assert said in message and f"Slurm job {JOB}" in message
    assert told(plan) == [(where, names.REASON_SLURM_JOB_UPDATED, False) for where in ("phj", "pods", "group")]


def test_a_refusal_keeps_the_old_values_and_says_slurms_words() -> None:
    obj = placeholderjob(partition="nope")
    said = "Invalid partition name specified (Slurm error 2000)"
    plan = decide(obj, outcome=pl.UpdateRefused(2, said))
    applied, reason, message, observed = spec_applied(plan)
    assert (applied, reason, observed) == ("False", names.REASON_UPDATE_REJECTED, 2)
    assert said in message and "partition main -> nope" in message and "keeps what it had" in message
    assert told(plan) == [(where, names.REASON_UPDATE_REJECTED, True) for where in ("phj", "pods", "group")]
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    # Said once: the settled generation is not sent again (after a restart either).
    settled = placeholderjob(observed=2, partition="nope")
    assert not told(decide(settled)) and not any(isinstance(a, pl.UpdateJob) for a in decide(settled).actions)


def test_a_job_slurm_started_before_the_update_refuses_it_too_late() -> None:
    plan = decide(placeholderjob(partition="short"), outcome=pl.UpdateRefused(2, "Job is no longer pending", True))
    assert spec_applied(plan)[:2] == ("False", names.REASON_UPDATE_TOO_LATE)


def test_an_outcome_of_another_generation_is_not_taken_for_this_one() -> None:
    assert update_of(decide(placeholderjob(gen=3), outcome=pl.Updated(2))).generation == 3


# ---- what the bridge checks because Slurm does not ----------------------------------------------------
@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"partition": "short", "timeLimitMinutes": 45}, "time limit 45 min is above partition short's MaxTime"),
        ({"partition": "teama"}, "partition teama does not take account bridge (it allows team-a)"),
        ({"partition": "teama", "account": "team-a", "qos": "low"}, "does not take QOS low (it denies it)"),
        ({"partition": "main,short", "timeLimitMinutes": 31}, "above partition short's MaxTime"),
    ],
)  # fmt: skip
def test_what_slurm_would_let_through_is_not_sent(change: Obj, fragment: str) -> None:
    plan = decide(placeholderjob(**change))
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    applied, reason, message, observed = spec_applied(plan)
    assert (applied, reason, observed) == ("False", names.REASON_UPDATE_NOT_APPLIED, 2)
    assert fragment in message
    assert ("phj", names.REASON_UPDATE_NOT_APPLIED, True) in told(plan)


def test_a_partition_the_account_may_use_is_sent() -> None:
    assert update_of(decide(placeholderjob(partition="teama", account="team-a"))).request.partition == "teama"


def test_an_unknown_partition_is_left_to_slurm() -> None:
    assert update_of(decide(placeholderjob(partition="nope"))).request.partition == "nope"


def test_a_removed_time_limit_becomes_the_partitions_default() -> None:
    spec = {**SPEC, "partition": "short"}
    del spec["timeLimitMinutes"]
    obj = placeholderjob()
    obj["spec"]["slurm"] = spec
    update = update_of(decide(obj))
    assert (update.request.time_limit_minutes, update.unlimited_time) == (10, False)
    obj["spec"]["slurm"] = {**spec, "partition": "main"}
    update = update_of(decide(obj))
    assert (update.request.time_limit_minutes, update.unlimited_time) == (None, True)
    # A partition with MaxTime and no DefaultTime: MaxTime, as Slurm gives a new job.
    limits = {"main": PartitionLimits(name="main", max_time_minutes=60)}
    assert update_of(decide(obj, partitions=limits)).request.time_limit_minutes == 60


# ---- the tenant's policy, again at the change -----------------------------------------------------------
POLICY = tenancy.TenantPolicy.from_object({
    "metadata": {"name": "team-a", "generation": 1},
    "spec": {"namespaces": ["ns"], "user": {"name": "alice"}, "group": {"id": 2001},
             "accounts": {"default": "team-a", "allowed": ["team-a"]}, "limits": {"maxTimeLimitMinutes": 60}},
})  # fmt: skip


def with_policy(policy: tenancy.TenantPolicy | None = POLICY) -> lc.Tenancy:
    return lambda request: tenancy.verdict(tenancy.Match(policy), "ns", request, "open")


def test_the_policy_is_checked_again_at_the_change() -> None:
    plan = decide(placeholderjob(timeLimitMinutes=90), policy=with_policy())
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    applied, reason, message, _ = spec_applied(plan)
    assert (applied, reason) == ("False", names.REASON_TENANT_POLICY_VIOLATION) and names.ANN_TIMELIMIT in message
    # Within it, the tenant's defaults go with the update (its account where the spec names none).
    update = update_of(decide(placeholderjob(timeLimitMinutes=50), policy=with_policy()))
    assert (update.request.time_limit_minutes, update.request.account) == (50, "team-a")


def test_while_the_policies_are_not_read_nothing_is_sent() -> None:
    def waiting(request: JobRequest) -> tenancy.Verdict:
        return tenancy.Verdict(request, waiting="not read yet")

    plan = decide(placeholderjob(timeLimitMinutes=7), policy=waiting)
    assert plan.actions == () and plan.requeue is not None


# ---- a job Slurm allocated meanwhile, and restarts -------------------------------------------------------
def test_a_change_that_came_too_late_is_said_and_the_pods_are_still_released() -> None:
    obj = placeholderjob(phase="Running", timeLimitMinutes=7)
    plan = decide(obj, state="RUNNING", settings=SUBMITTED.model_copy(update={"partition": "main"}))
    applied, reason, message, observed = spec_applied(plan)
    assert (applied, reason, observed) == ("False", names.REASON_UPDATE_TOO_LATE, 2)
    assert "time limit 5 min -> 7 min not applied" in message
    assert ("pods", names.REASON_UPDATE_TOO_LATE, True) in told(plan)
    # The allocation's own status write keeps the condition (it sends the whole list).
    writes = [a.status for a in plan.actions if isinstance(a, pl.WriteStatus)]
    assert all(any(c.type == names.COND_SPEC_APPLIED for c in w.conditions or []) for w in writes if w.conditions)


def test_an_update_slurm_took_before_a_restart_and_an_allocation_is_found_applied() -> None:
    """A crash between the update and its status write: the job, allocated since, has the spec."""
    obj = placeholderjob(phase="Running", timeLimitMinutes=7)
    plan = decide(obj, state="RUNNING", settings=SUBMITTED.model_copy(update={"time_limit_minutes": 7}))
    assert spec_applied(plan)[:2] == ("True", names.REASON_SLURM_JOB_UPDATED)
    assert told(plan) == []


def test_a_restart_before_the_status_write_sends_the_same_update_again() -> None:
    """The update went through, the status write did not: the next decision sends the same spec
    (a no-op for Slurm) and settles the generation; nothing older is ever sent."""
    obj = placeholderjob(timeLimitMinutes=7)
    after = SUBMITTED.model_copy(update={"time_limit_minutes": 7})
    update = update_of(decide(obj, settings=after))
    assert update.request.time_limit_minutes == 7 and update.generation == 2
    plan = decide(obj, settings=after, outcome=pl.Updated(2))
    assert spec_applied(plan)[:2] == ("True", names.REASON_SLURM_JOB_UPDATED) and told(plan) == []


def test_a_membership_change_alone_says_nothing() -> None:
    """A gang's late member changes the spec's pods, not what Slurm holds: no Event."""
    plan = decide(placeholderjob(), outcome=pl.Updated(2))
    assert spec_applied(plan)[0] == "True" and told(plan) == []


def test_without_the_jobs_settings_nothing_is_decided_about_the_spec() -> None:
    plan = decide(placeholderjob(timeLimitMinutes=7), settings=None)
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    assert not any(isinstance(a, pl.WriteStatus) and a.status.observed_generation for a in plan.actions)


# ---- the pure pieces ------------------------------------------------------------------------------------
def test_differences_of_a_running_job_allow_any_listed_partition_and_node_count_in_range() -> None:
    want = wanted(make_phj("p").spec(slurm={}).parsed(), JobRequest(partition="a,b", nodes=1, max_nodes=3), {})
    settings = JobSettings(job_id=1, name="ns/p", partition="b", node_count=2)
    assert differences(want, settings, running=True) == []
    assert differences(want, settings, running=False) == ["partition b -> a,b", "nodes 2-2 -> 1-3"]


def test_partition_problems_take_the_jobs_current_account_when_the_request_names_none() -> None:
    problems = partition_problems(JobRequest(partition="teama"), "bridge", PARTITIONS)
    assert problems == ["partition teama does not take account bridge (it allows team-a)"]
    assert partition_problems(JobRequest(partition="teama"), "team-a", PARTITIONS) == []
