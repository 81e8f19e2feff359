"""GPUs and MIG slices shared with native Slurm jobs on hybrid nodes (issue 37; docs/gpus.md).

The local cluster's hybrid nodes have GPUs in slurmd's gres.conf, on stand-in device files, and the
same GPUs published as the NVIDIA DRA driver publishes them (hack/cluster/gpus.py):
kwok-hybrid-1 two whole GPUs (``gpu:h100:2``), kwok-hybrid-2 one GPU in a static MIG layout (four
``1g.10gb`` and one ``3g.40gb``, Slurm types of those names, indices 0-3 and 4). Pods ask for GPUs
through DeviceClasses (``gpu.nvidia.com``; ``mig-<profile>.nvidia.com`` per profile), and native
jobs with ``sbatch --gres``. What each side holds is read here independently of the bridge:
Slurm's ``scontrol show job -d`` and ``show node``, and the pod's ResourceClaim against the
ResourceSlice's device attributes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.builders import make_pod as build_pod
from tests.e2e.test_node_sharing import end_pod, phj_job, told_why
from tests.e2e.util import Native, get_phj, pod_events, read_pod, wait_for_idle_nodes
from tests.harness import TENANTS, SlurmEnv, cluster_minor, holds_for, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
ALICE = TENANTS["a"]
RESOURCE = ("resource.k8s.io", "v1")
PREFIX = "deviceclass.resource.kubernetes.io/"
WHOLE, MIG1, MIG3 = "gpu.nvidia.com", "mig-1g.10gb.nvidia.com", "mig-3g.40gb.nvidia.com"
SHARD = "shard.nvidia.com"
HOLD = 4  # seconds a pending state must stay so (several poll periods and Slurm scheduling passes)


@pytest.fixture
def gpu_nodes(slurm_env: SlurmEnv, custom: k8s.CustomObjectsApi) -> tuple[str, str]:
    """(the whole-GPU node, the MIG node), free of jobs, with the layout this file expects."""
    assert len(slurm_env.hybrid_nodes) >= 2, f"the cluster has hybrid nodes {slurm_env.hybrid_nodes}, want 2"
    whole, mig = slurm_env.hybrid_nodes[:2]
    for node, gres in ((whole, "gpu:h100:2"), (mig, "gpu:1g.10gb:4,gpu:3g.40gb:1")):
        shown = slurm_env.scontrol("show", "node", node)
        assert f"Gres={gres}" in shown, (
            f"Slurm's {node} has no GPUs {gres} (SB_HYBRID_GPUS, hack/lib.sh); restart the cluster with "
            f"hack/cluster.sh down && up: {shown.split('Gres=')[1].split()[0] if 'Gres=' in shown else 'no Gres'}"
        )
        assert slice_devices(custom, node), f"no ResourceSlice of {WHOLE} for {node} (hack/cluster/gpus.py manifests)"
    wait_for_idle_nodes(slurm_env, [whole, mig])
    return whole, mig


# ---- what each side holds -------------------------------------------------------------------------


def slice_devices(custom: k8s.CustomObjectsApi, node: str) -> dict[str, Obj]:
    """The driver's devices on ``node``: name -> plain attributes."""
    out: dict[str, Obj] = {}
    for s in custom.list_cluster_custom_object(*RESOURCE, "resourceslices")["items"]:
        if s["spec"].get("driver") == WHOLE and s["spec"].get("nodeName") == node:
            for d in s["spec"].get("devices") or []:
                out[d["name"]] = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
    return out


def job_gres(slurm: SlurmEnv, job_id: int) -> dict[str, list[int]]:
    """Slurm's view: the indices a job holds per GPU type (``scontrol show job -d``'s GRES=)."""
    shown = slurm.scontrol("show", "job", "-d", str(job_id))
    out: dict[str, list[int]] = {}
    for gtype, listed in re.findall(r"gpu:([^:(,\s]+):\d+\(IDX:([0-9,\-]*)\)", shown):
        for part in filter(None, listed.split(",")):
            lo, _, hi = part.partition("-")
            out.setdefault(gtype, []).extend(range(int(lo), int(hi or lo) + 1))
    return out


def node_gres_used(slurm: SlurmEnv, node: str) -> str:
    shown = slurm.scontrol("-d", "show", "node", node)
    m = re.search(r"GresUsed=(\S+)", shown)
    return m.group(1) if m else ""


def claim_results(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str) -> list[Obj]:
    """The pod's view: the allocation results of its ResourceClaim (empty until allocated)."""
    pod = read_pod(core, ns, name)
    assert pod is not None, f"pod {name} is gone"
    refs = [r.resource_claim_name for r in pod.spec.resource_claims or [] if r.name == names.POD_CLAIM_ENTRY]
    assert refs and refs[0], f"pod {name} has no bridge claim entry: {pod.spec.resource_claims}"
    try:
        claim = custom.get_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", refs[0])
    except k8s.exceptions.ApiException:
        return []
    return list(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [])


def claim_devices(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str) -> list[tuple[str, str]]:
    """(request, device) of the pod's claim's allocation."""
    return sorted((r["request"], r["device"]) for r in claim_results(core, custom, ns, name))


def running_pod(core: k8s.CoreV1Api, ns: str, name: str) -> k8s.V1Pod | None:
    p = read_pod(core, ns, name)
    return p if p and p.spec.node_name and p.status.phase == "Running" else None


def gpu_pod(name: str, classes: dict[str, int], *, grace: int | None = None, annotations: Obj | None = None) -> Obj:
    """A coResident bridge pod in the hybrid partition asking for DRA devices of ``classes``."""
    built = build_pod(name).meta(
        annotations={
            names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT,
            names.ANN_PARTITION: "hybrid",
            **(annotations or {}),
        }
    )
    limits = {"cpu": "1", "memory": "100Mi", **{PREFIX + c: str(n) for c, n in classes.items()}}
    built.container("main", image="busybox", command=["sleep", "3600"], requests=dict(limits), limits=limits)
    built.spec(restartPolicy="Never")
    if grace is not None:
        built.spec(terminationGracePeriodSeconds=grace)
    return built.manifest()


@pytest.fixture
def pods(ns: str, core: k8s.CoreV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        end_pod(core, ns, name)


def create(core: k8s.CoreV1Api, ns: str, made: list[str], manifest: Obj) -> str:
    core.create_namespaced_pod(ns, manifest)
    made.append(manifest["metadata"]["name"])
    return str(manifest["metadata"]["name"])


def started(slurm: SlurmEnv, job_id: int) -> bool:
    return "JobState=RUNNING" in slurm.scontrol("show", "job", str(job_id))


def pod_job(custom: k8s.CustomObjectsApi, ns: str, name: str) -> int:
    found: int = wait_for(lambda: phj_job(custom, ns, name), 60, f"pod {name}'s Slurm job")
    return found


def given(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm: SlurmEnv, ns: str, name: str, node: str
) -> tuple[int, dict[str, list[int]], list[Obj]]:
    """Once the pod runs on ``node``: its job, Slurm's indices for it, and its claim's devices'
    attributes (each with the claim's request name under ``request``)."""
    wait_for(lambda: running_pod(core, ns, name), 90, f"pod {name} running")
    pod = running_pod(core, ns, name)
    assert pod is not None and pod.spec.node_name == node, (
        f"pod {name} runs on {pod and pod.spec.node_name}, want {node}"
    )
    job_id = pod_job(custom, ns, name)
    devices = slice_devices(custom, node)
    got = [{"request": req, "name": dev, **devices[dev]} for req, dev in claim_devices(core, custom, ns, name)]
    return job_id, job_gres(slurm, job_id), got


def slurm_indices(devices: list[Obj], all_devices: dict[str, Obj]) -> list[int]:
    """A device's Slurm index on its node as docs/gpus.md defines it (GPU by GPU, a MIG GPU's
    instances by minor), computed here from the slice, not with the bridge's code."""
    order = sorted(
        all_devices,
        key=lambda n: (all_devices[n].get("parentIndex", all_devices[n]["index"]),
                       all_devices[n]["type"] == "mig", all_devices[n].get("minor", 0)),
    )  # fmt: skip
    return sorted(order.index(d["name"]) for d in devices)


# ---- whole GPUs -----------------------------------------------------------------------------------------


def test_a_pod_and_a_native_job_on_one_gpu_node_each_have_their_own_gpu(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    whole, _ = gpu_nodes
    theirs = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=gpu:1", "-c", "1", "--mem=100M")
    wait_for(lambda: started(slurm_env, theirs), 30, f"native job {theirs} running on {whole}")
    name = create(core, ns, pods, gpu_pod("gpu-pod", {WHOLE: 1}))
    job_id, held, devices = given(core, custom, slurm_env, ns, name, whole)
    native_idx = job_gres(slurm_env, theirs)
    assert [d["type"] for d in devices] == ["gpu"], devices
    pod_idx = [d["index"] for d in devices]
    assert held == {"h100": pod_idx}, f"Slurm gave job {job_id} {held}, the claim {devices}"
    assert native_idx["h100"] != pod_idx and sorted(native_idx["h100"] + pod_idx) == [0, 1], (native_idx, pod_idx)
    assert node_gres_used(slurm_env, whole).startswith("gpu:h100:2(IDX:0-1)"), node_gres_used(slurm_env, whole)
    pod = read_pod(core, ns, name)
    assert pod and pod.metadata.annotations[names.ANN_SLURM_DEVICES] == f"gpu:{pod_idx[0]}"


def test_whole_gpu_pods_never_take_a_mig_slice(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    """Both whole GPUs are native jobs'; the MIG node has five free slices. Slurm would meet an
    untyped gpu:1 with a slice; the bridge submits it without the MIG node, so the pod waits."""
    whole, mig = gpu_nodes
    theirs = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=gpu:2", "-c", "1", "--mem=100M")
    wait_for(lambda: started(slurm_env, theirs), 30, f"native job {theirs} running on {whole}")
    name = create(core, ns, pods, gpu_pod("gpu-waits", {WHOLE: 1}))
    job_id = pod_job(custom, ns, name)
    shown = slurm_env.scontrol("show", "job", str(job_id))
    assert f"ExcNodeList={mig}" in shown, f"job {job_id} was not submitted without the MIG node: {shown}"
    holds_for(
        lambda: "JobState=PENDING" in slurm_env.scontrol("show", "job", str(job_id)), HOLD, f"job {job_id} pending"
    )
    assert node_gres_used(slurm_env, mig).startswith("gpu:1g.10gb:0(IDX:N/A)"), node_gres_used(slurm_env, mig)
    native.cancel(theirs)
    job_id2, held, devices = given(core, custom, slurm_env, ns, name, whole)
    assert job_id2 == job_id and [d["type"] for d in devices] == ["gpu"] and "h100" in held


# ---- MIG slices -------------------------------------------------------------------------------------------


def test_a_mig_pod_and_a_native_mig_job_share_one_gpu_and_mixed_profiles_in_one_pod(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    _, mig = gpu_nodes
    theirs = native.submit(ALICE, "-p", "hybrid", "--gres=gpu:3g.40gb:1", "-c", "1", "--mem=100M")
    wait_for(lambda: started(slurm_env, theirs), 30, f"native job {theirs} running")
    assert job_gres(slurm_env, theirs) == {"3g.40gb": [4]}
    name = create(core, ns, pods, gpu_pod("mig-pod", {MIG1: 2}))
    _, held, devices = given(core, custom, slurm_env, ns, name, mig)
    assert {(d["type"], d["profile"], d["request"]) for d in devices} == {("mig", "1g.10gb", "mig-1g-10gb")}, devices
    assert len(devices) == 2 and held == {"1g.10gb": slurm_indices(devices, slice_devices(custom, mig))}, (
        held,
        devices,
    )
    assert len({d["uuid"] for d in devices}) == 2 and len({d["parentUUID"] for d in devices}) == 1, devices
    used = node_gres_used(slurm_env, mig)
    assert used.startswith("gpu:1g.10gb:2(IDX:") and used.endswith("gpu:3g.40gb:1(IDX:4)"), used

    # Mixed profiles in one pod: the native job's 3g.40gb goes, a pod asks for one of each.
    native.cancel(theirs)
    wait_for(lambda: "3g.40gb:0" in node_gres_used(slurm_env, mig), 30, "the 3g.40gb slice free")
    name2 = create(core, ns, pods, gpu_pod("mixed-pod", {MIG1: 1, MIG3: 1}))
    _, held2, devices2 = given(core, custom, slurm_env, ns, name2, mig)
    assert sorted((d["request"], d["profile"]) for d in devices2) == [
        ("mig-1g-10gb", "1g.10gb"),
        ("mig-3g-40gb", "3g.40gb"),
    ]
    assert held2["3g.40gb"] == [4] and len(held2["1g.10gb"]) == 1 and held2["1g.10gb"][0] not in held["1g.10gb"]
    pod = read_pod(core, ns, name2)
    assert (
        pod and pod.metadata.annotations[names.ANN_SLURM_DEVICES] == f"mig-1g-10gb:{held2['1g.10gb'][0]};mig-3g-40gb:4"
    )


def test_saturated_mig_slices_make_pods_and_native_jobs_wait_and_a_release_frees_its_indices(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    _, mig = gpu_nodes
    first = [create(core, ns, pods, gpu_pod(f"slice-{i}", {MIG1: 2})) for i in range(2)]
    held: dict[str, list[int]] = {}
    for name in first:
        _, got, _ = given(core, custom, slurm_env, ns, name, mig)
        held[name] = got["1g.10gb"]
    assert sorted(held[first[0]] + held[first[1]]) == [0, 1, 2, 3], held
    # A fifth 1g pod and a native 1g job both wait, each with Slurm's reason.
    fifth = create(core, ns, pods, gpu_pod("slice-5", {MIG1: 1}))
    theirs = native.submit(ALICE, "-p", "hybrid", "-w", mig, "--gres=gpu:1g.10gb:1", "-c", "1", "--mem=100M")
    job5 = pod_job(custom, ns, fifth)

    def told() -> str:
        """Slurm's reason for the fifth pod's job, once the pod has been told it (an Event)."""
        reason = re.findall(r"Reason=([^,\s]+)", slurm_env.scontrol("show", "job", str(job5)))
        assert reason and reason[0] != "None", f"job {job5} has no pending reason"
        return reason[0] if told_why(core, ns, fifth, reason[0]) else ""

    reason = wait_for(told, 30, f"pod {fifth} told why its job waits")
    holds_for(
        lambda: "JobState=PENDING" in slurm_env.scontrol("show", "job", str(theirs)), HOLD, "the native 1g job pending"
    )
    assert "JobState=PENDING" in slurm_env.scontrol("show", "job", str(job5))
    assert not re.search(r"Reason=None", slurm_env.scontrol("show", "job", str(theirs)))
    phj = get_phj(custom, ns, fifth) or {}
    assert reason in json.dumps(phj.get("status") or {}), phj.get("status")
    # The first pod ends: its two indices are free again, and the waiting work gets them.
    end_pod(core, ns, first[0])
    wait_for(lambda: started(slurm_env, theirs) and started(slurm_env, job5), 60, "the native job and the fifth pod's")
    freed = set(held[first[0]])
    taken = set(job_gres(slurm_env, theirs)["1g.10gb"]) | set(job_gres(slurm_env, job5)["1g.10gb"])
    assert taken == freed, f"the freed indices {sorted(freed)} went to {sorted(taken)}"
    _, _, devices5 = given(core, custom, slurm_env, ns, fifth, mig)
    assert slurm_indices(devices5, slice_devices(custom, mig)) == job_gres(slurm_env, job5)["1g.10gb"]


# ---- shards: a GPU shared by count (docs/gpus.md#shards) ------------------------------------------------


def job_shards(slurm: SlurmEnv, job_id: int) -> list[int]:
    """Slurm's view of a job's shards: its count on each of the node's GPUs, from
    ``scontrol show job -d``'s ``GRES=shard:2(0/8,2/8)`` (empty when it holds none)."""
    m = re.search(r"shard:\d+\(([0-9/,]+)\)", slurm.scontrol("show", "job", "-d", str(job_id)))
    return [int(part.split("/")[0]) for part in m.group(1).split(",")] if m else []


def test_a_shard_pod_shares_one_gpu_with_a_native_shard_job_and_the_gpu_is_not_given_whole_meanwhile(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    """kwok-hybrid-1's two GPUs have 8 Slurm shards each, published as devices with a ``shards``
    capacity. A native job holds one GPU whole, so a native shard job and the pod's shards can only
    be on the other: they share it, and the pod's claim names that GPU with its count. Kubernetes
    before 1.36 keeps no consumable capacity: there the request is refused at admission."""
    whole, _ = gpu_nodes
    if cluster_minor() < 36:
        with pytest.raises(k8s.exceptions.ApiException) as refused:
            core.create_namespaced_pod(ns, gpu_pod("shard-pod", {SHARD: 2}))
        assert "Kubernetes >= 1.36" in str(refused.value.body), refused.value.body
        return
    shown = slurm_env.scontrol("show", "node", whole)
    assert re.search(r"Gres=\S*shard:(h100:)?16", shown), f"no shards on {whole} (SB_HYBRID_GPUS): {shown}"
    gpu_job = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=gpu:1", "-c", "1", "--mem=100M")
    wait_for(lambda: started(slurm_env, gpu_job), 30, f"native GPU job {gpu_job} running")
    (taken,) = job_gres(slurm_env, gpu_job)["h100"]
    shared = 1 - taken
    shard_job = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=shard:3", "-c", "1", "--mem=100M")
    wait_for(lambda: started(slurm_env, shard_job), 30, f"native shard job {shard_job} running")
    assert job_shards(slurm_env, shard_job)[shared] == 3, slurm_env.scontrol("show", "job", "-d", str(shard_job))

    name = create(core, ns, pods, gpu_pod("shard-pod", {SHARD: 2}))
    wait_for(lambda: running_pod(core, ns, name), 90, f"pod {name} running")
    job_id = pod_job(custom, ns, name)
    shares = job_shards(slurm_env, job_id)
    assert shares[shared] == 2 and sum(shares) == 2, f"Slurm gave job {job_id} shards {shares}, want 2 on GPU {shared}"
    (result,) = claim_results(core, custom, ns, name)
    device = slice_devices(custom, whole)[result["device"]]
    assert (device["type"], device["index"]) == ("gpu", shared), (result, device)
    assert result["consumedCapacity"] == {"shards": "2"} and result.get("shareID"), result
    pod = read_pod(core, ns, name)
    assert pod and pod.metadata.annotations[names.ANN_SLURM_DEVICES] == f"shard:{shared}"

    # The shared GPU is not given whole while its shards are in use; it is once they are released.
    whole_job = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=gpu:1", "-c", "1", "--mem=100M")
    holds_for(lambda: not started(slurm_env, whole_job), HOLD, f"native job {whole_job} waits for a whole GPU")
    end_pod(core, ns, name)
    native.cancel(shard_job)
    wait_for(lambda: started(slurm_env, whole_job), 60, f"native job {whole_job} on the GPU the shards freed")
    assert job_gres(slurm_env, whole_job) == {"h100": [shared]}


# ---- the handoff -------------------------------------------------------------------------------------------


def test_a_native_job_waiting_for_a_gpu_starts_only_after_the_pod_on_it_stopped(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    gpu_nodes: tuple[str, str], pods: list[str],
) -> None:  # fmt: skip
    """Slurm ends the pod's job on its own (scancel by an administrator); the pod stops slowly (its
    10 s grace period: kwok stops it at its deletionTimestamp). A native job that needs both GPUs
    starts only once the pod has stopped: the epilog held the node (a reservation cannot hold a
    GPU), and the bridge lifts the hold when the pod is gone."""
    whole, _ = gpu_nodes
    grace = 10
    name = create(core, ns, pods, gpu_pod("slow-gpu", {WHOLE: 1}, grace=grace,
                                          annotations={"pod-delete.stage.kwok.x-k8s.io/graceful": "true"}))  # fmt: skip
    job_id, _, _ = given(core, custom, slurm_env, ns, name, whole)
    theirs = native.submit(ALICE, "-p", "hybrid", "-w", whole, "--gres=gpu:2", "-c", "1", "--mem=100M")
    holds_for(lambda: "JobState=PENDING" in slurm_env.scontrol("show", "job", str(theirs)), 2, "the native job waits")
    slurm_env.slurm("scancel", str(job_id))
    cancelled = time.monotonic()
    wait_for(
        lambda: f"handoff-{job_id}_" in slurm_env.scontrol("show", "res"), 10, f"the epilog's hold of job {job_id}"
    )
    gone_at: list[float] = []

    def pod_gone() -> bool:
        if read_pod(core, ns, name) is None:
            gone_at.append(time.monotonic())
            return True
        assert not started(slurm_env, theirs), "the native job started while the GPU pod was still stopping"
        return False

    wait_for(pod_gone, grace + 30, f"pod {name} stopped and gone")
    assert gone_at[0] - cancelled >= grace - 2, f"the pod stopped {gone_at[0] - cancelled:.1f}s after the cancel"
    wait_for(lambda: started(slurm_env, theirs), 60, f"native job {theirs} started once the pod stopped")
    assert job_gres(slurm_env, theirs) == {"h100": [0, 1]}


# ---- a layout change -------------------------------------------------------------------------------------


def node_condition(core: k8s.CoreV1Api, node: str) -> k8s.V1NodeCondition | None:
    found = core.read_node(node).status.conditions or []
    return next((c for c in found if c.type == names.NODE_COND_SLURM_DEVICES_MATCH), None)


def republish(custom: k8s.CustomObjectsApi, node: str, profiles: list[str]) -> None:
    """The driver publishes ``node``'s GPU in another MIG layout, as a new pool generation."""
    name = f"{node}-{WHOLE}"
    old = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", name)
    devices = old["spec"]["devices"]
    template = next(d for d in devices if d["attributes"]["type"]["string"] == "mig")
    new = []
    for minor, profile in enumerate(profiles):
        attrs = {**template["attributes"], "profile": {"string": profile}, "minor": {"int": minor},
                 "uuid": {"string": f"MIG-relayout-{node}-{minor}"}}  # fmt: skip
        new.append({"name": f"gpu-0-mig-{profile.replace('.', '')}-{minor}", "attributes": attrs})
    old["spec"]["devices"] = new
    old["spec"]["pool"]["generation"] = int(old["spec"]["pool"]["generation"]) + 1
    custom.replace_cluster_custom_object(*RESOURCE, "resourceslices", name, old)


@pytest.fixture
def layout(custom: k8s.CustomObjectsApi, gpu_nodes: tuple[str, str]) -> Iterator[Obj]:
    """The MIG node's slice as the cluster published it, put back at the end (a newer generation)."""
    _, mig = gpu_nodes
    name = f"{mig}-{WHOLE}"
    original = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", name)
    yield original
    now = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", name)
    if now["spec"]["devices"] != original["spec"]["devices"]:
        now["spec"]["devices"] = original["spec"]["devices"]
        now["spec"]["pool"]["generation"] = int(now["spec"]["pool"]["generation"]) + 1
        custom.replace_cluster_custom_object(*RESOURCE, "resourceslices", name, now)


def test_a_layout_change_places_no_new_mig_pod_until_both_views_agree_and_leaves_the_running_one(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, gpu_nodes: tuple[str, str],
    pods: list[str], layout: Obj,
) -> None:  # fmt: skip
    _, mig = gpu_nodes
    cond = wait_for(lambda: node_condition(core, mig), 30, f"{mig}'s {names.NODE_COND_SLURM_DEVICES_MATCH} condition")
    assert cond.status == "True", cond.message
    running = create(core, ns, pods, gpu_pod("before-change", {MIG1: 1}))
    _, held, devices = given(core, custom, slurm_env, ns, running, mig)
    claim = claim_devices(core, custom, ns, running)

    # The driver republishes the GPU as seven 1g.10gb slices; slurmd keeps its gres.conf.
    republish(custom, mig, ["1g.10gb"] * 7)
    changed = wait_for(
        lambda: (c := node_condition(core, mig)) is not None and c.status == "False" and c,
        30, f"{mig}'s condition False after the layout change",
    )  # fmt: skip
    assert changed.reason == names.REASON_SLURM_DEVICES_DIFFER
    assert "4 1g.10gb, 1 3g.40gb" in changed.message and "7 1g.10gb" in changed.message, changed.message

    # A new MIG pod: its job goes to Slurm without that node, where no other node has 1g.10gb
    # slices: Slurm refuses it, and the pod is told why, naming the node and its condition.
    waiting = create(core, ns, pods, gpu_pod("after-change", {MIG1: 1}))
    told = wait_for(
        lambda: [e.message for e in pod_events(core, ns, waiting) if e.reason == names.REASON_SLURM_SUBMIT_REJECTED],
        60, f"pod {waiting} told its job was refused without {mig}",
    )  # fmt: skip
    assert f"submitted without node(s) {mig} ({names.NODE_COND_SLURM_DEVICES_MATCH}=False)" in told[0], told
    holds_for(
        lambda: phj_job(custom, ns, waiting) is None and running_pod(core, ns, running)
        and claim_devices(core, custom, ns, running) == claim,
        HOLD, "the new MIG pod without a job while the running one keeps its slice",
    )  # fmt: skip

    # The layout is back: the condition says so, and the waiting pod is placed there.
    restored = dict(layout)
    now = custom.get_cluster_custom_object(*RESOURCE, "resourceslices", f"{mig}-{WHOLE}")
    now["spec"]["devices"] = restored["spec"]["devices"]
    now["spec"]["pool"]["generation"] = int(now["spec"]["pool"]["generation"]) + 1
    custom.replace_cluster_custom_object(*RESOURCE, "resourceslices", f"{mig}-{WHOLE}", now)
    wait_for(
        lambda: (c := node_condition(core, mig)) is not None and c.status == "True", 30, "the condition True again"
    )
    # The waiting pod's next try (every 30 s) reaches the node.
    _, held2, devices2 = given(core, custom, slurm_env, ns, waiting, mig)
    assert held2["1g.10gb"] != held["1g.10gb"] and [d["profile"] for d in devices2] == ["1g.10gb"]
    assert len(devices) == 1 and devices[0]["profile"] == "1g.10gb"


# ---- admission --------------------------------------------------------------------------------------------


def test_a_request_no_node_can_hold_or_a_class_the_bridge_cannot_map_is_refused_naming_the_class(
    ns: str, core: k8s.CoreV1Api, gpu_nodes: tuple[str, str]
) -> None:
    """The MIG node has four 1g.10gb slices and the whole-GPU node two GPUs; a pod's devices come
    from one node, so five slices or three GPUs can never be given. The driver's own class of
    every MIG device (mig.nvidia.com) names no profile Slurm could be asked for."""
    for classes, words in (
        ({MIG1: 5}, f"5 device(s) of DeviceClass {MIG1} asked"),
        ({WHOLE: 3}, f"3 device(s) of DeviceClass {WHOLE} asked"),
        ({"mig.nvidia.com": 1}, "DeviceClass 'mig.nvidia.com' cannot be mapped to Slurm"),
        ({SHARD: 9}, "9 shards of DeviceClass shard.nvidia.com asked"),
        ({SHARD: 1, WHOLE: 1}, "a GPU is Slurm's either whole or as shards"),
    ):
        with pytest.raises(k8s.exceptions.ApiException) as refused:
            core.create_namespaced_pod(ns, gpu_pod("too-many", classes))
        assert refused.value.status in (400, 403, 422) and words in str(refused.value.body), refused.value.body
    core.create_namespaced_pod(ns, gpu_pod("four", {MIG1: 4}))  # four fit on the MIG node: admitted
    end_pod(core, ns, "four")
