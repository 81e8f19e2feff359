"""Slurm's nodes as the node controller knows them, and its drain and undrain: what the handoff loop
and the node guard ask of the one writer of Slurm node states (operator/nodes/)."""

from __future__ import annotations

from typing import Protocol

from slurm_bridge.slurm.models import NodeInfo


class NodeDrains(Protocol):
    """Slurm's nodes as the node controller knows them now (its last list and its own writes
    since), and its drain and undrain: the node controller is the one writer of node states."""

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None: ...
    async def set_drain(self, slurm_name: str, reason: str | None) -> None: ...
