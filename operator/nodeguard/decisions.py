"""Who may run on a Slurm node (docs/nodes.md, "Pods that are not the bridge's"). Pure.

A Kubernetes node that is a Slurm node carries the managed-node taint, and admission keeps other
pods from tolerating it. Admission can be bypassed (a pod made before the bridge was installed,
the policy removed, a pod bound by another scheduler or created with ``spec.nodeName``), and
Slurm would then place jobs on CPUs a pod it does not know of uses. So the operator checks the
invariant itself: on such a node nothing runs but the bridge's pods that hold a Slurm allocation
there, and the node daemons the administrator allows. A node with any other pod is drained in
Slurm with a reason that names the pod, and the drain is lifted once no such pod is left.

A false drain of the bridge's own pods costs a node, so every transient state of a bridge pod
counts as allowed or waits before it counts: a pod released onto the node before its
PlaceholderJob's status records the allocation (a single pod's status is written once it is
bound), a pod whose job ended (the handoff's, docs/colocation.md), a pod whose PlaceholderJob is
gone while it terminates. A bridge pod nothing explains is an intruder only once it stayed so
``settle_seconds`` (a store that lags behind a write); a pod of another scheduler is one at once.

The drain's reason in Slurm is the guard's record (:func:`drain_reason`): a restart finds it there,
and only a drain whose reason names this bridge exactly is ever lifted.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.times import parse_iso
from slurm_bridge.rules.podphase import pod_ended
from slurm_bridge.rules.workloadkinds import controller_of
from slurm_bridge.slurm.formats import expand_nodes
from slurm_bridge.slurm.models import NodeInfo

Key = tuple[str, str]
# How long a bridge pod may stay unexplained before it drains its node: longer than a watch lags
# behind the operator's own writes, and than a PlaceholderJob's deletion takes to end its pods.
SETTLE_SECONDS = 30.0

_DRAIN = re.compile(
    rf"^{re.escape(names.NODE_GUARD_DRAIN_REASON_PREFIX)}(?P<bridge>[a-z0-9-]+)\]: pod (?P<ns>[^/\s]+)/(?P<pod>\S+) "
)


@dataclass(frozen=True)
class Rules:
    """What the guard allows: ``daemon_namespaces`` (config ``nodeGuard.daemonNamespaces``), whose
    DaemonSet pods may run on Slurm's nodes; ``own_namespace``, the bridge's own (its components may
    run there: whoever can make pods in it can read the bridge's Slurm token anyway); ``margin``
    (``handoff.marginSeconds``) past a terminating bridge pod's deletion deadline."""

    scheduler_name: str
    bridge_id: str
    daemon_namespaces: frozenset[str] = frozenset({"kube-system"})
    own_namespace: str | None = None
    margin: int = 15
    settle_seconds: float = SETTLE_SECONDS


@dataclass(frozen=True)
class Member:
    """The PlaceholderJob a bridge pod is a member of, as the guard reads it: the nodes of its Slurm
    allocation that its status records (empty: none recorded yet), its job and whether it ended."""

    allocated: frozenset[str]
    job_id: int | None = None
    ended: bool = False

    @classmethod
    def of(cls, phj: PlaceholderJob) -> Member:
        status = phj.status
        nodes = {a.node for a in status.assignments or []}
        nodes.update(expand_nodes(status.node_list))
        for c in status.components or []:
            nodes.update(expand_nodes(c.node_list))
        job_id = status.het_job_id or status.job_id
        return cls(frozenset(nodes), job_id, status.phase in names.TERMINAL_PHASES)


class Kind(enum.StrEnum):
    ALLOWED = "allowed"
    INTRUDER = "intruder"  # drains its node at once
    UNEXPLAINED = "unexplained"  # a bridge pod: an intruder once it stayed so settle_seconds


@dataclass(frozen=True)
class Verdict:
    """``transient``: time alone may change it (a pod nothing explains yet, a terminating one), so
    it is judged again on every pass; any other verdict stands until the pod or its
    PlaceholderJob changes."""

    kind: Kind
    why: str
    transient: bool = False


@dataclass(frozen=True)
class Intruder:
    namespace: str
    name: str
    uid: str
    why: str
    node: str = ""  # the Kubernetes node it runs on

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _released_here(meta: Mapping[str, Any], node: str) -> int | None:
    """The Slurm job of a pod the bridge released onto ``node`` (its release names the node and
    labels the job); None if it was not."""
    if (meta.get("annotations") or {}).get(names.ANN_SLURM_NODE) != node:
        return None
    label = (meta.get("labels") or {}).get(names.LABEL_SLURM_JOB_ID)
    return int(label) if isinstance(label, str) and label.isdigit() else None


def _terminating_until(meta: Mapping[str, Any], margin: int) -> datetime | None:
    """Until when a terminating pod may still run: its deletion deadline (the request plus its
    grace period) and the margin; None when it is not terminating."""
    at = meta.get("deletionTimestamp")
    if not isinstance(at, str):
        return None
    try:
        return parse_iso(at) + timedelta(seconds=margin)
    except ValueError:
        return None


def judge(pod: Obj, node: str, slurm_node: str, member: Member | None, rules: Rules, now: datetime) -> Verdict:
    """Whether ``pod``, bound to Kubernetes node ``node`` (Slurm node ``slurm_node``), may run there.
    ``member``: the PlaceholderJob that counts the pod as its member (``PlaceholderJob.is_member``),
    None when none does."""
    meta, spec = objects.meta(pod), pod.get("spec") or {}
    ns, scheduler = str(meta.get("namespace") or ""), str(spec.get("schedulerName") or "default-scheduler")
    if spec.get("nodeName") != node or pod_ended(pod):
        return Verdict(Kind.ALLOWED, "not running on this node")
    if names.ANN_K8S_CONFIG_MIRROR in (meta.get("annotations") or {}):
        return Verdict(Kind.ALLOWED, "a static pod of the node's kubelet")
    owner = controller_of(pod) or {}
    daemon = owner.get("kind") == "DaemonSet" and str(owner.get("apiVersion", "")).startswith("apps/")
    if daemon and ns in rules.daemon_namespaces:
        return Verdict(Kind.ALLOWED, f"a DaemonSet's pod in {ns} (nodeGuard.daemonNamespaces)")
    if rules.own_namespace and ns == rules.own_namespace:
        return Verdict(Kind.ALLOWED, "the bridge's own component")
    if scheduler != rules.scheduler_name:
        return Verdict(Kind.INTRUDER, f"schedulerName {scheduler}: not placed by the bridge")
    job = _released_here(meta, node)
    if member is not None:
        if node in member.allocated or slurm_node in member.allocated:
            return Verdict(Kind.ALLOWED, "its Slurm job's allocation")
        if job is not None and not member.allocated and member.job_id in (None, job):
            return Verdict(Kind.ALLOWED, "released here; its PlaceholderJob's status is not written yet")
        if job is not None and member.ended:
            return Verdict(Kind.ALLOWED, "its Slurm job ended: the handoff's until it stops")
    until = _terminating_until(meta, rules.margin)
    if job is not None and until is not None and now < until:
        return Verdict(Kind.ALLOWED, "released here and terminating: the handoff's until it stops", transient=True)
    if member is None:
        return Verdict(Kind.UNEXPLAINED, "it is no member of a PlaceholderJob", transient=True)
    why = f"its PlaceholderJob's Slurm allocation does not include node {slurm_node}"
    return Verdict(Kind.UNEXPLAINED, why, transient=True)


def counts(verdict: Verdict, unexplained_since: float | None, clock: float, rules: Rules) -> bool:
    """Whether a pod with ``verdict`` makes its node drained now: an intruder at once, a bridge pod
    nothing explains once it was so since ``unexplained_since`` (``clock``'s) for settle_seconds."""
    if verdict.kind is Kind.INTRUDER:
        return True
    if verdict.kind is Kind.UNEXPLAINED:
        return unexplained_since is not None and clock - unexplained_since >= rules.settle_seconds
    return False


# ---- the drain --------------------------------------------------------------------------------------


def drain_reason(bridge_id: str, intruder: Intruder) -> str:
    """The Slurm node reason of the guard's drain: it names the pod (``sinfo -R``) and the bridge,
    and is the guard's record of the drain (:func:`drain_of`)."""
    return (
        f"{names.NODE_GUARD_DRAIN_REASON_PREFIX}{bridge_id}]: pod {intruder.ref} runs on this node "
        "without a Slurm allocation"
    )


def drain_of(reason: str, bridge_id: str) -> Key | None:
    """The (namespace, pod) a guard drain of ``bridge_id`` names; None for any other reason."""
    m = _DRAIN.match(reason or "")
    if m is None or m.group("bridge") != bridge_id:
        return None
    return (m.group("ns"), m.group("pod"))


@dataclass(frozen=True)
class Drain:
    slurm_node: str
    intruder: Intruder
    reason: str


@dataclass(frozen=True)
class Undrain:
    slurm_node: str
    named: Key


def step(slurm_node: str, info: NodeInfo | None, found: Sequence[Intruder], bridge_id: str) -> Drain | Undrain | None:
    """The one Slurm write that brings ``slurm_node`` in line: drain it for its first intruder
    (again, for another, when the pod its drain names is gone); lift the guard's own drain once no
    intruder is left. A drain someone else made (an administrator, the node sync, the handoff)
    stands: the guard neither overwrites nor lifts it."""
    if info is None:
        return None
    drained = "DRAIN" in info.states
    ours = drain_of(info.reason, bridge_id) if drained else None
    if found:
        if not drained or (ours is not None and all((i.namespace, i.name) != ours for i in found)):
            return Drain(slurm_node, found[0], drain_reason(bridge_id, found[0]))
        return None
    return Undrain(slurm_node, ours) if ours is not None else None
