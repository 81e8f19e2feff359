"""A change of slurmjob annotations at admission (UPDATE): what it reaches, said before it is stored
(docs/annotations.md, "Changing annotations"; the rules are slurm_bridge/rules/jobchanges.py's).

A pod the bridge manages shows where its Slurm job is: gated while the job waits, released
(``names.ANN_SLURM_NODE``, its job id label) once Slurm allocated it. So a change of its own
annotations is refused here when it cannot reach the job: any change once the job is allocated, a
key that cannot change once the job is submitted, a value Slurm cannot go back to. A pod whose job
a workload configures (a Job, a JobSet, a PodGroup, ...) is not configured by its own annotations:
a change there would do nothing, and is refused with where to make it.

A workload's jobs may wait or run, and only the operator knows which: a change is stored, with a
warning that says what it reaches (kubectl prints it), and the operator says in an Event on the
workload what did not reach a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.rules import jobchanges, tenancy
from slurm_bridge.rules.workloadkinds import controller_of, scheduling_group_name, slurmjob_annotations


def configured_by(pod: Mapping[str, Any]) -> str | None:
    """What configures the pod's Slurm job when the pod does not (None: the pod itself)."""
    spec = pod.get("spec") or {}
    podgroup = scheduling_group_name(spec) if isinstance(spec, Mapping) else None
    if podgroup:
        return f"its PodGroup {podgroup} (with its Job or JobSet and its Workload)"
    labels = objects.labels(pod)
    if labels.get(names.LABEL_POD_GROUP):
        return f"its PodGroup {labels[names.LABEL_POD_GROUP]}"
    owner = controller_of(pod)
    if owner is not None:
        return f"its {owner.get('kind')} {owner.get('name')} (or the workload above it)"
    return None


def allocated_job(pod: Mapping[str, Any]) -> str | None:
    """``Slurm job N`` when the pod's job was allocated (the bridge released the pod), else None."""
    job_id = objects.labels(pod).get(names.LABEL_SLURM_JOB_ID)
    released = names.ANN_SLURM_NODE in objects.annotations(pod)
    if job_id is None and not released and not (pod.get("spec") or {}).get("nodeName"):
        return None
    return f"Slurm job {job_id}" if job_id else "its Slurm job"


def pod_change_problems(
    pod: Mapping[str, Any], old: Mapping[str, Any], config: Config, policy: tenancy.TenantPolicy | None
) -> list[str]:
    """Why a change of a managed pod's slurmjob annotations cannot be made (none when it reaches
    its waiting job)."""
    before, after = slurmjob_annotations(objects.annotations(old)), slurmjob_annotations(objects.annotations(pod))
    if before == after or (pod.get("spec") or {}).get("schedulerName") != config.schedulerName:
        return []
    where = configured_by(old)
    if where is not None:
        keys = ", ".join(jobchanges.changed_keys(before, after))
        return [
            f"{keys}: a pod's own slurmjob annotations do not configure its Slurm job when {where} does: "
            "change them there (docs/annotations.md)"
        ]
    job = allocated_job(old)
    if job is not None:
        problems = jobchanges.allocated_problems(before, after, job)
        advice = "; delete the pod and create it with the new value"
        return [p + advice for _, p in sorted(problems.items())]
    default = jobchanges.gives_default_account(policy)
    placed = names.ANN_TOPOLOGY in before
    found = jobchanges.waiting_problems(before, after, default_account=default, topology=placed)
    return [p for _, p in sorted(found.items())]


def workload_change_warnings(obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> list[str]:
    """What a change of a workload's slurmjob annotations reaches, as admission warnings."""
    before, after = slurmjob_annotations(objects.annotations(old)), slurmjob_annotations(objects.annotations(obj))
    warnings = []
    for key in jobchanges.changed_keys(before, after):
        what = jobchanges.describe(key, before, after)
        if key in jobchanges.UPDATABLE:
            warnings.append(
                f"slurm-bridge: {what}: reaches this workload's Slurm jobs that wait in Slurm's queue and those not "
                f"submitted yet; a job already allocated keeps its value (an {names.REASON_UPDATE_TOO_LATE} Event on "
                "this object)"
            )
        else:
            warnings.append(
                f"slurm-bridge: {what}: reaches only Slurm jobs not submitted yet; a submitted job keeps its value "
                f"(an {names.REASON_UPDATE_NOT_APPLIED} Event on this object)"
            )
    return warnings
