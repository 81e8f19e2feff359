"""The stores keep projections: every reader must get the same answer from them as from the
whole object, and what is dropped must really be gone (that is the memory saved)."""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.operator.nodes import nodesync, registration
from slurm_bridge.operator.placeholderjobs.decisions import pods as st
from slurm_bridge.operator.runtime.store import ObjectStore, project, project_node, project_pod
from slurm_bridge.rules import podphase
from slurm_bridge.rules.dra.admission import consistency_problems
from slurm_bridge.rules.nodenames import slurm_name_of
from slurm_bridge.rules.nodeplacement import pod_placement
from slurm_bridge.rules.podresources import pod_resources
from slurm_bridge.rules.translate import job_request
from tests.unit.rules.test_podresources import RESOURCE_CASES

MANAGED_FIELDS = [
    {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {f"f:field{i}": {} for i in range(40)}}},
]  # fmt: skip


def full_pod() -> dict[str, Any]:
    """A pod as the API server returns it, with what the bridge reads and much that it does not."""
    container = {
        "name": "main", "image": "registry.example/app:1", "command": ["/bin/app"], "args": ["--x"] * 20,
        "env": [{"name": f"E{i}", "value": "v" * 50} for i in range(30)],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "resources": {"requests": {"cpu": "3", "memory": "2Gi", "nvidia.com/gpu": "1"},
                      "limits": {"nvidia.com/gpu": "1"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
    }  # fmt: skip
    sidecar = {"name": "side", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42", "generation": 1,
            "labels": {"app": "a"},
            "annotations": {names.SLURMJOB_PREFIX + "time-limit": "30", names.SLURMJOB_PREFIX + "account": "acct"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-1",
                                 "controller": True}],
            "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": MANAGED_FIELDS,
        },
        "spec": {
            "schedulerName": "slurm-bridge", "restartPolicy": "Never", "containers": [container],
            "initContainers": [sidecar], "overhead": {"cpu": "250m"},
            "nodeSelector": {"kubernetes.io/hostname": "n1"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "feature.slinky.slurm.net/fast", "operator": "In",
                                       "values": ["true"]}]}]}}},
            "schedulingGates": [{"name": names.SCHEDULING_GATE}],
            "volumes": [{"name": "data", "emptyDir": {}}] * 10, "serviceAccountName": "default",
            "tolerations": [{"key": "k", "operator": "Exists"}] * 5, "dnsPolicy": "ClusterFirst",
        },
        "status": {
            "phase": "Pending", "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}],
            "containerStatuses": [{"name": "main", "image": "x", "imageID": "sha256:" + "0" * 64, "ready": False}],
        },
    }  # fmt: skip


def full_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1", "uid": "n-1", "resourceVersion": "7", "managedFields": MANAGED_FIELDS,
            "labels": {names.LABEL_EXTERNAL_NODE: "", "kubernetes.io/hostname": "n1"},
            "annotations": {names.ANN_CORDONED_BY: names.NODE_SYNC_OWNER, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": names.TAINT_MANAGED_NODE, "value": "slurm-bridge", "effect": "NoExecute"}],
                 "unschedulable": True, "podCIDR": "10.0.0.0/24"},
        "status": {
            "allocatable": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2", "pods": "110"},
            "capacity": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "images": [{"names": [f"registry.example/image{i}:latest"], "sizeBytes": 1} for i in range(50)],
            "conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.36.3"},
        },
    }  # fmt: skip


def size(obj: Any) -> int:
    return len(json.dumps(obj))


@pytest.mark.parametrize(("pod", "_"), [c[1:] for c in RESOURCE_CASES], ids=[c[0] for c in RESOURCE_CASES])
def test_pod_resources_read_the_same_from_the_projection(pod: dict[str, Any], _: Any) -> None:
    assert pod_resources(project_pod(pod)) == pod_resources(pod)


def test_pod_readers_get_the_same_answers() -> None:
    pod = full_pod()
    kept = project(copy.deepcopy(pod))
    cfg = Config()
    assert job_request([kept], config=cfg) == job_request([pod], config=cfg)
    assert pod_placement(kept["spec"]) == pod_placement(pod["spec"])
    assert st.release_pod_patch(kept, "n1", 5, "p1", {"a": "b"}) == st.release_pod_patch(pod, "n1", 5, "p1", {"a": "b"})
    assert st.pod_is_released(kept, "n1") == st.pod_is_released(pod, "n1")
    assert podphase.pod_ended(kept) == podphase.pod_ended(pod)
    assert podphase.pod_phase(kept) == podphase.pod_phase(pod)
    assert consistency_problems(kept) == consistency_problems(pod)
    for field in ("uid", "resourceVersion", "labels", "annotations", "ownerReferences"):
        assert kept["metadata"][field] == pod["metadata"][field]


def test_pod_projection_drops_what_nobody_reads() -> None:
    pod = full_pod()
    kept = project_pod(pod)
    assert "managedFields" not in kept["metadata"]
    assert kept["spec"]["containers"] == [{"name": "main", "resources": pod["spec"]["containers"][0]["resources"]}]
    assert not {"volumes", "tolerations", "serviceAccountName", "dnsPolicy"} & set(kept["spec"])
    assert kept["status"] == {"phase": "Pending"}
    assert size(kept) < size(pod) / 3


def test_an_ended_pods_exit_codes_are_kept_and_nothing_else_of_its_container_statuses() -> None:
    """The job's outcome (sacct) reads the highest exit code: the projection keeps each terminated
    container's, and leaves a running one's state out (a kubelet's status update is no change)."""
    pod = full_pod()
    pod["status"] = {"phase": "Failed", "containerStatuses": [
        {"name": "a", "image": "x", "imageID": "y", "restartCount": 0, "ready": False,
         "state": {"terminated": {"exitCode": 3, "reason": "Error", "finishedAt": "t"}}},
        {"name": "b", "image": "x", "state": {"running": {"startedAt": "t"}}},
    ]}  # fmt: skip
    kept = project_pod(pod)
    assert kept["status"] == {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 3}}}]}
    assert st.highest_exit_code({"p": kept}) == st.highest_exit_code({"p": pod}) == 3
    running = full_pod()
    running["status"] = {"phase": "Running", "containerStatuses": [{"name": "a", "state": {"running": {}}}]}
    assert project_pod(running)["status"] == {"phase": "Running"}


def test_node_readers_get_the_same_answers() -> None:
    node = full_node()
    kept = project(copy.deepcopy(node))
    assert nodesync.kube_view(kept, "slurm-bridge") == nodesync.kube_view(node, "slurm-bridge")
    assert slurm_name_of(kept) == slurm_name_of(node)
    want = nodesync.KubeView(False, False, False, None, None, False)
    assert nodesync.node_patch(kept, want, "slurm-bridge") == nodesync.node_patch(node, want, "slurm-bridge")
    assert registration.labelled(kept) == registration.labelled(node)
    assert registration.registration(kept) == registration.registration(node)
    assert registration.desired(kept, "n1", "p") == registration.desired(node, "n1", "p")
    assert "images" not in project_node(node)["status"] and size(kept) < size(node) / 3


def test_placeholderjob_keeps_spec_and_status_without_managed_fields() -> None:
    phj: dict[str, Any] = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "PlaceholderJob",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "3", "finalizers": ["f"],
                     "managedFields": MANAGED_FIELDS},
        "spec": {"pods": ["a"], "slurm": {"nodes": 1}}, "status": {"jobId": 4, "phase": "Running"},
    }  # fmt: skip
    kept = project(phj)
    assert kept["spec"] == phj["spec"] and kept["status"] == phj["status"]
    assert kept["metadata"] == {k: v for k, v in phj["metadata"].items() if k != "managedFields"}


def test_store_holds_projections_and_still_orders_by_resource_version() -> None:
    store = ObjectStore()
    pod = full_pod()
    assert store.upsert(pod)
    assert store.get(("ns", "p1")) == project_pod(pod)
    older = copy.deepcopy(pod)
    older["metadata"]["resourceVersion"] = "41"
    assert not store.upsert(older)
    newer = copy.deepcopy(pod)
    newer["metadata"]["resourceVersion"] = "43"
    newer["status"]["phase"] = "Running"
    assert store.upsert(newer)
    assert podphase.pod_phase(store.get(("ns", "p1"))) == "Running"
    store.delete(newer)
    assert store.get(("ns", "p1")) is None
    assert not store.upsert(pod)  # an older version after the delete does not bring it back


def test_stored_objects_share_nothing_with_the_given_one_and_intern_short_strings() -> None:
    pod = full_pod()
    kept = project(pod)
    assert kept["spec"]["containers"][0]["resources"] is not pod["spec"]["containers"][0]["resources"]
    other = project(full_pod())
    assert kept["status"]["phase"] is other["status"]["phase"]  # one string for every copy
    assert next(iter(kept["metadata"])) is next(iter(other["metadata"]))


@pytest.mark.parametrize(
    "value",
    [
        {"a": "short", "b": "x" * 65, "c": 1, "d": 1.5, "e": True, "f": None, "g": [], "h": {}},
        {"nested": {"list": ["s", {"k": "v"}, 3, ["deep"]], "sub": "t"}},
        ["top", {"k": "v" * 70}],
        "a string",
        7,
    ],
)
def test_compact_is_an_equal_deep_copy_that_interns_only_short_strings(value: Any) -> None:
    from slurm_bridge.operator.runtime.store import _INTERN_MAX, _compact

    out = _compact(value)
    assert out == value

    def walk(a: Any, b: Any) -> None:
        if isinstance(a, dict):
            assert a is not b
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True):
                assert ka is sys.intern(kb)
                walk(va, vb)
        elif isinstance(a, list):
            assert a is not b
            for va, vb in zip(a, b, strict=True):
                walk(va, vb)
        elif isinstance(a, str) and len(a) > _INTERN_MAX:
            assert a is b  # a long string is kept as it is
        elif isinstance(a, str):
            assert a is sys.intern("".join(list(b)))  # a short one is the interned copy

    walk(out, value)


def test_tombstones_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deleted object's version is remembered long enough to refuse stale events, then forgotten."""
    from slurm_bridge.operator.runtime import store as store_module

    clock = [1000.0]
    monkeypatch.setattr("slurm_bridge.operator.runtime.store.time.monotonic", lambda: clock[0])
    store = ObjectStore()
    first = full_pod()
    store.upsert(first)
    store.delete(first)
    assert not store.upsert(first)  # stale: refused
    clock[0] += store_module.TOMBSTONE_SECONDS + 1
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "p2"
    store.upsert(second)
    store.delete(second)  # this delete forgets the expired tombstone of the first
    assert len(store._deleted_rv) == 1
    assert not store.upsert(second)
