"""The node guard (operator/nodeguard/, docs/nodes.md "Pods that are not the bridge's"): who may run
on a Slurm node (a table of every kind of pod and every transient state of the bridge's), when a
bridge pod nothing explains counts, the drain's step, and the shell's pass over the repo's fakes:
drain once with Events, stay idempotent, lift only its own drain, never an administrator's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, NodeGuardConfig
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.taints import managed_taint
from slurm_bridge.kube.times import iso
from slurm_bridge.operator.nodeguard import decisions as ng
from slurm_bridge.operator.nodeguard.controller import NodeGuard, NodePods, other_pods_selector, slim_pod
from slurm_bridge.operator.runtime.departures import on_node, pod_job_index
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.slurm.models import NodeInfo
from tests.builders import make_phj, make_pod
from tests.unit.fakes import FakeHandoff
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.handoff.test_handoff import NodeDrains

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NODE, SLURM = "kwok-hybrid-1", "kwok-hybrid-1"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RULES = ng.Rules("slurm-bridge", "bridge", frozenset({"kube-system"}), "slurm-bridge-system", margin=10)
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "ds"}
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "rs"}


def released(pod: Any, node: str = NODE, job: int = 7) -> Any:
    """A bridge pod as the operator's release leaves it (node annotation, job label)."""
    return pod.annotation(names.ANN_SLURM_NODE, node).label(names.LABEL_SLURM_JOB_ID, str(job))


def bridge_pod(name: str = "p", ns: str = "team") -> Any:
    return make_pod(name, ns).uid(f"uid-{name}").scheduler().node(NODE).phase("Running")


ALLOCATED = ng.Member(frozenset({SLURM}), 7)
ELSEWHERE = ng.Member(frozenset({"kwok-hybrid-2"}), 7)
NOT_WRITTEN = ng.Member(frozenset(), None)

# (pod, member, the verdict's kind): every kind of pod, and each transient state of a bridge pod.
CASES: list[tuple[str, Obj, ng.Member | None, ng.Kind]] = [
    ("a static pod", make_pod("s", "x").node(NODE).annotation(names.ANN_K8S_CONFIG_MIRROR, "h").obj(), None,
     ng.Kind.ALLOWED),
    ("a DaemonSet's pod of an allowed namespace", make_pod("d", "kube-system").node(NODE).owner(DS, controller=True)
     .obj(), None, ng.Kind.ALLOWED),
    ("a DaemonSet's pod of another namespace", make_pod("d", "apps").node(NODE).owner(DS, controller=True).obj(), None,
     ng.Kind.INTRUDER),
    ("a DaemonSet named only as an owner, not the controller", make_pod("d", "kube-system").node(NODE).owner(DS)
     .obj(), None, ng.Kind.INTRUDER),
    ("a ReplicaSet's pod of kube-system", make_pod("r", "kube-system").node(NODE).owner(RS, controller=True).obj(),
     None, ng.Kind.INTRUDER),
    ("the bridge's own component", make_pod("op", "slurm-bridge-system").node(NODE).owner(RS, controller=True).obj(),
     None, ng.Kind.ALLOWED),
    ("another scheduler's pod", make_pod("x", "apps").node(NODE).scheduler("default-scheduler").obj(), None,
     ng.Kind.INTRUDER),
    ("a pod bound with no scheduler named", make_pod("x", "apps").node(NODE).obj(), None, ng.Kind.INTRUDER),
    ("another scheduler's pod with forged release marks", released(make_pod("x", "apps").node(NODE)).obj(),
     ALLOCATED, ng.Kind.INTRUDER),
    ("another scheduler's pod that ended", make_pod("x", "apps").node(NODE).phase("Succeeded").obj(), None,
     ng.Kind.ALLOWED),
    ("a pod bound to another node", make_pod("x", "apps").node("kwok-hybrid-2").obj(), None, ng.Kind.ALLOWED),
    ("a member of an allocation that holds the node", released(bridge_pod()).obj(), ALLOCATED, ng.Kind.ALLOWED),
    ("a member whose PlaceholderJob status is not written yet (released, then bound)", released(bridge_pod()).obj(),
     NOT_WRITTEN, ng.Kind.ALLOWED),
    ("a member not written yet that the bridge did not release here", bridge_pod().obj(), NOT_WRITTEN,
     ng.Kind.UNEXPLAINED),
    ("a member released for another job than its PlaceholderJob's", released(bridge_pod(), job=8).obj(),
     ng.Member(frozenset(), 7), ng.Kind.UNEXPLAINED),
    ("a member whose allocation is elsewhere", released(bridge_pod()).obj(), ELSEWHERE, ng.Kind.UNEXPLAINED),
    ("a member whose job ended, still running: the handoff's", released(bridge_pod()).obj(),
     ng.Member(frozenset({"kwok-hybrid-2"}), 7, ended=True), ng.Kind.ALLOWED),
    ("a released pod terminating after its PlaceholderJob went", released(bridge_pod())
     .deleted(iso(NOW + timedelta(seconds=20))).obj(), None, ng.Kind.ALLOWED),
    ("a released pod terminating past its deadline and the margin", released(bridge_pod())
     .deleted(iso(NOW - timedelta(seconds=11))).obj(), None, ng.Kind.UNEXPLAINED),
    ("a bridge pod no PlaceholderJob counts as its member", bridge_pod().obj(), None, ng.Kind.UNEXPLAINED),
    ("a gang's member on one of the job's nodes", released(bridge_pod("g-1")).obj(),
     ng.Member(frozenset({"kwok-hybrid-2", SLURM}), 7), ng.Kind.ALLOWED),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "member", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_who_may_run_on_a_slurm_node(pod: Obj, member: ng.Member | None, kind: ng.Kind) -> None:
    assert ng.judge(pod, NODE, SLURM, member, RULES, NOW).kind is kind


def test_an_allocation_names_the_slurm_node_of_a_kubernetes_node_mapped_to_it() -> None:
    pod = released(bridge_pod(), node="k8s-a").obj()
    pod["spec"]["nodeName"] = "k8s-a"
    assert ng.judge(pod, "k8s-a", "slurm-a", ng.Member(frozenset({"slurm-a"}), 7), RULES, NOW).kind is ng.Kind.ALLOWED


def phj(status: Obj) -> PlaceholderJob:
    return make_phj("phj", "team").pods("p").spec(slurm={}).owned_by_pod("p", "uid-p").status(**status).parsed()


@pytest.mark.parametrize(
    ("status", "allocated", "job", "ended"),
    [
        ({}, set(), None, False),
        (
            {"jobId": 7, "nodeList": "kwok-hybrid-[1-2]", "phase": "Running"},
            {"kwok-hybrid-1", "kwok-hybrid-2"},
            7,
            False,
        ),
        ({"jobId": 7, "assignments": [{"pod": "p", "node": NODE}], "phase": "Allocated"}, {NODE}, 7, False),
        ({"jobId": 7, "nodeList": NODE, "phase": "Completed"}, {NODE}, 7, True),
        (
            {"hetJobId": 9, "jobId": 9, "components": [{"offset": 0, "podGroup": "a", "nodeList": "n[1-2]"}]},
            {"n1", "n2"},
            9,
            False,
        ),
    ],
)
def test_a_placeholderjob_is_read_as_its_allocation(
    status: Obj, allocated: set[str], job: int | None, ended: bool
) -> None:
    assert ng.Member.of(phj(status)) == ng.Member(frozenset(allocated), job, ended)


@pytest.mark.parametrize(
    ("verdict", "since", "clock", "want"),
    [
        (ng.Verdict(ng.Kind.INTRUDER, ""), None, 100.0, True),  # another scheduler's pod: at once
        (ng.Verdict(ng.Kind.ALLOWED, ""), 0.0, 100.0, False),
        (ng.Verdict(ng.Kind.UNEXPLAINED, "", transient=True), None, 100.0, False),  # first seen now
        (ng.Verdict(ng.Kind.UNEXPLAINED, "", transient=True), 100.0, 129.0, False),  # a store may lag
        (ng.Verdict(ng.Kind.UNEXPLAINED, "", transient=True), 100.0, 130.0, True),  # settled
    ],
)
def test_a_bridge_pod_nothing_explains_counts_once_it_stayed_so_a_while(
    verdict: ng.Verdict, since: float | None, clock: float, want: bool
) -> None:
    assert ng.counts(verdict, since, clock, RULES) is want


def test_only_verdicts_time_may_change_are_judged_again_on_every_pass() -> None:
    transient = [c[0] for c in CASES if ng.judge(c[1], NODE, SLURM, c[2], RULES, NOW).transient]
    assert transient == [
        "a member not written yet that the bridge did not release here",
        "a member released for another job than its PlaceholderJob's",
        "a member whose allocation is elsewhere",
        "a released pod terminating after its PlaceholderJob went",
        "a released pod terminating past its deadline and the margin",
        "a bridge pod no PlaceholderJob counts as its member",
    ]


def test_the_drain_reason_names_the_pod_and_only_this_bridge_reads_it_back() -> None:
    i = ng.Intruder("apps", "x", "u", "why")
    reason = ng.drain_reason("bridge", i)
    assert reason == "slurm-bridge-guard[bridge]: pod apps/x runs on this node without a Slurm allocation"
    assert ng.drain_of(reason, "bridge") == ("apps", "x")
    assert ng.drain_of(reason, "bridge-2") is None and ng.drain_of(ng.drain_reason("bridge-2", i), "bridge") is None
    assert ng.drain_of("slurm-bridge: Kubernetes node n is unschedulable", "bridge") is None
    assert not reason.startswith(names.SLURM_NODE_REASON_PREFIX), "the node sync must never lift it as its own"


def node_info(states: tuple[str, ...] = ("IDLE",), reason: str = "") -> NodeInfo:
    return NodeInfo(name=SLURM, states=states, reason=reason)


X, Y = ng.Intruder("apps", "x", "ux", "why"), ng.Intruder("apps", "y", "uy", "why")
OURS_X = node_info(("IDLE", "DRAIN"), ng.drain_reason("bridge", X))


@pytest.mark.parametrize(
    ("info", "found", "want"),
    [
        (node_info(), [X], ng.Drain(SLURM, X, ng.drain_reason("bridge", X))),
        (node_info(("MIXED",)), [], None),
        (OURS_X, [X, Y], None),  # drained for x already: idempotent
        (OURS_X, [Y], ng.Drain(SLURM, Y, ng.drain_reason("bridge", Y))),  # x left, y came: named again
        (OURS_X, [], ng.Undrain(SLURM, ("apps", "x"))),
        (node_info(("IDLE", "DRAIN"), "maintenance"), [X], None),  # an administrator's drain stands
        (node_info(("IDLE", "DRAIN"), "maintenance"), [], None),  # and is never lifted
        (node_info(("IDLE", "DRAIN"), ng.drain_reason("other", X)), [], None),  # nor another bridge's
        (node_info(("IDLE", "DRAIN"), "slurm-bridge-handoff[bridge]: pod a/b of Slurm job 7 ..."), [X], None),
        (None, [X], None),  # not in Slurm
    ],
)
def test_the_drain_step(info: NodeInfo | None, found: list[ng.Intruder], want: ng.Drain | ng.Undrain | None) -> None:
    assert ng.step(SLURM, info, found, "bridge") == want


# ---- the shell ---------------------------------------------------------------------------------------


def test_other_schedulers_pods_are_watched_bound_and_not_ended_and_kept_slim() -> None:
    assert other_pods_selector("slurm-bridge") == {
        "fieldSelector": "spec.schedulerName!=slurm-bridge,spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    }
    built = make_pod("d", "kube-system").uid("u").node(NODE).owner(DS, controller=True).label("a", "b")
    pod = built.annotation(names.ANN_K8S_CONFIG_MIRROR, "h").annotation("big", "x" * 1000).container("c").obj()
    assert slim_pod(pod) == {
        "metadata": {
            "name": "d",
            "namespace": "kube-system",
            "uid": "u",
            "annotations": {names.ANN_K8S_CONFIG_MIRROR: "h"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True}],
        },
        "spec": {"nodeName": NODE},
        "status": {"phase": None},
    }
    store = NodePods()
    store.on_event("ADDED", pod)
    assert [p["metadata"]["name"] for p in store.on(NODE)] == ["d"]
    store.on_event("DELETED", make_pod("d", "kube-system").uid("other").obj())
    assert len(store) == 1, "a delete of another incarnation leaves it"
    store.on_event("DELETED", pod)
    assert store.on(NODE) == [] and len(store) == 0


def node(name: str = NODE, managed: bool = True) -> Obj:
    taints = [managed_taint("slurm-bridge")] if managed else []
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {"taints": taints}}


class Guarded:
    """A NodeGuard over the repo's fakes: Kubernetes (Events), Slurm's node table, the stores."""

    def __init__(self, nodes: dict[str, NodeInfo], *, k8s_nodes: list[Obj] | None = None) -> None:
        cfg = Config(nodeGuard=NodeGuardConfig(daemonNamespaces=["kube-system"]))
        self.kube = FakeKube()
        self.slurm = FakeHandoff()
        self.drains = NodeDrains(self.slurm, nodes)
        self.nodes = ObjectStore()
        for n in k8s_nodes if k8s_nodes is not None else [node()]:
            self.nodes.upsert(n)
        self.pods = ObjectStore(index=pod_job_index)
        self.phjs: ParsedStore[PlaceholderJob] = ParsedStore(PlaceholderJob.parse, index=_phj_index)
        self.guard = NodeGuard(
            cfg,
            self.kube,
            self.nodes,
            self.drains,
            self.pods,
            self.phjs,
            own_namespace="slurm-bridge-system",
        )
        self.guard.watch.synced.set()
        self.guard.running = True  # as start() leaves it, without its tasks

    def other(self, pod: Obj, etype: str = "ADDED") -> None:
        self.guard.others.on_event(etype, pod)

    def state(self) -> tuple[tuple[str, ...], str]:
        info = (self.drains.slurm_nodes_now() or {})[SLURM]
        return tuple(info.states), info.reason


def _phj_index(obj: Obj) -> list[tuple[str, str]]:
    ns = obj["metadata"]["namespace"]
    return [(ns, p) for p in obj["spec"]["pods"]]


async def test_an_intruder_drains_its_node_once_with_events_and_its_end_lifts_the_drain() -> None:
    g = Guarded({SLURM: node_info()})
    intruder = make_pod("x", "apps").uid("ux").node(NODE).scheduler("default-scheduler").phase("Running").obj()
    g.other(intruder)
    g.other(make_pod("proxy", "kube-system").uid("up").node(NODE).owner(DS, controller=True).obj())
    await g.guard.pass_once()
    reason = "slurm-bridge-guard[slurm-bridge]: pod apps/x runs on this node without a Slurm allocation"
    assert g.state() == (("IDLE", "DRAIN"), reason)
    assert g.slurm.calls == [f"node {SLURM} DRAIN"]
    assert g.kube.told("kind", "name", "reason") == [
        ("Node", NODE, names.REASON_UNALLOCATED_POD_NODE_DRAINED),
        ("Pod", "x", names.REASON_UNALLOCATED_POD_NODE_DRAINED),
    ]
    assert "schedulerName default-scheduler" in g.kube.log[1].message
    await g.guard.pass_once()
    assert g.slurm.calls == [f"node {SLURM} DRAIN"] and len(g.kube.log) == 2, "idempotent: nothing more"
    g.other(intruder, "DELETED")
    await g.guard.pass_once()
    assert g.state() == (("IDLE",), "") and g.slurm.calls[-1] == f"node {SLURM} UNDRAIN"
    assert g.kube.told("kind", "reason")[-1] == ("Node", names.REASON_UNALLOCATED_POD_NODE_UNDRAINED)


async def test_an_intruder_that_arrives_after_the_first_pass_drains_its_node_at_the_next_pass() -> None:
    """The watch's events reach the pass that follows them, not only the minute's sweep."""
    g = Guarded({SLURM: node_info()})
    await g.guard.pass_once()  # the first pass: a sweep of nothing
    assert g.slurm.calls == []
    g.other(make_pod("late", "apps").uid("ul").node(NODE).scheduler("default-scheduler").phase("Running").obj())
    await g.guard.pass_once()
    assert g.slurm.calls == [f"node {SLURM} DRAIN"], "the pod's event was judged at the next pass"


async def test_a_restarted_guard_lifts_its_drain_whose_pod_is_gone_and_keeps_one_whose_pod_runs() -> None:
    x = ng.Intruder("apps", "x", "ux", "")
    ours = node_info(("IDLE", "DRAIN"), ng.drain_reason("slurm-bridge", x))
    g = Guarded({SLURM: ours, "kwok-hybrid-2": ours.model_copy(update={"name": "kwok-hybrid-2"})},
                k8s_nodes=[node(), node("kwok-hybrid-2")])  # fmt: skip
    g.other(make_pod("x", "apps").uid("ux").node("kwok-hybrid-2").obj())
    await g.guard.pass_once()
    assert g.slurm.calls == [f"node {SLURM} UNDRAIN"], "kwok-hybrid-2's pod still runs: its drain stays"


async def test_an_administrators_drain_is_neither_overwritten_nor_lifted_but_the_pod_is_told() -> None:
    g = Guarded({SLURM: node_info(("IDLE", "DRAIN"), "maintenance")})
    g.other(make_pod("x", "apps").uid("ux").node(NODE).obj())
    await g.guard.pass_once()
    assert g.slurm.calls == [] and g.state()[1] == "maintenance"
    assert [s.message.rsplit(": ", 1)[1] for s in g.kube.log] == [
        f"Slurm node {SLURM} is held out of service already (maintenance)"
    ]
    g.other(make_pod("x", "apps").uid("ux").node(NODE).obj(), "DELETED")
    await g.guard.pass_once()
    assert g.slurm.calls == [] and g.state()[1] == "maintenance"


async def test_bridge_pods_with_an_allocation_and_nodes_not_in_slurm_or_not_managed_drain_nothing() -> None:
    g = Guarded(
        {SLURM: node_info(), "kwok-hybrid-2": node_info().model_copy(update={"name": "kwok-hybrid-2"})},
        k8s_nodes=[node(), node("kwok-hybrid-2", managed=False), node("kwok-plain-1")],
    )
    g.pods.upsert(released(bridge_pod()).obj())
    g.phjs.upsert(make_phj("phj", "team").pods("p").spec(slurm={}).owned_by_pod("p", "uid-p")
                  .status(jobId=7, nodeList=NODE, phase="Running").obj())  # fmt: skip
    g.other(make_pod("x", "apps").uid("ux").node("kwok-hybrid-2").obj())  # no managed taint
    g.other(make_pod("y", "apps").uid("uy").node("kwok-plain-1").obj())  # not a Slurm node
    await g.guard.pass_once()
    assert g.slurm.calls == [] and g.kube.log == []
    assert [p["metadata"]["name"] for p in g.pods.indexed(on_node(NODE))] == ["p"]


async def test_a_bridge_pod_of_another_incarnation_than_the_member_is_an_intruder_once_settled() -> None:
    g = Guarded({SLURM: node_info()})
    g.guard.rules = ng.Rules("slurm-bridge", "slurm-bridge", settle_seconds=0.0)
    g.pods.upsert(bridge_pod().obj())  # uid-p, bound by hand
    g.phjs.upsert(make_phj("phj", "team").pods("p").spec(slurm={}).owned_by_pod("p", "another-uid")
                  .status(jobId=7, nodeList=NODE, phase="Running").obj())  # fmt: skip
    await g.guard.pass_once()
    assert g.state()[1].startswith("slurm-bridge-guard[slurm-bridge]: pod team/p ")
    assert "no member of a PlaceholderJob" in g.kube.log[0].message


async def test_nothing_is_judged_before_the_watch_and_the_node_table_are_in() -> None:
    g = Guarded({SLURM: node_info()})
    g.other(make_pod("x", "apps").uid("ux").node(NODE).obj())
    g.guard.watch.synced.clear()
    await g.guard.pass_once()
    assert g.slurm.calls == []
    g.guard.watch.synced.set()
    g.drains.table.listed = None
    await g.guard.pass_once()
    assert g.slurm.calls == []


async def test_with_drain_nodes_off_the_guard_neither_watches_nor_drains() -> None:
    g = Guarded({SLURM: node_info()})
    g.guard.config = Config(nodeGuard=NodeGuardConfig(drainNodes=False))
    g.guard.start()
    assert g.guard.watch._task is None and g.guard._loop._task is None
    await g.guard.stop()


def allocated_phj(rv: str, node_list: str | None = NODE) -> Obj:
    status: Obj = {"jobId": 7, "phase": "Running", **({"nodeList": node_list} if node_list else {})}
    obj = make_phj("phj", "team").pods("p").spec(slurm={}).owned_by_pod("p", "uid-p").status(**status).obj()
    obj["metadata"]["resourceVersion"] = rv
    return obj


async def test_pods_are_judged_when_they_or_their_node_change_and_otherwise_not_again() -> None:
    g = Guarded({SLURM: node_info()}, k8s_nodes=[node(), node("kwok-plain-1", managed=False)])
    pod = released(bridge_pod()).rv(1).obj()
    g.pods.upsert(pod)
    g.phjs.upsert(allocated_phj("1"))
    await g.guard.pass_once()
    assert g.guard.judged == 1
    await g.guard.pass_once()
    assert g.guard.judged == 1, "nothing changed: nothing judged again"
    g.pods.upsert(released(bridge_pod()).rv(2).obj())
    g.guard.on_bridge_pod("MODIFIED", pod)
    await g.guard.pass_once()
    assert g.guard.judged == 2
    g.other(make_pod("y", "apps").uid("uy").node("kwok-plain-1").obj())  # not a Slurm node
    await g.guard.pass_once()
    assert g.guard.judged == 2 and g.slurm.calls == []


async def test_a_bridge_pod_whose_allocation_is_written_late_never_drains_its_node() -> None:
    g = Guarded({SLURM: node_info()})
    g.pods.upsert(bridge_pod().rv(1).obj())  # bound, not (yet) explained
    g.phjs.upsert(allocated_phj("1", node_list=None))
    await g.guard.pass_once()
    assert g.slurm.calls == [] and g.guard._watching == {("team", "p")}
    g.phjs.upsert(allocated_phj("2"))  # the status's write: no pod event comes with it
    await g.guard.pass_once()
    assert g.slurm.calls == [] and not g.guard._watching and not g.guard._since
