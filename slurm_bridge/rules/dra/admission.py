"""Admission of a pod's DRA request: read from its containers (every problem naming its field),
rewritten into the bridge's claim entry by the mutating webhook, checked for consistency, and
device-plugin GPUs refused where native jobs share the GPUs."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.kubeformats import pointer
from slurm_bridge.core.objects import Obj
from slurm_bridge.rules.dra.classes import DEVICE_CLASSES, EXTENDED_PREFIX, SHARD_GRES, device_class, known_classes
from slurm_bridge.rules.dra.recorded import claim_name_of, recorded_requests
from slurm_bridge.rules.resources import GPU_RESOURCES, parse_quantity


def _containers(spec: Mapping[str, Any]) -> Iterable[tuple[str, int, Mapping[str, Any]]]:
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            if isinstance(c, Mapping):
                yield kind, i, c


@dataclass
class _Scan:
    """What the containers' resources say, gathered for the checks across containers."""

    counts: dict[str, int] = field(default_factory=dict)  # DeviceClass -> devices
    problems: list[str] = field(default_factory=list)
    holders: set[str] = field(default_factory=set)  # the containers that request DRA devices
    native_cpu: list[str] = field(default_factory=list)  # paths of native cpu requests and limits
    plugin_gpus: list[str] = field(default_factory=list)  # paths of device-plugin GPU requests and limits


def _scan_request(scan: _Scan, path: str, key: str, value: Any, holder: str) -> None:
    """One entry of a container's requests or limits."""
    if key == "cpu":
        scan.native_cpu.append(path)
    if key in GPU_RESOURCES:
        scan.plugin_gpus.append(path)
    if not key.startswith(EXTENDED_PREFIX):
        return
    cls = key.removeprefix(EXTENDED_PREFIX)
    if device_class(cls) is None:
        scan.problems.append(
            f"{path}: DeviceClass {cls!r} cannot be mapped to Slurm; the bridge maps {known_classes()} "
            f"(or request nvidia.com/gpu, or use the {names.ANN_GRES} annotation)"
        )
        return
    try:
        amount = parse_quantity(value)
    except ValueError as e:
        scan.problems.append(f"{path}: {e}")
        return
    if amount.denominator != 1 or amount < 1:
        scan.problems.append(f"{path}: {value!r} is not a whole number of devices")
        return
    scan.counts[cls] = max(scan.counts.get(cls, 0), int(amount))
    scan.holders.add(holder)


def _conflicts(scan: _Scan, where: str) -> list[str]:
    """Requests that cannot stand together: devices in two containers, dra.cpu beside native cpu,
    two classes of one GRES, DRA GPUs beside device-plugin GPUs."""
    problems: list[str] = []
    if len(scan.holders) > 1:
        problems.append(
            f"{where}: containers {sorted(scan.holders)} all request DRA devices; Slurm allocates a pod's devices "
            "as one set, which the bridge gives to one container: request them in one container only"
        )
    if "dra.cpu" in scan.counts and scan.native_cpu:
        problems.append(
            f"{scan.native_cpu[0]}: a pod that requests {EXTENDED_PREFIX}dra.cpu cannot also request native cpu "
            "(its CPUs are the dra.cpu devices); remove the cpu requests and limits"
        )
    gres_classes: dict[str, list[str]] = {}
    typed: dict[str, list[str]] = {}  # GRES name -> classes of a typed GRES (MIG profiles)
    shared: list[str] = []
    for cls in scan.counts:
        dc = device_class(cls)
        assert dc is not None
        if dc.kind == "gres":
            gres_classes.setdefault(dc.slurm_gres, []).append(cls)
            if dc.gres_type:
                typed.setdefault(dc.gres, []).append(cls)
            if dc.shared:
                shared.append(cls)
    if shared and (len(gres_classes) > 1 or scan.plugin_gpus):
        others = sorted(c for gres, classes in gres_classes.items() if gres != SHARD_GRES for c in classes)
        problems.append(
            f"{where}: DeviceClass {shared[0]} (shards of one GPU) with "
            f"{', '.join(others) if others else 'device-plugin GPUs'} in one pod: a GPU is Slurm's either whole "
            "or as shards; ask for shards and GPUs in different pods"
        )
    for gres, classes in sorted(gres_classes.items()):
        if len(classes) > 1:
            problems.append(
                f"{where}: DeviceClasses {sorted(classes)} are all the Slurm GRES {gres!r}; request one of them"
            )
        if gres in typed:
            problems.append(
                f"{where}: DeviceClasses {sorted(classes)} (whole GPUs) and {sorted(typed[gres])} (MIG slices) "
                f"in one pod: Slurm's untyped {gres!r} could be met with a MIG slice; ask for whole GPUs and "
                "MIG slices in different pods"
            )
        if gres == "gpu" and scan.plugin_gpus:
            problems.append(
                f"{scan.plugin_gpus[0]}: a pod that requests GPUs through a DeviceClass ({classes[0]}) cannot also "
                "request device-plugin GPUs: Slurm would not know which of its GPUs are whose; use one or the other"
            )
    return problems


def device_requests(spec: Mapping[str, Any], where: str = "spec") -> tuple[dict[str, int], str | None, list[str]]:
    """The pod's DRA requests ({class: count}), the container that makes them, and every problem
    (each naming its field). Kubernetes requires an extended resource's request to equal its
    limit, so either gives the count."""
    scan = _Scan()
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        name = str(c.get("name") or f"{kind}[{i}]")
        for part in ("requests", "limits"):
            for key, value in (resources.get(part) or {}).items():
                _scan_request(scan, f'{where}.{kind}[{i}].resources.{part}["{key}"]', key, value, name)
    holder = next(iter(scan.holders)) if len(scan.holders) == 1 else None
    return scan.counts, holder, scan.problems + _conflicts(scan, where)


def rewrite(pod: Mapping[str, Any]) -> tuple[list[Obj], list[str]]:
    """JSON patch that replaces the pod's DRA extended resources by a claim the bridge will make
    (empty when there are none), and the problems that forbid the pod.

    The container that asked gets the whole claim; with ``dra.cpu`` every other container gets
    the claim's CPUs (its ``cpu`` request), so the whole pod runs on the cores Slurm allocated.

    The claim's name is chosen here, because a pod's resourceClaims cannot change later: the
    pod's name (or generateName), which may be unknown yet, plus a random suffix.
    """
    spec = pod.get("spec") or {}
    counts, holder, problems = device_requests(spec)
    if problems or not counts:
        return [], problems
    meta = objects.meta(pod)
    base = str(meta.get("name") or meta.get("generateName") or "pod")[:200].rstrip("-.")
    claim_name = f"{base}-{names.POD_CLAIM_ENTRY}-{secrets.token_hex(4)}"
    patch: list[Obj] = []
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            for key in resources.get(part) or {}:
                if key.startswith(EXTENDED_PREFIX):
                    patch.append({"op": "remove", "path": pointer("spec", kind, i, "resources", part, key)})
        entry: dict[str, str] = {"name": names.POD_CLAIM_ENTRY}
        if str(c.get("name") or f"{kind}[{i}]") != holder:
            if "dra.cpu" not in counts:
                continue
            # The pod's CPUs are the cores Slurm allocated: every container (init and sidecar
            # containers too) runs on them, or one outside them could share a core with a native job.
            entry["request"] = DEVICE_CLASSES["dra.cpu"].request
        if resources.get("claims"):
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources", "claims", "-"), "value": entry})
        elif "resources" in c:
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources", "claims"), "value": [entry]})
        else:
            patch.append({"op": "add", "path": pointer("spec", kind, i, "resources"), "value": {"claims": [entry]}})
    ref = {"name": names.POD_CLAIM_ENTRY, "resourceClaimName": claim_name}
    if spec.get("resourceClaims"):
        patch.append({"op": "add", "path": "/spec/resourceClaims/-", "value": ref})
    else:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": [ref]})
    value = json.dumps(counts, sort_keys=True)
    if meta.get("annotations"):
        patch.append(
            {"op": "add", "path": pointer("metadata", "annotations", names.ANN_DEVICE_REQUESTS), "value": value}
        )
    else:
        patch.append({"op": "add", "path": "/metadata/annotations", "value": {names.ANN_DEVICE_REQUESTS: value}})
    return patch, []


def consistency_problems(pod: Mapping[str, Any]) -> list[str]:
    """The request annotation and the claim entry come together and the annotation parses (a
    user who writes both by hand asks for Slurm-allocated devices, which is fine)."""
    annotations = objects.annotations(pod)
    has_annotation = names.ANN_DEVICE_REQUESTS in annotations
    has_entry = any(
        isinstance(e, Mapping) and e.get("name") == names.POD_CLAIM_ENTRY
        for e in (pod.get("spec") or {}).get("resourceClaims") or []
    )
    if has_annotation:
        try:
            recorded_requests(annotations)
        except ValueError as e:
            return [f"metadata.annotations: {e}"]
    if has_annotation and not claim_name_of(pod):
        return [
            f"metadata.annotations[{names.ANN_DEVICE_REQUESTS}]: set without the spec.resourceClaims entry "
            f"{names.POD_CLAIM_ENTRY!r} naming a ResourceClaim; request devices with "
            f"{EXTENDED_PREFIX}<class> instead"
        ]
    if has_entry and not has_annotation:
        return [
            f"spec.resourceClaims: the entry name {names.POD_CLAIM_ENTRY!r} is the bridge's, for the devices "
            f"Slurm allocates; rename it, or request devices with {EXTENDED_PREFIX}<class>"
        ]
    return []


def plugin_gpu_fields(spec: Mapping[str, Any], where: str = "spec") -> list[str]:
    """The fields of a pod spec that ask for a device plugin's GPUs (``nvidia.com/gpu``, ``amd.com/gpu``)."""
    out: list[str] = []
    for kind, i, c in _containers(spec):
        resources = c.get("resources") or {}
        for part in ("requests", "limits"):
            out += [
                f'{where}.{kind}[{i}].resources.{part}["{k}"]' for k in resources.get(part) or {} if k in GPU_RESOURCES
            ]
    return out


def device_plugin_problem(fields: Sequence[str], partition: str | None, hybrid: Sequence[str], follows: bool) -> str:
    """Why a job whose pods ask for a device plugin's GPUs (``fields``) may not run in ``partition``
    (a comma list; None: Slurm's default) ("" when it may). On a hybrid node native jobs use the
    same GPUs, and the plugin, not Slurm, picks the container's: refused in a partition of
    ``hybrid`` (or Slurm's default one, which may be such), unless ``follows``: the site's plugin
    hands out exactly the GPUs Slurm allocated."""
    if not fields or follows or not hybrid:
        return ""
    asked = [p.strip() for p in (partition or "").split(",") if p.strip()]
    hits = [p for p in asked if p in hybrid] if asked else []
    if asked and not hits:
        return ""
    what = f"partition {', '.join(hits)}, which holds" if hits else "Slurm's default partition, which may hold"
    return (
        f"{fields[0]}: a device plugin's GPUs in {what} hybrid nodes (native Slurm jobs use the same GPUs): Slurm "
        "counts the GPUs but the device plugin picks which ones the container gets, which may be a native job's; "
        f"ask with {EXTENDED_PREFIX}gpu.nvidia.com: N instead (Slurm picks the GPUs and the pod gets exactly those, "
        "docs/gpus.md), or choose a partition without hybrid nodes"
    )
