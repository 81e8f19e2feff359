"""Cancels that come together go to Slurm in one call.

When many pods end at once (a burst's jobs completing, a namespace deleted) each PlaceholderJob's
reconcile cancels its job. One ``DELETE job/{id}`` each is one slurmrestd request and one
slurmctld RPC each; Slurm's kill-jobs request (``DELETE jobs/``) cancels a list in one. So a
cancel asked while another is on its way waits for it and goes with the others asked meanwhile, in
one call: a lone cancel is sent at once, as before (no added wait), and under load the calls
batch themselves. Each caller still hears its own job's outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from slurm_bridge.slurm.errors import SlurmError

log = logging.getLogger(__name__)
# The most jobs one call cancels (a request body of a few kB).
MAX_BATCH = 500


class SlurmCancels(Protocol):
    async def cancel_job(self, job_id: int) -> None: ...
    async def cancel_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmError]: ...


class Cancels:
    """Batches concurrent cancels (module docstring); one per Slurm client."""

    def __init__(self, slurm: SlurmCancels) -> None:
        self.slurm = slurm
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._sending: asyncio.Task[None] | None = None
        self.calls = 0  # for /stats: calls made, and jobs cancelled through them
        self.jobs = 0

    async def cancel(self, job_id: int) -> None:
        """Cancel ``job_id`` (with any others asked meanwhile); raises Slurm's error for this job."""
        future = self._waiting.get(job_id)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._waiting[job_id] = future
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send(), name="slurm-cancels")
        await asyncio.shield(future)

    async def _send(self) -> None:
        while self._waiting:
            batch = dict(list(self._waiting.items())[:MAX_BATCH])
            for job_id in batch:
                del self._waiting[job_id]
            self.calls += 1
            self.jobs += len(batch)
            try:
                if len(batch) == 1:
                    (job_id,) = batch
                    await self.slurm.cancel_job(job_id)
                    failed: dict[int, SlurmError] = {}
                else:
                    failed = await self.slurm.cancel_jobs(list(batch))
            except Exception as e:  # the call failed as a whole: every caller hears it
                for future in batch.values():
                    if not future.done():
                        future.set_exception(e)
                continue
            for job_id, future in batch.items():
                if future.done():
                    continue
                if job_id in failed:
                    future.set_exception(failed[job_id])
                else:
                    future.set_result(None)
