"""Slurm's network topology on the kind cluster's workers (issue 38 §3; docs/nodes.md#network-topology):
the kind Slurm has the local cluster's two topologies, each worker a block and a leaf switch of its
own (hack/cluster/slurm-conf.sh topology_yaml workers=...), and the chart-installed bridge labels
each worker with its place, as ``scontrol show topology`` says (read here independently of the
bridge). Run with SB_CLUSTER=kind (hack/test.sh's kind tier)."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.e2e.test_topology import SYNC, labels_of, slurm_places
from tests.harness import SlurmEnv, wait_for
from tests.kind.test_hybrid import worker_names


def test_every_worker_carries_its_block_and_leaf_switch(core: k8s.CoreV1Api, slurm_env: SlurmEnv) -> None:
    workers = worker_names(core)
    places = slurm_places(slurm_env)
    want = {w: places.get(w, {}) for w in workers}
    assert all(set(p) == {"block", "switch"} for p in want.values()), f"a worker is in no topology: {want}"
    assert len({p["block"] for p in want.values()}) == len(workers), f"each worker its own block: {want}"

    def differ() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
        now = labels_of(core)
        return {w: (now.get(w, {}), p) for w, p in want.items() if now.get(w, {}) != p}

    wait_for(lambda: not differ(), SYNC, "the workers' topology labels as Slurm says")
    assert not differ(), differ()
