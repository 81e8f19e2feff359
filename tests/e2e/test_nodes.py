"""Node sync on the real cluster and the real Slurm: cordon <-> DRAIN, Slurm DRAIN/DOWN -> cordon,
administrators' own changes left alone, and no flapping when both sides change at once.

The tests share the cluster's four nodes with every other test, so each one puts the node it
touched back in service (the ``node`` fixture's teardown) and waits until the bridge agrees.
They use kwok-node-2: a cpu node, so GPU tests elsewhere keep both GPU nodes.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import API, get_phj, make_pod, pod_events, read_pod, slurm_job
from tests.harness import BRIDGE_SH, CLUSTER_SH, SlurmEnv, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

NODE = "kwok-node-2"
OUT_OF_SERVICE = frozenset({"DRAIN", "DOWN", "FAIL"})
BRIDGE_REASON = f"slurm-bridge: Kubernetes node {NODE} is unschedulable"


@pytest.fixture(scope="module")
def period() -> float:
    """The bridge's pollPeriodSeconds, from the config hack/bridge.sh wrote."""
    path = run(["bash", str(BRIDGE_SH), "config"]).stdout.strip()
    with open(path) as f:
        return float(yaml.safe_load(f).get("pollPeriodSeconds", 1.0))


# ---- the two sides, as an administrator sees them -------------------------------------------------


@dataclass(frozen=True)
class KubeNode:
    unschedulable: bool
    cordoned_by: str | None
    slurm_drained_by: str | None
    slurm_reason: str | None
    state_taint: str | None  # "value:effect"
    managed_taint: bool
    labels: dict[str, str]


@dataclass(frozen=True)
class SlurmNode:
    states: frozenset[str]
    reason: str

    @property
    def in_service(self) -> bool:
        return not self.states & OUT_OF_SERVICE


def kube_node(core: k8s.CoreV1Api, name: str = NODE) -> KubeNode:
    n = core.read_node(name)
    ann = n.metadata.annotations or {}
    taints = n.spec.taints or []
    state = next((f"{t.value}:{t.effect}" for t in taints if t.key == names.TAINT_SLURM_STATE), None)
    return KubeNode(
        unschedulable=bool(n.spec.unschedulable),
        cordoned_by=ann.get(names.ANN_CORDONED_BY),
        slurm_drained_by=ann.get(names.ANN_SLURM_DRAINED_BY),
        slurm_reason=ann.get(names.ANN_SLURM_REASON),
        state_taint=state,
        managed_taint=any(
            t.key == names.TAINT_MANAGED_NODE and t.value == "slurm-bridge" and t.effect == "NoExecute" for t in taints
        ),
        labels=dict(n.metadata.labels or {}),
    )


def slurm_node(slurm: SlurmEnv, name: str = NODE) -> SlurmNode:
    r = httpx.get(f"{slurm.url}{API}/node/{name}", headers=slurm.headers(), timeout=20)
    r.raise_for_status()
    node: dict[str, Any] = r.json()["nodes"][0]
    return SlurmNode(frozenset(node["state"]), node.get("reason") or "")


def cordon(core: k8s.CoreV1Api, on: bool, name: str = NODE) -> None:
    core.patch_node(name, {"spec": {"unschedulable": on}})


def scontrol_state(state: str, reason: str | None = None, name: str = NODE) -> None:
    """An administrator's scontrol; resuming a node already in service is refused, which is fine."""
    args = ["bash", str(CLUSTER_SH), "scontrol", "update", f"nodename={name}", f"state={state}"]
    if reason:
        args.append(f"reason={reason}")
    run(args, check=state.lower() not in ("resume", "undrain"))


def bridge_events(core: k8s.CoreV1Api, name: str = NODE) -> dict[str, tuple[str, str]]:
    """The bridge's Events on the node, by event name: (reason, message)."""
    items = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={name}"
    ).items
    return {
        e.metadata.name: (e.reason, e.message)
        for e in items
        if ((e.source and e.source.component) or "").startswith("slurm-bridge")
    }


def new_reasons(core: k8s.CoreV1Api, before: dict[str, tuple[str, str]], name: str = NODE) -> list[str]:
    return sorted(r for k, (r, _) in bridge_events(core, name).items() if k not in before)


def is_clean(k: KubeNode, s: SlurmNode) -> bool:
    """In service on both sides, with none of the bridge's marks but the managed-node taint."""
    return (
        not k.unschedulable
        and k.managed_taint
        and (k.cordoned_by, k.slurm_drained_by, k.slurm_reason, k.state_taint) == (None, None, None, None)
        and s.in_service
    )


def restore(core: k8s.CoreV1Api, slurm: SlurmEnv, period: float, name: str = NODE) -> None:
    """Put the node back in service on both sides, as an administrator would, and wait for the bridge."""
    labels = core.read_node(name).metadata.labels or {}
    if names.LABEL_SLURM_NODENAME in labels:
        core.patch_node(name, {"metadata": {"labels": {names.LABEL_SLURM_NODENAME: None}}})
    cordon(core, False, name)
    if not slurm_node(slurm, name).in_service:
        scontrol_state("resume", name=name)
    # Clean for two poll periods in a row: a node list taken before the resume must not catch the
    # next test mid-way (the bridge converging then looks like the bridge reacting to the test).
    clean_since: list[float] = []

    def settled() -> bool:
        if not is_clean(kube_node(core, name), slurm_node(slurm, name)):
            clean_since.clear()
            return False
        clean_since[:] = clean_since or [time.monotonic()]
        return time.monotonic() - clean_since[0] >= 2 * period

    wait_for(settled, 10 * period + 15, f"node {name} back in service on both sides, and staying so")


@pytest.fixture
def node(core: k8s.CoreV1Api, slurm_env: SlurmEnv, period: float) -> Iterator[str]:
    """NODE, clean at the start, and put back in service afterwards whatever the test did."""
    restore(core, slurm_env, period)
    try:
        yield NODE
    finally:
        restore(core, slurm_env, period)


def stays(check: Any, seconds: float, what: str) -> None:
    """``check`` holds throughout ``seconds`` (sampled): nothing flaps back."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"no longer true: {what}"
        time.sleep(0.2)


# ---- Kubernetes -> Slurm ------------------------------------------------------------------------


def test_cordon_drains_slurm_with_the_exact_reason_and_uncordon_undrains(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    before = bridge_events(core)
    cordon(core, True)
    s = wait_for(lambda: (s := slurm_node(slurm_env)) and "DRAIN" in s.states and s, 2 * period + 5, "Slurm DRAIN")
    assert s.reason == BRIDGE_REASON
    k = wait_for(lambda: (k := kube_node(core)).slurm_drained_by and k, 10, "drain recorded on the node")
    assert k.slurm_drained_by == "slurm-bridge"
    assert (k.cordoned_by, k.state_taint, k.slurm_reason) == (None, None, None), "an admin cordon stays the admin's"
    wait_for(lambda: "SlurmNodeDrained" in new_reasons(core, before), 10, "SlurmNodeDrained Event")

    before = bridge_events(core)
    cordon(core, False)
    wait_for(lambda: slurm_node(slurm_env).in_service, 2 * period + 5, "Slurm UNDRAIN")
    assert slurm_node(slurm_env).reason == ""
    wait_for(lambda: kube_node(core).slurm_drained_by is None, 10, "drain record removed")
    wait_for(lambda: "SlurmNodeUndrained" in new_reasons(core, before), 10, "SlurmNodeUndrained Event")


def test_slurm_admin_resume_of_the_bridges_drain_is_not_overruled(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    cordon(core, True)
    wait_for(lambda: "DRAIN" in slurm_node(slurm_env).states, 2 * period + 5, "Slurm DRAIN")
    scontrol_state("resume")
    stays(lambda: slurm_node(slurm_env).in_service and kube_node(core).unschedulable, 3 * period,
          "Slurm resumed by an administrator while the node stays cordoned")  # fmt: skip


# ---- Slurm -> Kubernetes ------------------------------------------------------------------------


def test_slurm_admin_drain_cordons_and_taints_and_resume_uncordons(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    before = bridge_events(core)
    scontrol_state("drain", "e2e disk replacement")
    k = wait_for(lambda: (k := kube_node(core)).unschedulable and k, 2 * period + 5, "node cordoned")
    assert k.cordoned_by == "slurm-bridge"
    assert k.state_taint == "drain:NoSchedule"
    assert k.slurm_reason == "e2e disk replacement"
    assert k.slurm_drained_by is None
    s = slurm_node(slurm_env)
    assert "DRAIN" in s.states and s.reason == "e2e disk replacement", "the administrator's reason is kept"
    reasons = wait_for(lambda: len(r := new_reasons(core, before)) >= 2 and r, 10, "Events")
    assert {"CordonedForSlurm", "SlurmNodeOutOfService"} <= set(reasons)

    before = bridge_events(core)
    scontrol_state("resume")
    k = wait_for(lambda: not (k := kube_node(core)).unschedulable and k, 2 * period + 5, "node uncordoned")
    assert (k.cordoned_by, k.state_taint, k.slurm_reason) == (None, None, None)
    assert slurm_node(slurm_env).in_service, "the bridge does not drain after the administrator's resume"
    reasons = wait_for(lambda: len(r := new_reasons(core, before)) >= 2 and r, 10, "Events")
    assert {"UncordonedForSlurm", "SlurmNodeInService"} <= set(reasons)


def test_admin_uncordon_of_a_slurm_drained_node_is_not_overruled(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    scontrol_state("drain", "e2e maintenance")
    wait_for(lambda: kube_node(core).cordoned_by, 2 * period + 5, "bridge cordon")
    cordon(core, False)
    k = wait_for(lambda: (k := kube_node(core)).cordoned_by is None and k, 10, "cordon marker released")
    assert k.state_taint == "drain:NoSchedule", "Slurm's state is still shown"
    stays(lambda: not kube_node(core).unschedulable and "DRAIN" in slurm_node(slurm_env).states, 3 * period,
          "the node stays uncordoned and Slurm stays drained")  # fmt: skip
    assert slurm_node(slurm_env).reason == "e2e maintenance"


def test_slurm_fail_cordons_with_the_state_and_reason(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    # FAIL, unlike DOWN, lets running jobs finish; the DOWN case is the node-failure test below.
    scontrol_state("fail", "e2e failing fan")
    k = wait_for(lambda: (k := kube_node(core)).state_taint and k, 2 * period + 5, "fail taint")
    assert k.state_taint == "fail:NoSchedule"
    assert k.unschedulable and k.cordoned_by == "slurm-bridge"
    assert k.slurm_reason == "e2e failing fan"


# ---- both sides' administrators ----------------------------------------------------------------


def test_admin_cordon_and_admin_drain_are_both_left_alone(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    scontrol_state("drain", "e2e slurm admin")
    cordon(core, True)
    k = wait_for(lambda: (k := kube_node(core)).state_taint and k, 2 * period + 5, "Slurm state mirrored")
    # Either order of arrival is fine; what matters is that neither change is undone.
    assert k.unschedulable and k.state_taint == "drain:NoSchedule" and k.slurm_reason == "e2e slurm admin"
    s = slurm_node(slurm_env)
    assert "DRAIN" in s.states and s.reason == "e2e slurm admin", "the bridge did not overwrite the admin's drain"
    # The Kubernetes administrator uncordons: the Slurm administrator's drain stays.
    cordon(core, False)
    stays(lambda: (s := slurm_node(slurm_env)).reason == "e2e slurm admin" and "DRAIN" in s.states
          and not kube_node(core).unschedulable, 3 * period, "both administrators' states kept")  # fmt: skip
    # Cordoned again by the Kubernetes administrator, resumed by the Slurm one: the cordon stays.
    cordon(core, True)
    wait_for(lambda: kube_node(core).unschedulable, 10, "cordon")
    before = bridge_events(core)
    scontrol_state("resume")
    k = wait_for(lambda: (k := kube_node(core)).state_taint is None and k, 2 * period + 5, "taint removed")
    assert k.unschedulable, "an administrator's cordon is never lifted by the bridge"
    assert k.cordoned_by is None
    assert "UncordonedForSlurm" not in new_reasons(core, before)


# ---- nodes that are not (or no longer) in Slurm --------------------------------------------------


def test_node_not_in_slurm_is_left_alone(core: k8s.CoreV1Api, slurm_env: SlurmEnv, period: float) -> None:
    name = f"e2e-plain-{secrets.token_hex(3)}"
    body = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"}),
        # Private taint: no other test's pod lands here while it exists.
        spec=k8s.V1NodeSpec(taints=[k8s.V1Taint(key="e2e-private", value=name, effect="NoSchedule")]),
    )
    core.create_node(body)
    try:
        cordon(core, True, name)
        stays(lambda: (k := kube_node(core, name)).unschedulable and not k.managed_taint and k.state_taint is None
              and k.slurm_drained_by is None and not bridge_events(core, name), 3 * period,
              "a node not in Slurm stays untouched")  # fmt: skip
    finally:
        core.delete_node(name)


def test_node_leaving_slurm_loses_the_managed_taint(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float
) -> None:
    # Cordoned first, so no other test's default-scheduler pod lands here while it is out of Slurm.
    cordon(core, True)
    wait_for(lambda: kube_node(core).slurm_drained_by, 2 * period + 5, "cordon passed to Slurm")
    before = bridge_events(core)
    absent = f"no-such-slurm-node-{secrets.token_hex(3)}"
    core.patch_node(NODE, {"metadata": {"labels": {names.LABEL_SLURM_NODENAME: absent}}})
    k = wait_for(lambda: not (k := kube_node(core)).managed_taint and k, 2 * period + 5, "managed taint removed")
    assert k.unschedulable, "the administrator's cordon stays"
    assert (k.slurm_drained_by, k.cordoned_by, k.state_taint) == (None, None, None)
    wait_for(lambda: "ManagedTaintRemoved" in new_reasons(core, before), 10, "ManagedTaintRemoved Event")
    # Mapped back onto its Slurm node: the taint returns and the drain is the bridge's again.
    core.patch_node(NODE, {"metadata": {"labels": {names.LABEL_SLURM_NODENAME: None}}})
    k = wait_for(lambda: (k := kube_node(core)).managed_taint and k.slurm_drained_by and k, 2 * period + 5,
                 "back in Slurm")  # fmt: skip
    assert slurm_node(slurm_env).reason == BRIDGE_REASON


# ---- jobs on a node that goes DOWN ----------------------------------------------------------------


def test_pod_on_a_node_that_goes_down_is_ended_with_an_event(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv, period: float
) -> None:
    ns = managed_namespace
    # A whole node, so DOWN ends only this test's job.
    core.create_namespaced_pod(ns, make_pod("victim", annotations={names.ANN_EXCLUSIVE: "true"}))
    pod = wait_for(
        lambda: (p := read_pod(core, ns, "victim")) and p.status.phase == "Running" and p, 120, "pod Running"
    )
    where = pod.spec.node_name
    job_id = get_phj(custom, ns, "victim")["status"]["jobId"]  # type: ignore[index]
    try:
        scontrol_state("down", "e2e node failure", name=where)
        # Slurm 26.05 ends an external job on a node set DOWN as NODE_FAIL (Reason=NodeDown).
        job = wait_for(
            lambda: (j := slurm_job(slurm_env, job_id)) and j["job_state"] != ["RUNNING"] and j,
            2 * period + 5,
            "job end",
        )
        # The base state comes first; the COMPLETING flag may follow it while slurmctld cleans up.
        assert job["job_state"][0] == "NODE_FAIL" and set(job["job_state"][1:]) <= {"COMPLETING"}, job["job_state"]
        wait_for(
            lambda: (p := read_pod(core, ns, "victim")) is None or p.metadata.deletion_timestamp
            or p.status.phase == "Failed",
            2 * period + 10,
            "pod ended",
        )  # fmt: skip
        events = wait_for(
            lambda: [e for e in pod_events(core, ns, "victim") if e.reason == "SlurmJobNodeFail"], 10, "pod Event"
        )
        assert events[0].type == "Warning" and f"Slurm job {job_id}" in events[0].message
        # The PlaceholderJob says why, in an Event that outlives it (it goes with its pod).
        phj_events = wait_for(
            lambda: [e for e in core.list_namespaced_event(
                ns, field_selector="involvedObject.kind=PlaceholderJob,involvedObject.name=victim").items
                if e.reason == "SlurmJobNodeFail"],
            10, "PlaceholderJob Event",
        )  # fmt: skip
        assert phj_events[0].type == "Warning"
        phj = get_phj(custom, ns, "victim")
        if phj is not None:
            assert phj["status"]["phase"] == "Failed" and phj["status"]["slurmState"] == "NODE_FAIL", phj["status"]
        k = wait_for(lambda: (k := kube_node(core, where)).state_taint and k, 2 * period + 5, "node tainted")
        assert k.state_taint == "down:NoSchedule" and k.unschedulable and k.cordoned_by == "slurm-bridge"
        assert k.slurm_reason == "e2e node failure"
    finally:
        restore(core, slurm_env, period, where)


# ---- flapping -----------------------------------------------------------------------------------


def _settled_state(core: k8s.CoreV1Api, slurm: SlurmEnv) -> tuple[KubeNode, frozenset[str], str]:
    """What node sync governs: not Slurm's base state, which other tests' jobs change (IDLE, MIXED)."""
    s = slurm_node(slurm)
    return kube_node(core), s.states & OUT_OF_SERVICE, s.reason


@pytest.mark.parametrize("final", ["in-service", "out-of-service"])
def test_flapping_both_sides_converges_within_two_poll_periods(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, node: str, period: float, final: str
) -> None:
    rng = random.Random(final)
    for _ in range(16):
        op = rng.choice(["cordon", "uncordon", "drain", "resume"])
        if op in ("cordon", "uncordon"):
            cordon(core, op == "cordon")
        else:
            scontrol_state(op, "e2e flapping" if op == "drain" else None)
        time.sleep(rng.uniform(0, period / 3))  # pacing of the flips, not a check
    if final == "in-service":
        last = ["uncordon", "resume"]
        rng.shuffle(last)
    else:
        # Slurm first: a drain that lands within milliseconds after the bridge's own node list
        # and before its DRAIN would get the bridge's reason (docs/nodes.md, known limits).
        last = ["drain", "cordon"]
    for op in last:
        if op in ("cordon", "uncordon"):
            cordon(core, op == "cordon")
        else:
            scontrol_state(op, "e2e final" if op == "drain" else None)
    t0 = time.monotonic()

    def converged() -> bool:
        k, s = kube_node(core), slurm_node(slurm_env)
        if final == "in-service":
            return is_clean(k, s)
        return (
            k.unschedulable
            and "DRAIN" in s.states
            and s.reason == "e2e final"
            and (k.state_taint, k.slurm_reason) == ("drain:NoSchedule", "e2e final")
        )

    wait_for(converged, 2 * period, f"{final} on both sides within two poll periods ({2 * period:.1f}s)")
    took = time.monotonic() - t0
    settled = _settled_state(core, slurm_env)
    before = bridge_events(core)
    stays(lambda: _settled_state(core, slurm_env) == settled, 3 * period, f"the settled state {settled}")
    assert new_reasons(core, before) == [], "the bridge changed something after settling"
    print(f"converged {took:.2f}s after the last change (poll period {period}s)")


def test_managed_taint_on_every_slurm_node_and_only_there(core: k8s.CoreV1Api, slurm_env: SlurmEnv) -> None:
    # External and hybrid nodes alike (the real node included): each is a node of slurm.conf.
    for name in slurm_env.slurm_nodes:
        wait_for(partial(lambda n: kube_node(core, n).managed_taint, name), 30, f"the managed-node taint on {name}")
    for n in core.list_node().items:
        if n.metadata.name not in slurm_env.slurm_nodes and names.LABEL_SLURM_NODENAME not in (n.metadata.labels or {}):
            assert not kube_node(core, n.metadata.name).managed_taint, n.metadata.name
