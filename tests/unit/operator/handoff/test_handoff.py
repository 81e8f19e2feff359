"""The handoff and preemption decisions (docs/colocation.md), with no servers: the shared rules
(slurm_bridge/rules/handoff.py), the handoff loop's decisions and pass (operator/handoff/), Slurm's
preemption settings and the placer's rule, the likely preemptor, the shell's released cancel and
preempted end, the submit's handoff scope, admission of a grace period, and the client's
reading of reservations and settings. The lifecycle's rows are in test_lifecycle.py."""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, HandoffConfig
from slurm_bridge.operator.handoff import decisions as hd
from slurm_bridge.operator.handoff.controller import HandoffController
from slurm_bridge.operator.handoff.preemptor import PreemptorFinder, is_likely
from slurm_bridge.operator.nodes.slurmnodes import SlurmNodeTable
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Handoff
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import (
    decode_admin_comment,
    encode_admin_comment,
    is_released,
    released_comment,
)
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import Placer
from slurm_bridge.operator.runtime.departures import pod_job_index
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.slurmsettings.reader import SlurmSettings, policy_problems, queueing
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder, SlurmPolicy
from slurm_bridge.rules.handoff import (
    HandoffReservation,
    drain_of,
    drain_reason,
    ending_starts_at,
    grace_refusal,
    job_handoff_scope,
    reservation_name,
    reservation_of,
    reservations_of,
)
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.jwtfile import token_user
from slurm_bridge.slurm.models import JobInfo, JobRequest, NodeInfo, QosInfo, SlurmConf
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.validate import validate
from tests.builders import make_pod, slurm_job
from tests.unit.fakes import FakeHandoff, FakeSlurm, FakeSubmits
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_phjsync import placeholderjob, shell, shell_kube
from tests.unit.webhook.test_webhook import make_request

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BRIDGE = "slurm-bridge"
RULES = hd.Rules(BRIDGE, 10, 60)  # handoff.marginSeconds, handoff.maxGracePeriodSeconds


# ---- the shared rules ------------------------------------------------------------------------------
def test_the_script_names_reservations_back_by_exact_bridge_id() -> None:
    name = reservation_name(12, BRIDGE, "real_node-1")
    assert name == "handoff-12_slurm-bridge_real_node-1"
    assert reservation_of(name, BRIDGE) == HandoffReservation(name, 12, "real_node-1")
    assert reservation_of(name, "other") is None, "another bridge's reservation is left to it"
    assert reservation_of(name, "slurm") is None, "a bridge whose id is a prefix of this one's"
    assert reservation_of(reservation_name(12, "slurm-bridge-2", "n1"), BRIDGE) is None
    assert reservation_of("handoff-12_slurm-bridge_", BRIDGE) is None
    assert reservation_of("handoff-12-slurm-bridge-n1", BRIDGE) is None  # the old format
    assert reservation_of("maintenance", BRIDGE) is None


def test_the_admin_comment_carries_the_scope_and_the_released_mark_and_decodes_as_before() -> None:
    ref = PhjRef(BRIDGE, "team-a", "pj", "uid-1")
    comment = encode_admin_comment(ref, handoff="cores")
    assert comment == 'slurm-bridge:{"bridge":"slurm-bridge","handoff":"cores","name":"pj","ns":"team-a","uid":"uid-1"}'
    assert decode_admin_comment(comment) == ref and not is_released(comment)
    released = released_comment(comment)
    assert json.loads(released.removeprefix(names.ADMIN_COMMENT_PREFIX)) == {
        "bridge": BRIDGE, "handoff": "cores", "name": "pj", "ns": "team-a", "released": True, "uid": "uid-1",
    }  # fmt: skip
    assert decode_admin_comment(released) == ref and is_released(released)
    assert released_comment(released) == released, "marking twice changes nothing"
    # an older bridge's comment (no scope) and a foreign one with the PlaceholderJob's ref
    assert released_comment(encode_admin_comment(ref)) == encode_admin_comment(ref, released=True)
    assert released_comment("set by an admin", ref) == encode_admin_comment(ref, released=True)
    with pytest.raises(ValueError):
        released_comment("set by an admin")
    # keys a later bridge adds are kept and ignored
    later = comment[:-1] + ',"zone":"b"}'
    assert decode_admin_comment(later) == ref and '"zone":"b"' in released_comment(later)


def test_the_drain_reason_names_the_pod_and_is_read_back_only_when_it_is_the_handoffs() -> None:
    reason = drain_reason(BRIDGE, "team-a", "trainer-0", 42, 20, 10)
    assert reason.startswith(f"slurm-bridge-handoff[{BRIDGE}]: ") and "team-a/trainer-0" in reason
    d = drain_of(reason, BRIDGE)
    assert d is not None and (d.namespace, d.pod, d.job_id) == ("team-a", "trainer-0", 42)
    assert drain_of("slurm-bridge: Kubernetes node n1 is unschedulable", BRIDGE) is None
    assert drain_of("", BRIDGE) is None


def test_a_grace_period_above_the_limit_is_refused_naming_the_limit() -> None:
    assert grace_refusal(60, 60, "spec") is None
    msg = grace_refusal(61, 60, "spec.terminationGracePeriodSeconds")
    assert msg is not None and "handoff.maxGracePeriodSeconds: 60" in msg and "61" in msg


@pytest.mark.parametrize(("over", "grace", "expected"), [
    (timedelta(0), 20, -30),  # Slurm may end it at the limit: grace + margin before it
    (timedelta(minutes=1), 20, 0),  # the OverTimeLimit covers grace + margin: the whole time limit
    (timedelta(seconds=40), 20, 0),
    (timedelta(seconds=20), 20, -10),
])  # fmt: skip
def test_the_pods_are_ended_so_that_they_stopped_before_slurm_may_end_the_job(
    over: timedelta, grace: int, expected: int
) -> None:
    assert ending_starts_at(T0, over, grace, 10) == T0 + timedelta(seconds=expected)


@pytest.mark.parametrize(("request_fields", "annotations", "scope"), [
    ({}, {}, "cores"),
    ({"exclusive": True}, {}, "node"),  # the whole node was the pod's
    ({"mcs_label": "kubernetes"}, {}, "node"),  # time-shared: no native job beside it
    ({}, {names.ANN_DEVICE_REQUESTS: json.dumps({"dra.cpu": 2})}, "node"),  # exact cores: a count is not enough
])  # fmt: skip
def test_the_submits_handoff_scope_is_the_one_the_job_needs(
    request_fields: dict[str, Any], annotations: dict[str, str], scope: str
) -> None:
    pods = [make_pod("a").obj(), make_pod("b").obj()]
    pods[1]["metadata"]["annotations"] = annotations
    assert job_handoff_scope(JobRequest(**request_fields), pods) == scope


# ---- the handoff loop's decisions -------------------------------------------------------------------
def resv(job_id: int, node: str, ended: datetime = T0) -> HandoffReservation:
    return HandoffReservation(reservation_name(job_id, BRIDGE, node), job_id, node, ended + timedelta(40), ended)


def bound(name: str, node: str, *, grace: int = 20, phase: str = "Running", ns: str = "ns") -> Obj:
    pod = make_pod(name, ns).uid(f"{name}-uid").phase(phase).node(node).obj()
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    return pod


def drained(node: str, pod: str, job_id: int, bridge: str = BRIDGE) -> NodeInfo:
    return NodeInfo(name=node, states=("IDLE", "DRAIN"), reason=drain_reason(bridge, "ns", pod, job_id, 20, 10))


def kinds(steps: list[hd.Step]) -> list[tuple[str, str]]:
    out = []
    for s in steps:
        match s:
            case hd.Release(reservation=r) | hd.Held(reservation=r):
                out.append((type(s).__name__, r.name))
            case hd.Drain(node=node, pod=pod):
                out.append(("Drain", f"{node} {pod['metadata']['name']}"))
            case hd.Undrain(node=node, drain=d):
                out.append(("Undrain", f"{node} {d.pod}"))
    return out


def test_a_reservation_is_released_once_its_jobs_pods_stopped_on_its_node() -> None:
    r = resv(7, "n1")
    assert kinds(hd.decide([r], {}, {}, T0, RULES)) == [("Release", r.name)]  # no pod (gone, or never bound)
    elsewhere = {7: [bound("p", "n2")]}  # the job's pod on another node holds nothing here
    assert kinds(hd.decide([r], elsewhere, {}, T0, RULES)) == [("Release", r.name)]
    stopped = {7: [bound("p", "n1", phase="Failed")]}  # terminal: its containers stopped
    assert kinds(hd.decide([r], stopped, {}, T0, RULES)) == [("Release", r.name)]
    running = {7: [bound("p", "n1")]}
    assert kinds(hd.decide([r], running, {}, T0 + timedelta(seconds=5), RULES)) == [("Held", r.name)]


def test_a_pod_that_outlives_grace_and_margin_drains_its_node_once() -> None:
    r = resv(7, "n1")
    pods = {7: [bound("p", "n1", grace=20)]}
    assert kinds(hd.decide([r], pods, {}, T0 + timedelta(seconds=29), RULES)) == [("Held", r.name)]
    late = T0 + timedelta(seconds=30)
    assert kinds(hd.decide([r], pods, {}, late, RULES)) == [("Held", r.name), ("Drain", "n1 p")]
    already = {"n1": drained("n1", "p", 7)}
    assert kinds(hd.decide([r], pods, already, late, RULES)) == [("Held", r.name)], "drained for it: nothing more"


def test_the_drain_is_lifted_once_its_pod_is_gone_and_passed_to_another_late_pod_otherwise() -> None:
    node = {"n1": drained("n1", "p", 7)}
    assert kinds(hd.decide([], {}, node, T0, RULES)) == [("Undrain", "n1 p")]  # the reservation ended too
    still = {7: [bound("p", "n1")]}
    assert kinds(hd.decide([], still, node, T0, RULES)) == [], "the pod it names still runs there"
    other = resv(8, "n1")
    late = {8: [bound("q", "n1")], 7: []}
    steps = hd.decide([other], late, node, T0 + timedelta(seconds=31), RULES)
    assert kinds(steps) == [("Held", other.name), ("Drain", "n1 q")], "the drain names the pod still late"
    foreign = {"n1": NodeInfo(name="n1", states=("IDLE", "DRAIN"), reason="admin: disk")}
    assert kinds(hd.decide([], {}, foreign, T0, RULES)) == [], "another drain is never lifted"


def test_running_preemptable_jobs_are_read_again_the_longest_unread_first() -> None:
    running = [(1, "pods"), (2, "pods"), (3, "pods")]
    assert hd.preemption_checks(running, {1: 99.0, 2: 90.0}, 100.0, 5.0, 2) == [3, 2]
    assert hd.preemption_checks(running, {1: 99.0, 2: 99.0, 3: 99.0}, 100.0, 5.0, 4) == []


# ---- Slurm's preemption settings and the submit's rule ----------------------------------------------
QOS = {
    q.name: q
    for q in (
        QosInfo("pods", (), ("CANCEL",), 90),
        QosInfo("pods-urgent", ("native",), ("CANCEL",), 90),
        QosInfo("native", (), (), 0),
        QosInfo("native-urgent", ("pods",), (), 0),
        QosInfo("normal", (), (), 0),
    )
}
CONF = SlurmConf(
    epilog_slurmctld=("/etc/slurm/slurm-bridge-handoff.sh",),
    preempt_type="preempt/qos",
    preempt_mode=("REQUEUE",),
    over_time_limit_minutes=0,
)


@pytest.mark.parametrize(("policy", "request_fields", "preempts"), [
    (SlurmPolicy(), {"qos": "pods-urgent"}, False),  # nothing read yet: as before
    (SlurmPolicy(True, SlurmConf(preempt_type="preempt/none"), QOS), {"qos": "pods-urgent"}, False),
    (SlurmPolicy(True, CONF, QOS), {"qos": "pods-urgent"}, True),
    (SlurmPolicy(True, CONF, QOS), {"qos": "pods"}, False),
    (SlurmPolicy(True, CONF, QOS, {"": "normal", "physics": "pods-urgent"}), {}, False),  # its default QOS
    (SlurmPolicy(True, CONF, QOS, {"": "normal", "physics": "pods-urgent"}), {"account": "physics"}, True),
    (SlurmPolicy(True, CONF, QOS, None), {}, True),  # the default QOS unknown while some QOS preempts
    (SlurmPolicy(True, SlurmConf(preempt_type="preempt/partition_prio"), {}), {}, True),
])  # fmt: skip
def test_a_job_that_may_preempt_is_known_from_its_qos(
    policy: SlurmPolicy, request_fields: dict[str, Any], preempts: bool
) -> None:
    assert policy.may_preempt(JobRequest(**request_fields)) is preempts


def test_the_policy_names_preemptors_preemptable_qos_and_over_time_limits() -> None:
    policy = SlurmPolicy(True, CONF, QOS, over_time_minutes={"long": 5, "free": None})
    assert policy.preemptors_of("pods") == ("native-urgent",) and policy.preemptable("pods")
    assert not policy.preemptable("normal")
    h = Handoff.of_policy(policy, 10)
    assert (h.margin, h.over_time_of("long"), h.over_time_of("free"), h.over_time_of("x")) == (
        10, timedelta(minutes=5), None, timedelta(0),
    )  # fmt: skip


async def test_a_job_that_may_preempt_is_queued_never_allocated_at_once() -> None:
    slurm = FakeSubmits(allocates=False)
    placer = Placer(slurm, True, SlurmPolicy(True, CONF, QOS).may_preempt)
    await placer.place(JobRequest(qos="pods-urgent"), "n", "c")
    assert slurm.calls == ["submit"] and slurm.comments == ["c"]
    allowed = FakeSubmits()
    await Placer(allowed, True, SlurmPolicy(True, CONF, QOS).may_preempt).place(JobRequest(qos="pods"), "n", "c")
    assert allowed.calls == ["allocate"]


def test_what_the_handoff_lacks_in_slurm_is_named() -> None:
    cfg = Config(handoff=HandoffConfig(maxGracePeriodSeconds=60, marginSeconds=10))
    used = frozenset({"pods", "pods-urgent", "normal"})  # the bridge's jobs' QOS
    assert policy_problems(SlurmPolicy(True, CONF, QOS), cfg, used) == []
    bad = dict(QOS, pods=QosInfo("pods", (), ("SUSPEND",), 90), native=QosInfo("native", (), (), 30))
    bad["pods-urgent"] = QosInfo("pods-urgent", ("native",), ("CANCEL",), 90)
    found = policy_problems(SlurmPolicy(True, SlurmConf(preempt_type="preempt/qos"), bad), cfg, used | {"native"})
    assert any("no EpilogSlurmctld" in p for p in found)
    assert any("QOS pods" in p and "SUSPEND" in p for p in found)
    assert any("QOS native" in p and "GraceTime 30s" in p for p in found)


# ---- the likely preemptor -------------------------------------------------------------------------
VICTIM = slurm_job(7, "RUNNING", nodes=("n1",), qos="pods", preempt_time=T0)


@pytest.mark.parametrize(("candidate", "likely"), [
    (slurm_job(9, "PENDING", qos="native-urgent", scheduled_nodes=("n1",)), True),
    (slurm_job(9, "PENDING", qos="native-urgent", scheduled_nodes=("n2",)), False),  # elsewhere
    (slurm_job(9, "PENDING", qos="normal", scheduled_nodes=("n1",)), False),  # its QOS cannot preempt pods
    (slurm_job(9, "RUNNING", qos="native-urgent", nodes=("n1",), start_time=T0 + timedelta(seconds=3)), True),
    (slurm_job(9, "RUNNING", qos="native-urgent", nodes=("n1",), start_time=T0 - timedelta(hours=1)), False),
])  # fmt: skip
def test_the_likely_preemptor_may_preempt_and_is_planned_or_started_on_the_victims_nodes(
    candidate: JobInfo, likely: bool
) -> None:
    assert is_likely(VICTIM, candidate, ("native-urgent",)) is likely


async def test_the_preemptor_is_looked_for_among_the_newest_live_jobs() -> None:
    slurm = FakeSlurm(
        VICTIM,
        slurm_job(8, "RUNNING", qos="normal", nodes=("n2",)),
        slurm_job(9, "PENDING", qos="native-urgent", scheduled_nodes=("n1",), name="big", user_name="alice"),
        slurm_job(10, "COMPLETED", qos="native-urgent"),
    )
    finder = PreemptorFinder(slurm, PolicyHolder(SlurmPolicy(True, CONF, QOS)))
    assert await finder(VICTIM) == "likely preempted by Slurm job 9 (big, user alice, QOS native-urgent)"
    assert slurm.calls == ["states", "get 9"]
    slurm.set(slurm_job(9, "PENDING", qos="native-urgent", name="big", user_name="alice"))  # no planned nodes
    assert await finder(VICTIM) == "likely preempted by Slurm job 9 (big, user alice, QOS native-urgent)"
    del slurm.jobs[9]
    assert "not found among the 1 newest live jobs (QOS that may preempt it: native-urgent)" in await finder(VICTIM)


# ---- the shell: released cancels, a preempted end, the submit's handoff scope -----------------------
REF = PhjRef(BRIDGE, "ns", "c", "uid-c")


async def test_the_bridges_own_cancel_marks_each_live_part_released_first() -> None:
    """The released mark is the admin_comment's (only an operator sets it), each live part's own
    with every key kept; never the job's name, which a tenant can set. A pending part too: Slurm may
    start it before the cancel lands, and its epilog must then hold nothing. An ended one is left."""
    mark = encode_admin_comment(REF, handoff="node")
    leader = slurm_job(7, "RUNNING", nodes=("n1",), het=(7, 0), name="ns/c#released", admin_comment=mark)
    part = slurm_job(8, "RUNNING", nodes=("n2",), het=(7, 1), name="ns/c", admin_comment=mark)
    pending = slurm_job(9, "PENDING", het=(7, 2), name="ns/c", admin_comment=mark)
    done = slurm_job(10, "COMPLETED", nodes=("n3",), het=(7, 3), name="ns/c", admin_comment=mark)
    slurm = FakeSlurm(leader, part, pending, done)
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [leader, part, pending, done])
    await jobs.cancel(7, REF)
    assert slurm.calls == ["released 7", "released 8", "released 9", "cancel 7"]
    assert [slurm.jobs[i].admin_comment for i in (7, 8, 9, 10)] == [released_comment(mark)] * 3 + [mark]
    assert [slurm.jobs[i].name for i in (7, 8)] == ["ns/c#released", "ns/c"], "names are not touched"
    slurm.calls.clear()
    await jobs.cancel(8, REF, released=False)  # pods may run on it: the script's reservation must hold
    assert slurm.calls == ["cancel 8"]


async def test_a_pending_job_slurm_will_not_update_is_cancelled_without_the_mark() -> None:
    """Slurm refuses any update of a pending job that can never run (2015, seen on a pod larger than
    any node): its cancel goes on without the mark. A running job's refused mark stops the cancel
    (it is tried again): cancelled unmarked, its nodes would be held for its pods' grace."""
    mark = encode_admin_comment(REF, handoff="node")
    pending = slurm_job(9, "PENDING", name="ns/c", admin_comment=mark)
    running = slurm_job(8, "RUNNING", nodes=("n2",), name="ns/c", admin_comment=mark)
    slurm = FakeSlurm(pending, running)
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [pending, running])

    async def refuse(job_id: int, admin_comment: str, comment: str | None = None) -> None:
        raise SlurmError("Job update requested failed: Requested partition configuration not available now", status=422)

    slurm.mark_released = refuse  # type: ignore[method-assign]
    await jobs.cancel(9, REF)
    assert slurm.calls == ["cancel 9"]
    with pytest.raises(SlurmError):
        await jobs.cancel(8, REF)
    assert slurm.calls == ["cancel 9"], "the running job is not cancelled unmarked"


async def test_a_job_not_read_yet_is_marked_released_with_its_placeholderjobs_ref() -> None:
    slurm = FakeSlurm()
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [slurm_job(5, "RUNNING", nodes=("n1",))])
    seen: list[tuple[int, str, str | None]] = []

    async def mark(job_id: int, admin_comment: str, comment: str | None = None) -> None:
        seen.append((job_id, admin_comment, comment))

    slurm.mark_released = mark  # type: ignore[method-assign]
    await jobs.cancel(12, REF)  # not in the poller's snapshot
    await jobs.cancel(5, REF)  # read, but its admin_comment is not the bridge's mark
    released = encode_admin_comment(REF, released=True)
    # the same update tells slurmctld's notify hook that the bridge needs no notice of the end
    quiet = 'slurm-bridge:{"notify":"none"}'
    assert seen == [(12, released, quiet), (5, released, quiet)]


@pytest.mark.parametrize(
    ("epilogs", "renamed"),
    [
        ((), False),  # no script to skip
        (("/etc/slurm/slurm-bridge-notify.sh",), False),  # slurmctld's hook to the operator reads no name
        (("/etc/slurm/slurm-bridge-notify",), False),  # nor does its compiled form
        (("/etc/slurm/slurm-bridge-notify.sh", "/site/handoff.sh"), True),  # another may read it
    ],
)
async def test_the_released_mark_only_where_an_epilog_may_read_it(epilogs: tuple[str, ...], renamed: bool) -> None:
    slurm = FakeSlurm()
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [slurm_job(7, "RUNNING", nodes=("n1",), ref=REF)])
    jobs.policy.current = SlurmPolicy(True, SlurmConf(preempt_type="preempt/qos", epilog_slurmctld=epilogs))
    await jobs.cancel(7, REF)
    assert slurm.calls == (["released 7"] if renamed else []) + ["cancel 7"]


async def test_a_preempted_end_names_the_likely_preemptor_on_the_placeholderjob_and_the_pods() -> None:
    pod = make_pod("p").uid("pod-uid").scheduler().node("n1").phase("Running").obj()
    kube, slurm = shell_kube({}), FakeSlurm()
    jobs = shell(kube, slurm, placeholderjob(jobId=7, phase="Running"), pod, [VICTIM])

    async def preemptor(job: JobInfo) -> str:
        return f"likely preempted by Slurm job 9 (victim {job.job_id})"

    jobs.handoff.describe_preemptor = preemptor
    phj = jobs.phjs.model(("ns", "p"))
    assert phj is not None
    await jobs.handoff.end_preempted(phj, pl.EndPreempted(VICTIM, ("p",), "Slurm job 7 is preempted"), {"p": pod})
    said = [(kind, reason, msg) for kind, reason, msg in kube.said if reason == names.REASON_SLURM_JOB_PREEMPTED]
    assert [k for k, _, _ in said] == ["PlaceholderJob", "Pod"]
    assert all("likely preempted by Slurm job 9 (victim 7)" in m for _, _, m in said)
    assert ("delete", "/api/v1/namespaces/ns/pods/p") in kube.calls


async def test_the_submit_marks_the_job_with_the_handoffs_scope() -> None:
    pod = make_pod("p").uid("pod-uid").scheduler().gated().phase("Pending").obj()
    slurm = FakeSlurm(next_id=6)
    jobs = shell(shell_kube({}), slurm, placeholderjob(), pod, [])
    await jobs.reconcile(("ns", "p"))
    phj = jobs.phjs.model(("ns", "p"))
    assert phj is not None and len(slurm.comments) == 1
    assert json.loads(slurm.comments[0].removeprefix(names.ADMIN_COMMENT_PREFIX)) == {
        "bridge": BRIDGE, "handoff": "cores", "name": "p", "ns": "ns", "uid": phj.metadata.uid,
    }  # fmt: skip


# ---- the handoff loop's pass -------------------------------------------------------------------------


def loop(
    slurm: FakeHandoff, pods: list[Obj], nodes: dict[str, NodeInfo] | None = None, jobs: list[JobInfo] | None = None
) -> tuple[HandoffController, FakeKube, FakeSlurm]:
    cfg = Config(handoff=HandoffConfig(maxGracePeriodSeconds=60, marginSeconds=10))
    reads = FakeSlurm(*(jobs or []))
    poller = SlurmPoller(reads, cfg.bridgeId, 1.0, lambda _: None)
    ref = PhjRef(cfg.bridgeId, "ns", "p", "phj-uid")
    poller.snapshot = JobSnapshot({j.job_id: j for j in jobs or []}, {j.job_id: ref for j in jobs or []}, 0.0)
    store = ObjectStore(index=pod_job_index)
    for p in pods:
        store.upsert(p)
    kube = FakeKube()
    ctrl = HandoffController(
        cfg,
        kube,
        slurm,
        store,
        poller,
        PolicyHolder(),
        NodeDrains(slurm, nodes or {}),
    )
    return ctrl, kube, reads


class NodeDrains:
    """The node controller's side of the handoff's drains, on its real node table."""

    def __init__(self, slurm: FakeHandoff, nodes: dict[str, NodeInfo]) -> None:
        self.table = SlurmNodeTable(slurm)  # type: ignore[arg-type]  # update_node only
        self.table.listed = dict(nodes)

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None:
        return self.table.current()

    async def set_drain(self, slurm_name: str, reason: str | None) -> None:
        await self.table.set_drain(slurm_name, reason)


def labelled(pod: Obj, job_id: int) -> Obj:
    pod["metadata"].setdefault("labels", {})[names.LABEL_SLURM_JOB_ID] = str(job_id)
    return pod


async def test_slurms_settings_are_read_in_one_place_into_the_holder_and_the_queueing_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    slurm = FakeHandoff(conf=CONF, qos=list(QOS.values()), defaults={"": "normal"}, over_time={"long": 5})
    holder = PolicyHolder()
    settings = SlurmSettings(Config(), slurm, holder, lambda: {"pods"}, lambda: "slurm")
    with caplog.at_level(logging.INFO, logger="slurm_bridge.operator.slurmsettings.reader"):
        await settings.read()
        await settings.read()
    assert slurm.calls == ["conf", "qos", "defaults slurm", "partitions"] * 2
    assert holder.current.known and holder.current.over_time_minutes == {"long": 5}
    said = [r.getMessage() for r in caplog.records if "queued" in r.getMessage()]
    assert said == [f"Slurm's settings: {queueing(holder.current)}"], "said once, while it does not change"
    assert "native-urgent" in said[0] and "never allocated at once" in said[0]


def test_the_queueing_in_words_follows_preempt_type_and_the_qos() -> None:
    assert "preempts nothing" in queueing(SlurmPolicy())
    assert "every job is queued" in queueing(SlurmPolicy(True, SlurmConf(preempt_type="preempt/partition_prio")))
    assert "no QOS may preempt" in queueing(SlurmPolicy(True, SlurmConf(preempt_type="preempt/qos"), {}))


async def test_a_pass_holds_while_the_pod_runs_then_releases() -> None:
    now = datetime.now(UTC)
    r = resv(7, "n1", ended=now)
    slurm = FakeHandoff([r])
    pod = labelled(bound("p", "n1"), 7)
    ctrl, kube, _ = loop(slurm, [pod])
    await ctrl.pass_once()
    assert slurm.calls == ["reservations"], "the handoff loop reads no settings: operator/slurmsettings does"
    assert kube.told("kind", "name", "reason") == [("Pod", "p", names.REASON_HANDOFF_HELD)]
    await ctrl.pass_once()
    assert kube.told("kind", "name", "reason") == [("Pod", "p", names.REASON_HANDOFF_HELD)], "told once"
    ctrl.pods.delete(pod)
    ctrl.departures.note(dict(pod, status={"phase": "Failed"}))  # the kubelet ended it, then it went
    slurm.calls.clear()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", f"delete {r.name}"] and ctrl.reservations_released == 1


async def test_a_pass_drains_for_a_late_pod_and_undrains_once_it_is_gone() -> None:
    r = resv(7, "n1", ended=datetime.now(UTC) - timedelta(seconds=31))
    slurm = FakeHandoff([r])
    pod = labelled(bound("p", "n1"), 7)
    ctrl, kube, _ = loop(slurm, [pod])
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", "node n1 DRAIN"]
    assert ("Pod", "p", names.REASON_HANDOFF_NODE_DRAINED) in kube.told("kind", "name", "reason")
    assert ("Node", "n1", names.REASON_HANDOFF_NODE_DRAINED) in kube.told("kind", "name", "reason")
    slurm.calls.clear()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations"], "the node table shows the drain until the lists show it"
    ctrl.pods.delete(pod)
    ctrl.departures.note(dict(pod, status={"phase": "Failed"}))
    slurm.reservations.clear()  # the reservation ended meanwhile
    slurm.calls.clear()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", "node n1 UNDRAIN"]
    assert ("Node", "n1", names.REASON_HANDOFF_NODE_UNDRAINED) in kube.told("kind", "name", "reason")


async def test_a_pass_reads_running_jobs_slurm_may_preempt_again() -> None:
    running = slurm_job(7, "RUNNING", nodes=("n1",), qos="pods")
    other = slurm_job(8, "RUNNING", nodes=("n2",), qos="normal")
    slurm = FakeHandoff(conf=CONF, qos=list(QOS.values()))
    ctrl, _, reads = loop(slurm, [], jobs=[running, other])
    await SlurmSettings(Config(), slurm, ctrl.policy).read()  # what the handoff loop decides with
    await ctrl.pass_once()
    assert reads.calls == ["get 7"], "only the preemptable QOS's running job"
    reads.calls.clear()
    await ctrl.pass_once()
    assert reads.calls == [], "read again only after PREEMPTION_CHECK_SECONDS"


# ---- admission ----------------------------------------------------------------------------------------
def grace_pod(grace: int) -> Obj:
    pod = make_pod("p", "slurm").obj()
    pod["spec"]["terminationGracePeriodSeconds"] = grace
    pod["metadata"]["annotations"] = {names.ANN_PARTITION: "x"}
    return pod


def test_admission_refuses_a_grace_period_the_handoff_cannot_hold() -> None:
    cfg = Config(handoff=HandoffConfig(maxGracePeriodSeconds=60))
    assert validate(make_request(grace_pod(60)), cfg).allowed
    refused = validate(make_request(grace_pod(61)), cfg)
    assert not refused.allowed and "handoff.maxGracePeriodSeconds: 60" in refused.message
    template = {"metadata": {}, "spec": {**grace_pod(90)["spec"], "schedulerName": "slurm-bridge"}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "slurm"},
           "spec": {"template": template}}  # fmt: skip
    decision = validate(make_request(job, group="batch", kind="Job"), cfg)
    assert not decision.allowed and "spec.template.spec.terminationGracePeriodSeconds" in decision.message
    update = validate(make_request(job, group="batch", kind="Job", operation="UPDATE", old=job), cfg)
    assert update.allowed, "a grace period the update does not change stands (the limit may have been lowered)"


def test_a_plain_pods_create_with_a_long_grace_period_goes_to_review() -> None:
    cfg = Config(handoff=HandoffConfig(maxGracePeriodSeconds=45))
    validating = webhook_configurations(cfg, bundle="x", url="https://w")[1]
    [check] = [
        c["expression"] for c in validating["webhooks"][0]["matchConditions"] if c["name"] == "something-to-check"
    ]
    assert check.endswith("object.spec.terminationGracePeriodSeconds > 45)")


# ---- the client -----------------------------------------------------------------------------------------
def nov(n: int | None, *, infinite: bool = False) -> Obj:
    return {"set": n is not None, "infinite": infinite, "number": n or 0}


async def test_the_client_reads_reservations_settings_and_marks_jobs_released(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        seen.append(f"{request.method} {path}")
        ok: Obj = {"errors": [], "warnings": []}
        if path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.45/jobs/": {}}})
        if path.endswith("/ping"):
            return httpx.Response(200, json={**ok, "pings": [{"hostname": "c", "responding": True}]})
        if path == "/slurm/v0.0.45/reservations/":
            return httpx.Response(200, json={**ok, "reservations": [
                {"name": "maint"},
                {"name": "handoff-12_slurm-bridge_n1", "end_time": nov(1_800_000_040),
                 "start_time": nov(1_800_000_000)},
                {"name": "handoff-13_slurm-bridge-b_n1"}]})  # fmt: skip
        if path == "/slurm/v0.0.45/reservation/handoff-12_slurm-bridge_n1":
            return httpx.Response(200, json=ok)
        if path == "/slurm/v0.0.45/reservation/gone":
            return httpx.Response(
                422, json={"errors": [{"error_number": 2053, "error": "Requested reservation is invalid"}]}
            )
        if path == "/slurm/v0.0.45/job/12":
            assert json.loads(request.content) == {"admin_comment": 'slurm-bridge:{"released":true}'}
            return httpx.Response(200, json=ok)
        if path == "/slurmdb/v0.0.45/qos/":
            return httpx.Response(200, json={**ok, "qos": [
                {"name": "pods", "preempt": {"list": [], "mode": ["CANCEL"]}, "limits": {"grace_time": 90}},
                {"name": "urgent", "preempt": {"list": ["pods"], "mode": ["DISABLED"]}, "limits": {}}]})  # fmt: skip
        if path == "/slurmdb/v0.0.45/associations/":
            assert request.url.params["user"] == "slurm"
            return httpx.Response(200, json={**ok, "associations": [
                {"account": "a", "user": "slurm", "is_default": True, "default": {"qos": "normal"}},
                {"account": "b", "user": "slurm", "is_default": False, "default": {"qos": "urgent"}},
                {"account": "a", "user": "bob", "is_default": True, "default": {"qos": "x"}}]})  # fmt: skip
        if path == "/slurm/v0.0.45/partitions/":
            return httpx.Response(200, json={**ok, "partitions": [
                {"name": "main", "maximums": {"over_time_limit": nov(None)}},
                {"name": "ot", "maximums": {"over_time_limit": nov(2)}},
                {"name": "free", "maximums": {"over_time_limit": nov(None, infinite=True)}}]})  # fmt: skip
        if path == "/slurm/v0.0.45/conf":
            return httpx.Response(200, json={**ok, "slurm_conf": {
                "EpilogSlurmctld": ["/etc/slurm/slurm-bridge-handoff.sh"], "PreemptType": "preempt/qos",
                "PreemptMode": ["REQUEUE"], "OverTimeLimit": 1}})  # fmt: skip
        return httpx.Response(404, text="Unable to find requested URL endpoint.")

    payload = base64.urlsafe_b64encode(json.dumps({"sun": "slurm"}).encode()).decode().rstrip("=")
    token = tmp_path / "jwt"
    token.write_text(f"h.{payload}.s\n")
    client = SlurmClient("http://slurm.test:6820", token, transport=httpx.MockTransport(answer), backoff_base=0.0)
    async with client:
        found = await client.list_reservations()
        assert [x.name for x in found] == ["maint", "handoff-12_slurm-bridge_n1", "handoff-13_slurm-bridge-b_n1"]
        [r] = reservations_of(found, BRIDGE)
        assert (r.job_id, r.node, r.start_time) == (12, "n1", datetime.fromtimestamp(1_800_000_000, UTC))
        assert await client.delete_reservation(r.name) and not await client.delete_reservation("gone")
        await client.mark_released(12, 'slurm-bridge:{"released":true}')
        qos = {q.name: q for q in await client.qos_preemption() or []}
        assert qos["pods"] == QosInfo("pods", (), ("CANCEL",), 90) and qos["urgent"].preempts == ("pods",)
        assert client.jwt_user() == "slurm" and token_user("garbage") == ""
        assert await client.default_qos("slurm") == {"a": "normal", "": "normal", "b": "urgent"}
        assert await client.partition_over_time() == {"ot": 2, "free": None}
        conf = await client.slurm_conf()
        assert conf is not None
        assert (conf.epilog_slurmctld, conf.preempt_type, conf.preempt_mode, conf.over_time_limit_minutes) == (
            ("/etc/slurm/slurm-bridge-handoff.sh",),
            "preempt/qos",
            ("REQUEUE",),
            1,
        )
        assert client.requests_by_kind.get("DELETE /reservation/{name}") == 2  # one endpoint, whatever the name


async def test_a_pass_goes_on_with_the_reservations_when_the_settings_cannot_be_read() -> None:
    class Broken(FakeHandoff):
        async def slurm_conf(self) -> SlurmConf | None:
            raise SlurmError("GET /conf: access denied")

    r = resv(7, "n1")
    slurm = Broken([r])
    ctrl, _, _ = loop(slurm, [labelled(bound("p", "n1", phase="Failed"), 7)])  # its pod stopped
    settings = SlurmSettings(Config(), slurm, ctrl.policy)
    with pytest.raises(SlurmError):  # its own loop retries it
        await settings.read()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", f"delete {r.name}"] and not ctrl.policy.current.known
