"""The two reconcilers: pods -> PlaceholderJobs, and PlaceholderJobs <-> Slurm jobs.

Every step is idempotent and reads its state from Kubernetes objects and the latest Slurm
snapshot, so a restart at any line neither duplicates nor leaks a Slurm job:
- a job is found again by the PlaceholderJob uid in its admin_comment before anything is
  submitted, and nothing is submitted before the first Slurm list after start-up;
- the job id goes into status right after the submit; node assignments go into status before
  any pod is touched;
- a pod is only considered deleted after a direct GET says so;
- a gang's membership only changes with a resourceVersion test, and its PlaceholderJob is fenced
  (status reason ``Submitting``, written with the same test) before its job is submitted, so no
  member joins a job that was sized without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Hashable
from typing import Any, cast

from slurm_bridge.operator import status as st
from slurm_bridge.operator.devices import DEVICES_RETRY_SECONDS, DeviceBinder
from slurm_bridge.operator.groups import Group, GroupError, GroupResolver, is_gang, plan_join, same_group
from slurm_bridge.operator.jobref import PhjRef, default_job_name, encode_admin_comment
from slurm_bridge.operator.podgroups import PodGroupReporter
from slurm_bridge.operator.poller import JobSnapshot, SlurmPoller
from slurm_bridge.operator.store import Key, ObjectStore, WorkQueue

from slurm_bridge import logs, metrics, names
from slurm_bridge.config import Config
from slurm_bridge.kube import Conflict, KubeClient, KubeError, NotFound, now_iso, phj_path, pod_path
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, JobRequest
from slurm_bridge.translate import job_request

log = logging.getLogger(__name__)
Obj = dict[str, Any]

# A job submitted this recently may not be in the snapshot yet; wait for it rather than
# concluding it vanished.
SUBMIT_VISIBILITY_GRACE = 30.0
# A spec Slurm refused is submitted again this long after the refusal (or at once when it changes).
SUBMIT_RETRY_SECONDS = 30.0
# After Slurm refused an immediate allocation in a partition, jobs for it are queued directly for
# this long (doubling while refusals go on): each refused attempt leaves a FAILED job record.
IMMEDIATE_RETRY_MIN_SECONDS = 5.0
IMMEDIATE_RETRY_MAX_SECONDS = 60.0
# A deleted PlaceholderJob whose pods still run is looked at again this often (pod events sooner).
FINALIZE_RECHECK_SECONDS = 5.0
# Status reasons of a gang PlaceholderJob before its job exists.
REASON_WAITING_FOR_PODS = "WaitingForPods"
REASON_SUBMITTING = "Submitting"


class Controller:
    def __init__(self, config: Config, kube: KubeClient, slurm: SlurmClient) -> None:
        self.config = config
        self.kube = kube
        self.slurm = slurm
        self.pods = ObjectStore()
        self.phjs = ObjectStore()
        self.queue = WorkQueue(self._reconcile, workers=config.operatorWorkers)
        self.poller = SlurmPoller(slurm, config.bridgeId, config.pollPeriodSeconds, self._on_job_change, self._on_poll)
        # uid -> (job id, when): jobs submitted but maybe not yet visible in a snapshot. A cache
        # only: after a restart the admin_comment lookup finds them.
        self._submitted: dict[str, tuple[int, float]] = {}
        # uid -> when a submit failed in a way that may still have made the job: nothing is
        # submitted for it again before a full job list taken after that shows whether it did.
        self._uncertain: dict[str, float] = {}
        # partition -> (queue directly until, current backoff) after refused immediate allocations
        self._queue_only: dict[str, tuple[float, float]] = {}
        # uids of deleted PlaceholderJobs already told to wait for their pods (one Event each)
        self._releasing: set[str] = set()
        self._last_sweep = 0.0
        self._sweeping: asyncio.Task[None] | None = None
        self.groups = GroupResolver(kube.get)
        self.podgroups = PodGroupReporter(kube)
        self.devices = DeviceBinder(kube, slurm)
        # pod uid -> the gang PlaceholderJob it joined, so pod events need no owner walk. A cache:
        # membership is read from the PlaceholderJob's spec.
        self._member_of: dict[str, Key] = {}
        # pod uid -> the last problem reported in an Event, so a retry does not repeat it.
        self._told: dict[str, tuple[str, str]] = {}

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.poller.start()
        self.queue.start()
        for obj in self.phjs.values():
            self.queue.add(("phj", *ObjectStore.key_of(obj)))
        for obj in self.pods.values():
            self.queue.add(("pod", *ObjectStore.key_of(obj)))

    async def stop(self) -> None:
        await self.queue.stop()
        await self.poller.stop()

    # ---- watch events (from kopf) -----------------------------------------------------------
    def on_pod_event(self, etype: str, pod: Obj) -> None:
        metrics.pod_event(etype, pod, self.config.schedulerName)
        if pod.get("spec", {}).get("schedulerName") != self.config.schedulerName:
            return
        if etype == "DELETED":
            self.pods.delete(pod)
            uid = pod.get("metadata", {}).get("uid", "")
            self._member_of.pop(uid, None)
            self._told.pop(uid, None)
        else:
            self.pods.upsert(pod)
        ns, name = ObjectStore.key_of(pod)
        self.queue.add(("pod", ns, name))

    def on_phj_event(self, etype: str, phj: Obj) -> None:
        metrics.phj_event()
        if etype == "DELETED":
            self.phjs.delete(phj)
        else:
            self.phjs.upsert(phj)
        self.queue.add(("phj", *ObjectStore.key_of(phj)))

    def _on_job_change(self, ref: PhjRef) -> None:
        self.queue.add(("phj", ref.namespace, ref.name))

    def _on_poll(self, snap: JobSnapshot) -> None:
        now = time.monotonic()
        if now - self._last_sweep >= max(10 * self.config.pollPeriodSeconds, 5.0) and (
            self._sweeping is None or self._sweeping.done()
        ):
            self._last_sweep = now
            self._sweeping = asyncio.create_task(self._sweep_orphans(snap))
        # Forget submits the snapshot now shows.
        for uid in [u for u in self._submitted if u in snap.by_uid]:
            del self._submitted[uid]

    # ---- dispatch ---------------------------------------------------------------------------
    @metrics.reconciled
    @logs.work_item
    async def _reconcile(self, item: Hashable) -> float | None:
        kind, ns, name = cast(tuple[str, str, str], item)
        if kind == "pod":
            return await self.reconcile_pod((ns, name))
        return await self.reconcile_phj((ns, name))

    # ---- pods -> PlaceholderJobs --------------------------------------------------------------
    async def reconcile_pod(self, key: Key) -> float | None:
        pod = self.pods.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp") or st.pod_ended(pod):
            # The PlaceholderJob decides whether the Slurm job must end with it.
            for phj in self._phjs_with_member(key):
                self.queue.add(("phj", *ObjectStore.key_of(phj)))
            return None
        known = self._known_phj(pod)
        if known is not None:
            self.queue.add(("phj", *ObjectStore.key_of(known)))
            return None
        try:
            group = await self.groups.resolve(pod)
        except GroupError as e:
            await self._tell(pod, e.reason, e.message)
            return e.retry_after
        if group.gang:
            return await self._join_gang(pod, group)
        return await self._single(pod, group)

    def _known_phj(self, pod: Obj) -> Obj | None:
        """The PlaceholderJob the pod is already a member of, found without an owner walk."""
        meta = pod["metadata"]
        key = self._member_of.get(meta["uid"])
        if key is not None:
            phj = self.phjs.get(key)
            if (
                phj is not None
                and not phj["metadata"].get("deletionTimestamp")
                and meta["name"] in phj["spec"].get("pods", [])
                and self._is_member(phj, pod)
            ):
                return phj
            self._member_of.pop(meta["uid"], None)
        phj = self.phjs.get((meta["namespace"], meta["name"]))
        if phj is not None and not is_gang(phj) and self._pod_owner_uid(phj) == meta["uid"]:
            return phj
        return None

    async def _tell(self, pod: Obj, reason: str, message: str) -> None:
        """A Warning Event on the pod, once per distinct problem (retries repeat nothing)."""
        uid = pod["metadata"]["uid"]
        if self._told.get(uid) == (reason, message):
            return
        self._told[uid] = (reason, message)
        log.info("pod %s/%s: %s: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], reason, message)
        await self.kube.event(pod, reason, message, warning=True)

    async def _single(self, pod: Obj, group: Group) -> float | None:
        """A pod that is its own group: one PlaceholderJob named after it, owned by it."""
        existing = self.phjs.get((group.namespace, group.name))
        if existing is not None:
            if self._pod_owner_uid(existing) is None:
                source = existing["spec"].get("group") or {}
                await self._tell(pod, "PlaceholderJobNameTaken",
                                 f"PlaceholderJob {group.name} belongs to {source.get('kind')} {source.get('name')}; "
                                 "the pod waits until it is gone")  # fmt: skip
                return 30.0
            if not self._owned_by_other_pod(existing, pod):
                self.queue.add(("phj", group.namespace, group.name))
                return None
            if existing["metadata"].get("deletionTimestamp") is None:
                # A PlaceholderJob left by an earlier pod of the same name: it goes with that pod.
                await self.kube.delete(phj_path(group.namespace, group.name), uid=existing["metadata"]["uid"])
            return 1.0
        try:
            request = job_request([pod], config=self.config, derived=group.derived, annotations=group.annotations)
        except ValueError as e:
            await self.kube.event(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}", warning=True)
            return None
        phj = self._new_phj(group, [pod["metadata"]["name"]], request)
        try:
            created = await self.kube.create(phj_path(group.namespace), phj)
        except Conflict:
            existing = await self.kube.get(phj_path(group.namespace, group.name))
            if existing is None or existing["metadata"].get("deletionTimestamp"):
                return 1.0  # an older incarnation is still being finalized
            created = existing
        self.phjs.upsert(created)
        self.queue.add(("phj", group.namespace, group.name))
        return None

    # ---- gangs -------------------------------------------------------------------------------
    async def _join_gang(self, pod: Obj, group: Group) -> float | None:
        """Make the pod a member of its gang's PlaceholderJob (docs/workloads.md, "Late members")."""
        meta = pod["metadata"]
        key = (group.namespace, group.name)
        if not self.poller.synced.is_set():
            return self.config.pollPeriodSeconds  # whether the gang's job exists is not known yet
        for _ in range(10):
            phj = self.phjs.get(key)
            if phj is None:
                return await self._create_gang(pod, group)
            pmeta, spec, status = phj["metadata"], phj["spec"], phj.get("status") or {}
            if pmeta.get("deletionTimestamp"):
                return 1.0  # an ended run's PlaceholderJob is being finalized
            if not same_group(phj, group):
                source = spec.get("group") or {}
                if source.get("kind") == group.source["kind"] and source.get("name") == group.source["name"]:
                    # Left by an earlier workload of the same name: garbage collection removes it.
                    await self._tell(pod, "WaitingForOldPlaceholderJob",
                                     f"PlaceholderJob {group.name} still belongs to an earlier {source.get('kind')} "
                                     f"{source.get('name')}; the pod waits until it is removed")  # fmt: skip
                    return 2.0
                await self._tell(pod, "PlaceholderJobNameTaken",
                                 f"PlaceholderJob {group.name} belongs to {source.get('kind')} {source.get('name')}; "
                                 "the pod waits until it is gone")  # fmt: skip
                return 30.0
            submitted = self._is_submitted(phj)
            plan = plan_join(
                spec.get("pods", []),
                spec.get("podUIDs") or {},
                meta["name"],
                meta["uid"],
                submitted=submitted,
                terminal=status.get("phase") in names.TERMINAL_PHASES,
                ended=await self._ended_members(phj, exclude=meta["name"]),
            )
            if plan.action == "member":
                self._member_of[meta["uid"]] = key
                self.queue.add(("phj", *key))
                return None
            if plan.action == "recycle":
                await self.kube.event(phj, "Replaced", f"pod {meta['name']} starts a new run of the gang; this ended "
                                      "PlaceholderJob is deleted and a new one made")  # fmt: skip
                await self.kube.delete(phj_path(*key), uid=pmeta["uid"])
                return 1.0
            if plan.action == "wait":
                await self._tell(pod, "GangFull",
                                 f"the gang's Slurm job was submitted for {len(spec.get('pods', []))} other pods and "
                                 "none of them has ended; the pod waits for a free place")  # fmt: skip
                return 5.0
            ops: list[Obj] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": pmeta["resourceVersion"]},
                {"op": "replace", "path": "/spec/pods", "value": list(plan.pods)},
                {"op": "add", "path": "/spec/podUIDs", "value": plan.uids},
            ]
            if not submitted:
                try:
                    request = await self._gang_request(group, list(plan.pods), pod)
                except ValueError as e:
                    await self._tell(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}")
                    return 30.0
                ops.append({"op": "add", "path": "/spec/slurm", "value": request.crd_dict()})
                ops.append({"op": "add", "path": "/spec/minMember", "value": group.min_member})
            try:
                updated = await self.kube.patch(phj_path(*key), ops, "json")
            except KubeError as e:
                if not isinstance(e, Conflict) and e.status != 422:
                    raise
                # Another member joined first (the resourceVersion test failed): read it again.
                fresh = await self.kube.get(phj_path(*key))
                if fresh is None:
                    self.phjs.delete(phj)
                else:
                    self.phjs.upsert(fresh)
                continue
            self.phjs.upsert(updated)
            self._member_of[meta["uid"]] = key
            self._told.pop(meta["uid"], None)
            if plan.slot and plan.slot != meta["name"]:
                message = f"pod {meta['name']} takes the place (and node) of ended member {plan.slot}"
                await self.kube.event(updated, "MemberReplaced", message)
            self.queue.add(("phj", *key))
            return None
        return 1.0

    async def _create_gang(self, pod: Obj, group: Group) -> float | None:
        meta = pod["metadata"]
        try:
            request = await self._gang_request(group, [meta["name"]], pod)
        except ValueError as e:
            await self._tell(pod, "InvalidSlurmOptions", f"cannot build a Slurm job request: {e}")
            return 30.0
        phj = self._new_phj(group, [meta["name"]], request)
        phj["spec"]["podUIDs"] = {meta["name"]: meta["uid"]}
        try:
            created = await self.kube.create(phj_path(group.namespace), phj)
        except Conflict:
            existing = await self.kube.get(phj_path(group.namespace, group.name))
            if existing is None or existing["metadata"].get("deletionTimestamp"):
                return 1.0
            self.phjs.upsert(existing)
            return 0.05  # another member created it: join it
        self.phjs.upsert(created)
        self._member_of[meta["uid"]] = (group.namespace, group.name)
        for warning in group.warnings:
            await self.kube.event(created, "GangWillNotStart", warning, warning=True)
        self.queue.add(("phj", group.namespace, group.name))
        return None

    async def _gang_request(self, group: Group, members: list[str], pod: Obj) -> JobRequest:
        """The job for every member pod, sized for the whole gang, with the root's options."""
        ns = group.namespace
        pods: list[Obj] = []
        for name in members:
            p = pod if name == pod["metadata"]["name"] else self.pods.get((ns, name))
            if p is None:
                p = await self.kube.get(pod_path(ns, name))
            if p is not None:
                pods.append(p)
        return job_request(pods, config=self.config, derived=group.derived_for(len(members)),
                           annotations=group.annotations)  # fmt: skip

    def _is_submitted(self, phj: Obj) -> bool:
        """Whether the gang's job is (or may be) in Slurm: its size is then fixed."""
        status, uid = phj.get("status") or {}, phj["metadata"]["uid"]
        if status.get("jobId") or status.get("reason") == REASON_SUBMITTING or uid in self._submitted:
            return True
        snap = self.poller.snapshot
        return snap is not None and snap.job_for_uid(uid) is not None

    async def _ended_members(self, phj: Obj, exclude: str) -> set[str]:
        """Members whose recorded pod ended or is gone (a pod missing from the cache is asked for)."""
        ns = phj["metadata"]["namespace"]
        ended: set[str] = set()
        for name in phj["spec"].get("pods", []):
            if name == exclude:
                continue
            pod = self.pods.get((ns, name))
            if pod is None:
                pod = await self.kube.get(pod_path(ns, name))
                if pod is not None and pod.get("spec", {}).get("schedulerName") == self.config.schedulerName:
                    self.pods.upsert(pod)
            gone = pod is None or not self._is_member(phj, pod)
            if gone or st.pod_ended(pod) or (pod or {}).get("metadata", {}).get("deletionTimestamp"):
                ended.add(name)
        return ended

    def _new_phj(self, group: Group, pods: list[str], request: JobRequest) -> Obj:
        return {
            "apiVersion": names.API_VERSION,
            "kind": names.KIND,
            "metadata": {
                "name": group.name,
                "namespace": group.namespace,
                "labels": {
                    names.LABEL_APP_NAME: names.APP_NAME,
                    names.LABEL_APP_MANAGED_BY: names.APP_NAME,
                },
                "ownerReferences": [group.owner],
                "finalizers": [names.FINALIZER_PLACEHOLDER_JOB],
            },
            "spec": {
                "pods": pods,
                "minMember": group.min_member,
                "group": group.source,
                "slurm": request.crd_dict(),
            },
        }

    @staticmethod
    def _pod_owner_uid(phj: Obj) -> str | None:
        for ref in phj["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1":
                return str(ref.get("uid"))
        return None

    @staticmethod
    def _owned_by_other_pod(phj: Obj, pod: Obj | None) -> bool:
        """A single-pod PlaceholderJob belongs to one pod incarnation (its Pod owner's uid)."""
        if pod is None:
            return False
        owner = Controller._pod_owner_uid(phj)
        return owner is not None and owner != pod["metadata"].get("uid")

    @staticmethod
    def _is_member(phj: Obj, pod: Obj) -> bool:
        """Whether ``pod`` is the incarnation the PlaceholderJob counts as its member of that name:
        a gang records each member's uid in spec.podUIDs, a single pod is the PlaceholderJob's owner."""
        if is_gang(phj):
            uid = (phj["spec"].get("podUIDs") or {}).get(pod["metadata"]["name"])
            return uid is None or uid == pod["metadata"].get("uid")
        return not Controller._owned_by_other_pod(phj, pod)

    def _members(self, phj: Obj) -> dict[str, Obj | None]:
        ns = phj["metadata"]["namespace"]
        members: dict[str, Obj | None] = {}
        for name in phj["spec"]["pods"]:
            pod = self.pods.get((ns, name))
            members[name] = pod if pod is not None and self._is_member(phj, pod) else None
        return members

    def _phjs_with_member(self, pod_key: Key) -> list[Obj]:
        ns, name = pod_key
        return [
            p for p in self.phjs.values()
            if p["metadata"]["namespace"] == ns and name in p.get("spec", {}).get("pods", [])
        ]  # fmt: skip

    # ---- PlaceholderJobs <-> Slurm -------------------------------------------------------------
    async def reconcile_phj(self, key: Key) -> float | None:
        phj = self.phjs.get(key)
        if phj is None:
            return None
        meta = phj["metadata"]
        status: Obj = phj.get("status") or {}
        if not self.poller.synced.is_set():
            return self.config.pollPeriodSeconds  # adopt, never resubmit, after a restart
        snap = self.poller.snapshot
        assert snap is not None
        job = self._find_job(phj, snap)
        job_id: int | None = status.get("jobId") or (job.job_id if job else None)
        if job_id is None and meta["uid"] in self._submitted:
            job_id = self._submitted[meta["uid"]][0]
        logs.bind(jobId=job_id)

        if meta.get("deletionTimestamp"):
            return await self._finalize(phj, job_id, job)
        if names.FINALIZER_PLACEHOLDER_JOB not in (meta.get("finalizers") or []):
            phj = await self._add_finalizer(phj)

        members = self._members(phj)
        phase = status.get("phase")

        if phase in names.TERMINAL_PHASES:
            if job is not None and not job.is_finished:
                await self._cancel(job.job_id)  # a cancel lost in a crash, done again
            # Without an allocation no member may keep running (an end interrupted by a crash).
            for pod in members.values():
                if pod is not None and not st.pod_ended(pod) and not pod["metadata"].get("deletionTimestamp"):
                    await self._end_pod(pod, status.get("reason") or "SlurmJobEnded", status.get("message") or "")
            return None

        if job_id is None:
            if all(st.pod_ended(p) for p in members.values()) and await self._confirm_all_ended(phj, members):
                await self._set_terminal(phj, *st.pods_end_phase(st.end_phases(members)))
                return None
            wait = st.resubmit_wait(status, meta.get("generation"), SUBMIT_RETRY_SECONDS)
            if wait > 0:
                return wait  # Slurm refused this very spec moments ago; watch events must not hammer it
            uncertain = self._uncertain.get(meta["uid"])
            if uncertain is not None:
                if self.poller.last_full_at <= uncertain:
                    self.poller.poll_soon(full=True)
                    return self.config.pollPeriodSeconds
                del self._uncertain[meta["uid"]]  # that list did not show a job: none was made
            return await self._submit(phj, members)

        if job is None or job.job_id != job_id:
            job = snap.by_id.get(job_id)
        if status.get("jobId") != job_id:
            phj = await self._patch_status(phj, {"jobId": job_id, "phase": names.PHASE_PENDING})

        # Kubernetes -> Slurm: every member pod ended.
        if all(st.pod_ended(p) for p in members.values()) and await self._confirm_all_ended(phj, members):
            phase_, reason, message = st.pods_end_phase(st.end_phases(members))
            await self._set_terminal(phj, phase_, reason, message)
            if job is None or not job.is_finished:
                await self._cancel(job_id)
            await self.kube.event(phj, reason, message)
            return None

        if job is None:
            submitted = self._submitted.get(meta["uid"])
            if submitted and time.monotonic() - submitted[1] < SUBMIT_VISIBILITY_GRACE:
                return self.config.pollPeriodSeconds
            if snap.taken_at < (submitted[1] if submitted else 0):
                return self.config.pollPeriodSeconds
            return await self._slurm_ended(phj, members, None, job_id)
        if job.is_finished:
            return await self._slurm_ended(phj, members, job, job_id)
        if job.is_pending:
            return await self._pending(phj, job)
        if job.is_running and job.nodes:
            return await self._allocated(phj, members, job)
        # RUNNING without nodes, SUSPENDED, CONFIGURING...: mirror and wait.
        await self._mirror(phj, job, status.get("phase") or names.PHASE_PENDING)
        return None

    def _find_job(self, phj: Obj, snap: JobSnapshot) -> JobInfo | None:
        job_id = (phj.get("status") or {}).get("jobId")
        if job_id and job_id in snap.by_id:
            return snap.by_id[job_id]
        return snap.job_for_uid(phj["metadata"]["uid"])

    async def _confirmed_members(self, phj: Obj, members: dict[str, Obj | None]) -> dict[str, Obj | None]:
        """Members, with those missing from the cache asked for: a watch may not have caught up."""
        ns = phj["metadata"]["namespace"]
        confirmed = dict(members)
        for name, pod in members.items():
            if pod is None:
                live = await self.kube.get(pod_path(ns, name))
                if live is None or not self._is_member(phj, live):
                    continue
                if live.get("spec", {}).get("schedulerName") == self.config.schedulerName:
                    self.pods.upsert(live)
                    confirmed[name] = live
        return confirmed

    async def _confirm_all_ended(self, phj: Obj, members: dict[str, Obj | None]) -> bool:
        return all(st.pod_ended(p) for p in (await self._confirmed_members(phj, members)).values())

    async def _submit(self, phj: Obj, members: dict[str, Obj | None]) -> float | None:
        meta, spec = phj["metadata"], phj["spec"]
        present = [p for p in members.values() if p is not None and not st.pod_ended(p)]
        need = int(spec.get("minMember", len(members)))
        if len(present) < need:
            # The gang is not complete yet; pod events bring us back.
            message = f"{len(present)} of {need} member pods exist; the Slurm job is submitted once all do"
            status = phj.get("status") or {}
            if status.get("reason") != REASON_WAITING_FOR_PODS or status.get("message") != message:
                await self._patch_status(phj, {
                    "phase": names.PHASE_PENDING, "reason": REASON_WAITING_FOR_PODS, "message": message,
                    "podList": ",".join(spec["pods"]),
                })  # fmt: skip
            return None
        if is_gang(phj) and (phj.get("status") or {}).get("reason") != REASON_SUBMITTING:
            fenced = await self._fence(phj)
            if fenced is None:
                return 0.05  # a member joined meanwhile: size the job again
            phj = fenced
        request = JobRequest.model_validate(spec.get("slurm", {}))
        ref = PhjRef(self.config.bridgeId, meta["namespace"], meta["name"], meta["uid"])
        name = request.job_name or default_job_name(meta["namespace"], meta["name"])
        try:
            job_id = await self._place(request, name, encode_admin_comment(ref))
        except SlurmUnavailable as e:
            self._submitted.pop(meta["uid"], None)
            if e.maybe_applied:
                # The job may exist: a full list (it finds the job by admin_comment) must say so
                # before anything is submitted again.
                self._uncertain[meta["uid"]] = time.monotonic()
                self.poller.poll_soon(full=True)
            raise
        except SlurmError as e:
            message = f"Slurm refused the job: {e}"
            await self._patch_status(phj, {
                "phase": names.PHASE_PENDING, "reason": st.REASON_SUBMIT_REJECTED, "message": message,
                "submitTime": now_iso(),
                "observedGeneration": meta.get("generation"),
                "conditions": st.set_condition(phj.get("status", {}).get("conditions"), names.COND_SUBMITTED,
                                               False, "SubmitRejected", message, meta.get("generation")),
            })  # fmt: skip
            await self.kube.event(phj, "SubmitRejected", message, warning=True)
            for pod in present:
                await self.kube.event(pod, "SlurmSubmitRejected", message, warning=True)
            return SUBMIT_RETRY_SECONDS  # Slurm's limits may change (partition up, QOS raised)
        self._submitted[meta["uid"]] = (job_id, time.monotonic())
        metrics.job_submitted()
        logs.bind(jobId=job_id)
        job = await self.poller.refresh(job_id, ref)
        message = f"submitted Slurm job {job_id} ({request.nodes} node(s), partition {request.partition or '-'})"
        submitted: Obj = {
            "jobId": job_id, "phase": names.PHASE_PENDING, "slurmState": job.state if job else "PENDING",
            "reason": job.reason if job else "", "message": message, "submitTime": now_iso(),
            "observedGeneration": meta.get("generation"), "podList": ",".join(spec["pods"]),
            "conditions": st.set_condition(phj.get("status", {}).get("conditions"), names.COND_SUBMITTED, True,
                                           "Submitted", message, meta.get("generation")),
        }  # fmt: skip
        await self.kube.event(phj, "Submitted", message)
        log.info("submitted Slurm job %d for %s/%s", job_id, meta["namespace"], meta["name"])
        if job is not None and job.is_running and job.nodes:
            # Allocated at once: one status write says both, and the pods are released now.
            return await self._allocated(phj, members, job, submitted=submitted)
        await self._patch_status(phj, submitted)
        return None

    async def _place(self, request: JobRequest, name: str, admin_comment: str) -> int:
        """Allocate the job now if Slurm can start it, else queue it (docs/performance.md).

        A refused immediate allocation costs a call and leaves a FAILED job record, so after a
        refusal the partition's jobs are queued directly for a while -- but only when the queued
        submit then succeeds: a request Slurm refuses outright says nothing about the partition.
        """
        partition, now = request.partition or "", time.monotonic()
        until, backoff = self._queue_only.get(partition, (0.0, 0.0))
        refused: SlurmError | None = None
        if self.config.immediateAllocation and now >= until:
            try:
                job_id = await self.slurm.allocate_external_job(request, name=name, admin_comment=admin_comment)
            except (SlurmUnavailable, SlurmAuthError):
                raise
            except SlurmError as e:
                refused = e
            else:
                self._queue_only.pop(partition, None)  # room again: the next refusal starts small
                metrics.job_allocated_immediately()
                return job_id
        job_id = await self.slurm.submit_external_job(request, name=name, admin_comment=admin_comment)
        metrics.job_queued()
        if refused is not None:
            backoff = min(max(backoff * 2, IMMEDIATE_RETRY_MIN_SECONDS), IMMEDIATE_RETRY_MAX_SECONDS)
            self._queue_only[partition] = (time.monotonic() + backoff, backoff)
            reason = refused.errors[0].error if refused.errors else str(refused)
            log.info("Slurm cannot start job %s now (%s): queued it; partition %s queues directly for %.0fs",
                     name, reason, partition or "(default)", backoff)  # fmt: skip
        return job_id

    async def _fence(self, phj: Obj) -> Obj | None:
        """Mark a gang's PlaceholderJob as submitting, only if its spec is still the one read.

        Members join with the same resourceVersion test and treat a fenced PlaceholderJob as
        submitted, so the job is never sized without a member that joined meanwhile. None: the
        object changed (it is read again).
        """
        meta = phj["metadata"]
        path = phj_path(meta["namespace"], meta["name"])
        fields = {"phase": names.PHASE_PENDING, "reason": REASON_SUBMITTING,
                  "message": f"submitting the gang's Slurm job for {len(phj['spec']['pods'])} pods"}  # fmt: skip
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

    async def _pending(self, phj: Obj, job: JobInfo) -> float | None:
        meta, status = phj["metadata"], phj.get("status") or {}
        gen = meta.get("generation")
        if gen and status.get("observedGeneration") != gen:
            request = JobRequest.model_validate(phj["spec"].get("slurm", {}))
            try:
                await self.slurm.update_job(job.job_id, request)
            except SlurmUnavailable:
                raise
            except SlurmError as e:
                await self.kube.event(phj, "UpdateRejected", f"Slurm refused the job update: {e}", warning=True)
            await self._patch_status(phj, {"observedGeneration": gen})
        await self._mirror(phj, job, names.PHASE_PENDING)
        return None

    async def _mirror(self, phj: Obj, job: JobInfo, phase: str) -> Obj:
        status = phj.get("status") or {}
        reason = job.reason
        if (
            status.get("slurmState") == job.state
            and status.get("reason", "") == reason
            and status.get("phase") == phase
        ):
            return phj
        patch: Obj = {"slurmState": job.state, "reason": reason, "phase": phase, "jobId": job.job_id}
        if job.is_pending:
            message = f"Slurm job {job.job_id} is pending" + (f": {reason}" if reason else "")
            patch["message"] = message
            patch["conditions"] = st.set_condition(status.get("conditions"), names.COND_ALLOCATED, False,
                                                   reason or "Pending", message)  # fmt: skip
            await self.podgroups.report(phj, False, names.PODGROUP_REASON_UNSCHEDULABLE, message)
        return await self._patch_status(phj, patch)

    async def _allocated(
        self, phj: Obj, members: dict[str, Obj | None], job: JobInfo, submitted: Obj | None = None
    ) -> float | None:
        """Record the nodes, then release the pods. ``submitted``: the status fields of a submit
        that allocated at once, written in the same patch."""
        meta, status = phj["metadata"], phj.get("status") or {}
        if submitted is not None:
            status = dict(status, conditions=submitted["conditions"])
        current = {a["pod"]: a["node"] for a in status.get("assignments") or []}
        assignment = st.assign_nodes(list(members), list(job.nodes), current)
        if assignment is None:
            if submitted is not None:
                phj = await self._patch_status(phj, submitted)
            message = f"Slurm allocated {len(job.nodes)} node(s) for {len(members)} pods"
            await self._set_terminal(phj, names.PHASE_FAILED, "AllocationMismatch", message)
            await self._cancel(job.job_id)
            return None
        if assignment != current or status.get("phase") not in (names.PHASE_ALLOCATED, names.PHASE_RUNNING):
            message = f"Slurm job {job.job_id} allocated {st.compress_hostlist(job.nodes)}"
            phj = await self._patch_status(phj, {
                **(submitted or {}),
                "jobId": job.job_id, "phase": names.PHASE_ALLOCATED, "slurmState": job.state, "reason": "",
                "message": message, "nodeList": st.compress_hostlist(job.nodes),
                "podList": ",".join(phj["spec"]["pods"]),
                "assignments": [{"pod": p, "node": n} for p, n in sorted(assignment.items())],
                "startTime": status.get("startTime") or now_iso(),
                "conditions": st.set_condition(status.get("conditions"), names.COND_ALLOCATED, True,
                                               "Allocated", message),
            })  # fmt: skip
        # Release the pods only once every member has its node: gangs start together. The
        # allocation Event goes on each pod (where users look); the status says it for the job.
        bound = 0
        unreleased: dict[str, tuple[Obj, str]] = {}
        for pod_name, pod in members.items():
            if pod is None or st.pod_ended(pod):
                continue
            node = assignment[pod_name]
            if pod.get("spec", {}).get("nodeName"):
                bound += pod["spec"]["nodeName"] == node
                continue
            if not st.pod_is_released(pod, node):
                unreleased[pod_name] = (pod, node)
        # Pods that asked for DRA devices get a claim of exactly Slurm's devices first; if one
        # cannot be made, no member is released (operator/devices.py).
        prepared = await self.devices.prepare(phj, job.job_id, unreleased)
        if prepared.problem:
            return DEVICES_RETRY_SECONDS
        await asyncio.gather(*(
            self._release_pod(pod, node, job.job_id, meta["name"], prepared.annotations.get(pod_name))
            for pod_name, (pod, node) in unreleased.items()
        ))  # fmt: skip
        await self.podgroups.report(phj, True, names.PODGROUP_REASON_SCHEDULED,
                                    f"Slurm job {job.job_id} allocated {st.compress_hostlist(job.nodes)} "
                                    f"to the gang ({self.config.schedulerName})")  # fmt: skip
        live = sum(1 for p in members.values() if p is not None and not st.pod_ended(p))
        if live and bound == live and status.get("phase") != names.PHASE_RUNNING:
            message = f"every member pod is bound to its Slurm node ({st.compress_hostlist(job.nodes)})"
            await self._patch_status(phj, {
                "phase": names.PHASE_RUNNING,
                "conditions": st.set_condition(phj.get("status", {}).get("conditions"), names.COND_READY, True,
                                               "PodsBound", message),
            })  # fmt: skip
        return None

    async def _release_pod(
        self, pod: Obj, node: str, job_id: int, phj_name: str, annotations: dict[str, str] | None = None
    ) -> None:
        meta = pod["metadata"]
        try:
            updated = await self.kube.patch(
                pod_path(meta["namespace"], meta["name"]),
                st.release_pod_patch(pod, node, job_id, phj_name, annotations),
                "json",
            )
        except (NotFound, Conflict):
            return
        except KubeError as e:
            if e.status == 422:  # the uid test failed: a new pod with this name; its own events follow
                return
            raise
        self.pods.upsert(updated)
        metrics.pod_released(updated)
        await self.kube.event(updated, "SlurmAllocated", f"Slurm job {job_id} allocated node {node} to this pod")

    async def _slurm_ended(
        self, phj: Obj, members: dict[str, Obj | None], job: JobInfo | None, job_id: int
    ) -> float | None:
        """Slurm -> Kubernetes: the job ended (scancel, time limit, node failure...) under live pods."""
        phase, reason, message = st.end_of_job(job, job_id)
        phj = await self._set_terminal(phj, phase, reason, message, job)
        await self.kube.event(phj, reason, message, warning=phase != names.PHASE_COMPLETED)
        for pod in members.values():
            if pod is not None and not st.pod_ended(pod):
                await self._end_pod(pod, reason, message)
        return None

    async def _end_pod(self, pod: Obj, reason: str, message: str) -> None:
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

    async def _set_terminal(self, phj: Obj, phase: str, reason: str, message: str, job: JobInfo | None = None) -> Obj:
        status = phj.get("status") or {}
        patch: Obj = {
            "phase": phase,
            "reason": reason,
            "message": message,
            "endTime": now_iso(),
            "conditions": st.set_condition(status.get("conditions"), names.COND_ENDED, True, reason, message),
        }
        if job is not None:
            patch["slurmState"] = job.state
        return await self._patch_status(phj, patch)

    async def _finalize(self, phj: Obj, job_id: int | None, job: JobInfo | None) -> float | None:
        """Release the Slurm job of a deleted PlaceholderJob, but never under a live pod.

        A pod that is terminating still runs on its node until its grace period ends or its
        containers exit, so the allocation must outlive it: members that still exist and have not
        reached a terminal phase are ended first (those not yet terminating), and the job is
        cancelled once every one is gone or terminal (for a gang: every member).
        """
        meta = phj["metadata"]
        snap = self.poller.snapshot
        others = [o for o in (snap.by_uid.get(meta["uid"], []) if snap else [])
                  if o.job_id != job_id and not o.is_finished]  # fmt: skip
        if (job_id is not None and (job is None or not job.is_finished)) or others:
            holding = st.holding_allocation(await self._confirmed_members(phj, self._members(phj)))
            if holding:
                await self._release_members(phj, holding, job_id)
                return FINALIZE_RECHECK_SECONDS  # the pods' events bring it back sooner
        if job_id is not None and (job is None or not job.is_finished):
            await self._cancel(job_id)
            await self.kube.event(phj, "Cancelled", f"PlaceholderJob deleted: cancelled Slurm job {job_id}")
        # Any other live job this PlaceholderJob made (a crash between submit and status).
        for other in others:
            await self._cancel(other.job_id)
        finalizers = phj["metadata"].get("finalizers") or []
        if names.FINALIZER_PLACEHOLDER_JOB in finalizers:
            idx = finalizers.index(names.FINALIZER_PLACEHOLDER_JOB)
            meta = phj["metadata"]
            with contextlib.suppress(NotFound):
                await self.kube.patch(
                    phj_path(meta["namespace"], meta["name"]),
                    [{"op": "test", "path": f"/metadata/finalizers/{idx}", "value": names.FINALIZER_PLACEHOLDER_JOB},
                     {"op": "remove", "path": f"/metadata/finalizers/{idx}"}],
                    "json",
                )  # fmt: skip
        self._submitted.pop(phj["metadata"]["uid"], None)
        self._uncertain.pop(phj["metadata"]["uid"], None)
        self._releasing.discard(phj["metadata"]["uid"])
        self.podgroups.forget(phj)
        return None

    async def _release_members(self, phj: Obj, pods: list[Obj], job_id: int | None) -> None:
        """End the pods of a deleted PlaceholderJob that still run, and say once what it waits for."""
        meta = phj["metadata"]
        job = f"Slurm job {job_id}" if job_id is not None else "its Slurm job"
        for pod in pods:
            if not st.pod_terminating(pod):
                await self._end_pod(pod, "PlaceholderJobDeleted",
                                    f"PlaceholderJob {meta['name']} was deleted, so its {job} is released")  # fmt: skip
        if meta["uid"] not in self._releasing:
            self._releasing.add(meta["uid"])
            waiting = ", ".join(p["metadata"]["name"] for p in pods)
            log.info("%s/%s deleted: %s is kept until pods %s are gone", meta["namespace"], meta["name"], job, waiting)
            await self.kube.event(phj, "WaitingForPods",
                                  f"PlaceholderJob deleted: {job} is released once pods {waiting} are gone "
                                  "(a terminating pod still holds its node)")  # fmt: skip

    async def _add_finalizer(self, phj: Obj) -> Obj:
        meta = phj["metadata"]
        op = ({"op": "add", "path": "/metadata/finalizers/-", "value": names.FINALIZER_PLACEHOLDER_JOB}
              if meta.get("finalizers") else
              {"op": "add", "path": "/metadata/finalizers", "value": [names.FINALIZER_PLACEHOLDER_JOB]})  # fmt: skip
        updated = await self.kube.patch(phj_path(meta["namespace"], meta["name"]), [op], "json")
        self.phjs.upsert(updated)
        return updated

    async def _cancel(self, job_id: int) -> None:
        await self.slurm.cancel_job(job_id)
        metrics.job_cancelled()
        self.poller.assume_cancelled(job_id)
        log.info("cancelled Slurm job %d", job_id)

    async def _patch_status(self, phj: Obj, patch: Obj) -> Obj:
        meta = phj["metadata"]
        try:
            updated = await self.kube.patch(f"{phj_path(meta['namespace'], meta['name'])}/status", {"status": patch})
        except NotFound:
            return phj
        self.phjs.upsert(updated)
        return updated

    # ---- orphans -----------------------------------------------------------------------------
    async def _sweep_orphans(self, snap: JobSnapshot) -> None:
        """Cancel live bridge jobs whose PlaceholderJob is gone (deleted while the bridge was down)."""
        known = {p["metadata"]["uid"] for p in self.phjs.values()}
        now = time.time()
        for job_id, ref in list(snap.refs.items()):
            job = snap.by_id[job_id]
            if job.is_finished or ref.uid in known or ref.uid in self._submitted:
                continue
            if job.submit_time and now - job.submit_time.timestamp() < self.config.orphanGraceSeconds:
                continue
            logs.bind(namespace=ref.namespace, name=ref.name, jobId=job_id)
            try:
                live = await self.kube.get(phj_path(ref.namespace, ref.name))
                if live is not None and live["metadata"]["uid"] == ref.uid:
                    self.phjs.upsert(live)
                    continue
                await self._cancel(job_id)
                metrics.orphan_swept()
                log.warning("cancelled orphaned Slurm job %d (PlaceholderJob %s/%s is gone)", job_id,
                            ref.namespace, ref.name)  # fmt: skip
            except (KubeError, SlurmError) as e:
                log.warning("orphan check of Slurm job %d failed: %s", job_id, e)
