"""The PlaceholderJob shell's writes to its member pods: the release (Slurm's DRA devices
first, then the node, the job's labels and the gate lifted, in one patch per pod) and the end
(as Kubernetes' own evictors do)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from slurm_bridge import names
from slurm_bridge.core import metrics, objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import Conflict, KubeError, NotFound, pod_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import PodWritesKube
from slurm_bridge.kube.times import now_iso
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.pods import release_pod_patch
from slurm_bridge.operator.placeholderjobs.sync.devices import DeviceBinder, Prepared
from slurm_bridge.operator.runtime.store import ObjectStore

log = logging.getLogger(__name__)


def job_node_sharing(phj: PlaceholderJob, offset: int | None) -> str | None:
    """The node sharing of the pod's Slurm job (``offset``: its heterogeneous component's)."""
    components = phj.spec.components or []
    req = components[offset].slurm if offset is not None and offset < len(components) else phj.spec.slurm
    return req.node_sharing or ("exclusive" if req.exclusive else None)


class MemberPods:
    """Releases and ends member pods; each write is stored from the API's answer at once."""

    def __init__(self, kube: PodWritesKube, pods: ObjectStore, devices: DeviceBinder) -> None:
        self.kube, self.pods, self.devices = kube, pods, devices

    async def release(
        self,
        phj: PlaceholderJob,
        job_id: int,
        pods: tuple[tuple[str, str], ...],
        members: Mapping[str, Obj | None],
        announce: bool = True,
        het: tuple[tuple[str, int, int], ...] = (),
    ) -> pl.DevicesMissing | pl.ReleaseRefused | None:
        """Claims of exactly Slurm's devices first (operator/placeholderjobs/sync/devices.py), then the pods.

        None: each pod released. ``DevicesMissing``: no member is released. ``ReleaseRefused``: the
        API server refused a member's release for good (the next decision fails the
        PlaceholderJob and cancels its job). ``het``: a
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
            found = await self.devices.prepare(phj.raw, component, mine)
            if found.problem:
                return pl.DevicesMissing()
            prepared.annotations.update(found.annotations)
        phj_name = phj.metadata.name

        def annotations(name: str) -> dict[str, str] | None:
            extra = dict(prepared.annotations.get(name) or {})
            if name in part:
                extra[names.ANN_SLURM_HET_JOB_ID] = str(job_id)
                extra[names.ANN_SLURM_HET_OFFSET] = str(part[name][1])
            mode = job_node_sharing(phj, part[name][1] if name in part else None)
            if mode is not None:  # what admission refuses a resize by (webhook/resize.py)
                extra[names.ANN_JOB_NODE_SHARING] = mode
            return extra or None

        refusals = await asyncio.gather(
            *(
                self._release_pod(
                    pod, node, part.get(pod_name, (job_id, 0))[0], phj_name, annotations(pod_name), announce
                )
                for pod_name, (pod, node) in unreleased.items()
            )
        )
        for pod_name, refusal in zip(unreleased, refusals, strict=True):
            if refusal is not None:
                return pl.ReleaseRefused(job_id, pod_name, refusal)
        return None

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
                    path, release_pod_patch(pod, node, job_id, phj_name, annotations), "json"
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
                if live is None or objects.uid(live) != meta["uid"]:
                    return None
                if attempt == 2:
                    log.warning("the API server refused to release pod %s/%s: %s", meta["namespace"], meta["name"], e)
                    await self.kube.event(
                        live,
                        names.REASON_RELEASE_REJECTED,
                        f"the API server refused this pod's release for Slurm job {job_id}, "
                        f"which is cancelled: {e.message}",
                        warning=True,
                    )
                    return e.message
                pod = live
        self.pods.upsert(updated)
        metrics.pod_released(updated)
        if announce:
            message = f"Slurm job {job_id} allocated node {node} to this pod after it waited in Slurm's queue"
            await self.kube.event(updated, names.REASON_SLURM_ALLOCATED, message)
        return None

    async def end(self, pod: Obj, reason: str, message: str, *, disrupted: bool = True) -> None:
        """End a pod as Kubernetes' own evictors do: DisruptionTarget condition, then fail or delete.
        ``disrupted`` False: without the condition, so a workload's podFailurePolicy counts the
        failure (a job preempted by CANCEL: the work does not come back, slurm_bridge/rules/resume.py)."""
        meta = pod["metadata"]
        path = pod_path(meta["namespace"], meta["name"])
        cond = {
            "type": names.POD_COND_DISRUPTION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_iso(),
        }
        conditions = [cond] if disrupted else []
        await self.kube.event(pod, reason, f"ending pod: {message}", warning=True)
        try:
            if pod.get("spec", {}).get("nodeName"):
                if disrupted:
                    await self.kube.patch(f"{path}/status", {"status": {"conditions": conditions}}, "strategic")
                updated = await self.kube.delete(path, uid=meta["uid"])
            else:
                # Never started anywhere: fail it in place so its status keeps the reason.
                status = {"phase": "Failed", "reason": reason, "message": message, "conditions": conditions}
                updated = await self.kube.patch(f"{path}/status", {"status": status}, "strategic")
        except (NotFound, Conflict):
            return
        if updated and updated.get("kind") == "Pod":
            self.pods.upsert(updated)
