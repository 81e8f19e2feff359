"""Device taints reach Slurm (operator/nodes/devicetaints.py; docs/gpus.md, "Device taints"): which
taints of which devices drain a Slurm node, the drain's reason as the record, the one Slurm write
for each state of the node, and the node controller around them, with no servers."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.cache import project_slice, project_taint_rule
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.nodes.devicetaints import (
    Drain,
    TaintedDevice,
    Undrain,
    drain_of,
    drain_reason,
    step,
    tainted,
)
from slurm_bridge.operator.nodes.nodesync import drain_reason as sync_reason
from slurm_bridge.operator.nodes.workitems import NodeItem
from slurm_bridge.slurm.models import NodeInfo
from tests.unit.fakes import FakeNodes
from tests.unit.kubefakes import FakeKube

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
N = "kwok-hybrid-1"
BRIDGE = "slurm-bridge"
FAULT = {"key": "example.com/fault", "value": "1", "effect": "NoExecute", "timeAdded": "2026-12-02T06:00:00Z"}


def device(name: str, *taints: Obj) -> Obj:
    d: Obj = {"name": name, "attributes": {"type": {"string": "gpu"}}}
    if taints:
        d["taints"] = list(taints)
    return d


def a_slice(*devices: Obj, driver: str = "gpu.nvidia.com", node: str = N, generation: int = 1) -> Obj:
    return {
        "metadata": {"name": f"{node}-{driver}-{generation}", "uid": f"u-{generation}", "resourceVersion": "1"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def rule(name: str, taint: Obj, **selector: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"deviceSelector": selector, "taint": taint}}


def td(
    dev: str, effect: str = "NoExecute", rule_: str = "", key: str = "example.com/fault", value: str = "1"
) -> TaintedDevice:
    return TaintedDevice(dev, key, value, effect, "gpu.nvidia.com", N, rule_)


# ---- which taints drain a node ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slices", "rules", "want"),
    [
        pytest.param([a_slice(device("gpu-0"), device("gpu-1"))], [], [], id="no-taint"),
        pytest.param([a_slice(device("gpu-0"), device("gpu-1", FAULT))], [], [td("gpu-1")], id="own-NoExecute"),
        pytest.param(
            [a_slice(device("gpu-0", {**FAULT, "effect": "NoSchedule"}))],
            [],
            [td("gpu-0", "NoSchedule")],
            id="own-NoSchedule",
        ),
        pytest.param(
            [a_slice(device("gpu-0", {**FAULT, "effect": "None"}))], [], [], id="effect-None-keeps-nothing-off"
        ),
        pytest.param(
            [a_slice(device("gpu-0", {**FAULT, "effect": "PreferNoExecute"}))], [], [], id="unknown-effect-as-None"
        ),
        pytest.param([a_slice(device("gpu-0", FAULT), driver="dra.cpu")], [], [], id="cpu-driver-is-not-GRES"),
        pytest.param(
            [a_slice(device("gpu-0", FAULT), driver="gpu.example.com")],
            [],
            [TaintedDevice("gpu-0", "example.com/fault", "1", "NoExecute", "gpu.example.com", N)],
            id="other-GRES-driver",
        ),
        pytest.param(
            [a_slice(device("gpu-0", FAULT), generation=1), a_slice(device("gpu-0"), generation=2)],
            [],
            [],
            id="older-pool-generation-ignored",
        ),
        pytest.param(
            [a_slice(device("gpu-0"), device("gpu-1"))],
            [rule("bad-gpu", FAULT, driver="gpu.nvidia.com", pool=N, device="gpu-1")],
            [td("gpu-1", rule_="bad-gpu")],
            id="rule-selects-one-device",
        ),
        pytest.param(
            [a_slice(device("gpu-0"), device("gpu-1"))],
            [rule("all", {**FAULT, "effect": "NoSchedule"})],
            [td("gpu-0", "NoSchedule", "all"), td("gpu-1", "NoSchedule", "all")],
            id="empty-selector-selects-all",
        ),
        pytest.param(
            [a_slice(device("gpu-0"))],
            [
                rule("elsewhere", FAULT, pool="kwok-hybrid-2"),
                rule("other", FAULT, driver="gpu.example.com"),
                rule("dry-run", {**FAULT, "effect": "None"}),
            ],
            [],
            id="rules-that-do-not-select-or-keep-nothing-off",
        ),
        pytest.param(
            [a_slice(device("gpu-1", FAULT), device("gpu-0", {"key": "b", "effect": "NoSchedule"}))],
            [],
            [TaintedDevice("gpu-0", "b", "", "NoSchedule", "gpu.nvidia.com", N), td("gpu-1")],
            id="sorted-by-device",
        ),
    ],
)
def test_tainted(slices: list[Obj], rules: list[Obj], want: list[TaintedDevice]) -> None:
    """As the operator's watches keep them (their projections), too."""
    assert tainted(slices, rules) == want
    assert tainted([project_slice(s) for s in slices], [project_taint_rule(r) for r in rules]) == want


def test_projections_keep_taints_but_their_time() -> None:
    projected = project_slice(a_slice(device("gpu-0", FAULT), device("gpu-1")))
    assert projected["spec"]["devices"][0]["taints"] == [
        {"key": "example.com/fault", "value": "1", "effect": "NoExecute"}
    ]
    assert "taints" not in projected["spec"]["devices"][1]
    r = project_taint_rule(rule("r", FAULT, device="gpu-0") | {"status": {"conditions": []}})
    assert r["spec"] == {
        "deviceSelector": {"device": "gpu-0"},
        "taint": {k: FAULT[k] for k in ("key", "value", "effect")},
    }


# ---- the drain's reason ----------------------------------------------------------------------------------


def test_the_reason_names_the_device_taint_and_bridge_and_is_read_back_for_that_bridge_only() -> None:
    one = drain_reason(BRIDGE, [td("gpu-1")])
    assert one == "slurm-bridge-device-taint[slurm-bridge]: device gpu-1 taint example.com/fault=1:NoExecute"
    assert drain_of(one, BRIDGE) == ("gpu-1", "example.com/fault=1:NoExecute")
    assert drain_of(one, "other-bridge") is None
    more = drain_reason(BRIDGE, [td("gpu-0", "NoSchedule", "r1", key="k", value=""), td("gpu-1")])
    assert more.endswith("device gpu-0 taint k:NoSchedule (DeviceTaintRule r1) and 1 more device taint(s)")
    assert drain_of(more, BRIDGE) == ("gpu-0", "k:NoSchedule")
    for other in ("maintenance", sync_reason(N), f"{names.NODE_GUARD_DRAIN_REASON_PREFIX}{BRIDGE}]: pod a/b x", ""):
        assert drain_of(other, BRIDGE) is None, other
    # Not the node sync's prefix: the node sync mirrors this drain as an outage and never lifts it.
    assert not one.startswith(names.SLURM_NODE_REASON_PREFIX)


# ---- the one Slurm write ---------------------------------------------------------------------------------


def node(*flags: str, reason: str = "", base: str = "IDLE") -> NodeInfo:
    return NodeInfo(name=N, states=(base, *flags), reason=reason)


OURS = drain_reason(BRIDGE, [td("gpu-1")])
THEIRS = drain_reason("other-bridge", [td("gpu-1")])


@pytest.mark.parametrize(
    ("info", "found", "want"),
    [
        pytest.param(None, [td("gpu-1")], None, id="not-in-Slurm"),
        pytest.param(node(), [], None, id="nothing-tainted"),
        pytest.param(node(), [td("gpu-1")], Drain(N, (td("gpu-1"),), OURS), id="tainted-drains"),
        pytest.param(node(base="ALLOCATED"), [td("gpu-1")], Drain(N, (td("gpu-1"),), OURS), id="busy-node-drains"),
        pytest.param(node("DRAIN", reason=OURS), [td("gpu-1")], None, id="already-ours"),
        pytest.param(node("DRAIN", reason=OURS), [td("gpu-0"), td("gpu-1")], None, id="ours-names-one-still-there"),
        pytest.param(
            node("DRAIN", reason=OURS),
            [td("gpu-0")],
            Drain(N, (td("gpu-0"),), drain_reason(BRIDGE, [td("gpu-0")])),
            id="named-taint-gone-another-left",
        ),
        pytest.param(
            node("DRAIN", reason=OURS), [], Undrain(N, ("gpu-1", "example.com/fault=1:NoExecute")), id="lifted"
        ),
        pytest.param(
            node("DRAIN", reason=OURS, base="DOWN"),
            [],
            Undrain(N, drain_of(OURS, BRIDGE) or ("", "")),
            id="lifted-under-DOWN",
        ),
        pytest.param(node("DRAIN", reason="GPU Xid 79"), [td("gpu-1")], None, id="admins-drain-stands"),
        pytest.param(node("DRAIN", reason="GPU Xid 79"), [], None, id="admins-drain-never-lifted"),
        pytest.param(node("DRAIN", reason=sync_reason(N)), [], None, id="node-syncs-drain-not-lifted"),
        pytest.param(node("DRAIN", reason=sync_reason(N)), [td("gpu-1")], None, id="node-syncs-drain-not-overwritten"),
        pytest.param(node("DRAIN", reason=THEIRS), [], None, id="another-bridges-drain-not-lifted"),
        pytest.param(node(reason="stale reason", base="DOWN"), [], None, id="down-without-drain"),
    ],
)
def test_step(info: NodeInfo | None, found: list[TaintedDevice], want: Drain | Undrain | None) -> None:
    assert step(N, info, found, BRIDGE) == want


@pytest.mark.parametrize("found", [[], [td("gpu-1")], [td("gpu-0"), td("gpu-1", "NoSchedule")]])
@pytest.mark.parametrize("reason", ["", "maintenance", OURS, THEIRS])
def test_a_step_applied_asks_for_nothing_more(found: list[TaintedDevice], reason: str) -> None:
    """A fixpoint: after its write, the same findings ask for no other."""
    info = node("DRAIN", reason=reason) if reason else node()
    s = step(N, info, found, BRIDGE)
    if isinstance(s, Drain):
        info = node("DRAIN", reason=s.reason)
    elif isinstance(s, Undrain):
        info = node()
    assert step(N, info, found, BRIDGE) is None


# ---- the node controller --------------------------------------------------------------------------------


def k8s_node() -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": N, "uid": "u1", "resourceVersion": "7", "annotations": {}, "labels": {}},
        "spec": {},
    }


def controller(slurm: FakeNodes, *, synced: bool = True) -> tuple[NodeController, FakeKube]:
    kube = FakeKube({f"/api/v1/nodes/{N}": k8s_node()}, require_rv=True)
    kube.collections["/api/v1/pods"] = []
    ctrl = NodeController(Config(pollPeriodSeconds=1.0), cast(KubeClient, kube), slurm)
    ctrl.on_node_event("ADDED", copy.deepcopy(kube.nodes[N]))
    if synced:
        ctrl.devices.slices.synced.set()
        ctrl.taint_rules.synced.set()
    return ctrl, kube


def publish(ctrl: NodeController, *devices: Obj) -> None:
    ctrl.devices.slices._apply("MODIFIED", a_slice(*devices))


async def test_a_tainted_gpu_drains_its_slurm_node_and_the_drain_is_lifted_after() -> None:
    slurm = FakeNodes([NodeInfo(name=N, states=("IDLE",), gres="gpu:h100:2")])
    ctrl, kube = controller(slurm)
    publish(ctrl, device("gpu-0"), device("gpu-1", FAULT))
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "DRAIN", OURS)]
    drained = ctrl.slurm_node(N)
    assert drained is not None and "DRAIN" in drained.states, "the table shows the drain before a list does"
    assert (N, names.REASON_DEVICE_TAINT_NODE_DRAINED) in kube.told("name", "reason")
    # The next list shows the drain: the node sync mirrors it as an outage (a drain not its own).
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert len(slurm.updates) == 1, "drained once"
    assert kube.nodes[N]["metadata"]["annotations"][names.ANN_SLURM_REASON] == OURS
    # The taint is removed: the drain is lifted, once.
    publish(ctrl, device("gpu-0"), device("gpu-1"))
    assert NodeItem(N) in ctrl.queue._queued, "a slice change queues its node"
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates[-1] == (N, "UNDRAIN", None)
    assert (N, names.REASON_DEVICE_TAINT_NODE_UNDRAINED) in kube.told("name", "reason")
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert len(slurm.updates) == 2


async def test_a_device_taint_rule_drains_and_a_rules_change_queues_every_node() -> None:
    slurm = FakeNodes([NodeInfo(name=N, states=("IDLE",), gres="gpu:h100:2")])
    ctrl, _ = controller(slurm)
    publish(ctrl, device("gpu-0"), device("gpu-1"))
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == []
    ctrl.queue._queued.clear()
    ctrl.taint_rules._apply("ADDED", rule("bad", FAULT, device="gpu-0"))
    assert NodeItem(N) in ctrl.queue._queued
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "DRAIN", drain_reason(BRIDGE, [td("gpu-0", rule_="bad")]))]


async def test_nothing_is_decided_before_the_slices_and_rules_are_listed() -> None:
    """After a restart, a drain the bridge holds is not lifted on taints not read yet."""
    slurm = FakeNodes([NodeInfo(name=N, states=("IDLE", "DRAIN"), reason=OURS, gres="gpu:h100:2")])
    ctrl, _ = controller(slurm, synced=False)
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == []
    ctrl.devices.slices.synced.set()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [], "the rules are not listed yet"
    ctrl.taint_rules.synced.set()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == [(N, "UNDRAIN", None)]


async def test_an_administrators_drain_stands_and_the_taint_drains_once_it_is_resumed() -> None:
    slurm = FakeNodes([NodeInfo(name=N, states=("IDLE", "DRAIN"), reason="GPU Xid 79", gres="gpu:h100:2")])
    ctrl, _ = controller(slurm)
    publish(ctrl, device("gpu-1", FAULT))
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates == []
    slurm.nodes[N] = NodeInfo(name=N, states=("IDLE",), gres="gpu:h100:2")  # the administrator resumes it
    await ctrl.poll_once()
    await ctrl._reconcile(NodeItem(N))
    assert slurm.updates[-1] == (N, "DRAIN", OURS)
