"""The shell's handoff writes (docs/colocation.md, "The handoff"): a job the bridge releases itself
is marked released first (its admin_comment), so the project's EpilogSlurmctld holds nothing for
it; a preempted job's pods are ended with an Event naming the likely preemptor. I/O, applied by
:mod:`.phjsync`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from slurm_bridge import names
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.pods import Obj
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import JobOutcome, notice_comment, released_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.podwrites import MemberPods
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo

log = logging.getLogger(__name__)
# The likely preemptor of a job, in words (operator/handoff/preemptor.py; a bounded read of Slurm).
DescribePreemptor = Callable[[JobInfo], Awaitable[str]]


class SlurmReleaseMarks(Protocol):
    async def mark_released(self, job_id: int, admin_comment: str, comment: str | None = None) -> None: ...


class HandoffWrites:
    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmReleaseMarks,
        poller: SlurmPoller,
        member_pods: MemberPods,
        policy: PolicyHolder,
        describe_preemptor: DescribePreemptor | None = None,
    ) -> None:
        self.kube, self.slurm, self.poller, self.member_pods = kube, slurm, poller, member_pods
        self.policy = policy
        self.describe_preemptor = describe_preemptor

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
        message = action.message
        if self.describe_preemptor is not None:
            try:
                message = f"{message}; {await self.describe_preemptor(action.job)}"
            except SlurmError as e:
                log.info("looking for the preemptor of Slurm job %d failed: %s", action.job.job_id, e)
        await self.kube.event(phj.raw, names.REASON_SLURM_JOB_PREEMPTED, message, warning=True)
        for name in action.pods:
            if (pod := members.get(name)) is not None:
                await self.member_pods.end(pod, names.REASON_SLURM_JOB_PREEMPTED, message)
