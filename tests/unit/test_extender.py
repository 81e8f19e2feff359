"""The extender's filter: only the node Slurm allocated passes."""

from __future__ import annotations

from typing import Any

from slurm_bridge.extender.filter import filter_nodes
from slurm_bridge.extender.protocol import ExtenderArgs

from slurm_bridge import names


def _args(annotations: dict[str, str], node_names: list[str] | None = None, nodes: bool = False) -> ExtenderArgs:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "n", "annotations": annotations}}
    if nodes:
        items = [{"metadata": {"name": n}} for n in node_names or []]
        return ExtenderArgs.model_validate({"Pod": pod, "Nodes": {"items": items}})
    return ExtenderArgs.model_validate({"Pod": pod, "NodeNames": node_names})


def test_only_the_allocated_node_passes() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "b"}, ["a", "b", "c"]))
    assert r.NodeNames == ["b"]
    assert set(r.FailedNodes) == {"a", "c"}
    assert "Slurm allocated node b" in r.FailedNodes["a"]
    assert r.FailedAndUnresolvableNodes == {}


def test_full_node_objects_are_filtered_too() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "c"}, ["a", "c"], nodes=True))
    assert r.Nodes is not None and [n["metadata"]["name"] for n in r.Nodes.items] == ["c"]


def test_unallocated_pod_fails_everywhere_as_unresolvable() -> None:
    r = filter_nodes(_args({}, ["a", "b"]))
    assert r.NodeNames == []
    assert set(r.FailedAndUnresolvableNodes) == {"a", "b"}
    assert "waiting for Slurm" in r.FailedAndUnresolvableNodes["a"]


def test_allocated_node_missing_from_candidates_passes_nothing() -> None:
    r = filter_nodes(_args({names.ANN_SLURM_NODE: "z"}, ["a"]))
    assert r.NodeNames == [] and set(r.FailedNodes) == {"a"}


def test_wire_format_uses_go_field_names() -> None:
    dumped = filter_nodes(_args({names.ANN_SLURM_NODE: "a"}, ["a"])).model_dump(exclude_none=True)
    assert set(dumped) >= {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
