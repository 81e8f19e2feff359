"""The bridge's Slurm jobs as the PlaceholderJob controller's poller last saw them: the snapshot the
poller keeps, the PlaceholderJob each job names (:class:`PhjRef`, from its admin_comment), and what
the handoff loop reads of the poller (:class:`SlurmJobView`). Shared by the controllers that read
Slurm's jobs; the poller (operator/placeholderjobs/slurmjobs/poller.py) is their one writer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from slurm_bridge.slurm.models import JobInfo


@dataclass(frozen=True)
class PhjRef:
    bridge: str
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


class JobSnapshot:
    """The bridge's Slurm jobs as last seen, indexed the ways the controllers ask.

    ``taken_at`` is when the last poll started: a job submitted before it is in the view, or
    Slurm no longer has it.
    """

    def __init__(self, jobs: dict[int, JobInfo], refs: dict[int, PhjRef], taken_at: float) -> None:
        self.taken_at = taken_at
        self.by_id: dict[int, JobInfo] = {}
        self.refs: dict[int, PhjRef] = {}
        # PlaceholderJob uid -> its jobs; a heterogeneous job only by its leader, which stands for
        # the whole job (adoption, cancels). Leader id -> offset -> component, leader included.
        self.by_uid: dict[str, list[JobInfo]] = {}
        self.het: dict[int, dict[int, JobInfo]] = {}
        # The pending jobs (their reasons are read again), and a counter of changes to the view.
        self.pending: set[int] = set()
        for job_id, ref in refs.items():
            self._add(jobs[job_id], ref)
        self.version = 0

    def put(self, job: JobInfo, ref: PhjRef) -> None:
        self.drop(job.job_id)
        self._add(job, ref)

    def _add(self, job: JobInfo, ref: PhjRef) -> None:
        self.by_id[job.job_id] = job
        self.refs[job.job_id] = ref
        if job.het_job_id:
            self.het.setdefault(job.het_job_id, {})[job.het_job_offset] = job
        if job.is_het_component:
            return  # its leader stands for it
        self.by_uid.setdefault(ref.uid, []).append(job)
        if job.is_pending:
            self.pending.add(job.job_id)

    def drop(self, job_id: int) -> None:
        self.version += 1
        self.pending.discard(job_id)
        job = self.by_id.pop(job_id, None)
        ref = self.refs.pop(job_id, None)
        if job is not None and job.het_job_id:
            parts = self.het.get(job.het_job_id, {})
            if parts.get(job.het_job_offset) is job:
                del parts[job.het_job_offset]
            if not parts:
                self.het.pop(job.het_job_id, None)
        if ref is not None:
            jobs = [j for j in self.by_uid.get(ref.uid, []) if j.job_id != job_id]
            if jobs:
                self.by_uid[ref.uid] = jobs
            else:
                self.by_uid.pop(ref.uid, None)

    def components(self, leader: int) -> tuple[JobInfo, ...]:
        """A heterogeneous job's components the view holds, by offset (the leader first); ()
        for any other job."""
        parts = self.het.get(leader, {})
        return tuple(parts[o] for o in sorted(parts))

    def job_for_uid(self, uid: str) -> JobInfo | None:
        """The bridge's live job for a PlaceholderJob (newest first), else its newest ended one."""
        jobs = sorted(self.by_uid.get(uid, []), key=lambda j: j.job_id, reverse=True)
        for j in jobs:
            if not j.is_finished:
                return j
        # A job Slurm refused (a failed immediate allocation) stays listed as FAILED without
        # nodes: it never held an allocation, so it says nothing about the PlaceholderJob.
        ran = [j for j in jobs if j.nodes]
        return ran[0] if ran else None


class SlurmJobView(Protocol):
    """The poller as the handoff loop reads it: the snapshot, whether a full list arrived since
    start-up, when the last one was taken, a read of one job now, and an early poll."""

    snapshot: JobSnapshot | None
    synced: asyncio.Event
    last_full_at: float

    async def refresh(self, job_id: int, ref: PhjRef, *, het: bool = False, notify: bool = False) -> JobInfo | None: ...
    def poll_soon(self, *, full: bool = False) -> None: ...
