"""A Kubernetes node's place in Slurm's network topologies as labels (docs/nodes.md#network-topology):
Slurm's ``topology`` of a node read into places, and the label changes that make a node's labels
exactly those places (the node controller writes them)."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.rules.topology import (
    parse_topology,
    placement_problem,
    topology_labels,
    topology_of_key,
    unit_sizes,
)
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import NodeInfo
from slurm_bridge.slurm.versions import codec_for
from tests.unit.fakes import FakeNodeView, FakeSlurm
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_phjsync import gated_pod, placeholderjob, shell, shell_kube, status_writes

pytestmark = pytest.mark.unit
BLOCK, SWITCH = names.LABEL_TOPOLOGY_PREFIX + "block", names.LABEL_TOPOLOGY_PREFIX + "switch"


def test_slurms_topology_of_a_node_is_its_place_in_each_topology() -> None:
    assert parse_topology("block:b1,switch:s1") == ({"block": "b1", "switch": "s1"}, [])
    assert parse_topology("") == ({}, [])
    long = "u" * 64
    places, problems = parse_topology(f"block:b1,tree:{long},broken")
    assert places == {"block": "b1"}
    assert len(problems) == 2 and "at most 63" in problems[0] and "is not <topology>:" in problems[1], problems
    assert parse_topology("t" * 63 + ":" + "u" * 63)[0] == {"t" * 63: "u" * 63}, "63 characters each: a label's limit"


def test_the_labels_become_exactly_slurms_places() -> None:
    assert topology_labels({}, {"block": "b1"}) == {BLOCK: "b1"}
    assert topology_labels({BLOCK: "b1", "other": "x"}, {"block": "b1"}) == {}
    assert topology_labels({BLOCK: "b1", SWITCH: "s1"}, {"block": "b2"}) == {BLOCK: "b2", SWITCH: None}
    assert topology_labels({BLOCK: "b1"}, {}) == {BLOCK: None}, "a node Slurm no longer places: its labels go"


def test_the_node_answer_carries_the_topology() -> None:
    body = {"nodes": [{"name": "n1", "topology": "block:b1,switch:s1"}, {"name": "n2"}]}
    nodes = codec_for("v0.0.45").decode_nodes(body)
    assert [(n.name, n.topology) for n in nodes] == [("n1", "block:b1,switch:s1"), ("n2", "")]


def test_a_gangs_key_names_a_slurm_topology() -> None:
    assert topology_of_key(BLOCK) == "block"
    assert topology_of_key(names.LABEL_TOPOLOGY_PREFIX + "t" * 63) == "t" * 63
    for key in ("topology.kubernetes.io/zone", "block", names.LABEL_TOPOLOGY_PREFIX, BLOCK + "/x", BLOCK + "-"):
        with pytest.raises(ValueError, match="use such a key"):
            topology_of_key(key)


def node(name: str, topology: str, *partitions: str) -> NodeInfo:
    return NodeInfo(name=name, topology=topology, partitions=partitions)


NODES = [
    node("n1", "block:b1,switch:s1", "tb", "flat"),
    node("n2", "block:b1,switch:s1", "tb", "flat"),
    node("n3", "block:b2,switch:s2", "tb", "flat"),
    node("n4", "block:b2,switch:s2", "flat"),
    node("n5", "", "tb"),
]


def test_each_units_size_counts_only_the_partitions_nodes() -> None:
    assert unit_sizes(NODES, "tb", "block") == {"b1": 2, "b2": 1}
    assert unit_sizes(NODES, "flat", "switch") == {"s1": 2, "s2": 2}
    assert unit_sizes(NODES, "tb", "dragonfly") == {}
    assert unit_sizes(NODES, "other", "block") == {}


@pytest.mark.parametrize(
    ("needed", "partition_topology", "sizes", "fragment"),
    [(2, "block", {"b1": 2, "b2": 1}, None),
     (3, "block", {"b1": 2, "b2": 1}, "needs 3 nodes within one block unit, but the largest in partition tb has 2"),
     (3, "block", {"b1": 2, "b2": 1}, "(b1: 2, b2: 1)"),
     (1, "block", {}, "no node of partition tb is in Slurm's topology block"),
     (1, "switch", {"b1": 2}, f"by topology switch (use the key {names.LABEL_TOPOLOGY_PREFIX}switch), not by block"),
     (1, "", {"b1": 2}, "by the cluster's default topology"),
     (1, None, {}, "Slurm has no partition tb")],
)  # fmt: skip
def test_a_gang_goes_only_where_one_unit_of_its_topology_holds_it(
    needed: int, partition_topology: str | None, sizes: dict[str, int], fragment: str | None
) -> None:
    problem = placement_problem("block", needed, "tb", partition_topology, sizes)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem, problem


# ---- the shell's submit (operator/placeholderjobs/sync/phjsync.py) ----------------------------------


def _topology_shell(
    slurm: FakeSlurm, tb: str | Exception = "block", listed: list[NodeInfo] | None = NODES
) -> tuple[FakeKube, PlaceholderJobs]:
    """A gang of 2 placed by block in partition tb (``tb``: its Topology=, or its read's error);
    ``listed``: Slurm's nodes as the node controller last listed them (None: not yet)."""
    kube = shell_kube({})
    phj = placeholderjob()
    phj["spec"]["slurm"] = {"nodes": 2, "topology": "block", "partition": "tb"}
    table = None if listed is None else {n.name: n for n in listed}
    jobs = shell(kube, slurm, phj, gated_pod(), [], FakeNodeView(table, topologies={"tb": tb}))
    return kube, jobs


async def test_a_gang_one_unit_holds_is_submitted_with_its_topology() -> None:
    slurm = FakeSlurm(next_id=7)
    _, jobs = _topology_shell(slurm)
    await jobs.reconcile(("ns", "p"))
    assert [(r.topology, r.nodes, r.partition) for r in slurm.requests] == [("block", 2, "tb")]


async def test_a_gang_no_unit_holds_is_not_sent_and_says_why() -> None:
    slurm = FakeSlurm(next_id=7)
    kube, jobs = _topology_shell(slurm, listed=NODES[2:])  # b2 has one node of tb
    requeue = await jobs.reconcile(("ns", "p"))
    assert slurm.requests == [], "nothing reaches Slurm"
    written = status_writes(kube)[-1]
    assert (
        written["reason"] == names.REASON_SUBMIT_REJECTED
        and "needs 2 nodes within one block unit" in written["message"]
    )
    assert requeue is not None and requeue > 0, "looked at again: Slurm's topology may change"


async def test_a_partition_slurm_cannot_be_asked_about_sends_nothing_and_is_retried() -> None:
    slurm = FakeSlurm(next_id=7)
    _, jobs = _topology_shell(slurm, SlurmUnavailable("slurmrestd unreachable"))
    with pytest.raises(SlurmUnavailable):  # the work queue's backoff retries it, as any unreachable Slurm
        await jobs.reconcile(("ns", "p"))
    assert slurm.requests == []


async def test_without_slurms_node_list_nothing_is_sent() -> None:
    slurm = FakeSlurm(next_id=7)
    kube, jobs = _topology_shell(slurm, listed=None)
    await jobs.reconcile(("ns", "p"))
    assert slurm.requests == [] and "node list is not read yet" in status_writes(kube)[-1]["message"]


async def test_a_partition_slurm_refuses_to_describe_is_said_on_the_placeholderjob() -> None:
    slurm = FakeSlurm(next_id=7)
    kube, jobs = _topology_shell(slurm, SlurmError("Access/permission denied"))
    requeue = await jobs.reconcile(("ns", "p"))
    assert slurm.requests == [] and requeue is not None and requeue > 0
    assert "its partition could not be read: Access/permission denied" in status_writes(kube)[-1]["message"]
