"""Pod and workload validation.

Two rules: the labels and annotations through which the bridge records a pod's Slurm allocation
are only written by the bridge itself (a user copying them would make the bridge believe a pod
was allocated), and ``slurmjob.slinky.slurm.net/*`` annotations must parse, so a typo is
reported at ``kubectl apply`` instead of as a Slurm submission error later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.config import Config
from slurm_bridge.translate import validate_annotations

from .review import AdmissionRequest, Decision

# Workload kinds (group, kind) whose own annotations configure the Slurm job, with the paths
# of their pod templates ("*" walks a list), which are checked like pods so errors show early.
WORKLOAD_POD_TEMPLATES: Final[Mapping[tuple[str, str], tuple[tuple[str, ...], ...]]] = {
    ("batch", "Job"): (("spec", "template"),),
    ("jobset.x-k8s.io", "JobSet"): (("spec", "replicatedJobs", "*", "template", "spec", "template"),),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        ("spec", "leaderWorkerTemplate", "leaderTemplate"),
        ("spec", "leaderWorkerTemplate", "workerTemplate"),
    ),
    ("scheduling.x-k8s.io", "PodGroup"): (),
}

_ONLY_BRIDGE: Final = "only slurm-bridge itself sets it"


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _metadata(obj: Mapping[str, Any] | None) -> tuple[dict[str, str], dict[str, str]] | None:
    """(labels, annotations) of an object or pod template, None if there is no such object."""
    if not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return {}, {}
    return _str_map(meta.get("labels")), _str_map(meta.get("annotations"))


def _slurmjob(annotations: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in annotations.items() if k.startswith(names.SLURMJOB_PREFIX)}


def reserved_key_violations(
    new: Mapping[str, str],
    old: Mapping[str, str] | None,
    reserved: frozenset[str],
    what: str,
    where: str = "",
) -> list[str]:
    """Reserved keys set on create (``old`` is None) or added, changed or removed on update."""
    problems = []
    for key in sorted(reserved):
        before = None if old is None else old.get(key)
        after = new.get(key)
        if before == after:
            continue
        if old is None:
            problem = f"{what} {key}={after!r} is reserved ({_ONLY_BRIDGE}); remove it"
        elif before is None:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be added (value {after!r})"
        elif after is None:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be removed (value {before!r})"
        else:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be changed from {before!r} to {after!r}"
        problems.append(where + problem)
    return problems


def annotation_problems(new: Mapping[str, str], old: Mapping[str, str] | None, where: str = "") -> list[str]:
    """Errors in the slurmjob annotations, checked on create and whenever they change."""
    ours = _slurmjob(new)
    if old is not None and ours == _slurmjob(old):
        return []
    if not ours:
        return []
    return [where + str(e) for e in validate_annotations(ours)]


def _walk(obj: Any, path: Sequence[str], at: str) -> Iterator[tuple[str, Any]]:
    if not path:
        yield at, obj
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                yield from _walk(item, rest, f"{at}[{i}]")
        return
    if isinstance(obj, Mapping) and head in obj:
        yield from _walk(obj[head], rest, f"{at}.{head}" if at else head)


def pod_templates(obj: Mapping[str, Any] | None, paths: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The pod templates of a workload by location, for example ``spec.replicatedJobs[0]...``."""
    found: dict[str, Any] = {}
    for path in paths:
        found.update(_walk(obj, path, ""))
    return found


def _check_pod_meta(
    new: tuple[dict[str, str], dict[str, str]],
    old: tuple[dict[str, str], dict[str, str]] | None,
    trusted: bool,
    where: str = "",
) -> tuple[list[str], list[str]]:
    """(reserved-key problems, annotation problems) for one pod or pod template."""
    reserved: list[str] = []
    if not trusted:
        reserved += reserved_key_violations(
            new[0], None if old is None else old[0], names.RESERVED_POD_LABELS, "label", where
        )
        reserved += reserved_key_violations(
            new[1], None if old is None else old[1], names.RESERVED_POD_ANNOTATIONS, "annotation", where
        )
    invalid = annotation_problems(new[1], None if old is None else old[1], where)
    return reserved, invalid


def _decide(reserved: list[str], invalid: list[str], reason: str) -> Decision:
    problems = reserved + invalid
    if not problems:
        return Decision(allowed=True, reason=reason)
    count = f"{len(problems)} problems: " if len(problems) > 1 else ""
    message = f"slurm-bridge: {count}" + "; ".join(problems)
    if reserved:
        return Decision(allowed=False, code=403, reason="Forbidden", message=message)
    return Decision(allowed=False, code=422, reason="Invalid", message=message)


def validate(request: AdmissionRequest, config: Config) -> Decision:
    """Validating webhook decision for pods and the workload kinds in WORKLOAD_POD_TEMPLATES."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision(allowed=True, reason=f"{request.operation} is always allowed")
    gk = (request.group, request.kind)
    old_obj = request.old_object if request.operation == "UPDATE" else None
    new_meta = _metadata(request.object)
    if new_meta is None:
        return Decision(allowed=True, reason="no object")
    old_meta = _metadata(old_obj)
    trusted = request.username in config.trustedUsers

    if gk == ("", "Pod"):
        reserved, invalid = _check_pod_meta(new_meta, old_meta, trusted)
        return _decide(reserved, invalid, "trusted user" if trusted else "ok")

    paths = WORKLOAD_POD_TEMPLATES.get(gk)
    if paths is None:
        return Decision(allowed=True, reason=f"kind {request.group}/{request.kind} is not checked")
    reserved, invalid = [], annotation_problems(new_meta[1], None if old_meta is None else old_meta[1])
    old_templates = pod_templates(old_obj, paths)
    for where, template in pod_templates(request.object, paths).items():
        t_new = _metadata(template)
        if t_new is None:
            continue
        t_old = _metadata(old_templates.get(where)) if request.operation == "UPDATE" else None
        if request.operation == "UPDATE" and t_old is None:
            t_old = ({}, {})  # a template added by an update: everything in it is new
        r, i = _check_pod_meta(t_new, t_old, trusted, f"{where}.metadata: ")
        reserved += r
        invalid += i
    return _decide(reserved, invalid, "ok")
