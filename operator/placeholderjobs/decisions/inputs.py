"""What ``lifecycle.decide`` is given besides the PlaceholderJob and the poller's view of its Slurm
job (``slurmjobs.jobview.SlurmSide``): the member pods, the clocks, what the waiting pods were
told, and the namespace's TenantPolicy; and the waits that follow from them. Pure data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from slurm_bridge.core.objects import Obj
from slurm_bridge.operator.placeholderjobs.decisions.plan import Held, Updated, UpdateRefused
from slurm_bridge.operator.views.slurmpolicy import SlurmPolicy
from slurm_bridge.rules.tenancy import Verdict
from slurm_bridge.slurm.models import JobRequest, JobSettings, PartitionLimits

Members = Mapping[str, Obj | None]
# The namespace's TenantPolicy verdict on a request (slurm_bridge/rules/tenancy.py), asked only right
# before a submit or a job update: the policy as it is then applies (docs/tenancy.md).
Tenancy = Callable[[JobRequest], Verdict]
# While the TenantPolicies are not read yet, a submit waits this long.
TENANCY_WAIT_SECONDS = 2.0
# A job submitted this recently may not be in the snapshot yet; wait for it rather than
# concluding it vanished.
SUBMIT_VISIBILITY_GRACE = 30.0
# How soon a release held back for missing DRA devices is tried again (a driver publishing slices).
DEVICES_RETRY_SECONDS: Final = 10.0
# How long a queued job may wait in Slurm's queue before its submit is announced (see
# lifecycle.QUEUED_QUIET_SECONDS), and how long the allocation of a single pod is held unwritten
# until the pod is bound (lifecycle.UNWRITTEN_SECONDS, the same for a queued job that started).
QUIET_QUEUE_SECONDS: Final = 3.0
UNWRITTEN_ALLOCATION_SECONDS: Final = 10.0


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
    """The time a decision is taken at: ``mono`` (monotonic: waits, grace periods) and ``wall`` (the
    times written into status and compared with Slurm's). Read once by the shell, so the same
    decision always writes the same times."""

    mono: float
    wall: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class Follow:
    """What following an existing job needs besides the two sides (see ``lifecycle.decide``)."""

    scheduler: str
    told: Told | None = None
    tenancy: Tenancy | None = None
    held: Held | None = None
    devices_missing: bool = False  # the last release found a member's DRA devices missing
    handoff: Handoff | None = None  # None: no time-limit ending (the preemption rows need nothing)
    # A spec not acted on yet (generation != status.observedGeneration): what the job asks Slurm
    # for now (one GET), the partitions' limits (decisions/specupdate.py), and the outcome of the
    # update the last plan sent.
    settings: JobSettings | None = None
    partitions: Mapping[str, PartitionLimits] | None = None
    updated: Updated | UpdateRefused | None = None
    # Config bindTimeoutSeconds: an allocation whose released pods are not bound this long after
    # the job's start is released (decisions/bindtimeout.py). None: never.
    bind_timeout: float | None = None


@dataclass(frozen=True)
class Handoff:
    """What the handoff's rows need besides the job (docs/colocation.md, "The handoff"): the margin
    (config ``handoff.marginSeconds``), how long past its time limit Slurm lets a job of each
    partition run (its OverTimeLimit; ``default``: the cluster's; None: UNLIMITED), read from
    Slurm by the handoff loop, and the longest grace period (``handoff.maxGracePeriodSeconds``:
    how long a member that went unseen may still run)."""

    margin: int = 15
    over_time: Mapping[str, timedelta | None] = field(default_factory=dict)
    default_over_time: timedelta | None = timedelta(0)
    max_grace: int = 300

    def over_time_of(self, partition: str) -> timedelta | None:
        return self.over_time.get(partition, self.default_over_time)

    @classmethod
    def of_policy(cls, policy: SlurmPolicy, margin: int, max_grace: int = 300) -> Handoff:
        """The handoff rows' input: the margin, the longest grace, every partition's OverTimeLimit."""

        def td(minutes: int | None) -> timedelta | None:
            return None if minutes is None else timedelta(minutes=minutes)

        default = td(policy.conf.over_time_limit_minutes) if policy.conf is not None else timedelta(0)
        return cls(margin, {p: td(m) for p, m in policy.over_time_minutes.items()}, default, max_grace)
