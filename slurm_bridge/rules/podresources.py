"""What one pod needs from its node (cpus, memory, GPUs), in Slurm's units, as kube-scheduler
counts it.

Pure: callers pass pods as the plain dicts the Kubernetes API returns. A malformed quantity is a
ValueError naming the pod and container, so the webhook and the operator report the same text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from slurm_bridge.core import objects
from slurm_bridge.rules.dra.gres import slurm_needs
from slurm_bridge.rules.dra.recorded import recorded_requests
from slurm_bridge.rules.resources import GPU_RESOURCES, parse_quantity

__all__ = ["PodResources", "pod_label", "pod_requests", "pod_resources"]

_MIB: Final = 2**20


@dataclass(frozen=True)
class PodResources:
    """What one pod needs from its node, in Slurm's units."""

    cpus: int
    memory_mib: int | None  # None: no container states memory, so Slurm applies its default
    # GPUs by where they were asked for (a device-plugin resource, or DRA's GRES), zero omitted;
    # all are Slurm's gres/gpu
    gpus: dict[str, int] = field(default_factory=dict)


_TRACKED: Final = ("cpu", "memory", *GPU_RESOURCES)


def _amounts(resources: Any, where: str, parts: tuple[str, ...] = ("requests", "limits")) -> dict[str, Fraction]:
    """max(request, limit) per tracked resource: a limit alone is the request (Kubernetes'
    defaulting), and sizing the Slurm allocation to the limit keeps the pod inside it. With
    ``parts=("requests",)``: the requests alone, as kube-scheduler counts a pod on its node."""
    out: dict[str, Fraction] = {}
    if not isinstance(resources, Mapping):
        return out
    for part in parts:
        values = resources.get(part)
        if not isinstance(values, Mapping):
            continue
        for name in _TRACKED:
            if values.get(name) is None:
                continue
            try:
                q = parse_quantity(values[name])
            except ValueError as e:
                raise ValueError(f"{where}: resources.{part}.{name}: {e}") from None
            if q < 0:
                raise ValueError(f"{where}: resources.{part}.{name}: {values[name]!r} is negative")
            out[name] = max(out.get(name, Fraction(0)), q)
    return out


def _add(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {k: a.get(k, Fraction(0)) + b.get(k, Fraction(0)) for k in set(a) | set(b)}


def _max(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in set(a) | set(b)}


def pod_label(pod: Mapping[str, Any]) -> str:
    """``pod <namespace>/<name>`` (or its generateName) for messages that must say which pod."""
    meta = objects.meta(pod)
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"pod {ns}/{name}" if ns else f"pod {name}"


def _containers(spec: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    items = spec.get(key) or []
    return [c for c in items if isinstance(c, Mapping)]


def _container_total(
    spec: Mapping[str, Any], label: str, parts: tuple[str, ...] = ("requests", "limits")
) -> dict[str, Fraction]:
    """App containers add up; each init container runs alone (plus the sidecars started before it),
    so the pod needs the larger of the two; restartable (sidecar) init containers keep running and
    so add to the app containers."""
    total: dict[str, Fraction] = {}
    for c in _containers(spec, "containers"):
        total = _add(total, _amounts(c.get("resources"), f"{label}: container {c.get('name')!r}", parts))

    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in _containers(spec, "initContainers"):
        need = _amounts(c.get("resources"), f"{label}: init container {c.get('name')!r}", parts)
        if c.get("restartPolicy") == "Always":
            total = _add(total, need)
            sidecars = _add(sidecars, need)
            need = sidecars
        else:
            need = _add(need, sidecars)
        init_peak = _max(init_peak, need)
    return _max(total, init_peak)


def pod_resources(pod: Mapping[str, Any]) -> PodResources:
    """The pod's effective need, by the rules kube-scheduler uses to fit a pod on a node.

    The containers' total (init and sidecar containers included); pod-level ``spec.resources``
    replaces it for cpu and memory; ``spec.overhead`` (RuntimeClass) comes on top. Raises
    ValueError naming the container for a malformed quantity.
    """
    spec = pod.get("spec") or {}
    label = pod_label(pod)
    total = _container_total(spec, label)

    pod_level = _amounts(spec.get("resources"), f"{label}: spec.resources")
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    overhead = {}
    if isinstance(spec.get("overhead"), Mapping):
        overhead = _amounts({"requests": spec["overhead"]}, f"{label}: spec.overhead")
    total = _add(total, overhead)

    memory = total.get("memory", Fraction(0))
    cpus = max(1, math.ceil(total.get("cpu", Fraction(0))))
    gpus = {g: math.ceil(total[g]) for g in GPU_RESOURCES if total.get(g, 0) > 0}
    # DRA requests, which the webhook took out of the containers (slurm_bridge/rules/dra/admission.py): a GPU
    # DeviceClass is its GRES, dra.cpu the pod's CPUs (native cpu is refused beside it).
    try:
        counts = recorded_requests(objects.annotations(pod))
    except ValueError as e:
        raise ValueError(f"{label}: {e}") from None
    dra_gres, dra_cpus = slurm_needs(counts)
    if dra_cpus is not None:
        cpus = dra_cpus
    for gres, count in dra_gres.items():  # gpu, gpu:<MIG profile>, or shard (GPU shares)
        gpus[f"dra/{gres}"] = count
    return PodResources(cpus=cpus, memory_mib=math.ceil(memory / _MIB) if memory > 0 else None, gpus=gpus)


def pod_requests(pod: Mapping[str, Any]) -> tuple[Fraction, Fraction]:
    """(CPUs, memory in bytes) the pod takes of its node's allocatable, as kube-scheduler counts
    it: the containers' requests (init and sidecar containers by the rules above), pod-level
    requests instead where set, plus the overhead. For the SlurmResourcesFit node condition."""
    spec = pod.get("spec") or {}
    label = pod_label(pod)
    total = _container_total(spec, label, ("requests",))
    pod_level = _amounts(spec.get("resources"), f"{label}: spec.resources", ("requests",))
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    if isinstance(spec.get("overhead"), Mapping):
        total = _add(total, _amounts({"requests": spec["overhead"]}, f"{label}: spec.overhead", ("requests",)))
    return total.get("cpu", Fraction(0)), total.get("memory", Fraction(0))
