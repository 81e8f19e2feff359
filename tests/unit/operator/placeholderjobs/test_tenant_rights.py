"""Tenants get their own rights in Slurm, never the bridge's (issue 36 §4, docs/security.md), and
the limits that size a job do not move under it (§5): operator-only fields (priority) refused
unless a policy or the config allows them, a tenant's job queued and updated *as the tenant*, the
sharing modes a policy allows, an exclusive job counted as its nodes' CPUs, and in-place resize."""

from __future__ import annotations

import time
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.nodes.slurmnodes import largest_cpus
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.specupdate import update_as
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import Placer
from slurm_bridge.operator.placeholderjobs.sync.jobupdates import JobUpdates
from slurm_bridge.operator.placeholderjobs.sync.podwrites import job_node_sharing
from slurm_bridge.rules import tenancy
from slurm_bridge.slurm.errors import ESLURM_INVALID_GROUP_ID, SlurmAuthError, SlurmError, SlurmErrorDetail
from slurm_bridge.slurm.models import JobRequest, NodeInfo
from slurm_bridge.slurm.versions import codec_for
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.validate import validate
from tests.builders import make_phj, slurm_job
from tests.unit.fakes import FakeJobWrites, FakeSubmits
from tests.unit.operator.placeholderjobs import test_specupdate as su
from tests.unit.webhook.test_tenancy_webhook import FakeTenants, bridge_pod
from tests.unit.webhook.test_webhook import CONFIG, make_request

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
TEAM: Obj = {"namespaces": ["slurm"], "user": {"name": "alice"}, "group": {"id": 2001}}
PRIORITY = {names.ANN_PRIORITY: "100"}


def policy(**spec: Any) -> tenancy.TenantPolicy:
    return tenancy.TenantPolicy.from_object({"metadata": {"name": "team-a"}, "spec": {**TEAM, **spec}})


def tenants(**spec: Any) -> FakeTenants:
    return FakeTenants([{"metadata": {"name": "team-a", "generation": 1}, "spec": {**TEAM, **spec}}])


# ---- operator-only fields --------------------------------------------------------------------------------
def test_a_tenants_priority_is_refused_unless_its_policy_allows_it() -> None:
    (refused,) = tenancy.check({"priority": 100}, policy())
    said = str(refused)
    assert said.startswith(f"{names.ANN_PRIORITY}: '100' is not allowed by TenantPolicy team-a"), said
    assert "only from an operator" in said and "allowedOperatorFields does not list priority" in said
    assert "remove the annotation" in said
    assert tenancy.check({"priority": 100}, policy(allowedOperatorFields=["priority"])) == []


def test_the_operator_refuses_a_priority_that_slipped_in_at_submit_and_update() -> None:
    """A policy changed after admission (or a PlaceholderJob written directly): the verdict the
    operator asks before each submit and each update refuses it, so it is never sent."""
    found = tenancy.verdict(tenancy.Match(policy()), "slurm", JobRequest(priority=9), "open")
    assert found.reason == names.REASON_TENANT_POLICY_VIOLATION and names.ANN_PRIORITY in found.message
    plan = su.decide(
        su.placeholderjob(priority=9),
        policy=lambda r: tenancy.verdict(tenancy.Match(su.POLICY), "ns", r, "open"),
    )
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    applied, reason, message, _ = su.spec_applied(plan)
    assert (applied, reason) == ("False", names.REASON_TENANT_POLICY_VIOLATION) and names.ANN_PRIORITY in message


def test_without_a_policy_in_open_mode_priority_is_refused_unless_the_config_allows_it() -> None:
    open_ = tenancy.verdict(tenancy.Match(), "free", JobRequest(priority=9), "open")
    assert open_.reason == names.REASON_OPERATOR_FIELD_REFUSED
    assert "untenantedOperatorFields" in open_.message and names.ANN_PRIORITY in open_.message
    allowed = tenancy.verdict(tenancy.Match(), "free", JobRequest(priority=9), "open", untenanted_fields=["priority"])
    assert allowed.allowed
    assert tenancy.verdict(tenancy.Match(), "free", JobRequest(), "open").allowed


def test_admission_refuses_a_priority_annotation_naming_the_annotation_the_policy_and_what_to_do() -> None:
    decision = validate(make_request(bridge_pod(PRIORITY)), CONFIG, tenants())
    assert not decision.allowed and decision.code == 403
    assert names.ANN_PRIORITY in decision.message and "TenantPolicy team-a" in decision.message
    assert "allowedOperatorFields" in decision.message
    assert validate(make_request(bridge_pod(PRIORITY)), CONFIG, tenants(allowedOperatorFields=["priority"])).allowed
    no_policy = FakeTenants([])
    refused = validate(make_request(bridge_pod(PRIORITY)), CONFIG, no_policy)
    assert not refused.allowed and "untenantedOperatorFields" in refused.message
    config = CONFIG.model_copy(update={"untenantedOperatorFields": ["priority"]})
    assert validate(make_request(bridge_pod(PRIORITY)), config, no_policy).allowed


# ---- node sharing and whole nodes -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "allowed"),
    [
        ({"node_sharing": "exclusive"}, False),
        ({"exclusive": True}, False),
        ({"node_sharing": "coResident"}, True),
        ({}, True),
    ],
)
def test_a_policy_names_the_sharing_modes_its_jobs_may_use(values: Obj, allowed: bool) -> None:
    found = tenancy.check(values, policy(nodeSharing=["timeShared", "coResident"]))
    assert (found == []) is allowed, found
    if not allowed:
        assert "allowed: coResident, timeShared" in str(found[0])


def test_admission_refuses_a_sharing_mode_the_policy_does_not_allow() -> None:
    pod = bridge_pod({names.ANN_NODE_SHARING: "exclusive"})
    decision = validate(make_request(pod), CONFIG, tenants(nodeSharing=["timeShared"]))
    assert not decision.allowed and names.ANN_NODE_SHARING in decision.message and "'exclusive'" in decision.message


def test_an_exclusive_job_counts_as_its_nodes_cpus_under_max_cpus() -> None:
    capped = policy(limits={"maxCPUs": 20})
    request = JobRequest(nodes=2, cpus_per_task=2, node_sharing="exclusive", partition="p")
    assert tenancy.check(request.model_dump(exclude_none=True), capped) == [], "admission: the pods' CPUs only"
    found = tenancy.verdict(tenancy.Match(capped), "slurm", request, "open", node_cpus=lambda _: 16)
    assert found.reason == names.REASON_TENANT_POLICY_VIOLATION
    assert "cpus: '32 CPUs'" in found.message and "holds whole nodes" in found.message and "at most 20" in found.message
    shared = request.model_copy(update={"node_sharing": "coResident"})
    assert tenancy.verdict(tenancy.Match(capped), "slurm", shared, "open", node_cpus=lambda _: 16).allowed
    waiting = tenancy.verdict(tenancy.Match(capped), "slurm", request, "open", node_cpus=lambda _: None)
    assert waiting.waiting and not waiting.allowed, "Slurm's nodes not read yet: the verdict waits"


def test_the_largest_node_of_the_jobs_partitions_is_counted() -> None:
    nodes = {
        "a": NodeInfo(name="a", cpus=8, partitions=("p",)),
        "b": NodeInfo(name="b", cpus=64, partitions=("q",)),
        "c": NodeInfo(name="c", cpus=16, partitions=("p", "q")),
    }
    assert largest_cpus(nodes, "p", "d") == 16
    assert largest_cpus(nodes, "p,q", "d") == 64
    assert largest_cpus(nodes, None, "q") == 64, "no partition: the bridge's default"
    assert largest_cpus(nodes, "none", "d") == 0
    assert largest_cpus(None, "p", "d") is None


# ---- a tenant's job queued and updated as the tenant -------------------------------------------------
@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "monotonic", lambda: 1000.0)


async def test_a_queued_tenants_job_is_submitted_as_the_tenant_and_then_marked(clock: None) -> None:
    slurm = FakeSubmits()
    slurm.allocate_refusal = SlurmError("busy", errors=[SlurmErrorDetail("Requested nodes are busy", 2016)])
    placer = Placer(slurm, True)
    assert await placer.place(JobRequest(partition="p", user_name="alice"), "n", "c") == 101
    assert slurm.calls == ["allocate as alice p", "submit as alice p", "mark 101"]
    await placer.place(JobRequest(partition="p"), "n", "c")
    assert slurm.calls[-1] == "submit p" and slurm.submit_users[-1] is None, "the bridge's own job: its token"


async def test_a_group_slurm_refuses_from_the_user_is_queued_by_the_bridge_and_remembered(clock: None) -> None:
    slurm = FakeSubmits()
    slurm.as_user_submit_refusal = SlurmError(
        "no", errors=[SlurmErrorDetail("Group ID not found on host", ESLURM_INVALID_GROUP_ID)]
    )
    placer = Placer(slurm, False)
    req = JobRequest(partition="p", user_name="alice", group_id=3000)
    assert await placer.place(req, "n", "c") == 101
    assert slurm.calls == ["submit as alice", "submit p"]
    await placer.place(req, "n", "c")
    assert slurm.calls[-1] == "submit p", "the user's group is known not to be 3000: queued by the bridge at once"


async def test_slurms_verdict_on_the_tenants_own_submit_is_final(clock: None) -> None:
    slurm = FakeSubmits()
    slurm.as_user_submit_refusal = SlurmError("no", errors=[SlurmErrorDetail("Invalid qos specification", 2066)])
    with pytest.raises(SlurmError):
        await Placer(slurm, False).place(JobRequest(user_name="alice", qos="pods-urgent"), "n", "c")
    assert slurm.calls == ["submit as alice"], "never sent again with the bridge's rights"


async def test_a_token_that_may_not_act_for_the_tenant_queues_as_the_bridge(clock: None) -> None:
    slurm = FakeSubmits()
    slurm.as_user_submit_refusal = SlurmAuthError("511 Protocol authentication error", status=511)
    placer = Placer(slurm, False)
    await placer.place(JobRequest(user_name="alice"), "n", "c")
    assert slurm.calls == ["submit as alice", "submit"] and not placer.as_tenant


def test_the_marker_of_a_job_submitted_as_a_tenant_is_in_its_comment() -> None:
    codec = codec_for("v0.0.44")
    body = codec.submit_body(JobRequest(user_name="alice"), name="n", admin_comment="slurm-bridge:x", as_user=True)
    assert body["job"]["comment"] == "slurm-bridge:x" and "admin_comment" not in body["job"]
    assert codec.submit_body(JobRequest(), name="n", admin_comment="m")["job"]["admin_comment"] == "m"


def test_an_update_of_a_tenants_job_is_sent_as_its_owner() -> None:
    job = slurm_job(7, user_name="alice", user_id=2001)
    assert update_as(JobRequest(user_name="alice"), job) == "alice"
    assert update_as(JobRequest(user_id=2001), slurm_job(7, user_id=2001)) == "2001"
    assert update_as(JobRequest(), job) is None, "the bridge's own job: its token"
    plan = su.decide(su.placeholderjob(timeLimitMinutes=7, userName="alice"))
    assert su.update_of(plan).as_user == "alice"
    assert su.update_of(su.decide(su.placeholderjob(timeLimitMinutes=7))).as_user is None


async def test_the_update_goes_out_with_the_owner() -> None:
    slurm = FakeJobWrites()
    updates = JobUpdates(None, slurm)  # type: ignore[arg-type]
    await updates.send(pl.UpdateJob(7, JobRequest(), 2, as_user="alice"))
    await updates.send(pl.UpdateJob(8, JobRequest(), 2))
    assert slurm.update_users == ["alice", None]


# ---- in-place resize ------------------------------------------------------------------------------------
CO_RESIDENT = CONFIG.model_copy(update={"nodeSharing": "coResident"})


def _resized(pod: Obj, cpu: str = "2") -> Obj:
    new: Obj = {**pod, "spec": {**pod["spec"]}}
    new["spec"]["containers"] = [
        {**c, "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu, "memory": "1Gi"}}}
        for c in pod["spec"]["containers"]
    ]
    return new


def _resize(pod: Obj, config: Config) -> Any:
    request = make_request(_resized(pod), operation="UPDATE", old=pod)
    request = type(request)(**{**request.__dict__, "sub_resource": "resize"})
    return validate(request, config, FakeTenants([]))


def test_a_coresident_pods_resize_is_refused_saying_why_and_what_to_do() -> None:
    pod = bridge_pod(cpu="1")
    refused = _resize(pod, CO_RESIDENT)
    assert not refused.allowed and "pods/resize" in refused.message and "delete the pod" in refused.message
    stamped = bridge_pod({names.ANN_JOB_NODE_SHARING: "coResident"}, cpu="1")
    refused = _resize(stamped, CONFIG)
    assert not refused.allowed, "the job's mode as the operator stamped it"
    assert "limits are its Slurm job's size" in refused.message and "delete the pod" in refused.message


def test_other_pods_may_be_resized() -> None:
    assert _resize(bridge_pod({names.ANN_JOB_NODE_SHARING: "timeShared"}, cpu="1"), CONFIG).allowed
    assert _resize(bridge_pod({names.ANN_JOB_NODE_SHARING: "exclusive"}, cpu="1"), CO_RESIDENT).allowed
    other = bridge_pod(cpu="1")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert _resize(other, CO_RESIDENT).allowed


def test_a_workload_pod_not_yet_released_cannot_be_resized_its_mode_is_its_groups() -> None:
    member = bridge_pod(cpu="1")
    member["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    ]
    assert not _resize(member, CONFIG).allowed
    member["metadata"]["annotations"] = {names.ANN_JOB_NODE_SHARING: "timeShared"}
    assert _resize(member, CONFIG).allowed


def test_no_pod_is_resized_before_its_release_whatever_its_author_says_of_it() -> None:
    """Whether a pod is its own job is read from labels and owner references its author may edit
    (a workload's pod stripped of its owner looks like its own job, whose annotations say
    exclusive); only the mode the operator stamps at the release counts."""
    for said in ({}, {names.ANN_NODE_SHARING: "exclusive"}, {names.ANN_NODE_SHARING: "timeShared"}):
        refused = _resize(bridge_pod(said, cpu="1"), CONFIG)
        assert not refused.allowed and "not allocated yet" in refused.message, said


def test_the_webhook_configuration_covers_pods_resize() -> None:
    validating = webhook_configurations(CONFIG, bundle="Y2E=", url="https://127.0.0.1:9443")[1]
    (pods,) = [r for r in validating["webhooks"][0]["rules"] if r["apiGroups"] == [""] and "pods" in r["resources"]]
    assert "pods/resize" in pods["resources"] and "UPDATE" in pods["operations"]


def test_the_release_stamps_the_jobs_node_sharing() -> None:
    phj = PlaceholderJob.parse(make_phj("p").pods("p").spec(slurm={"nodes": 1, "nodeSharing": "coResident"}).obj())
    assert job_node_sharing(phj, None) == "coResident"
    old = PlaceholderJob.parse(make_phj("q").pods("q").spec(slurm={"nodes": 1, "exclusive": True}).obj())
    assert job_node_sharing(old, None) == "exclusive"


async def test_a_priority_the_policy_delegates_is_set_by_the_bridge_alone_after_the_tenants_submit(
    clock: None,
) -> None:
    """The tenant may not set a priority in Slurm; its policy lets the bridge set it for it: the
    tenant's submit goes without it, the bridge's token sets that one field."""
    slurm = FakeSubmits()
    await Placer(slurm, False).place(JobRequest(user_name="alice", priority=5), "n", "c")
    assert slurm.calls == ["submit as alice", "mark 101", "priority 101 5"]
    assert slurm.requests[-1].priority is None


async def test_a_delegated_priority_on_an_update_is_set_by_the_bridge_after_the_tenants_update() -> None:
    slurm = FakeJobWrites()
    await JobUpdates(None, slurm).send(pl.UpdateJob(7, JobRequest(priority=9), 2, as_user="alice"))  # type: ignore[arg-type]
    assert slurm.calls == ["update 7 as alice", "priority 7 9"] and slurm.updates[0][1].priority is None
