"""Pod mutation: hand pods in managed namespaces to the bridge instead of the default scheduler.

The patch must be idempotent because the apiserver may call a mutating webhook again
(reinvocationPolicy IfNeeded) after other webhooks changed the pod: a pod that is already in
the wanted shape yields no operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import pointer
from slurm_bridge.kube.taints import managed_toleration, tolerates_managed
from slurm_bridge.rules.dra.admission import rewrite

from .review import JSON, AdmissionRequest, Decision, InvalidObject

DEFAULT_SCHEDULER: Final = "default-scheduler"
# Mirror pods stand for static pods the kubelet already runs on its node; they are not scheduled.
MIRROR_POD_ANNOTATION: Final = names.ANN_K8S_CONFIG_MIRROR


def goes_to_bridge(scheduler: Any, scheduler_name: str) -> bool:
    """Whether a pod (template) whose ``spec.schedulerName`` is ``scheduler`` is the bridge's to
    take: it names no scheduler, the default one or the bridge's; another scheduler's pods are left
    alone."""
    return scheduler in (None, "", DEFAULT_SCHEDULER, scheduler_name)


@dataclass
class PodMutation:
    patch: list[JSON] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Why the pod was left alone, when it was.
    skipped: str = ""
    # Why the pod cannot be managed at all (its DRA requests), each naming its field.
    problems: list[str] = field(default_factory=list)


def mutate_pod(pod: Mapping[str, Any], scheduler_name: str) -> PodMutation:
    """The JSONPatch that puts a new pod under the bridge's control (empty if it already is)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidObject("the pod has no spec object")
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    result = PodMutation()
    if isinstance(annotations, Mapping) and MIRROR_POD_ANNOTATION in annotations:
        result.skipped = "mirror pod of a static pod"
        return result
    current = spec.get("schedulerName") or ""
    if not goes_to_bridge(current, scheduler_name):
        result.skipped = f"schedulerName is {current!r}"
        return result

    if current != scheduler_name:
        op = "replace" if "schedulerName" in spec else "add"
        result.patch.append({"op": op, "path": pointer("spec", "schedulerName"), "value": scheduler_name})
        result.changes.append("schedulerName")

    node_name = spec.get("nodeName")
    if node_name:
        # The apiserver refuses scheduling gates on a pod that already names its node, and the
        # node must be one Slurm allocated, so the request is dropped.
        result.patch.append({"op": "remove", "path": pointer("spec", "nodeName")})
        result.changes.append("nodeName")
        result.warnings.append(
            f"spec.nodeName {node_name!r} was cleared: {scheduler_name} places the pod on a node Slurm allocates"
        )

    gates = spec.get("schedulingGates")
    gate = {"name": names.SCHEDULING_GATE}
    if not isinstance(gates, list):
        result.patch.append({"op": "add", "path": pointer("spec", "schedulingGates"), "value": [gate]})
        result.changes.append("schedulingGates")
    elif not any(isinstance(g, Mapping) and g.get("name") == names.SCHEDULING_GATE for g in gates):
        result.patch.append({"op": "add", "path": pointer("spec", "schedulingGates", "-"), "value": gate})
        result.changes.append("schedulingGates")

    tolerations = spec.get("tolerations")
    toleration = managed_toleration(scheduler_name)
    if not isinstance(tolerations, list):
        result.patch.append({"op": "add", "path": pointer("spec", "tolerations"), "value": [toleration]})
        result.changes.append("tolerations")
    elif not any(isinstance(t, Mapping) and tolerates_managed(t, scheduler_name) for t in tolerations):
        result.patch.append({"op": "add", "path": pointer("spec", "tolerations", "-"), "value": toleration})
        result.changes.append("tolerations")

    # DRA device requests become a claim of the devices Slurm allocates (slurm_bridge/rules/dra/admission.py).
    dra_patch, result.problems = rewrite(pod)
    if dra_patch:
        result.patch.extend(dra_patch)
        result.changes.append("resourceClaims")
    return result


def _refuse(problems: Sequence[str]) -> Decision:
    count = f"{len(problems)} problems: " if len(problems) > 1 else ""
    return Decision(allowed=False, code=422, reason="Invalid", message="slurm-bridge: " + count + "; ".join(problems))


def mutate(request: AdmissionRequest, config: Config, api_problems: Sequence[str] = ()) -> Decision:
    """Mutating webhook decision: only pod CREATE is changed, everything else passes untouched.

    ``api_problems``: why the request needs an API this cluster does not serve (webhook/apis.py,
    asked here because only a mutating webhook sees a field the API server is about to drop)."""
    if api_problems:
        return _refuse(api_problems)
    if request.operation != "CREATE" or request.sub_resource or (request.group, request.kind) != ("", "Pod"):
        return Decision(allowed=True, reason="not a pod create")
    assert request.object is not None  # parse_review guarantees it for CREATE
    m = mutate_pod(request.object, config.schedulerName)
    if m.skipped:
        return Decision(allowed=True, reason=m.skipped)
    if m.problems:
        return _refuse(m.problems)
    reason = "set " + ", ".join(m.changes) if m.changes else "already mutated"
    return Decision(allowed=True, reason=reason, patch=m.patch, warnings=m.warnings)
