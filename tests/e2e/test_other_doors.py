"""Kubernetes' other doors onto Slurm's nodes, on the local cluster: a pod that tolerates the
managed-node taint reaches a Slurm node without the bridge (spec.nodeName, another scheduler, the
default scheduler in an unmanaged namespace) unless the node guard (webhook/nodeguard.py, applied by
hack/bridge.sh) refuses it at admission, as it does here, naming the taint, why and what to do."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import make_pod, read_pod
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
TAINT = f"{names.TAINT_MANAGED_NODE}=slurm-bridge:{names.TAINT_MANAGED_NODE_EFFECT}"
TOLERATIONS = {
    "key": {"key": names.TAINT_MANAGED_NODE, "operator": "Exists", "effect": names.TAINT_MANAGED_NODE_EFFECT},
    "exists": {"operator": "Exists"},
}


def refusal(create: Callable[[], object]) -> str | None:
    """The node guard's message if ``create`` is refused by it, else None (it was admitted)."""
    try:
        create()
    except ApiException as e:
        message = str(json.loads(e.body).get("message", "")) if e.body else ""
        assert e.status == 403 and "node-guard" in message, f"refused by something else: {e.status} {e.body}"
        return message
    return None


def assert_the_guards_message(message: str) -> None:
    assert TAINT in message, message
    assert "CPUs and memory belong to Slurm allocations" in message, message
    assert "Route the pod through the bridge (a namespace it manages, schedulerName slurm-bridge" in message, message
    assert "DaemonSet in a namespace of nodeGuard.daemonNamespaces (kube-system)" in message, message


def door(name: str, toleration: Obj, *, scheduler: str | None = None, node: str = "", selector: str = "") -> Obj:
    pod = make_pod(name)
    pod["spec"]["tolerations"] = [toleration]
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    if node:
        pod["spec"]["nodeName"] = node
    if selector:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": selector}
    return pod


@pytest.fixture(scope="module")
def guard(core: k8s.CoreV1Api, slurm_env: SlurmEnv) -> str:
    """The real node's name, once the API server enforces the policy hack/bridge.sh applied (it
    compiles a new policy within a second or two); probed with server-side dry runs."""
    node = slurm_env.real_node
    assert node, "the local cluster names no real node (SB_REAL_NODE)"
    probe = door("probe", TOLERATIONS["exists"], node=node)
    wait_for(lambda: refusal(lambda: core.create_namespaced_pod("default", probe, dry_run="All")), 30,
             "the node guard to refuse a pod that tolerates the managed-node taint")  # fmt: skip
    return node


@pytest.mark.parametrize("toleration", list(TOLERATIONS), ids=list(TOLERATIONS))
def test_every_door_onto_a_slurm_node_is_refused_at_create(
    core: k8s.CoreV1Api, guard: str, namespace: str, managed_namespace: str, toleration: str
) -> None:
    node, tol = guard, TOLERATIONS[toleration]
    doors = {
        "managed, schedulerName none, nodeName": (managed_namespace, door("none", tol, scheduler="none", node=node)),
        "managed, another scheduler": (managed_namespace, door("other", tol, scheduler="volcano")),
        "unmanaged, default scheduler, nodeSelector": (namespace, door("selected", tol, selector=node)),
        "unmanaged, nodeName": (namespace, door("bound", tol, node=node)),
    }
    for case, (ns, pod) in doors.items():
        message = refusal(partial(core.create_namespaced_pod, ns, pod))
        assert message is not None, f"{case}: admitted"
        assert_the_guards_message(message)
        assert read_pod(core, ns, pod["metadata"]["name"]) is None, case


def test_the_bridges_pods_and_untolerating_pods_are_admitted(
    core: k8s.CoreV1Api, guard: str, namespace: str, managed_namespace: str
) -> None:
    """The guard refuses the toleration, not the doors: the bridge's pod with it, others without it."""
    for toleration in TOLERATIONS.values():
        bridge_pod = door("bridges", toleration)  # the webhook gives it the bridge's scheduler
        made = core.create_namespaced_pod(managed_namespace, bridge_pod, dry_run="All")
        assert made.spec.scheduler_name == "slurm-bridge"
    plain = make_pod("plain")
    plain["spec"]["nodeName"] = guard
    assert refusal(lambda: core.create_namespaced_pod(namespace, plain, dry_run="All")) is None


def test_a_toleration_added_by_update_is_refused(core: k8s.CoreV1Api, guard: str, namespace: str) -> None:
    pod = make_pod("later")
    pod["spec"]["schedulerName"] = "none"  # never placed: it waits here, untolerating
    core.create_namespaced_pod(namespace, pod)
    for toleration in TOLERATIONS.values():
        # Appended (a JSON patch): the API server's default tolerations may not be changed.
        patch = [{"op": "add", "path": "/spec/tolerations/-", "value": toleration}]
        message = refusal(partial(core.patch_namespaced_pod, "later", namespace, patch))
        assert message is not None, f"adding {toleration} was admitted"
        assert_the_guards_message(message)
    current = read_pod(core, namespace, "later")
    assert current is not None
    assert not any(t.key in (None, "", names.TAINT_MANAGED_NODE) for t in current.spec.tolerations or [])
    # An update that leaves the tolerations alone goes through.
    core.patch_namespaced_pod("later", namespace, {"metadata": {"labels": {"touched": "yes"}}})
