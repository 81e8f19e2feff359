"""The I/O shell around :mod:`.lifecycle`: PlaceholderJob <-> Slurm job.

``PlaceholderJobs.reconcile`` gathers the inputs (the cached PlaceholderJob, the poller's view of
its job, the member pods), asks ``lifecycle.decide`` and applies the plan's actions in order.
Every action is idempotent and every piece of state it needs after a restart is in the
PlaceholderJob's status or in Slurm, so a crash between two actions is decided again from there:
- the job id goes into status right after the submit; node assignments go into status before
  any pod is touched (except a single pod allocated at its submit: released first, its status
  written once it is bound; the job is adopted by its uid after a crash, see ``_unwritten``);
- a pod is only considered deleted after a direct GET says so, or the pod watch delivered its
  deletion (``ConfirmMembers``);
- a gang's PlaceholderJob is fenced (status reason ``Submitting``, written with a
  resourceVersion test) before its job is submitted, so no member joins a job sized without it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from slurm_bridge import names
from slurm_bridge.core import logs, metrics, objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.cache import TenantCache
from slurm_bridge.kube.client import Conflict, KubeError, NotFound, phj_path, pod_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobStatus
from slurm_bridge.kube.seams import ShellKube
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import placement
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Handoff
from slurm_bridge.operator.placeholderjobs.decisions.vanished import record_value
from slurm_bridge.operator.placeholderjobs.places import Places
from slurm_bridge.operator.placeholderjobs.slurmjobs.cancels import Cancels, SlurmCancels
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import JobOutcome, default_job_name, encode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.placeholderjobs.slurmjobs.partitions import Partitions
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import PartitionRefusesTenant, Placer, SlurmSubmits
from slurm_bridge.operator.placeholderjobs.sync.devices import DeviceBinder, SlurmJobDevices
from slurm_bridge.operator.placeholderjobs.sync.groupconditions import CompositeReporter, PodGroupReporter
from slurm_bridge.operator.placeholderjobs.sync.handoffwrites import DescribePreemptor, HandoffWrites, SlurmReleaseMarks
from slurm_bridge.operator.placeholderjobs.sync.jobupdates import JobUpdates, SlurmJobWrites
from slurm_bridge.operator.placeholderjobs.sync.podwrites import MemberPods
from slurm_bridge.operator.placeholderjobs.sync.steps import Again, Done
from slurm_bridge.operator.runtime import starts
from slurm_bridge.operator.runtime.departures import Departures
from slurm_bridge.operator.runtime.store import Key, ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.operator.views.slurmnodes import NodeView
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.rules import resume, tenancy
from slurm_bridge.rules.handoff import changed_drain_reason, drain_of, job_handoff_scope
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, JobRequest

log = logging.getLogger(__name__)
__all__ = ["DescribePreemptor", "PlaceholderJobs"]
# A reconcile decides at most this often: once, again after a GET of missing members, after a
# submit, after a release, after an update (each at most once).
MAX_DECISIONS = 7


def members_of(phj: PlaceholderJob, pods: ObjectStore) -> dict[str, Obj | None]:
    """Each member's pod from the cache; None when missing or another incarnation of the name."""
    ns = phj.metadata.namespace
    members: dict[str, Obj | None] = {}
    for name in phj.spec.pods:
        pod = pods.get((ns, name))
        members[name] = pod if pod is not None and phj.is_member(pod) else None
    return members


def departed_of(
    phj: PlaceholderJob,
    members: Mapping[str, Obj | None],
    departures: Departures,
    margin: int,
    runs_native: Callable[[str], bool | None] = lambda _: None,
) -> dict[str, datetime | None]:
    """What the pod watch saw of the members missing from the cache (:mod:`.decisions.vanished`):
    until when each one's containers may run (None: they had stopped, or they ran on a node where
    no native work runs: ``runs_native`` False, Slurm state EXTERNAL; None there: not known, held)."""
    ns = phj.metadata.namespace
    assigned = {a.pod: a.node for a in phj.status.assignments or []}
    out: dict[str, datetime | None] = {}
    for name, pod in members.items():
        if pod is not None:
            continue
        d = departures.of(ns, name)
        if d is not None and phj.is_member(d.pod):
            node = objects.annotations(d.pod).get(names.ANN_SLURM_NODE) or d.node
            out[name] = None if node and runs_native(node) is False else d.runs_until(margin)
        elif name in assigned and runs_native(assigned[name]) is False:
            out[name] = None  # gone unseen, from a node where nothing native runs
    return out


class ShellSlurm(SlurmSubmits, SlurmJobDevices, SlurmJobWrites, SlurmReleaseMarks, SlurmCancels, Protocol):
    """Every Slurm call the shell makes: its own, the placer's and the device binder's."""


class PlaceholderJobs:
    """Gathers, decides (:func:`.lifecycle.decide`), applies."""

    def __init__(
        self,
        config: Config,
        kube: ShellKube,
        slurm: ShellSlurm,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        poller: SlurmPoller,
        tenants: TenantCache | None = None,
        policy: PolicyHolder | None = None,
        describe_preemptor: DescribePreemptor | None = None,
        *,
        nodes: NodeView,
        departures: Departures | None = None,
        places: Places | None = None,
    ) -> None:
        self.config, self.kube, self.slurm = config, kube, slurm
        self.departures = departures if departures is not None else Departures()
        # Slurm's nodes as the node controller knows them (its one reader and writer): which run
        # native work (a vanished pod's hold, decisions/vanished.py), the largest one's CPUs (an
        # exclusive job under a TenantPolicy's maxCPUs), where a new job may go (the submit's
        # placement) and the drains of DrainNodes, which the handoff loop lifts.
        self.nodes = nodes
        self.pods, self.phjs, self.poller = pods, phjs, poller
        self.tenants = tenants
        # Slurm's preemption and time-limit settings (kept current by operator/slurmsettings).
        self.policy = policy or PolicyHolder()
        self.partitions = Partitions(slurm)  # read for an update's checks and a tenant's queued job's
        self.placer = Placer(
            slurm, config.immediateAllocation, lambda r: self.policy.current.may_preempt(r), self.partitions
        )
        self.podgroups = PodGroupReporter(kube)
        self.composites = CompositeReporter(kube)
        self.devices = DeviceBinder(kube, slurm)
        self.member_pods = MemberPods(kube, pods, self.devices)
        # How to name a preempted job's likely preemptor, and where its place is kept (docs/colocation.md).
        self.handoff = HandoffWrites(
            kube, slurm, poller, self.member_pods, self.policy, describe_preemptor, places, slurm
        )
        self.updates, self.cancels = JobUpdates(kube, slurm, self.partitions), Cancels(slurm)
        # uids of deleted PlaceholderJobs already told to wait for their pods (one Event each)
        self._releasing: set[str] = set()
        # uid -> the status a plan held back (plan.Held), given to the next decision: in memory
        # only, a saving and never state (the job is adopted by its uid after a crash).
        self._unwritten: dict[str, pl.Held] = {}
        # uid -> what the waiting pods were last told about their pending job (Event
        # SlurmJobPending), and when: it only rate-limits those Events (lifecycle.pending), so a
        # restart costs at most one Event again. Dropped once the pods are released or at finalize.
        self._told: dict[str, lc.Told] = {}

    # ---- gather, decide, apply ------------------------------------------------------------------
    def observe(self, phj: PlaceholderJob) -> SlurmSide:
        """What the poller's view says about the PlaceholderJob's job (its one answer)."""
        return self.poller.side(phj.metadata.uid, phj.status.job_id)

    async def reconcile(self, key: Key) -> float | None:
        """Gather, decide, apply; decide again while a plan stops for an input only the shell gets
        (members read with a GET, the outcome of a submit or a release)."""
        phj = self.phjs.model(key)
        if phj is None:
            return None
        uid, ns = phj.metadata.uid, phj.metadata.namespace
        slurm = self.observe(phj)
        logs.bind(jobId=slurm.job_id)
        members = members_of(phj, self.pods) if slurm.synced else {}
        departed = departed_of(phj, members, self.departures, self.config.handoff.marginSeconds, self.nodes.runs_native)
        now = lc.Clock(time.monotonic())
        policy = self.tenancy_for(ns)
        settings, partitions = await self.updates.inputs(phj, slurm, self._unwritten.get(uid))
        situation = lc.Situation(
            phj,
            slurm,
            members,
            now,
            scheduler=self.config.schedulerName,
            tenancy=policy,
            settings=settings,
            partitions=partitions,
            bind_timeout=self.config.bindTimeoutSeconds,
            departed=departed,
        )
        step = Again(phj)
        for _ in range(MAX_DECISIONS):
            # what a round's actions change: the status written or held, what the pods were told
            situation = replace(
                situation,
                phj=step.phj,
                confirmed=step.confirmed,
                outcome=step.outcome,
                held=self._unwritten.get(uid),
                told=self._told.get(uid),
                handoff=Handoff.of_policy(
                    self.policy.current, self.config.handoff.marginSeconds, self.config.handoff.maxGracePeriodSeconds
                ),
            )
            plan = lc.decide(situation)
            applied = await self.apply(step.phj, plan, members, step.confirmed)
            if isinstance(applied, Done):
                if step.error is not None:
                    raise step.error  # Slurm unreachable: retried with the work queue's backoff
                return applied.requeue
            if applied.confirm:
                applied = replace(applied, confirmed=await self.confirmed_members(applied.phj, members))
            if isinstance(applied.outcome, pl.Placed):  # the job is in the view now, or known as made
                situation = replace(situation, slurm=self.observe(applied.phj), now=lc.Clock(time.monotonic()))
            step = replace(applied, confirmed=applied.confirmed or step.confirmed)
        raise RuntimeError(f"no decision settled after {MAX_DECISIONS} rounds for PlaceholderJob {key}")

    async def apply(
        self,
        phj: PlaceholderJob,
        plan: pl.Plan,
        members: Mapping[str, Obj | None],
        confirmed: Mapping[str, Obj | None] | None = None,
    ) -> Done | Again:
        """Apply the actions in order; an action may end the plan early (:class:`Done`, with its
        own re-queue), or for an input the next decision needs (:class:`Again`)."""
        uid = phj.metadata.uid
        if plan.held is None:
            self._unwritten.pop(uid, None)
        else:
            self._unwritten[uid] = plan.held
        both = {**members, **(confirmed or {})}
        for action in plan.actions:
            if isinstance(action, pl.ConfirmMembers):
                return Again(phj, confirm=True)
            phj, stop = await self._apply_one(phj, action, both)
            if stop is not None:
                return stop
        return Done(plan.requeue)

    async def _apply_one(
        self, phj: PlaceholderJob, action: pl.Action, members: Mapping[str, Obj | None]
    ) -> tuple[PlaceholderJob, Done | Again | None]:
        """The PlaceholderJob after the action, and how the plan ends when it ends here."""
        match action:
            case pl.AddFinalizer():
                return await self._add_finalizer(phj), None
            case pl.WriteStatus(status=status):
                written = await self.patch_status(phj, status.dump())
                if status.phase == names.PHASE_RUNNING and (job_id := status.job_id or phj.status.job_id):
                    starts.mark(job_id, "status_running")
                return written, None
            case pl.Event(reason=reason, message=message, warning=warning):
                await self.kube.event(phj.raw, reason, message, warning=warning)
            case pl.TellPods(pods=pods, reason=reason, message=message, warning=warning):
                for name in pods:
                    if (pod := members.get(name)) is not None:
                        await self.kube.event(pod, reason, message, warning=warning)
            case pl.ReportPending():
                await self.report_pending(phj, action, members)
            case pl.Cancel(job_id=job_id, released=released, outcome=ended):
                await self.cancel(job_id, self._ref(phj), released=released, outcome=ended)
            case pl.EndPods(pods=pods, reason=reason, message=message):
                for name in pods:
                    if (pod := members.get(name)) is not None:
                        await self.member_pods.end(pod, reason, message)
            case pl.EndPreempted() | pl.DrainNodes():
                await self._handoff_step(phj, action, members)
            case pl.NoteWaiting(pods=pods, job_id=job_id):
                await self._note_waiting(phj, pods, job_id)
            case pl.Fence(status=status):
                fenced = await self._fence(phj, status)
                return (phj, Done(0.05)) if fenced is None else (fenced, None)  # a member joined: size again
            case pl.Submit():
                return phj, await self._submit(phj, action, members)
            case pl.SubmitFailed(maybe_applied=maybe_applied):
                self.poller.submit_failed(phj.metadata.uid, maybe_applied=maybe_applied)
            case pl.UpdateJob():
                return phj, Again(phj, outcome=await self.updates.send(action))
            case pl.TellGroup(reason=reason, message=message, warning=warning):
                await self.updates.tell_group(phj, reason, message, warning)
            case pl.Release(job_id=job_id, pods=pods, announce=announce, het=het):
                self._told.pop(phj.metadata.uid, None)  # the wait is over
                outcome = await self.member_pods.release(phj, job_id, pods, members, announce, het)
                if outcome is not None:
                    return phj, Again(phj, outcome=outcome)
                starts.mark(job_id, "released")
            case pl.ReportPodGroup(scheduled=scheduled, reason=reason, message=message):
                await self.podgroups.report(phj.raw, scheduled, reason, message)
                await self.composites.report(phj.raw, scheduled, reason, message)
            case pl.RecordVanished(until=until, message=message):
                return await self._record_vanished(phj, dict(until), message), None
            case pl.RequestFullList():
                self.poller.poll_soon(full=True)
            case pl.ForgetUncertain():
                self.poller.forget_uncertain(phj.metadata.uid)
            case pl.Finalize():
                return await self._finalize(phj), None
        return phj, None

    def tenancy_for(self, namespace: str) -> lc.Tenancy | None:
        """The namespace's policy verdict, asked by ``decide`` only right before a submit or an
        update (the policy as it is at that moment). None without a tenant cache."""
        cache = self.tenants
        if cache is None:
            return None
        mode = self.config.tenancy

        def verdict(request: JobRequest) -> tenancy.Verdict:
            if not cache.synced:
                return tenancy.Verdict(request, waiting=cache.problem)
            return tenancy.verdict(
                cache.index().match(namespace),
                namespace,
                request,
                mode,
                untenanted_fields=self.config.untenantedOperatorFields,
                node_cpus=self.nodes.largest_cpus,
            )

        return verdict

    # ---- submit -----------------------------------------------------------------------------------
    async def _submit(self, phj: PlaceholderJob, action: pl.Submit, members: Mapping[str, Obj | None]) -> Again:
        """Place the job and read it back; the next decision takes it from there (the outcome).

        The job's admin_comment tells the handoff's EpilogSlurmctld how to hold its nodes should
        Slurm end it under its pods (its scope; slurm_bridge/rules/handoff.py)."""
        meta, request = phj.metadata, action.request
        ref = self._ref(phj)
        name = request.job_name or default_job_name(meta.namespace, meta.name)
        pods = [p for n in action.present if (p := members.get(n)) is not None]
        exclusive = any(r.exclusive or r.mcs_label for r in action.components)
        scope_of = request.model_copy(update={"exclusive": True}) if exclusive else request
        scope = job_handoff_scope(scope_of, pods)
        sets = self._node_sets()
        try:
            sent = await self._placement(action, sets)
        except SlurmUnavailable as e:  # its partition unread: nothing is sent, the submit tried again
            return Again(phj, outcome=pl.Unavailable(False), error=e)
        if isinstance(sent, placement.Refusal):  # nothing reaches Slurm
            return Again(phj, outcome=pl.Refused(sent.words, False, action.present))
        # Preempted work comes back at its place: the preempted job's priority, set by the bridge
        # (slurm_bridge/rules/resume.py; the place was taken when this PlaceholderJob was made).
        place = resume.decode_place((meta.annotations or {}).get(names.ANN_RESUMES))
        if place is not None:
            sent = replace(
                sent,
                request=resume.at_place(sent.request, place),
                components=tuple(resume.at_place(c, place) for c in sent.components),
            )
        try:
            job_id, job = await self._place(sent, ref, name, scope, place.job_id if place is not None else None)
        except PartitionRefusesTenant as e:  # the bridge's own check: nothing was sent, and never will be
            final = names.REASON_PARTITION_REFUSES_TENANT
            return Again(phj, outcome=pl.Refused(f"not submitted: {e}", False, action.present, final=final))
        except SlurmUnavailable as e:
            # The job may exist: a full list (it finds the job by admin_comment) must say so
            # before anything is submitted again.
            return Again(phj, outcome=pl.Unavailable(e.maybe_applied), error=e)
        except SlurmError as e:
            said = f"Slurm refused the job: {e}{placement.left_out(action.request, sent.request, sets)}"
            return Again(phj, outcome=pl.Refused(said, e.is_association_refusal, action.present))
        snap = self.poller.snapshot
        parts = snap.components(job_id) if action.components and snap is not None else ()
        log.info("submitted Slurm job %d for %s/%s", job_id, meta.namespace, meta.name)
        if place is not None:
            await self.kube.event(
                phj.raw, names.REASON_RESUMED_AT_PLACE, f"Slurm job {job_id} {await self._resumed(place)}"
            )
        return Again(phj, outcome=pl.Placed(job_id, job, request, action.components, parts))

    def _node_sets(self) -> placement.NodeSets:
        """The nodes a new job is submitted without, as the node controller knows them now."""
        nodes = self.nodes
        return placement.NodeSets(
            nodes.excluded_unfit_nodes(), nodes.mig_slurm_nodes(), nodes.device_mismatch_slurm_nodes()
        )

    async def _placement(self, action: pl.Submit, sets: placement.NodeSets) -> pl.Submit | placement.Refusal:
        """The submit as sent, or why nothing is (:func:`.decisions.placement.decide`). Reads each
        partition a request placed by a topology names once, for such submits only; raises
        SlurmUnavailable when one cannot be read."""
        placed = placement.placed_by_topology(action)
        nodes = self.nodes.listed_nodes() if placed else None
        topologies: dict[str, str | None] = {}
        if nodes is not None:
            try:
                for partition in placement.partitions_to_read(placed):
                    topologies[partition] = await self.nodes.partition_topology(partition)
            except SlurmUnavailable:
                raise
            except SlurmError as e:
                return placement.partition_unread(str(e))
        return placement.decide(action, sets, nodes, topologies)

    async def _resumed(self, place: resume.Place) -> str:
        """The words of a resumed job's Event; its place is used, so it is dropped (best effort:
        one left over expires with the window)."""
        places = self.handoff.places
        if places is None:
            return resume.resumed_message(place, resume.ResumePolicy())
        try:
            await places.drop(place)
        except KubeError as e:
            log.info("dropping the used place of Slurm job %d failed (it expires): %s", place.job_id, e)
        return resume.resumed_message(place, places.policy)

    async def _place(
        self, action: pl.Submit, ref: PhjRef, name: str, scope: str, resumes: int | None = None
    ) -> tuple[int, JobInfo | None]:
        """Place the job, note it as made, read it back. A job allocated as a tenant that does
        not run as the request says (``Placer.verify``) is cancelled before anything uses it and
        placed once more (queued then). ``resumes``: the preempted job whose place it takes, named
        in its admin_comment (``sacct`` shows the link)."""
        comment = encode_admin_comment(ref, handoff=scope, resumes=resumes)
        for _ in range(2):
            if action.components:  # a CompositePodGroup: one heterogeneous job, always queued
                job_id = await self.placer.place_het(list(action.components), name, comment)
            else:
                job_id = await self.placer.place(action.request, name, comment)
            self.poller.submitted(ref.uid, job_id)
            metrics.job_submitted()
            logs.bind(jobId=job_id)
            if self.placer.was_queued(job_id) and lc.QUEUED_QUIET_SECONDS > 0:
                # Nothing is said about a queued job for a while (lifecycle.after_submit): it is read
                # once slurmctld's hook says it started (the next poll, without it), not now.
                self.poller.expect(job_id, ref)
                return job_id, None
            job = await self.poller.refresh(job_id, ref, het=bool(action.components))
            if self.placer.verify(action.request, job_id, job):
                break
            await self.cancel(job_id, ref)
        return job_id, job

    async def _fence(self, phj: PlaceholderJob, status: PlaceholderJobStatus) -> PlaceholderJob | None:
        """Mark a gang's PlaceholderJob as submitting, only if its spec is still the one read.

        Members join with the same resourceVersion test and treat a fenced PlaceholderJob as
        submitted, so the job is never sized without a member that joined meanwhile. None: the
        object changed (it is read again).
        """
        meta = phj.metadata
        path = phj_path(meta.namespace, meta.name)
        fields = status.dump()
        ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version}]
        if phj.raw.get("status"):
            ops += [{"op": "add", "path": f"/status/{k}", "value": v} for k, v in fields.items()]
        else:
            ops.append({"op": "add", "path": "/status", "value": fields})
        try:
            updated = await self.kube.patch(f"{path}/status", ops, "json")
        except KubeError as e:
            if not isinstance(e, Conflict) and e.status != 422:
                raise
            fresh = await self.kube.get(path)
            if fresh is not None:
                self.phjs.upsert(fresh)
            return None
        return self._stored(updated)

    # ---- pods -----------------------------------------------------------------------------------
    async def report_pending(
        self, phj: PlaceholderJob, report: pl.ReportPending, members: Mapping[str, Obj | None]
    ) -> None:
        """Event SlurmJobPending on the PlaceholderJob and each waiting pod; noted for the rate limit."""
        uid = phj.metadata.uid
        before = self._told.get(uid)
        reasons = (before.reasons if before is not None else frozenset()) | {report.reason}
        self._told[uid] = lc.Told(time.monotonic(), report.reason, reasons)
        await self.kube.event(phj.raw, names.EVENT_SLURM_JOB_PENDING, report.message)
        for name in report.pods:
            pod = members.get(name)
            if pod is not None:
                await self.kube.event(pod, names.EVENT_SLURM_JOB_PENDING, report.message)

    async def confirmed_members(self, phj: PlaceholderJob, members: Mapping[str, Obj | None]) -> dict[str, Obj | None]:
        """Members, with those missing from the cache asked for: a watch may not have caught up.
        A member whose deletion the pod watch delivered (its departure, this very pod) is gone:
        that is no cold cache, and its GET would answer 404 (one read a pod's end saved)."""
        ns = phj.metadata.namespace
        confirmed = dict(members)
        for name, pod in members.items():
            if pod is None:
                departed = self.departures.of(ns, name)
                if departed is not None and phj.is_member(departed.pod):
                    continue
                live = await self.kube.get(pod_path(ns, name))
                if live is None or not phj.is_member(live):
                    continue
                if live.get("spec", {}).get("schedulerName") == self.config.schedulerName:
                    self.pods.upsert(live)
                    confirmed[name] = live
        return confirmed

    # ---- finalizer ------------------------------------------------------------------------------
    async def _note_waiting(self, phj: PlaceholderJob, pods: tuple[str, ...], job_id: int | None) -> None:
        """Say once what a deleted PlaceholderJob's job waits for."""
        meta = phj.metadata
        if meta.uid in self._releasing:
            return
        self._releasing.add(meta.uid)
        job = f"Slurm job {job_id}" if job_id is not None else "its Slurm job"
        waiting = ", ".join(pods)
        log.info("%s/%s deleted: %s is kept until pods %s are gone", meta.namespace, meta.name, job, waiting)
        await self.kube.event(
            phj.raw,
            names.REASON_WAITING_FOR_PODS,
            f"PlaceholderJob deleted: {job} is released once pods {waiting} are gone "
            "(a terminating pod still holds its node)",
        )

    async def _finalize(self, phj: PlaceholderJob) -> PlaceholderJob:
        """Remove the finalizer, and the PlaceholderJob from the store (its resourceVersion kept
        as a tombstone): a reconcile before the DELETED event then finds nothing and sends no
        second PATCH (bench/log, "A wasted write found"). Should another finalizer keep
        the object, its next change brings it back, and it is finalized again without a PATCH."""
        meta = phj.metadata
        finalizers = meta.finalizers or []
        if names.FINALIZER_PLACEHOLDER_JOB in finalizers:
            idx = finalizers.index(names.FINALIZER_PLACEHOLDER_JOB)
            with contextlib.suppress(NotFound):
                removed = await self.kube.patch(
                    phj_path(meta.namespace, meta.name),
                    [
                        {"op": "test", "path": f"/metadata/finalizers/{idx}", "value": names.FINALIZER_PLACEHOLDER_JOB},
                        {"op": "remove", "path": f"/metadata/finalizers/{idx}"},
                    ],
                    "json",
                )
                self.phjs.delete(removed)  # gone for this controller, whatever else holds it
        self.poller.forget(meta.uid)
        self._releasing.discard(meta.uid)
        self._unwritten.pop(meta.uid, None)
        self._told.pop(meta.uid, None)
        self.podgroups.forget(phj.raw)
        self.composites.forget(phj.raw)
        return phj

    async def _add_finalizer(self, phj: PlaceholderJob) -> PlaceholderJob:
        meta = phj.metadata
        op = (
            {"op": "add", "path": "/metadata/finalizers/-", "value": names.FINALIZER_PLACEHOLDER_JOB}
            if meta.finalizers
            else {"op": "add", "path": "/metadata/finalizers", "value": [names.FINALIZER_PLACEHOLDER_JOB]}
        )
        return self._stored(await self.kube.patch(phj_path(meta.namespace, meta.name), [op], "json"))

    # ---- writes ---------------------------------------------------------------------------------
    def _ref(self, phj: PlaceholderJob) -> PhjRef:
        """The PlaceholderJob as its jobs' admin_comment names it."""
        meta = phj.metadata
        return PhjRef(self.config.bridgeId, meta.namespace, meta.name, meta.uid)

    async def _handoff_step(
        self, phj: PlaceholderJob, action: pl.EndPreempted | pl.DrainNodes, members: Mapping[str, Obj | None]
    ) -> None:
        """The handoff's steps of a plan: a preempted job's pods ended, or nodes drained."""
        if isinstance(action, pl.EndPreempted):
            # The gang's PodGroup or CompositePodGroup says it too, as kube-scheduler's preemption does.
            await self.podgroups.disrupted(phj.raw, action.message)
            await self.composites.disrupted(phj.raw, action.message)
            await self.handoff.end_preempted(phj, action, members)
        else:
            await self._drain(phj, action, members)

    async def _drain(self, phj: PlaceholderJob, action: pl.DrainNodes, members: Mapping[str, Obj | None]) -> None:
        """Drain each pod's Slurm node at once, naming the pod (the handoff's form, which the
        handoff loop lifts once the pod stopped); a node someone else drained keeps its reason."""
        ns, known, job_id = phj.metadata.namespace, self.nodes.listed_nodes() or {}, action.job_id
        for node, pod in action.pods:
            info = known.get(node)
            if info is not None and "DRAIN" in info.states and drain_of(info.reason, self.config.bridgeId) is None:
                continue  # drained by its owner: native work is kept off it already
            message = (
                f"Slurm job {job_id} no longer holds what pod {ns}/{pod} uses: Slurm node {node} is drained "
                "until the pod's containers stopped"
            )
            await self.nodes.set_drain(node, changed_drain_reason(self.config.bridgeId, ns, pod, job_id))
            log.warning("%s", message)
            if (member := members.get(pod)) is not None:
                await self.kube.event(member, names.REASON_HANDOFF_NODE_DRAINED, message, warning=True)

    async def _record_vanished(self, phj: PlaceholderJob, until: dict[str, datetime], message: str) -> PlaceholderJob:
        """Record the vanished members' times on the PlaceholderJob (they survive a restart), and
        say so once: a Warning Event (the job is held past its pods' end)."""
        meta = phj.metadata
        patch = {"metadata": {"annotations": {names.ANN_VANISHED_PODS: record_value(until)}}}
        try:
            written = self._stored(await self.kube.patch(phj_path(meta.namespace, meta.name), patch))
        except NotFound:
            return phj
        log.warning("%s/%s: %s", meta.namespace, meta.name, message)
        await self.kube.event(phj.raw, names.REASON_PODS_VANISHED, message, warning=True)
        return written

    async def cancel(
        self, job_id: int, ref: PhjRef, *, released: bool = True, outcome: JobOutcome | None = None
    ) -> None:
        """Cancel the job; ``released`` (no pod runs on it): marked released first (its
        admin_comment, ``ref``'s when Slurm's is not read yet), so nothing is held, with the pods'
        ``outcome``."""
        if released:
            await self.handoff.mark_released(job_id, ref, outcome)
        await self.cancels.cancel(job_id)
        metrics.job_cancelled()
        self.poller.assume_cancelled(job_id)
        log.info("cancelled Slurm job %d", job_id)

    async def patch_status(self, phj: PlaceholderJob, patch: Obj) -> PlaceholderJob:
        """Merge-patch status."""
        meta = phj.metadata
        try:
            updated = await self.kube.patch(f"{phj_path(meta.namespace, meta.name)}/status", {"status": patch})
        except NotFound:
            return phj
        return self._stored(updated)

    def _stored(self, answer: Obj) -> PlaceholderJob:
        """The API's answer to a write, stored and parsed (once: the store keeps the parse)."""
        self.phjs.upsert(answer)
        stored = self.phjs.get(ObjectStore.key_of(answer))
        if stored is not None and objects.uid(stored) == objects.uid(answer):
            return self.phjs.model_of(stored)
        return PlaceholderJob.parse(answer)  # deleted meanwhile
