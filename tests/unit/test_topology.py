"""A Kubernetes node's place in Slurm's network topologies as labels (docs/nodes.md#network-topology):
Slurm's ``topology`` of a node read into places, and the label changes that make a node's labels
exactly those places (the node controller writes them)."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.rules.topology import parse_topology, topology_labels
from slurm_bridge.slurm.versions import codec_for

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
