"""The node guard's shell (leader only): one pass per poll period, deciding with :mod:`.decisions`
and draining through the node controller, the one writer of Slurm node states
(:class:`~slurm_bridge.operator.views.slurmnodes.NodeDrains`).

What it reads, and what that costs (docs/performance.md: the operator's CPU per pod):

- the bridge's pods: the PlaceholderJob controller's store, found by node (``on_node``), and the
  PlaceholderJobs that list them (each parsed once per version);
- every other pod bound to a node: one more cluster-wide list+watch, whose field selector leaves
  out the bridge's pods (the hot watch has them), unbound pods and ended ones, and of which only
  a few fields are kept (:func:`slim_pod`);
- a pod is judged when an event changed it (or its node joined or left Slurm), and again on each
  pass only while time alone may change its verdict; every SWEEP_SECONDS, each pod once more. A
  pass with nothing new costs a look at the node store.

RBAC: core ``pods`` list and watch in every namespace, ``events`` create (on the pod, in its
namespace, and on the Node). Nothing survives a restart but the drain's reason in Slurm, which
the first pass finds: a drain whose pod is gone is lifted, one whose pod still runs stays.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import metrics, objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.cache import Informer
from slurm_bridge.kube.client import resource_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import GuardKube
from slurm_bridge.kube.taints import managed_taint, same_taint
from slurm_bridge.operator.nodeguard.decisions import (
    Drain,
    Intruder,
    Key,
    Kind,
    Member,
    Rules,
    Undrain,
    Verdict,
    counts,
    drain_of,
    judge,
    step,
)
from slurm_bridge.operator.runtime.departures import on_node
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmnodes import NodeDrains
from slurm_bridge.rules.nodenames import slurm_name_of
from slurm_bridge.rules.podphase import pod_ended
from slurm_bridge.rules.workloadkinds import controller_of

log = logging.getLogger(__name__)
# Every pod on a Slurm node is judged again this often even if nothing told of a change (a
# PlaceholderJob's, which only a rare state turns against its pod; a missed event).
SWEEP_SECONDS = 60.0
YIELD_EVERY = 500  # pods judged between two turns of the event loop


def other_pods_selector(scheduler_name: str) -> dict[str, str]:
    """Pods of every other scheduler, bound to a node, not ended: the API server filters, so no
    other pod is sent at all (a pod that ends or is deleted leaves the selection as DELETED)."""
    return {
        "fieldSelector": f"spec.schedulerName!={scheduler_name},spec.nodeName!=,"
        "status.phase!=Succeeded,status.phase!=Failed"
    }


def slim_pod(pod: Obj) -> Obj:
    """What the guard reads of another scheduler's pod: who it is, where it runs, whether it is a
    static pod or a DaemonSet's, its scheduler and phase."""
    meta, spec = objects.meta(pod), pod.get("spec") or {}
    kept: Obj = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in meta}
    mirror = (meta.get("annotations") or {}).get(names.ANN_K8S_CONFIG_MIRROR)
    if mirror is not None:
        kept["annotations"] = {names.ANN_K8S_CONFIG_MIRROR: mirror}
    owner = controller_of(pod)
    if owner is not None:
        ref = {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "controller": True}
        kept["ownerReferences"] = [ref]
    return {
        "metadata": kept,
        "spec": {k: spec[k] for k in ("nodeName", "schedulerName") if k in spec},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


class NodePods:
    """Other schedulers' pods bound to nodes (:func:`slim_pod`), by (namespace, name) and by node;
    fed by the watch (the informer's ``known``: a list after a 410 Gone hands on what it lacks)."""

    def __init__(self, on_change: Callable[[Key], None] | None = None) -> None:
        self._objs: dict[Key, Obj] = {}
        self._by_node: dict[str, set[Key]] = {}
        self._on_change = on_change  # told of each pod an event changed (the guard judges it again)

    @staticmethod
    def _key(obj: Obj) -> Key:
        meta = objects.meta(obj)
        return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))

    def get(self, key: Key) -> Obj | None:
        return self._objs.get(key)

    def values(self) -> list[Obj]:
        return list(self._objs.values())

    def on(self, node: str) -> list[Obj]:
        return [self._objs[k] for k in self._by_node.get(node, ())]

    def on_event(self, etype: str, obj: Obj) -> None:
        key = self._key(obj)
        held = self._objs.get(key)
        if self._on_change is not None:
            self._on_change(key)
        if etype == "DELETED":
            if held is not None and objects.uid(held) == objects.uid(obj):
                self._drop(key, held)
            return
        if held is not None:
            self._drop(key, held)
        slim = slim_pod(obj)
        node = str(slim["spec"].get("nodeName") or "")
        if node:
            self._objs[key] = slim
            self._by_node.setdefault(node, set()).add(key)

    def _drop(self, key: Key, held: Obj) -> None:
        del self._objs[key]
        node = str(held["spec"].get("nodeName") or "")
        keys = self._by_node.get(node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_node[node]

    def __len__(self) -> int:
        return len(self._objs)


def _pod_ref(i: Intruder) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": i.namespace, "name": i.name, "uid": i.uid}}


def _node_ref(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


@dataclass(frozen=True)
class _Judged:
    """A pod on a Slurm node as last judged: the stored objects it was judged from (replaced, never
    changed, on every change), where, and the verdict."""

    pod: Obj
    listing: tuple[Obj, ...]  # the PlaceholderJobs that list it (a bridge pod's)
    node: str
    slurm_node: str
    verdict: Verdict


class NodeGuard:
    """Judges each pod on a Slurm node when it (or its node) changes, and each pod whose verdict
    time may change on every pass; drains and undrains each pass from what it holds."""

    def __init__(
        self,
        config: Config,
        kube: GuardKube,
        nodes: ObjectStore,
        drains: NodeDrains,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        *,
        own_namespace: str | None = None,
    ) -> None:
        self.config, self.kube, self.nodes, self.drains, self.pods, self.phjs = config, kube, nodes, drains, pods, phjs
        self.rules = Rules(
            config.schedulerName,
            config.bridgeId,
            frozenset(config.nodeGuard.daemonNamespaces),
            own_namespace,
            config.handoff.marginSeconds,
        )
        self._dirty: set[Key] = set()  # pods an event changed since the last pass
        self.others = NodePods(on_change=self._dirty.add)
        self.watch = Informer(
            kube,
            resource_path("v1", "pods", None),
            "pods of other schedulers",
            self.others.on_event,
            self.others,
            params=other_pods_selector(config.schedulerName),
        )
        self._judged: dict[Key, _Judged] = {}
        self._watching: set[Key] = set()  # judged pods not (yet, or for good) allowed, or transient
        self._since: dict[str, float] = {}  # bridge pods nothing explains, by uid: since when (monotonic)
        self._told: set[str] = set()  # intruders whose pod was told (uid)
        self._slurm_of: dict[str, str] = {}  # the Slurm nodes' Kubernetes nodes: -> Slurm node
        self._swept = 0.0  # the first pass judges every pod
        self.running = False  # a standby's guard keeps nothing: it sweeps when it starts
        self.drained = 0
        self.undrained = 0
        self.judged = 0  # pods judged (for the cost tests)
        self._loop = PollLoop(
            "node-guard",
            config.pollPeriodSeconds,
            self.pass_once,
            log=log,
            ok_message=lambda: "node guard OK",
            failed="the node guard",
        )

    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    def start(self) -> None:
        if not self.config.nodeGuard.drainNodes:
            log.warning("node guard: nodeGuard.drainNodes is false: no Slurm node is drained for pods that run there")
            return
        self.running = True
        self.watch.start()
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self.watch.stop()

    def on_bridge_pod(self, etype: str, pod: Obj) -> None:
        """An event of the bridge's pod watch (after the controller's): a bound pod, or one judged
        before, is judged again on the next pass."""
        key = ObjectStore.key_of(pod)
        if self.running and ((pod.get("spec") or {}).get("nodeName") or key in self._judged):
            self._dirty.add(key)

    # ---- judging ----------------------------------------------------------------------------------
    def _slurm_nodes(self, table: dict[str, Any]) -> dict[str, str]:
        """The Kubernetes nodes with the managed-node taint whose Slurm node exists -> that node."""
        taint = managed_taint(self.config.schedulerName)
        out: dict[str, str] = {}
        for node in self.nodes.values():
            slurm = slurm_name_of(node)
            taints: list[Obj] = (node.get("spec") or {}).get("taints") or []
            if slurm in table and any(same_taint(t, taint) for t in taints):
                out[objects.name(node) or ""] = slurm
        return out

    def _member(self, pod: Obj, listing: tuple[Obj, ...]) -> Member | None:
        """The PlaceholderJob among ``listing`` that counts ``pod`` as its member."""
        for obj in listing:
            try:
                phj = self.phjs.model_of(obj)
            except ValueError:  # a PlaceholderJob that lists the pod but cannot be read: not the pod's fault
                return Member(frozenset())
            if phj.is_member(pod):
                return Member.of(phj)
        return None

    def _judge(self, key: Key, now: datetime) -> None:
        bridge = self.pods.get(key)
        pod = bridge if bridge is not None else self.others.get(key)
        node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        slurm = self._slurm_of.get(node)
        if pod is None or slurm is None or pod_ended(pod):
            self._judged.pop(key, None)
            self._watching.discard(key)
            return
        listing = tuple(self.phjs.indexed(key)) if bridge is not None else ()
        held = self._judged.get(key)
        if (
            held is not None
            and not held.verdict.transient
            and held.pod is pod
            and (held.node, held.slurm_node) == (node, slurm)
            and len(held.listing) == len(listing)
            and all(a is b for a, b in zip(held.listing, listing, strict=True))
        ):
            return  # nothing it was judged from changed
        member = self._member(pod, listing) if bridge is not None else None
        verdict = judge(pod, node, slurm, member, self.rules, now)
        self.judged += 1
        self._judged[key] = _Judged(pod, listing, node, slurm, verdict)
        if verdict.kind is Kind.ALLOWED and not verdict.transient:
            self._watching.discard(key)
        else:
            self._watching.add(key)

    async def findings(self) -> tuple[dict[str, list[Intruder]], dict[str, str]]:
        """Judge what changed; then each Slurm node's intruders, and a Kubernetes node of each Slurm
        node the guard knows (for its Events)."""
        table = self.drains.slurm_nodes_now() or {}
        now, clock = datetime.now(UTC), time.monotonic()
        slurm_of = self._slurm_nodes(table)
        # Emptied in place: the pod watch holds this set's ``add`` (a new set would leave its events
        # in the old one, seen only by the next sweep).
        keys = set(self._dirty)
        self._dirty.clear()
        keys |= self._watching
        swept = clock - self._swept >= SWEEP_SECONDS
        moved = {n for n in slurm_of.keys() | self._slurm_of.keys() if slurm_of.get(n) != self._slurm_of.get(n)}
        self._slurm_of = slurm_of
        if swept:
            self._swept = clock
            moved = set(slurm_of)
            keys |= self._judged.keys()
        for node in moved:
            keys.update(ObjectStore.key_of(p) for p in self.pods.indexed(on_node(node)))
            keys.update(ObjectStore.key_of(p) for p in self.others.on(node))
        if moved and not swept:  # a node that left Slurm or changed its Slurm node
            keys.update(k for k, j in self._judged.items() if j.node in moved)
        for n, key in enumerate(keys, 1):
            self._judge(key, now)
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a sweep of many pods leaves the loop to the other work
        found: dict[str, list[Intruder]] = {}
        since: dict[str, float] = {}
        for key in sorted(self._watching):
            j = self._judged[key]
            uid = objects.uid(j.pod) or ""
            if j.verdict.kind is Kind.UNEXPLAINED:
                since[uid] = self._since.get(uid, clock)
            if counts(j.verdict, since.get(uid), clock, self.rules):
                found.setdefault(j.slurm_node, []).append(Intruder(key[0], key[1], uid, j.verdict.why, j.node))
        self._since = since
        where: dict[str, str] = {}
        for node, slurm in sorted(slurm_of.items()):
            where.setdefault(slurm, node)
        return found, where

    # ---- the drains -------------------------------------------------------------------------------
    async def pass_once(self) -> None:
        table = self.drains.slurm_nodes_now()
        if table is None or not self.watch.synced.is_set():
            return  # nothing is known yet: nothing is judged
        found, where = await self.findings()
        prefix = f"{names.NODE_GUARD_DRAIN_REASON_PREFIX}{self.config.bridgeId}]:"
        ours = {n for n, i in table.items() if "DRAIN" in i.states and i.reason.startswith(prefix)}
        for slurm in sorted(set(found) | ours):
            s = step(slurm, table.get(slurm), found.get(slurm, ()), self.config.bridgeId)
            if s is not None:
                await self._apply(s, s.intruder.node if isinstance(s, Drain) else where.get(slurm, slurm))
        await self._tell(found)

    async def _apply(self, s: Drain | Undrain, node: str) -> None:
        match s:
            case Drain(slurm_node=slurm, intruder=i, reason=reason):
                await self.drains.set_drain(slurm, reason)
                self.drained += 1
                metrics.node_sync("guard", "DRAIN")
                message = (
                    f"pod {i.ref} runs on node {node} without a Slurm allocation ({i.why}): "
                    f"Slurm node {slurm} is drained until no such pod is left"
                )
                log.warning("node guard: %s", message)
                await self.kube.event(_node_ref(node), names.REASON_UNALLOCATED_POD_NODE_DRAINED, message, warning=True)
            case Undrain(slurm_node=slurm, named=(ns, pod)):
                await self.drains.set_drain(slurm, None)
                self.undrained += 1
                metrics.node_sync("guard", "UNDRAIN")
                message = (
                    f"no pod runs on node {node} without a Slurm allocation any more (the drain named "
                    f"{ns}/{pod}): the guard's drain of Slurm node {slurm} is lifted"
                )
                log.info("node guard: %s", message)
                await self.kube.event(_node_ref(node), names.REASON_UNALLOCATED_POD_NODE_UNDRAINED, message)

    async def _tell(self, found: dict[str, list[Intruder]]) -> None:
        """One Event on each intruder, once: its node is drained for it, or held out of service
        by someone else's drain already."""
        table = self.drains.slurm_nodes_now() or {}
        current: set[str] = set()
        for slurm, here in found.items():
            info = table.get(slurm)
            reason = info.reason if info is not None and "DRAIN" in info.states else ""
            for i in here:
                current.add(i.uid)
                if i.uid in self._told:
                    continue
                self._told.add(i.uid)
                if not reason or drain_of(reason, self.config.bridgeId) is not None:
                    state = f"Slurm node {slurm} is drained until no such pod is left"
                else:
                    state = f"Slurm node {slurm} is held out of service already ({reason})"
                message = f"this pod runs on node {i.node} without a Slurm allocation ({i.why}): {state}"
                await self.kube.event(_pod_ref(i), names.REASON_UNALLOCATED_POD_NODE_DRAINED, message, warning=True)
        self._told &= current
