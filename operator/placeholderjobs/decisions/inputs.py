"""What :func:`.lifecycle.decide` is given besides the PlaceholderJob and the poller's view of its
Slurm job (:class:`.jobview.SlurmSide`): the member pods, the clocks, what the waiting pods were
told, and the namespace's TenantPolicy. Pure data."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurm_bridge.operator.placeholderjobs.decisions.pods import Obj
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.tenancy import Verdict

Members = Mapping[str, Obj | None]
# The namespace's TenantPolicy verdict on a request (slurm_bridge/tenancy.py), asked only right
# before a submit or a job update: the policy as it is then applies (docs/tenancy.md).
Tenancy = Callable[[JobRequest], Verdict]
# While the TenantPolicies are not read yet, a submit waits this long.
TENANCY_WAIT_SECONDS = 2.0


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
