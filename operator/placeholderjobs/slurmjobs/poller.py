"""Reads Slurm once per period and tells the controllers which PlaceholderJobs changed.

Each poll asks for every job's *state* (``jobs/state``: about 80 bytes a job) and fetches the
details (nodes, reason, admin_comment) only of the bridge's jobs whose state changed; an answer
equal to the last one, with the view as it was then, is not compared job by job again; with the
node table's signal (``watch_nodes``) a poll while no node's allocation changed reads nothing. A full
job list -- about 8 KB a job, for every job Slurm holds -- is read at start-up, when asked for,
and when so many jobs changed that one list is cheaper than their GETs; every
FULL_RESYNC_SECONDS a list with ``update_time`` costs a few bytes when no job changed since the
last full list, and is that full list otherwise.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable

from slurm_bridge import names
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import SlurmJobReads as SlurmJobReads
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import ViewReads, user_not_known
from slurm_bridge.operator.runtime import heap, starts
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.rules.slurmsetup import rereads_after_move
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import FINISHED_JOB_STATES, JobInfo, JobStates

log = logging.getLogger(__name__)

# Polls start at most this often, however often they are asked for.
MIN_GAP_SECONDS = 0.4
# A full list this often adopts jobs the bridge did not see being made (another replica, a crash
# between submit and status) and catches anything the state polls could miss. It asks Slurm for
# the jobs changed since the last full list (``update_time``): an unchanged table answers with
# no jobs (a few bytes instead of about 8 KB a job), since the list would say what the view has.
# It runs beside the state polls, which never wait for it: with 10,000 jobs the list is 80 MB and
# took longer than the request timeout on a busy machine, and every poll waited for it.
FULL_RESYNC_SECONDS = 30.0
# ... and at most this share of the time (a list that takes 8 s runs every 80 s at most) ...
FULL_RESYNC_SHARE = 0.1
# ... but a full list without ``update_time`` runs at least this often, whatever Slurm says.
FULL_LIST_MAX_SECONDS = 300.0
# Pending jobs change reason (Priority, Resources, ...) without changing state: read them again
# this often, but at most PENDING_REFRESH_PER_POLL of them per poll (the longest unread first),
# so a deep queue costs a bounded number of GETs per period; the full list every
# FULL_RESYNC_SECONDS reads every reason anyway. (Measured: 300 pending jobs cost 20 GETs a
# second without the cap: bench/log, run 3.)
PENDING_REFRESH_SECONDS = 10.0
PENDING_REFRESH_PER_POLL = 4
# Details are fetched job by job while that is cheaper than one full list: a GET costs about as
# much as listing this many jobs.
GET_COST_IN_LISTED_JOBS = 4
# With a signal from Slurm's node table (``watch_nodes``): a job starts and ends only on nodes,
# and every allocation or release moves the node table's last_update (checked on Slurm 26.05,
# slurmd and EXTERNAL nodes alike), which the node controller asks for with ``update_time`` once
# a period anyway. While that table is unchanged since the last state poll began and the bridge
# expects no job, no job can have started or ended: the state poll (every job Slurm holds: 96 ms
# of slurmrestd's CPU at 10,000 jobs, bench/log) is skipped, and pending jobs' reasons
# are not read again either. It still runs at least this often, for what touches no node (a
# pending job cancelled by someone else).
STATES_MAX_SECONDS = 10.0
# Job state flags that change without anything the bridge reads changing: a job is RUNNING with
# its nodes while a PrologSlurmctld runs (CONFIGURING), and only the flag goes when it ends. Slurm
# lists an ended job COMPLETING for a moment after its end (about 25 ms on Slurm 26.05.5 with the
# handoff's EpilogSlurmctld): the end is already in the view (the bridge's own cancel, or the read
# that found it), so neither the flag's coming nor its going is news (seen: a poll that met the
# bridge's cancelled jobs COMPLETING read each of them twice more).
_SETTLING_FLAGS = frozenset({"CONFIGURING"})
_ENDING_FLAGS = frozenset({"COMPLETING"})


def _settled_only(old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """Whether ``new`` is ``old`` with only settling flags gone (RUNNING,CONFIGURING -> RUNNING),
    or, for an ended job, with only COMPLETING come or gone (CANCELLED <-> CANCELLED,COMPLETING)."""
    if not old or not new or old[0] != new[0]:
        return False
    was, now = set(old), set(new)
    if old[0] in FINISHED_JOB_STATES:
        return bool(was ^ now) and was ^ now <= _ENDING_FLAGS
    return now < was and was - now <= _SETTLING_FLAGS


def _fingerprint(j: JobInfo) -> tuple[object, ...]:
    # A pending job's start_time is Slurm's estimate of its start: the waiting pods are told
    # when it moves (lifecycle.pending), so a new estimate is a change of the view. A running job
    # Slurm preempts stays RUNNING with preempt_time set and end_time moved (the handoff ends its
    # pods), and a changed time limit moves end_time: both are changes too.
    # What the job holds (its TRES, GRES, MCS label) may change without its state: its owner's
    # ``scontrol update`` (rules/allocationmatch.py compares it with what the bridge asked for).
    running = j.is_running
    return (
        j.states,
        j.reason,
        j.nodes,
        j.start_time if j.is_pending else None,
        j.preempt_time,
        j.end_time if running else None,
        j.tres,
        j.gres_per_node,
        j.mcs_label,
        j.signed,
    )


class SlurmPoller(ViewReads):
    """One cheap state poll per period (sooner when asked); ``synced`` once a full list arrived.

    Controllers must not submit before ``synced``: until then a job submitted before a restart
    would be invisible and submitted twice.
    """

    def __init__(
        self,
        slurm: SlurmJobReads,
        bridge_id: str,
        period: float,
        on_change: Callable[[PhjRef], None],
        on_poll: Callable[[JobSnapshot], None] | None = None,
        *,
        own_user: Callable[[], str] = user_not_known,
    ) -> None:
        super().__init__(slurm, bridge_id, on_change, own_user=own_user)
        self.period, self._on_poll = period, on_poll
        # What the bridge made that this view may not show yet (besides ``_expected``): PlaceholderJob
        # uid -> (job id, when): submits a poll has not shown yet; and uid -> when a submit failed in
        # a way that may still have made the job: nothing is submitted for it again before a full
        # list taken after that shows whether it did. Caches only: after a restart the first full
        # list finds every job by its admin_comment.
        self._made: dict[str, tuple[int, float]] = {}
        self._uncertain: dict[str, float] = {}
        self._full_wanted = True
        self.last_full_at = 0.0
        # Slurm's last_update of the last full list (for update_time), and when the last resync
        # ran, whether it listed or Slurm said nothing changed.
        self._full_update: int | None = None
        self._last_resync = 0.0
        self._list_seconds = 0.0  # how long the last full list took
        self._resyncing: asyncio.Task[None] | None = None
        # The last jobs/state answer, and (answer, view version) of the last poll that found
        # every job as the view has it: while both stay the same there is nothing to compare.
        self._states: JobStates | None = None
        self._settled: tuple[JobStates, int] | None = None
        self.resyncs_unchanged = 0
        # The node table's signal (watch_nodes): whether it is read at all, whether it changed
        # since the last state poll began, and when that began.
        self._nodes_healthy: Callable[[], bool] | None = None
        self._nodes_dirty = True
        self._moved_nodes: set[str] | None = set()  # whose allocation changed (:meth:`nodes_changed`)
        self.moved_reads = 0
        self._last_states = 0.0
        self.states_skipped = 0
        # Pending jobs read again for Slurm's reason (a cost per second a job waits, not per pod).
        self.reason_reads = 0
        # ended jobs read once more when Slurm's state list no longer has them (purged after
        # MinJobAge): a read per job, at a time Slurm's MinJobAge decides, not the pod's life
        self.purge_reads = 0
        self.last_duration = 0.0
        self.synced = asyncio.Event()
        self.polls = self.full_lists = 0
        self._loop = PollLoop(
            "slurm-poller",
            period,
            self.poll_once,
            log=log,
            ok_message=lambda: f"Slurm job poll OK ({len(self.snapshot.refs) if self.snapshot else 0} bridge jobs)",
            failed="polling Slurm jobs",
            errors=(SlurmError,),
            # A slow state poll means a busy slurmrestd: give it room. (Only state polls count: a
            # full list is slow because it is big.)
            min_gap=lambda: max(MIN_GAP_SECONDS, 3 * self.last_duration),
        )

    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    @property
    def last_error(self) -> str:
        return self._loop.last_error

    def watch_nodes(self, healthy: Callable[[], bool]) -> None:
        """Skip state polls while Slurm's node table is unchanged (STATES_MAX_SECONDS): the node
        reader calls :meth:`nodes_changed` after each list that found a change; while ``healthy``
        is false (it cannot read), every poll reads the states, as without it."""
        self._nodes_healthy = healthy

    def nodes_changed(self, nodes: set[str] | None = None) -> None:
        """Slurm's node table changed: a job may have started or ended; look now. ``nodes``: those
        whose allocation changed (None: not known, any may have): the running bridge jobs there
        are read again at the next state poll, since a job its owner moved or shrank (``scontrol
        update``) changes no state (docs/security.md, "A job's owner in Slurm")."""
        self._nodes_dirty = True
        if nodes is None or self._moved_nodes is None:
            self._moved_nodes = None
        else:
            self._moved_nodes |= nodes
        self._loop.wake()

    def poll_soon(self, *, full: bool = False) -> None:
        """Poll early; ``full``: with a full list (to find a job only its admin_comment names)."""
        self._full_wanted |= full
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await cancel_and_wait([self._resyncing])

    # ---- the bridge's own submits ----------------------------------------------------------------
    def submitted(self, uid: str, job_id: int) -> None:
        """Remember a submit until a poll shows its job (a refresh may not)."""
        self._made[uid] = (job_id, time.monotonic())

    def side(self, uid: str, job_id: int | None = None) -> SlurmSide:
        """The one answer to "does the PlaceholderJob ``uid`` have a Slurm job?", with
        ``job_id`` its status records: the job recorded, else found by the uid in the view (a
        crash between submit and status), else submitted by this process and not shown by a poll
        yet; what else the view holds for it; an uncertain submit. Not ``synced`` before the first
        full list: nothing may be submitted then."""
        made, snap = self._made.get(uid), self.snapshot
        if snap is None:
            snap = JobSnapshot({}, {}, 0.0)
        found = snap.by_id.get(job_id) if job_id else None
        found = found if found is not None else snap.job_for_uid(uid)
        job_id = job_id or (found.job_id if found else None) or (made[0] if made else None)
        return SlurmSide(
            synced=self.synced.is_set() and self.snapshot is not None,
            poll_period=self.period,
            job_id=job_id,
            job=found if found is not None and found.job_id == job_id else snap.by_id.get(job_id or -1),
            found=found,
            others=tuple(o.job_id for o in snap.by_uid.get(uid, []) if o.job_id != job_id and not o.is_finished),
            components=snap.components(job_id) if job_id is not None else (),
            submitted_at=made[1] if made else None,
            taken_at=snap.taken_at,
            uncertain_since=self._uncertain.get(uid),
            last_full_at=self.last_full_at,
        )

    def submit_failed(self, uid: str, *, maybe_applied: bool) -> None:
        """A submit failed; when it may still have made the job, a full list must say first."""
        self._made.pop(uid, None)
        if maybe_applied:
            self._uncertain[uid] = time.monotonic()
            self.poll_soon(full=True)

    def forget_uncertain(self, uid: str) -> None:
        self._uncertain.pop(uid, None)

    def forget(self, uid: str) -> None:
        """The PlaceholderJob is finalized: nothing of its submits is needed any more."""
        self._made.pop(uid, None)
        self._uncertain.pop(uid, None)

    # ---- polls ---------------------------------------------------------------------------------
    async def poll_once(self) -> JobSnapshot:
        started = time.monotonic()
        if self._full_wanted or self.snapshot is None:
            await self._full(started)
        else:
            if started - self._last_resync >= self._resync_every() and (
                self._resyncing is None or self._resyncing.done()
            ):
                self._last_resync = started
                self._resyncing = asyncio.create_task(self._resync(started), name="slurm-full-list")
            if self._states_due(started):
                await self._incremental(started)
                self.last_duration = time.monotonic() - started
            else:
                self.states_skipped += 1
        self.polls += 1
        snap = self.snapshot
        assert snap is not None
        snap.taken_at = started
        # Forget submits the view now shows.
        for uid in [u for u in self._made if u in snap.by_uid]:
            del self._made[uid]
        if self._on_poll is not None:
            self._on_poll(snap)
        self.synced.set()
        return snap

    async def _resync(self, started: float) -> None:
        """The periodic full list, beside the state polls: skipped (one small answer) when Slurm
        says no job changed since the last full list, which is then still what the list would
        show; without ``update_time`` at least every FULL_LIST_MAX_SECONDS. A failure waits for
        the next period: the state polls go on meanwhile."""
        since = self._full_update if started - self.last_full_at < FULL_LIST_MAX_SECONDS else None
        try:
            jobs, last_update = await self._slurm.list_jobs_since(
                since, admin_comment_prefix=names.ADMIN_COMMENT_PREFIX
            )
        except SlurmError as e:
            log.warning("the periodic full Slurm job list failed, trying again in %.0fs: %s", self._resync_every(), e)
            return
        if jobs is None:
            self.resyncs_unchanged += 1
            return
        self._list_seconds = time.monotonic() - started
        self._replace(started, jobs, last_update)

    def _resync_every(self) -> float:
        return max(FULL_RESYNC_SECONDS, self._list_seconds / FULL_RESYNC_SHARE)

    async def _full(self, started: float) -> None:
        """Replace the view with a full list: jobs missing from it were purged by Slurm."""
        self._full_wanted = False
        jobs, last_update = await self._slurm.list_jobs_since(None, admin_comment_prefix=names.ADMIN_COMMENT_PREFIX)
        self._list_seconds = time.monotonic() - started
        self._last_resync = max(self._last_resync, started)
        self._replace(started, jobs or [], last_update)

    def _replace(self, started: float, jobs: list[JobInfo], last_update: int | None) -> None:
        """Apply a full list taken at ``started``; reads and purges found since are newer."""
        # The answer (80 MB at 10,000 jobs) is freed by now; hand that memory back at once.
        heap.release_free_heap()
        self.full_lists += 1
        if started >= self.last_full_at:
            self.last_full_at = started
            self._full_update = last_update
        if self.snapshot is None:
            self.snapshot = JobSnapshot({}, {}, started)
        seen: set[int] = set()
        unmarked: dict[int, tuple[JobInfo, PhjRef]] = {}
        for job in jobs:
            ref = self._ref_for(job)
            if ref is None:
                if (found := self._unmarked(job)) is not None:
                    unmarked[job.job_id] = (job, found)
                continue
            seen.add(job.job_id)
            if self._purged_at.get(job.job_id, -1.0) >= started:
                continue  # a poll found it purged after this list began
            self._apply(job, ref, started, notify=True, listed=True)
        snap = self.snapshot
        assert snap is not None
        # Only jobs read before the list began can have been purged: one read (a refresh after a
        # submit, an incremental poll) while a slow list ran is newer than the list.
        for job_id in [j for j in snap.by_id if j not in seen and self._read_at.get(j, 0.0) < started]:
            self._forget(job_id)
        self._expected = {j: r for j, r in self._expected.items() if j not in seen}
        self._purged_at = {j: at for j, at in self._purged_at.items() if at >= started}
        if started >= self.last_full_at:
            self.unmarked = unmarked

    def _states_due(self, now: float) -> bool:
        """Whether this poll reads every job's state: always without the node table's signal (or
        while it is not read); with it, when the table changed since the last state poll, when
        the bridge expects a job the view lacks, or STATES_MAX_SECONDS after the last one."""
        healthy, snap = self._nodes_healthy, self.snapshot
        if healthy is None or not healthy() or self._nodes_dirty or self._expected or snap is None:
            return True
        if any(uid not in snap.by_uid for uid in self._made):
            return True
        return now - self._last_states >= STATES_MAX_SECONDS

    async def _incremental(self, started: float) -> None:
        snap = self.snapshot
        assert snap is not None
        # Whether something may have changed (not the safety net's poll): pending jobs' reasons are
        # read again only then, so an idle Slurm costs no per-job read.
        moved = self._nodes_healthy is None or self._nodes_dirty
        moved_nodes, self._moved_nodes = self._moved_nodes, set()
        self._nodes_dirty, self._last_states = False, started
        previous = self._states
        states = self._states = await self._slurm.job_states(previous)
        wanted: dict[int, PhjRef] = dict(self._expected)
        vanished = 0
        settled = self._settled
        if not (states.unchanged and settled is not None and settled[0] is previous and settled[1] == snap.version):
            moved = True
            settling: list[JobInfo] = []
            for job_id, job in snap.by_id.items():
                state = states.of(job)
                if state is not None and state != job.states and _settled_only(job.states, state) and not job.signed:
                    settling.append(job.model_copy(update={"states": state}))  # nothing to read
                elif state is None or (state != job.states and set(state) != set(job.states)):
                    wanted[job_id] = snap.refs[job_id]
                    vanished += state is None
            for job in settling:
                snap.put(job, snap.refs[job.job_id])
        # else: the same answer as the last poll's, which found every job as the view still has it
        self._settled = (states, snap.version) if not wanted else None
        reasons = self._pending_reasons(started, wanted) if moved else 0
        moved_reads = self._running_on(moved_nodes, wanted)
        if not wanted:
            return
        if len(wanted) * GET_COST_IN_LISTED_JOBS > max(len(states), 1):
            await self._full(started)
            return
        self.reason_reads += reasons
        self.purge_reads += vanished
        self.moved_reads += moved_reads
        for job_id in await self.read_now(wanted, started):
            if not states.knows(job_id):
                self._full_wanted = True  # an expected job Slurm does not know: the next full list decides

    def _running_on(self, nodes: set[str] | None, wanted: dict[int, PhjRef]) -> int:
        """Add the running bridge jobs on ``nodes`` (None: on any node) to the jobs this poll reads:
        what a job holds can change without its state (its owner's ``scontrol update``), and every
        such change moves the allocation of a node it held. Only jobs an owner other than the
        bridge's Slurm user could have shrunk (``rereads_after_move``), and only with the node
        table's signal (without it the full list every FULL_RESYNC_SECONDS sees it); how many."""
        snap = self.snapshot
        if snap is None or self._nodes_healthy is None or nodes == set():
            return 0
        if not self._nodes_healthy():
            return 0  # the node table is not read: which nodes moved is not known
        bridge_user, added = self.own_user(), 0
        for job_id, job in snap.by_id.items():
            if job_id in wanted or not job.is_running or not job.nodes:
                continue
            if not rereads_after_move(job.user_name or "", bridge_user):
                continue
            if nodes is None or not nodes.isdisjoint(job.nodes):
                wanted[job_id] = snap.refs[job_id]
                added += 1
        return added

    def _pending_reasons(self, started: float, wanted: dict[int, PhjRef]) -> int:
        """Add the pending jobs whose reason was read longest ago (at most PENDING_REFRESH_PER_POLL
        of those older than PENDING_REFRESH_SECONDS) to the jobs this poll reads; how many."""
        snap = self.snapshot
        assert snap is not None
        stale = started - PENDING_REFRESH_SECONDS
        reasons: list[tuple[float, int]] = []  # (last read, job) of pending jobs read long ago
        for job_id in snap.pending:
            if job_id not in wanted and (read_at := self._read_at.get(job_id, 0.0)) < stale:
                reasons.append((read_at, job_id))
        due = heapq.nsmallest(PENDING_REFRESH_PER_POLL, reasons)
        for _, job_id in due:
            wanted[job_id] = snap.refs[job_id]
        return len(due)

    def _apply(self, job: JobInfo, ref: PhjRef, at: float, *, notify: bool, listed: bool = False) -> None:
        """Take in ``job`` as read at ``at``. A list yields to a read begun at the same moment: a
        state poll running beside the list read that job after slurmctld took the list."""
        snap = self.snapshot
        if snap is None:
            snap = self.snapshot = JobSnapshot({}, {}, at)
        old = snap.by_id.get(job.job_id)
        read_at = self._read_at.get(job.job_id, 0.0)
        if old is not None and (read_at > at or (listed and read_at == at)):
            return  # read before the one the view has (a slow list): keep the newer
        self._read_at[job.job_id] = at
        if old is not None and _fingerprint(old) == _fingerprint(job):
            return
        if job.is_running and job.nodes and not (old is not None and old.is_running and old.nodes):
            starts.mark(job.job_id, "running_read")
        snap.put(job, ref)
        if notify:
            self._on_change(ref)
