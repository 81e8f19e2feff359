"""Slurm's node table as the node controller knows it: one list per poll period, asking only for
a table changed since the last list (``update_time``: an unchanged one is answered without a
body), whole every FULL_LIST_SECONDS; and the bridge's own writes, as Slurm has them now, until a
list taken after the write shows them (without them a list in flight during the write would make
the write look undone)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from slurm_bridge.operator.nodes.nodesync import SlurmAction, after_slurm_action
from slurm_bridge.operator.nodes.setupcheck import SlurmSetupReads
from slurm_bridge.slurm.models import NodeInfo

# The node list is asked for whole (without ``update_time``) at least this often, whatever Slurm
# says about changes: the backstop if an "unchanged" answer were ever wrong.
FULL_LIST_SECONDS = 60.0


class SlurmNodes(SlurmSetupReads, Protocol):
    """The Slurm calls the node controller makes: one node list per period, the writes of the node
    sync (DRAIN, UNDRAIN) and of dynamic nodes (create, comment, delete; partitions checked first),
    and the reads of its check of Slurm's configuration (operator/nodes/setupcheck.py)."""

    async def list_nodes_since(self, since: int | None) -> tuple[list[NodeInfo] | None, int | None]: ...
    async def update_node(
        self, name: str, *, state: str | None = None, reason: str | None = None, comment: str | None = None
    ) -> None: ...
    async def create_node(self, node_conf: str) -> None: ...
    async def delete_node(self, name: str) -> bool: ...
    async def list_partitions(self) -> list[str]: ...


def _fingerprint(n: NodeInfo) -> tuple[object, ...]:
    return (n.states, n.reason)


def _allocation_changed(old: Mapping[str, NodeInfo], new: Mapping[str, NodeInfo]) -> set[str]:
    """The nodes that came or went, or whose CPUs or memory held by jobs changed."""
    if new is old:
        return set()
    changed = set(old) ^ set(new)
    return changed | {
        n
        for n, info in new.items()
        if n in old and (old[n].alloc_cpus, old[n].alloc_memory_mib) != (info.alloc_cpus, info.alloc_memory_mib)
    }


class SlurmNodeTable:
    def __init__(self, slurm: SlurmNodes) -> None:
        self.slurm = slurm
        # Slurm's nodes as of the last list; None until the first list succeeded. ``_last_update``:
        # the list's last_update (Slurm's clock) for the next one's update_time.
        self.listed: dict[str, NodeInfo] | None = None
        self.taken_at = 0.0  # when the last list began (monotonic)
        self._last_update: int | None = None
        self._last_full_list = 0.0
        self.polls = 0
        self.unchanged_lists = 0
        # Whether the last list came with a body: Slurm's node table changed since the one
        # before (a node's state, or any job's allocation or release), or it was a whole list.
        self.moved = False
        # The nodes whose allocation (CPUs or memory jobs hold) changed in the last list: a job
        # started, ended, moved or shrank there (None: not known, every node may have).
        self.allocation_changed: set[str] | None = None
        # The bridge's own writes, as Slurm has them now (None: the bridge deleted the node).
        self._written: dict[str, tuple[NodeInfo | None, float]] = {}

    async def list(self) -> set[str] | None:
        """One node list; the Slurm nodes that changed since the last (None: this was the first).

        An "unchanged" answer stands for a list taken now that equals the last one: it counts as
        a list for the writes and Kubernetes changes waiting for a newer list.
        """
        taken_at = time.monotonic()
        whole = self.listed is None or taken_at - self._last_full_list >= FULL_LIST_SECONDS
        nodes, self._last_update = await self.slurm.list_nodes_since(None if whole else self._last_update)
        self.polls += 1
        if whole:
            self._last_full_list = taken_at
        if nodes is None:
            self.unchanged_lists += 1
        self.moved = nodes is not None
        old = self.listed
        listed = old if nodes is None and old is not None else {n.name: n for n in nodes or []}
        self.listed, self.taken_at = listed, taken_at
        for name in [n for n, (_, at) in self._written.items() if at <= taken_at]:
            del self._written[name]
        self.allocation_changed = None if old is None else _allocation_changed(old, listed)
        if old is None:
            return None
        if listed is old:
            return set()
        changed = set(old) ^ set(listed)
        return changed | {n for n in listed if n in old and _fingerprint(old[n]) != _fingerprint(listed[n])}

    def node(self, name: str) -> NodeInfo | None:
        """Slurm node ``name`` as the bridge knows it now: its own write, else the last list's."""
        written = self._written.get(name)
        if written is not None:
            return written[0]
        return (self.listed or {}).get(name)

    def current(self) -> dict[str, NodeInfo] | None:
        """Every Slurm node as the bridge knows it now: the last list with the bridge's own writes
        since; None before the first list."""
        if self.listed is None:
            return None
        out = dict(self.listed)
        for name, (info, _) in self._written.items():
            if info is None:
                out.pop(name, None)
            else:
                out[name] = info
        return out

    async def set_drain(self, name: str, reason: str | None) -> None:
        """DRAIN node ``name`` with ``reason`` (None: UNDRAIN); the table shows the write at once, so
        no reader takes a list from before it for the node's state."""
        action = SlurmAction.DRAIN if reason is not None else SlurmAction.UNDRAIN
        await self.slurm.update_node(name, state=action.value, reason=reason)
        self.wrote(name, after_slurm_action(self.node(name) or NodeInfo(name=name, states=("IDLE",)), action, reason))

    def wrote(self, name: str, info: NodeInfo | None) -> None:
        """The bridge just wrote Slurm node ``name``: ``info`` is what Slurm holds now (None: deleted)."""
        self._written[name] = (info, time.monotonic())


def largest_cpus(nodes: Mapping[str, NodeInfo] | None, partitions: str | None, default: str) -> int | None:
    """The largest CPU count of a Slurm node in ``partitions`` (a comma list; None: ``default``),
    which an exclusive job may be given whole (a TenantPolicy's maxCPUs counts it so); 0 when no
    node is in them, None before the first node list."""
    if nodes is None:
        return None
    wanted = {p for p in (partitions or default).split(",") if p}
    return max((n.cpus for n in nodes.values() if wanted & set(n.partitions)), default=0)


def runs_native(nodes: Mapping[str, NodeInfo] | None, name: str) -> bool | None:
    """Whether Slurm node ``name`` runs native work (it has a slurmd: not EXTERNAL); None when the
    node table is not read yet or lacks it."""
    info = (nodes or {}).get(name)
    return None if info is None else "EXTERNAL" not in info.states
