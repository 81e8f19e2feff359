"""A Kubernetes node's place in Slurm's network topologies, as labels (docs/nodes.md#network-topology),
and a gang placed by them (docs/workloads.md#topology).

Slurm 26.05 reports a node's place as its ``topology``: ``<topology>:<unit>`` pairs, one per
topology of topology.yaml the node is in (``blocks:b1,tree:s1``), as slurm.conf's or ``scontrol
update``'s ``Topology=`` sets it. The node controller mirrors it into labels
``topology.slinky.slurm.net/<topology>=<unit>``, which it alone writes: a label under the prefix
that Slurm does not give is removed.

A gang asks to be placed within one unit of a topology with such a label key (a PodGroup's
``schedulingConstraints.topology``, or the ``slurmjob.slinky.slurm.net/topology`` annotation). Slurm
places a job by the topology its partition names (``Topology=``), so the bridge submits the gang
only where that is the topology asked for and where one unit can hold it; Slurm then keeps it in
one block (``segment_size``, topology/block) or under one leaf switch (``required_switches``,
topology/tree). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from slurm_bridge import names
from slurm_bridge.slurm.models import NodeInfo

# A label name segment and a label value (at most 63 characters, alphanumerics at both ends).
_SEGMENT: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def parse_topology(text: str) -> tuple[dict[str, str], list[str]]:
    """({topology: unit}, problems) of a Slurm node's ``topology``; a pair that cannot be a label
    (a name or unit longer than 63 characters, or with other characters) is a problem, not a label."""
    places: dict[str, str] = {}
    problems: list[str] = []
    for item in filter(None, (i.strip() for i in (text or "").split(","))):
        name, sep, unit = item.partition(":")
        if not sep or not name or not unit:
            problems.append(f"{item!r} is not <topology>:<block or switch>")
        elif not _SEGMENT.match(name) or not _SEGMENT.match(unit):
            problems.append(
                f"{item!r}: a label {names.LABEL_TOPOLOGY_PREFIX}<topology>=<unit> takes at most 63 letters, digits, "
                "'-', '_' or '.' on each side; rename it in topology.yaml"
            )
        else:
            places[name] = unit
    return places, problems


def topology_labels(labels: Mapping[str, str], places: Mapping[str, str]) -> dict[str, str | None]:
    """The labels to set (a value) and remove (None) so that the node's topology labels are exactly
    ``places``; empty when they are."""
    want = {names.LABEL_TOPOLOGY_PREFIX + name: unit for name, unit in places.items()}
    change: dict[str, str | None] = {k: v for k, v in want.items() if labels.get(k) != v}
    change.update({k: None for k in labels if k.startswith(names.LABEL_TOPOLOGY_PREFIX) and k not in want})
    return change


def topology_of_key(key: str) -> str:
    """The Slurm topology a gang's topology key names (``topology.slinky.slurm.net/<topology>``);
    ValueError, saying what would work, for a key the bridge cannot place by."""
    prefix = names.LABEL_TOPOLOGY_PREFIX
    name = key.removeprefix(prefix)
    if key.startswith(prefix) and _SEGMENT.match(name):
        return name
    raise ValueError(
        f"the bridge cannot place a gang by {key!r}: Slurm places a gang within one block or leaf switch of "
        f"one of its topologies, which the bridge labels nodes with as {prefix}<topology> (e.g. {prefix}block; "
        f"see kubectl get nodes --show-labels); use such a key"
    )


def unit_sizes(nodes: Iterable[NodeInfo], partition: str, topology: str) -> dict[str, int]:
    """{unit: its number of nodes in ``partition``} of ``topology`` (units of no node there are left out)."""
    sizes: dict[str, int] = {}
    for node in nodes:
        if partition in node.partitions:
            unit = parse_topology(node.topology)[0].get(topology)
            if unit:
                sizes[unit] = sizes.get(unit, 0) + 1
    return sizes


def placement_problem(
    topology: str, needed: int, partition: str, partition_topology: str | None, sizes: Mapping[str, int]
) -> str | None:
    """Why Slurm cannot place a gang of ``needed`` nodes within one unit of ``topology`` in
    ``partition`` (whose ``Topology=`` is ``partition_topology``: "" for the cluster's default, None
    for no such partition), or None when it can; ``sizes``: :func:`unit_sizes`."""
    label = names.LABEL_TOPOLOGY_PREFIX + topology
    if partition_topology is None:
        return f"Slurm has no partition {partition}"
    if partition_topology != topology:
        places = (
            f"by topology {partition_topology} (use the key {names.LABEL_TOPOLOGY_PREFIX}{partition_topology})"
            if partition_topology
            else "by the cluster's default topology (its PartitionName line names no Topology=)"
        )
        return (
            f"{label}: partition {partition} places its jobs {places}, not by {topology}; submit the gang to a "
            f"partition with Topology={topology} ({names.ANN_PARTITION})"
        )
    largest = max(sizes.values(), default=0)
    if largest >= needed:
        return None
    if not sizes:
        return f"{label}: no node of partition {partition} is in Slurm's topology {topology}"
    listed = ", ".join(f"{u}: {n}" for u, n in sorted(sizes.items()))
    return (
        f"{label}: the gang needs {needed} nodes within one {topology} unit, but the largest in partition "
        f"{partition} has {largest} ({listed}), so Slurm could only spread it; make the gang smaller, or drop the "
        "topology constraint"
    )
