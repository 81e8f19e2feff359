"""How a job shares its nodes with other Slurm jobs, native ones included (docs/colocation.md), and
what the ``coResident`` mode asks of pods and annotations. Pure: the job request
(:mod:`slurm_bridge.rules.translate`) and admission (webhook/validate.py) read the same rules.

The mode of a job: the ``node-sharing`` annotation, else the Go bridge's ``exclusive`` annotation
(``"true"``: whole nodes; ``"false"``: not whole nodes, i.e. the configured mode, or ``timeShared``
where the configured one is ``exclusive``: what ``exclusive: "false"`` means in the Go bridge), else
the config's ``nodeSharing``.

``coResident`` shares a node core by core with native jobs, so Slurm's reservation must be what
holds the pod: every container (init and sidecar containers too) has a memory limit, and a CPU
limit or the pod's ``dra.cpu`` devices (which every container of the pod is given: slurm_bridge/rules/dra/admission.py),
and the job is sized from them; the ``cpu-per-task`` and ``mem-per-node`` annotations, which could
only restate or contradict the limits, are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX
from slurm_bridge.rules.dra.recorded import recorded_requests
from slurm_bridge.slurm.models import NodeSharing

__all__ = [
    "CO_RESIDENT_SIZING_ANNOTATIONS",
    "annotation_problems",
    "limit_problems",
    "sharing_mode",
]

# The annotations that size a job's nodes in Slurm, which in coResident mode come from the limits.
CO_RESIDENT_SIZING_ANNOTATIONS: Final = {
    "cpus_per_task": names.ANN_CPU_PER_TASK,
    "memory_per_node_mib": names.ANN_MEM_PER_NODE,
}
_DRA_CPU: Final = EXTENDED_PREFIX + "dra.cpu"
_WHY: Final = (
    "in coResident node sharing Slurm reserves what the limits say beside native jobs, and only limits hold a "
    "container to it"
)


def sharing_mode(configured: NodeSharing, values: Mapping[str, object]) -> NodeSharing:
    """The job's mode from its annotations' values (JobRequest field names, as
    :func:`slurm_bridge.rules.jobannotations.read_annotations` gives them) and the configured mode."""
    mode = values.get("node_sharing")
    if mode == "exclusive" or mode == "timeShared" or mode == "coResident":
        return mode
    exclusive = values.get("exclusive")
    if exclusive is True:
        return "exclusive"
    if exclusive is False and configured == "exclusive":
        return "timeShared"
    return configured


def annotation_problems(values: Mapping[str, object], mode: NodeSharing, where: str = "") -> list[str]:
    """The sizing annotations a coResident job may not carry (``values`` as for :func:`sharing_mode`)."""
    if mode != "coResident":
        return []
    return [
        f"{where}{key}: the Slurm job of coResident node sharing is sized from the pods' limits (memory rounded up "
        "to MiB, CPUs up to whole CPUs); this annotation could only make Slurm's reservation differ from what "
        "holds the containers: remove it"
        for field, key in CO_RESIDENT_SIZING_ANNOTATIONS.items()
        if field in values
    ]


def _containers(spec: Mapping[str, Any]) -> Iterable[tuple[str, int, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers"):
        items = spec.get(kind)
        for i, c in enumerate(items if isinstance(items, list) else []):
            if isinstance(c, Mapping):
                yield kind, i, c


def _limits(resources: Any) -> Mapping[str, Any]:
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    return limits if isinstance(limits, Mapping) else {}


def _requests_dra_cpu(spec: Mapping[str, Any], annotations: Mapping[str, Any]) -> bool:
    """Whether the pod's CPUs are dra.cpu devices: recorded by the mutating webhook, or (in a pod
    template, which the webhook never rewrites) still in a container's resources."""
    try:
        if "dra.cpu" in recorded_requests(annotations):
            return True
    except ValueError:
        pass  # a bad annotation is refused on its own (consistency_problems)
    for _, _, c in _containers(spec):
        resources = c.get("resources")
        for part in ("requests", "limits"):
            values = resources.get(part) if isinstance(resources, Mapping) else None
            if isinstance(values, Mapping) and _DRA_CPU in values:
                return True
    return False


def limit_problems(
    spec: Mapping[str, Any], annotations: Mapping[str, Any] | None = None, where: str = "spec"
) -> list[str]:
    """What a pod (or pod template) ``spec`` lacks for coResident node sharing, one problem per
    container, each naming its field. A pod-level limit (``spec.resources.limits``) holds every
    container; ``annotations`` are the pod's (its recorded DRA requests)."""
    pod_limits = _limits(spec.get("resources"))
    dra_cpu = _requests_dra_cpu(spec, annotations or {})
    problems: list[str] = []
    for kind, i, c in _containers(spec):
        limits = _limits(c.get("resources"))
        missing = []
        if limits.get("memory") is None and pod_limits.get("memory") is None:
            missing.append("no memory limit (resources.limits.memory)")
        if limits.get("cpu") is None and pod_limits.get("cpu") is None and not dra_cpu:
            missing.append(f"neither a cpu limit (resources.limits.cpu) nor the pod's {_DRA_CPU} devices")
        if missing:
            problems.append(
                f"{where}.{kind}[{i}] ({c.get('name')!r}) has {' and '.join(missing)}: {_WHY}; set them (or "
                f"name another mode with {names.ANN_NODE_SHARING})"
            )
    return problems
