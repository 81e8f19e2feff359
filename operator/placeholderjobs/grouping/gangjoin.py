"""A pod's join of its gang's PlaceholderJob (pure): the gang's membership rule (``plan_join``),
what a join decides on (``JoinState``), and what a pod waits for when its gang's Slurm job is
already submitted and full: the members that may give up their place (docs/workloads.md, "Late
members"). A composite's rule, per component, is ``compositepodgroups.plan_composite_join``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob

# A pod waiting for a place in a submitted gang looks again this often (a member's end wakes it).
WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Vacancies:
    """The members of a gang that may give up their place: ``ended`` (gone, another incarnation
    of the name, or in a terminal phase) and ``terminating`` (deleted, still running)."""

    ended: frozenset[str] = frozenset()
    terminating: frozenset[str] = frozenset()

    def free(self, submitted: bool) -> frozenset[str]:
        """The places a newcomer may take. Before submission nothing is allocated: a terminating
        member drops out; after it, it keeps place and node until it has ended (no node runs two)."""
        return self.ended if submitted else self.ended | self.terminating

    def note(self) -> str:
        """What the GangFull / CompositeFull message says about terminating members."""
        if not self.terminating:
            return ""
        names_ = sorted(self.terminating)
        shown = ", ".join(names_[:3]) + (f" and {len(names_) - 3} more" if len(names_) > 3 else "")
        each = "each " if len(names_) > 1 else ""
        return f" (terminating, {each}keeping its place and node until it is gone: {shown})"


def gang_full(members: int, vacancies: Vacancies) -> tuple[str, str]:
    """The Event of a pod that waits for a free place in a submitted gang."""
    return (
        names.REASON_GANG_FULL,
        f"the gang's Slurm job was submitted for {members} other pods and none of them has "
        f"ended{vacancies.note()}; the pod waits for a free place",
    )


@dataclass(frozen=True)
class JoinState:
    """What a join decides on: the PlaceholderJob, whether its job is (or may be) in Slurm, and
    the members whose places may be freed."""

    phj: PlaceholderJob
    submitted: bool
    vacancies: Vacancies


@dataclass(frozen=True)
class Join:
    """What to do with a pod that belongs to a gang's PlaceholderJob.

    ``member``: it is one already. ``add``/``replace``: write ``pods`` and ``uids`` into the spec.
    ``wait``: the gang's job was submitted for other pods and none of them ended. ``recycle``: the
    PlaceholderJob ended, so the pod starts a new one.
    """

    action: Literal["member", "add", "replace", "wait", "recycle"]
    pods: tuple[str, ...] = ()
    uids: dict[str, str] = field(default_factory=dict)
    slot: str = ""  # the member whose place the pod took (replace)


def plan_join(
    pods: Sequence[str],
    uids: Mapping[str, str],
    pod: str,
    uid: str,
    *,
    submitted: bool,
    terminal: bool,
    ended: Collection[str],
) -> Join:
    """Membership rules for a gang (docs/workloads.md, "Late members").

    ``pods``/``uids`` are the PlaceholderJob's spec; ``ended`` the members whose recorded pod
    has ended or is gone. Before submission the gang grows (ended members drop out, so they hold
    no node); after it the job's size is fixed: a pod takes over the slot of an earlier
    incarnation of its name or of an ended member, or waits.
    """
    recorded = uids.get(pod)
    if pod in pods and recorded in (None, uid):
        return Join("member")
    if terminal:
        return Join("recycle")
    if pod in pods:
        # An earlier pod of this name (names are unique, so it is gone): the new one is the member.
        return Join("replace", tuple(pods), {**uids, pod: uid}, slot=pod)
    if not submitted:
        kept = tuple(p for p in pods if p not in ended)
        new_uids = {p: u for p, u in uids.items() if p in kept}
        return Join("add", (*kept, pod), {**new_uids, pod: uid})
    free = sorted(p for p in pods if p in ended)
    if not free:
        return Join("wait")
    slot = free[0]
    new_uids = {p: u for p, u in uids.items() if p != slot}
    return Join("replace", tuple(pod if p == slot else p for p in pods), {**new_uids, pod: uid}, slot=slot)
