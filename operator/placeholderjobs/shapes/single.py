"""A pod that is its own group (a bare pod, a batch Job's pod): one PlaceholderJob named after the
pod and owned by it, one Slurm job for it alone. Its decisions are a plain job's
(:mod:`.plainjob`); a single pod's job that Slurm allocates at its submit is released before its
status is written (``decisions.allocation``)."""

from __future__ import annotations

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import Conflict, Invalid, phj_path
from slurm_bridge.kube.placeholderjob import GroupSource
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group, new_phj
from slurm_bridge.operator.placeholderjobs.grouping.joining import Joins
from slurm_bridge.operator.placeholderjobs.shapes.plainjob import PlainJob
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem
from slurm_bridge.rules.resume import single_slot
from slurm_bridge.rules.translate import job_request


class SinglePod(PlainJob):
    name = "single pod"

    async def join(self, pod: Obj, group: Group, joins: Joins) -> float | None:
        """The pod's own PlaceholderJob: made now, or the one left by an earlier pod of its name
        deleted first (it goes with that pod)."""
        key = (group.namespace, group.name)
        existing = joins.phjs.model(key)
        if existing is not None:
            if existing.pod_owner_uid() is None:
                return await joins.name_taken(pod, group.name, existing.spec.group or GroupSource())
            if not existing.owned_by_other_pod(pod):
                joins.queue.add(PhjItem(*key))
                return None
            if not existing.deleted:
                # A PlaceholderJob left by an earlier pod of the same name: it goes with that pod.
                await joins.kube.delete(phj_path(*key), uid=existing.metadata.uid)
            return 1.0
        try:
            request = job_request([pod], config=joins.config, derived=group.derived, annotations=group.annotations)
        except ValueError as e:
            message = f"cannot build a Slurm job request: {e}"
            await joins.kube.event(pod, names.REASON_INVALID_SLURM_OPTIONS, message, warning=True)
            return None
        place = await joins.take_place(group, single_slot(pod))
        phj = new_phj(group, [pod["metadata"]["name"]], request, resumes=place)
        try:
            created = await joins.kube.create(phj_path(group.namespace), phj)
        except Invalid as e:
            await joins.tell(pod, names.REASON_PHJ_REFUSED, f"the API server refused its PlaceholderJob: {e.message}")
            return None  # no job exists yet; the same object would be refused again
        except Conflict:
            found = await joins.kube.get(phj_path(*key))
            if found is None or objects.deletion_timestamp(found):
                return 1.0  # an older incarnation is still being finalized
            created = found
        joins.phjs.upsert(created)
        joins.queue.add(PhjItem(*key))
        return None
