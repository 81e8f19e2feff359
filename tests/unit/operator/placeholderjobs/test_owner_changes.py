"""A tenant's job is the tenant's in Slurm, who may change it with ``scontrol update``: the rows of
the PlaceholderJob decision (operator/placeholderjobs/lifecycle.py) that keep what Slurm holds equal
to what the pods need (slurm_bridge/rules/allocationmatch.py; docs/security.md, "A job's owner in
Slurm"). A pending job shrunk by its owner is failed before anything is released onto it; a running
job moved from under its pod gets the pod's node drained naming it, the pod ended, and the job
cancelled (marked released) only once the pod stopped."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.nodes.slurmnodes import SlurmNodeTable
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import SignedStart
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.rules.handoff import HandoffDrain, changed_drain_reason, drain_of
from slurm_bridge.slurm.models import JobInfo, NodeInfo
from tests.builders import bridge_job, make_phj, make_pod, phj_ref, slurm_job
from tests.unit.fakes import FakeJobReads, FakeNodes, FakeNodeView, FakeSlurm
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_hetjob import composite_phj
from tests.unit.situations import decide_in

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
JOB = 7
NOW = lc.Clock(1000.0, datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
# What the bridge submitted for a coResident pod with 2-CPU, 2 GiB limits.
ASKED = {"nodes": 1, "cpusPerTask": 2, "memoryPerNodeMib": 2048, "nodeSharing": "coResident"}
HELD = "cpu=2,mem=2G,node=1,billing=2"
SHRUNK = "cpu=1,mem=100M,node=1,billing=1"


def phj(phase: str, *, pods: tuple[str, ...] = ("p",), **status: Any) -> PlaceholderJob:
    built = make_phj().uid("phj-uid").generation(1).rv(5).finalizer().owned_by_pod("p", "p-uid")
    built.pods(*pods).spec(slurm={**ASKED, "nodes": len(pods)})
    st: Obj = {"observedGeneration": 1, "phase": phase, "jobId": JOB, **status}
    if phase in ("Allocated", "Running"):
        st.setdefault("assignments", [{"pod": p, "node": f"n{i + 1}"} for i, p in enumerate(pods)])
    return PlaceholderJob.parse(built.status(**st).obj())


def pod(state: str, name: str = "p", node: str = "n1") -> Obj:
    """gated; released (to ``node``, not bound yet); running (bound to ``node``); succeeded."""
    built = make_pod(name).uid(f"{name}-uid").scheduler()
    if state == "gated":
        return built.gated().phase("Pending").obj()
    built.annotation(names.ANN_SLURM_NODE, node)
    if state == "released":
        return built.phase("Pending").obj()
    return built.node(node).phase("Succeeded" if state == "succeeded" else "Running").obj()


def side(job: JobInfo) -> lc.SlurmSide:
    return lc.SlurmSide(poll_period=1.0, job_id=JOB, job=job, found=job, taken_at=NOW.mono)


def decide(p: PlaceholderJob, job: JobInfo, members: dict[str, Obj | None]) -> pl.Plan:
    return decide_in(p, side(job), members, NOW, confirmed=members, scheduler="slurm-bridge")


def summary(plan: pl.Plan) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for a in plan.actions:
        match a:
            case pl.WriteStatus(status=s):
                out.append(("status", s.phase, s.reason))
            case pl.Event(reason=reason, warning=warning):
                out.append(("event", reason, warning))
            case pl.Cancel(job_id=job_id, released=released):
                out.append(("cancel", job_id, released))
            case pl.EndPods(pods=pods, reason=reason):
                out.append(("end", pods, reason))
            case pl.DrainNodes(job_id=job_id, pods=pods):
                out.append(("drain", job_id, pods))
            case pl.Release(pods=pods):
                out.append(("release", pods))
            case _:
                out.append((type(a).__name__,))
    return out


def status_of(plan: pl.Plan) -> str:
    return next(a.status.message or "" for a in plan.actions if isinstance(a, pl.WriteStatus))


def test_a_job_as_asked_is_released() -> None:
    plan = decide(phj("Pending"), slurm_job(JOB, "RUNNING", nodes=("n1",), tres=HELD), {"p": pod("gated")})
    assert ("release", (("p", "n1"),)) in summary(plan)


def test_a_signed_start_waits_for_its_read_before_any_release() -> None:
    """slurmctld's notice says where the job started, not what it holds (its owner may have shrunk
    it while it waited): the pods are released once the read says."""
    signed = slurm_job(JOB, "RUNNING", nodes=("n1",), signed=True)
    assert summary(decide(phj("Pending"), signed, {"p": pod("gated")})) == []
    read = slurm_job(JOB, "RUNNING", nodes=("n1",), tres=SHRUNK)
    assert ("status", "Failed", names.REASON_ALLOCATION_SHORT) in summary(
        decide(phj("Pending"), read, {"p": pod("gated")})
    )


def test_a_pending_job_its_owner_shrank_is_failed_and_cancelled_before_it_starts() -> None:
    """NumCPUs=1 CPUsPerTask=1 MinCPUsNode=1 MinMemoryNode=100 on the waiting job: said at once."""
    plan = decide(phj("Pending"), slurm_job(JOB, "PENDING", tres=SHRUNK), {"p": pod("gated")})
    assert summary(plan) == [
        ("status", "Failed", names.REASON_ALLOCATION_SHORT),
        ("event", names.REASON_ALLOCATION_SHORT, True),
        ("cancel", JOB, True),
    ]
    said = status_of(plan)
    assert "1 CPU(s) per node where the pods need 2" in said and "100 MiB of memory" in said, said


def test_a_pending_job_whose_spec_changed_is_left_to_the_update() -> None:
    changed = phj("Pending", observedGeneration=0)
    plan = decide(changed, slurm_job(JOB, "PENDING", tres=SHRUNK), {"p": pod("gated")})
    assert not any(isinstance(a, pl.Cancel) for a in plan.actions)


def test_an_allocation_short_of_the_pods_needs_is_never_released() -> None:
    plan = decide(phj("Pending"), slurm_job(JOB, "RUNNING", nodes=("n1",), tres=SHRUNK), {"p": pod("gated")})
    got = summary(plan)
    assert not any(a[0] == "release" for a in got)
    assert got == [
        ("status", "Failed", names.REASON_ALLOCATION_SHORT),
        ("event", names.REASON_ALLOCATION_SHORT, True),
        ("cancel", JOB, True),
    ]
    # The next decision (status Failed) ends the gated pod.
    ended = decide(
        phj("Failed", reason=names.REASON_ALLOCATION_SHORT), slurm_job(JOB, "CANCELLED"), {"p": pod("gated")}
    )
    assert summary(ended) == [("end", ("p",), names.REASON_ALLOCATION_SHORT)]


@pytest.mark.parametrize("state", ["running", "released"])
def test_a_running_job_moved_from_under_its_pod_drains_the_node_and_ends_the_pod(state: str) -> None:
    """``scontrol update JobId=7 NumNodes=1 NodeList=n2``: Slurm holds n2, the pod is on n1."""
    moved = slurm_job(JOB, "RUNNING", nodes=("n2",), tres=HELD)
    plan = decide(phj("Running" if state == "running" else "Allocated"), moved, {"p": pod(state)})
    reason = names.REASON_ALLOCATION_CHANGED
    assert summary(plan) == [
        ("drain", JOB, (("n1", "p"),)),
        ("status", "Failed", reason),
        ("event", reason, True),
        ("end", ("p",), reason),
    ], "drained first, and no cancel (nor its released mark) while the pod may run"
    assert "pod p is on node n1, which Slurm no longer holds for it (it holds n2)" in status_of(plan)


def test_the_moved_jobs_cancel_waits_for_its_pod_and_is_marked_released_only_then() -> None:
    failed = phj("Failed", reason=names.REASON_ALLOCATION_CHANGED, message="moved")
    moved = slurm_job(JOB, "RUNNING", nodes=("n2",), tres=HELD)
    still = decide(failed, moved, {"p": pod("running")})
    assert not any(isinstance(a, pl.Cancel) for a in still.actions)
    done = decide(failed, moved, {"p": pod("succeeded")})
    assert ("cancel", JOB, True) in summary(done)


def test_too_few_nodes_under_a_bound_gang_is_never_marked_released() -> None:
    """The owner shrank a running gang's job to one node: the bound members are not released
    under (AllocationMismatch as before, now with the drain and the pods' end)."""
    gang = phj("Running", pods=("a", "b"))
    shrunk = slurm_job(JOB, "RUNNING", nodes=("n1",), tres="cpu=2,mem=2G,node=1")
    plan = decide(gang, shrunk, {"a": pod("running", "a", "n1"), "b": pod("running", "b", "n2")})
    got = summary(plan)
    assert not any(a[0] == "cancel" for a in got)
    assert got[0] == ("drain", JOB, (("n2", "b"),)), "only the node Slurm gave away"
    assert ("end", ("a", "b"), names.REASON_ALLOCATION_CHANGED) in got


def test_too_few_nodes_before_any_release_is_cancelled_at_once() -> None:
    gang = phj("Pending", pods=("a", "b"))
    plan = decide(gang, slurm_job(JOB, "RUNNING", nodes=("n1",)), {"a": pod("gated", "a"), "b": pod("gated", "b")})
    assert summary(plan) == [("status", "Failed", names.REASON_ALLOCATION_MISMATCH), ("cancel", JOB, True)]


# ---- the reads: a change of what a running job holds changes no state ---------------------------------
async def test_running_jobs_on_a_node_whose_allocation_changed_are_read_again() -> None:
    """The state poll sees nothing of a move (the job stays RUNNING); the node table's allocation
    does change, on the node the job left: the running bridge jobs there are read at that poll."""
    slurm, changed = FakeJobReads(), list[str]()
    slurm.add_strangers()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    poller.watch_nodes(lambda: True)
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",), tres=HELD))
    slurm.set(bridge_job(2, "b", "RUNNING", ("n3",), tres=HELD))
    await poller.poll_once()
    await poller.poll_once()
    slurm.set(bridge_job(1, "a", "RUNNING", ("n2",), tres=HELD))  # scontrol update ... NodeList=n2
    slurm.calls.clear()
    changed.clear()
    poller.nodes_changed({"n1", "n2"})
    await poller.poll_once()
    assert slurm.calls == ["states", "get 1"], "only the running job on a node that moved"
    assert changed == ["phj-a"] and poller.moved_reads == 1
    slurm.calls.clear()
    poller.nodes_changed(set())  # a change of no node's allocation (a DRAIN): nothing to read again
    await poller.poll_once()
    assert slurm.calls == ["states"]


async def test_only_jobs_an_owner_could_shrink_are_read_again_after_a_move() -> None:
    """A plain pod's job is the bridge's own Slurm user's: no tenant can shrink it, so a node's
    allocation moving (another pod allocated there) reads none of those again; a tenant's job is."""
    slurm = FakeJobReads()
    slurm.add_strangers()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: None, own_user=lambda: "slurm-bridge")
    poller.watch_nodes(lambda: True)
    slurm.set(bridge_job(1, "a", "RUNNING", ("n1",), tres=HELD, user_name="slurm-bridge"))
    slurm.set(bridge_job(2, "b", "RUNNING", ("n1",), tres=HELD, user_name="alice"))
    await poller.poll_once()
    await poller.poll_once()
    slurm.calls.clear()
    poller.nodes_changed({"n1"})
    await poller.poll_once()
    assert slurm.calls == ["states", "get 2"], "the tenant's job only"
    assert poller.moved_reads == 1


async def test_a_shrink_of_a_pending_job_is_a_change_of_the_view() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    slurm.set(bridge_job(1, "a", "PENDING", tres="cpu=2,mem=2G,node=1"))
    await poller.poll_once()
    changed.clear()
    slurm.set(bridge_job(1, "a", "PENDING", tres=SHRUNK))
    await poller.refresh(1, phj_ref("a"), notify=True)
    assert changed == ["phj-a"]


async def test_the_node_table_says_which_nodes_allocation_changed() -> None:
    fake = FakeNodes([NodeInfo(name="n1", alloc_cpus=2), NodeInfo(name="n2")])
    table = SlurmNodeTable(fake)
    await table.list()
    assert table.allocation_changed is None, "the first list: any node may have"
    fake.nodes["n1"] = NodeInfo(name="n1")
    fake.nodes["n2"] = NodeInfo(name="n2", alloc_cpus=2, alloc_memory_mib=2048)
    await table.list()
    assert table.allocation_changed == {"n1", "n2"}
    fake.nodes["n1"] = NodeInfo(name="n1", states=("IDLE", "DRAIN"), reason="x")
    await table.list()
    assert table.allocation_changed == set()


# ---- the shell: the drain, in the handoff's form -------------------------------------------------
async def test_the_shell_drains_each_pods_node_naming_the_pod_unless_someone_else_drained_it() -> None:
    config = Config()
    slurm, kube = FakeSlurm(), FakeKube({}, stub_absent=True)
    poller = SlurmPoller(slurm, config.bridgeId, 1.0, lambda _: None)
    view = FakeNodeView({
        "n1": NodeInfo(name="n1", states=("MIXED",)),
        "n3": NodeInfo(name="n3", states=("IDLE", "DRAIN"), reason="disk replaced"),
    })  # fmt: skip
    jobs = PlaceholderJobs(config, kube, slurm, ObjectStore(), ParsedStore(PlaceholderJob.parse), poller, nodes=view)
    drained = view.drained
    members: dict[str, Obj | None] = {"a": pod("running", "a", "n1"), "b": pod("running", "b", "n3")}
    await jobs.apply(
        phj("Running", pods=("a", "b")), pl.Plan((pl.DrainNodes(JOB, (("n1", "a"), ("n3", "b"))),)), members
    )
    assert drained == [("n1", changed_drain_reason(config.bridgeId, "ns", "a", JOB))]
    assert drain_of(drained[0][1] or "", config.bridgeId) == HandoffDrain("ns", "a", JOB), "the handoff lifts it"
    assert kube.reasons == [names.REASON_HANDOFF_NODE_DRAINED], "on the pod it names"


@pytest.mark.parametrize(("user", "waits"), [("alice", True), ("slurm", False), ("", True)])
async def test_a_signed_start_of_another_owners_job_waits_for_its_read(user: str, waits: bool) -> None:
    """The bridge's own job is released on slurmctld's notice; a tenant's, which its owner may have
    shrunk while it waited, once the read says what it holds."""
    slurm = FakeJobReads()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda _: None, own_user=lambda: "slurm")
    slurm.set(bridge_job(1, "a", "PENDING", partition="pods", user_name=user, tres="cpu=2,mem=2G,node=1"))
    await poller.poll_once()
    start = SignedStart(nodes=("n1",), partition="pods", start_time=datetime.now(UTC))
    assert poller.apply_signed_start(1, phj_ref("a"), start)
    assert poller.snapshot is not None
    taken = poller.snapshot.by_id[1]
    assert (taken.signed, taken.tres is None) == (waits, waits)


# ---- a heterogeneous job: every component is the tenant's job too -------------------------------------
# CompositePodGroup c (tests/unit/operator/placeholderjobs/test_hetjob.py): component 0 (the leader, job 10,
# PodGroup a: pod a0 on na; 1 CPU asked) and component 1 (job 11, PodGroup b: b0 and b1 on nb1 and nb2; 4 CPUs
# a node).
LEADER, OTHER = 10, 11
A_HELD, B_HELD = "cpu=1,node=1", "cpu=8,node=2"
B_NODES = ("nb1", "nb2")


def part(job_id: int, nodes: tuple[str, ...], tres: str) -> JobInfo:
    return slurm_job(job_id, "RUNNING", nodes=nodes, tres=tres, het=(LEADER, job_id - LEADER))


def het_side(a: JobInfo, b: JobInfo) -> lc.SlurmSide:
    return lc.SlurmSide(poll_period=1.0, job_id=LEADER, job=a, found=a, components=(a, b), taken_at=NOW.mono)


def het_members(state: str, ended: tuple[str, ...] = ()) -> dict[str, Obj | None]:
    where = {"a0": "na", "b0": "nb1", "b1": "nb2"}
    return {p: pod("succeeded" if p in ended else state, p, n) for p, n in where.items()}


def het_decide(phase: str, a: JobInfo, b: JobInfo, members: dict[str, Obj | None], **status: Any) -> pl.Plan:
    p = PlaceholderJob.parse(composite_phj(phase, **status))
    return decide_in(p, het_side(a, b), members, NOW, confirmed=members, scheduler="slurm-bridge")


CHANGED, SHORT = names.REASON_ALLOCATION_CHANGED, names.REASON_ALLOCATION_SHORT
END_ALL = ("end", ("a0", "b0", "b1"), CHANGED)
# (name, phase, component 0, component 1, members, ended pods, the plan, words its message holds)
HET_CASES: list[tuple[str, str, JobInfo, JobInfo, str, tuple[str, ...], list[tuple[Any, ...]], tuple[str, ...]]] = [
    (
        "every component as asked",
        "Pending",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, B_NODES, B_HELD),
        "gated",
        (),
        [("status", "Allocated", ""), ("release", (("a0", "na"), ("b0", "nb1"), ("b1", "nb2"))), ("ReportPodGroup",)],
        (),
    ),
    (
        "component 1 shrunk while it waited: nothing released, the whole job cancelled",
        "Pending",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, B_NODES, "cpu=4,node=2"),
        "gated",
        (),
        [("status", "Failed", SHORT), ("event", SHORT, True), ("cancel", LEADER, True)],
        (
            "heterogeneous Slurm job 10 holds less than its pods need: in component 1 (PodGroup b, Slurm job 11), "
            "2 CPU(s) per node where the pods need 4",
            "no pod was released onto it",
        ),
    ),
    (
        "both components moved: each named, each one's lost node drained with its own job id",
        "Running",
        part(LEADER, ("nz",), A_HELD),
        part(OTHER, ("nb1", "nb3"), B_HELD),
        "running",
        (),
        [
            ("drain", LEADER, (("na", "a0"),)),
            ("drain", OTHER, (("nb2", "b1"),)),
            ("status", "Failed", CHANGED),
            ("event", CHANGED, True),
            END_ALL,
        ],
        (
            "in component 0 (PodGroup a, Slurm job 10), pod a0 is on node na, which Slurm no longer holds for it "
            "(it holds nz); in component 1 (PodGroup b, Slurm job 11), pod b1 is on node nb2",
            "(na for pod a0, nb2 for pod b1)",
        ),
    ),
    (
        "component 1 moved off b1's node (scontrol update JobId=11 NodeList=nb1,nb3)",
        "Running",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, ("nb1", "nb3"), B_HELD),
        "running",
        (),
        [("drain", OTHER, (("nb2", "b1"),)), ("status", "Failed", CHANGED), ("event", CHANGED, True), END_ALL],
        ("in component 1 (PodGroup b, Slurm job 11), pod b1 is on node nb2", "(nb2 for pod b1)"),
    ),
    (
        "component 1 shrunk on each node under released pods: both its nodes drained, not component 0's",
        "Allocated",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, B_NODES, "cpu=2,node=2"),
        "released",
        (),
        [
            ("drain", OTHER, (("nb1", "b0"), ("nb2", "b1"))),
            ("status", "Failed", CHANGED),
            ("event", CHANGED, True),
            END_ALL,
        ],
        ("1 CPU(s) per node where the pods need 4",),
    ),
    (
        "the leader moved off a0's node",
        "Running",
        part(LEADER, ("nz",), A_HELD),
        part(OTHER, B_NODES, B_HELD),
        "running",
        (),
        [("drain", LEADER, (("na", "a0"),)), ("status", "Failed", CHANGED), ("event", CHANGED, True), END_ALL],
        ("in component 0 (PodGroup a, Slurm job 10), pod a0 is on node na",),
    ),
    (
        "component 1 shrunk after its pods ended: component 0's pod ends with it, nothing drained",
        "Running",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, B_NODES, "cpu=2,node=2"),
        "running",
        ("b0", "b1"),
        [("status", "Failed", CHANGED), ("event", CHANGED, True), ("end", ("a0",), CHANGED)],
        ("the job's components end together, so its pods are ended",),
    ),
    (
        "too few nodes in component 1 under a bound pod: drained and ended, never cancelled under it",
        "Running",
        part(LEADER, ("na",), A_HELD),
        part(OTHER, ("nb1",), "cpu=4,node=1"),
        "running",
        ("b1",),
        [
            ("drain", OTHER, (("nb1", "b0"),)),
            ("status", "Failed", names.REASON_ALLOCATION_MISMATCH),
            ("event", names.REASON_ALLOCATION_MISMATCH, True),
            ("end", ("a0", "b0"), names.REASON_ALLOCATION_MISMATCH),
        ],
        ("Slurm allocated 1 node(s) to component 1 (PodGroup b) of heterogeneous job 10 for 2 pods",),
    ),
]


@pytest.mark.parametrize(
    ("phase", "a", "b", "state", "ended", "expected", "words"),
    [c[1:] for c in HET_CASES],
    ids=[c[0] for c in HET_CASES],
)
def test_each_component_holds_what_its_pods_need(
    phase: str,
    a: JobInfo,
    b: JobInfo,
    state: str,
    ended: tuple[str, ...],
    expected: list[tuple[Any, ...]],
    words: tuple[str, ...],
) -> None:
    plan = het_decide(phase, a, b, het_members(state, ended))
    assert summary(plan) == expected
    said = status_of(plan) if words else ""
    for w in words:
        assert w in said, said


def test_a_moved_components_cancel_waits_for_every_pod_of_the_job_and_is_marked_released_only_then() -> None:
    """The whole job is cancelled (its leader) once every member stopped, whichever component moved."""
    a, moved = part(LEADER, ("na",), A_HELD), part(OTHER, ("nb1", "nb3"), B_HELD)
    failed = {"reason": CHANGED, "message": "moved"}
    still = het_decide("Failed", a, moved, het_members("running", ("b0", "b1")), **failed)
    assert summary(still) == [("end", ("a0",), CHANGED)]
    done = het_decide("Failed", a, moved, het_members("running", ("a0", "b0", "b1")), **failed)
    assert ("cancel", LEADER, True) in summary(done)


async def test_a_running_component_on_a_node_whose_allocation_changed_is_read_by_its_own_id() -> None:
    """Each component is a job of its own in Slurm's lists (leader + offset), with its own record:
    the one its owner moved is read again, and its PlaceholderJob decided on the new record."""
    slurm, changed = FakeJobReads(), list[str]()
    slurm.add_strangers()
    poller = SlurmPoller(slurm, "bridge", 1.0, lambda ref: changed.append(ref.name))
    poller.watch_nodes(lambda: True)
    slurm.set(bridge_job(LEADER, "c", "RUNNING", ("na",), het=(LEADER, 0), tres=A_HELD))
    slurm.set(bridge_job(OTHER, "c", "RUNNING", B_NODES, het=(LEADER, 1), tres=B_HELD))
    await poller.poll_once()
    await poller.poll_once()
    slurm.set(bridge_job(OTHER, "c", "RUNNING", ("nb1", "nb3"), het=(LEADER, 1), tres=B_HELD))
    slurm.calls.clear()
    changed.clear()
    poller.nodes_changed({"nb2", "nb3"})
    await poller.poll_once()
    assert slurm.calls == ["states", f"get {OTHER}"], "only the component on a node that moved"
    assert changed == ["phj-c"]
    assert [c.nodes for c in poller.side("c", LEADER).components] == [("na",), ("nb1", "nb3")]
