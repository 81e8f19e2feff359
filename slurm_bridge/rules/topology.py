"""A Kubernetes node's place in Slurm's network topologies, as labels (docs/nodes.md#network-topology).

Slurm 26.05 reports a node's place as its ``topology``: ``<topology>:<unit>`` pairs, one per
topology of topology.yaml the node is in (``blocks:b1,tree:s1``), as slurm.conf's or ``scontrol
update``'s ``Topology=`` sets it. The node controller mirrors it into labels
``topology.slinky.slurm.net/<topology>=<unit>``, which it alone writes: a label under the prefix
that Slurm does not give is removed. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from slurm_bridge import names

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
