"""A PlaceholderJob's options (the ``slurmjob.slinky.slurm.net/*`` annotations its spec is made
from) -> its spec, when they changed after it was made (I/O; the rules are
``slurm_bridge/rules/jobchanges.py``'s, docs/annotations.md "Changing annotations").

A PlaceholderJob records the options its ``spec.slurm`` was made from (``names.ANN_JOB_OPTIONS``).
When its group's annotations differ from them (a pod's own, or its workload's: a Job, a JobSet, a
PodGroup, a Workload, a CompositePodGroup), the group is resolved again as a new pod's would be,
and:

- before the job is submitted, the spec is made again as for a new job;
- while the job waits in Slurm's queue, the fields of the keys that may change take the new
  values; the spec's new generation is then sent to the job (``decisions/specupdate.py``);
- a key that cannot change, a value Slurm cannot go back to, and any change once Slurm allocated
  the job are said in a Warning Event (UpdateNotApplied, UpdateTooLate) on the PlaceholderJob, its
  pods and its workload, and the spec keeps what the job has.

The new options are recorded in the same write (a resourceVersion test guards it), so each change is
decided once; a crash before the write decides it again. PlaceholderJobs made before the options
were recorded are compared field by field instead, and record nothing until a change is found.
"""

from __future__ import annotations

import logging
from typing import Any

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.cache import TenantCache
from slurm_bridge.kube.client import Conflict, KubeError, NotFound, phj_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import ReconfigureKube
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import CompositeGroup
from slurm_bridge.operator.placeholderjobs.grouping.groups import (
    Group,
    GroupError,
    options_ops,
    pod_group,
    recorded_options,
    same_group,
)
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, WorkItem
from slurm_bridge.operator.runtime.store import Key, ObjectStore, ParsedStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.rules import jobchanges
from slurm_bridge.rules.jobannotations import ANNOTATION_FIELDS
from slurm_bridge.rules.podphase import pod_ended
from slurm_bridge.rules.translate import job_request
from slurm_bridge.slurm.models import JobRequest

log = logging.getLogger(__name__)


class Reconfigure:
    """reconcile(PlaceholderJob key): its spec in line with its group's annotations, or why not."""

    def __init__(
        self,
        config: Config,
        kube: ReconfigureKube,
        pods: ObjectStore,
        phjs: ParsedStore[PlaceholderJob],
        poller: SlurmPoller,
        groups: GroupResolver,
        queue: WorkQueue[WorkItem],
        tenants: TenantCache | None = None,
    ) -> None:
        self.config, self.kube, self.pods, self.phjs = config, kube, pods, phjs
        self.poller, self.groups, self.queue, self.tenants = poller, groups, queue, tenants

    async def reconcile(self, key: Key) -> float | None:
        phj = self.phjs.model(key)
        if phj is None or phj.deleted or phj.status.phase in names.TERMINAL_PHASES:
            return None
        try:
            if phj.is_composite():
                return await self._composite(phj)
            return await self._plain(phj)
        except GroupError as e:  # the group cannot be resolved now (an owner being replaced, RBAC)
            log.info("options of %s/%s not read: %s", *key, e.message)
            return e.retry_after

    # ---- a plain job: a single pod's or a gang's --------------------------------------------------
    async def _plain(self, phj: PlaceholderJob) -> float | None:
        live = self._live(phj, phj.spec.pods)
        if not live:
            return None
        group = await self._group(phj, live[0])
        if group is None:
            return None
        new, recorded = group.annotations, recorded_options(phj.raw)
        if recorded == new:
            return None
        fresh = self._fresh(live, group, len(phj.spec.pods))
        if recorded is None:  # made before options were recorded: compare the fields themselves
            recorded = _legacy(new, phj.spec.slurm, fresh)
            if recorded == new:
                return None
        state, job = self._state(phj)
        default = self._default_account(phj.metadata.namespace)
        change = jobchanges.respec(state, recorded, new, phj.spec.slurm, fresh, job=job, default_account=default)
        spec_ops: list[Obj] = []
        if change.spec is not None:
            spec_ops = [{"op": "replace", "path": "/spec/slurm", "value": change.spec.crd_dict()}]
        return await self._write(phj, live, dict(new), spec_ops, change.problems, change.reason)

    # ---- a CompositePodGroup's heterogeneous job ---------------------------------------------------
    async def _composite(self, phj: PlaceholderJob) -> float | None:
        """Each component's options, from one of its pods. Before the submit a changed component's
        request is made again; after it, a heterogeneous job keeps what it was submitted with."""
        recorded: dict[str, Any] = recorded_options(phj.raw) or {}
        options, spec_ops, problems = dict(recorded), [], {}
        state, job = self._state(phj)
        for i, component in enumerate(phj.spec.components or []):
            live = self._live(phj, component.pods)
            group = await self._group(phj, live[0]) if live else None
            if not isinstance(group, CompositeGroup) or group.component != component.pod_group:
                continue
            before, new = recorded.get(component.pod_group) or {}, group.annotations
            if before == new:
                continue
            options[component.pod_group] = dict(new)
            where = f"PodGroup {component.pod_group}'s component: "
            if state == "unsubmitted":
                fresh = self._fresh(live, group, len(component.pods))
                if isinstance(fresh, JobRequest):
                    value = fresh.crd_dict()
                    spec_ops.append({"op": "replace", "path": f"/spec/components/{i}/slurm", "value": value})
                    spec_ops += [{"op": "replace", "path": "/spec/slurm", "value": value}] if i == 0 else []
                    continue
            hetjob = "a CompositePodGroup's heterogeneous job keeps the options it was submitted with"
            for key in jobchanges.changed_keys(before, new):
                why = hetjob if state == "waiting" else f"{job} was already allocated"
                problems[key] = where + f"{jobchanges.describe(key, before, new)}, but {why}"
        if options == recorded:
            return None
        reason = names.REASON_UPDATE_TOO_LATE if state == "allocated" else names.REASON_UPDATE_NOT_APPLIED
        return await self._write(phj, self._live(phj, phj.spec.pods), options, spec_ops, problems, reason)

    # ---- reads ------------------------------------------------------------------------------------
    def _live(self, phj: PlaceholderJob, names_: list[str]) -> list[Obj]:
        """The member pods (of ``names_``) that exist and have not ended, from the cache."""
        ns = phj.metadata.namespace
        pods = [self.pods.get((ns, n)) for n in names_]
        return [p for p in pods if p is not None and phj.is_member(p) and not pod_ended(p)]

    async def _group(self, phj: PlaceholderJob, pod: Obj) -> Group | None:
        """The pod's group as a new pod's would be resolved; None when it is not this
        PlaceholderJob's (the workload was replaced). A bare pod's is read without a GET."""
        source = phj.spec.group
        own = source is not None and source.kind == "Pod"
        group = pod_group(pod) if own else await self.groups.resolve(pod)
        return group if same_group(phj.raw, group) else None

    def _fresh(self, pods: list[Obj], group: Group, members: int) -> JobRequest | str:
        """The request the group's annotations make now, for its live pods (sized for
        ``members``); the error's text when none can be made."""
        try:
            return job_request(
                pods, config=self.config, derived=group.derived_for(members), annotations=group.annotations
            )
        except ValueError as e:
            return str(e)

    def _state(self, phj: PlaceholderJob) -> tuple[jobchanges.State, str]:
        """Where the job is, by status and by the poller's view (which sees a start first), and its
        name for the messages."""
        status = phj.status
        side = self.poller.side(phj.metadata.uid, status.job_id)
        job = f"Slurm job {side.job_id}" if side.job_id is not None else "its Slurm job"
        running = side.job is not None and side.job.is_running
        if status.phase in (names.PHASE_ALLOCATED, names.PHASE_RUNNING) or status.assignments or running:
            return "allocated", job
        if side.has_job or status.reason == names.REASON_SUBMITTING:
            return "waiting", job
        return "unsubmitted", job

    def _default_account(self, namespace: str) -> bool:
        cache = self.tenants
        if cache is None or not cache.synced:
            return False
        return jobchanges.gives_default_account(cache.index().match(namespace).policy)

    # ---- the write ----------------------------------------------------------------------------------
    async def _write(
        self,
        phj: PlaceholderJob,
        live: list[Obj],
        options: dict[str, Any],
        spec_ops: list[Obj],
        problems: dict[str, str],
        reason: str,
    ) -> float | None:
        """Say what does not reach the job (before the write: a crash repeats an Event rather than
        loses it), then record the options and the spec in one write with a resourceVersion test."""
        meta = phj.metadata
        if problems:
            message = "not applied: " + "; ".join(problems[k] for k in sorted(problems))
            log.info("%s/%s: %s", meta.namespace, meta.name, message)
            await self.kube.event(phj.raw, reason, message, warning=True)
            for pod in live:
                await self.kube.event(pod, reason, message, warning=True)
            source = phj.spec.group
            if source is not None and source.kind not in (None, "Pod") and source.name and source.uid:
                ref = {"name": source.name, "namespace": meta.namespace, "uid": source.uid}
                await self.kube.event(
                    {"apiVersion": source.api_version, "kind": source.kind, "metadata": ref},
                    reason,
                    message,
                    warning=True,
                )
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resource_version},
            *options_ops(phj.raw, options),
            *spec_ops,
        ]
        path = phj_path(meta.namespace, meta.name)
        try:
            self.phjs.upsert(await self.kube.patch(path, ops, "json"))
        except NotFound:
            return None
        except KubeError as e:
            if not isinstance(e, Conflict) and e.status != 422:
                raise
            fresh = await self.kube.get(path)  # changed meanwhile: decided again on what it is now
            if fresh is not None:
                self.phjs.upsert(fresh)
            return 0.05
        if spec_ops:
            log.info("%s/%s: spec made again from changed options", meta.namespace, meta.name)
            self.queue.add(PhjItem(meta.namespace, meta.name))  # its job gets the new generation
        return None


def _legacy(new: dict[str, str], spec: JobRequest, fresh: JobRequest | str) -> dict[str, str]:
    """What a PlaceholderJob made before the options were recorded was made from, as far as its
    spec says: ``new``, but for the keys that may change whose field differs from the spec's (taken
    as added). A key removed since cannot be seen."""
    if isinstance(fresh, str):
        return new
    differs = {
        k
        for k in jobchanges.UPDATABLE
        if getattr(fresh, ANNOTATION_FIELDS[k]) != getattr(spec, ANNOTATION_FIELDS[k]) and k in new
    }
    return {k: v for k, v in new.items() if k not in differs}
