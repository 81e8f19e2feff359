"""A CompositePodGroup's heterogeneous Slurm job in the decision table (operator/placeholderjobs/shapes/hetjob.py, and
the rows of operator/placeholderjobs/lifecycle.py it shares), with no servers.

The job has two components: component 0 (the leader, job 10, PodGroup ``a``: pod a0 on node na)
and component 1 (job 11, PodGroup ``b``: pods b0 and b1 on nb1 and nb2). Every PlaceholderJob
phase (and a deleted one) x every state of each component (and a component that vanished) x
every member state is checked against ``expected``, a rule written here from
docs/design/placeholderjob-lifecycle.md ("Heterogeneous jobs") independently of the code. Single cases
follow: submission, the release's labels and offsets, a short allocation, a component missing just after the submit.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import submitted_status
from slurm_bridge.operator.placeholderjobs.shapes import hetjob
from slurm_bridge.rules.tenancy import Verdict
from slurm_bridge.slurm.models import JobInfo, JobRequest
from tests.builders import make_phj, slurm_job
from tests.unit.operator.placeholderjobs.test_lifecycle import NOW, PERIOD, PODS_END, SLURM_END, pod, run, summary
from tests.unit.situations import decide_in

Obj = dict[str, Any]
LEADER, OTHER = 10, 11
NODES = {"a0": "na", "b0": "nb1", "b1": "nb2"}
OFFSET = {"a0": 0, "b0": 1, "b1": 1}
GROUP = {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup", "name": "c", "uid": "c-uid"}

PHASES = ["Pending", "Allocated", "Running", "Completed", "Deleted"]
STATES = ["PENDING", "RUNNING", "CANCELLED", "TIMEOUT", "vanished"]
MEMBERS = ["gated", "running", "one-ended", "all-succeeded", "all-deleted"]


def composite_phj(phase: str | None = "Pending", *, job_id: int | None = LEADER, **status: Any) -> Obj:
    built = make_phj("cpg-c").uid("phj-uid").generation(1).rv(5).finalizer()
    st: Obj = {"observedGeneration": 1, **status}
    if phase == "Deleted":
        built.deleted()
        phase = "Running"
    if phase is not None:
        st["phase"] = phase
    if job_id is not None:
        st["jobId"] = st["hetJobId"] = job_id
    if phase == "Pending":
        st.setdefault("slurmState", "PENDING")
    if phase in ("Allocated", "Running"):
        st.setdefault("assignments", [{"pod": p, "node": n, "offset": OFFSET[p]} for p, n in sorted(NODES.items())])
    if phase in names.TERMINAL_PHASES:
        st.setdefault("reason", "EndedBefore")
        st.setdefault("message", "ended before")
    a = {"podGroup": "a", "minMember": 1, "pods": ["a0"], "slurm": {"nodes": 1, "cpusPerTask": 1}}
    b = {"podGroup": "b", "minMember": 2, "pods": ["b0", "b1"], "slurm": {"nodes": 2, "cpusPerTask": 4}}
    built.pods("a0", "b0", "b1").spec(podUIDs={p: f"{p}-uid" for p in NODES}, minMember=3, minComponents=2,
                                      group=GROUP, slurm=a["slurm"], components=[a, b])  # fmt: skip
    return built.status(**st).obj()


def part(state: str, job_id: int, offset: int, nodes: tuple[str, ...]) -> JobInfo | None:
    if state == "vanished":
        return None
    pending = state == "PENDING"
    return slurm_job(job_id, state, nodes=() if pending else nodes, reason="Resources" if pending else "",
                     het=(LEADER, offset))  # fmt: skip


def side(s0: str, s1: str, **kw: Any) -> lc.SlurmSide:
    leader = part(s0, LEADER, 0, ("na",))
    other = part(s1, OTHER, 1, ("nb1", "nb2"))
    components = tuple(c for c in (leader, other) if c is not None)
    return lc.SlurmSide(poll_period=PERIOD, job_id=LEADER, job=leader, found=leader, components=components,
                        taken_at=NOW.mono, **kw)  # fmt: skip


def members(state: str) -> dict[str, Obj | None]:
    if state == "all-deleted":
        return dict.fromkeys(NODES)
    each = {"running": "running", "gated": "gated", "one-ended": "running", "all-succeeded": "succeeded"}[state]
    out = {p: pod(each, p, n) for p, n in NODES.items()}
    if state == "one-ended":
        out["b1"] = pod("succeeded", "b1", "nb2")
    return out


LIVE = ("PENDING", "RUNNING")


def cancels(s0: str, s1: str) -> list[tuple[Any, ...]]:
    """What is cancelled to end the job: the leader, which ends every component; when the
    leader ended alone, each live component on its own; when the view shows none, the leader."""
    if s0 in LIVE or (s0 == "vanished" and s1 == "vanished"):
        return [("cancel", LEADER)]
    return [("cancel", OTHER)] if s1 in LIVE else []


def expected(phase: str, s0: str, s1: str, member: str) -> tuple[list[tuple[Any, ...]], float | None]:
    live = [p for p in NODES if member in ("gated", "running") or (member == "one-ended" and p != "b1")]
    leftover = [("cancel", OTHER)] if s0 not in LIVE and s1 in LIVE else []
    if phase == "Deleted":
        live_leader = s0 in (*LIVE, "vanished")
        if not live_leader and not leftover:
            return [("finalize",)], None
        if live:
            return [("confirm",), ("end", tuple(live), "PlaceholderJobDeleted"), ("waiting", tuple(live))], 5.0
        cancel = [("cancel", LEADER), ("event", "Cancelled")] if live_leader else []
        return [("confirm",), *cancel, *leftover, ("finalize",)], None
    if phase in names.TERMINAL_PHASES:  # finish what a crash interrupted; the handoff
        end = [("end", tuple(live), "EndedBefore")] if live else []
        if s0 == "RUNNING":  # released only once every member stopped: never under a live pod
            return (end, None) if live else ([("confirm",), ("cancel", LEADER)], None)
        cancel = [("cancel", LEADER)] if s0 in LIVE else []
        return [*cancel, *leftover, *end], None
    if not live:  # Kubernetes -> Slurm: every member ended
        new_phase, reason = PODS_END["succeeded" if member == "all-succeeded" else "deleted"]
        return [("confirm",), ("status", new_phase, reason), *cancels(s0, s1), ("event", reason)], None
    if s0 == "vanished":
        new_phase, reason = SLURM_END["vanished"]
        return [("status", new_phase, reason), *cancels(s0, s1), ("event", reason), ("end", tuple(live), reason)], None
    ended = next(((s, o) for o, s in ((0, s0), (1, s1)) if s not in (*LIVE, "vanished")), None)
    if ended is not None:  # Slurm -> Kubernetes: any part ends the whole
        new_phase, reason = SLURM_END[ended[0]]
        return [("status", new_phase, reason), *cancels(s0, s1), ("event", reason), ("end", tuple(live), reason)], None
    if s1 == "vanished":  # the leader lives: the component is looked for, never taken for ended
        return [("full-list",)], PERIOD
    if s0 == "PENDING":
        waiting = tuple(live) if member == "gated" else ()
        return [("podgroup", False), ("told", waiting, "Resources"), ("status", "Pending", "Resources")], None
    if s1 == "PENDING":  # the leader runs, a component does not yet: wait, mirroring the leader
        return [("status", phase, "")], None
    if member == "gated":  # every component runs: record every node, then release every pod at once
        record = [("status", "Allocated", "")] if phase == "Pending" else []
        return [*record, ("release", tuple((p, NODES[p]) for p in live)), ("podgroup", True)], None
    writes: dict[str, list[tuple[Any, ...]]] = {
        "Pending": [("status", "Running", "")], "Allocated": [("status", "Running", None)], "Running": []
    }  # fmt: skip
    return [*writes[phase], ("release", ()), ("podgroup", True)], None


@pytest.mark.parametrize(("phase", "s0", "s1", "member"), list(itertools.product(PHASES, STATES, STATES, MEMBERS)))
def test_decision_table(phase: str, s0: str, s1: str, member: str) -> None:
    got = run(composite_phj(phase), side(s0, s1), members(member))
    assert got == expected(phase, s0, s1, member)


# ---- the release: labels, offsets, status ---------------------------------------------------------
def test_every_pod_gets_a_node_of_its_own_component_and_its_offset() -> None:
    plan = decide_in(
        PlaceholderJob.parse(composite_phj("Pending")), side("RUNNING", "RUNNING"), members("gated"), NOW, scheduler="s"
    )
    write, release, report = plan.actions
    assert isinstance(write, pl.WriteStatus) and isinstance(release, pl.Release)
    status = write.status
    assert (status.job_id, status.het_job_id, status.node_list) == (LEADER, LEADER, "na,nb[1-2]")
    assert [(a.pod, a.node, a.offset) for a in status.assignments or []] == [
        ("a0", "na", 0), ("b0", "nb1", 1), ("b1", "nb2", 1)]  # fmt: skip
    assert [(c.offset, c.pod_group, c.job_id, c.slurm_state, c.node_list) for c in status.components or []] == [
        (0, "a", LEADER, "RUNNING", "na"), (1, "b", OTHER, "RUNNING", "nb[1-2]")]  # fmt: skip
    assert release.job_id == LEADER and release.announce
    assert release.het == (("a0", LEADER, 0), ("b0", OTHER, 1), ("b1", OTHER, 1))
    assert isinstance(report, pl.ReportPodGroup) and report.scheduled and "heterogeneous job 10" in report.message


def test_components_may_share_a_node() -> None:
    both = side("RUNNING", "RUNNING")
    shared = both.components[1].model_copy(update={"nodes": ("na", "nb1")})
    slurm = dataclasses.replace(both, components=(both.components[0], shared))
    plan = decide_in(PlaceholderJob.parse(composite_phj("Pending")), slurm, members("gated"), NOW, scheduler="s")
    release = next(a for a in plan.actions if isinstance(a, pl.Release))
    assert dict(release.pods) == {"a0": "na", "b0": "na", "b1": "nb1"}


def test_a_component_short_of_nodes_fails_the_composite_and_cancels_the_job() -> None:
    both = side("RUNNING", "RUNNING")
    short = both.components[1].model_copy(update={"nodes": ("nb1",)})
    slurm = dataclasses.replace(both, components=(both.components[0], short))
    got = decide_in(PlaceholderJob.parse(composite_phj("Pending")), slurm, members("gated"), NOW, scheduler="s")
    assert [summary(a) for a in got.actions] == [("status", "Failed", "AllocationMismatch"), ("cancel", LEADER)]
    failed = got.actions[0]
    assert isinstance(failed, pl.WriteStatus) and "component 1 (PodGroup b)" in (failed.status.message or "")
    cancel = got.actions[1]
    assert isinstance(cancel, pl.Cancel) and cancel.released, "no member runs: nothing to hold"


def test_a_component_shrunk_under_running_pods_is_never_cancelled_under_them() -> None:
    """Its owner took a node from a running component: the pods may still run, so the node it
    gave away is drained naming the pod, every pod is ended, and the job is cancelled (marked
    released) only once they stopped (docs/security.md; tests/unit/operator/placeholderjobs/test_owner_changes.py)."""
    both = side("RUNNING", "RUNNING")
    short = both.components[1].model_copy(update={"nodes": ("nb1",)})
    slurm = dataclasses.replace(both, components=(both.components[0], short))
    got = decide_in(PlaceholderJob.parse(composite_phj("Running")), slurm, members("running"), NOW, scheduler="s")
    assert not any(isinstance(a, pl.Cancel) for a in got.actions)
    drain = got.actions[0]
    assert isinstance(drain, pl.DrainNodes) and (drain.job_id, drain.pods) == (OTHER, (("nb2", "b1"),))
    ended = [a for a in got.actions if isinstance(a, pl.EndPods)]
    assert ended and set(ended[0].pods) == set(NODES)


def test_a_component_the_view_lacks_is_looked_for_at_most_every_full_list_period() -> None:
    just = side("PENDING", "vanished", submitted_at=NOW.mono - 1)
    assert run(composite_phj("Pending"), just, members("gated")) == ([], PERIOD), "just submitted"
    listed = side("PENDING", "vanished", last_full_at=NOW.mono - 5)
    assert run(composite_phj("Pending"), listed, members("gated")) == ([], PERIOD), "a full list was taken lately"
    old = side("RUNNING", "vanished", last_full_at=NOW.mono - 60)
    assert run(composite_phj("Pending"), old, members("gated")) == ([("full-list",)], PERIOD)


def test_a_component_that_ended_names_itself_in_the_message() -> None:
    plan = decide_in(
        PlaceholderJob.parse(composite_phj("Running")),
        side("RUNNING", "CANCELLED"),
        members("running"),
        NOW,
        scheduler="s",
    )
    write = plan.actions[0]
    assert isinstance(write, pl.WriteStatus)
    assert "component 1, PodGroup b, of heterogeneous Slurm job 10" in (write.status.message or "")
    ended = [a for a in plan.actions if isinstance(a, pl.EndPods)]
    assert ended and set(ended[0].pods) == set(NODES)  # pods of the other component end too


def test_a_changed_spec_does_not_update_a_pending_heterogeneous_job() -> None:
    obj = composite_phj("Pending")
    obj["metadata"]["generation"] = 2
    got, _ = run(obj, side("PENDING", "PENDING"), members("gated"))
    assert ("update", LEADER) not in got
    assert got[0] == ("status", None, None)  # observedGeneration only


# ---- submission -----------------------------------------------------------------------------------
def unsubmitted(**changes: Any) -> Obj:
    obj = composite_phj(None, job_id=None)
    obj["spec"].update(changes)
    return obj


def test_the_composite_waits_for_every_component_then_is_fenced_and_submitted_as_one_job() -> None:
    nothing = lc.SlurmSide(poll_period=PERIOD, taken_at=NOW.mono)
    short = {**members("gated"), "b1": None}
    plan = decide_in(PlaceholderJob.parse(unsubmitted()), nothing, short, NOW, scheduler="s")
    [write] = plan.actions
    assert isinstance(write, pl.WriteStatus) and write.status.reason == names.REASON_WAITING_FOR_PODS
    assert write.status.message == (
        "PodGroup b has 1 of 2 member pods; the heterogeneous Slurm job is submitted once at least 2 PodGroups "
        "have pods and every one has all its member pods"
    )
    plan = decide_in(PlaceholderJob.parse(unsubmitted()), nothing, members("gated"), NOW, scheduler="s")
    fence, submit = plan.actions
    assert isinstance(fence, pl.Fence) and isinstance(submit, pl.Submit)
    assert [r.nodes for r in submit.components] == [1, 2] and submit.request == submit.components[0]
    assert set(submit.present) == set(NODES)


def test_fewer_components_than_min_group_count_wait() -> None:
    obj = unsubmitted(minComponents=3)
    plan = decide_in(
        PlaceholderJob.parse(obj),
        lc.SlurmSide(poll_period=PERIOD, taken_at=NOW.mono),
        members("gated"),
        NOW,
        scheduler="s",
    )
    [write] = plan.actions
    assert isinstance(write, pl.WriteStatus) and (write.status.message or "").startswith("2 of 3 PodGroups have pods")


def test_the_tenant_policy_judges_every_component() -> None:
    def policy(request: JobRequest) -> Verdict:
        if request.nodes == 2:
            return Verdict(request, reason=names.REASON_TENANT_POLICY_VIOLATION, problems=("too big",))
        return Verdict(request.model_copy(update={"account": "team"}))

    nothing = lc.SlurmSide(poll_period=PERIOD, taken_at=NOW.mono)
    got = decide_in(PlaceholderJob.parse(unsubmitted()), nothing, members("gated"), NOW, scheduler="s", tenancy=policy)
    assert [summary(a)[:2] for a in got.actions][:2] == [("status", "Failed"), ("event", "TenantPolicyViolation")]

    def allow(request: JobRequest) -> Verdict:
        return Verdict(request.model_copy(update={"account": "team"}))

    got = decide_in(PlaceholderJob.parse(unsubmitted()), nothing, members("gated"), NOW, scheduler="s", tenancy=allow)
    submit = got.actions[-1]
    assert isinstance(submit, pl.Submit) and all(r.account == "team" for r in submit.components)


def test_the_submitted_status_names_the_heterogeneous_job() -> None:
    reqs = (JobRequest(nodes=1, partition="p"), JobRequest(nodes=2, partition="p"))
    status = submitted_status(PlaceholderJob.parse(unsubmitted()), LEADER, None, reqs[0], NOW.wall, components=reqs)
    assert status.het_job_id == LEADER and status.job_id == LEADER
    assert status.message == (
        "submitted heterogeneous Slurm job 10 (2 components of 1+2 node(s), partition p; Slurm starts it in a "
        "backfill pass)"
    )


def test_a_single_component_may_come_back_as_a_plain_job() -> None:
    obj = composite_phj("Pending")
    obj["spec"]["components"] = obj["spec"]["components"][:1]
    obj["spec"]["pods"] = ["a0"]
    plain = JobInfo(job_id=LEADER, states=("RUNNING",), nodes=("na",))
    slurm = lc.SlurmSide(poll_period=PERIOD, job_id=LEADER, job=plain, found=plain, taken_at=NOW.mono)
    got, _ = run(obj, slurm, {"a0": pod("gated", "a0", "na")})
    assert got == [("status", "Allocated", ""), ("release", (("a0", "na"),)), ("podgroup", True)]


def test_component_status_without_a_record_keeps_offset_and_podgroup() -> None:
    obj = composite_phj("Pending")
    entries = hetjob.component_status(PlaceholderJob.parse(obj).spec.components or [], [None, None])
    assert [e.dump() for e in entries] == [{"offset": 0, "podGroup": "a"}, {"offset": 1, "podGroup": "b"}]
    assert PlaceholderJobStatus(components=entries).dump()["components"][1] == {"offset": 1, "podGroup": "b"}


def test_a_heterogeneous_job_status_does_not_name_is_adopted_with_its_het_job_id() -> None:
    obj = composite_phj(None, job_id=None)
    plan = decide_in(PlaceholderJob.parse(obj), side("PENDING", "PENDING"), members("gated"), NOW, scheduler="s")
    adopt = plan.actions[0]
    assert isinstance(adopt, pl.WriteStatus) and adopt.status.job_id == adopt.status.het_job_id == LEADER
    assert not any(isinstance(a, pl.Submit) for a in plan.actions), "adopted, never submitted again"
