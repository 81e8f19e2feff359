"""Which Slurm node a Kubernetes node stands for: read alike by the node controller (state sync,
registration) and the node guard. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects


def slurm_name_of(node: Mapping[str, Any]) -> str:
    """The Slurm node a Kubernetes node stands for: the mapping label, else the same name."""
    meta = objects.meta(node)
    return str((meta.get("labels") or {}).get(names.LABEL_SLURM_NODENAME) or meta.get("name", ""))
