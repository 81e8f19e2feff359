"""The PlaceholderJob decision table (operator/placeholderjobs/lifecycle.py ``decide``), with no servers.

Every PlaceholderJob phase (and a deleted one) x every Slurm state the bridge reacts to (and a
job that vanished from Slurm) x every member pod state is checked against ``expected``: a short
rule written here from docs/design/placeholderjob-lifecycle.md, independently of ``decide``. Crash-recovery cases
(a job id status does not have yet, an uncertain submit, a submit Slurm's view does not show yet,
a missing finalizer, the first list not read yet) follow as single cases.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import pending as pd
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.inputs import DEVICES_RETRY_SECONDS, SUBMIT_VISIBILITY_GRACE
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import expected_start
from slurm_bridge.slurm.models import JobInfo, JobRequest, JobSettings
from tests.builders import make_phj, make_pod, slurm_job
from tests.unit.situations import decide_in

Obj = dict[str, Any]
JOB = 7
NODE = "n1"
PERIOD = 1.0
NOW = lc.Clock(1000.0, datetime(2026, 1, 1, 12, 0, tzinfo=UTC))

PHASES = ["Pending", "Allocated", "Running", "Completed", "Failed", "Cancelled", "Deleted"]
SLURM_STATES = ["PENDING", "RUNNING", "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "vanished"]
MEMBER_STATES = ["running", "gated", "succeeded", "failed", "terminating", "deleted"]


# ---- objects ------------------------------------------------------------------------------------
def phj(
    phase: str | None = "Pending", *, job_id: int | None = JOB, pods: tuple[str, ...] = ("p",), **status: Any
) -> Obj:
    """A single-pod PlaceholderJob in ``phase`` ("Deleted": Running, with a deletionTimestamp)."""
    built = make_phj().uid("phj-uid").generation(1).rv(5).finalizer().owned_by_pod("p", "p-uid")
    built.pods(*pods).spec(slurm={"nodes": len(pods)})
    st: Obj = {"observedGeneration": 1, **status}
    if phase == "Deleted":
        built.deleted()
        phase = "Running"
    if phase is not None:
        st["phase"] = phase
    if job_id is not None:
        st["jobId"] = job_id
    if phase == "Pending":
        st.setdefault("slurmState", "PENDING")
    if phase in ("Allocated", "Running"):
        st.setdefault("assignments", [{"pod": "p", "node": NODE}])
    if phase in names.TERMINAL_PHASES:
        st.setdefault("reason", "EndedBefore")
        st.setdefault("message", "ended before")
    return built.status(**st).obj()


def pod(state: str, name: str = "p", node: str | None = NODE) -> Obj | None:
    """A member pod in ``state``: running (bound), gated, succeeded, failed, terminating, deleted."""
    if state == "deleted":
        return None
    phase = {"running": "Running", "terminating": "Running", "succeeded": "Succeeded", "failed": "Failed",
             "gated": "Pending", "terminating-failed": "Failed"}[state]  # fmt: skip
    built = make_pod(name).uid(f"{name}-uid").scheduler().phase(phase)
    if state.startswith("terminating"):
        built.deleted()
    if state == "gated":
        built.gated()
    elif node is not None:
        built.node(node)
    return built.obj()


def job(state: str, job_id: int = JOB, nodes: tuple[str, ...] | None = None) -> JobInfo | None:
    if state == "vanished":
        return None
    if nodes is None:
        nodes = () if state == "PENDING" else (NODE,)
    return slurm_job(job_id, state, nodes=nodes, reason="Resources" if state == "PENDING" else "")


def slurm_side(state: str, job_id: int | None = JOB, **kw: Any) -> lc.SlurmSide:
    j = job(state, job_id or JOB)
    return lc.SlurmSide(poll_period=PERIOD, job_id=job_id, job=j, found=j, taken_at=NOW.mono, **kw)


# ---- running decide the way the shell does --------------------------------------------------------
def summary(action: pl.Action) -> tuple[Any, ...]:
    match action:
        case pl.WriteStatus(status=s):
            return ("status", s.phase, s.reason)
        case pl.Event(reason=reason):
            return ("event", reason)
        case pl.Cancel(job_id=job_id):
            return ("cancel", job_id)
        case pl.EndPods(pods=pods, reason=reason):
            return ("end", pods, reason)
        case pl.NoteWaiting(pods=pods):
            return ("waiting", pods)
        case pl.Release(pods=pods):
            return ("release", pods)
        case pl.ReportPodGroup(scheduled=scheduled):
            return ("podgroup", scheduled)
        case pl.UpdateJob(job_id=job_id):
            return ("update", job_id)
        case pl.ReportPending(pods=pods, reason=reason):
            return ("told", pods, reason)
        case pl.EndPreempted(pods=pods):
            return ("end-preempted", pods)
        case pl.RecordVanished(until=until):
            return ("vanished", tuple(n for n, _ in until))
    return ({
        pl.AddFinalizer: "finalizer", pl.ConfirmMembers: "confirm", pl.Fence: "fence", pl.Submit: "submit",
        pl.RequestFullList: "full-list", pl.ForgetUncertain: "forget-uncertain", pl.Finalize: "finalize",
    }[type(action)],)  # fmt: skip


def gone(members: dict[str, Obj | None]) -> dict[str, datetime | None]:
    """The departures of the members that are gone, as the pod watch saw them: each after a
    terminal phase (a kubelet's end; a vanished one: test_vanished_pods.py)."""
    return {n: None for n, p in members.items() if p is None}


def run(obj: Obj, slurm: lc.SlurmSide, members: dict[str, Obj | None]) -> tuple[list[tuple[Any, ...]], float | None]:
    """decide; after ConfirmMembers decide again (the GET agrees with the cache, and the status
    written before it is in place), as
    operator/placeholderjobs/sync/phjsync.py does. The actions' summaries, the re-queue."""
    parsed = PlaceholderJob.parse(obj)
    plan = decide_in(parsed, slurm, members, NOW, scheduler="slurm-bridge", departed=gone(members))
    out = [summary(a) for a in plan.actions]
    if plan.actions and isinstance(plan.actions[-1], pl.ConfirmMembers):
        written = [a.status.dump() for a in plan.actions if isinstance(a, pl.WriteStatus)]
        obj = dict(obj, status={k: v for d in [obj.get("status", {}), *written] for k, v in d.items()})
        plan = decide_in(
            PlaceholderJob.parse(obj),
            slurm,
            members,
            NOW,
            dict(members),
            scheduler="slurm-bridge",
            departed=gone(members),
        )
        out += [summary(a) for a in plan.actions]
    assert all(not isinstance(a, pl.ConfirmMembers) for a in plan.actions[:-1]), "ConfirmMembers ends a plan"
    return out, plan.requeue


# ---- the rule -----------------------------------------------------------------------------------
# What the PlaceholderJob becomes when Slurm ends the job under live pods, and when its pods end.
SLURM_END = {"COMPLETED": ("Completed", "SlurmJobCompleted"), "CANCELLED": ("Cancelled", "SlurmJobCancelled"),
             "TIMEOUT": ("Failed", "SlurmJobTimeout"), "NODE_FAIL": ("Failed", "SlurmJobNodeFail"),
             "PREEMPTED": ("Failed", "SlurmJobPreempted"), "vanished": ("Failed", "SlurmJobVanished")}  # fmt: skip
PODS_END = {"succeeded": ("Completed", "PodsSucceeded"), "failed": ("Failed", "PodsFailed"),
            "deleted": ("Cancelled", "PodsDeleted")}  # fmt: skip


def expected(phase: str, slurm: str, member: str) -> tuple[list[tuple[Any, ...]], float | None]:
    """docs/design/placeholderjob-lifecycle.md, "The PlaceholderJob decision table", for one member
    bound to NODE (or still gated)."""
    holds_node = member in ("running", "terminating", "gated")  # a terminating pod still runs on its node
    slurm_may_hold = slurm in ("PENDING", "RUNNING", "vanished")  # (a vanished job is cancelled anyway)
    if phase == "Deleted":
        if not slurm_may_hold:
            return [("finalize",)], None
        if holds_node:  # end the pod first (unless it is terminating already), release later
            end = [("end", ("p",), "PlaceholderJobDeleted")] if member != "terminating" else []
            return [("confirm",), *end, ("waiting", ("p",))], lc.FINALIZE_RECHECK_SECONDS
        return [("confirm",), ("cancel", JOB), ("event", "Cancelled"), ("finalize",)], None
    if phase in names.TERMINAL_PHASES:  # finish what a crash interrupted; the handoff
        end = [("end", ("p",), "EndedBefore")] if member in ("running", "gated") else []
        if slurm == "PENDING":
            return [("cancel", JOB), *end], None
        if slurm == "RUNNING":  # released only once the pod stopped: never under a live pod
            return (end, None) if holds_node else ([("confirm",), ("cancel", JOB)], None)
        return end, None
    if not holds_node:  # Kubernetes -> Slurm: every member ended (confirmed by a GET)
        new_phase, reason = PODS_END[member]
        cancel = [("cancel", JOB)] if slurm_may_hold else []
        return [("confirm",), ("status", new_phase, reason), *cancel, ("event", reason)], None
    if slurm in SLURM_END:  # Slurm -> Kubernetes
        new_phase, reason = SLURM_END[slurm]
        return [("status", new_phase, reason), ("event", reason), ("end", ("p",), reason)], None
    if slurm == "PENDING":  # mirror Slurm's state and reason; tell the waiting pod why (first wait)
        waiting = ("p",) if member == "gated" else ()
        return [("podgroup", False), ("told", waiting, "Resources"), ("status", "Pending", "Resources")], None
    if member == "gated":  # record the node (unless recorded), then release the pod
        record: list[tuple[Any, ...]] = [("status", "Allocated", "")] if phase == "Pending" else []
        return [*record, ("release", (("p", NODE),)), ("podgroup", True)], None
    # The member is bound already: the allocation (when not recorded yet) and Running are one write.
    write: list[tuple[Any, ...]] = []
    if phase == "Allocated":
        write = [("status", "Running", None)]
    elif phase != "Running":
        write = [("status", "Running", "")]
    return [*write, ("release", ()), ("podgroup", True)], None


@pytest.mark.parametrize(("phase", "slurm", "member"), list(itertools.product(PHASES, SLURM_STATES, MEMBER_STATES)))
def test_decision_table(phase: str, slurm: str, member: str) -> None:
    got = run(phj(phase), slurm_side(slurm), {"p": pod(member)})
    assert got == expected(phase, slurm, member)


def test_the_table_covers_every_phase_and_terminal_state() -> None:
    assert set(PHASES) - {"Deleted"} == {
        names.PHASE_PENDING, names.PHASE_ALLOCATED, names.PHASE_RUNNING, *names.TERMINAL_PHASES,
    }  # fmt: skip


# ---- crash recovery and the steps around a submit --------------------------------------------------
def test_nothing_is_decided_before_the_first_full_job_list() -> None:
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    plan = decide_in(obj, lc.SlurmSide(synced=False, poll_period=PERIOD), {"p": pod("running")}, NOW, scheduler="s")
    assert plan == pl.Plan(requeue=PERIOD)


def test_a_job_status_does_not_name_is_adopted_not_submitted_again() -> None:
    """A crash between submit and the status write: the job, found by its admin_comment's uid,
    goes into status before anything else (here: it is running, so the pod is released)."""
    obj = phj(None, job_id=None)
    got, _ = run(obj, slurm_side("RUNNING"), {"p": pod("gated")})
    assert got == [("status", "Pending", None), ("status", "Allocated", ""), ("release", (("p", NODE),)),
                   ("podgroup", True)]  # fmt: skip
    first = decide_in(
        PlaceholderJob.parse(obj), slurm_side("RUNNING"), {"p": pod("gated")}, NOW, scheduler="s"
    ).actions[0]
    assert isinstance(first, pl.WriteStatus) and first.status.job_id == JOB


def test_without_a_job_the_pods_are_submitted() -> None:
    assert run(phj(None, job_id=None), slurm_side("vanished", job_id=None), {"p": pod("gated")}) == (
        [("submit",)],
        None,
    )


def test_an_uncertain_submit_waits_for_a_full_list_taken_after_it() -> None:
    members = {"p": pod("gated")}
    waiting = slurm_side("vanished", job_id=None, uncertain_since=900.0, last_full_at=899.0)
    assert run(phj(None, job_id=None), waiting, members) == ([("full-list",)], PERIOD)
    listed = slurm_side("vanished", job_id=None, uncertain_since=900.0, last_full_at=901.0)
    assert run(phj(None, job_id=None), listed, members) == ([("forget-uncertain",), ("submit",)], None)


@pytest.mark.parametrize(("submitted_at", "taken_at", "waits"), [
    (NOW.mono - 1, NOW.mono, True),  # just submitted: the view may not show it yet
    (NOW.mono - SUBMIT_VISIBILITY_GRACE - 1, NOW.mono - SUBMIT_VISIBILITY_GRACE - 2, True),  # view older
    (NOW.mono - SUBMIT_VISIBILITY_GRACE - 1, NOW.mono, False),  # a later view lacks it: vanished
])  # fmt: skip
def test_a_submit_the_view_does_not_show_yet_is_not_taken_for_vanished(
    submitted_at: float, taken_at: float, waits: bool
) -> None:
    side = lc.SlurmSide(poll_period=PERIOD, job_id=JOB, submitted_at=submitted_at, taken_at=taken_at)
    got = run(phj("Pending"), side, {"p": pod("gated")})
    reason = "SlurmJobVanished"
    vanished = [("status", "Failed", reason), ("event", reason), ("end", ("p",), reason)]
    assert got == (([], PERIOD) if waits else (vanished, None))


def test_a_refused_spec_is_not_submitted_again_before_the_retry_time() -> None:
    refused_at = (NOW.wall - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj = phj(None, job_id=None, reason="SubmitRejected", submitTime=refused_at)
    plan = decide_in(
        PlaceholderJob.parse(obj), slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s"
    )
    assert plan == pl.Plan(requeue=lc.SUBMIT_RETRY_SECONDS - 10)


def test_a_missing_finalizer_is_added_first() -> None:
    obj = phj("Pending")
    obj["metadata"]["finalizers"] = []
    got, _ = run(obj, slurm_side("PENDING"), {"p": pod("gated")})
    assert got[0] == ("finalizer",)
    assert got[1:] == [("podgroup", False), ("told", ("p",), "Resources"), ("status", "Pending", "Resources")]


def test_a_deleted_placeholderjob_cancels_every_live_job_made_for_it() -> None:
    """Two jobs for one PlaceholderJob (a crash mid-submit): the finalizer cancels the other too."""
    side = slurm_side("COMPLETED", others=(9,))
    assert run(phj("Deleted"), side, {"p": None}) == ([("confirm",), ("cancel", 9), ("finalize",)], None)


def test_a_gang_waits_for_its_members_then_is_fenced_before_its_submit() -> None:
    obj = phj(None, job_id=None, pods=("a", "b"))
    obj["spec"]["minMember"] = 2
    obj["spec"]["group"] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u"}
    side = slurm_side("vanished", job_id=None)
    got = run(obj, side, {"a": pod("gated", "a"), "b": None})
    assert got == ([("status", "Pending", names.REASON_WAITING_FOR_PODS)], None)
    written = decide_in(
        PlaceholderJob.parse(obj), side, {"a": pod("gated", "a"), "b": None}, NOW, scheduler="s"
    ).actions[0]
    assert isinstance(written, pl.WriteStatus)
    obj["status"] = {**obj["status"], **written.status.dump()}
    assert run(obj, side, {"a": pod("gated", "a"), "b": None}) == ([], None), "said once"
    assert run(obj, side, {"a": pod("gated", "a"), "b": pod("gated", "b")}) == ([("fence",), ("submit",)], None)


def test_allocated_pods_are_released_and_a_short_allocation_fails_the_job() -> None:
    got, _ = run(phj("Pending"), slurm_side("RUNNING"), {"p": pod("gated")})
    assert got == [("status", "Allocated", ""), ("release", (("p", NODE),)), ("podgroup", True)]
    two = phj("Pending", pods=("a", "b"))
    got, _ = run(two, slurm_side("RUNNING"), {"a": pod("gated", "a"), "b": pod("gated", "b")})
    assert got == [("status", "Failed", "AllocationMismatch"), ("cancel", JOB)]


def test_a_pod_the_kubelet_failed_because_it_was_deleted_counts_as_deleted() -> None:
    got, _ = run(phj("Running"), slurm_side("RUNNING"), {"p": pod("terminating-failed")})
    assert got == [("confirm",), ("status", "Cancelled", "PodsDeleted"), ("cancel", JOB), ("event", "PodsDeleted")]


def test_a_changed_spec_updates_the_pending_job() -> None:
    """The update ends the plan; the shell decides again with Slurm's answer (the cases of
    tests/unit/operator/placeholderjobs/test_specupdate.py)."""
    obj = phj("Pending")
    obj["metadata"]["generation"] = 2
    side, members = slurm_side("PENDING"), {"p": pod("gated")}
    settings = JobSettings(job_id=JOB, name="ns/phj", node_count=1)

    def decide(outcome: pl.Outcome | None = None) -> list[tuple[Any, ...]]:
        parsed = PlaceholderJob.parse(obj)
        plan = decide_in(parsed, side, members, NOW, scheduler="s", outcome=outcome, settings=settings, partitions={})
        return [summary(a) for a in plan.actions]

    assert decide() == [("update", JOB)]
    assert decide(pl.Updated(2)) == [("status", None, None), ("podgroup", False), ("told", ("p",), "Resources"),
                                     ("status", "Pending", "Resources")]  # fmt: skip
    # Without the job's settings (the shell reads them when the spec changed) nothing is sent.
    assert ("update", JOB) not in run(obj, side, members)[0]


def test_a_missing_member_is_confirmed_before_the_job_is_given_up() -> None:
    """The cache says the pod is gone but a GET finds it: nothing ends."""
    members: dict[str, Obj | None] = {"p": None}
    first = decide_in(PlaceholderJob.parse(phj("Running")), slurm_side("RUNNING"), members, NOW, scheduler="s")
    assert first.actions == (pl.ConfirmMembers(),)
    again = decide_in(
        PlaceholderJob.parse(phj("Running")), slurm_side("RUNNING"), members, NOW, {"p": pod("running")}, scheduler="s"
    )
    assert not any(isinstance(a, (pl.Cancel, pl.EndPods)) for a in again.actions)


def test_an_allocation_at_submit_releases_a_single_pod_before_writing_and_writes_once_bound() -> None:
    side, until = slurm_side("RUNNING"), NOW.mono + 5

    def plan(obj: Obj, member: str, at_once: float | None) -> tuple[list[tuple[Any, ...]], float | None]:
        """``at_once``: the submit's status is held back until then (not in ``obj`` yet)."""
        held = None if at_once is None else pl.Held(PlaceholderJobStatus(job_id=JOB, phase="Pending"), at_once)
        if held is not None:
            obj = {**obj, "status": {k: v for k, v in obj["status"].items() if k != "jobId"}}
        p = decide_in(PlaceholderJob.parse(obj), side, {"p": pod(member)}, NOW, scheduler="s", held=held)
        return [summary(a) for a in p.actions], p.requeue

    released = [("release", (("p", NODE),)), ("podgroup", True)]
    assert plan(phj("Pending"), "gated", until) == (released, 5.0), "nothing written; looked at again by then"
    assert plan(phj("Pending"), "gated", NOW.mono) == ([("status", "Allocated", ""), *released], None), "too long"
    assert plan(phj("Pending"), "gated", None)[0][0] == ("status", "Allocated", ""), "queued first: as always"
    bound = [("status", "Running", ""), ("release", ()), ("podgroup", True)]
    assert plan(phj("Pending"), "running", until) == (bound, None), "allocation and Running in one write"
    gang = phj("Pending", pods=("a", "b"))
    gang["spec"]["group"] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u"}
    two = decide_in(
        PlaceholderJob.parse(gang),
        lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=job("RUNNING", nodes=("n1", "n2")), taken_at=NOW.mono),
        {"a": pod("gated", "a"), "b": pod("gated", "b")},
        NOW,
        scheduler="s",
        held=pl.Held(PlaceholderJobStatus(job_id=JOB, phase="Pending"), until),
    )
    assert isinstance(two.actions[0], pl.WriteStatus), "a gang's assignments are written before any release"
    assert two.requeue is None


# ---- "why is my pod pending?": when the waiting pods are told (lifecycle.pending) -------------------
def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


HOUR = timedelta(hours=1)
WINDOW = pd.PENDING_REPORT_SECONDS
# What the pods were told: nothing yet (status before the first reason), Priority by this process
# some seconds ago (told: None after a restart, where status.reason says it).
TOLD = {"nothing": (None, ""), "restart": (None, "Priority"), "recently": (WINDOW / 2, "Priority"),
        "long ago": (WINDOW * 2, "Priority")}  # fmt: skip
# Slurm's estimate now, against status.expectedStart = NOW + 2 h.
ESTIMATES = {"same": 2 * HOUR, "30 s later": 2 * HOUR + timedelta(seconds=30), "1 h later": 3 * HOUR,
             "none": None, "passed": -HOUR}  # fmt: skip
REASONS = ["Priority", "Resources", "Dependency-told-before", ""]


def expected_report(told: str, reason: str, estimate: str) -> str:
    """The rule of docs/troubleshooting.md, written independently: "now", "later" or "no"."""
    ago, last = TOLD[told]
    before = {"Priority", "Dependency"} if ago is not None else set()
    news = reason != "" and reason != last
    moved = estimate in ("1 h later",)  # 30 s is within the tolerance; "none"/"passed": the estimate went
    if not news and not moved:
        return "no"
    if news and reason not in before:
        return "now"  # a reason not told before
    if ago is None or ago >= WINDOW:
        return "now"
    return "later"


@pytest.mark.parametrize(("told", "reason", "estimate"), list(itertools.product(TOLD, REASONS, ESTIMATES)))
def test_when_the_waiting_pods_are_told(told: str, reason: str, estimate: str) -> None:
    ago, last = TOLD[told]
    code = reason.removesuffix("-told-before")
    memory = None if ago is None else lc.Told(NOW.mono - ago, last, frozenset({"Priority", "Dependency"}))
    shift = ESTIMATES[estimate]
    start = None if shift is None else NOW.wall + shift
    status = PlaceholderJobStatus(job_id=JOB, phase="Pending", slurm_state="PENDING", reason=last or None,
                                     expected_start=iso(NOW.wall + 2 * HOUR))  # fmt: skip
    job = JobInfo(job_id=JOB, states=("PENDING",), reason=code, start_time=start)
    report, requeue = pd.pending(status, job, {"p": pod("gated")}, NOW, memory)
    want = expected_report(told, code, estimate)
    assert ("now" if report else "later" if requeue else "no") == want
    if want == "later":
        assert requeue == pytest.approx(WINDOW - (ago or 0))
    if report:
        [r] = report
        assert r.pods == ("p",) and r.reason == code
        assert r.message.startswith(f"Slurm job {JOB} is waiting")
        future = start is not None and start > NOW.wall
        assert ("Slurm expects it to start at" in r.message) == future, r.message
        assert start is None or not future or r.message.endswith(f"start at {iso(start)}")


def test_the_expected_start_goes_into_status_only_when_it_moves_and_leaves_with_the_wait() -> None:
    start = NOW.wall + 2 * HOUR
    obj = phj("Pending", reason="Resources", expectedStart=iso(start))
    for moved, writes in ((timedelta(seconds=50), []), (HOUR, [{"expectedStart": iso(start + HOUR)}])):
        job = JobInfo(job_id=JOB, states=("PENDING",), reason="Resources", start_time=start + moved)
        side = lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=job, found=job, taken_at=NOW.mono)
        plan = decide_in(PlaceholderJob.parse(obj), side, {"p": pod("gated")}, NOW, scheduler="s")
        assert [a.status.dump() for a in plan.actions if isinstance(a, pl.WriteStatus)] == writes
    side = slurm_side("RUNNING")  # allocated: the estimate of a wait that is over is removed
    plan = decide_in(PlaceholderJob.parse(obj), side, {"p": pod("gated")}, NOW, scheduler="s")
    [write] = [a for a in plan.actions if isinstance(a, pl.WriteStatus)]
    assert write.status.dump()["expectedStart"] is None and write.status.phase == "Allocated"


@pytest.mark.parametrize(
    ("recorded", "expected", "moved"),
    [
        (None, None, False), (None, "2026-01-01T14:00:00Z", True), ("2026-01-01T14:00:00Z", None, True),
        ("2026-01-01T14:00:00Z", "2026-01-01T14:00:50Z", False),  # under a minute
        ("2026-01-01T12:05:00Z", "2026-01-01T12:06:30Z", True),  # 90 s, 6.5 min ahead
        ("2026-01-01T20:00:00Z", "2026-01-01T20:30:00Z", False),  # 30 min of 8.5 h ahead
        ("2026-01-01T20:00:00Z", "2026-01-01T21:00:00Z", True),  # 1 h of 9 h ahead
        ("not a time", "2026-01-01T14:00:00Z", True),
    ],
)  # fmt: skip
def test_start_moved(recorded: str | None, expected: str | None, moved: bool) -> None:
    assert pd.start_moved(recorded, expected, NOW.wall) is moved


def test_expected_start_is_none_when_slurm_has_no_estimate_or_it_passed() -> None:
    def job_at(t: datetime | None, state: str = "PENDING") -> JobInfo:
        return JobInfo(job_id=JOB, states=(state,), start_time=t)

    assert expected_start(job_at(None), NOW.wall) is None  # 0 on the wire
    assert expected_start(job_at(NOW.wall - HOUR), NOW.wall) is None
    assert expected_start(job_at(NOW.wall + HOUR), NOW.wall) == "2026-01-01T13:00:00Z"
    assert expected_start(job_at(NOW.wall + HOUR, "RUNNING"), NOW.wall) is None  # a start, not an estimate


def test_the_pending_message() -> None:
    assert pd.pending_message(123, "Resources", "2026-11-24T10:00:00Z") == (
        "Slurm job 123 is waiting: Resources (the nodes it needs are busy); "
        "Slurm expects it to start at 2026-11-24T10:00:00Z"
    )
    assert pd.pending_message(5, "", None) == "Slurm job 5 is waiting in Slurm's queue"


# ---- the outcomes the shell reports back, and the status held back for one write --------------------
def test_a_refused_submit_is_told_and_retried_later() -> None:
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    side = slurm_side("vanished", job_id=None)
    refused = pl.Refused("Slurm refused the job: busy", association=False, present=("p",))
    plan = decide_in(obj, side, {"p": pod("gated")}, NOW, scheduler="s", outcome=refused)
    write, event, tell = plan.actions
    assert isinstance(write, pl.WriteStatus) and write.status.reason == names.REASON_SUBMIT_REJECTED
    assert isinstance(event, pl.Event) and event.warning and event.message == "Slurm refused the job: busy"
    assert tell == pl.TellPods(("p",), "SlurmSubmitRejected", "Slurm refused the job: busy", warning=True)
    assert plan.requeue == lc.SUBMIT_RETRY_SECONDS


def test_a_second_association_refusal_fails_the_placeholderjob_and_asks_no_retry() -> None:
    first = phj(None, job_id=None)
    refused = pl.Refused("Slurm refused the job: Invalid account", association=True, present=())
    plan = decide_in(PlaceholderJob.parse(first), slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW,
                     scheduler="s", outcome=refused)  # fmt: skip
    write = plan.actions[0]
    assert isinstance(write, pl.WriteStatus) and plan.requeue == lc.SUBMIT_RETRY_SECONDS
    first["status"] = {**first.get("status", {}), **write.status.dump()}
    again = decide_in(PlaceholderJob.parse(first), slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW,
                      scheduler="s", outcome=refused)  # fmt: skip
    failed = again.actions[0]
    assert isinstance(failed, pl.WriteStatus) and failed.status.phase == names.PHASE_FAILED
    assert summary(again.actions[1]) == ("event", names.REASON_SLURM_ASSOCIATION_REJECTED)
    assert len(again.actions) == 2 and again.requeue is None, "no live member to tell; the Failed rows end the pods"


@pytest.mark.parametrize("maybe_applied", [True, False])
def test_an_unreachable_slurm_is_reported_to_the_poller(maybe_applied: bool) -> None:
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    plan = decide_in(obj, slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s",
                     outcome=pl.Unavailable(maybe_applied))  # fmt: skip
    assert plan == pl.Plan((pl.SubmitFailed(maybe_applied),))


def test_a_placed_job_queued_is_announced_and_recorded_only_if_it_still_waits() -> None:
    """Issue 31: Slurm starts most queued jobs within a scheduling pass; the submit's status and
    Event (and the pods told Slurm's reason) wait QUEUED_QUIET_SECONDS, held in memory."""
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    pending = JobInfo(job_id=JOB, states=("PENDING",), reason="Priority")
    placed = pl.Placed(JOB, pending, JobRequest())
    plan = decide_in(obj, slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s", outcome=placed)
    assert plan.actions == () and plan.requeue == pytest.approx(lc.QUEUED_QUIET_SECONDS)
    held = plan.held
    assert held is not None and held.queued and held.status.job_id == JOB
    side = lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=pending, found=pending, taken_at=NOW.mono)
    soon = lc.Clock(NOW.mono + 1.0, NOW.wall)
    early = decide_in(obj, side, {"p": pod("gated")}, soon, scheduler="s", held=held)
    assert early.actions == () and early.held == held and early.requeue == pytest.approx(lc.QUEUED_QUIET_SECONDS - 1)
    late = lc.Clock(NOW.mono + lc.QUEUED_QUIET_SECONDS, NOW.wall)
    waiting = decide_in(obj, side, {"p": pod("gated")}, late, scheduler="s", held=held)
    assert [summary(a) for a in waiting.actions] == [("event", "Submitted"), ("told", ("p",), "Priority"),
                                                     ("status", "Pending", "Priority")]  # fmt: skip
    write = waiting.actions[-1]
    assert isinstance(write, pl.WriteStatus) and write.status.job_id == JOB, "the held submit is in the write"
    assert waiting.held is None


def test_a_queued_job_that_starts_in_the_quiet_time_costs_what_one_allocated_at_once_does() -> None:
    """No Event about waiting and no write before the pod is bound: released first (without the
    SlurmAllocated Event of a pod that waited), then one status write once bound."""
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    placed = pl.Placed(JOB, job("PENDING"), JobRequest())
    held = decide_in(obj, slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s",
                     outcome=placed).held  # fmt: skip
    assert held is not None and held.queued
    soon = lc.Clock(NOW.mono + 0.2, NOW.wall)
    started = decide_in(obj, slurm_side("RUNNING"), {"p": pod("gated")}, soon, scheduler="s", held=held)
    assert [summary(a) for a in started.actions] == [("release", (("p", NODE),)), ("podgroup", True)]
    release = started.actions[0]
    assert isinstance(release, pl.Release) and not release.announce
    assert started.held is not None and not started.held.queued, "now held as an allocation at once"
    assert started.requeue == pytest.approx(lc.UNWRITTEN_SECONDS)
    bound = decide_in(obj, slurm_side("RUNNING"), {"p": pod("running")}, soon, scheduler="s", held=started.held)
    [write] = [a for a in bound.actions if isinstance(a, pl.WriteStatus)]
    assert write.status.job_id == JOB and write.status.phase == "Running"
    assert not any(isinstance(a, pl.Event | pl.ReportPending) for a in bound.actions), "nothing said about a wait"
    assert bound.held is None


def test_a_placed_job_allocated_at_once_holds_its_status_until_the_pod_is_bound() -> None:
    obj = PlaceholderJob.parse(phj(None, job_id=None))
    running = job("RUNNING")
    assert running is not None
    plan = decide_in(obj, slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s",
                     outcome=pl.Placed(JOB, running, JobRequest()))  # fmt: skip
    assert [summary(a) for a in plan.actions] == [("release", (("p", NODE),)), ("podgroup", True)]
    assert plan.held is not None and plan.held.status.job_id == JOB
    assert plan.requeue == pytest.approx(lc.UNWRITTEN_SECONDS)
    # The next decision writes it with the first status write, here the release refused for good.
    refusal = pl.ReleaseRefused(JOB, "p", "metadata.labels: Invalid value")
    after = decide_in(obj, slurm_side("RUNNING"), {"p": pod("gated")}, NOW, scheduler="s", held=plan.held,
                      outcome=refusal)  # fmt: skip
    write = after.actions[0]
    assert isinstance(write, pl.WriteStatus) and write.status.job_id == JOB and write.status.phase == "Failed"
    assert after.held is None and after.requeue == 0.0
    assert summary(after.actions[1]) == ("cancel", JOB)


def test_a_held_status_is_kept_without_a_write_and_dropped_once_status_has_the_job() -> None:
    held = pl.Held(PlaceholderJobStatus(job_id=JOB, phase="Pending"), NOW.mono + 5)
    missing = decide_in(PlaceholderJob.parse(phj(None, job_id=None)), lc.SlurmSide(synced=False), {}, NOW,
                        scheduler="s", held=held)  # fmt: skip
    assert missing.held == held, "nothing written: still held"
    written = decide_in(PlaceholderJob.parse(phj("Running")), slurm_side("RUNNING"), {"p": pod("running")}, NOW,
                        scheduler="s", held=held)  # fmt: skip
    assert written.held is None, "status has the job (another leader wrote it): nothing held"
    devices = decide_in(PlaceholderJob.parse(phj(None, job_id=None)), slurm_side("RUNNING"), {"p": pod("gated")},
                        NOW, scheduler="s", held=held, outcome=pl.DevicesMissing())  # fmt: skip
    assert [summary(a) for a in devices.actions] == [("status", "Allocated", "")], "written at once, no release"
    assert isinstance(devices.actions[0], pl.WriteStatus) and devices.actions[0].status.job_id == JOB
    assert devices.held is None and devices.requeue == DEVICES_RETRY_SECONDS


# ---- the clock ----------------------------------------------------------------------------------
def test_the_times_a_decision_writes_are_its_clocks() -> None:
    """``decide`` reads no clock of its own: the submit, start and end times it writes are the
    wall time of the clock it is given (issue 30: the clock is passed through)."""
    then = lc.Clock(5.0, datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC))
    stamp = "2001-02-03T04:05:06Z"

    def written(plan: pl.Plan) -> list[PlaceholderJobStatus]:
        return [a.status for a in plan.actions if isinstance(a, pl.WriteStatus)]

    placed = pl.Placed(JOB, job("PENDING"), JobRequest())
    unsubmitted = PlaceholderJob.parse(phj(None, job_id=None))
    held = decide_in(
        unsubmitted, slurm_side("vanished", None), {"p": pod("gated")}, then, scheduler="s", outcome=placed
    )
    later = lc.Clock(then.mono + lc.QUEUED_QUIET_SECONDS, datetime(2001, 2, 3, 4, 5, 9, tzinfo=UTC))
    [submitted] = written(
        decide_in(unsubmitted, slurm_side("PENDING"), {"p": pod("gated")}, later, scheduler="s", held=held.held)
    )
    assert submitted.submit_time == stamp
    [allocated] = written(
        decide_in(PlaceholderJob.parse(phj("Pending")), slurm_side("RUNNING"), {"p": pod("gated")}, then, scheduler="s")
    )
    assert allocated.start_time == stamp
    [ended] = written(
        decide_in(
            PlaceholderJob.parse(phj("Running")), slurm_side("TIMEOUT"), {"p": pod("running")}, then, scheduler="s"
        )
    )
    assert ended.end_time == stamp
    refused = decide_in(
        unsubmitted,
        slurm_side("vanished", None),
        {"p": pod("gated")},
        then,
        scheduler="s",
        outcome=pl.Refused("no", association=False, present=("p",)),
    )
    assert [s.submit_time for s in written(refused)] == [stamp]


# ---- the handoff (docs/design/placeholderjob-lifecycle.md, the table's handoff rows; docs/colocation.md)
MARGIN = 10


def running_job(**fields: Any) -> lc.SlurmSide:
    j = slurm_job(JOB, "RUNNING", nodes=(NODE,), **fields)
    return lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=j, found=j, taken_at=NOW.mono)


def graced(state: str, grace: int = 20) -> Obj | None:
    p = pod(state)
    if p is not None:
        p["spec"]["terminationGracePeriodSeconds"] = grace
    return p


def handoff(over_time: timedelta | None = timedelta(0), **partitions: timedelta | None) -> lc.Handoff:
    return lc.Handoff(MARGIN, dict(partitions), over_time)


def decided(slurm: lc.SlurmSide, members: dict[str, Obj | None], *, phase: str = "Running",
            handoff_in: lc.Handoff | None = None) -> pl.Plan:  # fmt: skip
    return decide_in(PlaceholderJob.parse(phj(phase)), slurm, members, NOW, scheduler="s", handoff=handoff_in)


@pytest.mark.parametrize(("member", "ended"), [("running", ("p",)), ("terminating", ())])
def test_a_preempted_job_ends_its_pods_gracefully_and_names_it_so(member: str, ended: tuple[str, ...]) -> None:
    """Slurm chose the job as a preemption victim (preempt_time; with the QOS's GraceTime it stays
    RUNNING): Failed SlurmJobPreempted, the pods ended (the shell names the likely preemptor)."""
    side = running_job(preempt_time=NOW.wall - timedelta(seconds=2), end_time=NOW.wall + timedelta(seconds=88),
                       qos="pods")  # fmt: skip
    plan = decided(side, {"p": graced(member)})
    status, end = plan.actions
    assert isinstance(status, pl.WriteStatus) and (status.status.phase, status.status.reason) == (
        "Failed", names.REASON_SLURM_JOB_PREEMPTED,
    )  # fmt: skip
    assert isinstance(end, pl.EndPreempted) and end.pods == ended and end.job.job_id == JOB
    assert "QOS pods" in end.message and "released once their containers stopped" in end.message


def test_a_preempted_job_whose_pods_ended_is_cancelled_as_any_other() -> None:
    side = running_job(preempt_time=NOW.wall, qos="pods")
    got, _ = run(phj("Running"), side, {"p": pod("succeeded")})
    assert got == [("confirm",), ("status", "Completed", "PodsSucceeded"), ("cancel", JOB), ("event", "PodsSucceeded")]


def test_every_component_of_a_heterogeneous_job_counts_for_its_preemption() -> None:
    leader = slurm_job(JOB, "RUNNING", nodes=(NODE,), het=(JOB, 0))
    part = slurm_job(JOB + 1, "RUNNING", nodes=("n2",), het=(JOB, 1), preempt_time=NOW.wall)
    side = lc.SlurmSide(poll_period=PERIOD, job_id=JOB, job=leader, found=leader, components=(leader, part))
    plan = decided(side, {"p": graced("running")})
    assert isinstance(plan.actions[1], pl.EndPreempted) and plan.actions[1].job.job_id == JOB + 1


@pytest.mark.parametrize(("left", "over", "requeue"), [
    (40, timedelta(0), 10.0),  # ended grace 20 + margin 10 before the limit: in 10 s
    (40, timedelta(minutes=1), 40.0),  # the OverTimeLimit covers grace + margin: at the limit itself
    (40, None, None),  # OverTimeLimit=UNLIMITED: Slurm never ends it, nothing to get ahead of
])  # fmt: skip
def test_a_time_limit_ahead_is_looked_at_again_when_the_pods_must_be_ended(
    left: int, over: timedelta | None, requeue: float | None
) -> None:
    side = running_job(time_limit_minutes=1, end_time=NOW.wall + timedelta(seconds=left))
    plan = decided(side, {"p": graced("running")}, handoff_in=handoff(over))
    assert [summary(a) for a in plan.actions] == [("release", ()), ("podgroup", True)]
    assert plan.requeue == requeue


def test_the_partitions_own_over_time_limit_wins_over_the_clusters() -> None:
    side = running_job(time_limit_minutes=1, end_time=NOW.wall + timedelta(seconds=40), partition="long")
    plan = decided(side, {"p": graced("running")}, handoff_in=handoff(timedelta(0), long=timedelta(minutes=5)))
    assert plan.requeue == 40.0


@pytest.mark.parametrize("member", ["running", "gated"])
def test_when_the_time_limit_comes_the_pods_are_ended_ahead_of_slurm(member: str) -> None:
    side = running_job(time_limit_minutes=1, end_time=NOW.wall + timedelta(seconds=25))
    got = [summary(a) for a in decided(side, {"p": graced(member)}, handoff_in=handoff()).actions]
    reason = names.REASON_SLURM_TIME_LIMIT_REACHED
    assert got == [("status", "Failed", reason), ("event", reason), ("end", ("p",), reason)]


def test_a_job_without_a_time_limit_or_without_the_handoff_input_has_no_ending() -> None:
    members = {"p": graced("running")}
    unlimited = running_job(end_time=NOW.wall - timedelta(seconds=5))  # time_limit_minutes None: INFINITE
    assert decided(unlimited, members, handoff_in=handoff()).requeue is None
    limited = running_job(time_limit_minutes=1, end_time=NOW.wall - timedelta(seconds=5))
    assert decided(limited, members, handoff_in=None).requeue is None  # (no input: the rows are off)


@pytest.mark.parametrize(("member", "expected_plan"), [
    ("terminating", []),  # its containers still run: nothing cancelled, pod events bring it back
    ("running", [("end", ("p",), "EndedBefore")]),
    ("deleted", [("confirm",), ("cancel", JOB)]),  # gone (confirmed): the job is released
    ("terminating-failed", [("confirm",), ("cancel", JOB)]),  # stopped by the kubelet: released
])  # fmt: skip
def test_an_ended_placeholderjobs_running_job_is_released_only_once_its_pods_stopped(
    member: str, expected_plan: list[tuple[Any, ...]]
) -> None:
    got, _ = run(phj("Failed"), slurm_side("RUNNING"), {"p": pod(member)})
    assert got == expected_plan


def test_the_bridges_own_cancels_are_marked_released_but_one_under_possibly_running_pods() -> None:
    """A Cancel ``released`` is marked released first by the shell (its admin_comment), so the
    EpilogSlurmctld holds nothing; after a refused release of a gang, members released before it
    may run: the handoff holds."""
    ended, _ = decide_in(PlaceholderJob.parse(phj("Running")), slurm_side("RUNNING"), {"p": pod("deleted")}, NOW,
                         {"p": None}, scheduler="s", departed={"p": None}).actions, None  # fmt: skip
    assert [a.released for a in ended if isinstance(a, pl.Cancel)] == [True]
    refusal = pl.ReleaseRefused(JOB, "p", "refused")
    refused = decide_in(PlaceholderJob.parse(phj("Allocated")), slurm_side("RUNNING"), {"p": pod("gated")}, NOW,
                        scheduler="s", outcome=refusal)  # fmt: skip
    assert [a.released for a in refused.actions if isinstance(a, pl.Cancel)] == [False]
