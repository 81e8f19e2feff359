"""The managed-node taint and the toleration that matches it, in one place.

The operator puts the taint on every Kubernetes node that is a Slurm node (operator/nodes/nodesync.py),
so that only the bridge's pods run there; the webhook gives each pod it takes the matching
toleration (webhook/mutate.py). Both sides read the taint's key, value (the scheduler name) and
effect from here, so they cannot drift apart. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core.objects import Obj

MANAGED_KEY = names.TAINT_MANAGED_NODE
MANAGED_EFFECT = names.TAINT_MANAGED_NODE_EFFECT


def managed_taint(scheduler_name: str) -> Obj:
    """The taint on a Slurm node: its value is the scheduler of the pods that may run there."""
    return {"key": MANAGED_KEY, "value": scheduler_name, "effect": MANAGED_EFFECT}


def managed_toleration(scheduler_name: str) -> Obj:
    """Lets a pod run on (and stay on) nodes tainted as the bridge's."""
    return {"key": MANAGED_KEY, "operator": "Equal", "value": scheduler_name, "effect": MANAGED_EFFECT}


def same_taint(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two taints are the same taint (key, value, effect; ``timeAdded`` does not count)."""
    return all((a.get(k) or "") == (b.get(k) or "") for k in ("key", "value", "effect"))


def tolerates(toleration: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """Whether ``toleration`` tolerates the taint for good, by Kubernetes' matching rules.

    A toleration with ``tolerationSeconds`` only delays a NoExecute eviction, so it does not count.
    """
    if toleration.get("tolerationSeconds") is not None:
        return False
    t_effect = toleration.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    t_key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not t_key:
        return operator == "Exists"
    if t_key != key:
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == value


def tolerates_managed(toleration: Mapping[str, Any], scheduler_name: str) -> bool:
    """Whether ``toleration`` lets a pod stay on the bridge's nodes of ``scheduler_name``."""
    return tolerates(toleration, MANAGED_KEY, scheduler_name, MANAGED_EFFECT)
