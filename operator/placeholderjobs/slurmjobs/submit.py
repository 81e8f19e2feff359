"""Where a job goes in Slurm: an immediate allocation when Slurm can start it now, else the queue."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from slurm_bridge import names
from slurm_bridge.core import metrics
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import notice_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.partitions import Partitions
from slurm_bridge.operator.runtime import starts
from slurm_bridge.rules.partitionaccess import own_token_refusal
from slurm_bridge.slurm.errors import ESLURM_INVALID_GROUP_ID, SlurmAuthError, SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, JobRequest

log = logging.getLogger(__name__)

# After Slurm refused an immediate allocation in a partition, jobs for it are queued directly for
# this long (doubling while refusals go on): each refused attempt leaves a FAILED job record.
IMMEDIATE_RETRY_MIN_SECONDS = 5.0
IMMEDIATE_RETRY_MAX_SECONDS = 60.0


class SlurmSubmits(Protocol):
    """The Slurm calls that place a job (:class:`.client.SlurmClient`'s, a fake's in tests)."""

    async def allocate_external_job(
        self,
        req: JobRequest,
        *,
        name: str,
        admin_comment: str,
        as_user: str | None = None,
        comment: str | None = None,
    ) -> int: ...
    async def submit_external_job(
        self, req: JobRequest, *, name: str, admin_comment: str, as_user: str | None = None
    ) -> int: ...
    async def submit_het_job(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> int: ...
    async def mark_job(self, job_id: int, admin_comment: str) -> None: ...
    async def set_priority(self, job_id: int, priority: int) -> None: ...
    async def cancel_job(self, job_id: int) -> None: ...


class PartitionRefusesTenant(Exception):
    """A tenant's job the bridge would queue with its own token, in a partition its tenant could not
    submit to (rules/partitionaccess.py): nothing was sent."""


def _user(request: JobRequest) -> str | None:
    """The Slurm user a request names (a name, or a uid as Slurm takes it), if any."""
    return request.user_name or (None if request.user_id is None else str(request.user_id))


def tenants_own(request: JobRequest) -> JobRequest:
    """The request as its tenant sends it: without the operator-only fields (``priority``), which
    Slurm drops from a user or refuses; one a policy delegates is set by the bridge after."""
    return request.model_copy(update={"priority": None})


def group_refused(e: SlurmError) -> bool:
    """Slurm refused the group a job submitted as its user names: a user may submit only in their
    primary group: 2113 "Invalid group id" (Slurm 26.05.5, checked; slurmctld logs "Requested GID=...
    doesn't match user GID")."""
    return ESLURM_INVALID_GROUP_ID in e.error_numbers


def _group_is(request: JobRequest, group_id: int | None, group_name: str) -> bool:
    """Whether a job in group (``group_id``, ``group_name``) is in the group ``request`` names."""
    if request.group_name is not None:
        return request.group_name == group_name
    return request.group_id is None or request.group_id == group_id


class Placer:
    """Allocate a job now if Slurm can start it, else queue it (bench/log).

    A refused immediate allocation costs a call and leaves a FAILED job record, so after a
    refusal the partition's jobs are queued directly for a while -- but only when the queued
    submit then succeeds: a request Slurm refuses outright says nothing about the partition.

    A job for another user (``JobRequest.names_identity``: a TenantPolicy's user, a ``user-id``
    annotation) is allocated *as that user*: slurmrestd's ``job/allocate`` ignores the body's
    ``user_id``/``group_id`` and allocates as the caller, but the bridge's SlurmUser token may
    call as anyone (``as_user``; docs/tenancy.md has the request and Slurm's answer). Slurm then
    checks the job as that user's own, and it runs in that user's primary group. That user may not
    set ``admin_comment``, the bridge's mark on its jobs: the job carries the mark in ``comment``
    and the bridge sets ``admin_comment`` right after (``_mark``; one call more). So a job whose
    request names another group is queued (``job/submit`` honours ``group_id``): what a user's
    primary group is, is learnt from the first job allocated as that user (``verify``). A job
    that names only a group, or a token that may not call as another user, is always queued.

    A queued tenant's job is submitted *as the tenant* too (``_queue``), and marked the same way:
    submitted by the bridge's token with ``user_id`` set it would be the operator's submission,
    whose ``priority`` Slurm keeps (docs/security.md). Slurm takes from the user only the user's
    primary group: a job that names another group (Slurm refuses it, or ``verify`` learnt it) is
    queued by the bridge, with ``user_id``/``group_id``; the bridge has refused the operator-only
    fields before (slurm_bridge/rules/tenancy.py), and refuses such a job in a ``RootOnly`` partition, which
    Slurm opens to the bridge's token (``PartitionRefusesTenant``, slurm_bridge/rules/partitionaccess.py;
    ``partitions`` reads them). A ``priority`` that reached here for a tenant's job was
    delegated by its TenantPolicy (``allowedOperatorFields``; the policy refuses it otherwise): the
    tenant's submit goes without it, and the bridge sets it after, with its token (only that field).

    A job that may preempt others (``may_preempt``: its QOS lists another in ``Preempt=``, from
    Slurm's accounting, docs/colocation.md) is always queued too: an immediate allocation that
    needs preemption preempts its victims and then fails with 2016 "Requested nodes are busy"
    (Slurm 26.05, checked), leaving them requeued or killed for nothing; ``job/submit`` preempts
    and starts the job.
    """

    def __init__(
        self,
        slurm: SlurmSubmits,
        immediate: bool,
        may_preempt: Callable[[JobRequest], bool] | None = None,
        partitions: Partitions | None = None,
    ) -> None:
        self.slurm = slurm
        self.partitions = partitions
        self.immediate = immediate
        self.may_preempt = may_preempt
        # partition -> (queue directly until, current backoff) after refused immediate allocations
        self.queue_only: dict[str, tuple[float, float]] = {}
        # Allocating as a tenant: off once slurmrestd refused it (not SlurmUser's token); each
        # user's primary group as the jobs allocated as them showed it; jobs not verified yet.
        self.as_tenant = True
        self._groups: dict[str, tuple[int | None, str]] = {}
        self._unverified: set[int] = set()
        self._queued: set[int] = set()  # jobs queued (not allocated) whose caller has not asked yet

    def _as_user(self, request: JobRequest) -> str | None:
        """Whom to allocate a job that names an identity as; None: it is queued instead."""
        user = _user(request)
        if not self.as_tenant or user is None:
            return None  # a group alone is set only by job/submit
        group = self._groups.get(user)
        return user if group is None or _group_is(request, *group) else None

    async def place(self, request: JobRequest, name: str, admin_comment: str) -> int:
        partition, now, sent = request.partition or "", time.monotonic(), time.time()
        until, backoff = self.queue_only.get(partition, (0.0, 0.0))
        as_user = self._as_user(request) if request.names_identity else None
        refused: SlurmError | None = None
        preempting = self.may_preempt is not None and self.may_preempt(request)
        if self.immediate and now >= until and (as_user is not None or not request.names_identity) and not preempting:
            try:
                job_id = await self.slurm.allocate_external_job(
                    request if as_user is None else tenants_own(request),
                    name=name,
                    admin_comment=admin_comment,
                    as_user=as_user,
                    # its start is in the answer: slurmctld's hook tells only of its end
                    comment=notice_comment(names.NOTIFY_ENDED, admin_comment if as_user is not None else ""),
                )
            except SlurmUnavailable:
                raise
            except SlurmAuthError as e:
                if as_user is None:
                    raise
                self.as_tenant = False
                log.warning(
                    "slurmrestd refused to allocate as user %s with the bridge's token (a token of "
                    "SlurmUser may call as any user, docs/tenancy.md): jobs of tenants are queued from "
                    "now on; %s",
                    as_user,
                    e,
                )
            except SlurmError as e:
                refused = e
            else:
                self.queue_only.pop(partition, None)  # room again: the next refusal starts small
                metrics.job_allocated_immediately()
                if as_user is not None:
                    await self._mark(job_id, admin_comment)
                    self._unverified.add(job_id)
                self._started(job_id, sent, "allocate")
                return job_id
        job_id = await self._queue(request, name, admin_comment)
        metrics.job_queued()
        self._started(job_id, sent, "queue")
        self._queued.add(job_id)
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

    async def _queue(self, request: JobRequest, name: str, admin_comment: str) -> int:
        """Queue the job (``job/submit``): a tenant's as the tenant, then marked as the bridge's;
        the bridge's own (or one whose group the user cannot name) with the bridge's token."""
        as_user = self._as_user(request) if request.names_identity else None
        if as_user is not None:
            try:
                job_id = await self.slurm.submit_external_job(
                    tenants_own(request),
                    name=name,
                    admin_comment=admin_comment,
                    as_user=as_user,
                )
            except SlurmUnavailable:
                raise
            except SlurmAuthError as e:
                self.as_tenant = False
                log.warning(
                    "slurmrestd refused to submit as user %s: tenants' jobs are queued by the bridge: %s", as_user, e
                )
            except SlurmError as e:
                if not group_refused(e):
                    raise  # Slurm's verdict on the tenant's own job
                self._groups[as_user] = (None, "")  # the group named is not the user's primary one
                log.info(
                    "Slurm refused group %s from user %s: queued by the bridge",
                    request.group_name or request.group_id,
                    as_user,
                )
            else:
                await self._mark(job_id, admin_comment)
                if request.priority is not None:  # delegated by the policy: set as the bridge
                    await self.slurm.set_priority(job_id, request.priority)
                return job_id
        if request.names_identity:
            await self._stand_in([request], self._why_own_token(request))
        return await self.slurm.submit_external_job(request, name=name, admin_comment=admin_comment)

    def _why_own_token(self, request: JobRequest) -> str:
        """Why a tenant's job goes with the bridge's token (for the message of a refusal)."""
        user = _user(request)
        if user is None:
            return "it names a group and no user"
        if not self.as_tenant:
            return "the bridge's token may not submit as another user"
        group = request.group_name or request.group_id
        return f"its group {group} is not {user}'s primary group, the only one Slurm takes from the user"

    async def _stand_in(self, requests: Sequence[JobRequest], why: str) -> None:
        """The bridge's check for what Slurm does not judge when it sends a tenant's job with its
        own token: raises PartitionRefusesTenant, before anything is sent."""
        if self.partitions is None:
            return
        wanted = [p for r in requests for p in (r.partition or "").split(",") if p]
        refusal = own_token_refusal(requests, why, await self.partitions.limits(wanted))
        if refusal is not None:
            raise PartitionRefusesTenant(refusal)

    async def _mark(self, job_id: int, admin_comment: str) -> None:
        """Make a job allocated as a tenant the bridge's: its ``admin_comment`` (which only the
        bridge's token may set; the job carries the marker in ``comment`` meanwhile). When that
        fails the job is cancelled, and when even that fails it is left to the orphan sweep, which
        cancels a job marked only in ``comment`` (orphans.py); the caller hears SlurmUnavailable."""
        try:
            await self.slurm.mark_job(job_id, admin_comment)
            return
        except SlurmError as e:
            failed = e
        if not isinstance(failed, SlurmUnavailable):  # refused: this token cannot; queue tenants
            self.as_tenant = False
            log.warning("job %d, allocated as a tenant, cannot be marked: tenants are queued now: %s", job_id, failed)
        try:
            await self.slurm.cancel_job(job_id)
            cancelled = True
        except SlurmError:
            cancelled = False
        raise SlurmUnavailable(
            f"job {job_id}, allocated as a tenant, could not be marked as the bridge's ({failed}); "
            + ("it was cancelled" if cancelled else "the orphan sweep cancels it"),
            maybe_applied=not cancelled,
        ) from failed

    def was_queued(self, job_id: int) -> bool:
        """Whether ``place`` queued ``job_id`` rather than allocating it (asked once per job)."""
        queued = job_id in self._queued
        self._queued.discard(job_id)
        return queued

    @staticmethod
    def _started(job_id: int, sent: float, path: str) -> None:
        starts.mark(job_id, "submit_sent", sent)
        starts.mark(job_id, "submitted")
        starts.note(job_id, "path", path)

    def verify(self, request: JobRequest, job_id: int, job: JobInfo | None) -> bool:
        """After a placement: False when the job was allocated as a tenant and does not run as
        the request says (another group than the user's primary one; the job could not be read
        back, so nobody can tell), so that the caller cancels it, before any pod uses it, and
        places the job again: the user's group is known now, and the job is queued."""
        if job_id not in self._unverified:
            return True
        self._unverified.discard(job_id)
        user = _user(request)
        names_group = request.group_id is not None or request.group_name is not None
        if user is None or job is None:
            # Unread: the user is certain (Slurm allocated as them), the group is not; that user's
            # jobs that name a group are queued from now on.
            if user is not None and names_group:
                self._groups[user] = (None, "")
            return not names_group
        self._groups[user] = (job.group_id, job.group_name)
        if request.user_name is not None:
            same_user = job.user_name == request.user_name
        else:
            same_user = job.user_id == request.user_id
        if same_user and _group_is(request, job.group_id, job.group_name):
            return True
        log.warning(
            "job %d allocated as %s runs as %s (uid %s) in group %s (gid %s), not as %s/%s asks: "
            "cancelled and queued instead (job/submit sets the group)",
            job_id,
            user,
            job.user_name,
            job.user_id,
            job.group_name,
            job.group_id,
            user,
            request.group_name or request.group_id,
        )
        return False

    async def place_het(self, requests: list[JobRequest], name: str, admin_comment: str) -> int:
        """A heterogeneous job (a CompositePodGroup's), always queued: Slurm refuses a
        heterogeneous immediate allocation (error 2078) and starts such a job only in a backfill
        pass. Returns the leader's id."""
        sent = time.time()
        if any(r.names_identity for r in requests):
            await self._stand_in(requests, "it is a heterogeneous job (a CompositePodGroup's)")
        job_id = await self.slurm.submit_het_job(requests, name=name, admin_comment=admin_comment)
        metrics.job_queued()
        self._started(job_id, sent, "queue")
        return job_id
