"""What ``lifecycle.decide`` is given besides the PlaceholderJob and the poller's view of its Slurm
job (``slurmjobs.jobview.SlurmSide``): the member pods, the clocks, what the waiting pods were
told, and the namespace's TenantPolicy; and the waits that follow from them. Pure data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from slurm_bridge.operator.placeholderjobs.decisions.plan import Held
from slurm_bridge.operator.placeholderjobs.decisions.pods import Obj
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.tenancy import Verdict

Members = Mapping[str, Obj | None]
# The namespace's TenantPolicy verdict on a request (slurm_bridge/tenancy.py), asked only right
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
