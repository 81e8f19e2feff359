"""The I/O shell around :mod:`.lifecycle`: PlaceholderJob <-> Slurm job.

``PlaceholderJobs.reconcile`` gathers the inputs (the cached PlaceholderJob, the poller's view of
its job, the member pods), asks ``lifecycle.decide`` and applies the plan's actions in order.
Every action is idempotent and every piece of state it needs after a restart is in the
PlaceholderJob's status or in Slurm, so a crash between two actions is decided again from there:
- the job id goes into status right after the submit; node assignments go into status before
  any pod is touched (except a single pod allocated at its submit: released first, its status
  written once it is bound; the job is adopted by its uid after a crash, see ``_unwritten``);
- a pod is only considered deleted after a direct GET says so (``ConfirmMembers``);
- a gang's PlaceholderJob is fenced (status reason ``Submitting``, written with a
  resourceVersion test) before its job is submitted, so no member joins a job sized without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from slurm_bridge.operator.placeholderjobs import hetjob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs import plan as pl
from slurm_bridge.operator.placeholderjobs import status as st
from slurm_bridge.operator.placeholderjobs.compositeio import CompositeReporter
from slurm_bridge.operator.placeholderjobs.devices import DEVICES_RETRY_SECONDS, DeviceBinder, Prepared
from slurm_bridge.operator.placeholderjobs.jobref import PhjRef, default_job_name, encode_admin_comment
from slurm_bridge.operator.placeholderjobs.podgroups import PodGroupReporter
from slurm_bridge.operator.placeholderjobs.submit import Placer
from slurm_bridge.operator.runtime.poller import JobSnapshot, SlurmPoller
from slurm_bridge.operator.runtime.store import Key, ObjectStore

from slurm_bridge import logs, metrics, names, tenancy
from slurm_bridge.config import Config
from slurm_bridge.kube import Conflict, KubeClient, KubeError, NotFound, now_iso, phj_path, pod_path
from slurm_bridge.kubecache import TenantCache
from slurm_bridge.placeholderjob import PlaceholderJobStatus, spec_of, status_of
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, JobRequest

log = logging.getLogger(__name__)
Obj = st.Obj


def members_of(phj: Obj, pods: ObjectStore) -> dict[str, Obj | None]:
    """Each member's pod from the cache; None when missing or another incarnation of the name."""
    ns = phj["metadata"]["namespace"]
    members: dict[str, Obj | None] = {}
    for name in spec_of(phj).pods:
        pod = pods.get((ns, name))
        members[name] = pod if pod is not None and st.is_member(phj, pod) else None
    return members


def find_job(phj: Obj, snap: JobSnapshot) -> JobInfo | None:
    job_id = status_of(phj).job_id
    if job_id and job_id in snap.by_id:
        return snap.by_id[job_id]
    return snap.job_for_uid(phj["metadata"]["uid"])


class PlaceholderJobs:
    """Gathers, decides (:func:`.lifecycle.decide`), applies."""

    def __init__(
        self,
        config: Config,
        kube: KubeClient,
        slurm: SlurmClient,
        pods: ObjectStore,
        phjs: ObjectStore,
        poller: SlurmPoller,
        tenants: TenantCache | None = None,
    ) -> None:
        self.config, self.kube, self.slurm = config, kube, slurm
        self.pods, self.phjs, self.poller = pods, phjs, poller
        self.tenants = tenants
        self.placer = Placer(slurm, config.immediateAllocation)
        self.podgroups = PodGroupReporter(kube)
        self.composites = CompositeReporter(kube)
        self.devices = DeviceBinder(kube, slurm)
        # uids of deleted PlaceholderJobs already told to wait for their pods (one Event each)
        self._releasing: set[str] = set()
        # uid -> (status of a submit Slurm allocated at once, not written yet; write it by then):
        # written with the next status write (lifecycle.allocation). Lost in a crash, it is
        # rebuilt from Slurm (the job is adopted by its uid), so it is only a saving, not state.
        self._unwritten: dict[str, tuple[PlaceholderJobStatus, float]] = {}
        # uid -> what the waiting pods were last told about their pending job (Event
        # SlurmJobPending), and when: it only rate-limits those Events (lifecycle.pending), so a
        # restart costs at most one Event again. Dropped once the pods are released or at finalize.
        self._told: dict[str, lc.Told] = {}

    # ---- gather, decide, apply ------------------------------------------------------------------
    def observe(self, phj: Obj) -> lc.SlurmSide:
        """What the poller's view says about the PlaceholderJob's job."""
        period = self.config.pollPeriodSeconds
        snap = self.poller.snapshot
        if not self.poller.synced.is_set() or snap is None:
            return lc.SlurmSide(synced=False, poll_period=period)
        uid = phj["metadata"]["uid"]
        found = find_job(phj, snap)
        made = self.poller.made(uid)
        job_id = status_of(phj).job_id or (found.job_id if found else None)
        if job_id is None and made is not None:
            job_id = made[0]
        others = tuple(o.job_id for o in snap.by_uid.get(uid, []) if o.job_id != job_id and not o.is_finished)
        return lc.SlurmSide(
            poll_period=period,
            job_id=job_id,
            job=found if found is not None and found.job_id == job_id else snap.by_id.get(job_id or -1),
            found=found,
            others=others,
            components=snap.components(job_id) if job_id is not None else (),
            submitted_at=made[1] if made else None,
            taken_at=snap.taken_at,
            uncertain_since=self.poller.uncertain_since(uid),
            last_full_at=self.poller.last_full_at,
        )

    async def reconcile(self, key: Key) -> float | None:
        phj = self.phjs.get(key)
        if phj is None:
            return None
        phj, at_once = self._with_unwritten(phj)
        slurm = self.observe(phj)
        logs.bind(jobId=slurm.job_id)
        members = members_of(phj, self.pods) if slurm.synced else {}
        now = lc.Clock(time.monotonic())
        scheduler = self.config.schedulerName
        told = self._told.get(phj["metadata"]["uid"])
        policy = self.tenancy_for(phj["metadata"]["namespace"])
        plan = lc.decide(phj, slurm, members, now, scheduler=scheduler, at_once=at_once, told=told, tenancy=policy)
        applied = await self.apply(phj, plan, members)
        if not isinstance(applied, Confirm):
            return applied
        confirmed = await self.confirmed_members(applied.phj, members)
        plan = lc.decide(
            applied.phj, slurm, members, now, confirmed, scheduler=scheduler, at_once=at_once, told=told, tenancy=policy
        )
        result = await self.apply(applied.phj, plan, members, confirmed)
        assert not isinstance(result, Confirm)
        return result

    async def apply(
        self,
        phj: Obj,
        plan: pl.Plan,
        members: Mapping[str, Obj | None],
        confirmed: Mapping[str, Obj | None] | None = None,
    ) -> float | Confirm | None:
        """Apply the actions in order; an action may stop the plan with its own re-queue delay."""
        for action in plan.actions:
            if isinstance(action, pl.ConfirmMembers):
                return Confirm(phj)
            phj, stop = await self._apply_one(phj, action, {**members, **(confirmed or {})})
            if stop is not None:
                return None if stop < 0 else stop
        return plan.requeue

    async def _apply_one(
        self, phj: Obj, action: pl.Action, members: Mapping[str, Obj | None]
    ) -> tuple[Obj, float | None]:
        """The PlaceholderJob after the action, and a delay when the plan stops here (<0: no re-queue)."""
        match action:
            case pl.AddFinalizer():
                return await self._add_finalizer(phj), None
            case pl.WriteStatus(status=status):
                return await self.patch_status(phj, status.dump()), None
            case pl.Event(reason=reason, message=message, warning=warning):
                await self.kube.event(phj, reason, message, warning=warning)
            case pl.ReportPending():
                await self.report_pending(phj, action, members)
            case pl.Cancel(job_id=job_id):
                await self.cancel(job_id)
            case pl.EndPods(pods=pods, reason=reason, message=message):
                for name in pods:
                    pod = members.get(name)
                    if pod is not None:
                        await self.end_pod(pod, reason, message)
            case pl.NoteWaiting(pods=pods, job_id=job_id):
                await self._note_waiting(phj, pods, job_id)
            case pl.Fence():
                fenced = await self._fence(phj)
                return (phj, 0.05) if fenced is None else (fenced, None)  # a member joined: size again
            case pl.Submit():
                return phj, await self._submit(phj, action, members)
            case pl.UpdateJob(job_id=job_id, request=request):
                try:
                    await self.slurm.update_job(job_id, request)
                except SlurmUnavailable:
                    raise
                except SlurmError as e:
                    await self.kube.event(phj, "UpdateRejected", f"Slurm refused the job update: {e}", warning=True)
            case pl.Release(job_id=job_id, pods=pods, announce=announce, unless_released=unless_released, het=het):
                self._told.pop(phj["metadata"]["uid"], None)  # the wait is over
                outcome = await self._release(phj, job_id, pods, members, announce, het)
                if outcome == "refused":  # failed and cancelled: the terminal rows end the members
                    return phj, 0.0
                if outcome == "device-missing":
                    if unless_released is not None:
                        phj = await self.patch_status(phj, unless_released.dump())
                    return phj, DEVICES_RETRY_SECONDS
            case pl.ReportPodGroup(scheduled=scheduled, reason=reason, message=message):
                await self.podgroups.report(phj, scheduled, reason, message)
                await self.composites.report(phj, scheduled, reason, message)
            case pl.RequestFullList():
                self.poller.poll_soon(full=True)
            case pl.ForgetUncertain():
                self.poller.forget_uncertain(phj["metadata"]["uid"])
            case pl.Finalize():
                await self._finalize(phj)
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
            return tenancy.verdict(cache.index().match(namespace), namespace, request, mode)

        return verdict

    def _with_unwritten(self, phj: Obj) -> tuple[Obj, float | None]:
        """The PlaceholderJob as if its unwritten submit status were written, and until when it
        may stay unwritten (None: nothing unwritten)."""
        uid = phj["metadata"]["uid"]
        held = self._unwritten.get(uid)
        if held is None:
            return phj, None
        if status_of(phj).job_id is not None:  # written meanwhile (e.g. by a previous leader)
            del self._unwritten[uid]
            return phj, None
        submitted, until = held
        return {**phj, "status": (phj.get("status") or {}) | submitted.dump()}, until

    # ---- submit -----------------------------------------------------------------------------------
    async def _submit(self, phj: Obj, action: pl.Submit, members: Mapping[str, Obj | None]) -> float | None:
        """Place the job; its id goes into status at once (with the allocation if Slurm allocated)."""
        meta, request = phj["metadata"], action.request
        ref = PhjRef(self.config.bridgeId, meta["namespace"], meta["name"], meta["uid"])
        name = request.job_name or default_job_name(meta["namespace"], meta["name"])
        try:
            if action.components:  # a CompositePodGroup: one heterogeneous job, always queued
                job_id = await self.placer.place_het(list(action.components), name, encode_admin_comment(ref))
            else:
                job_id = await self.placer.place(request, name, encode_admin_comment(ref))
        except SlurmUnavailable as e:
            # The job may exist: a full list (it finds the job by admin_comment) must say so
            # before anything is submitted again.
            self.poller.submit_failed(meta["uid"], maybe_applied=e.maybe_applied)
            raise
        except SlurmError as e:
            message = f"Slurm refused the job: {e}"
            rejected = lc.rejected_status(phj, message, association=e.is_association_refusal)
            final = rejected.phase == names.PHASE_FAILED
            await self.patch_status(phj, rejected.dump())
            reason = names.REASON_SLURM_ASSOCIATION_REJECTED if final else "SubmitRejected"
            shown = rejected.message or message
            await self.kube.event(phj, reason, shown, warning=True)
            for pod_name in action.present:
                pod = members.get(pod_name)
                if pod is not None:
                    await self.kube.event(pod, "Slurm" + reason if not final else reason, shown, warning=True)
            if final:
                return -1.0  # the status write brings the PlaceholderJob back: its pods are ended
            return lc.SUBMIT_RETRY_SECONDS  # Slurm's limits may change (partition up, QOS raised)
        self.poller.submitted(meta["uid"], job_id)
        metrics.job_submitted()
        logs.bind(jobId=job_id)
        job = await self.poller.refresh(job_id, ref, het=bool(action.components))
        submitted = lc.submitted_status(phj, job_id, job, request, components=action.components)
        if action.components and self.poller.snapshot is not None:  # each component's own job id, at once
            parts: dict[int, JobInfo | None] = {c.het_job_offset: c for c in self.poller.snapshot.components(job_id)}
            parts.setdefault(0, job)
            spec_parts = spec_of(phj).components or []
            submitted.components = hetjob.component_status(spec_parts, [parts.get(i) for i in range(len(spec_parts))])
        log.info("submitted Slurm job %d for %s/%s", job_id, meta["namespace"], meta["name"])
        if job is not None and job.is_running and job.nodes and not action.components:
            # Allocated at once: the pods are released now and the submit's status is written
            # with the allocation's (a single pod's once it is bound: lifecycle.allocation). No
            # Event: the status says it, and the scheduler posts Scheduled on each pod (as for
            # any pod); Events are for what is unusual, such as waiting in Slurm's queue.
            now = time.monotonic()
            self._unwritten[meta["uid"]] = (submitted, now + lc.UNWRITTEN_SECONDS)
            phj, at_once = self._with_unwritten(phj)
            plan = lc.allocation(phj, members, job, scheduler=self.config.schedulerName, now=now, at_once=at_once)
            result = await self.apply(phj, plan, members)
            assert not isinstance(result, Confirm)
            return -1.0 if result is None else result
        await self.kube.event(phj, "Submitted", f"{submitted.message}: waiting in Slurm's queue")
        if job is not None and job.is_pending and job.reason:
            # The first wait, with Slurm's reason already known: the pods hear why at once (status
            # records the reason below, so the next decision does not tell it again).
            await self.report_pending(phj, lc.pending_report(job, members, datetime.now(UTC)), members)
        await self.patch_status(phj, submitted.dump())
        return -1.0

    async def _fence(self, phj: Obj) -> Obj | None:
        """Mark a gang's PlaceholderJob as submitting, only if its spec is still the one read.

        Members join with the same resourceVersion test and treat a fenced PlaceholderJob as
        submitted, so the job is never sized without a member that joined meanwhile. None: the
        object changed (it is read again).
        """
        meta = phj["metadata"]
        path = phj_path(meta["namespace"], meta["name"])
        fields = PlaceholderJobStatus(
            phase=names.PHASE_PENDING,
            reason=lc.REASON_SUBMITTING,
            message=f"submitting the gang's Slurm job for {len(phj['spec']['pods'])} pods",
        ).dump()
        ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
        if phj.get("status"):
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
        self.phjs.upsert(updated)
        return updated

    # ---- pods -----------------------------------------------------------------------------------
    async def report_pending(self, phj: Obj, report: pl.ReportPending, members: Mapping[str, Obj | None]) -> None:
        """Event SlurmJobPending on the PlaceholderJob and each waiting pod; noted for the rate limit."""
        uid = phj["metadata"]["uid"]
        before = self._told.get(uid)
        reasons = (before.reasons if before is not None else frozenset()) | {report.reason}
        self._told[uid] = lc.Told(time.monotonic(), report.reason, reasons)
        await self.kube.event(phj, names.EVENT_SLURM_JOB_PENDING, report.message)
        for name in report.pods:
            pod = members.get(name)
            if pod is not None:
                await self.kube.event(pod, names.EVENT_SLURM_JOB_PENDING, report.message)

    async def _release(
        self,
        phj: Obj,
        job_id: int,
        pods: tuple[tuple[str, str], ...],
        members: Mapping[str, Obj | None],
        announce: bool = True,
        het: tuple[tuple[str, int, int], ...] = (),
    ) -> Literal["released", "device-missing", "refused"]:
        """Claims of exactly Slurm's devices first (operator/placeholderjobs/devices.py), then the pods.

        ``device-missing``: no member is released. ``refused``: the API server refused a member's
        release for good, so the PlaceholderJob failed and its job was cancelled. ``het``: a
        heterogeneous job's (pod, component job id, offset): each pod is labelled with its
        component's job id and annotated with the job's id and its offset, and its devices are
        its component's."""
        unreleased: dict[str, tuple[Obj, str]] = {}
        for name, node in pods:
            pod = members.get(name)
            if pod is not None:
                unreleased[name] = (pod, node)
        part = {name: (component, offset) for name, component, offset in het}
        prepared = Prepared()
        for component in sorted({part.get(name, (job_id, 0))[0] for name in unreleased}):
            mine = {n: v for n, v in unreleased.items() if part.get(n, (job_id, 0))[0] == component}
            found = await self.devices.prepare(phj, component, mine)
            if found.problem:
                return "device-missing"
            prepared.annotations.update(found.annotations)
        phj_name = phj["metadata"]["name"]

        def annotations(name: str) -> dict[str, str] | None:
            extra = dict(prepared.annotations.get(name) or {})
            if name in part:
                extra[names.ANN_SLURM_HET_JOB_ID] = str(job_id)
                extra[names.ANN_SLURM_HET_OFFSET] = str(part[name][1])
            return extra or None

        refusals = await asyncio.gather(*(
            self._release_pod(pod, node, part.get(pod_name, (job_id, 0))[0], phj_name, annotations(pod_name), announce)
            for pod_name, (pod, node) in unreleased.items()
        ))  # fmt: skip
        for pod_name, refusal in zip(unreleased, refusals, strict=True):
            if refusal is not None:
                await self.apply(phj, lc.release_rejected(phj, job_id, pod_name, refusal), members)
                return "refused"
        return "released"

    async def _release_pod(
        self,
        pod: Obj,
        node: str,
        job_id: int,
        phj_name: str,
        annotations: dict[str, str] | None = None,
        announce: bool = True,
    ) -> str | None:
        """Release one pod; the API server's message when it refuses the release for good."""
        meta = pod["metadata"]
        path = pod_path(meta["namespace"], meta["name"])
        for attempt in (1, 2):
            try:
                updated = await self.kube.patch(
                    path, st.release_pod_patch(pod, node, job_id, phj_name, annotations), "json"
                )
                break
            except (NotFound, Conflict):
                return None
            except KubeError as e:
                if e.status != 422:
                    raise
                # 422: the uid test failed (a new pod with this name: its own events follow), the
                # patch no longer fits the pod (built from a stale copy), or the API server refuses
                # the pod as patched, which no retry can mend: tell these apart with a fresh read.
                live = await self.kube.get(path)
                if live is None or live["metadata"].get("uid") != meta["uid"]:
                    return None
                if attempt == 2:
                    log.warning("the API server refused to release pod %s/%s: %s", meta["namespace"], meta["name"], e)
                    await self.kube.event(live, st.REASON_RELEASE_REJECTED,
                                          f"the API server refused this pod's release for Slurm job {job_id}, "
                                          f"which is cancelled: {e.message}", warning=True)  # fmt: skip
                    return e.message
                pod = live
        self.pods.upsert(updated)
        metrics.pod_released(updated)
        if announce:
            message = f"Slurm job {job_id} allocated node {node} to this pod after it waited in Slurm's queue"
            await self.kube.event(updated, "SlurmAllocated", message)
        return None

    async def end_pod(self, pod: Obj, reason: str, message: str) -> None:
        """End a pod as Kubernetes' own evictors do: DisruptionTarget condition, then fail or delete."""
        meta = pod["metadata"]
        path = pod_path(meta["namespace"], meta["name"])
        cond = {"type": names.POD_COND_DISRUPTION_TARGET, "status": "True", "reason": reason,
                "message": message, "lastTransitionTime": now_iso()}  # fmt: skip
        await self.kube.event(pod, reason, f"ending pod: {message}", warning=True)
        try:
            if pod.get("spec", {}).get("nodeName"):
                await self.kube.patch(f"{path}/status", {"status": {"conditions": [cond]}}, "strategic")
                updated = await self.kube.delete(path, uid=meta["uid"])
            else:
                # Never started anywhere: fail it in place so its status keeps the reason.
                status = {"phase": "Failed", "reason": reason, "message": message, "conditions": [cond]}
                updated = await self.kube.patch(f"{path}/status", {"status": status}, "strategic")
        except (NotFound, Conflict):
            return
        if updated and updated.get("kind") == "Pod":
            self.pods.upsert(updated)

    async def confirmed_members(self, phj: Obj, members: Mapping[str, Obj | None]) -> dict[str, Obj | None]:
        """Members, with those missing from the cache asked for: a watch may not have caught up."""
        ns = phj["metadata"]["namespace"]
        confirmed = dict(members)
        for name, pod in members.items():
            if pod is None:
                live = await self.kube.get(pod_path(ns, name))
                if live is None or not st.is_member(phj, live):
                    continue
                if live.get("spec", {}).get("schedulerName") == self.config.schedulerName:
                    self.pods.upsert(live)
                    confirmed[name] = live
        return confirmed

    # ---- finalizer ------------------------------------------------------------------------------
    async def _note_waiting(self, phj: Obj, pods: tuple[str, ...], job_id: int | None) -> None:
        """Say once what a deleted PlaceholderJob's job waits for."""
        meta = phj["metadata"]
        if meta["uid"] in self._releasing:
            return
        self._releasing.add(meta["uid"])
        job = f"Slurm job {job_id}" if job_id is not None else "its Slurm job"
        waiting = ", ".join(pods)
        log.info("%s/%s deleted: %s is kept until pods %s are gone", meta["namespace"], meta["name"], job, waiting)
        await self.kube.event(phj, "WaitingForPods",
                              f"PlaceholderJob deleted: {job} is released once pods {waiting} are gone "
                              "(a terminating pod still holds its node)")  # fmt: skip

    async def _finalize(self, phj: Obj) -> None:
        meta = phj["metadata"]
        finalizers = meta.get("finalizers") or []
        if names.FINALIZER_PLACEHOLDER_JOB in finalizers:
            idx = finalizers.index(names.FINALIZER_PLACEHOLDER_JOB)
            with contextlib.suppress(NotFound):
                await self.kube.patch(
                    phj_path(meta["namespace"], meta["name"]),
                    [{"op": "test", "path": f"/metadata/finalizers/{idx}", "value": names.FINALIZER_PLACEHOLDER_JOB},
                     {"op": "remove", "path": f"/metadata/finalizers/{idx}"}],
                    "json",
                )  # fmt: skip
        self.poller.forget(meta["uid"])
        self._releasing.discard(meta["uid"])
        self._unwritten.pop(meta["uid"], None)
        self._told.pop(meta["uid"], None)
        self.podgroups.forget(phj)
        self.composites.forget(phj)

    async def _add_finalizer(self, phj: Obj) -> Obj:
        meta = phj["metadata"]
        op = ({"op": "add", "path": "/metadata/finalizers/-", "value": names.FINALIZER_PLACEHOLDER_JOB}
              if meta.get("finalizers") else
              {"op": "add", "path": "/metadata/finalizers", "value": [names.FINALIZER_PLACEHOLDER_JOB]})  # fmt: skip
        updated = await self.kube.patch(phj_path(meta["namespace"], meta["name"]), [op], "json")
        self.phjs.upsert(updated)
        return updated

    # ---- writes ---------------------------------------------------------------------------------
    async def cancel(self, job_id: int) -> None:
        await self.slurm.cancel_job(job_id)
        metrics.job_cancelled()
        self.poller.assume_cancelled(job_id)
        log.info("cancelled Slurm job %d", job_id)

    async def patch_status(self, phj: Obj, patch: Obj) -> Obj:
        """Merge-patch status, with the submit's status still unwritten (``_unwritten``) under it."""
        meta = phj["metadata"]
        held = self._unwritten.pop(meta["uid"], None)
        if held is not None:
            patch = held[0].dump() | patch
        try:
            updated = await self.kube.patch(f"{phj_path(meta['namespace'], meta['name'])}/status", {"status": patch})
        except NotFound:
            return phj
        self.phjs.upsert(updated)
        return updated


class Confirm:
    """The plan stopped at ConfirmMembers: decide again on ``phj`` once the members are read."""

    def __init__(self, phj: Obj) -> None:
        self.phj = phj
