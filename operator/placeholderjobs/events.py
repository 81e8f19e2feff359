"""What each event queues: the one place that maps the PlaceholderJob controller's events to its
work items (as the Go bridge's event handlers do), and drops the events that provably bring
nothing new (docs/design/watches.md, "Dropped before the queue").

- a pod event (the bridge's pods only) -> that pod (:class:`.workitems.PodItem`);
- a PlaceholderJob event, or a change of a Slurm job the poller sees -> that PlaceholderJob
  (:class:`.workitems.PhjItem`).
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_bridge.core import metrics, objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.client import resource_version
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, PodItem, WorkItem
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.operator.runtime.workqueue import WorkQueue
from slurm_bridge.operator.views.slurmjobs import PhjRef


class EventHandlers:
    """Store each event's object, and queue its item unless the event brings nothing new."""

    def __init__(
        self,
        scheduler_name: str,
        pods: ObjectStore,
        phjs: ObjectStore,
        queue: WorkQueue[WorkItem],
        pod_gone: Callable[[str], None],
    ) -> None:
        self.scheduler_name = scheduler_name
        self.pods, self.phjs, self.queue = pods, phjs, queue
        self._pod_gone = pod_gone  # the membership forgets a deleted pod's uid
        # (uid, resourceVersion) of each object as its latest reconcile began to read it.
        self._read: dict[WorkItem, tuple[str, int]] = {}

    def on_pod_event(self, etype: str, pod: Obj) -> None:
        metrics.pod_event(etype, pod, self.scheduler_name)
        if pod.get("spec", {}).get("schedulerName") != self.scheduler_name:
            return
        self._queue(PodItem.of(pod), self.pods, etype, pod)

    def on_phj_event(self, etype: str, phj: Obj) -> None:
        metrics.phj_event()
        self._queue(PhjItem.of(phj), self.phjs, etype, phj)

    def on_job_change(self, ref: PhjRef) -> None:
        """The poller saw the job of this PlaceholderJob change (or vanish)."""
        self.queue.add(PhjItem.of_job(ref))

    def _queue(self, item: WorkItem, store: ObjectStore, etype: str, obj: Obj) -> None:
        """Store the event's object; queue its reconcile unless the event provably brings nothing
        new: a MODIFIED event that changes nothing the store keeps (``ObjectStore.observe``), or
        any event but DELETED at or below the resourceVersion a reconcile of that object already
        began with (the echo of the operator's own write read since, a stale event)."""
        meta = objects.meta(obj)
        if etype == "DELETED":
            store.delete(obj)
            self._read.pop(item, None)
            if isinstance(item, PodItem):
                self._pod_gone(meta.get("uid", ""))
        elif not store.observe(obj) and etype == "MODIFIED":
            return
        else:
            read = self._read.get(item)
            if read is not None and read[0] == meta.get("uid") and 0 < resource_version(obj) <= read[1]:
                return
        self.queue.add(item)

    def note_read(self, item: WorkItem) -> None:
        """A reconcile of ``item`` begins: what it reads now, later events at or below need not queue."""
        obj = (self.pods if isinstance(item, PodItem) else self.phjs).get(item.key)
        if obj is None:
            self._read.pop(item, None)
        else:
            self._read[item] = (objects.uid(obj) or "", resource_version(obj))
