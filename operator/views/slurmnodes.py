"""Slurm's nodes as the node controller knows them, and its drain and undrain: what the handoff loop
and the node guard ask of the one writer of Slurm node states (operator/nodes/), and what the
PlaceholderJob controller reads of them at each submit (:class:`NodeView`, given at construction)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from slurm_bridge.slurm.models import NodeInfo

log = logging.getLogger(__name__)


class NodeDrains(Protocol):
    """Slurm's nodes as the node controller knows them now (its last list and its own writes
    since), and its drain and undrain: the node controller is the one writer of node states."""

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None: ...
    async def set_drain(self, slurm_name: str, reason: str | None) -> None: ...


class NodeView(NodeDrains, Protocol):
    """What the PlaceholderJob controller reads of Slurm's nodes, from the node controller (the one
    reader of Slurm's node table): where a new job may go, where native work runs, the CPUs an
    exclusive job is counted with, a partition's topology, and its drains (DrainNodes)."""

    def listed_nodes(self) -> Mapping[str, NodeInfo] | None:
        """Slurm's nodes as last listed (None before the first list)."""
        ...

    def excluded_unfit_nodes(self) -> frozenset[str]:
        """The Slurm nodes new jobs are submitted without: their kubelet offers less than Slurm
        counts (``SlurmResourcesFit=False``; none while excludeUnfitNodes is off)."""
        ...

    def mig_slurm_nodes(self) -> frozenset[str]:
        """The Slurm nodes with MIG instances among their GPUs (no whole GPU from them)."""
        ...

    def device_mismatch_slurm_nodes(self) -> frozenset[str]:
        """The Slurm nodes whose MIG layout Slurm and the DRA driver do not share."""
        ...

    def runs_native(self, name: str) -> bool | None:
        """Whether Slurm node ``name`` runs native work (it has a slurmd: not EXTERNAL); None when
        the node table is not read yet or lacks it."""
        ...

    def largest_cpus(self, partitions: str | None) -> int | None:
        """The largest CPU count of a Slurm node in ``partitions`` (None: the bridge's default one);
        None before the first node list."""
        ...

    async def partition_topology(self, partition: str) -> str | None:
        """A partition's ``Topology=`` ("" the cluster's default; None: Slurm has no such partition)."""
        ...


class NodesNotRead:
    """A :class:`NodeView` for a process without a node controller (the replay bench): Slurm's
    nodes are not known, so a topology gang waits, an exclusive job under a CPU cap waits, no node
    is left out of a submit, a vanished pod's node is not known to run native work, and a drain
    is only logged."""

    def listed_nodes(self) -> Mapping[str, NodeInfo] | None:
        return None

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None:
        return None

    def excluded_unfit_nodes(self) -> frozenset[str]:
        return frozenset()

    def mig_slurm_nodes(self) -> frozenset[str]:
        return frozenset()

    def device_mismatch_slurm_nodes(self) -> frozenset[str]:
        return frozenset()

    def runs_native(self, name: str) -> bool | None:
        return None

    def largest_cpus(self, partitions: str | None) -> int | None:
        return None

    async def partition_topology(self, partition: str) -> str | None:
        raise LookupError(f"partition {partition}: no node controller reads Slurm here")

    async def set_drain(self, slurm_name: str, reason: str | None) -> None:
        log.warning("Slurm node %s not drained: no node controller writes node states here", slurm_name)
