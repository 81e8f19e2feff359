"""The real node is a hybrid node: one host runs a real kubelet with a real container and a real
slurmd with a real batch process. What the tests of it share: the node's own image, and the
processes of a container (from its cgroup) and their user. A pod bound to the node past the bridge
is refused by the node guard (tests/e2e/test_other_doors.py); a bridge pod and a tenant's batch job
run there at once in tests/e2e/test_node_sharing.py (coResident)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client as k8s

from tests.harness import REPO, run

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
