"""What a pod's join decides on (``JoinState``), and what it waits for when its gang's Slurm job
is already submitted and full: the members that may give up their place (docs/workloads.md,
"Late members")."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_bridge import names
from slurm_bridge.placeholderjob import PlaceholderJob

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
