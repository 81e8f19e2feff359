"""The poller's view of the bridge's jobs, and the reads of named jobs outside the poll cycle.

Three things tell the view about a job before a poll would: the read right after the bridge's own
submit (``refresh``), the read that confirms a hint from slurmctld (``read_now``, for
:mod:`.hints`: a job started or ended), and a cancel the bridge made (``assume_cancelled``). Each
is applied *as of when it was asked*, and the view keeps the newest: a poll, a list or a read that
began before it cannot bring an older state back (a job cancelled a second time, a released pod's
job seen pending again). :class:`.poller.SlurmPoller` adds the polls and how a read is applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import decode_admin_comment
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo, JobStates

log = logging.getLogger("slurm_bridge.operator.placeholderjobs.slurmjobs.poller")

# Jobs read one by one at most this many at a time (a poll's changed jobs, a burst of hints).
GET_CONCURRENCY = 4
# What slurmctld's hook says happened to a job (slurm-hooks/slurm-bridge-notify.sh).
HintEvent = Literal["started", "ended"]


@dataclass(frozen=True)
class JobOwner:
    """Whose a signed start's job is, and what it is charged to, as slurmctld says."""

    user_name: str
    user_id: int
    group_name: str
    group_id: int
    account: str
    qos: str


@dataclass(frozen=True)
class SignedStart:
    """Where and when a job started, as slurmctld gave them to its hook, in a notice signed with
    the secret only the hook and the operator hold (operator/wiring/slurmhook.py)."""

    nodes: tuple[str, ...]
    partition: str
    start_time: datetime
    end_time: datetime | None = None
    owner: JobOwner | None = None


class SlurmJobReads(Protocol):
    """The Slurm calls the poller reads jobs with."""

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]: ...
    async def job_states(self, previous: JobStates | None = None) -> JobStates: ...
    async def get_job(self, job_id: int) -> JobInfo | None: ...
    async def get_jobs(self, job_id: int) -> list[JobInfo]: ...


def user_not_known() -> str:
    """The Slurm user of the bridge's token, not known: every signed start waits for its job's read."""
    return ""


class ViewReads(ABC):
    """The view (``snapshot``), when each job in it was read, and the reads of named jobs."""

    def __init__(
        self,
        slurm: SlurmJobReads,
        bridge_id: str,
        on_change: Callable[[PhjRef], None],
        *,
        own_user: Callable[[], str] = user_not_known,
    ) -> None:
        self._slurm = slurm
        self._bridge_id = bridge_id
        self._on_change = on_change
        self.snapshot: JobSnapshot | None = None
        # job id -> when its details were read, or the bridge cancelled it (monotonic)
        self._read_at: dict[int, float] = {}
        # job id -> ref: jobs the bridge made whose details are not read yet (the GET after a
        # submit failed): the next poll reads them.
        self._expected: dict[int, PhjRef] = {}
        # job id -> when a read found it purged: an older list that still shows it must not bring
        # it back (kept until a list that began after that is applied).
        self._purged_at: dict[int, float] = {}
        # Live jobs the last full list showed marked as the bridge's in ``comment`` only: allocated
        # as a tenant and never given their admin_comment (submit.Placer._mark was interrupted),
        # or made by a user who copied the mark. Never the view's; the orphan sweep cancels them.
        self.unmarked: dict[int, tuple[JobInfo, PhjRef]] = {}
        # The Slurm user of the bridge's token: a job of another owner may have been changed while
        # it waited, so its signed start waits for the read (allocationmatch).
        self.own_user = own_user

    @abstractmethod
    def _apply(self, job: JobInfo, ref: PhjRef, at: float, *, notify: bool, listed: bool = False) -> None:
        """Take in ``job`` as read at ``at`` (the newest read wins)."""

    @abstractmethod
    def poll_soon(self, *, full: bool = False) -> None:
        """Poll early (a read failed: the poll reads it)."""

    async def refresh(self, job_id: int, ref: PhjRef, *, het: bool = False, notify: bool = False) -> JobInfo | None:
        """Read one job the bridge just made, so its state is known without waiting for a poll;
        ``het``: a heterogeneous job's leader, read with every component; ``notify``: a change is
        told to the controllers (the handoff loop's reads of running jobs Slurm may preempt).

        When the read fails the next poll reads it. None: Slurm does not know the job (yet).
        """
        at = time.monotonic()  # as of when it was asked: a read that began later is newer
        try:
            if het:
                found = await self._slurm.get_jobs(job_id)
            else:
                one = await self._slurm.get_job(job_id)
                found = [one] if one is not None else []
        except SlurmError as e:
            log.info("reading Slurm job %d failed, the next poll reads it: %s", job_id, e)
            self._expected[job_id] = ref
            self.poll_soon()
            return None
        job = next((j for j in found if j.job_id == job_id), None)
        if job is None:
            self._expected[job_id] = ref
            return None
        for j in found:  # a heterogeneous job's leader answers with every component
            if j.job_id == job_id or (job.het_job_id and j.het_job_id == job.het_job_id):
                self._apply(j, ref, at, notify=notify)
        return job

    async def read_one(self, job_id: int) -> JobInfo | None:
        """Slurm's record of one job, as it is now (nothing applied to the view)."""
        return await self._slurm.get_job(job_id)

    def expect(self, job_id: int, ref: PhjRef) -> None:
        """A job the bridge just made and did not read: the hint that it started reads it, else the
        next poll does (polls run while the view lacks one)."""
        self._expected[job_id] = ref

    def news(self, job_id: int, event: HintEvent) -> PhjRef | None:
        """The PlaceholderJob whose job a hint is news about, else None: a start of a job the
        view has waiting (or has not read yet), an end of a job it has live. Another user's job,
        or a start the bridge's own allocation already read, costs nothing."""
        snap = self.snapshot
        if snap is None:
            return None  # nothing is decided before the first full list anyway
        job, ref = snap.by_id.get(job_id), snap.refs.get(job_id) or self._expected.get(job_id)
        if ref is None:
            return None
        if job is None:
            return ref  # made by the bridge, not read yet
        if job.het_job_id:
            return None  # a heterogeneous job is decided on every component: the polls read them
        if event == "started":
            return ref if job.is_pending or not job.nodes else None
        return None if job.is_finished else ref

    def apply_signed_start(self, job_id: int, ref: PhjRef, start: SignedStart) -> bool:
        """Take a signed start of a job :meth:`news` said it is news about (``ref``) into the view
        now, as a read would, so that the job's pods are released without waiting for the read
        (which still follows, and wins: it is newer); a job of another owner than the bridge's
        token may have been changed while it waited (``scontrol update``), so its pods wait for
        that read (``JobInfo.signed``; docs/security.md, "A job's owner in Slurm"). Taken for a job
        the view has waiting in a partition it asked for, or has not read yet when the notice says
        whose it is (a queued job is not read after its submit); False when not taken."""
        snap = self.snapshot
        assert snap is not None, "news() answers nothing before the first full list"
        job = snap.by_id.get(job_id)
        # PrologSlurmctld runs while the job is RUNNING,CONFIGURING (docs/configuration.md).
        started: dict[str, object] = {
            "states": ("RUNNING", "CONFIGURING"),
            "reason": "",
            "nodes": start.nodes,
            "partition": start.partition,
            "start_time": start.start_time,
            "scheduled_nodes": (),
        }
        whose = job.user_name if job is not None else start.owner.user_name if start.owner else ""
        if not whose or whose != self.own_user():
            # What it holds is not in the notice (the waiting job's TRES was its request, which its
            # owner may have changed): its pods are released once the read says (allocationmatch).
            started.update(tres=None, gres_per_node=None, mcs_label=None, signed=True)
        if job is None:
            if start.owner is None:
                return False
            owner = start.owner
            started.update(job_id=job_id, end_time=start.end_time, user_name=owner.user_name, user_id=owner.user_id)
            started.update(group_name=owner.group_name, group_id=owner.group_id, account=owner.account, qos=owner.qos)
            new = JobInfo.model_validate(started)
        else:
            if not job.is_pending:
                return False
            if job.partition and start.partition not in job.partition.split(","):
                log.warning(
                    "slurmctld's signed start of job %d names partition %s, not one of %s: read from Slurm instead",
                    job_id,
                    start.partition,
                    job.partition,
                )
                return False
            limit = job.time_limit_minutes
            end = start.end_time or (start.start_time + timedelta(minutes=limit) if limit is not None else None)
            new = job.model_copy(update={**started, "end_time": end})
        self._apply(new, ref, time.monotonic(), notify=True)
        return True

    async def read_now(self, wanted: dict[int, PhjRef], at: float | None = None) -> set[int]:
        """Read ``wanted`` now (GET each, GET_CONCURRENCY at a time) and apply what Slurm says
        as of ``at`` (default: now); a job Slurm no longer has is forgotten. Returns the jobs
        Slurm did not know that the view did not have either. Raises the first SlurmError once
        every other answer is applied (the failed reads are the next poll's)."""
        at = time.monotonic() if at is None else at
        sem = asyncio.Semaphore(GET_CONCURRENCY)

        async def read(job_id: int) -> JobInfo | None:
            async with sem:
                return await self._slurm.get_job(job_id)

        found = await asyncio.gather(*(read(j) for j in wanted), return_exceptions=True)
        unknown: set[int] = set()
        failed: SlurmError | None = None
        for (job_id, ref), got in zip(wanted.items(), found, strict=True):
            if isinstance(got, BaseException):
                if not isinstance(got, SlurmError):
                    raise got
                failed = failed or got
            elif got is not None:
                self._apply(got, ref, at, notify=True)
                self._expected.pop(job_id, None)
            elif self.snapshot is not None and job_id in self.snapshot.by_id:
                self._forget(job_id)  # purged from Slurm
                self._purged_at[job_id] = at
            else:
                unknown.add(job_id)
        if failed is not None:
            raise failed
        return unknown

    def assume_cancelled(self, job_id: int) -> None:
        """Record a cancel the bridge itself just made, so the next poll does not read the job
        again to learn it (should Slurm report anything else, the states differ and it is read)."""
        snap = self.snapshot
        job = snap.by_id.get(job_id) if snap is not None else None
        if snap is None or job is None:
            return
        # Cancelling a heterogeneous job's leader cancels every component. The cancel is newer than
        # any read begun before it: a poll or a list that began earlier (and saw the job running)
        # must not bring it back, or the job would be cancelled a second time.
        at = time.monotonic()
        for part in snap.components(job_id) if job.het_job_id == job_id else (job,):
            if not part.is_finished:
                snap.put(part.model_copy(update={"states": ("CANCELLED",)}), snap.refs[part.job_id])
                self._read_at[part.job_id] = at

    def _ref_for(self, job: JobInfo) -> PhjRef | None:
        snap = self.snapshot
        known = snap.refs.get(job.job_id) if snap is not None else None
        old = snap.by_id.get(job.job_id) if snap is not None else None
        if known is not None and old is not None and old.admin_comment == job.admin_comment:
            return known
        ref = decode_admin_comment(job.admin_comment)
        return ref if ref is not None and ref.bridge == self._bridge_id else None

    def _unmarked(self, job: JobInfo) -> PhjRef | None:
        """The PlaceholderJob a live job names in ``comment`` only (see ``unmarked``), if this bridge's."""
        if job.is_finished or job.admin_comment or not job.comment:
            return None
        ref = decode_admin_comment(job.comment)
        return ref if ref is not None and ref.bridge == self._bridge_id else None

    def _forget(self, job_id: int) -> None:
        snap = self.snapshot
        assert snap is not None
        ref = snap.refs.get(job_id)
        snap.drop(job_id)
        self._read_at.pop(job_id, None)
        if ref is not None:
            self._on_change(ref)
