"""A tainted GPU drains its Slurm node (docs/gpus.md, "Device taints"), on the local cluster with the
bridge running: a taint on a hybrid node's GPU in its ResourceSlice (as its DRA driver would set one),
then a DeviceTaintRule (as an administrator would), each drains the Slurm node with the bridge's
reason naming the device and the taint, with an Event on the Node; the drain is lifted once the taint
is gone, and the node sync's cordon with it. An administrator's drain is neither overwritten nor lifted.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.test_other_doors_drain import slurm_node
from tests.harness import SlurmEnv, holds_for, wait_for

pytestmark = [pytest.mark.usefixtures("bridge"), pytest.mark.kubernetes(37)]  # DeviceTaintRules at resource.k8s.io/v1
Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
DRIVER = "gpu.nvidia.com"
DEADLINE = 30.0  # a few of the operator's poll periods (hack/bridge.sh: 1 s)
FAULT = {"key": "example.com/fault", "value": "1", "effect": "NoExecute"}


def _slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"  # hack/cluster/gpus.py's manifests


def set_taints(custom: k8s.CustomObjectsApi, node: str, device: str, taints: list[Obj]) -> None:
    """The driver's slice for ``node`` with ``taints`` on ``device`` (none: the device untainted)."""
    obj = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", _slice_name(node))
    for d in obj["spec"]["devices"]:
        if d["name"] == device:
            if taints:
                d["taints"] = taints
            else:
                d.pop("taints", None)
    custom.replace_cluster_custom_object(*RESOURCE, "resourceslices", _slice_name(node), obj)


def node_events(core: k8s.CoreV1Api, node: str, reason: str) -> list[str]:
    found = core.list_namespaced_event("default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node}")
    return [e.message for e in found.items if e.reason == reason]


def drained_by_taint(slurm: SlurmEnv, node: str) -> str | None:
    state, reason = slurm_node(slurm, node)
    return reason if "DRAIN" in state and reason.startswith(names.DEVICE_TAINT_DRAIN_REASON_PREFIX) else None


@pytest.fixture
def gpu_node(slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi) -> Iterator[str]:
    """The whole-GPU hybrid node, in service; its slice untainted and any drain of this test lifted after."""
    if not slurm_env.hybrid_nodes:
        pytest.fail("the local cluster has no hybrid node (SB_HYBRID_NODES)")
    node = slurm_env.hybrid_nodes[0]
    devices = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", _slice_name(node))["spec"]["devices"]
    assert [d["name"] for d in devices][:2] == ["gpu-0", "gpu-1"], f"{node}'s slice (hack/cluster/gpus.py): {devices}"
    assert "DRAIN" not in slurm_node(slurm_env, node)[0], f"{node} must be in service before the test"
    yield node
    for name in ("gpu-0", "gpu-1"):
        set_taints(custom, node, name, [])
    state, reason = slurm_node(slurm_env, node)
    if "DRAIN" in state and (reason.startswith(names.DEVICE_TAINT_DRAIN_REASON_PREFIX) or reason == "maintenance"):
        slurm_env.slurm("scontrol", "update", f"NodeName={node}", "State=UNDRAIN", check=False)
    wait_for(lambda: not core.read_node(node).spec.unschedulable, DEADLINE, f"node {node} schedulable after the test")


def test_a_gpu_tainted_in_its_resourceslice_drains_its_slurm_node_until_the_taint_is_gone(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, gpu_node: str
) -> None:
    node = gpu_node
    set_taints(custom, node, "gpu-1", [FAULT])
    slice_ = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", _slice_name(node))
    kept = next(d for d in slice_["spec"]["devices"] if d["name"] == "gpu-1").get("taints")
    assert kept and kept[0]["key"] == FAULT["key"], f"the API server dropped the device's taints: {kept}"

    reason = wait_for(lambda: drained_by_taint(slurm_env, node), DEADLINE, f"Slurm node {node} drained for the taint")
    assert reason.endswith("]: device gpu-1 taint example.com/fault=1:NoExecute"), reason
    told = wait_for(lambda: node_events(core, node, names.REASON_DEVICE_TAINT_NODE_DRAINED), DEADLINE, "the Event")
    assert "device gpu-1 taint example.com/fault=1:NoExecute" in told[-1], told
    # The node sync mirrors the drain: the Kubernetes node is cordoned with Slurm's reason.
    wait_for(lambda: core.read_node(node).spec.unschedulable, DEADLINE, f"node {node} cordoned by the node sync")
    assert (core.read_node(node).metadata.annotations or {}).get(names.ANN_SLURM_REASON) == reason

    set_taints(custom, node, "gpu-1", [])
    wait_for(lambda: "DRAIN" not in slurm_node(slurm_env, node)[0], DEADLINE, f"the drain of {node} lifted")
    wait_for(lambda: node_events(core, node, names.REASON_DEVICE_TAINT_NODE_UNDRAINED), DEADLINE, "the lift's Event")
    wait_for(lambda: not core.read_node(node).spec.unschedulable, DEADLINE, f"node {node} schedulable again")


def test_a_device_taint_rule_drains_and_an_administrators_drain_stands(
    custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, gpu_node: str
) -> None:
    node, rule = gpu_node, f"bad-gpu-{secrets.token_hex(3)}"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": "gpu-0"},
            "taint": {"key": "example.com/suspect", "effect": "NoSchedule"},
        },
    }
    custom.create_cluster_custom_object(*RESOURCE, "devicetaintrules", body)
    try:
        reason = wait_for(
            lambda: drained_by_taint(slurm_env, node), DEADLINE, f"Slurm node {node} drained for the rule"
        )
        assert reason.endswith(f"]: device gpu-0 taint example.com/suspect:NoSchedule (DeviceTaintRule {rule})"), reason
        # An administrator drains the node meanwhile: their reason stands while the rule does, and after.
        slurm_env.slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=maintenance")
        holds_for(lambda: slurm_node(slurm_env, node)[1] == "maintenance", 4, "the administrator's drain kept")
    finally:
        custom.delete_cluster_custom_object(*RESOURCE, "devicetaintrules", rule)
    holds_for(lambda: slurm_node(slurm_env, node)[1] == "maintenance", 4, "the administrator's drain not lifted")
