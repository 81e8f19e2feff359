"""Slurm's reasons for keeping a job pending, in words (squeue(1), "JOB REASON CODES").

``explain`` turns the code slurmrestd reports as a job's ``state_reason`` into a sentence a pod's
owner can act on: it goes into the ``SlurmJobPending`` Event on each waiting pod, so that
``kubectl describe pod`` answers "why is my pod pending?" without knowing about PlaceholderJobs.
Codes named in the table get a sentence of their own; the association and QOS limits
(``Assoc|QOS`` + ``Grp|Max|Min`` + a resource + ``PerJob|PerNode|PerUser|PerAccount`` ...) are many
and Slurm adds more, so they are read by their parts; any other code is named as it is.
"""

from __future__ import annotations

import re
from typing import Final

_REASONS: Final[dict[str, str]] = {
    "Resources": "the nodes it needs are busy",
    "Priority": "jobs of higher priority are ahead of it in the queue",
    "Dependency": "it waits for a job it depends on to finish",
    "DependencyNeverSatisfied": "a job it depends on can never satisfy the dependency; it will not start",
    "BeginTime": "its start is deferred to a later time (begin time)",
    "JobHeldAdmin": "an administrator holds it (scontrol release lets it run)",
    "JobHeldUser": "its user holds it (scontrol release lets it run)",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionConfig": "it asks for more than its partition's nodes offer (CPUs, memory, GPUs or features)",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows per job",
    "PartitionTimeLimit": "its time limit exceeds its partition's maximum time",
    "ReqNodeNotAvail": "a node it needs is not available (down, drained or reserved)",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "no node matches its constraints (features)",
    "Reservation": "it waits for its advanced reservation to start",
    "ReservationDeleted": "its advanced reservation was deleted",
    "InvalidAccount": "its Slurm account is invalid; it will not start until the account is fixed",
    "InvalidQOS": "its QOS is invalid; it will not start until the QOS is fixed",
    "QOSNotAllowed": "its account may not use the QOS it asks for",
    "AccountNotAllowed": "its account may not use this partition",
    "Licenses": "the licenses it needs are in use",
    "BurstBufferResources": "the burst buffer space it needs is in use",
    "BurstBufferStageIn": "its burst buffer is being staged in",
    "Cleaning": "it is being cleaned up after a requeue",
    "SchedDefer": "Slurm defers scheduling it (SchedulerParameters=defer)",
    "JobArrayTaskLimit": "its job array already runs as many tasks as it allows",
    "FrontEndDown": "no front end node is available",
    "PowerUpNode": "the nodes it needs are being powered up",
    "Prolog": "its prolog is running",
    "QOSUsageThreshold": "its QOS's usage threshold is reached",
    "QOSJobLimit": "its QOS already runs as many jobs as it allows",
    "QOSResourceLimit": "its QOS's resource limit is reached",
    "QOSTimeLimit": "its QOS's time limit is reached",
    "AssociationJobLimit": "its association already runs as many jobs as it allows",
    "AssociationResourceLimit": "its association's resource limit is reached",
    "AssociationTimeLimit": "its association's time limit is reached",
    "AssocMaxJobsLimit": "its association (user and account) already runs as many jobs as it allows",
    "QOSMaxJobsPerUserLimit": "its user already runs as many jobs as the QOS allows per user",
    "QOSMaxJobsPerAccountLimit": "its account already runs as many jobs as the QOS allows per account",
}

# Assoc|QOS, Grp|Max|Min, what, then per what (the order Slurm builds these codes in).
_LIMIT: Final = re.compile(
    r"^(?P<who>Assoc|QOS)(?P<kind>Grp|Max|Min)(?P<what>[A-Za-z]+?)"
    r"(?P<minutes>RunMinutes|Minutes)?(?P<per>PerJob|PerNode|PerUser|PerAccount)?(?:Limit|NotSatisfied)?$"
)
_WHO: Final = {"Assoc": "its association (user and account)", "QOS": "its QOS"}
_WHAT: Final = {
    "cpu": "CPUs", "node": "nodes", "mem": "memory", "gres": "generic resources (GPUs and others)",
    "jobs": "running jobs", "submitjobs": "submitted jobs", "wall": "run time", "wallduration": "run time",
    "billing": "billing units", "energy": "energy", "license": "licenses", "bb": "burst buffer",
    "vmem": "virtual memory", "fs": "file system", "pages": "pages",
}  # fmt: skip
_UNIT: Final = {"cpu": "CPU", "node": "node", "mem": "memory", "gres": "GRES", "billing": "billing", "energy": "energy"}
_PER: Final = {"PerJob": "per job", "PerNode": "per node", "PerUser": "per user", "PerAccount": "per account"}


def explain(reason: str) -> str:
    """Slurm's pending reason ``reason`` (e.g. ``Resources``) as a short plain-English clause."""
    if reason in _REASONS:
        return _REASONS[reason]
    m = _LIMIT.match(reason)
    if m is None:
        return "Slurm's reason code; squeue(1) explains it under JOB REASON CODES"
    who, kind, per = _WHO[m["who"]], m["kind"], m["per"]
    what = _WHAT.get(m["what"].lower(), m["what"])
    if m["minutes"]:  # CPU-minutes and the like: a unit, singular
        what = f"{_UNIT.get(m['what'].lower(), m['what'])}-minutes"
        if m["minutes"] == "RunMinutes":
            what += " of running jobs"
    if kind == "Min":
        return f"it asks for less than the minimum {what} {who} requires {_PER.get(per or '', 'per job')}"
    if kind == "Grp":
        return f"{who} has reached its limit on {what} (all its jobs together)"
    if per in ("PerJob", "PerNode", None):
        return f"it asks for more {what} than {who} allows {_PER.get(per or '', 'per job')}"
    return f"its {per[3:].lower()}'s jobs already use the most {what} {who} allows {_PER[per]}"
