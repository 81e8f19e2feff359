"""The managed-node taint and its toleration (slurm_bridge/kube/taints.py): the operator's taint is
exactly what the webhook's toleration tolerates."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube import taints
from slurm_bridge.operator.nodes import nodesync
from slurm_bridge.webhook.mutate import mutate_pod

pytestmark = pytest.mark.unit

SCHED = "slurm-bridge"


def test_taint_and_toleration_shapes() -> None:
    assert taints.managed_taint(SCHED) == {"key": names.TAINT_MANAGED_NODE, "value": SCHED, "effect": "NoExecute"}
    assert taints.managed_toleration(SCHED) == {
        "key": names.TAINT_MANAGED_NODE,
        "operator": "Equal",
        "value": SCHED,
        "effect": "NoExecute",
    }


def test_the_toleration_tolerates_the_taint_and_only_that_schedulers() -> None:
    taint = taints.managed_taint(SCHED)
    toleration = taints.managed_toleration(SCHED)
    assert taints.tolerates(toleration, taint["key"], taint["value"], taint["effect"])
    assert taints.tolerates_managed(toleration, SCHED)
    assert not taints.tolerates_managed(toleration, "other-bridge")
    assert not taints.tolerates_managed(taints.managed_toleration("other-bridge"), SCHED)


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"operator": "Exists"}, True),  # tolerates every taint
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": names.TAINT_MANAGED_NODE, "operator": "Exists"}, True),
        ({"key": names.TAINT_MANAGED_NODE, "operator": "Exists", "tolerationSeconds": 30}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": names.TAINT_MANAGED_NODE, "value": SCHED}, True),  # operator defaults to Equal
        ({"key": names.TAINT_MANAGED_NODE, "operator": "Equal", "value": "x"}, False),
        ({"key": names.TAINT_MANAGED_NODE, "operator": "Bogus", "value": SCHED}, False),
        ({"key": "", "operator": "Equal"}, False),
    ],
)
def test_tolerates_managed_follows_kubernetes_matching(toleration: dict[str, Any], ok: bool) -> None:
    assert taints.tolerates_managed(toleration, SCHED) is ok


def test_same_taint_ignores_time_added_and_missing_values() -> None:
    a = {"key": "k", "value": "v", "effect": "NoSchedule", "timeAdded": "t0"}
    assert taints.same_taint(a, {"key": "k", "value": "v", "effect": "NoSchedule"})
    assert not taints.same_taint(a, {"key": "k", "value": "w", "effect": "NoSchedule"})
    assert taints.same_taint({"key": "k"}, {"key": "k", "value": "", "effect": None})


def test_the_webhooks_pods_tolerate_the_taint_the_node_sync_sets() -> None:
    """End to end through both callers: a node the sync taints admits the pods the webhook mutates."""
    node: dict[str, Any] = {"metadata": {"name": "n1", "resourceVersion": "1"}, "spec": {}}
    want = nodesync.KubeView(managed_taint=True)
    patch = nodesync.node_patch(node, want, SCHED)
    assert patch is not None
    (taint,) = patch["spec"]["taints"]
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    (added,) = [op["value"] for op in mutate_pod(pod, SCHED).patch if op["path"] == "/spec/tolerations"]
    assert [t for t in added if taints.tolerates(t, taint["key"], taint["value"], taint["effect"])]
    assert nodesync.kube_view({"metadata": {}, "spec": {"taints": [taint]}}, SCHED).managed_taint
