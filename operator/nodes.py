"""Node controller: Kubernetes cordons and Slurm DRAIN/DOWN/FAIL kept in step, both ways.

RBAC this controller needs (for the Helm chart's ClusterRole):
  - core ``nodes``: get, list, watch (kopf's watch and a re-read after a write conflict), patch
    (``spec.unschedulable``, ``spec.taints``, the bridge's annotations; no update, no delete)
  - core ``events``: create, in namespace ``default`` (where Events about Nodes go)
In Slurm, the bridge's JWT user must be allowed to update nodes (AdminLevel Operator or Admin).

Slurm is read with one node list per poll period, whatever the number of nodes; a node costs a
Slurm call only when the bridge changes its state there (DRAIN or UNDRAIN), and a Kubernetes node
that is not in Slurm never costs one. The decisions are in :mod:`.nodesync`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable
from typing import Any, cast
from urllib.parse import quote

from slurm_bridge.operator import nodesync
from slurm_bridge.operator.store import ObjectStore, WorkQueue

from slurm_bridge.config import Config
from slurm_bridge.kube import Conflict, KubeClient, NotFound
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmNotFound
from slurm_bridge.slurm.models import NodeInfo

log = logging.getLogger(__name__)
Obj = dict[str, Any]

# Every node is looked at again this often even without a change on either side, so a missed
# watch event or a failed write cannot leave a node out of step for long.
RESYNC_SECONDS = 60.0


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


def _fingerprint(n: NodeInfo) -> tuple[object, ...]:
    return (n.states, n.reason)


class NodeController:
    """Watches Kubernetes nodes (fed by kopf), lists Slurm nodes once a period, and reconciles."""

    def __init__(self, config: Config, kube: KubeClient, slurm: SlurmClient, *, workers: int = 4) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.nodes = ObjectStore()
        self.queue = WorkQueue(self._reconcile, workers=workers)
        # Slurm's nodes as of the last list; None until the first list succeeded.
        self.slurm_nodes: dict[str, NodeInfo] | None = None
        self.polls = 0
        self.healthy = False
        self.last_error = ""
        # Our own Slurm writes, as Slurm has them now, until a list started after the write shows
        # them; without this a list in flight during the write would make the write look undone.
        self._written: dict[str, tuple[NodeInfo, float]] = {}
        self._slurm_name: dict[str, str] = {}  # Kubernetes node -> Slurm node
        self._k8s_names: dict[str, set[str]] = {}  # Slurm node -> Kubernetes nodes
        self._warned: set[str] = set()
        # When each node last changed in a way decide() reads, and when the last node list began:
        # Slurm is written only from a list newer than the Kubernetes change the write answers,
        # so a drain or resume an administrator made meanwhile in Slurm is seen, not overwritten.
        self._changed_at: dict[str, float] = {}
        self._taken_at = 0.0
        self._after_poll: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.queue.start()
        self._task = asyncio.create_task(self._run(), name="slurm-node-poller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.queue.stop()

    # ---- Kubernetes side -----------------------------------------------------------------------
    def on_node_event(self, etype: str, node: Obj) -> None:
        name = node.get("metadata", {}).get("name", "")
        if not name:
            return
        old = self.nodes.get(("", name))
        if etype == "DELETED":
            self.nodes.delete(node)
            self._remap(name, None)
            self._changed_at.pop(name, None)
        else:
            self.nodes.upsert(node)
            current = self.nodes.get(("", name))
            if current is not None:
                self._remap(name, nodesync.slurm_name_of(current))
                if old is None or self._view(old) != self._view(current):
                    self._changed_at[name] = time.monotonic()
        self.queue.add(name)

    def _view(self, node: Obj) -> tuple[nodesync.KubeView, str]:
        return nodesync.kube_view(node, self.config.schedulerName), nodesync.slurm_name_of(node)

    def _remap(self, name: str, slurm_name: str | None) -> None:
        """Keep the Slurm -> Kubernetes index; nodes sharing a Slurm node may change roles."""
        old = self._slurm_name.get(name)
        if old == slurm_name:
            return
        if old is not None:
            self._k8s_names.get(old, set()).discard(name)
            if not self._k8s_names.get(old):
                self._k8s_names.pop(old, None)
            for other in self._k8s_names.get(old, ()):
                self.queue.add(other)
        if slurm_name is None:
            self._slurm_name.pop(name, None)
            return
        self._slurm_name[name] = slurm_name
        peers = self._k8s_names.setdefault(slurm_name, set())
        for other in peers:
            self.queue.add(other)
        peers.add(name)

    def _primary(self, slurm_name: str) -> str | None:
        """The one Kubernetes node whose state is synced with a Slurm node several map to."""
        mapped = self._k8s_names.get(slurm_name)
        if not mapped:
            return None
        return slurm_name if slurm_name in mapped else min(mapped)

    # ---- Slurm side --------------------------------------------------------------------------
    async def poll_once(self) -> None:
        """One node list; queue the Kubernetes nodes whose Slurm node changed."""
        taken_at = time.monotonic()
        listed = {n.name: n for n in await self.slurm.list_nodes()}
        self.polls += 1
        old, self.slurm_nodes, self._taken_at = self.slurm_nodes, listed, taken_at
        waiting, self._after_poll = self._after_poll, set()
        for name in waiting:
            self.queue.add(name)
        for name in [n for n, (_, at) in self._written.items() if at <= taken_at]:
            del self._written[name]
        if old is None:
            for obj in self.nodes.values():
                self.queue.add(obj["metadata"]["name"])
            return
        changed = set(old) ^ set(listed)
        changed |= {n for n in listed if n in old and _fingerprint(old[n]) != _fingerprint(listed[n])}
        for slurm_name in changed:
            for name in self._k8s_names.get(slurm_name, ()):
                self.queue.add(name)

    def slurm_node(self, name: str) -> NodeInfo | None:
        written = self._written.get(name)
        if written is not None:
            return written[0]
        return (self.slurm_nodes or {}).get(name)

    async def _run(self) -> None:
        period = self.config.pollPeriodSeconds
        backoff = period
        last_resync = time.monotonic()
        while True:
            started = time.monotonic()
            try:
                await self.poll_once()
                if not self.healthy:
                    log.info("Slurm node list OK (%d nodes)", len(self.slurm_nodes or {}))
                self.healthy, self.last_error, backoff = True, "", period
                delay = period
            except Exception as e:  # keep polling whatever went wrong; the error is reported
                self.healthy, self.last_error = False, str(e)
                log.warning("listing Slurm nodes failed, retrying in %.1fs: %s", backoff, e)
                delay, backoff = backoff, min(backoff * 2, 10.0)
            if time.monotonic() - last_resync >= RESYNC_SECONDS:
                last_resync = time.monotonic()
                for obj in self.nodes.values():
                    self.queue.add(obj["metadata"]["name"])
            await asyncio.sleep(max(0.0, delay - (time.monotonic() - started)))

    # ---- reconcile ---------------------------------------------------------------------------
    async def _reconcile(self, item: Hashable) -> float | None:
        name = cast(str, item)
        node = self.nodes.get(("", name))
        if node is None or self.slurm_nodes is None:
            return None  # the first node list queues every node again
        slurm_name = nodesync.slurm_name_of(node)
        info = self.slurm_node(slurm_name)
        primary = self._primary(slurm_name) in (None, name)
        if info is not None and not primary and name not in self._warned:
            self._warned.add(name)
            log.warning("nodes %s and %s both map to Slurm node %s; only %s is kept in step with it",
                        name, self._primary(slurm_name), slurm_name, self._primary(slurm_name))  # fmt: skip
        plan = nodesync.decide(
            nodesync.kube_view(node, self.config.schedulerName),
            nodesync.slurm_view(info) if info is not None else None,
            node=name,
            slurm_node=slurm_name,
            sync=primary,
        )
        if plan.slurm_action is not None and self._taken_at <= self._changed_at.get(name, 0.0):
            self._after_poll.add(name)  # decide again on the next node list
            return None
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
        if plan.slurm_action is not None and info is not None:
            try:
                await self.slurm.update_node(slurm_name, state=plan.slurm_action.value, reason=plan.slurm_reason)
            except SlurmNotFound:
                log.info("Slurm node %s vanished before %s; waiting for the next list", slurm_name, plan.slurm_action)
                return self.config.pollPeriodSeconds
            written = nodesync.after_slurm_action(info, plan.slurm_action, plan.slurm_reason)
            self._written[slurm_name] = (written, time.monotonic())
            log.info("Slurm node %s: %s (Kubernetes node %s)", slurm_name, plan.slurm_action.value, name)
            for e in plan.events:
                if e.side == "slurm":
                    await self.kube.event(ref, e.reason, e.message, warning=e.warning)
        patch = nodesync.node_patch(node, plan.kube, self.config.schedulerName)
        if patch is not None:
            try:
                updated = await self.kube.patch(node_path(name), patch)
            except Conflict:
                # Changed meanwhile (by an administrator, the kubelet or kwok): decide again on the
                # new version, taken in as a watch event would be (which also re-queues the node).
                fresh = await self.kube.get(node_path(name))
                if fresh is not None:
                    self.on_node_event("MODIFIED", fresh)
                return None
            except NotFound:
                return None
            self.nodes.upsert(updated)
            log.info("node %s: %s", name, "; ".join(e.reason for e in plan.events) or "markers updated")
            for e in plan.events:
                if e.side == "kubernetes":
                    await self.kube.event(ref, e.reason, e.message, warning=e.warning)
        return None
