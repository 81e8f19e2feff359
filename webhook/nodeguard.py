"""Nothing but the bridge's pods on Slurm's nodes: the cluster-wide admission rule.

Every Slurm node carries the managed-node taint (slurm_bridge/kube/taints.py), but a toleration is
something any pod author can write, and a pod that tolerates the taint reaches such a node by
doors the bridge's webhook never sees: another scheduler, ``spec.nodeName``, or the default
scheduler in a namespace the bridge does not manage. Its CPUs and memory then run on resources
Slurm has given to a job. This ValidatingAdmissionPolicy refuses, on every pod CREATE and UPDATE
in every namespace, a pod whose tolerations tolerate the taint, unless it is:

- the bridge's: in a managed namespace, with the bridge's ``schedulerName`` and (at CREATE) no
  ``spec.nodeName`` (the bridge's extender binds it to the node Slurm allocated);
- a node daemon: made by the DaemonSet controller in one of ``nodeGuard.daemonNamespaces``
  (identified by the user the API server authenticated, which no pod author can forge, unlike
  ``ownerReferences``), or a kubelet's mirror pod;
- the bridge's own component (the chart's Deployments, where a site runs them on Slurm nodes);
- an UPDATE that leaves the tolerations as they were (pods from before the install stay editable).

The CEL is written here once: ``render-config`` (hack/bridge.sh) renders it, and
tests/unit/webhook/test_nodeguard_admission.py checks that the chart's templates/nodeguard.yaml renders the same.
Pure: the policy is plain data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core.config import Config, LabelSelector

ADMISSION_API: Final = "admissionregistration.k8s.io/v1"
NAME_SUFFIX: Final = "-node-guard"

# Who makes a node daemon's pods. With --use-service-account-credentials (kubeadm's, kind's and the
# managed services' default) the DaemonSet controller writes as its own ServiceAccount; without it,
# every controller writes as the controller manager, whose DaemonSet pods name their DaemonSet as
# controller (an ownerReference is trusted only in a request of the controller manager's own).
DAEMON_SET_CONTROLLER: Final = "system:serviceaccount:kube-system:daemon-set-controller"
CONTROLLER_MANAGER: Final = "system:kube-controller-manager"
# A kubelet writes as system:node:<node>; a static pod's mirror pod carries this annotation.
NODE_USER_PREFIX: Final = "system:node:"
MIRROR_POD_ANNOTATION: Final = names.ANN_K8S_CONFIG_MIRROR


@dataclass(frozen=True)
class OwnPods:
    """The bridge's own pods (the chart's Deployments): their namespace and ServiceAccounts."""

    namespace: str
    service_accounts: tuple[str, ...]


def cel_string(value: str) -> str:
    """A CEL string literal (JSON's quoting is CEL's; Helm's ``toJson`` writes the same)."""
    return json.dumps(value)


def cel_list(values: Sequence[str]) -> str:
    """A CEL list of strings, as Helm's ``toJson`` writes it (no spaces)."""
    return json.dumps(list(values), separators=(",", ":"))


_LABELS: Final = "namespaceObject.metadata.labels"


def _has_label(key: str) -> str:
    return f"(has({_LABELS}) && {cel_string(key)} in {_LABELS})"


def selector_cel(selector: LabelSelector) -> str:
    """The namespace's labels against a LabelSelector, in CEL: every term must hold (``true`` when
    there is none), as Kubernetes matches a selector. Keys of matchLabels in sorted order, as Helm
    ranges over a map."""
    terms = [
        f"({_has_label(k)} && {_LABELS}[{cel_string(k)}] == {cel_string(v)})"
        for k, v in sorted(selector.matchLabels.items())
    ]
    for r in selector.matchExpressions:
        value_in = f"({_has_label(r.key)} && {_LABELS}[{cel_string(r.key)}] in {cel_list(r.values)})"
        terms.append(
            {
                "In": value_in,
                "NotIn": f"!{value_in}",
                "Exists": _has_label(r.key),
                "DoesNotExist": f"!{_has_label(r.key)}",
            }[r.operator]
        )
    return " && ".join(terms) or "true"


def own_pods_cel(own: OwnPods | None) -> str:
    if own is None:
        return "false"
    return (
        f"object.metadata.namespace == {cel_string(own.namespace)} && has(object.spec.serviceAccountName) && "
        f"object.spec.serviceAccountName in {cel_list(own.service_accounts)}"
    )


def _op(t: str) -> str:
    return f"(has({t}.operator) ? {t}.operator : '')"


# Kubernetes' matching of one toleration ``t`` against the taint KEY=<scheduler>:NoExecute. An empty
# key with Exists tolerates every taint; an empty effect every effect; tolerationSeconds only
# delays the eviction (the pod runs there meanwhile), so it does not count.
TOLERATES: Final = (
    "has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
    f"((has(t.key) && t.key != '') ? t.key == {cel_string(names.TAINT_MANAGED_NODE)} : {_op('t')} == 'Exists') && "
    f"(!has(t.effect) || t.effect == '' || t.effect == {cel_string(names.TAINT_MANAGED_NODE_EFFECT)}) && "
    f"({_op('t')} == 'Exists' || ({_op('t')} in ['', 'Equal'] && "
    "(has(t.value) ? t.value : '') == variables.schedulerName)))"
)

# The bridge's pod: the webhook gave it the toleration and the bridge's scheduler binds it, to the
# node Slurm allocated. At CREATE nobody binds it beforehand (the webhook clears a nodeName).
BRIDGE_POD: Final = (
    "variables.managedNamespace && has(object.spec.schedulerName) && "
    "object.spec.schedulerName == variables.schedulerName && "
    "(request.operation != 'CREATE' || !has(object.spec.nodeName))"
)

NODE_DAEMON: Final = (
    f"(request.userInfo.username.startsWith({cel_string(NODE_USER_PREFIX)}) && "
    f"has(object.metadata.annotations) && {cel_string(MIRROR_POD_ANNOTATION)} in object.metadata.annotations) || "
    "(object.metadata.namespace in variables.daemonNamespaces && "
    f"(request.userInfo.username == {cel_string(DAEMON_SET_CONTROLLER)} || "
    f"(request.userInfo.username == {cel_string(CONTROLLER_MANAGER)} && has(object.metadata.ownerReferences) && "
    "object.metadata.ownerReferences.exists(r, r.kind == 'DaemonSet' && r.apiVersion.startsWith('apps/') && "
    "has(r.controller) && r.controller))))"
)

UNCHANGED: Final = (
    "request.operation == 'UPDATE' && has(object.spec.tolerations) == has(oldObject.spec.tolerations) && "
    "(!has(object.spec.tolerations) || object.spec.tolerations == oldObject.spec.tolerations)"
)

VALIDATION: Final = (
    "!variables.tolerates || variables.bridgePod || variables.nodeDaemon || variables.bridgeComponent || "
    "variables.unchanged"
)


def variables(config: Config, own: OwnPods | None = None) -> list[dict[str, str]]:
    """The policy's variables, in order (a variable may use those before it): the configured values
    first, then the rules, which are the same for every configuration."""
    return [
        {"name": "schedulerName", "expression": cel_string(config.schedulerName)},
        {"name": "daemonNamespaces", "expression": cel_list(config.nodeGuard.daemonNamespaces)},
        {"name": "managedNamespace", "expression": selector_cel(config.namespace_selector)},
        {"name": "bridgeComponent", "expression": own_pods_cel(own)},
        {"name": "tolerates", "expression": TOLERATES},
        {"name": "bridgePod", "expression": BRIDGE_POD},
        {"name": "nodeDaemon", "expression": NODE_DAEMON},
        {"name": "unchanged", "expression": UNCHANGED},
    ]


def message(config: Config) -> str:
    """The refusal: which taint, why, and what to do instead."""
    sched = config.schedulerName
    taint = f"{names.TAINT_MANAGED_NODE}={sched}:{names.TAINT_MANAGED_NODE_EFFECT}"
    daemons = ", ".join(config.nodeGuard.daemonNamespaces) or "none"
    return (
        f"the pod tolerates the taint {taint} of Slurm's nodes, whose CPUs and memory belong to Slurm "
        f"allocations: only the pods of slurm-bridge (schedulerName {sched}) may run there. Route the pod "
        f"through the bridge (a namespace it manages, schedulerName {sched}, no spec.nodeName), or drop the "
        "toleration (an empty key with operator Exists tolerates every taint). A node daemon must be a "
        f"DaemonSet in a namespace of nodeGuard.daemonNamespaces ({daemons}), whose CPUs and memory the site "
        "reserves in Slurm."
    )


def _labels() -> dict[str, str]:
    return {
        names.LABEL_APP_NAME: names.APP_NAME,
        names.LABEL_APP_COMPONENT: "node-guard",
        names.LABEL_APP_MANAGED_BY: names.APP_NAME,
    }


def node_guard_policy(
    config: Config, *, name: str = names.APP_NAME, own: OwnPods | None = None
) -> list[dict[str, Any]]:
    """[ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding], both named ``<name>-node-guard``."""
    policy_name = name + NAME_SUFFIX
    policy = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "variables": variables(config, own),
            "validations": [{"expression": VALIDATION, "message": message(config), "reason": "Forbidden"}],
        },
    }
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name, "labels": _labels()},
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
