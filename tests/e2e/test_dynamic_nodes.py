"""Kubernetes nodes join Slurm by label (dynamic external nodes), on the real Slurm.

The local cluster's kwok-dyn-1 is in no slurm.conf: labelled, the bridge registers it as a Slurm
dynamic node (slurm.conf has MaxNodeCount and a NodeSet per partition); unlabelled, it drains it
and deletes it once its jobs are done (hack/cluster.sh, docs/nodes.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from slurm_bridge.rules.resources import parse_quantity
from tests.e2e.util import API, get_phj, make_pod, read_pod, slurm_job
from tests.harness import BRIDGE_SH, SlurmEnv, holds_for, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
POLL_PERIOD = 1.0  # the local bridge's pollPeriodSeconds (hack/bridge.sh)
WITHIN_TWO_POLLS = 2 * POLL_PERIOD + 1  # plus a second for this test's own polling


def slurm_node(slurm: SlurmEnv, name: str) -> dict[str, Any] | None:
    r = httpx.get(f"{slurm.url}{API}/node/{name}", headers=slurm.headers(), timeout=20)
    nodes = r.json().get("nodes") if r.status_code == 200 else None
    return nodes[0] if nodes else None


def node_events(core: k8s.CoreV1Api, node: str, reason: str) -> list[Any]:
    events = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node},reason={reason}")
    return list(events.items)


def patch_node(core: k8s.CoreV1Api, name: str, labels: dict[str, str | None] | None = None,
               annotations: dict[str, str | None] | None = None) -> None:  # fmt: skip
    meta: dict[str, Any] = {}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    core.patch_node(name, {"metadata": meta})


def set_cpus(core: k8s.CoreV1Api, name: str, cpus: str) -> None:
    core.patch_node_status(name, {"status": {"capacity": {"cpu": cpus}, "allocatable": {"cpu": cpus}}})


@pytest.fixture
def dyn_node(core: k8s.CoreV1Api, cluster: dict[str, str], slurm_env: SlurmEnv) -> Iterator[str]:
    """kwok-dyn-1, unlabelled and out of Slurm before and after the test."""
    name = cluster["SB_DYN_NODE_NAMES"].split()[0]
    original_cpus = core.read_node(name).status.capacity["cpu"]

    def reset() -> None:
        patch_node(core, name, labels={names.LABEL_EXTERNAL_NODE: None},
                   annotations={names.ANN_EXTERNAL_NODE_PARTITIONS: None, names.ANN_TOPOLOGY_SPEC: None})  # fmt: skip
        set_cpus(core, name, original_cpus)
        wait_for(lambda: slurm_node(slurm_env, name) is None, 60, f"{name} out of Slurm")
        wait_for(
            lambda: names.ANN_SLURM_REGISTRATION not in (core.read_node(name).metadata.annotations or {})
            and not core.read_node(name).spec.unschedulable,
            30, f"{name} without the bridge's registration record and uncordoned",
        )  # fmt: skip

    reset()
    yield name
    reset()


def test_a_labelled_node_joins_slurm_runs_a_pod_and_leaves_cleanly(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    dyn_node: str, cluster: dict[str, str],
) -> None:  # fmt: skip
    extra = cluster["SB_EXTRA_PARTITION"]
    patch_node(core, dyn_node, labels={names.LABEL_EXTERNAL_NODE: "true"},
               annotations={names.ANN_EXTERNAL_NODE_PARTITIONS: f"{slurm_env.partition},{extra}"})  # fmt: skip
    # The node is created, then given the bridge's comment (two calls): wait for both.
    info = wait_for(lambda: (n := slurm_node(slurm_env, dyn_node)) and n["comment"] and n,
                    WITHIN_TWO_POLLS, f"{dyn_node} in Slurm with the bridge's comment")  # fmt: skip
    assert {"EXTERNAL", "DYNAMIC_NORM"} <= set(info["state"]), info["state"]
    assert info["cpus"] == 16 and info["gres"] == "gpu:2"
    allocatable = parse_quantity(core.read_node(dyn_node).status.allocatable["memory"])
    assert info["real_memory"] == allocatable // 2**20
    assert set(info["partitions"]) == {slurm_env.partition, extra}
    assert info["comment"].endswith(f":{dyn_node}")
    # The Kubernetes side: the record, and (as for every Slurm node) the managed-node taint.
    wait_for(lambda: any(t.key == names.TAINT_MANAGED_NODE for t in core.read_node(dyn_node).spec.taints or []),
             30, "the managed-node taint")  # fmt: skip
    record = core.read_node(dyn_node).metadata.annotations[names.ANN_SLURM_REGISTRATION]
    assert record.startswith(f"NodeName={dyn_node} NodeAddr=127.0.0.1 CPUs=16 ") and "Gres=gpu:2" in record
    assert node_events(core, dyn_node, "SlurmNodeRegistered")

    # A managed pod for the extra partition can only go there.
    pod = make_pod("on-dyn", annotations={names.ANN_PARTITION: extra, "pod-complete.stage.kwok.x-k8s.io/delay": "600s"})
    core.create_namespaced_pod(managed_namespace, pod)
    running = wait_for(
        lambda: (p := read_pod(core, managed_namespace, "on-dyn")) and p.status.phase == "Running" and p, 60,
        "the pod running on the registered node",
    )  # fmt: skip
    assert running.spec.node_name == dyn_node
    job_id = int((get_phj(custom, managed_namespace, "on-dyn") or {})["status"]["jobId"])

    # Unlabelled: drained (and mirrored as a cordon), but its running job and pod are untouched.
    patch_node(core, dyn_node, labels={names.LABEL_EXTERNAL_NODE: None})
    drained = wait_for(lambda: (n := slurm_node(slurm_env, dyn_node)) and "DRAIN" in n["state"] and n,
                       WITHIN_TWO_POLLS, "the node drained in Slurm")  # fmt: skip
    assert drained["reason"].startswith(names.SLURM_REGISTRATION_REASON_PREFIX)
    wait_for(lambda: core.read_node(dyn_node).spec.unschedulable, 30, "the node cordoned (mirroring the drain)")
    holds_for(lambda: slurm_node(slurm_env, dyn_node) is not None
              and (p := read_pod(core, managed_namespace, "on-dyn")) is not None and p.status.phase == "Running",
              3 * POLL_PERIOD, "the draining node in Slurm and its pod running (no pod is killed)")  # fmt: skip
    assert (slurm_job(slurm_env, job_id) or {}).get("job_state") == ["RUNNING"]
    # The pod ends; then the node leaves Slurm, and the Kubernetes node is given back.
    core.delete_namespaced_pod("on-dyn", managed_namespace)
    wait_for(lambda: slurm_node(slurm_env, dyn_node) is None, 30, "the idle node deleted from Slurm")
    wait_for(lambda: not core.read_node(dyn_node).spec.unschedulable
             and not any(t.key == names.TAINT_MANAGED_NODE for t in core.read_node(dyn_node).spec.taints or []),
             30, "the node uncordoned and untainted")  # fmt: skip
    assert node_events(core, dyn_node, "SlurmNodeDeregistered")


def test_an_unknown_partition_registers_nothing_and_says_so(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, dyn_node: str
) -> None:
    patch_node(core, dyn_node, labels={names.LABEL_EXTERNAL_NODE: "true"},
               annotations={names.ANN_EXTERNAL_NODE_PARTITIONS: "no-such-partition"})  # fmt: skip
    event = wait_for(lambda: node_events(core, dyn_node, "SlurmNodeNotRegistered"), 30, "a Warning Event")[-1]
    assert event.type == "Warning" and "['no-such-partition'] do not exist" in event.message
    assert slurm_node(slurm_env, dyn_node) is None
    assert names.ANN_SLURM_REGISTRATION not in (core.read_node(dyn_node).metadata.annotations or {})


def test_a_capacity_change_is_applied_and_a_restart_registers_nothing_twice(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, dyn_node: str
) -> None:
    patch_node(core, dyn_node, labels={names.LABEL_EXTERNAL_NODE: "true"})
    wait_for(lambda: (n := slurm_node(slurm_env, dyn_node)) and n["cpus"] == 16, WITHIN_TWO_POLLS, "registered")
    set_cpus(core, dyn_node, "8")
    wait_for(lambda: (n := slurm_node(slurm_env, dyn_node)) and n["cpus"] == 8 and "DRAIN" not in n["state"], 30,
             "the node registered again with 8 CPUs")  # fmt: skip
    # Events are posted in the background: count them once the 8-CPU registration's is in.
    wait_for(lambda: any("CPUs=8 " in (e.message or "") for e in node_events(core, dyn_node, "SlurmNodeRegistered")),
             30, "the Event of the registration with 8 CPUs")  # fmt: skip
    registered = len(node_events(core, dyn_node, "SlurmNodeRegistered"))
    before = json.dumps(slurm_node(slurm_env, dyn_node), sort_keys=True, default=str)
    proc = run(["bash", str(BRIDGE_SH), "restart", "operator"], check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    holds_for(lambda: (n := slurm_node(slurm_env, dyn_node)) and "DRAIN" not in n["state"], 3 * POLL_PERIOD,
              "the node in Slurm and in service after the restart")  # fmt: skip
    after = slurm_node(slurm_env, dyn_node)
    assert after is not None and after["cpus"] == 8 and "DRAIN" not in after["state"]
    assert len(node_events(core, dyn_node, "SlurmNodeRegistered")) == registered, "registered again after a restart"
    assert json.loads(before)["boot_time"] == after["boot_time"], "the node was re-created"
