"""The PlaceholderJob controller's work items, typed: a pod to make a member of its group's
PlaceholderJob, a PlaceholderJob to decide. The queue, the dispatch and the tests name the same two
classes, so an item of an unknown kind is a type error rather than a silent pod reconcile. Which
event queues which item is said in one place, :mod:`.events`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef
from slurm_bridge.operator.runtime.store import Key


@dataclass(frozen=True, slots=True, order=True)
class PodItem:
    """Make this pod a member of its group's PlaceholderJob (:mod:`.members`)."""

    namespace: str
    name: str
    kind: ClassVar[str] = "pod"

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> PodItem:
        meta = obj.get("metadata", {})
        return cls(meta.get("namespace", ""), meta.get("name", ""))


@dataclass(frozen=True, slots=True, order=True)
class PhjItem:
    """Decide this PlaceholderJob against its Slurm job (:mod:`.sync.phjsync`)."""

    namespace: str
    name: str
    kind: ClassVar[str] = "phj"

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> PhjItem:
        meta = obj.get("metadata", {})
        return cls(meta.get("namespace", ""), meta.get("name", ""))

    @classmethod
    def of_job(cls, ref: PhjRef) -> PhjItem:
        """The PlaceholderJob a Slurm job names in its admin_comment."""
        return cls(ref.namespace, ref.name)


WorkItem = PodItem | PhjItem
