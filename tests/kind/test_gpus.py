"""GPUs and MIG slices shared with native Slurm jobs on kind's workers (issue 37;
docs/gpus.md#gpus-on-the-kind-workers): the local cluster's co-location checks (tests/e2e/test_gpus.py)
with a real kubelet and real containers.

The workers' slurmd have stand-in GPUs in gres.conf (``SB_KIND_GPUS``, hack/kind/common.sh: the first
worker two whole H100s, the second one H100 as four ``1g.10gb`` and one ``3g.40gb``), and the test
DRA plugin (hack/kind/dra-plugin) publishes the same devices and prepares the claims the kubelet hands
it, through CDI: the container gets ``NVIDIA_VISIBLE_DEVICES`` (the allocated devices' uuids) and
each device's stand-in device node. Each test reads three views apart from the bridge: Slurm's
(``scontrol -d show job|node``), the claim's (its allocation against the ResourceSlices), and what the
container itself sees, against the device file Slurm's gres.conf names for the index Slurm gave.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.test_gpus import (
    MIG1,
    PREFIX,
    WHOLE,
    given,
    job_gres,
    node_gres_used,
    slice_devices,
    slurm_indices,
    started,
)
from tests.e2e.util import Native, read_pod, wait_for_idle_nodes
from tests.harness import TENANTS, SlurmEnv, wait_for
from tests.kind.test_colocation import kind_pod
from tests.kind.test_hybrid import worker_names

pytestmark = pytest.mark.usefixtures("kind_bridge")
ALICE = TENANTS["a"]
WHOLE_GRES, MIG_GRES = "gpu:h100:2", "gpu:1g.10gb:4,gpu:3g.40gb:1"
PLUGIN = "the test DRA plugin (hack/kind/dra-plugin; kubectl -n gpu-dra get pods)"
# What the container prints: the env the plugin's CDI spec sets, every NVIDIA device node it has
# (path, major:minor in hex, as stat prints them), then a marker; then it runs until SIGTERM.
SHOW = (
    'echo "visible=${NVIDIA_VISIBLE_DEVICES:-}"; '
    'for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c "$f" ] && echo "device=$f $(stat -c %t:%T "$f")"; done; '
    "echo shown; trap 'exit 0' TERM; sleep 3600 & wait"
)


def gpu_worker(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm: SlurmEnv, gres: str) -> str:
    """The kind worker whose slurmd has ``gres`` and whose driver publishes devices, free of jobs."""
    have = {
        w: (re.findall(r"Gres=(\S+)", slurm.scontrol("show", "node", w)) or ["none"])[0] for w in worker_names(core)
    }
    found = [w for w, listed in have.items() if listed == gres]
    assert found, (
        f"no kind worker has GPUs {gres} in Slurm (they have {have}): SB_KIND_GPUS (hack/kind/common.sh) "
        "gives them; recreate the cluster with hack/kind.sh down && hack/kind.sh up"
    )
    node = found[0]
    assert slice_devices(custom, node), f"no ResourceSlice of driver {WHOLE} for {node}: is {PLUGIN} running there?"
    wait_for_idle_nodes(slurm, [node])
    return node


def gpu_pod(name: str, node: str, device_class: str) -> dict[str, Any]:
    """A coResident bridge pod on ``node`` asking for one device of ``device_class``; its container
    shows what it got (SHOW)."""
    manifest = kind_pod(name, names.NODE_SHARING_CO_RESIDENT, node)
    container = manifest["spec"]["containers"][0]
    container["command"] = ["sh", "-c", SHOW]
    container["resources"]["limits"][PREFIX + device_class] = "1"
    return manifest


def seen(core: k8s.CoreV1Api, ns: str, name: str) -> tuple[str, dict[str, str]]:
    """What the container printed: NVIDIA_VISIBLE_DEVICES and its device nodes (path -> major:minor)."""

    def shown() -> str:
        out = str(core.read_namespaced_pod_log(name, ns, container="main"))
        return out if "shown" in out.splitlines() else ""

    out = wait_for(shown, 60, f"pod {name}'s container to show its devices")
    visible = next(ln.removeprefix("visible=") for ln in out.splitlines() if ln.startswith("visible="))
    devices = dict(ln.removeprefix("device=").split(" ", 1) for ln in out.splitlines() if ln.startswith("device="))
    return visible, devices


def gres_files(core: k8s.CoreV1Api, node: str) -> list[str]:
    """Slurm's device file of each ``gpu`` index on ``node``: gres.conf's records (the slurm-config
    ConfigMap slurmd reads), numbered in order as Slurm numbers them."""
    conf = core.read_namespaced_config_map("slurm-config", "slurm").data.get("gres.conf", "")
    return re.findall(rf"^NodeName={re.escape(node)} Name=gpu Type=\S+ File=(\S+)$", conf, re.M)


def expected_node(path: str) -> str:
    """The stand-in's major:minor as stat prints them (hex): NVIDIA's majors, the minor in the name."""
    major = 195 if re.fullmatch(r"/dev/nvidia\d+", path) else 236
    minor = int(re.findall(r"\d+$", path)[0])
    return f"{major:x}:{minor:x}"


def container_has(core: k8s.CoreV1Api, ns: str, name: str, node: str, uuids: list[str], indices: list[int]) -> None:
    """The container sees exactly the allocated devices: their uuids, and the device files Slurm's
    gres.conf names for the indices Slurm gave (nothing of the other GPUs)."""
    pod = read_pod(core, ns, name)
    assert pod is not None and pod.status.container_statuses[0].state.running is not None, "no running container"
    visible, nodes = seen(core, ns, name)
    files = gres_files(core, node)
    assert files, f"the slurm-config ConfigMap's gres.conf has no GPU of {node}"
    assert visible.split(",") == uuids, f"the container sees NVIDIA_VISIBLE_DEVICES={visible!r}, the claim {uuids}"
    want = {files[i]: expected_node(files[i]) for i in indices}
    assert nodes == want, f"the container has device nodes {nodes}; Slurm's indices {indices} name {want}"


def native_running(native: Native, slurm: SlurmEnv, node: str, gres: str, name: str) -> int:
    """alice's native job holding ``gres`` on ``node``, once Slurm runs it."""
    job_id = native.submit(ALICE, "-w", node, f"--gres={gres}", "-c", "1", "--mem=64", "--chdir=/tmp", name=name)
    wait_for(lambda: started(slurm, job_id), 60, f"native {gres} job {job_id} running on {node}")
    return job_id


def test_a_gpu_pod_and_a_native_gpu_job_on_one_worker_each_get_their_own_gpu_in_real_containers(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    native: Native,
) -> None:  # fmt: skip
    ns = managed_namespace
    node = gpu_worker(core, custom, slurm_env, WHOLE_GRES)
    theirs = native_running(native, slurm_env, node, "gpu:1", "gpu-native")
    core.create_namespaced_pod(ns, gpu_pod("gpu-pod", node, WHOLE))
    job_id, held, devices = given(core, custom, slurm_env, ns, "gpu-pod", node)
    assert [d["type"] for d in devices] == ["gpu"], devices
    pod_idx = [d["index"] for d in devices]
    assert held == {"h100": pod_idx}, f"Slurm gave the pod's job {job_id} {held}, its claim {devices}"
    native_idx = job_gres(slurm_env, theirs).get("h100", [])
    assert len(native_idx) == 1 and sorted(native_idx + pod_idx) == [0, 1], (native_idx, pod_idx)
    assert node_gres_used(slurm_env, node) == "gpu:h100:2(IDX:0-1)"
    container_has(core, ns, "gpu-pod", node, [d["uuid"] for d in devices], pod_idx)


def test_a_mig_pod_and_a_native_mig_job_share_one_gpu_in_real_containers(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    native: Native,
) -> None:  # fmt: skip
    ns = managed_namespace
    node = gpu_worker(core, custom, slurm_env, MIG_GRES)
    theirs = native_running(native, slurm_env, node, "gpu:3g.40gb:1", "mig-native")
    assert job_gres(slurm_env, theirs) == {"3g.40gb": [4]}
    core.create_namespaced_pod(ns, gpu_pod("mig-pod", node, MIG1))
    job_id, held, devices = given(core, custom, slurm_env, ns, "mig-pod", node)
    assert [(d["type"], d["profile"]) for d in devices] == [("mig", "1g.10gb")], devices
    indices = slurm_indices(devices, slice_devices(custom, node))
    assert held == {"1g.10gb": indices}, f"Slurm gave the pod's job {job_id} {held}, its claim {devices}"
    used = node_gres_used(slurm_env, node)
    assert used.startswith("gpu:1g.10gb:1(IDX:") and used.endswith("gpu:3g.40gb:1(IDX:4)"), used
    container_has(core, ns, "mig-pod", node, [d["uuid"] for d in devices], indices)
