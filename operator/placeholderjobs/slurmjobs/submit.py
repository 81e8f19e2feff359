"""Where a job goes in Slurm: an immediate allocation when Slurm can start it now, else the queue."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from slurm_bridge import metrics
from slurm_bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobRequest

log = logging.getLogger(__name__)

# After Slurm refused an immediate allocation in a partition, jobs for it are queued directly for
# this long (doubling while refusals go on): each refused attempt leaves a FAILED job record.
IMMEDIATE_RETRY_MIN_SECONDS = 5.0
IMMEDIATE_RETRY_MAX_SECONDS = 60.0


class SlurmSubmits(Protocol):
    """The Slurm calls that place a job (:class:`.client.SlurmClient`'s, a fake's in tests)."""

    async def allocate_external_job(
        self, req: JobRequest, *, name: str, admin_comment: str, work_dir: str | None = None
    ) -> int: ...
    async def submit_external_job(
        self, req: JobRequest, *, name: str, admin_comment: str, work_dir: str | None = None
    ) -> int: ...
    async def submit_het_job(
        self, reqs: list[JobRequest], *, name: str, admin_comment: str, work_dir: str | None = None
    ) -> int: ...


class Placer:
    """Allocate a job now if Slurm can start it, else queue it (docs/performance.md).

    A refused immediate allocation costs a call and leaves a FAILED job record, so after a
    refusal the partition's jobs are queued directly for a while -- but only when the queued
    submit then succeeds: a request Slurm refuses outright says nothing about the partition.

    A job for another user or group (``JobRequest.names_identity``) is always queued:
    slurmrestd's ``job/allocate`` ignores ``user_id``/``group_id`` and allocates as the token's
    user (checked on Slurm 26.05, v0.0.44: a job for uid 2001 ran as ``slurm``), so an
    immediate allocation would run a tenant's job as the bridge. ``job/submit`` honours them.

    A job that may preempt others (``may_preempt``: its QOS lists another in ``Preempt=``, from
    Slurm's accounting, docs/colocation.md) is always queued too: an immediate allocation that
    needs preemption preempts its victims and then fails with 2016 "Requested nodes are busy"
    (Slurm 26.05, checked), leaving them requeued or killed for nothing; ``job/submit`` preempts
    and starts the job.
    """

    def __init__(
        self, slurm: SlurmSubmits, immediate: bool, may_preempt: Callable[[JobRequest], bool] | None = None
    ) -> None:
        self.slurm = slurm
        self.immediate = immediate
        self.may_preempt = may_preempt
        # partition -> (queue directly until, current backoff) after refused immediate allocations
        self.queue_only: dict[str, tuple[float, float]] = {}

    async def place(self, request: JobRequest, name: str, admin_comment: str, work_dir: str | None = None) -> int:
        partition, now = request.partition or "", time.monotonic()
        until, backoff = self.queue_only.get(partition, (0.0, 0.0))
        refused: SlurmError | None = None
        preempting = self.may_preempt is not None and self.may_preempt(request)
        if self.immediate and now >= until and not request.names_identity and not preempting:
            try:
                job_id = await self.slurm.allocate_external_job(
                    request, name=name, admin_comment=admin_comment, work_dir=work_dir
                )
            except (SlurmUnavailable, SlurmAuthError):
                raise
            except SlurmError as e:
                refused = e
            else:
                self.queue_only.pop(partition, None)  # room again: the next refusal starts small
                metrics.job_allocated_immediately()
                return job_id
        job_id = await self.slurm.submit_external_job(
            request, name=name, admin_comment=admin_comment, work_dir=work_dir
        )
        metrics.job_queued()
        if refused is not None:
            backoff = min(max(backoff * 2, IMMEDIATE_RETRY_MIN_SECONDS), IMMEDIATE_RETRY_MAX_SECONDS)
            self.queue_only[partition] = (time.monotonic() + backoff, backoff)
            reason = refused.errors[0].error if refused.errors else str(refused)
            log.info(
                "Slurm cannot start job %s now (%s): queued it; partition %s queues directly for %.0fs",
                name,
                reason,
                partition or "(default)",
                backoff,
            )
        return job_id

    async def place_het(
        self, requests: list[JobRequest], name: str, admin_comment: str, work_dir: str | None = None
    ) -> int:
        """A heterogeneous job (a CompositePodGroup's), always queued: Slurm refuses a
        heterogeneous immediate allocation (error 2078) and starts such a job only in a backfill
        pass. Returns the leader's id."""
        job_id = await self.slurm.submit_het_job(requests, name=name, admin_comment=admin_comment, work_dir=work_dir)
        metrics.job_queued()
        return job_id
