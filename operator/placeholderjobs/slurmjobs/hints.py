"""Hints from slurmctld: a job started or ended (a site's ``PrologSlurmctld`` / ``EpilogSlurmctld``
running ``slurm-hooks/slurm-bridge-notify.sh``, docs/configuration.md#slurm-hooks).

A hint names a job, and that job is read from Slurm (one ``GET job/{id}``, the read the next poll
would have made). An unsigned hint changes nothing before that read. A signed start (an HMAC with
the secret only the hook and the operator hold, over the job, its nodes and the time) is taken into
the view at once, so its pods are released while the read is in flight; the read still comes, and
what Slurm says then wins. A hint
about another user's job, or about what the view already has (a job the bridge allocated at once
and read back), costs no call. Hints that never arrive (the operator restarting, a standby
answering, the hook failing) cost time only: the polls find the same, a poll period later.

Each hint's read starts when the hint arrives (at most READS_IN_FLIGHT at once) and is applied
when its answer comes: a burst of starts read batch after batch made each start wait for the
slowest read of the batch before it (bench/log, run 17).
"""

from __future__ import annotations

import asyncio
import logging
import time

from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import (
    GET_CONCURRENCY,
    HintEvent,
    SignedStart,
    ViewReads,
)
from slurm_bridge.operator.runtime import starts
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.slurm.errors import SlurmError

log = logging.getLogger(__name__)

# Reads of hinted jobs in flight at once (the others wait for a slot, in the order they came).
READS_IN_FLIGHT = GET_CONCURRENCY


class SlurmHints:
    """Takes hints and reads each hinted job on its own, as soon as a slot is free."""

    def __init__(self, view: ViewReads, reads_in_flight: int = READS_IN_FLIGHT) -> None:
        self._view = view
        self._slots = asyncio.Semaphore(reads_in_flight)
        self._reading: dict[int, asyncio.Task[None]] = {}
        # Jobs hinted again while their read was in flight: that read may have been answered
        # before the newer event, so the job is read once more after it.
        self._again: dict[int, PhjRef] = {}
        self.received = 0
        self.read = 0  # hints that were news, and their job read
        self.failed = 0  # ... whose read failed (left to the next poll)
        self.signed_starts = 0  # signed starts taken into the view before their read

    def hint(self, job_id: int, event: HintEvent, start: SignedStart | None = None) -> bool:
        """Take a hint (``start``: a signed start's nodes and time); True when it was news and its
        job is being read."""
        self.received += 1
        starts.mark(job_id, "hint_started" if event == "started" else "hint_ended")
        ref = self._view.news(job_id, event)
        if ref is None:
            return False
        if start is not None:
            taking = time.time()
            if self._view.apply_signed_start(job_id, ref, start):
                self.signed_starts += 1
                starts.mark(job_id, "signed_start", taking)
        if job_id in self._reading:
            self._again[job_id] = ref
        else:
            self._reading[job_id] = asyncio.create_task(self._read(job_id, ref), name=f"slurm-hint-{job_id}")
        return True

    async def _read(self, job_id: int, ref: PhjRef) -> None:
        try:
            next_ref: PhjRef | None = ref
            while next_ref is not None:
                async with self._slots:
                    try:
                        await self._view.read_now({job_id: next_ref})
                        self.read += 1
                    except SlurmError as e:
                        self.failed += 1
                        log.info("reading hinted Slurm job %d failed, the next poll reads it: %s", job_id, e)
                        self._view.poll_soon()
                next_ref = self._again.pop(job_id, None)
        finally:
            self._reading.pop(job_id, None)

    @property
    def in_flight(self) -> int:
        """Hinted jobs being read or waiting for a slot."""
        return len(self._reading)

    async def stop(self) -> None:
        await cancel_and_wait(list(self._reading.values()))
        self._again.clear()  # a leader again later reads what it is hinted then, not these
