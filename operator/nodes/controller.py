"""Node controller: Kubernetes cordons and Slurm DRAIN/DOWN/FAIL kept in step, both ways.

RBAC this controller needs (for the Helm chart's ClusterRole):
  - core ``nodes``: get, list, watch (kopf's watch and a re-read after a write conflict), patch
    (``spec.unschedulable``, ``spec.taints``, the bridge's annotations; no update, no delete)
  - core ``events``: create, in namespace ``default`` (where Events about Nodes go)
In Slurm, the bridge's JWT user must be allowed to update nodes (AdminLevel Operator or Admin).

Slurm is read with one node list per poll period, whatever the number of nodes, asking only for a
table changed since the last list (``update_time``: an unchanged one is answered without a body),
with a whole list every FULL_LIST_SECONDS; a node costs a Slurm call only when the bridge changes
its state there (DRAIN or UNDRAIN), and a Kubernetes node that is not in Slurm never costs one.
A Kubernetes node event that changes nothing the bridge reads (a status heartbeat) queues no
reconcile. The decisions are in :mod:`.nodesync`.

It also registers labelled Kubernetes nodes as Slurm dynamic nodes and takes them out again
(:mod:`.registration` decides; this needs a token allowed to create and delete nodes, i.e. a
Slurm administrator's). The partitions are read only when a node is about to be created. And it
keeps each node's ``SlurmResourcesFit`` condition (:mod:`.resourcesfit`; RBAC: core
``nodes/status`` patch, pods list) and checks Slurm's side of node sharing (:mod:`.setupcheck`).
A node one of whose GPUs is tainted in Kubernetes is drained in Slurm (:mod:`.devicetaints`;
RBAC: ``resourceslices`` and ``devicetaintrules`` list, watch).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from slurm_bridge import names
from slurm_bridge.core import metrics, objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import escape_pointer
from slurm_bridge.core.objects import Obj
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube.cache import taint_rules_cache
from slurm_bridge.kube.client import Conflict, NotFound, node_path
from slurm_bridge.kube.seams import NodeKube
from slurm_bridge.operator.nodes import devicematch, devicetaints, nodesync, resourcesfit
from slurm_bridge.operator.nodes import registration as reg
from slurm_bridge.operator.nodes.devicematch import DeviceMatch
from slurm_bridge.operator.nodes.resourcesfit import ResourcesFit
from slurm_bridge.operator.nodes.setupcheck import SetupCheck
from slurm_bridge.operator.nodes.slurmnodes import SlurmNodes, SlurmNodeTable, largest_cpus, runs_native
from slurm_bridge.operator.nodes.workitems import NodeItem, NodeWork, RegisteredNodeItem
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules import topology
from slurm_bridge.rules.dra.gres import mig_node
from slurm_bridge.rules.nodenames import slurm_name_of
from slurm_bridge.slurm.errors import SlurmError, SlurmNotFound
from slurm_bridge.slurm.models import NodeInfo

log = logging.getLogger(__name__)

# Every node is looked at again this often even without a change on either side, so a missed
# watch event or a failed write cannot leave a node out of step for long.
RESYNC_SECONDS = 60.0
# Slurm's partition names are read again at most this often (only before a node is registered).
PARTITIONS_TTL_SECONDS = 30.0


def _same_but_version(a: Obj, b: Obj) -> bool:
    """Two stored nodes (projections) equal apart from their resourceVersion."""
    ma, mb = objects.meta(a), objects.meta(b)
    if ma.keys() != mb.keys() or a.keys() != b.keys():
        return False
    return all(ma[k] == mb[k] for k in ma if k != "resourceVersion") and all(a[k] == b[k] for k in a if k != "metadata")


class NodeController:
    """Watches Kubernetes nodes (fed by kopf), lists Slurm nodes once a period, and reconciles."""

    def __init__(
        self,
        config: Config,
        kube: NodeKube,
        slurm: SlurmNodes,
        *,
        workers: int = 4,
        on_slurm_change: Callable[[set[str] | None], None] | None = None,
    ) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.nodes = ObjectStore()
        self.queue: WorkQueue[NodeWork] = WorkQueue(self._reconcile, workers=workers)
        self.table = SlurmNodeTable(slurm)  # Slurm's node table, with the bridge's own writes
        self.fit = ResourcesFit(kube, config.schedulerName)
        # Slurm's GPUs and the DRA driver's, node by node (docs/gpus.md): a slice change queues its node.
        self.devices = DeviceMatch(kube, lambda node: self.queue.add(NodeItem(node)))
        self._slices_task: asyncio.Task[None] | None = None
        # The DeviceTaintRules (docs/gpus.md, "Device taints"): a change may select any node's devices.
        self.taint_rules = taint_rules_cache(kube, lambda _name, _obj: self._queue_every_node())
        self._rules_task: asyncio.Task[None] | None = None
        self.setup = SetupCheck(config, slurm)
        self._loop = PollLoop(
            "slurm-node-poller",
            config.pollPeriodSeconds,
            self.poll_once,
            log=log,
            ok_message=lambda: f"Slurm node list OK ({len(self.table.listed or {})} nodes)",
            failed="listing Slurm nodes",
            after=self._resync_due,
        )
        self._last_resync = 0.0
        self._slurm_name: dict[str, str] = {}  # Kubernetes node -> Slurm node
        self._k8s_names: dict[str, set[str]] = {}  # Slurm node -> Kubernetes nodes
        self._warned: set[str] = set()
        # When each node last changed in a way decide() reads, and when the last node list began:
        # Slurm is written only from a list newer than the Kubernetes change the write answers,
        # so a drain or resume an administrator made meanwhile in Slurm is seen, not overwritten.
        self._changed_at: dict[str, float] = {}
        self._after_poll: set[str] = set()
        self._partitions: tuple[frozenset[str], float] | None = None
        # Kubernetes node -> (node line, why): a registration taken out again after it was made;
        # not tried again until the node's labels ask for another line. Memory only: after a
        # restart it is tried once more, which costs one create and one delete.
        self._refused: dict[str, tuple[str, str]] = {}
        self._told: dict[str, str] = {}  # Kubernetes node -> the last registration warning sent
        self._told_topology: dict[str, str] = {}  # Kubernetes node -> its topology problems told
        # Told after each list that found Slurm's node table changed (wiring: the job poller,
        # which skips its state polls while no job can have started or ended).
        # With the nodes whose allocation changed (None: any may have), so that the running jobs
        # there are read again (a job its owner moved or shrank: docs/security.md).
        self._on_slurm_change = on_slurm_change

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    @property
    def last_error(self) -> str:
        return self._loop.last_error

    def start(self) -> None:
        self.queue.start()
        self._last_resync = time.monotonic()
        self._loop.start()
        self._slices_task = asyncio.create_task(self.devices.slices.run(), name="resourceslices-watch")
        self._rules_task = asyncio.create_task(self.taint_rules.run(), name="devicetaintrules-watch")

    async def stop(self) -> None:
        tasks = [t for t in (self._slices_task, self._rules_task) if t is not None]
        if tasks:
            await cancel_and_wait(tasks)
        self._slices_task = self._rules_task = None
        await self._loop.stop()
        await self.queue.stop()

    # ---- Kubernetes side -----------------------------------------------------------------------
    def on_node_event(self, etype: str, node: Obj) -> None:
        metrics.node_event()
        name = objects.name(node) or ""
        if not name:
            return
        old = self.nodes.get(("", name))
        if etype == "DELETED":
            self.nodes.delete(node)
            self._remap(name, None)
            self._changed_at.pop(name, None)
            self.fit.forget(name)
        else:
            self.nodes.upsert(node)
            current = self.nodes.get(("", name))
            if current is not None:
                self._remap(name, slurm_name_of(current))
                if old is None or self._view(old) != self._view(current):
                    self._changed_at[name] = time.monotonic()
                if old is not None and _same_but_version(old, current):
                    return  # a status heartbeat (the projection has no conditions): nothing to decide
        self.queue.add(NodeItem(name))

    def _queue_every_node(self) -> None:
        for obj in self.nodes.values():
            self.queue.add(NodeItem(obj["metadata"]["name"]))

    def _view(self, node: Obj) -> tuple[nodesync.KubeView, str]:
        return nodesync.kube_view(node, self.config.schedulerName), slurm_name_of(node)

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
                self.queue.add(NodeItem(other))
        if slurm_name is None:
            self._slurm_name.pop(name, None)
            return
        self._slurm_name[name] = slurm_name
        peers = self._k8s_names.setdefault(slurm_name, set())
        for other in peers:
            self.queue.add(NodeItem(other))
        peers.add(name)

    def _primary(self, slurm_name: str) -> str | None:
        """The one Kubernetes node whose state is synced with a Slurm node several map to."""
        mapped = self._k8s_names.get(slurm_name)
        if not mapped:
            return None
        return slurm_name if slurm_name in mapped else min(mapped)

    def unfit_slurm_nodes(self) -> frozenset[str]:
        """The Slurm nodes whose Kubernetes node says ``SlurmResourcesFit=False`` (its kubelet offers
        less than Slurm counts): new jobs are submitted without them (``translate.exclude_unfit``).
        Read from the node store, which keeps that one condition; no call."""
        return frozenset(
            slurm_name_of(node)
            for node in self.nodes.values()
            if (resourcesfit.current(node) or {}).get("status") == "False"
        )

    def mig_slurm_nodes(self) -> frozenset[str]:
        """The Slurm nodes with MIG instances among their GPUs (``mig_node``): jobs asking for
        untyped GPUs are submitted without them (``translate.exclude_mig_nodes``). From the last
        node list; no call."""
        return frozenset(n.name for n in (self.table.listed or {}).values() if mig_node(n.gres))

    def device_mismatch_slurm_nodes(self) -> frozenset[str]:
        """The Slurm nodes whose Kubernetes node says ``SlurmDevicesMatch=False`` (a MIG layout
        Slurm and the DRA driver do not share): MIG jobs are submitted without them
        (``translate.exclude_mig_nodes``). From the node store; no call."""
        return frozenset(slurm_name_of(node) for node in self.nodes.values() if devicematch.differs(node))

    def excluded_unfit_nodes(self) -> frozenset[str]:
        """The Slurm nodes new jobs are submitted without for their fit: :meth:`unfit_slurm_nodes`
        while excludeUnfitNodes is on, else none."""
        return self.unfit_slurm_nodes() if self.config.excludeUnfitNodes else frozenset()

    # ---- Slurm side --------------------------------------------------------------------------
    @property
    def slurm_nodes(self) -> dict[str, NodeInfo] | None:
        return self.table.listed

    # What the PlaceholderJob controller reads of Slurm's nodes (views.slurmnodes.NodeView).
    def listed_nodes(self) -> dict[str, NodeInfo] | None:
        """Slurm's nodes as last listed (None before the first list)."""
        return self.table.listed

    def runs_native(self, name: str) -> bool | None:
        """Whether Slurm node ``name`` runs native work: a vanished pod holds its job only there
        (docs/colocation.md); None while not known."""
        return runs_native(self.table.listed, name)

    def largest_cpus(self, partitions: str | None) -> int | None:
        """The largest CPU count of a node in ``partitions`` (None: the bridge's default partition):
        an exclusive job under a TenantPolicy's maxCPUs counts as its nodes' CPUs (docs/tenancy.md)."""
        return largest_cpus(self.table.listed, partitions, self.config.partition)

    async def partition_topology(self, partition: str) -> str | None:
        """A partition's Topology= ("" the cluster's default; None: Slurm has no such partition): a
        gang placed by a topology goes only where one unit holds it (docs/workloads.md#topology)."""
        found = await self.slurm.partition(partition)
        return None if found is None else found.topology

    @property
    def polls(self) -> int:
        return self.table.polls

    @property
    def unchanged_lists(self) -> int:
        return self.table.unchanged_lists

    def slurm_node(self, name: str) -> NodeInfo | None:
        return self.table.node(name)

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None:
        """Slurm's nodes with the bridge's own writes since the last list (None before it)."""
        return self.table.current()

    async def set_drain(self, slurm_name: str, reason: str | None) -> None:
        """Drain Slurm node ``slurm_name`` with ``reason`` (None: undrain) for another controller
        (the handoff loop): the node controller is the one writer of Slurm node states."""
        await self.table.set_drain(slurm_name, reason)

    async def poll_once(self) -> None:
        """One node list; queue the Kubernetes nodes whose Slurm node changed, and those waiting
        for a list newer than their change."""
        changed = await self.table.list()
        await self.setup.maybe_run()
        if self.table.moved and self._on_slurm_change is not None:
            self._on_slurm_change(self.table.allocation_changed)
        waiting, self._after_poll = self._after_poll, set()
        for name in waiting:
            self.queue.add(NodeItem(name))
        listed = self.table.listed or {}
        if changed is None:  # the first list: every node
            for obj in self.nodes.values():
                self.queue.add(NodeItem(obj["metadata"]["name"]))
            changed = set(listed)
        else:
            for slurm_name in changed:
                for name in self._k8s_names.get(slurm_name, ()):
                    self.queue.add(NodeItem(name))
        for slurm_name in changed:
            info = listed.get(slurm_name)
            if info is not None and not self._k8s_names.get(slurm_name):
                owner = reg.registered_for(info, self.config.bridgeId)
                if owner is not None:
                    self.queue.add(RegisteredNodeItem(slurm_name, owner))  # its Kubernetes node may be gone

    def _resync_due(self) -> None:
        """After each list: every node again once per RESYNC_SECONDS."""
        if time.monotonic() - self._last_resync >= RESYNC_SECONDS:
            self._last_resync = time.monotonic()
            for obj in self.nodes.values():
                self.queue.add(NodeItem(obj["metadata"]["name"]))

    # ---- reconcile ---------------------------------------------------------------------------
    @metrics.reconciled
    async def _reconcile(self, item: NodeWork) -> float | None:
        if isinstance(item, RegisteredNodeItem):
            return await self._reconcile_registered(item.slurm_name, item.node)
        name = item.name
        node = self.nodes.get(("", name))
        if node is None or self.slurm_nodes is None:
            return None  # the first node list queues every node again
        slurm_name = slurm_name_of(node)
        info = self.slurm_node(slurm_name)
        ours = info is not None and reg.registered_for(info, self.config.bridgeId) is not None
        if reg.labelled(node) or reg.registration(node) is not None or ours:
            acted = await self._register(node, slurm_name, info)
            if acted:
                return None  # one step at a time: the write's own event or the next list comes back
        primary = self._primary(slurm_name) in (None, name)
        if info is not None and not primary and name not in self._warned:
            self._warned.add(name)
            log.warning(
                "nodes %s and %s both map to Slurm node %s; only %s is kept in step with it",
                name,
                self._primary(slurm_name),
                slurm_name,
                self._primary(slurm_name),
            )
        plan = nodesync.decide(
            nodesync.kube_view(node, self.config.schedulerName),
            nodesync.slurm_view(info) if info is not None else None,
            node=name,
            slurm_node=slurm_name,
            sync=primary,
        )
        if plan.slurm_action is not None and self.table.taken_at <= self._changed_at.get(name, 0.0):
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
            self.table.wrote(slurm_name, written)
            log.info("Slurm node %s: %s (Kubernetes node %s)", slurm_name, plan.slurm_action.value, name)
            metrics.node_sync("to_slurm", plan.slurm_action.value)
            for e in plan.events:
                if e.side == "slurm":
                    await self.kube.event(ref, e.reason, e.message, warning=e.warning)
        patch = nodesync.node_patch(node, plan.kube, self.config.schedulerName)
        await self._apply_patch(name, node, patch, plan.events)
        if info is not None and primary:
            return await self._in_slurm(name, node, slurm_name, info)
        return None

    async def _in_slurm(self, name: str, node: Obj, slurm_name: str, info: NodeInfo) -> float | None:
        """What the primary node of a Slurm node keeps beside the state sync: the device-taint drain,
        the topology labels, the two conditions; when to look again."""
        await self._device_taints(name, node, slurm_name)
        await self._topology(name, self.nodes.get(("", name)) or node, info)
        fitted = await self.fit.reconcile(name, self.nodes.get(("", name)) or node, info)
        if fitted is not None:
            self.nodes.upsert(fitted)
        matched = await self.devices.reconcile(name, self.nodes.get(("", name)) or node, info)
        if matched is not None:
            self.nodes.upsert(matched)
        return self.fit.recheck_in(name)

    async def _apply_patch(
        self, name: str, node: Obj, patch: Obj | None, events: tuple[nodesync.NodeEvent, ...]
    ) -> None:
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
        if patch is not None:
            try:
                updated = await self.kube.patch(node_path(name), patch)
            except Conflict:
                # Changed meanwhile (by an administrator, the kubelet or kwok): decide again on the
                # new version, taken in as a watch event would be (which also re-queues the node).
                fresh = await self.kube.get(node_path(name))
                if fresh is not None:
                    self.on_node_event("MODIFIED", fresh)
                    self.queue.add(NodeItem(name))  # even when only a heartbeat came between
                return
            except NotFound:
                return
            self.nodes.upsert(updated)
            log.info("node %s: %s", name, "; ".join(e.reason for e in events) or "markers updated")
            for reason in [e.reason for e in events if e.side == "kubernetes"] or ["Markers"]:
                metrics.node_sync("to_kubernetes", reason)
            for e in events:
                if e.side == "kubernetes":
                    await self.kube.event(ref, e.reason, e.message, warning=e.warning)

    async def _device_taints(self, name: str, node: Obj, slurm_name: str) -> None:
        """Drain Slurm node ``slurm_name`` while a GPU of it is tainted in Kubernetes, and lift the
        drain after (docs/gpus.md, "Device taints"). Nothing is decided before both the slices and
        the DeviceTaintRules are listed: a taint not read yet would lift a drain it still holds."""
        if not (self.devices.slices.synced.is_set() and self.taint_rules.synced.is_set()):
            return
        mapped = sorted(self._k8s_names.get(slurm_name) or {name})  # every Kubernetes node of this Slurm node
        slices = [obj for k8s in mapped for obj in self.devices.slices_of(k8s)]
        found = devicetaints.tainted(slices, self.taint_rules.values())
        s = devicetaints.step(slurm_name, self.slurm_node(slurm_name), found, self.config.bridgeId)
        if s is None:
            return
        try:
            await self.table.set_drain(slurm_name, s.reason if isinstance(s, devicetaints.Drain) else None)
        except SlurmNotFound:
            log.info("Slurm node %s vanished before its device-taint drain; waiting for the next list", slurm_name)
            return
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
        if isinstance(s, devicetaints.Drain):
            metrics.node_sync("device_taint", "DRAIN")
            message = (
                f"{s.found[0].text} on node {name} keeps pods off it: Slurm node {slurm_name} is drained "
                f'("{s.reason}") until no such taint is left (Slurm cannot take one GPU of a node out of service)'
            )
            log.warning("node %s: %s", name, message)
            await self.kube.event(ref, names.REASON_DEVICE_TAINT_NODE_DRAINED, message, warning=True)
        else:
            metrics.node_sync("device_taint", "UNDRAIN")
            device, taint = s.named
            message = (
                f"no GPU of node {name} is tainted NoSchedule or NoExecute any more (the drain named device "
                f"{device} taint {taint}): the drain of Slurm node {slurm_name} is lifted"
            )
            log.info("node %s: %s", name, message)
            await self.kube.event(ref, names.REASON_DEVICE_TAINT_NODE_UNDRAINED, message)

    async def _topology(self, name: str, node: Obj, info: NodeInfo) -> None:
        """The node's labels of its place in Slurm's topologies, kept exactly as Slurm says
        (docs/nodes.md#network-topology); a place that cannot be a label is told once (Event)."""
        places, problems = topology.parse_topology(info.topology)
        told = "; ".join(problems)
        if told and self._told_topology.get(name) != told:
            self._told_topology[name] = told
            message = f"Slurm node {info.name}'s topology {info.topology!r}: {told}"
            log.warning("node %s: %s", name, message)
            ref = {"apiVersion": "v1", "kind": "Node", "metadata": node["metadata"]}
            await self.kube.event(ref, names.REASON_TOPOLOGY_NOT_LABELLED, message, warning=True)
        elif not told:
            self._told_topology.pop(name, None)
        change = topology.topology_labels(objects.labels(node), places)
        if not change:
            return
        try:
            updated = await self.kube.patch(node_path(name), {"metadata": {"labels": change}})
        except NotFound:
            return
        self.nodes.upsert(updated)
        log.info("node %s: topology labels %s", name, ", ".join(f"{k}={v or '(removed)'}" for k, v in change.items()))

    # ---- registration (dynamic external nodes) ------------------------------------------------
    async def _known_partitions(self) -> frozenset[str]:
        now = time.monotonic()
        if self._partitions is None or now - self._partitions[1] > PARTITIONS_TTL_SECONDS:
            self._partitions = (frozenset(await self.slurm.list_partitions()), now)
        return self._partitions[0]

    async def _register(self, node: Obj, slurm_name: str, info: NodeInfo | None) -> bool:
        """One registration step for a labelled (or formerly registered) node; True if it acted."""
        name = node["metadata"]["name"]
        want = reg.desired(node, slurm_name, self.config.partition) if reg.labelled(node) else None
        refused = self._refused.get(name)
        if refused is not None and not (isinstance(want, reg.Desired) and want.node_conf() == refused[0]):
            del self._refused[name]  # the labels ask for another node line now
            refused = None
        known = None
        if isinstance(want, reg.Desired) and info is None and refused is None:
            known = await self._known_partitions()
        plan = reg.decide(
            node,
            want,
            info,
            bridge_id=self.config.bridgeId,
            known_partitions=known,
            refused=refused[1] if refused else None,
        )
        return await self._apply_registration(name, node, slurm_name, want, plan)

    async def _reconcile_registered(self, slurm_name: str, k8s_name: str) -> float | None:
        """A Slurm node this bridge registered that no cached Kubernetes node maps to."""
        info = self.slurm_node(slurm_name)
        if info is None or self._k8s_names.get(slurm_name):
            return None
        node = await self.kube.get(node_path(k8s_name))
        if node is not None:  # not in the cache yet: decide as for any node
            self.on_node_event("ADDED", node)
            return None
        plan = reg.decide(None, None, info, bridge_id=self.config.bridgeId, known_partitions=None)
        await self._apply_registration(k8s_name, None, slurm_name, None, plan)
        return None

    async def _apply_registration(
        self, name: str, node: Obj | None, slurm_name: str, want: reg.Desired | str | None, plan: reg.Plan
    ) -> bool:
        if plan.action is None:
            return False
        ref = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, **objects.meta(node)}}
        action = plan.action
        if action in (reg.Action.ANNOTATE, reg.Action.UNANNOTATE):
            await self._annotate(name, plan.message if action == reg.Action.ANNOTATE else None)
            return True
        if action == reg.Action.WARN:
            if self._told.get(name) != plan.message:
                self._told[name] = plan.message
                log.warning("node %s: %s", name, plan.message)
                await self.kube.event(ref, names.REASON_SLURM_NODE_NOT_REGISTERED, plan.message, warning=True)
            return False  # nothing was done: the node sync goes on
        try:
            reason, message = await self._write_registration(name, slurm_name, want, plan)
        except SlurmError as e:
            message = f"{plan.message}: Slurm refused it: {e}"
            if (
                action == reg.Action.CREATE
                and "Invalid argument" in str(e)
                and isinstance(want, reg.Desired)
                and want.gpus
            ):
                message += " (slurmctld refuses GPUs of dynamic nodes without File= in gres.conf: docs/nodes.md)"
            if self._told.get(name) != message:
                self._told[name] = message
                log.warning("node %s: %s", name, message)
                await self.kube.event(ref, names.REASON_SLURM_NODE_REGISTRATION_FAILED, message, warning=True)
            return True
        self._told.pop(name, None)
        log.info("node %s: %s: %s", name, reason, message)
        metrics.node_sync("registration", action.value)
        self._after_poll.add(name)  # the next node list shows the change: decide again then
        await self.kube.event(ref, reason, message)
        return True

    async def _write_registration(
        self, name: str, slurm_name: str, want: reg.Desired | str | None, plan: reg.Plan
    ) -> tuple[str, str]:
        """The Slurm side of a registration step (create, adopt, drain, undrain, delete); the
        Event's reason and message. What Slurm now holds is remembered until a node list shows it."""
        action = plan.action
        if action == reg.Action.CREATE:
            assert isinstance(want, reg.Desired)
            await self.slurm.create_node(want.node_conf())
            comment = reg.bridge_comment(self.config.bridgeId, name)
            await self.slurm.update_node(slurm_name, comment=comment)
            # Until a node list shows it, decide on the node as made (not on the stale list).
            self.table.wrote(slurm_name, want.as_created(comment))
            return names.REASON_SLURM_NODE_REGISTERED, f"registered in Slurm as {want.node_conf()}"
        if action == reg.Action.SET_COMMENT:
            comment = reg.bridge_comment(self.config.bridgeId, name)
            await self.slurm.update_node(slurm_name, comment=comment)
            info = self.slurm_node(slurm_name)
            if info is not None:
                self.table.wrote(slurm_name, info.model_copy(update={"comment": comment}))
            return names.REASON_SLURM_NODE_ADOPTED, plan.message
        if action in (reg.Action.DRAIN, reg.Action.UNDRAIN):
            drain = action == reg.Action.DRAIN
            slurm_action = nodesync.SlurmAction.DRAIN if drain else nodesync.SlurmAction.UNDRAIN
            reason = plan.reason if drain else None
            await self.slurm.update_node(slurm_name, state=slurm_action.value, reason=reason)
            info = self.slurm_node(slurm_name)
            if info is not None:
                self.table.wrote(slurm_name, nodesync.after_slurm_action(info, slurm_action, reason))
            return (names.REASON_SLURM_NODE_LEAVING if drain else names.REASON_SLURM_NODE_REGISTERED), plan.message
        # DELETE
        await self.slurm.delete_node(slurm_name)
        self.table.wrote(slurm_name, None)
        if plan.remember and isinstance(want, reg.Desired):
            self._refused[name] = (want.node_conf(), plan.remember)
        return names.REASON_SLURM_NODE_DEREGISTERED, plan.message

    async def _annotate(self, name: str, value: str | None) -> None:
        """Record (or drop) the registered node line on the Kubernetes node."""
        key = escape_pointer(names.ANN_SLURM_REGISTRATION)
        node = self.nodes.get(("", name))
        has = node is not None and names.ANN_SLURM_REGISTRATION in objects.annotations(node)
        if value is None:
            if not has:
                return
            op: list[Obj] = [{"op": "remove", "path": f"/metadata/annotations/{key}"}]
        elif node is not None and objects.annotations(node):
            op = [{"op": "add", "path": f"/metadata/annotations/{key}", "value": value}]
        else:
            op = [{"op": "add", "path": "/metadata/annotations", "value": {names.ANN_SLURM_REGISTRATION: value}}]
        try:
            updated = await self.kube.patch(node_path(name), op, "json")
        except (NotFound, Conflict):
            return
        self.nodes.upsert(updated)
        self.queue.add(NodeItem(name))
