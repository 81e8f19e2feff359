"""Hints from slurmctld: a job started or ended (a site's ``PrologSlurmctld`` / ``EpilogSlurmctld``
running ``slurm-hooks/slurm-bridge-notify.sh``, docs/configuration.md#slurm-hooks).

A hint is never trusted: it names a job, and that job is read from Slurm (one ``GET job/{id}``,
the read the next poll would have made) before the view, and so any decision, changes. A hint
about another user's job, or about what the view already has (a job the bridge allocated at once
and read back), costs no call. Hints that never arrive (the operator restarting, a standby
answering, the hook failing) cost time only: the polls find the same, a poll period later.
"""

from __future__ import annotations

import asyncio
import logging

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import HintEvent, ViewReads
from slurm_bridge.operator.runtime import starts
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class SlurmHints:
    """Takes hints, reads the jobs they name (a burst of hints is read GET_CONCURRENCY at a time)."""

    def __init__(self, view: ViewReads) -> None:
        self._view = view
        self._queued: dict[int, PhjRef] = {}
        self._task: asyncio.Task[None] | None = None
        self.received = 0
        self.read = 0  # hints that were news, and their job read
        self.failed = 0  # ... whose read failed (left to the next poll)

    def hint(self, job_id: int, event: HintEvent) -> bool:
        """Take a hint; True when it was news and its job is being read."""
        self.received += 1
        if event == "started":
            starts.mark(job_id, "hint_started")
        ref = self._view.news(job_id, event)
        if ref is None:
            return False
        self._queued[job_id] = ref
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read(), name="slurm-hints")
        return True

    async def _read(self) -> None:
        while self._queued:
            batch, self._queued = self._queued, {}
            try:
                await self._view.read_now(batch)
                self.read += len(batch)
            except SlurmError as e:
                self.failed += len(batch)
                log.info("reading hinted Slurm jobs %s failed, the next poll reads them: %s", sorted(batch), e)
                self._view.poll_soon()

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
