"""The shell's handoff writes (docs/colocation.md, "The handoff"): a job the bridge releases itself
is marked released first (its admin_comment), so the project's EpilogSlurmctld holds nothing for
it; a preempted job's pods are ended with an Event naming the likely preemptor. I/O, applied by
:mod:`.phjsync`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Protocol

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import KubeError
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import KubeEvents
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.places import Places
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import JobOutcome, notice_comment, released_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.podwrites import MemberPods
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.rules import resume
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo, JobSettings

log = logging.getLogger(__name__)
# The likely preemptor of a job, in words (operator/handoff/preemptor.py; a bounded read of Slurm).
DescribePreemptor = Callable[[JobInfo], Awaitable[str]]


class SlurmReleaseMarks(Protocol):
    async def mark_released(self, job_id: int, admin_comment: str, comment: str | None = None) -> None: ...


class SlurmJobSettings(Protocol):
    async def job_settings(self, job_id: int) -> JobSettings | None: ...


class HandoffWrites:
    def __init__(
        self,
        kube: KubeEvents,
        slurm: SlurmReleaseMarks,
        poller: SlurmPoller,
        member_pods: MemberPods,
        policy: PolicyHolder,
        describe_preemptor: DescribePreemptor | None = None,
        places: Places | None = None,
        settings: SlurmJobSettings | None = None,
    ) -> None:
        self.kube, self.slurm, self.poller, self.member_pods = kube, slurm, poller, member_pods
        self.policy = policy
        self.describe_preemptor = describe_preemptor
        # Preempted work comes back at its place (slurm_bridge/rules/resume.py): where places are
        # kept, and how the preempted job's priority is read (one GET, at the preemption only).
        self.places = places
        self.settings = settings

    async def mark_released(self, job_id: int, ref: PhjRef, outcome: JobOutcome | None = None) -> None:
        """Mark each live part of the job released (its admin_comment, which only an operator
        can set) before the bridge's own cancel (its pods' containers stopped, or never started),
        so the EpilogSlurmctld holds nothing: one call a part (a heterogeneous job's components
        each have their own epilog). A pending part too: Slurm may start it between the view and
        the cancel, and its epilog would then hold whole nodes for a pod that never ran (seen: a
        wide pod's job allocated 7 ms before its cancel held two nodes for maxGracePeriodSeconds).
        ``outcome``: how the pods ended, for ``sacct -o AdminComment`` (Slurm records CANCELLED).
        Nothing where slurm.conf has no EpilogSlurmctld but slurmctld's hook to the operator and
        there is no outcome to record. A job not read yet (or whose admin_comment is not the
        bridge's mark) gets ``ref``'s, so it stays the PlaceholderJob's. The same update sets its
        comment so that slurmctld's notify hook tells the operator nothing of its end (the bridge
        ends it: the notice would be news to no one)."""
        conf = self.policy.current.conf
        if outcome is None and conf is not None and not conf.handoff_epilogs:
            return
        snap = self.poller.snapshot
        job = snap.by_id.get(job_id) if snap is not None else None
        quiet = notice_comment(names.NOTIFY_NONE)
        if job is None:
            await self.slurm.mark_released(job_id, released_comment("", ref, outcome), quiet)
            return
        parts = snap.components(job_id) if snap is not None and job.het_job_id == job_id else (job,)
        for part in parts or (job,):
            if part.is_finished:
                continue
            try:
                await self.slurm.mark_released(part.job_id, released_comment(part.admin_comment, ref, outcome), quiet)
            except SlurmError as e:
                if not part.is_pending:
                    raise  # a running part's cancel without the mark would hold its nodes: try again
                # Slurm checks a pending job's update against its request: one that can never run
                # is refused (2015 "Requested partition configuration not available now", seen).
                # Its cancel must not wait for the mark: should Slurm start it first after all, the
                # epilog holds its nodes until the handoff loop releases them (fail safe).
                log.info("marking pending Slurm job %d released failed, cancelled without it: %s", part.job_id, e)

    async def end_preempted(
        self, phj: PlaceholderJob, action: pl.EndPreempted, members: Mapping[str, Obj | None]
    ) -> None:
        """Slurm preempts the job: name the likely preemptor (best effort: Slurm's answers name
        none), then post SlurmJobPreempted on the PlaceholderJob and end the pods gracefully with it."""
        message, by = action.message, ""
        if self.describe_preemptor is not None:
            try:
                by = await self.describe_preemptor(action.job)
                message = f"{message}; {by}"
            except SlurmError as e:
                log.info("looking for the preemptor of Slurm job %d failed: %s", action.job.job_id, e)
        await self.kube.event(phj.raw, names.REASON_SLURM_JOB_PREEMPTED, message, warning=True)
        # The place is kept before the pods end: their replacements may come at once.
        kept = await self._keep_place(phj, action, members, by)
        for name in action.pods:
            if (pod := members.get(name)) is not None:
                await self.member_pods.end(pod, names.REASON_SLURM_JOB_PREEMPTED, message, disrupted=kept.disrupted)

    async def _keep_place(
        self, phj: PlaceholderJob, action: pl.EndPreempted, members: Mapping[str, Obj | None], by: str
    ) -> resume.AtPreemption:
        """Whether the workload's replacement gets this job's place (slurm_bridge/rules/resume.py),
        the place recorded where it is, and said on the PlaceholderJob either way."""
        job, group = action.job, phj.spec.group
        current = self.policy.current
        qos = current.qos.get(job.qos) if job.qos else None
        mode = resume.preempt_mode(
            qos.mode if qos is not None else (), current.conf.preempt_mode if current.conf else ()
        )
        if group is None:
            workload = None
        elif phj.is_gang() or phj.is_composite():
            workload = resume.workload_key(phj.metadata.namespace, group.kind or "", group.uid or "", phj.metadata.name)
        else:
            pod = next((p for p in members.values() if p is not None), None)
            slot = resume.single_slot(pod) if pod is not None else ""
            workload = resume.workload_key(phj.metadata.namespace, group.kind or "", group.uid or "", slot)
        before = resume.decode_place((phj.metadata.annotations or {}).get(names.ANN_RESUMES))
        policy = self.places.policy if self.places is not None else resume.ResumePolicy(keep_place=False)
        priority = None
        if mode == "REQUEUE" and workload is not None and policy.keep_place and self.settings is not None:
            try:
                settings = await self.settings.job_settings(job.het_leader)
                priority = settings.priority if settings is not None else None
            except SlurmError as e:
                log.info("reading the priority of preempted Slurm job %d failed: %s", job.het_leader, e)
        decided = resume.at_preemption(
            policy,
            workload,
            mode,
            job_id=job.het_leader,
            priority=priority,
            preempted_at=job.preempt_time or datetime.now(UTC),
            by=by,
            returns=before.next_returns if before is not None else 0,
        )
        if decided.place is not None and self.places is not None:
            try:
                await self.places.record(decided.place)
            except KubeError as e:
                log.warning("keeping the place of preempted Slurm job %d failed: %s", job.het_leader, e)
                await self.kube.event(
                    phj.raw,
                    names.REASON_PLACE_NOT_KEPT,
                    f"the place could not be kept ({e}): the replacement queues anew",
                    warning=True,
                )
                return decided
        reason = names.REASON_PLACE_KEPT if decided.place is not None else names.REASON_PLACE_NOT_KEPT
        await self.kube.event(phj.raw, reason, f"Slurm job {job.het_leader} preempted: {decided.message}")
        return decided
