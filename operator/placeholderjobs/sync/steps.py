"""What applying a plan ends in (``PlaceholderJobs.apply``): done until a requeue or an event, or
a stop for an input only the shell gets, decided on again at once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.slurm.errors import SlurmUnavailable


@dataclass(frozen=True)
class Done:
    """The plan ran to its end, or stopped: look again after ``requeue`` seconds (None: on the
    next event)."""

    requeue: float | None


@dataclass(frozen=True)
class Again:
    """The plan stopped for an input of the next decision: the members read with a GET
    (``confirm``), or the ``outcome`` of a submit or a release. ``error``: raised once the
    outcome's plan is applied (Slurm unreachable: the work queue retries with backoff)."""

    phj: PlaceholderJob
    confirm: bool = False
    confirmed: Mapping[str, Obj | None] | None = None
    outcome: pl.Outcome | None = None
    error: SlurmUnavailable | None = None
