"""A pod that reaches a Slurm node by another door drains the node (docs/nodes.md, "Pods that are not
the bridge's"), on the local cluster with the bridge running.

Admission refuses such a pod (the ValidatingAdmissionPolicy ``slurm-bridge-node-guard`` that
hack/bridge.sh applies), but admission can be bypassed, and the operator checks the invariant
itself. The test bypasses it as a site could: the policy is removed for the test's duration (and
put back as it was after), then a pod of a namespace the bridge does not manage is created bound
to a hybrid node (``spec.nodeName``, tolerating the managed-node taint). The node must be drained
in Slurm with a reason naming the pod, with an Event on the pod and on the node, and the drain
lifted once the pod is deleted.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import pod_events, read_pod
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
POLICY = "slurm-bridge-node-guard"  # <release>-node-guard: the policy and its binding (hack/bridge.sh)
DEADLINE = 30.0  # a few of the operator's poll periods (hack/bridge.sh: 1 s)


def _read(call: Any, name: str) -> Obj | None:
    """The object as the API server has it (raw JSON), None when there is none."""
    try:
        resp = call(name, _preload_content=False)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    obj: Obj = json.loads(resp.data)
    return obj


def _fresh(obj: Obj) -> Obj:
    """``obj`` as it can be created again: without what the API server wrote."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, "spec": obj["spec"]}


@pytest.fixture
def without_admission_guard(api_client: k8s.ApiClient) -> Iterator[None]:
    """The node guard's admission policy removed for the test, as a bypass would (delete if present),
    and created again as it was afterwards (only if it was present)."""
    api = k8s.AdmissionregistrationV1Api(api_client)
    binding = _read(api.read_validating_admission_policy_binding, POLICY)
    policy = _read(api.read_validating_admission_policy, POLICY)
    for obj, delete in ((binding, api.delete_validating_admission_policy_binding),
                        (policy, api.delete_validating_admission_policy)):  # fmt: skip
        if obj is not None:
            delete(POLICY)
    try:
        yield
    finally:
        if policy is not None and _read(api.read_validating_admission_policy, POLICY) is None:
            api.create_validating_admission_policy(_fresh(policy))
        if binding is not None and _read(api.read_validating_admission_policy_binding, POLICY) is None:
            api.create_validating_admission_policy_binding(_fresh(binding))


def slurm_node(slurm: SlurmEnv, node: str) -> tuple[str, str]:
    """The Slurm node's state and reason."""
    line = slurm.scontrol("show", "node", node, "-o")
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    reason = line.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in line else ""
    return fields.get("State", ""), reason


def intruder(name: str, node: str) -> Obj:
    """A pod of another scheduler, bound by hand, that tolerates the managed-node taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": names.TAINT_MANAGED_NODE, "operator": "Exists", "effect": "NoExecute"}],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "3600"]}],
        },
    }


@pytest.fixture
def guarded_node(slurm_env: SlurmEnv) -> Iterator[str]:
    """A hybrid node (a kwok node with a real slurmd); a guard drain a failed test leaves on it is
    lifted, so the node stays usable for the tests after this one."""
    if not slurm_env.hybrid_nodes:
        pytest.fail("the local cluster has no hybrid node (SB_HYBRID_NODES)")
    node = slurm_env.hybrid_nodes[0]
    yield node
    state, reason = slurm_node(slurm_env, node)
    if "DRAIN" in state and reason.startswith(names.NODE_GUARD_DRAIN_REASON_PREFIX):
        slurm_env.slurm("scontrol", "update", f"NodeName={node}", "State=UNDRAIN", check=False)


# A pod's name at its limit (253 characters, a DNS subdomain): the drain reason that names it is
# then over 300 characters, which Slurm keeps whole (checked on 26.05.5 with 435), so the guard
# still knows its own drain and lifts it.
@pytest.mark.parametrize("name_length", [15, 253], ids=["short-name", "name-at-253"])
def test_a_pod_that_bypassed_admission_drains_its_slurm_node_until_it_is_gone(
    core: k8s.CoreV1Api,
    slurm_env: SlurmEnv,
    namespace: str,
    guarded_node: str,
    without_admission_guard: None,
    name_length: int,
) -> None:
    node, base = guarded_node, f"intruder-{secrets.token_hex(3)}"
    name = base if name_length <= len(base) else f"{base}-{'x' * (name_length - len(base) - 1)}"
    assert len(name) == max(name_length, len(base))
    assert "DRAIN" not in slurm_node(slurm_env, node)[0], f"{node} must be in service before the test"

    def created() -> bool | None:
        try:
            core.create_namespaced_pod(namespace, intruder(name, node))
        except ApiException as e:
            if e.status in (403, 422) and "node-guard" in (e.body or ""):
                return None  # the API server has not seen the policy's delete yet
            raise
        return True

    wait_for(created, DEADLINE, f"pod {namespace}/{name} created past the removed admission policy")

    def drained() -> str | None:
        state, reason = slurm_node(slurm_env, node)
        return reason if "DRAIN" in state and reason.startswith(names.NODE_GUARD_DRAIN_REASON_PREFIX) else None

    reason = wait_for(drained, DEADLINE, f"Slurm node {node} drained by the node guard")
    assert f"pod {namespace}/{name} runs on this node without a Slurm allocation" in reason

    def told() -> list[str] | None:
        on_pod = [e.message for e in pod_events(core, namespace, name)
                  if e.reason == names.REASON_UNALLOCATED_POD_NODE_DRAINED]  # fmt: skip
        on_node = [e.message for e in core.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node}").items
            if e.reason == names.REASON_UNALLOCATED_POD_NODE_DRAINED and f"pod {namespace}/{name} " in e.message
        ]  # fmt: skip
        return [*on_pod, *on_node] if on_pod and on_node else None

    messages = wait_for(told, DEADLINE, "the drain's Events on the pod and on the node")
    assert all("without a Slurm allocation" in m for m in messages), messages

    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    wait_for(lambda: read_pod(core, namespace, name) is None, DEADLINE, f"pod {namespace}/{name} gone")
    wait_for(lambda: "DRAIN" not in slurm_node(slurm_env, node)[0], DEADLINE, f"the guard's drain of {node} lifted")
    # The node sync lifts its own cordon, which mirrored the drain (docs/nodes.md).
    wait_for(lambda: not core.read_node(node).spec.unschedulable, DEADLINE, f"node {node} schedulable again")
