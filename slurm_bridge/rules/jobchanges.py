"""Which ``slurmjob.slinky.slurm.net/*`` annotations can change once their Slurm job exists, and
what a change makes of the job's request (pure; docs/annotations.md, "Changing annotations").

A Slurm job is made from its annotations when its PlaceholderJob is. A later change reaches the
job only while it waits in Slurm's queue, and only for the keys an update of a pending job changes
(``UPDATABLE``, as the Go slurm-bridge updates a pending job; the rest, such as the job's size per
node, its owner or its reservation, stay as submitted). Once Slurm has allocated the job, no key
changes: the job holds its nodes with what it was given. Some removals cannot be applied either:
Slurm has no way back to "no priority set" or to a default account for a waiting job.

The admission webhook asks these questions of a pod's own annotations (it sees whether the pod was
allocated); the operator asks them of every change, also of workloads, where admission cannot
know which of its jobs wait (operator/placeholderjobs/reconfigure.py), and says each answer in an
Event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from slurm_bridge import names
from slurm_bridge.rules.jobannotations import ANNOTATION_FIELDS
from slurm_bridge.rules.tenancy import TenantPolicy
from slurm_bridge.slurm.models import JobRequest

# The keys whose change is sent to a pending job: Slurm changes these fields of a waiting job
# (checked on Slurm 26.05, REST API v0.0.43 to v0.0.45).
UPDATABLE: Final = frozenset(
    {
        names.ANN_ACCOUNT,
        names.ANN_CONSTRAINTS,
        names.ANN_JOB_NAME,
        names.ANN_MAX_NODES,
        names.ANN_MIN_NODES,
        names.ANN_PARTITION,
        names.ANN_PRIORITY,
        names.ANN_QOS,
        names.ANN_TIMELIMIT,
    }
)
# The JobRequest fields those keys set.
UPDATABLE_FIELDS: Final = frozenset(ANNOTATION_FIELDS[k] for k in UPDATABLE)


def short(key: str) -> str:
    return key.removeprefix(names.SLURMJOB_PREFIX)


_CHANGEABLE: Final = ", ".join(sorted(short(k) for k in UPDATABLE))


def changed_keys(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The slurmjob keys added, removed or changed between two sets of annotations."""
    keys = {k for k in (*old, *new) if k.startswith(names.SLURMJOB_PREFIX)}
    return sorted(k for k in keys if old.get(k) != new.get(k))


def describe(key: str, old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """E.g. ``slurmjob.slinky.slurm.net/timelimit changed from "5" to "7"``."""
    before, after = old.get(key), new.get(key)
    if before is None:
        return f'{key} added ("{after}")'
    if after is None:
        return f'{key} removed (it was "{before}")'
    return f'{key} changed from "{before}" to "{after}"'


def waiting_problems(
    old: Mapping[str, str], new: Mapping[str, str], *, default_account: bool, topology: bool = False
) -> dict[str, str]:
    """Why a change of each key cannot reach a job that waits in Slurm's queue (keys it can reach
    are left out). ``default_account``: the job's namespace gives a default account (its
    TenantPolicy's), which a removed ``account`` then means. ``topology``: the job is placed by a
    topology, whose segment (its node count) Slurm does not change once submitted."""
    problems: dict[str, str] = {}
    for key in changed_keys(old, new):
        what = describe(key, old, new)
        if topology and key in (names.ANN_MIN_NODES, names.ANN_MAX_NODES):
            problems[key] = (
                f"{what}, but the job is placed by a topology as one segment of the node count it was submitted "
                "with, which Slurm does not change for a waiting job: it keeps its node count"
            )
        elif key not in UPDATABLE:
            problems[key] = (
                f"{what}, but this key cannot change once the Slurm job is submitted (the job keeps what it was "
                f"made with); only {_CHANGEABLE} can, while the job waits in Slurm's queue"
            )
        elif key not in new and key == names.ANN_PRIORITY:
            problems[key] = (
                f"{what}, but Slurm cannot hand a waiting job's priority back to its priority plugin: the job "
                "keeps its priority; set the priority you want instead"
            )
        elif key not in new and key == names.ANN_ACCOUNT and not default_account:
            problems[key] = (
                f"{what}, but Slurm cannot move a waiting job back to a default account: the job keeps its "
                "account; set the account you want instead"
            )
    return problems


def allocated_problems(old: Mapping[str, str], new: Mapping[str, str], job: str) -> dict[str, str]:
    """Why no change reaches a job Slurm allocated (``job``: e.g. "Slurm job 12"), key by key."""
    return {
        key: (
            f"{describe(key, old, new)}, but {job} was already allocated: a job's options are fixed once it holds "
            "its nodes, and it keeps what it was made with"
        )
        for key in changed_keys(old, new)
    }


def changed_request(spec: JobRequest, fresh: JobRequest, keys: Iterable[str]) -> JobRequest:
    """``spec`` with the fields that the updatable ``keys`` set taken from ``fresh``, the request
    the new annotations make (so a removed key falls back as it would for a new job: the
    workload's deadline, the bridge's partition, the pods' own count and node features)."""
    fields = {ANNOTATION_FIELDS[k] for k in keys if k in UPDATABLE}
    return spec.model_copy(update={f: getattr(fresh, f) for f in sorted(fields)})


# Where a PlaceholderJob's Slurm job is: not submitted yet (the whole request is made again, as
# for a new job), waiting in Slurm's queue, or allocated.
State = Literal["unsubmitted", "waiting", "allocated"]


@dataclass(frozen=True)
class Respec:
    """What a change of options makes of a PlaceholderJob: its new ``spec`` (None: unchanged) and,
    key by key, why a change does not reach its job (``problems``, said with ``reason``)."""

    spec: JobRequest | None
    problems: dict[str, str]
    reason: str = names.REASON_UPDATE_NOT_APPLIED


def respec(
    state: State,
    old: Mapping[str, str],
    new: Mapping[str, str],
    spec: JobRequest,
    fresh: JobRequest | str,
    *,
    job: str,
    default_account: bool,
) -> Respec:
    """The options changed from ``old`` to ``new``; ``fresh``: the request ``new`` makes (or why
    none can be made); ``job``: e.g. "Slurm job 12"."""
    if state == "allocated":
        return Respec(None, allocated_problems(old, new, job), names.REASON_UPDATE_TOO_LATE)
    keys = changed_keys(old, new)
    if isinstance(fresh, str):
        why = f"the Slurm job's request cannot be made with it: {fresh}"
        return Respec(None, {k: f"{describe(k, old, new)}, but {why}" for k in keys})
    if state == "unsubmitted":
        return Respec(fresh if fresh != spec else None, {})
    problems = waiting_problems(old, new, default_account=default_account, topology=spec.topology is not None)
    changed = changed_request(spec, fresh, [k for k in keys if k not in problems])
    return Respec(changed if changed != spec else None, problems)


def gives_default_account(policy: TenantPolicy | None) -> bool:
    """Whether a namespace's policy gives a job that names no account one (its default)."""
    spec = policy.spec if policy is not None else None
    return spec is not None and spec.accounts is not None and bool(spec.accounts.default)
