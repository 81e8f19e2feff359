"""A plain pod's create, handed to the bridge inside the API server: no webhook call for it.

Most pods the bridge takes need only what every one of them gets (webhook/mutate.py): the
bridge's ``schedulerName``, its scheduling gate and the toleration of the managed-node taint.
For those, a MutatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, Kubernetes >= 1.36)
makes the same three changes in the API server, and the mutating webhook's match condition skips
a pod that already has them and asks for nothing else the webhook looks at. Each create through
the webhook cost the API server a TLS round trip, the review's encoding and the patch (about twice
a create without it), and waited for a core in a burst (docs/performance.md).

Why it is exact, not a second implementation that may drift:

- The policy acts only on a *plain* pod (:data:`PLAIN`): no mirror annotation, no ``nodeName``, a
  scheduler the bridge takes, no field the webhook's API checks read (``schedulingGroup``,
  ``workloadRef``), and no container resource but cpu, memory, ephemeral storage and hugepages
  (so no DRA request to rewrite). Everything else goes to the webhook as before.
- The webhook is skipped only for a plain pod that already is in the webhook's shape
  (:data:`SHAPED`), for which :func:`webhook.mutate.mutate_pod` returns no change. So the skip is
  right whether or not the policy exists (Kubernetes < 1.36, or a site that turned it off): there,
  no pod arrives in that shape and every pod is reviewed. The API server runs the policies before
  the mutating webhooks, and runs a policy again (``IfNeeded``) after a webhook changed the pod.
- tests/e2e/test_admission_policy.py creates pods of every kind through both, in the API server,
  and compares; tests/unit/webhook/test_podpolicy.py runs the conditions on tables.

Validation is not here: the validating webhook's own match condition (webhook/render.py) still
reviews whatever it must. The CEL is written here once; ``render-config`` renders it
(hack/bridge.sh) and a unit test checks that the chart's templates/webhook-admission.yaml renders
the same. Pure: the policy is plain data.
"""

from __future__ import annotations

from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core.config import Config

from .mutate import DEFAULT_SCHEDULER, MIRROR_POD_ANNOTATION
from .nodeguard import cel_list, cel_string

ADMISSION_API: Final = "admissionregistration.k8s.io/v1"
# The Kubernetes minor whose API server serves MutatingAdmissionPolicy v1 by default.
FIRST_MINOR: Final = 36
NAME_SUFFIX: Final = "-pods"

# Container resources that never make a DRA request nor a GPU the bridge maps (rules/dra/admission.py
# scans every other key): a pod asking for anything else is reviewed by the webhook.
PLAIN_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX: Final = "hugepages-"


def _plain_resources(containers: str) -> str:
    safe = f"(k in {cel_list(PLAIN_RESOURCES)} || k.startsWith({cel_string(HUGEPAGES_PREFIX)}))"
    c = "c.resources"
    return (
        f"(!has(object.spec.{containers}) || !object.spec.{containers}.exists(c, has({c}) && "
        f"((has({c}.requests) && {c}.requests.exists(k, !{safe})) || "
        f"(has({c}.limits) && {c}.limits.exists(k, !{safe})))))"
    )


def plain(scheduler_name: str) -> str:
    """CEL: the pod needs from the webhook nothing but the three changes every bridge pod gets."""
    schedulers = cel_list(["", DEFAULT_SCHEDULER, scheduler_name])
    mirror = cel_string(MIRROR_POD_ANNOTATION)
    return " && ".join(
        [
            f"!(has(object.metadata.annotations) && {mirror} in object.metadata.annotations)",
            f"(!has(object.spec.schedulerName) || object.spec.schedulerName in {schedulers})",
            "(!has(object.spec.nodeName) || object.spec.nodeName == '')",
            "!has(object.spec.schedulingGroup)",
            "!has(object.spec.workloadRef)",
            _plain_resources("initContainers"),
            _plain_resources("containers"),
        ]
    )


def _op(t: str) -> str:
    return f"(has({t}.operator) ? {t}.operator : '')"


def tolerated(scheduler_name: str) -> str:
    """CEL: a toleration lets the pod stay on the bridge's nodes for good, as
    slurm_bridge/kube/taints.py's ``tolerates`` decides (a ``tolerationSeconds`` only delays an
    eviction, so such a toleration does not count, and the webhook adds its own)."""
    key, effect = cel_string(names.TAINT_MANAGED_NODE), cel_string(names.TAINT_MANAGED_NODE_EFFECT)
    return (
        "has(object.spec.tolerations) && object.spec.tolerations.exists(t, !has(t.tolerationSeconds) && "
        f"(!has(t.effect) || t.effect == '' || t.effect == {effect}) && "
        f"((has(t.key) && t.key != '') ? (t.key == {key} && ({_op('t')} == 'Exists' || "
        f"({_op('t')} in ['', 'Equal'] && (has(t.value) ? t.value : '') == {cel_string(scheduler_name)}))) : "
        f"{_op('t')} == 'Exists'))"
    )


def gated() -> str:
    gate = cel_string(names.SCHEDULING_GATE)
    return f"has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == {gate})"


def shaped(scheduler_name: str) -> str:
    """CEL: the pod already has the bridge's scheduler, gate and toleration."""
    return (
        f"has(object.spec.schedulerName) && object.spec.schedulerName == {cel_string(scheduler_name)} && "
        f"{gated()} && {tolerated(scheduler_name)}"
    )


def webhook_skip_condition(scheduler_name: str) -> dict[str, str]:
    """The mutating webhook's match condition: call it for every create of a workload kind, and for
    a pod's unless it is plain and shaped already (whatever an error on the right, ``||`` with a
    true left is true)."""
    pods = f"!({plain(scheduler_name)} && {shaped(scheduler_name)})"
    return {"name": "something-to-change", "expression": f"request.resource.resource != 'pods' || {pods}"}


def _toleration(scheduler_name: str) -> str:
    key, effect = cel_string(names.TAINT_MANAGED_NODE), cel_string(names.TAINT_MANAGED_NODE_EFFECT)
    return f'{{"key": {key}, "operator": "Equal", "value": {cel_string(scheduler_name)}, "effect": {effect}}}'


def mutation(scheduler_name: str) -> str:
    """CEL: the JSON patch webhook/mutate.py's ``mutate_pod`` makes for a plain pod."""
    gate = f'{{"name": {cel_string(names.SCHEDULING_GATE)}}}'
    toleration = _toleration(scheduler_name)

    def patch(path: str, value: str) -> str:
        # The space keeps "}}" out of the text, which the chart's template would read as its own.
        return f'JSONPatch{{op: "add", path: "{path}", value: {value} }}'

    return (
        f"[{patch('/spec/schedulerName', cel_string(scheduler_name))}] + "
        f"(!has(object.spec.schedulingGates) ? [{patch('/spec/schedulingGates', f'[{gate}]')}] : "
        f"variables.gated ? [] : [{patch('/spec/schedulingGates/-', gate)}]) + "
        f"(!has(object.spec.tolerations) ? [{patch('/spec/tolerations', f'[{toleration}]')}] : "
        f"variables.tolerated ? [] : [{patch('/spec/tolerations/-', toleration)}])"
    )


def _labels() -> dict[str, str]:
    return {
        names.LABEL_APP_NAME: names.APP_NAME,
        names.LABEL_APP_COMPONENT: "webhook",
        names.LABEL_APP_MANAGED_BY: names.APP_NAME,
    }


def pod_policy(config: Config, *, name: str = names.APP_NAME) -> list[dict[str, Any]]:
    """[MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding], both named ``<name>-pods``,
    scoped by the managed namespaces as the webhooks are."""
    sched = config.schedulerName
    policy_name = name + NAME_SUFFIX
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": policy_name, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "namespaceSelector": config.namespace_selector.to_kubernetes(),
                "matchPolicy": "Equivalent",
                "resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                ],
            },
            "matchConditions": [{"name": "plain-pod", "expression": plain(sched)}],
            "variables": [
                {"name": "gated", "expression": gated()},
                {"name": "tolerated", "expression": tolerated(sched)},
            ],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": mutation(sched)}}],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name, "labels": _labels()},
        "spec": {"policyName": policy_name},
    }
    return [policy, binding]
