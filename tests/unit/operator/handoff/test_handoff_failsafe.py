"""The handoff fails safe (docs/colocation.md, "The handoff"): exact bridge ids, a vanished pod's
reservation kept for its grace period, what the loop knows nothing of held for the longest grace,
and the fail-safe drain of a pod that runs while its job ended and nothing holds its cores
(operator/handoff/decisions.py and the loop's pass)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from slurm_bridge import names
from slurm_bridge.operator.handoff import controller as hc
from slurm_bridge.operator.handoff import decisions as hd
from slurm_bridge.operator.runtime.departures import Departure
from slurm_bridge.rules.handoff import (
    drain_of,
    drain_reason,
    reservation_name,
    reservation_of,
    unheld_drain_reason,
)
from slurm_bridge.slurm.models import NodeInfo
from tests.builders import slurm_job
from tests.unit.fakes import FakeHandoff
from tests.unit.operator.handoff.test_handoff import BRIDGE, RULES, T0, Obj, bound, drained, kinds, labelled, loop, resv

pytestmark = pytest.mark.unit


# ---- exact bridge ids -------------------------------------------------------------------------------
@pytest.mark.parametrize(("owner", "other"), [("a", "a-b"), ("a-b", "a"), ("slurm-bridge", "slurm-bridge-2")])
def test_a_reservation_or_drain_of_one_bridge_is_never_another_bridges(owner: str, other: str) -> None:
    name = reservation_name(12, owner, "node_1")  # a node name may hold the delimiter itself
    r = reservation_of(name, owner)
    assert r is not None and (r.job_id, r.node) == (12, "node_1")
    assert reservation_of(name, other) is None
    reason = drain_reason(owner, "ns", "p", 12, 20, 10)
    assert drain_of(reason, owner) is not None and drain_of(reason, other) is None
    unheld = unheld_drain_reason(owner, "ns", "p", 12)
    assert drain_of(unheld, owner) is not None and drain_of(unheld, other) is None


def test_another_bridges_drain_is_neither_lifted_nor_drained_over() -> None:
    theirs = {"n1": drained("n1", "p", 7, bridge=f"{BRIDGE}-2")}
    assert hd.decide([], {}, theirs, T0, RULES) == [], "its pod is unknown here: never lifted"
    late = [hd.Unheld("n1", labelled(bound("q", "n1"), 8), 8)]
    assert hd.decide([], {}, theirs, T0, RULES, unheld=late) == [], "native work is kept off already"


# ---- vanished pods and what the loop knows nothing of ---------------------------------------------------
def test_a_vanished_pods_reservation_is_kept_until_its_grace_and_the_margin_passed() -> None:
    r = resv(7, "n1")
    gone = {7: [Departure(labelled(bound("p", "n1", grace=20), 7), T0)]}  # removed while Running
    assert kinds(hd.decide([r], {}, {}, T0 + timedelta(seconds=29), RULES, departed=gone)) == [("Held", r.name)]
    assert kinds(hd.decide([r], {}, {}, T0 + timedelta(seconds=30), RULES, departed=gone)) == [("Release", r.name)]
    ended = {7: [Departure(labelled(bound("p", "n1", phase="Failed"), 7), T0)]}
    assert kinds(hd.decide([r], {}, {}, T0, RULES, departed=ended)) == [("Release", r.name)], "it stopped first"


def test_a_reservation_whose_pods_the_loop_never_saw_is_held_for_the_longest_grace() -> None:
    r = resv(7, "n1")
    seen = {r.name: T0}  # first seen now: its pods went while the operator was away
    assert kinds(hd.decide([r], {}, {}, T0 + timedelta(seconds=69), RULES, first_seen=seen)) == [("Held", r.name)]
    assert kinds(hd.decide([r], {}, {}, T0 + timedelta(seconds=70), RULES, first_seen=seen)) == [("Release", r.name)]
    stopped = {7: [labelled(bound("p", "n1", phase="Succeeded"), 7)]}
    assert kinds(hd.decide([r], stopped, {}, T0, RULES, first_seen=seen)) == [("Release", r.name)]


# ---- the fail-safe drain -----------------------------------------------------------------------------------
def test_a_pod_running_with_no_hold_drains_its_node_at_once_naming_it() -> None:
    pod = labelled(bound("p", "n1"), 7)
    [step] = hd.decide([], {7: [pod]}, {}, T0, RULES, unheld=[hd.Unheld("n1", pod, 7)])
    assert isinstance(step, hd.Drain) and step.unheld and step.node == "n1"
    said = "pod ns/p of Slurm job 7 still runs after the job ended, and nothing holds its CPUs"
    assert step.reason == f"slurm-bridge-handoff[{BRIDGE}]: {said}"
    mine = {"n1": NodeInfo(name="n1", states=("MIXED", "DRAIN"), reason=step.reason)}
    assert hd.decide([], {7: [pod]}, mine, T0, RULES, unheld=[hd.Unheld("n1", pod, 7)]) == [], "drained once"
    cordon = {
        "n1": NodeInfo(name="n1", states=("IDLE", "DRAIN"), reason="slurm-bridge: Kubernetes node n1 is cordoned")
    }
    assert hd.decide([], {7: [pod]}, cordon, T0, RULES, unheld=[hd.Unheld("n1", pod, 7)]) == [], (
        "the node controller's drain keeps native work off: its reason is not overwritten"
    )


def test_the_fail_safe_drain_is_lifted_once_the_pods_containers_stopped() -> None:
    reason = unheld_drain_reason(BRIDGE, "ns", "p", 7)
    node = {"n1": NodeInfo(name="n1", states=("MIXED", "DRAIN"), reason=reason)}
    running = labelled(bound("p", "n1"), 7)
    assert hd.decide([], {7: [running]}, node, T0, RULES) == []
    stopped = labelled(bound("p", "n1", phase="Failed"), 7)
    assert kinds(hd.decide([], {7: [stopped]}, node, T0, RULES)) == [("Undrain", "n1 p")]
    gone = {7: [Departure(running, T0)]}  # vanished: its containers may run 20 s + 10 s more
    assert hd.decide([], {}, node, T0 + timedelta(seconds=29), RULES, departed=gone) == []
    assert kinds(hd.decide([], {}, node, T0 + timedelta(seconds=30), RULES, departed=gone)) == [("Undrain", "n1 p")]
    unseen = {hd.drain_key("n1"): T0}  # a restart: nothing known of the pod it names
    assert hd.decide([], {}, node, T0 + timedelta(seconds=69), RULES, first_seen=unseen) == []
    assert kinds(hd.decide([], {}, node, T0 + timedelta(seconds=70), RULES, first_seen=unseen)) == [("Undrain", "n1 p")]


def test_only_a_running_pod_of_an_ended_job_on_a_native_node_with_no_hold_is_unheld() -> None:
    def unheld(
        pod: Obj,
        *,
        ended: frozenset[int] = frozenset({7}),
        held: frozenset[tuple[int, str]] = frozenset(),
        native: frozenset[str] = frozenset({"n1"}),
    ) -> list[str]:
        return [u.node for u in hd.unheld([pod], [], ended, held, native, T0, 10)]

    pod = labelled(bound("p", "n1"), 7)
    assert unheld(pod) == ["n1"]
    assert unheld(pod, ended=frozenset()) == [], "its job runs"
    assert unheld(pod, held=frozenset({(7, "n1")})) == [], "the script's reservation holds it"
    assert unheld(pod, native=frozenset()) == [], "an EXTERNAL node: no native work to keep off"
    assert unheld(labelled(bound("p", "n1", phase="Succeeded"), 7)) == [], "it stopped"
    vanished = Departure(pod, T0)
    assert [u.node for u in hd.unheld([], [vanished], {7}, set(), {"n1"}, T0 + timedelta(seconds=29), 10)] == ["n1"]
    assert hd.unheld([], [vanished], {7}, set(), {"n1"}, T0 + timedelta(seconds=30), 10) == []


# ---- the loop's pass ------------------------------------------------------------------------------------
NATIVE = {"n1": NodeInfo(name="n1", states=("MIXED",)), "x1": NodeInfo(name="x1", states=("IDLE", "EXTERNAL"))}


async def test_a_pass_drains_for_a_pod_whose_job_ended_with_no_hold_and_undrains_after_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slurm = FakeHandoff()
    pod = labelled(bound("p", "n1"), 7)
    ctrl, kube, _ = loop(slurm, [pod], nodes=NATIVE, jobs=[slurm_job(7, "CANCELLED", nodes=("n1",))])
    ctrl.poller.synced.set()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations"], "seen once: the script's reservation may be moments away"
    monkeypatch.setattr(hc, "UNSETTLED_SECONDS", 0.0)
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", "reservations", "node n1 DRAIN"] and ctrl.unheld_drained == 1
    assert ("Pod", "p", names.REASON_HANDOFF_NODE_DRAINED) in kube.told("kind", "name", "reason")
    ctrl.pods.upsert(dict(pod, status={"phase": "Failed"}, metadata={**pod["metadata"], "resourceVersion": "99"}))
    slurm.calls.clear()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations", "node n1 UNDRAIN"]


@pytest.mark.parametrize("case", ["running", "reserved", "external", "not synced"])
async def test_a_pass_never_drains_in_normal_flows(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hc, "UNSETTLED_SECONDS", 0.0)
    state = "RUNNING" if case == "running" else "CANCELLED"
    node = "x1" if case == "external" else "n1"
    reservations = [resv(7, node, ended=datetime.now(UTC))] if case == "reserved" else []
    slurm = FakeHandoff(reservations)
    ctrl, _, _ = loop(slurm, [labelled(bound("p", node), 7)], nodes=NATIVE, jobs=[slurm_job(7, state, nodes=(node,))])
    if case != "not synced":
        ctrl.poller.synced.set()
    await ctrl.pass_once()
    await ctrl.pass_once()
    assert not [c for c in slurm.calls if c.startswith("node")], case


async def test_a_job_gone_from_slurm_counts_as_ended_only_once_a_full_list_after_that_lacks_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hc, "UNSETTLED_SECONDS", 0.0)
    slurm = FakeHandoff()
    ctrl, _, _ = loop(slurm, [labelled(bound("p", "n1"), 7)], nodes=NATIVE, jobs=[])
    ctrl.poller.synced.set()
    ctrl.poller.last_full_at = time.monotonic()
    await ctrl.pass_once()
    assert slurm.calls == ["reservations"], "missing from a view taken before: not known to be gone"
    ctrl.poller.last_full_at = time.monotonic() + 1.0  # a full list started since lacks it too
    await ctrl.pass_once()
    assert slurm.calls[-1] == "node n1 DRAIN"
