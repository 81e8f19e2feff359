"""Admission of node sharing (docs/colocation.md): a job that shares its nodes core by core with
native Slurm jobs (``coResident``) must be held by what Slurm reserves for it, so its pods need
limits on every container and its objects no sizing annotation (the rules:
slurm_bridge/rules/nodesharing.py). A pod that is its own job, and a workload with pod templates, is
judged with the mode its own annotations and the config give; an object without pod templates
(PodGroups, Workloads, CompositePodGroups) for its annotations. A pod or template whose group is
rooted elsewhere (a workload's member, a template whose pods join a built-in PodGroup) is
configured by options only the operator merges: it is admitted with a warning, and the operator
refuses its group at submit if the group's job is coResident."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube import schedulingapi
from slurm_bridge.rules import nodesharing, workloadkinds
from slurm_bridge.rules.jobannotations import annotation_values, validate_annotations
from slurm_bridge.rules.workloadkinds import scheduling_group_name, slurmjob_annotations
from slurm_bridge.slurm.models import NodeSharing

from .review import AdmissionRequest
from .templates import spec_of


@dataclass(frozen=True)
class Template:
    """A workload's bridge pod template: its spec, the one it had before an update, and whether
    its pods' group is rooted elsewhere (a built-in PodGroup)."""

    spec: Mapping[str, Any]
    old_spec: Mapping[str, Any] | None
    grouped: bool


def _templates(
    request: AdmissionRequest, managed: Mapping[str, Mapping[str, Any]], old: Mapping[str, Any]
) -> dict[str, Template]:
    """A workload's bridge pod templates (``managed``: by location, ``<template>.spec``; ``old``:
    the old object's templates by location)."""
    gk = (request.group, request.kind)
    job_gang = gk == workloadkinds.JOB.group_kind and schedulingapi.job_gang(spec_of(request.object))
    out = {}
    for where, spec in managed.items():
        before = old.get(where.removesuffix(".spec"))
        grouped = job_gang or scheduling_group_name(spec) is not None
        out[where] = Template(spec, None if before is None else spec_of(before), grouped)
    return out


def _mode(annotations: Mapping[str, str], config: Config) -> tuple[dict[str, object], NodeSharing]:
    """The values of the valid slurmjob annotations, and the node sharing they and the config give."""
    values = annotation_values(slurmjob_annotations(annotations))
    return values, nodesharing.sharing_mode(config.nodeSharing, values)


def _member_warning(found: Sequence[str], where: str) -> str:
    return (
        f"{where}: this bridge's nodeSharing is coResident, and if its group's Slurm job is coResident (the "
        f"group's root object may name another mode with {names.ANN_NODE_SHARING}) the bridge will not submit "
        f"it: {'; '.join(found)}"
    )


def _unchanged(new: Mapping[str, str], old: Mapping[str, str] | None) -> bool:
    return old is not None and slurmjob_annotations(new) == slurmjob_annotations(old)


def _annotations(obj: Any) -> dict[str, str] | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if meta is None:
        return None
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in (found or {}).items()}


def pod_problems(
    pod: Mapping[str, Any], old_annotations: Mapping[str, str] | None, own_group: bool, config: Config
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a pod (``old_annotations``: None on create), if it is the bridge's.
    Its limits cannot change on an update, so only a change of its annotations is judged again."""
    spec, annotations = spec_of(pod), _annotations(pod) or {}
    if spec.get("schedulerName") != config.schedulerName or _unchanged(annotations, old_annotations):
        return [], []
    if own_group:
        values, mode = _mode(annotations, config)
        if mode != names.NODE_SHARING_CO_RESIDENT:
            return [], []
        return nodesharing.annotation_problems(values, mode) + nodesharing.limit_problems(spec, annotations), []
    if old_annotations is None and config.nodeSharing == names.NODE_SHARING_CO_RESIDENT:
        found = nodesharing.limit_problems(spec, annotations)
        if found:
            return [], [_member_warning(found, "pod")]
    return [], []


def workload_problems(
    request: AdmissionRequest, managed: Mapping[str, Mapping[str, Any]], old: Mapping[str, Any], config: Config
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a workload (``managed``: its bridge pod template specs by location,
    ``<template>.spec``; ``old``: the old object's templates by location): in coResident mode no
    sizing annotation, and limits on every container of its bridge pod templates; on an update
    only what changed is judged again. Nothing while its slurmjob annotations are invalid: its mode
    is not known (their errors are reported)."""
    annotations = _annotations(request.object) or {}
    old_annotations = _annotations(request.old_object) if request.operation == "UPDATE" else None
    if validate_annotations(slurmjob_annotations(annotations)):
        return [], []
    templates = _templates(request, managed, old)
    values, mode = _mode(annotations, config)
    if mode != names.NODE_SHARING_CO_RESIDENT:
        return [], []
    same_annotations = _unchanged(annotations, old_annotations)
    problems = [] if same_annotations else nodesharing.annotation_problems(values, mode)
    warnings: list[str] = []
    for where, t in templates.items():
        if same_annotations and t.old_spec == t.spec:
            continue
        found = nodesharing.limit_problems(t.spec, None, where)
        if found and t.grouped:
            warnings.append(_member_warning(found, where))
        else:
            problems += found
    return problems, warnings
