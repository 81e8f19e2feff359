"""The poller's view of the bridge's Slurm jobs (``JobSnapshot``), and the one answer it gives
about a PlaceholderJob's job (``SlurmSide``): what :func:`.lifecycle.decide` follows, whether a
gang's size is fixed (members.py), and whether a job's PlaceholderJob is being submitted for
(the orphan sweep). Built by :meth:`.poller.SlurmPoller.side`; pure data."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef
from slurm_bridge.slurm.models import JobInfo


@dataclass(frozen=True)
class SlurmSide:
    """What the poller's view says about one PlaceholderJob's Slurm job.

    ``job_id``: status.jobId, else ``found`` (adoption after a crash), else a submit the view does
    not show yet. ``job``: Slurm's record of ``job_id``; None with a ``job_id`` means the view
    lacks it (vanished, or not visible yet: see ``submitted_at``).
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
    # CompositePodGroup's (operator/placeholderjobs/shapes/hetjob.py). () for any other job.
    components: tuple[JobInfo, ...] = ()
    submitted_at: float | None = None  # monotonic time of the bridge's submit of job_id, until seen
    taken_at: float = 0.0  # when the view was taken (monotonic)
    uncertain_since: float | None = None  # a submit that may have made a job, not yet resolved
    last_full_at: float = 0.0  # when the last full job list was taken

    @property
    def has_job(self) -> bool:
        """A job is, or may be, in Slurm for the PlaceholderJob: recorded in its status, found by
        its uid, or submitted by this process and not shown by a poll yet."""
        return self.job_id is not None

    @property
    def submitting(self) -> bool:
        """This process submitted a job for it that no poll has shown yet."""
        return self.submitted_at is not None


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
