"""The shell's side of a changed spec (decisions/specupdate.py decides): the inputs it is decided
on, read only when the spec changed (what the job asks Slurm for: one GET; the partitions'
limits: slurmjobs/partitions.py), the update sent, and the Event on the workload whose annotations were changed."""

from __future__ import annotations

import logging
from typing import Protocol

from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import KubeEvents
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.placeholderjobs.slurmjobs.partitions import Partitions
from slurm_bridge.slurm.errors import ESLURM_JOB_NOT_PENDING, SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobRequest, JobSettings, PartitionLimits

log = logging.getLogger(__name__)


class SlurmJobWrites(Protocol):
    """The Slurm calls the shell changes a job with, and the reads an update is decided on."""

    async def update_job(
        self,
        job_id: int,
        req: JobRequest,
        *,
        name: str | None = None,
        unlimited_time: bool = False,
        as_user: str | None = None,
    ) -> None: ...
    async def cancel_job(self, job_id: int) -> None: ...
    async def set_priority(self, job_id: int, priority: int) -> None: ...
    async def job_settings(self, job_id: int) -> JobSettings | None: ...
    async def partition_limits(self) -> list[PartitionLimits]: ...


class JobUpdates:
    def __init__(self, kube: KubeEvents, slurm: SlurmJobWrites, partitions: Partitions | None = None) -> None:
        self.kube, self.slurm = kube, slurm
        self.partitions = partitions if partitions is not None else Partitions(slurm)

    async def inputs(
        self, phj: PlaceholderJob, slurm: SlurmSide, held: pl.Held | None = None
    ) -> tuple[JobSettings | None, dict[str, PartitionLimits] | None]:
        """The job's settings and the partitions' limits when the spec changed (generation past
        observedGeneration, also as a ``held`` status not written yet says it) and the job waits or
        runs; else nothing is read."""
        gen, job = phj.metadata.generation, slurm.job
        observed = phj.status.observed_generation
        if held is not None and held.status.observed_generation is not None:
            observed = held.status.observed_generation  # the submit's status, not written yet
        if not gen or observed == gen or job is None or phj.is_composite() or phj.deleted:
            return None, None
        if not (job.is_pending or job.is_running):
            return None, None
        settings = await self.slurm.job_settings(job.job_id)
        listed = [p for p in (phj.spec.slurm.partition or "").split(",") if p]
        return settings, await self.partitions.limits(listed)

    async def send(self, action: pl.UpdateJob) -> pl.Updated | pl.UpdateRefused:
        """Send the update; Slurm's refusal is an outcome, an outage is raised (retried with backoff:
        the generation is decided again, and an update sent twice changes nothing more)."""
        try:
            # A tenant's update goes as the tenant; a priority in it was delegated by the policy
            # (which refuses it otherwise): the bridge sets it after, with its token (only it).
            delegated = action.request.priority if action.as_user is not None else None
            await self.slurm.update_job(
                action.job_id,
                action.request if delegated is None else action.request.model_copy(update={"priority": None}),
                name=action.name,
                unlimited_time=action.unlimited_time,
                as_user=action.as_user,
            )
            if delegated is not None:
                await self.slurm.set_priority(action.job_id, delegated)
        except SlurmUnavailable:
            raise
        except SlurmError as e:
            said = "; ".join(e.error_texts) or e.message
            log.info("Slurm refused the update of job %d: %s", action.job_id, e)
            return pl.UpdateRefused(action.generation, said, ESLURM_JOB_NOT_PENDING in e.error_numbers)
        log.info("updated Slurm job %d to spec generation %d", action.job_id, action.generation)
        return pl.Updated(action.generation)

    async def tell_group(self, phj: PlaceholderJob, reason: str, message: str, warning: bool) -> None:
        """An Event on the workload ``spec.group`` names (not a Pod: that one hears as a member)."""
        group = phj.spec.group
        if group is None or group.kind in (None, "Pod") or not group.name or not group.uid:
            return
        source = {
            "apiVersion": group.api_version or "v1",
            "kind": group.kind,
            "metadata": {"name": group.name, "namespace": phj.metadata.namespace, "uid": group.uid},
        }
        await self.kube.event(source, reason, message, warning=warning)
