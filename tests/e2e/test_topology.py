"""Slurm's network topology seen in Kubernetes (issue 38 §3; docs/nodes.md#network-topology).

The local cluster's Slurm has two topologies beside its flat default (hack/cluster/slurm-conf.sh):
``block`` (topology/block) and ``switch`` (topology/tree), each node's place also on its NodeName
line. The node controller labels each Kubernetes node ``topology.slinky.slurm.net/<topology>`` with
its block or leaf switch. Read here independently of the bridge: ``scontrol show topology``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import hostlist
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
TOPOLOGIES = ("block", "switch")
SYNC = 90  # the node controller's whole node list (60 s: a Topology= update does not mark Slurm's table changed)


def slurm_places(slurm: SlurmEnv) -> dict[str, dict[str, str]]:
    """node -> {topology: its block, or its leaf switch}, from ``scontrol show topology <name>``."""
    out: dict[str, dict[str, str]] = {}
    for topo in TOPOLOGIES:
        for line in slurm.scontrol("show", "topology", topo).splitlines():
            m = re.match(r"\s*(?:BlockName|SwitchName)=(\S+)(.*)", line)
            if not m or (topo == "switch" and "Level=0" not in m.group(2)):
                continue  # aggregated blocks and upper switches are not a node's own place
            nodes = re.search(r"Nodes=(\S+)", m.group(2))
            for node in hostlist.expand_hostlist(nodes.group(1)) if nodes else []:
                out.setdefault(node, {})[topo] = m.group(1)
    return out


def labels_of(core: k8s.CoreV1Api) -> dict[str, dict[str, str]]:
    """node -> {topology: label value} of every Kubernetes node."""
    prefix = names.LABEL_TOPOLOGY_PREFIX
    return {
        n.metadata.name: {
            k.removeprefix(prefix): v for k, v in (n.metadata.labels or {}).items() if k.startswith(prefix)
        }
        for n in core.list_node().items
    }


@pytest.fixture
def moved(slurm_env: SlurmEnv) -> Iterator[list[tuple[str, str]]]:
    """(node, its Topology= before) of each node a test moves; put back at the end."""
    done: list[tuple[str, str]] = []
    yield done
    for node, topology in done:
        slurm_env.scontrol("update", f"nodename={node}", f"topology={topology}")


def test_nodes_carry_their_place_in_each_slurm_topology_and_follow_a_change(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, moved: list[tuple[str, str]]
) -> None:
    places = slurm_places(slurm_env)
    assert len({p.get("block") for p in places.values()}) >= 2, f"the cluster's Slurm has fewer than 2 blocks: {places}"
    kube_nodes = set(labels_of(core))
    want = {n: places.get(n, {}) for n in kube_nodes}
    assert any(want.values()), f"no Kubernetes node is in Slurm's topology: {sorted(kube_nodes)} / {places}"

    def differ() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
        """node -> (its labels, Slurm's places) where they differ."""
        now = labels_of(core)
        return {n: (now.get(n, {}), w) for n, w in want.items() if now.get(n, {}) != w}

    wait_for(lambda: not differ(), SYNC, "topology labels as Slurm says")
    assert not differ(), differ()
    assert labels_of(core)[slurm_env.real_node] == {}, "a node in no topology has no topology labels"

    # Slurm moves a node to another block and leaf switch: its labels follow.
    node = next(n for n in sorted(want) if want[n].get("block"))
    other = next(n for n in sorted(want) if want[n].get("block") not in (None, want[node]["block"]))
    moved.append((node, f"block:{want[node]['block']},switch:{want[node]['switch']}"))
    slurm_env.scontrol(
        "update", f"nodename={node}", f"topology=block:{want[other]['block']},switch:{want[other]['switch']}"
    )
    assert slurm_places(slurm_env)[node] == want[other], "Slurm did not move the node"
    wait_for(lambda: labels_of(core)[node] == want[other] or None, SYNC, f"{node}'s labels moved to {want[other]}")
