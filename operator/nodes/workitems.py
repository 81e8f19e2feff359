"""The node controller's work items, typed: a Kubernetes node to keep in step with its Slurm node,
and a Slurm node this bridge registered whose Kubernetes node the cache does not hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True, order=True)
class NodeItem:
    """Keep Kubernetes node ``name`` and its Slurm node in step (and its registration)."""

    name: str
    kind: ClassVar[str] = "node"


@dataclass(frozen=True, slots=True, order=True)
class RegisteredNodeItem:
    """Slurm node ``slurm_name``, registered by this bridge for Kubernetes node ``node``, which no
    cached node maps to (the Kubernetes node may be gone: the registration is then taken out)."""

    slurm_name: str
    node: str
    kind: ClassVar[str] = "node"


NodeWork = NodeItem | RegisteredNodeItem
