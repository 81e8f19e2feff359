"""Pure decisions of the node controller: Kubernetes cordon <-> Slurm DRAIN/DOWN/FAIL.

:func:`decide` maps what the two sides show, plus the bridge's ownership markers, to the state
the Kubernetes node should be in and the one Slurm call (if any) that brings Slurm in line. A plan
is a fixpoint: applied and decided again, it asks for nothing more. That, and the rule that the
bridge only ever undoes what its own markers say it did, is why state flipped on both sides
converges instead of ping-ponging. docs/nodes.md has the full table.

Markers, all on the Kubernetes node except the first:
- a Slurm DRAIN is the bridge's own when its reason starts with ``slurm-bridge:``;
- ``cordoned-by`` says the cordon is the bridge's (it mirrors a Slurm outage);
- ``slurm-drained-by`` says the bridge drained Slurm for the current cordon, so a Slurm
  administrator who resumes the node is not overruled until the node is uncordoned;
- the ``slurm-state`` taint says the current Slurm outage has been mirrored, so a Kubernetes
  administrator who uncordons the node is not overruled until Slurm returns it to service.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Literal

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.taints import managed_taint, same_taint
from slurm_bridge.slurm.models import NodeInfo

Outage = Literal["drain", "down", "fail"]


class SlurmAction(enum.StrEnum):
    DRAIN = "DRAIN"
    # Never RESUME: that would also end a DOWN or FAIL someone else set.
    UNDRAIN = "UNDRAIN"


@dataclass(frozen=True)
class KubeView:
    """What decide() reads from (and wants of) a Kubernetes node."""

    unschedulable: bool = False
    cordoned_by_bridge: bool = False
    slurm_drained_by_bridge: bool = False
    state_taint: Outage | None = None
    reason: str | None = None  # the slurm-reason annotation; None: absent
    managed_taint: bool = False


@dataclass(frozen=True)
class SlurmView:
    """A Slurm node as decide() sees it: out of service by someone else's hand, or by the bridge's."""

    outage: Outage | None = None  # DRAIN (not the bridge's), DOWN or FAIL; the worst of them
    bridge_drain: bool = False  # the DRAIN flag is set with the bridge's reason
    reason: str = ""


@dataclass(frozen=True)
class NodeEvent:
    reason: str
    message: str
    side: Literal["kubernetes", "slurm"]  # which write it reports: sent only once that write succeeded
    warning: bool = False


@dataclass(frozen=True)
class Plan:
    kube: KubeView
    slurm_action: SlurmAction | None = None
    slurm_reason: str | None = None
    events: tuple[NodeEvent, ...] = ()


def drain_reason(node: str) -> str:
    """The reason of every drain the bridge makes: its prefix is the bridge's ownership mark."""
    return f"{names.SLURM_NODE_REASON_PREFIX} Kubernetes node {node} is unschedulable"


def _state_taint(outage: str) -> Obj:
    return {"key": names.TAINT_SLURM_STATE, "value": outage, "effect": names.TAINT_SLURM_STATE_EFFECT}


def kube_view(node: Obj, scheduler_name: str) -> KubeView:
    meta, spec = objects.meta(node), node.get("spec") or {}
    ann = meta.get("annotations") or {}
    taints: list[Obj] = spec.get("taints") or []
    value = next((t.get("value") for t in taints if t.get("key") == names.TAINT_SLURM_STATE), None)
    # Any value counts as "mirrored"; decide() rewrites an unknown one.
    state: Outage | None = None if value is None else value if value in ("drain", "down", "fail") else "drain"
    return KubeView(
        unschedulable=bool(spec.get("unschedulable")),
        cordoned_by_bridge=ann.get(names.ANN_CORDONED_BY) == names.NODE_SYNC_OWNER,
        slurm_drained_by_bridge=ann.get(names.ANN_SLURM_DRAINED_BY) == names.NODE_SYNC_OWNER,
        state_taint=state,
        reason=ann.get(names.ANN_SLURM_REASON),
        managed_taint=any(same_taint(t, managed_taint(scheduler_name)) for t in taints),
    )


def slurm_view(info: NodeInfo) -> SlurmView:
    states = set(info.states)
    ours = info.reason.startswith(names.SLURM_NODE_REASON_PREFIX)
    outage: Outage | None = None
    if "FAIL" in states:
        outage = "fail"
    elif "DOWN" in states:
        outage = "down"
    elif "DRAIN" in states and not ours:
        outage = "drain"
    return SlurmView(outage=outage, bridge_drain="DRAIN" in states and ours, reason=info.reason)


def after_slurm_action(info: NodeInfo, action: SlurmAction, reason: str | None) -> NodeInfo:
    """Slurm's node as it is right after our call, until the next node list shows it."""
    flags = tuple(s for s in info.states if s != "DRAIN")
    if action is SlurmAction.DRAIN:
        return info.model_copy(update={"states": (*flags, "DRAIN"), "reason": reason or ""})
    # Slurm keeps the reason only while the node stays DOWN or FAIL.
    keep = "DOWN" in flags or "FAIL" in flags
    return info.model_copy(update={"states": flags, "reason": info.reason if keep else ""})


def decide(k: KubeView, s: SlurmView | None, *, node: str, slurm_node: str, sync: bool = True) -> Plan:
    """The wanted node state and Slurm call, from both sides' current state.

    ``s`` None: the node is not in Slurm. ``sync`` False: another Kubernetes node maps to the same
    Slurm node and owns the state sync; this one only gets the managed-node taint.
    """
    action: SlurmAction | None = None
    if s is None:
        # Not (or no longer) in Slurm: drop every mark of the bridge; uncordon only its own cordon.
        want = KubeView(unschedulable=k.unschedulable and not k.cordoned_by_bridge)
    elif not sync:
        want = replace(k, managed_taint=True)
    else:
        unsched, cordoned, drained = k.unschedulable, k.cordoned_by_bridge, k.slurm_drained_by_bridge
        taint: Outage | None = k.state_taint
        reason = k.reason
        # Slurm -> Kubernetes: cordon once per outage; the taint records that it was mirrored.
        if s.outage is not None:
            if taint is None and not unsched:
                unsched = cordoned = True
            elif cordoned and not unsched:
                cordoned = False  # an administrator uncordoned the bridge's cordon: theirs now
            taint, reason = s.outage, s.reason
        else:
            taint = reason = None
            if cordoned:
                unsched = cordoned = False
        # Kubernetes -> Slurm: an administrator's cordon drains Slurm, once per cordon.
        if unsched and not cordoned:
            if s.bridge_drain:
                drained = True
            elif s.outage is None and not drained:
                action, drained = SlurmAction.DRAIN, True
            # else: Slurm's own outage stands, or a Slurm administrator resumed our drain.
        else:
            drained = False
            if s.bridge_drain:
                action = SlurmAction.UNDRAIN
        want = KubeView(unsched, cordoned, drained, taint, reason, managed_taint=True)
    reason_ = drain_reason(node) if action is SlurmAction.DRAIN else None
    events = (*_kube_events(k, want, s, action, slurm_node), *_slurm_events(action, node, slurm_node))
    return Plan(want, action, reason_, events)


def _kube_events(
    k: KubeView, w: KubeView, s: SlurmView | None, action: SlurmAction | None, slurm: str
) -> list[NodeEvent]:
    """One Event per change the plan makes to the Kubernetes node, worded for the administrator
    reading the node."""
    ev: list[NodeEvent] = []

    def kube(reason: str, message: str, warning: bool = False) -> None:
        ev.append(NodeEvent(reason, message, "kubernetes", warning))

    state = (s.outage or "").upper() + (f" ({s.reason})" if s.reason else "") if s else ""
    taint = f"{names.TAINT_MANAGED_NODE}:{names.TAINT_MANAGED_NODE_EFFECT}"
    if w.managed_taint and not k.managed_taint:
        kube(
            names.REASON_MANAGED_TAINT_ADDED,
            f"node is Slurm node {slurm}: added taint {taint} (only the bridge's pods run here)",
        )
    if k.managed_taint and not w.managed_taint:
        kube(names.REASON_MANAGED_TAINT_REMOVED, f"node is not in Slurm (no Slurm node {slurm}): removed taint {taint}")
    if w.state_taint is not None and (w.state_taint, w.reason) != (k.state_taint, k.reason):
        kube(
            names.REASON_SLURM_NODE_OUT_OF_SERVICE,
            f"Slurm node {slurm} is {state}: tainted "
            f"{names.TAINT_SLURM_STATE}={w.state_taint}:{names.TAINT_SLURM_STATE_EFFECT}",
            warning=True,
        )
    elif (w.state_taint, w.reason) != (k.state_taint, k.reason):
        where = f"Slurm node {slurm} is back in service" if s is not None else f"node left Slurm ({slurm})"
        kube(names.REASON_SLURM_NODE_IN_SERVICE, f"{where}: removed taint {names.TAINT_SLURM_STATE}")
    if w.cordoned_by_bridge and not k.cordoned_by_bridge and w.unschedulable:
        kube(names.REASON_CORDONED_FOR_SLURM, f"cordoned: Slurm node {slurm} is {state}", warning=True)
    if k.unschedulable and not w.unschedulable:
        why = f"Slurm node {slurm} is back in service" if s is not None else f"node left Slurm ({slurm})"
        kube(names.REASON_UNCORDONED_FOR_SLURM, f"uncordoned (the cordon was the bridge's): {why}")
    if k.cordoned_by_bridge and not w.cordoned_by_bridge and not k.unschedulable:
        if s is not None and s.outage:
            kube(
                names.REASON_CORDON_RELEASED,
                f"an administrator uncordoned this node while Slurm node {slurm} is {state}; "
                "the bridge will not cordon it again until Slurm returns the node to service",
            )
        else:
            kube(
                names.REASON_CORDON_RELEASED,
                "an administrator uncordoned this node: removed the bridge's cordon marker",
            )
    if w.slurm_drained_by_bridge and not k.slurm_drained_by_bridge and action is None:
        kube(names.REASON_SLURM_DRAIN_ADOPTED, f"Slurm node {slurm} already carries the bridge's drain for this cordon")
    if k.slurm_drained_by_bridge and not w.slurm_drained_by_bridge and action is None:
        why = "node is no longer cordoned by an administrator" if s is not None else f"node left Slurm ({slurm})"
        kube(names.REASON_SLURM_DRAIN_RELEASED, f"{why}; the bridge holds no drain on Slurm node {slurm}")
    return ev


def _slurm_events(action: SlurmAction | None, node: str, slurm: str) -> list[NodeEvent]:
    """The Event of the plan's change to the Slurm node (posted once Slurm took it)."""
    if action is SlurmAction.DRAIN:
        message = f'drained Slurm node {slurm} with reason "{drain_reason(node)}": this node is cordoned'
        return [NodeEvent(names.REASON_SLURM_NODE_DRAINED, message, "slurm")]
    if action is SlurmAction.UNDRAIN:
        message = (
            f"undrained Slurm node {slurm} (the drain was the bridge's): "
            "this node is no longer cordoned by an administrator"
        )
        return [NodeEvent(names.REASON_SLURM_NODE_UNDRAINED, message, "slurm")]
    return []


def node_patch(node: Obj, want: KubeView, scheduler_name: str) -> Obj | None:
    """A merge patch taking ``node`` to ``want``, or None when it is there already.

    It carries the node's resourceVersion, so it fails with 409 instead of overwriting a change
    made meanwhile (``spec.taints`` is replaced as a whole list).
    """
    meta, spec = objects.meta(node), node.get("spec") or {}
    have = kube_view(node, scheduler_name)
    ann: dict[str, str | None] = {}
    owner = names.NODE_SYNC_OWNER
    for key, h, w in (
        (names.ANN_CORDONED_BY, have.cordoned_by_bridge, want.cordoned_by_bridge),
        (names.ANN_SLURM_DRAINED_BY, have.slurm_drained_by_bridge, want.slurm_drained_by_bridge),
    ):
        if h != w:
            ann[key] = owner if w else None
    if have.reason != want.reason:
        ann[names.ANN_SLURM_REASON] = want.reason

    taints: list[Obj] = list(spec.get("taints") or [])
    wanted = ([managed_taint(scheduler_name)] if want.managed_taint else []) + (
        [_state_taint(want.state_taint)] if want.state_taint else []
    )
    ours = (names.TAINT_MANAGED_NODE, names.TAINT_SLURM_STATE)
    new_taints: list[Obj] = []
    for t in taints:  # keep the order, and an existing taint's timeAdded
        if t.get("key") in ours and (
            not any(same_taint(t, x) for x in wanted) or any(same_taint(t, x) for x in new_taints)
        ):
            continue
        new_taints.append(t)
    new_taints += [x for x in wanted if not any(same_taint(t, x) for t in new_taints)]

    patch_spec: Obj = {}
    if have.unschedulable != want.unschedulable:
        patch_spec["unschedulable"] = want.unschedulable
    if new_taints != taints:
        patch_spec["taints"] = new_taints
    if not ann and not patch_spec:
        return None
    patch: Obj = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if ann:
        patch["metadata"]["annotations"] = ann
    if patch_spec:
        patch["spec"] = patch_spec
    return patch
