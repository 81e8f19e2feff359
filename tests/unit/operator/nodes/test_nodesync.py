"""Node sync decisions (operator/nodes/nodesync.py) and the node controller around them, with no servers.

Three layers: an explicit table of the cases docs/nodes.md describes; every combination of both
sides' states and the bridge's markers, checked for the properties that prevent fights (a plan
is a fixpoint, an administrator's cordon or drain is never undone, every change has an Event);
and random flapping of both sides with stale Slurm snapshots, which must settle without
ping-pong. The controller tests use fakes for the two APIs to count Slurm calls.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
from dataclasses import replace
from typing import Any, cast

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes import resourcesfit
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.nodes.nodesync import (
    KubeView,
    Outage,
    Plan,
    SlurmAction,
    SlurmView,
    after_slurm_action,
    decide,
    drain_reason,
    kube_view,
    node_patch,
    slurm_view,
)
from slurm_bridge.operator.nodes.workitems import NodeItem
from slurm_bridge.rules.nodenames import slurm_name_of
from slurm_bridge.slurm.models import NodeInfo
from tests.unit.fakes import FakeNodes
from tests.unit.kubefakes import FakeKube, merge_patch

N = "kwok-node-2"
SCHED = "slurm-bridge"
OURS = drain_reason(N)
DRAIN, UNDRAIN = SlurmAction.DRAIN, SlurmAction.UNDRAIN


def info(*flags: str, reason: str = "", base: str = "IDLE") -> NodeInfo:
    return NodeInfo(name=N, states=(base, "EXTERNAL", *flags), reason=reason)


# Slurm node states, by the name the tables use.
SLURM: dict[str, NodeInfo | None] = {
    "absent": None,
    "idle": info(),
    "allocated": info(base="ALLOCATED"),
    "bridge-drain": info("DRAIN", reason=OURS),
    "bridge-draining": info("DRAIN", reason=OURS, base="MIXED"),
    "admin-drain": info("DRAIN", reason="maintenance"),
    "admin-draining": info("DRAIN", reason="maintenance", base="MIXED"),
    "down": info(reason="broken", base="DOWN"),
    "fail": info("FAIL", reason="failing"),
    "down+bridge-drain": info("DRAIN", reason=OURS, base="DOWN"),
    "down+admin-drain": info("DRAIN", reason="broken", base="DOWN"),
}


def view(name: str) -> SlurmView | None:
    i = SLURM[name]
    return None if i is None else slurm_view(i)


# Kubernetes node states, by name.
M = KubeView(managed_taint=True)  # in service, managed
ADMIN = replace(M, unschedulable=True)  # an administrator's cordon
ADMIN_DRAINED = replace(ADMIN, slurm_drained_by_bridge=True)  # ... already passed on to Slurm
BRIDGE = replace(M, unschedulable=True, cordoned_by_bridge=True)  # the bridge's cordon


def outage(state: Outage, reason: str, k: KubeView = M) -> KubeView:
    return replace(k, state_taint=state, reason=reason)


# (case, Kubernetes node, Slurm node, wanted Kubernetes node, Slurm call)
TABLE: list[tuple[str, KubeView, str, KubeView, SlurmAction | None]] = [
    # -- Slurm node in service
    ("in service both sides: nothing", M, "idle", M, None),
    ("new node in Slurm gets the managed taint", KubeView(), "idle", M, None),
    ("allocated node in service: nothing", M, "allocated", M, None),
    ("admin cordon drains Slurm with the bridge's reason", ADMIN, "idle", ADMIN_DRAINED, DRAIN),
    ("admin cordon, Slurm admin resumed our drain: respected", ADMIN_DRAINED, "idle", ADMIN_DRAINED, None),
    ("outage over: the bridge's cordon and taint go", outage("drain", "maintenance", BRIDGE), "idle", M, None),
    ("outage over under an admin cordon: only the taint goes",
     outage("down", "broken", ADMIN), "idle", ADMIN_DRAINED, DRAIN),
    ("stale cordoned-by marker on a schedulable node is dropped", replace(M, cordoned_by_bridge=True), "idle", M, None),
    ("stale drain record on a schedulable node is dropped", replace(M, slurm_drained_by_bridge=True), "idle", M, None),
    ("outage over, admin had uncordoned: taint goes", outage("drain", "maintenance"), "idle", M, None),
    # -- Slurm node drained by the bridge
    ("admin cordon mirrored: steady", ADMIN_DRAINED, "bridge-drain", ADMIN_DRAINED, None),
    ("admin cordon, our drain without record (crash after drain): adopted", ADMIN, "bridge-drain", ADMIN_DRAINED,
     None),
    ("uncordon undrains the bridge's drain", replace(M, slurm_drained_by_bridge=True), "bridge-drain", M, UNDRAIN),
    ("schedulable node, leftover bridge drain: undrained", M, "bridge-drain", M, UNDRAIN),
    ("draining (jobs still on it) counts the same", M, "bridge-draining", M, UNDRAIN),
    ("bridge cordon and bridge drain: both lifted", outage("drain", "x", BRIDGE), "bridge-drain", M, UNDRAIN),
    # -- Slurm node drained by an administrator
    ("admin drain cordons with the bridge's marker and taints", M, "admin-drain",
     outage("drain", "maintenance", BRIDGE), None),
    ("admin draining (jobs still on it) cordons too", M, "admin-draining",
     outage("drain", "maintenance", BRIDGE), None),
    ("mirrored admin drain: steady", outage("drain", "maintenance", BRIDGE), "admin-drain",
     outage("drain", "maintenance", BRIDGE), None),
    ("admin uncordoned the bridge's cordon: marker released, no re-cordon",
     outage("drain", "maintenance", replace(M, cordoned_by_bridge=True)), "admin-drain",
     outage("drain", "maintenance"), None),
    ("admin uncordon respected for the rest of the outage", outage("drain", "maintenance"), "admin-drain",
     outage("drain", "maintenance"), None),
    ("admin cordon + admin drain: taint only, neither undone", ADMIN, "admin-drain",
     outage("drain", "maintenance", ADMIN), None),
    ("admin cordon + admin drain mirrored: steady", outage("drain", "maintenance", ADMIN), "admin-drain",
     outage("drain", "maintenance", ADMIN), None),
    ("Slurm admin took over our drain: record kept, no write", ADMIN_DRAINED, "admin-drain",
     outage("drain", "maintenance", ADMIN_DRAINED), None),
    ("new Slurm reason: annotation follows", outage("drain", "old reason", BRIDGE), "admin-drain",
     outage("drain", "maintenance", BRIDGE), None),
    # -- Slurm node DOWN or FAIL
    ("DOWN cordons and taints down", M, "down", outage("down", "broken", BRIDGE), None),
    ("FAIL cordons and taints fail", M, "fail", outage("fail", "failing", BRIDGE), None),
    ("drain becomes DOWN: taint follows, no second cordon", outage("drain", "maintenance", BRIDGE), "down",
     outage("down", "broken", BRIDGE), None),
    ("DOWN under admin cordon: taint only", ADMIN, "down", outage("down", "broken", ADMIN), None),
    ("DOWN+admin drain is down", M, "down+admin-drain", outage("down", "broken", BRIDGE), None),
    ("DOWN on our drained node, admin cordon: nothing to write", ADMIN_DRAINED, "down+bridge-drain",
     outage("down", OURS, ADMIN_DRAINED), None),
    ("DOWN on our drained node, uncordoned: undrain only (DOWN stays)", M, "down+bridge-drain",
     outage("down", OURS, BRIDGE), UNDRAIN),
    # -- not in Slurm
    ("plain node: untouched", KubeView(), "absent", KubeView(), None),
    ("admin cordon on a plain node: untouched, no Slurm call", replace(KubeView(), unschedulable=True), "absent",
     replace(KubeView(), unschedulable=True), None),
    ("node left Slurm: managed taint removed", M, "absent", KubeView(), None),
    ("node left Slurm while the bridge held it: every mark removed, uncordoned",
     outage("down", "broken", BRIDGE), "absent", KubeView(), None),
    ("node left Slurm under an admin cordon: the cordon stays", outage("down", "broken", ADMIN_DRAINED), "absent",
     replace(KubeView(), unschedulable=True), None),
]  # fmt: skip


@pytest.mark.parametrize(("k", "slurm", "want", "action"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_table(k: KubeView, slurm: str, want: KubeView, action: SlurmAction | None) -> None:
    plan = decide(k, view(slurm), node=N, slurm_node=N)
    assert (plan.kube, plan.slurm_action) == (want, action)
    assert plan.slurm_reason == (OURS if action is DRAIN else None)


def test_drain_reason_is_exact() -> None:
    assert drain_reason("kwok-node-2") == "slurm-bridge: Kubernetes node kwok-node-2 is unschedulable"


def test_secondary_mapping_only_gets_the_managed_taint() -> None:
    """Two Kubernetes nodes mapped to one Slurm node: only one of them is kept in step."""
    plan = decide(replace(KubeView(), unschedulable=True), view("admin-drain"), node="alias", slurm_node=N, sync=False)
    assert plan.kube == replace(KubeView(), unschedulable=True, managed_taint=True)
    assert plan.slurm_action is None


# ---- every combination ---------------------------------------------------------------------------

TAINTS: tuple[Outage | None, ...] = (None, "drain", "down", "fail")
KUBE_STATES = [
    KubeView(u, c, d, t, r, m)
    for u, c, d, t, r, m in itertools.product(
        (False, True), (False, True), (False, True), TAINTS, (None, "stale"), (False, True)
    )
]
COMBOS = list(itertools.product(KUBE_STATES, SLURM))


def _slurm_after(slurm: str, plan: Plan) -> NodeInfo | None:
    i = SLURM[slurm]
    if i is None or plan.slurm_action is None:
        return i
    return after_slurm_action(i, plan.slurm_action, plan.slurm_reason)


def test_every_combination_is_covered() -> None:
    assert len(COMBOS) == 128 * len(SLURM)


@pytest.mark.parametrize("sync", [True, False])
def test_every_combination_reaches_a_fixpoint_in_one_step(sync: bool) -> None:
    """Apply any plan, decide again: nothing left to do. So the bridge never fights itself."""
    for k, slurm in COMBOS:
        plan = decide(k, view(slurm), node=N, slurm_node=N, sync=sync)
        after = _slurm_after(slurm, plan)
        again = decide(plan.kube, None if after is None else slurm_view(after), node=N, slurm_node=N, sync=sync)
        assert (again.kube, again.slurm_action, again.events) == (plan.kube, None, ()), (k, slurm)


def test_every_combination_never_undoes_an_administrator() -> None:
    for k, slurm in COMBOS:
        i = SLURM[slurm]
        plan = decide(k, view(slurm), node=N, slurm_node=N)
        w, a = plan.kube, plan.slurm_action
        case = (k, slurm, plan)
        # A cordon the bridge did not make is never lifted.
        if k.unschedulable and not k.cordoned_by_bridge:
            assert w.unschedulable, case
        # The bridge cordons only for a Slurm outage, and marks the cordon as its own.
        if w.unschedulable and not k.unschedulable:
            assert i is not None and slurm_view(i).outage and w.cordoned_by_bridge, case
        # UNDRAIN only lifts the bridge's own drain; DRAIN only a node nobody took out of service.
        if a is UNDRAIN:
            assert i is not None and "DRAIN" in i.states and i.reason.startswith(names.SLURM_NODE_REASON_PREFIX)
        if a is DRAIN:
            assert i is not None and not {"DRAIN", "DOWN", "FAIL"} & set(i.states), case
            assert plan.slurm_reason == OURS
        # Nodes not in Slurm cost no Slurm call and keep none of the bridge's marks.
        if i is None:
            assert a is None and w == KubeView(unschedulable=w.unschedulable), case


def test_every_combination_mirrors_slurm_and_reports_each_change() -> None:
    for k, slurm in COMBOS:
        i = SLURM[slurm]
        plan = decide(k, view(slurm), node=N, slurm_node=N)
        assert plan.kube.managed_taint == (i is not None)
        if i is not None:
            s = slurm_view(i)
            assert plan.kube.state_taint == s.outage
            assert plan.kube.reason == (s.reason if s.outage else None)
        changed = plan.kube != k or plan.slurm_action is not None
        assert bool(plan.events) == changed, (k, slurm, plan)
        if plan.slurm_action is not None:
            assert any(e.side == "slurm" for e in plan.events)


# ---- flapping ------------------------------------------------------------------------------------


class World:
    """One node on both sides and administrators acting on each, with the bridge as the controller
    runs it: it reconciles on every Kubernetes change and after every Slurm node list, decides from
    the last list plus its own writes, and writes Slurm only from a list newer than the last
    Kubernetes change (else it waits for the next list)."""

    def __init__(self) -> None:
        self.k = M
        self.s: NodeInfo = SLURM["idle"]  # type: ignore[assignment]
        self.snapshot = self.s
        self.written: NodeInfo | None = None
        self.k_changed = False  # since the last list

    def admin(self, op: str) -> None:
        flags = [f for f in self.s.states[1:] if f not in ("DRAIN", "FAIL")]
        if op in ("cordon", "uncordon"):
            before = self.k
            self.k = replace(self.k, unschedulable=op == "cordon")
            if self.k != before:
                self.k_changed = True
                self.reconcile()
        elif op == "drain":
            self.s = self.s.model_copy(update={"states": (self.s.states[0], *flags, "DRAIN"), "reason": "admin"})
        elif op == "down":
            self.s = self.s.model_copy(update={"states": ("DOWN", *self.s.states[1:]), "reason": "admin down"})
        elif op == "resume":
            self.s = self.s.model_copy(update={"states": ("IDLE", *flags), "reason": ""})

    def poll(self) -> bool:
        self.snapshot, self.written, self.k_changed = self.s, None, False
        return self.reconcile()

    def reconcile(self) -> bool:
        seen = self.written or self.snapshot
        plan = decide(self.k, slurm_view(seen), node=N, slurm_node=N)
        if plan.slurm_action is not None:
            if self.k_changed:
                return False  # waits for the next list
            self.s = after_slurm_action(self.s, plan.slurm_action, plan.slurm_reason)
            self.written = after_slurm_action(seen, plan.slurm_action, plan.slurm_reason)
        changed = plan.kube != self.k or plan.slurm_action is not None
        self.k = plan.kube
        return changed


@pytest.mark.parametrize("seed", range(500))
def test_flapping_both_sides_settles_without_ping_pong(seed: int) -> None:
    rng = random.Random(seed)
    w = World()
    ops = ["cordon", "uncordon", "drain", "down", "resume", "poll"]
    for _ in range(rng.randint(5, 40)):
        op = rng.choice(ops)
        w.poll() if op == "poll" else w.admin(op)
    final = rng.choice(["in-service", "out-of-service"])
    last = ["uncordon", "resume"] if final == "in-service" else ["cordon", "drain"]
    rng.shuffle(last)
    for op in last:
        w.admin(op)
    # Within two lists the state settles; after that nothing changes any more.
    w.poll()
    w.poll()
    settled = (w.k, w.s)
    assert not any(w.poll() for _ in range(10)), f"still changing after two polls (seed {seed})"
    assert (w.k, w.s) == settled
    s = slurm_view(w.s)
    if final == "in-service":
        assert w.k == M, w.k
        assert not {"DRAIN", "DOWN", "FAIL"} & set(w.s.states)
    else:
        # The administrators' cordon and drain both stand, and the drain is mirrored.
        assert w.k.unschedulable
        assert s.outage in ("drain", "down") and w.s.reason == "admin" and not s.bridge_drain
        assert (w.k.state_taint, w.k.reason) == (s.outage, "admin")


# ---- reading and writing the node objects --------------------------------------------------------


def k8s_node(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": N, "uid": "u1", "resourceVersion": "7", "annotations": {}, "labels": {}},
        "spec": spec,
    }


def test_kube_view_reads_markers_and_taints() -> None:
    node = k8s_node(
        unschedulable=True,
        taints=[
            {"key": names.TAINT_MANAGED_NODE, "value": SCHED, "effect": "NoExecute"},
            {"key": names.TAINT_SLURM_STATE, "value": "down", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        ],
    )
    node["metadata"]["annotations"] = {names.ANN_CORDONED_BY: "slurm-bridge", names.ANN_SLURM_REASON: "broken"}
    assert kube_view(node, SCHED) == KubeView(True, True, False, "down", "broken", True)
    assert not kube_view(node, "other-scheduler").managed_taint
    node["metadata"]["annotations"][names.ANN_CORDONED_BY] = "someone-else"
    assert not kube_view(node, SCHED).cordoned_by_bridge


def test_slurm_name_from_label_or_name() -> None:
    node = k8s_node()
    assert slurm_name_of(node) == N
    node["metadata"]["labels"][names.LABEL_SLURM_NODENAME] = "sn-7"
    assert slurm_name_of(node) == "sn-7"


def test_slurm_view_classifies_states() -> None:
    assert slurm_view(info()) == SlurmView()
    assert slurm_view(info("DRAIN", reason=OURS)) == SlurmView(None, True, OURS)
    assert slurm_view(info("DRAIN", reason="x")) == SlurmView("drain", False, "x")
    assert slurm_view(info("DRAIN", reason="x", base="DOWN")).outage == "down"
    assert slurm_view(info("FAIL", "DRAIN", reason="x", base="DOWN")).outage == "fail"


def test_node_patch_keeps_other_taints_and_guards_with_resource_version() -> None:
    other = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "t"}
    managed = {"key": names.TAINT_MANAGED_NODE, "value": SCHED, "effect": "NoExecute", "timeAdded": "t0"}
    node = k8s_node(taints=[other, managed])
    want = outage("drain", "maintenance", BRIDGE)
    patch = node_patch(node, want, SCHED)
    assert patch == {
        "metadata": {
            "resourceVersion": "7",
            "annotations": {names.ANN_CORDONED_BY: "slurm-bridge", names.ANN_SLURM_REASON: "maintenance"},
        },
        "spec": {
            "unschedulable": True,
            "taints": [other, managed, {"key": names.TAINT_SLURM_STATE, "value": "drain", "effect": "NoSchedule"}],
        },
    }
    assert node_patch(merge_patch(node, patch), want, SCHED) is None


def test_node_patch_removes_foreign_and_duplicate_bridge_taints() -> None:
    node = k8s_node(
        taints=[
            {"key": names.TAINT_MANAGED_NODE, "value": "other", "effect": "NoExecute"},
            {"key": names.TAINT_SLURM_STATE, "value": "down", "effect": "NoExecute"},
        ]
    )
    patch = node_patch(node, M, SCHED)
    assert patch is not None
    assert patch["spec"]["taints"] == [{"key": names.TAINT_MANAGED_NODE, "value": SCHED, "effect": "NoExecute"}]
    assert patch["metadata"] == {"resourceVersion": "7"}


# ---- the controller, with fake APIs --------------------------------------------------------------


def fake_kube(nodes: list[dict[str, Any]]) -> FakeKube:
    """The API server holding ``nodes``; the controller writes a node only at the version it read."""
    return FakeKube({f"/api/v1/nodes/{n['metadata']['name']}": n for n in nodes}, require_rv=True)


def controller(kube: FakeKube, slurm: FakeNodes, period: float = 1.0) -> NodeController:
    ctrl = NodeController(Config(pollPeriodSeconds=period), cast(KubeClient, kube), slurm)
    for n in kube.nodes.values():
        ctrl.on_node_event("ADDED", copy.deepcopy(n))
    return ctrl


def named(name: str, **spec: Any) -> dict[str, Any]:
    n = k8s_node(**spec)
    n["metadata"]["name"] = name
    return n


async def test_nodes_not_in_slurm_cost_no_slurm_call() -> None:
    kube = fake_kube([named("plain-1", unschedulable=True), named("plain-2")])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    for name in ("plain-1", "plain-2"):
        assert await ctrl._reconcile(NodeItem(name)) is None
    assert (slurm.lists, slurm.updates) == (1, [])
    assert kube.told("name", "reason") == []
    assert kube.nodes["plain-1"]["metadata"]["resourceVersion"] == "7", "a plain node is not written"


async def test_a_node_whose_slurm_size_does_not_fit_is_reconciled_again_within_seconds() -> None:
    """SlurmResourcesFit=False leaves the node out of every new job, so its reconcile comes back
    while it lasts (resourcesfit.FALSE_SECONDS); a node that fits asks for nothing."""
    small = named(N)
    small["status"] = {"allocatable": {"cpu": "2", "memory": "4Gi"}}
    kube = fake_kube([small])
    kube.collections["/api/v1/pods"] = []
    slurm = FakeNodes([info().model_copy(update={"cpus": 4, "real_memory_mib": 8192})])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    assert await ctrl._reconcile(NodeItem(N)) == pytest.approx(resourcesfit.FALSE_SECONDS, abs=1)
    assert kube.nodes[N]["status"]["conditions"][-1]["status"] == "False"
    slurm.nodes = {N: info().model_copy(update={"cpus": 2, "real_memory_mib": 4096})}
    await ctrl.poll_once()
    assert await ctrl._reconcile(NodeItem(N)) is None
    assert kube.nodes[N]["status"]["conditions"][-1]["status"] == "True"


async def test_cordon_drains_once_even_when_a_list_was_in_flight() -> None:
    kube = fake_kube([named(N, unschedulable=True)])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    # A node list starts before the drain and answers after it, with the state before it.
    slurm.gate = asyncio.Event()
    listing = asyncio.create_task(ctrl.poll_once())
    await asyncio.sleep(0)
    await ctrl._reconcile(NodeItem(N))
    slurm.gate.set()
    await listing
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "DRAIN", OURS)]
    assert kube.nodes[N]["metadata"]["annotations"][names.ANN_SLURM_DRAINED_BY] == "slurm-bridge"
    assert (N, "SlurmNodeDrained") in kube.told("name", "reason")
    # The next list shows the drain. Uncordon lifts it, once a list newer than the uncordon came.
    slurm.gate = None
    await ctrl.poll_once()
    ctrl.on_node_event("MODIFIED", kube.edit(N, lambda n: n["spec"].update(unschedulable=False)))
    await ctrl._reconcile(NodeItem(N))
    assert len(slurm.updates) == 1, "no Slurm write from a list older than the uncordon"
    await ctrl.poll_once()
    assert ctrl.queue._queued == {NodeItem(N)}, "the node is queued again by the list"
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates[-1] == (N, "UNDRAIN", None)
    assert names.ANN_SLURM_DRAINED_BY not in kube.nodes[N]["metadata"]["annotations"]


async def test_slurm_outage_cordons_and_conflict_is_decided_again() -> None:
    kube = fake_kube([named(N)])
    slurm = FakeNodes([info("DRAIN", reason="maintenance")])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    kube.conflicts = 1  # an administrator changed the node between our read and our write
    assert await ctrl._reconcile(NodeItem(N)) is None
    assert NodeItem(N) in ctrl.queue._queued, "decided again on the new version"
    assert await ctrl._reconcile(NodeItem(N)) is None
    node = kube.nodes[N]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][names.ANN_SLURM_REASON] == "maintenance"
    assert {"key": names.TAINT_SLURM_STATE, "value": "drain", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert slurm.updates == []
    assert kube.reasons == ["ManagedTaintAdded", "SlurmNodeOutOfService", "CordonedForSlurm"]


async def test_one_node_list_per_poll_period_whatever_the_node_count() -> None:
    kube = fake_kube([named(f"n{i}") for i in range(50)])
    slurm = FakeNodes([NodeInfo(name=f"n{i}", states=("IDLE",)) for i in range(50)])
    ctrl = controller(kube, slurm, period=0.1)
    ctrl.start()
    try:
        await asyncio.sleep(0.55)
    finally:
        await ctrl.stop()
    assert 3 <= slurm.lists <= 7, slurm.lists  # one list per 0.1 s period, not one per node
    assert slurm.updates == []
    assert all(n["spec"]["taints"][0]["key"] == names.TAINT_MANAGED_NODE for n in kube.nodes.values())


async def test_an_unchanged_node_table_is_not_sent_again_and_a_change_is_seen_next_poll() -> None:
    """Idle, each poll asks for the nodes changed since the last list (slurmrestd answers 304): no
    node list to decode and no node queued. A change in Slurm is in the next poll's answer."""
    kube = fake_kube([named(N)])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    ctrl.queue._queued.clear()
    listed = ctrl.slurm_nodes
    for _ in range(3):
        await ctrl.poll_once()
    assert slurm.sinces == [None, 0, 0, 0] and slurm.unchanged == 3
    assert ctrl.slurm_nodes is listed and ctrl.queue._queued == set(), "nothing changed: nothing to decide"
    slurm.nodes[N] = info("DRAIN", reason="maintenance")
    await ctrl.poll_once()
    assert ctrl.queue._queued == {NodeItem(N)}, "the drain is seen within one poll"
    await ctrl._reconcile(NodeItem(N))
    assert kube.nodes[N]["spec"]["unschedulable"] is True
    await ctrl.poll_once()
    assert slurm.sinces[-1] == 1, "the next poll asks for changes since the list that showed the drain"


async def test_the_whole_node_list_is_read_again_every_full_list_period(monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_bridge.operator.nodes import slurmnodes as nodes_module

    kube = fake_kube([named(N)])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    await ctrl.poll_once()
    monkeypatch.setattr(nodes_module, "FULL_LIST_SECONDS", 0.0)
    await ctrl.poll_once()
    assert slurm.sinces == [None, 0, None], "a whole list whatever Slurm would say"


async def test_a_write_answered_unchanged_by_a_list_in_flight_is_kept_until_a_list_shows_it() -> None:
    """A list that Slurm answered "unchanged" before the bridge's drain arrives after it: the
    drain stays what the controller decides on (not the list's older state), and the next list
    (the table changed) shows it."""
    kube = fake_kube([named(N, unschedulable=True)])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    await ctrl.poll_once()  # a list newer than the cordon
    slurm.gate = asyncio.Event()
    listing = asyncio.create_task(ctrl.poll_once())
    await asyncio.sleep(0)
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "DRAIN", OURS)]
    slurm.gate.set()
    await listing
    assert slurm.unchanged == 2
    node = ctrl.slurm_node(N)
    assert node is not None and "DRAIN" in node.states, "the write, not the list from before it"
    slurm.gate = None
    await ctrl.poll_once()
    assert slurm.unchanged == 2 and ctrl.slurm_nodes is not None and "DRAIN" in ctrl.slurm_nodes[N].states
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "DRAIN", OURS)], "drained once"


def test_a_node_heartbeat_queues_no_reconcile() -> None:
    """A status heartbeat (kubelet or kwok: conditions only, which the store does not keep) is a
    new resourceVersion and nothing else: nothing to decide, so nothing is queued; any change the
    bridge reads is."""
    kube = fake_kube([named(N)])
    ctrl = controller(kube, FakeNodes([info()]))
    ctrl.queue._queued.clear()
    beat = kube.edit(N, lambda n: n.setdefault("status", {}).update(conditions=[{"type": "Ready", "status": "True"}]))
    ctrl.on_node_event("MODIFIED", beat)
    assert ctrl.queue._queued == set()
    stored = ctrl.nodes.get(("", N))
    assert stored is not None and stored["metadata"]["resourceVersion"] == beat["metadata"]["resourceVersion"]
    ctrl.on_node_event("MODIFIED", kube.edit(N, lambda n: n["spec"].update(unschedulable=True)))
    assert ctrl.queue._queued == {NodeItem(N)}
    ctrl.queue._queued.clear()
    ctrl.on_node_event("MODIFIED", kube.edit(N, lambda n: n["metadata"]["labels"].update(extra="1")))
    assert ctrl.queue._queued == {NodeItem(N)}, (
        "a label change is queued (labels are read: Slurm node name, registration)"
    )


async def test_two_nodes_mapped_to_one_slurm_node_only_one_is_synced() -> None:
    alias = named("alias", unschedulable=True)
    alias["metadata"]["labels"][names.LABEL_SLURM_NODENAME] = N
    kube = fake_kube([named(N), alias])
    slurm = FakeNodes([info()])
    ctrl = controller(kube, slurm)
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem("alias"))
    assert slurm.updates == [], "the alias's cordon is not passed to Slurm"
    assert kube.nodes["alias"]["spec"]["taints"][0]["key"] == names.TAINT_MANAGED_NODE
    # Relabelled away from Slurm: it leaves Slurm and loses the taint.
    relabel = {names.LABEL_SLURM_NODENAME: "no-such-node"}
    ctrl.on_node_event("MODIFIED", kube.edit("alias", lambda n: n["metadata"]["labels"].update(relabel)))
    await ctrl._reconcile(NodeItem("alias"))
    assert kube.nodes["alias"]["spec"]["taints"] == []
    assert kube.nodes["alias"]["spec"]["unschedulable"] is True
