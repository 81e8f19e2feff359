"""Exact DRA devices on the real cluster: Slurm picks the GPUs (and CPUs), and the pod's
ResourceClaim names exactly those.

Slurm keeps device indices only for GRES with device files; on the local cluster those are the
dynamic node kwok-dyn-1's two GPUs (hack/cluster.sh), so these tests register it in Slurm by
label, as the dynamic-node tests do. They publish ResourceSlices for it the way a DRA driver
would (devices with an ``index`` attribute, the Slurm index) and create the DeviceClasses. What
Slurm allocated is read from slurmrestd here, independently of the bridge's code.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.test_dynamic_nodes import WITHIN_TWO_POLLS, dyn_node, patch_node, slurm_node  # noqa: F401
from tests.e2e.util import end_workloads, get_phj, make_pod, pod_events, read_pod, slurm_job
from tests.harness import SlurmEnv, holds_for, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
GPU = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
CPU = "deviceclass.resource.kubernetes.io/dra.cpu"


@pytest.fixture
def dra_node(
    dyn_node: str,  # noqa: F811
    managed_namespace: str,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    slurm_env: SlurmEnv,
) -> Iterator[str]:
    """kwok-dyn-1 registered in Slurm (two GPUs with indices, 16 CPUs), and the DeviceClasses;
    afterwards the test's pods and Slurm jobs end first, so the node can leave Slurm."""
    for cls in ("gpu.nvidia.com", "dra.cpu"):
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": cls},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{cls}"'}}]}}  # fmt: skip
        with contextlib.suppress(ApiException):  # kept between tests, as a driver's install would
            custom.create_cluster_custom_object(*RESOURCE, "deviceclasses", body)
    patch_node(core, dyn_node, labels={names.LABEL_EXTERNAL_NODE: "true"})
    info = wait_for(lambda: slurm_node(slurm_env, dyn_node), WITHIN_TWO_POLLS + 5, f"{dyn_node} in Slurm")
    assert info["gres"] == "gpu:2" and info["cpus"] == 16, info
    yield dyn_node
    end_workloads(managed_namespace, core, batch, custom, slurm_env, ())
    for s in custom.list_cluster_custom_object(*RESOURCE, "resourceslices")["items"]:
        if s["spec"].get("nodeName") == dyn_node:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(*RESOURCE, "resourceslices", s["metadata"]["name"])


def publish(custom: k8s.CustomObjectsApi, node: str, driver: str, devices: list[tuple[str, int]], gen: int = 1) -> None:
    """A driver's ResourceSlice for ``node``: (device name, Slurm index) pairs; a later generation
    replaces an earlier one, as drivers do."""
    name = f"{node}-{driver}"
    body: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": gen, "resourceSliceCount": 1},
            "devices": [{"name": d, "attributes": {"index": {"int": i}}} for d, i in devices],
        },
    }
    try:
        old = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", name)
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        custom.replace_cluster_custom_object(*RESOURCE, "resourceslices", name, body)
    except ApiException as e:
        if e.status != 404:
            raise
        custom.create_cluster_custom_object(*RESOURCE, "resourceslices", body)


def device_pod(name: str, node: str, resources: Obj, containers: int = 1) -> Obj:
    pod = make_pod(name)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    main = pod["spec"]["containers"][0]
    main["resources"] = resources
    pod["spec"]["containers"] = [dict(main, name=f"c{i}") for i in range(containers)]
    return pod


def running(core: k8s.CoreV1Api, ns: str, name: str, timeout: float = 60) -> k8s.V1Pod:
    pod: k8s.V1Pod = wait_for(
        lambda: (p := read_pod(core, ns, name)) and p.status.phase == "Running" and p, timeout, f"pod {name} running"
    )
    return pod


def claim_of(custom: k8s.CustomObjectsApi, ns: str, pod: k8s.V1Pod) -> Obj:
    (entry,) = [c for c in pod.spec.resource_claims or [] if c.name == names.POD_CLAIM_ENTRY]
    claim: Obj = custom.get_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", entry.resource_claim_name)
    return claim


def slurm_gpu_indices(slurm_env: SlurmEnv, job_id: int) -> list[int]:
    """The GPU indices of a one-node job, from its GRES detail (e.g. "gpu:1(IDX:1)")."""
    job = slurm_job(slurm_env, job_id)
    assert job is not None
    (detail,) = job["gres_detail"]
    listed = detail.split("(IDX:")[1].rstrip(")")
    out: list[int] = []
    for part in listed.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def test_two_pods_get_exactly_the_distinct_gpus_slurm_allocated(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv, dra_node: str
) -> None:
    ns = managed_namespace
    # Device names in the opposite order of their indices: the index attribute decides.
    publish(custom, dra_node, "gpu.nvidia.com", [("gpu-b", 0), ("gpu-a", 1)])
    for name in ("g1", "g2"):
        core.create_namespaced_pod(ns, device_pod(name, dra_node, {"limits": {GPU: "1"}}))
    seen: dict[str, str] = {}
    for name in ("g1", "g2"):
        pod = running(core, ns, name)
        assert pod.spec.node_name == dra_node
        job_id = int((get_phj(custom, ns, name) or {})["status"]["jobId"])
        (index,) = slurm_gpu_indices(slurm_env, job_id)
        assert pod.metadata.annotations[names.ANN_SLURM_DEVICES] == f"gpu:{index}"
        claim = claim_of(custom, ns, pod)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"], result["device"]) == (
            "gpu.nvidia.com", dra_node, {0: "gpu-b", 1: "gpu-a"}[index]
        )  # fmt: skip
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": pod.metadata.uid}]
        assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [pod.metadata.uid]
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
        seen[name] = result["device"]
        # The request went to Slurm as a GRES; the extended resource is gone from the pod.
        assert GPU not in (pod.spec.containers[0].resources.limits or {})
    assert sorted(seen.values()) == ["gpu-a", "gpu-b"], f"two distinct devices: {seen}"

    # The claim lives as long as its pod.
    claim_name = claim_of(custom, ns, read_pod(core, ns, "g1"))["metadata"]["name"]
    core.delete_namespaced_pod("g1", ns)

    def claim_gone() -> bool:
        try:
            custom.get_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", claim_name)
        except ApiException as e:
            return bool(e.status == 404)
        return False

    wait_for(claim_gone, 60, "the deleted pod's claim removed")


def test_a_device_missing_from_the_slice_holds_the_pod_until_the_driver_publishes_it(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv, dra_node: str
) -> None:
    ns = managed_namespace
    publish(custom, dra_node, "gpu.nvidia.com", [("gpu-7", 7)])  # no device Slurm can have given
    core.create_namespaced_pod(ns, device_pod("late", dra_node, {"limits": {GPU: "1"}}))
    event = wait_for(
        lambda: next((e for e in pod_events(core, ns, "late") if e.reason == "SlurmDevicesNotFound"), None),
        30,
        "a SlurmDevicesNotFound Event on the pod",
    )
    assert event.type == "Warning" and "publish no device with Slurm index" in event.message, event.message
    assert (get_phj(custom, ns, "late") or {}).get("status", {}).get("jobId"), "Slurm allocated the job"
    holds_for(lambda: (p := read_pod(core, ns, "late")) is not None and not p.spec.node_name, 3,
              "the pod stays unbound while its device is missing")  # fmt: skip

    publish(custom, dra_node, "gpu.nvidia.com", [("gpu-0", 0), ("gpu-1", 1)], gen=2)
    pod = running(core, ns, "late", timeout=45)
    index = pod.metadata.annotations[names.ANN_SLURM_DEVICES].removeprefix("gpu:")
    (result,) = claim_of(custom, ns, pod)["status"]["allocation"]["devices"]["results"]
    assert result["device"] == f"gpu-{index}"


def test_a_dra_cpu_pod_gets_the_cpus_slurm_allocated(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv, dra_node: str
) -> None:
    ns = managed_namespace
    publish(custom, dra_node, "dra.cpu", [(f"cpu{i}", i) for i in range(16)])
    core.create_namespaced_pod(ns, device_pod("cpus", dra_node, {"requests": {CPU: "3"}, "limits": {CPU: "3"}}))
    pod = running(core, ns, "cpus")
    job = slurm_job(slurm_env, int((get_phj(custom, ns, "cpus") or {})["status"]["jobId"]))
    assert job is not None and job["cpus_per_task"]["number"] == 3
    (alloc,) = job["job_resources"]["nodes"]["allocation"]
    cores, base = [], 0
    for socket in sorted(alloc["sockets"], key=lambda s: s["index"]):
        cores += [base + c["index"] for c in socket["cores"] if "ALLOCATED" in c["status"]]
        base += len(socket["cores"])
    assert len(cores) == 3
    assert pod.metadata.annotations[names.ANN_SLURM_DEVICES] == "cpu:" + ",".join(map(str, sorted(cores)))
    results = claim_of(custom, ns, pod)["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == sorted(f"cpu{i}" for i in cores)


REFUSALS: list[tuple[str, Callable[[str], Obj], list[str]]] = [
    ("a DeviceClass the bridge cannot map", lambda n: device_pod("x", n, {"limits": {
        "deviceclass.resource.kubernetes.io/fpga.example.com": "1"}}),
     ['spec.containers[0].resources.limits["deviceclass.resource.kubernetes.io/fpga.example.com"]']),
    ("native cpu beside dra.cpu", lambda n: device_pod("x", n, {"requests": {"cpu": "1", CPU: "2"},
                                                                "limits": {CPU: "2"}}),
     ['spec.containers[0].resources.requests["cpu"]', "cannot also request native cpu"]),
    ("DRA devices in two containers", lambda n: device_pod("x", n, {"limits": {GPU: "1"}}, containers=2),
     ["containers ['c0', 'c1']", "one container only"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refused_at_admission_naming_the_field(
    core: k8s.CoreV1Api, managed_namespace: str, case: str, make: Callable[[str], Obj], words: list[str]
) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(managed_namespace, make("kwok-dyn-1"))
    assert err.value.status == 422
    body = json.loads(err.value.body)["message"]
    for w in words:
        assert w in body, body


def test_device_plugin_gpus_keep_the_count_only_path(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("legacy", gpus=2))
    pod = running(core, ns, "legacy")
    assert not pod.spec.resource_claims, "no claim: the device plugin picks the devices"
    assert names.ANN_SLURM_DEVICES not in (pod.metadata.annotations or {})
    job = slurm_job(slurm_env, int((get_phj(custom, ns, "legacy") or {})["status"]["jobId"]))
    assert job is not None and job["tres_per_node"] == "gres/gpu:2"
