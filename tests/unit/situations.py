"""``lifecycle.decide`` called as the decision tests write a situation: the PlaceholderJob, the
Slurm side, the members and the clock, then what else the row needs by name."""

from __future__ import annotations

from typing import Any

from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Members
from slurm_bridge.operator.placeholderjobs.decisions.plan import Plan
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide


def decide_in(
    phj: PlaceholderJob,
    slurm: SlurmSide,
    members: Members,
    now: Clock,
    confirmed: Members | None = None,
    **more: Any,
) -> Plan:
    """The plan for the :class:`.lifecycle.Situation` these make (``scheduler`` is required)."""
    return lc.decide(lc.Situation(phj, slurm, members, now, confirmed=confirmed, **more))
