"""The one interface every shape of Slurm job implements (the seam Kueue's ``GenericJob`` and its
composable jobs are to its job reconciler): ``lifecycle.decide`` and the membership call it, and
each shape implements it without importing either.

A shape says what differs between a single pod's job, a gang's and a CompositePodGroup's
heterogeneous job; what they share (finalizers, deletion, the ended phases, adoption by uid, an
uncertain submit, the TenantPolicy) stays in ``lifecycle``. The decisions are pure; ``join`` does
its I/O only through the membership machinery it is given (:class:`.grouping.joining.Joins`).
A new shape (job arrays, elastic jobs) is a new class here and a line in :mod:`.registry`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Follow, Members, Tenancy
from slurm_bridge.operator.placeholderjobs.decisions.plan import Action, Placed, Plan
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group
from slurm_bridge.operator.placeholderjobs.grouping.joining import Joins
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide


@dataclass(frozen=True)
class Followed:
    """A job that exists (or existed) and lives on with some member: what a shape follows it by.
    ``status``: the PlaceholderJob's status as the lifecycle reads it (adopted when the job was
    found by its uid); ``follow``: the rest the rows need (:class:`.decisions.inputs.Follow`)."""

    phj: PlaceholderJob
    status: PlaceholderJobStatus
    slurm: SlurmSide
    members: Members
    now: Clock
    follow: Follow


class JobShape(Protocol):
    """One shape of Slurm job: how its pods join their PlaceholderJob, when its job is submitted,
    how the job is followed, and what the status records right after the submit."""

    name: str  # for logs and docs: "single pod", "gang", "composite"
    # Whether its job is one plain Slurm job: one the placer may allocate at the submit (the pods
    # released with the submit's status), and that waits quietly in Slurm's queue at first.
    # False: a heterogeneous job, always queued, its components' ids recorded at once.
    plain: ClassVar[bool]

    async def join(self, pod: Obj, group: Group, joins: Joins) -> float | None:
        """Make ``pod`` a member of its group's PlaceholderJob (made if there is none); when to
        look again (None: on the next event)."""
        ...

    def submit(self, phj: PlaceholderJob, members: Members, tenancy: Tenancy | None, now: Clock) -> Plan:
        """No job yet, and some member lives: wait for the members the job needs, or (the
        TenantPolicy allowing) fence and submit it."""
        ...

    def adopted(self, status: PlaceholderJobStatus, slurm: SlurmSide) -> PlaceholderJobStatus:
        """The status written for a job found by its uid (a crash between the submit and the
        status write: ``status`` has the job's id), with what this shape records of it."""
        ...

    def placed(self, phj: PlaceholderJob, placed: Placed, submitted: PlaceholderJobStatus) -> PlaceholderJobStatus:
        """The status written right after the submit (``submitted``), with what this shape records
        of the job Slurm made."""
        ...

    def follow(self, job: Followed) -> Plan:
        """The job exists (or existed) and some member lives: follow it (mirror Slurm's state,
        release the pods once it runs), or end the pods when it ended. (Every member ended: the
        lifecycle ends the job, with this shape's :meth:`cancels`.)"""
        ...

    def cancels(self, slurm: SlurmSide) -> tuple[Action, ...]:
        """The cancels that end this shape's job once every member pod ended."""
        ...
