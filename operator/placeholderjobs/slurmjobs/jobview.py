"""The one answer the poller's view of the bridge's Slurm jobs (operator/views/slurmjobs.py) gives
about a PlaceholderJob's job (``SlurmSide``): what :func:`.lifecycle.decide` follows, whether a
gang's size is fixed (members.py), and whether a job's PlaceholderJob is being submitted for
(the orphan sweep). Built by :meth:`.poller.SlurmPoller.side`; pure data."""

from __future__ import annotations

from dataclasses import dataclass

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
