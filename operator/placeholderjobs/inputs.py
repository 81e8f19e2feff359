"""What :func:`.lifecycle.decide` is given besides the PlaceholderJob: the poller's view of its
Slurm job, the clocks, what the waiting pods were told, and the namespace's TenantPolicy. Pure data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurm_bridge.slurm.models import JobInfo, JobRequest
from slurm_bridge.tenancy import Verdict

Obj = dict[str, Any]
Members = Mapping[str, Obj | None]
# The namespace's TenantPolicy verdict on a request (slurm_bridge/tenancy.py), asked only right
# before a submit or a job update: the policy as it is then applies (docs/tenancy.md).
Tenancy = Callable[[JobRequest], Verdict]
# While the TenantPolicies are not read yet, a submit waits this long.
TENANCY_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class SlurmSide:
    """What the poller's view says about the PlaceholderJob's Slurm job.

    ``job_id``: status.jobId, else ``found`` (adoption after a crash), else a submit the view does
    not show yet. ``job``: Slurm's record of ``job_id``; None
    with a ``job_id`` means the view lacks it (vanished, or not visible yet: see ``submitted_at``).
    """

    synced: bool = True  # a full job list arrived since start-up
    poll_period: float = 1.0
    job_id: int | None = None
    job: JobInfo | None = None
    # The job the view first names for the PlaceholderJob: status.jobId's record, else its uid's
    # newest live job (else newest that ran). What an ended or deleted PlaceholderJob cancels.
    found: JobInfo | None = None
    others: tuple[int, ...] = ()  # other live jobs made for this PlaceholderJob (a crash mid-submit)
    # A heterogeneous job's components as the view holds them, by offset (the leader first): a
    # CompositePodGroup's (operator/placeholderjobs/hetjob.py). () for any other job.
    components: tuple[JobInfo, ...] = ()
    submitted_at: float | None = None  # monotonic time of the bridge's submit of job_id, until seen
    taken_at: float = 0.0  # when the view was taken (monotonic)
    uncertain_since: float | None = None  # a submit that may have made a job, not yet resolved
    last_full_at: float = 0.0  # when the last full job list was taken


@dataclass(frozen=True)
class Told:
    """What this process last told the waiting pods (Event SlurmJobPending), and when (monotonic).

    In memory only: it rate-limits Events and nothing else. After a restart ``status.reason`` and
    ``status.expectedStart`` say what was reported; at most one Event is repeated."""

    at: float
    reason: str
    reasons: frozenset[str] = frozenset()  # every reason told for this job


@dataclass(frozen=True)
class Clock:
    mono: float
    wall: datetime = field(default_factory=lambda: datetime.now(UTC))
