"""The real node is a hybrid node: one host runs a real kubelet with a real container and a real
slurmd with a real batch process, at the same time (issue 28 §1). The pod is a plain pod bound to
the node (what Slurm's and Kubernetes' sharing of it will be is the bridge's work, not this test's);
the batch job is a tenant's native job in the real node's partition."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.harness import (
    CLUSTER_SH,
    REPO,
    TENANTS,
    SlurmEnv,
    holds_for,
    run,
    sbatch_as,
    squeue_state,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("bridge")  # the bridge runs: the node carries its managed-node taint
ALICE = TENANTS["a"]
CGROUP_PIDS = Path("/sys/fs/cgroup/pids")  # this machine has cgroup v1 (docs/development.md)


@pytest.fixture(scope="module")
def node_image() -> str:
    """An image the real node already has (its sandbox image, made by hack/image.sh and imported by
    hack/node.sh): nothing is pulled, there is no registry."""
    ref = run(["bash", str(REPO / "hack" / "image.sh"), "ref", "pause"]).stdout.strip()
    images = run(["bash", str(REPO / "hack" / "node.sh"), "ctr", "images", "ls", "-q"]).stdout.split()
    assert ref in images, f"the real node's containerd lacks {ref} (hack/node.sh up imports it); it has {images}"
    return ref


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Uid:")))


def container_pids(pod: k8s.V1Pod) -> list[int]:
    """The processes of the pod's container, from its cgroup (the kubelet's cgroupfs driver)."""
    statuses = pod.status.container_statuses or []
    if not statuses or not statuses[0].container_id:
        return []
    cid = statuses[0].container_id.split("://")[-1]
    procs = list(CGROUP_PIDS.glob(f"kubepods/**/{cid}/cgroup.procs"))
    return [int(p) for f in procs for p in f.read_text().split()]


def test_a_real_container_and_a_real_batch_process_run_on_the_real_node_at_once(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, namespace: str, node_image: str
) -> None:
    node = slurm_env.real_node
    pod_body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "beside-slurm"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],  # the real node's taint, and the bridge's
            "containers": [
                {
                    "name": "main",
                    "image": node_image,
                    "imagePullPolicy": "Never",
                    "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
                }
            ],
            "restartPolicy": "Never",
        },
    }
    core.create_namespaced_pod(namespace, pod_body)
    marker = f"/tmp/beside-pod-{secrets.token_hex(4)}.pid"
    script = f"#!/bin/sh\necho $$ > {marker}\nexec sleep 600\n"
    options = ["-p", slurm_env.real_partition, "-w", node, "-A", ALICE.accounts[0], "-n", "1", "--mem=64"]
    job_id = sbatch_as(slurm_env, ALICE.user, script, *options, "-o", "/dev/null", "-J", "beside-pod")
    pidfile = Path(f"{slurm_env.root}{marker}")
    try:

        def both_running() -> tuple[list[int], int] | None:
            pod = core.read_namespaced_pod("beside-slurm", namespace)
            running = pod.status.phase == "Running" and pod.status.container_statuses[0].state.running is not None
            if not running or squeue_state(slurm_env, job_id) != "RUNNING" or not pidfile.exists():
                return None
            batch, containers = int(pidfile.read_text()), container_pids(pod)
            if not containers or not Path(f"/proc/{batch}").exists() or uid_of(batch) != ALICE.uid:
                return None
            return containers, batch

        containers, batch = wait_for(both_running, 60, f"pod and batch job {job_id} both running on {node}")
        holds_for(both_running, 3, f"the container {containers} and batch process {batch} running together")
        print(f"on {node}: container processes {containers}, batch job {job_id} process {batch} (uid {ALICE.uid})")
    finally:
        run(["bash", str(CLUSTER_SH), "slurm", "scancel", str(job_id)], check=False)
        core.delete_namespaced_pod("beside-slurm", namespace, grace_period_seconds=0)
        wait_for(lambda: squeue_state(slurm_env, job_id) == "", 60, f"batch job {job_id} to leave the queue")
        pidfile.unlink(missing_ok=True)
