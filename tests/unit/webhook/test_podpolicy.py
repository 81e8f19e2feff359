"""The pod policy's conditions (webhook/podpolicy.py) on tables of pods, run by the CEL subset
(tests/unit/celsubset.py) against the webhook's own decision (webhook/mutate.py): a pod the policy
calls plain needs nothing from the webhook but the three changes, and a plain pod in the webhook's
shape gets no change from it. tests/e2e/test_admission_policy.py runs the policy in the API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, LabelSelector
from slurm_bridge.kube.taints import managed_toleration, tolerates_managed
from slurm_bridge.webhook import podpolicy
from slurm_bridge.webhook.mutate import mutate_pod
from slurm_bridge.webhook.render import webhook_configurations
from tests.unit.celsubset import compile_cel

Obj = dict[str, Any]
SCHED = "slurm-bridge"
KEY = names.TAINT_MANAGED_NODE
GATE = {"name": names.SCHEDULING_GATE}
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def pod(**spec: Any) -> Obj:
    """A pod as the API server has defaulted it when admission sees it."""
    base: Obj = {
        "schedulerName": "default-scheduler",
        "tolerations": copy.deepcopy(DEFAULT_TOLERATIONS),
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
    }
    base.update(copy.deepcopy(spec))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"}, "spec": base}


def evaluate(expression: str, obj: Obj, resource: str = "pods") -> bool:
    env = {"object": obj, "request": {"resource": {"resource": resource}, "operation": "CREATE"}}
    return bool(compile_cel(expression)(env))


def resources(**parts: Obj) -> Obj:
    return {"containers": [{"name": "c", "image": "x", "resources": parts}]}


# name -> (pod, plain)
PODS: dict[str, tuple[Obj, bool]] = {
    "plain": (pod(), True),
    "no resources": (pod(containers=[{"name": "c", "image": "x"}]), True),
    "hugepages, ephemeral storage": (
        pod(**resources(limits={"hugepages-2Mi": "4Mi", "ephemeral-storage": "1Gi"})), True
    ),
    "an init container's cpu": (
        pod(initContainers=[{"name": "i", "image": "x", "resources": {"requests": {"cpu": "1"}}}]), True
    ),
    "the bridge's schedulerName": (pod(schedulerName=SCHED), True),
    "no schedulerName": (pod(schedulerName=""), True),
    "placement": (pod(nodeSelector={"a": "b"}, affinity={"nodeAffinity": {}}), True),
    "its own resourceClaims, no DRA request": (pod(resourceClaims=[{"name": "x", "resourceClaimName": "x"}]), True),
    "a mirror pod": ({**pod(), "metadata": {"name": "p", "annotations": {names.ANN_K8S_CONFIG_MIRROR: "x"}}}, False),
    "another scheduler": (pod(schedulerName="volcano"), False),
    "a nodeName": (pod(nodeName="n1"), False),
    "an empty nodeName": (pod(nodeName=""), True),
    "a PodGroup": (pod(schedulingGroup={"podGroupName": "g"}), False),
    "a 1.35 workloadRef": (pod(workloadRef={"name": "w"}), False),
    "a DRA request": (pod(**resources(limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})), False),
    "a DRA request in an init container": (
        pod(initContainers=[{"name": "i", "image": "x",
                             "resources": {"requests": {"deviceclass.resource.kubernetes.io/dra.cpu": "2"}}}]),
        False,
    ),
    "a device plugin's GPU": (pod(**resources(limits={"nvidia.com/gpu": "1"})), False),
    "an unknown resource in requests": (pod(**resources(requests={"example.com/foo": "1"})), False),
}  # fmt: skip


@pytest.mark.parametrize("case", list(PODS), ids=list(PODS))
def test_a_plain_pod_needs_only_the_three_changes(case: str) -> None:
    obj, is_plain = PODS[case]
    assert evaluate(podpolicy.plain(SCHED), obj) is is_plain
    if not is_plain:
        return
    m = mutate_pod(obj, SCHED)
    assert not m.skipped and not m.problems and not m.warnings, m
    assert set(m.changes) <= {"schedulerName", "schedulingGates", "tolerations"}, m.changes


TOLERATIONS = [
    managed_toleration(SCHED),
    {"key": KEY, "value": SCHED},
    {"key": KEY, "operator": "Equal", "value": SCHED, "effect": "NoExecute", "tolerationSeconds": 30},
    {"key": KEY, "operator": "Exists"},
    {"key": KEY, "operator": "Exists", "effect": "NoSchedule"},
    {"key": KEY, "operator": "Equal", "value": "other"},
    {"key": KEY, "operator": "Equal"},
    {"operator": "Exists"},
    {"operator": "Exists", "tolerationSeconds": 5},
    {"operator": "Exists", "effect": "NoExecute"},
    {"key": "", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "other", "operator": "Exists"},
    {"key": KEY + "-x", "operator": "Exists"},
]


@pytest.mark.parametrize("toleration", TOLERATIONS, ids=[str(i) for i in range(len(TOLERATIONS))])
def test_tolerated_is_the_webhooks_tolerates(toleration: Obj) -> None:
    obj = pod(tolerations=[*DEFAULT_TOLERATIONS, toleration])
    assert evaluate(podpolicy.tolerated(SCHED), obj) is tolerates_managed(toleration, SCHED)


SHAPES: dict[str, tuple[Obj, bool]] = {
    "made": (pod(schedulerName=SCHED, schedulingGates=[GATE], tolerations=[managed_toleration(SCHED)]), True),
    "made, among others": (
        pod(schedulerName=SCHED, schedulingGates=[{"name": "x"}, GATE],
            tolerations=[*DEFAULT_TOLERATIONS, {"operator": "Exists"}]),
        True,
    ),
    "no gate": (pod(schedulerName=SCHED, tolerations=[managed_toleration(SCHED)]), False),
    "another gate": (
        pod(schedulerName=SCHED, schedulingGates=[{"name": "x"}], tolerations=[managed_toleration(SCHED)]), False
    ),
    "the default scheduler": (pod(schedulingGates=[GATE], tolerations=[managed_toleration(SCHED)]), False),
    "no toleration": (pod(schedulerName=SCHED, schedulingGates=[GATE]), False),
    "a toleration for a while": (
        pod(schedulerName=SCHED, schedulingGates=[GATE],
            tolerations=[{**managed_toleration(SCHED), "tolerationSeconds": 9}]),
        False,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(SHAPES), ids=list(SHAPES))
def test_the_webhook_is_skipped_only_where_it_would_change_nothing(case: str) -> None:
    obj, is_shaped = SHAPES[case]
    assert evaluate(podpolicy.shaped(SCHED), obj) is is_shaped
    skip = podpolicy.webhook_skip_condition(SCHED)["expression"]
    assert evaluate(skip, obj) is not is_shaped  # a match condition: true calls the webhook
    m = mutate_pod(obj, SCHED)
    assert (not m.patch) is is_shaped, m


NOT_PLAIN = [c for c, (_, p) in PODS.items() if not p]


@pytest.mark.parametrize("case", NOT_PLAIN, ids=NOT_PLAIN)
def test_a_pod_that_is_not_plain_is_reviewed_even_in_the_webhooks_shape(case: str) -> None:
    obj = copy.deepcopy(PODS[case][0])
    obj["spec"].update(schedulerName=SCHED, schedulingGates=[GATE], tolerations=[managed_toleration(SCHED)])
    if case == "another scheduler":
        obj["spec"]["schedulerName"] = "volcano"
    assert evaluate(podpolicy.webhook_skip_condition(SCHED)["expression"], obj)


@pytest.mark.parametrize("resource", ["jobs", "jobsets", "leaderworkersets"])
def test_a_workload_create_always_reaches_the_webhook(resource: str) -> None:
    workload = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {}}}
    assert evaluate(podpolicy.webhook_skip_condition(SCHED)["expression"], workload, resource)


def test_the_mutating_webhook_carries_the_skip_and_the_policy_its_scope() -> None:
    config = Config(schedulerName="hpc", managedNamespaceSelector=LabelSelector(matchLabels={"team": "hpc"}))
    mutating = webhook_configurations(config, bundle="Y2E=", url="https://127.0.0.1:9443")[0]["webhooks"][0]
    assert mutating["matchConditions"] == [podpolicy.webhook_skip_condition("hpc")]
    policy, binding = podpolicy.pod_policy(config, name="hpc-bridge")
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == "hpc-bridge-pods"
    constraints = policy["spec"]["matchConstraints"]
    assert constraints["namespaceSelector"] == mutating["namespaceSelector"] == {"matchLabels": {"team": "hpc"}}
    assert constraints["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert policy["spec"]["failurePolicy"] == "Fail" and policy["spec"]["reinvocationPolicy"] == "IfNeeded"
    assert policy["spec"]["matchConditions"] == [{"name": "plain-pod", "expression": podpolicy.plain("hpc")}]
    mutation = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert '"hpc"' in mutation and names.SCHEDULING_GATE in mutation and KEY in mutation
    assert {v["name"] for v in policy["spec"]["variables"]} == {"gated", "tolerated"}
