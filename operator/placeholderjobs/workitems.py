"""The PlaceholderJob controller's work items, typed: a pod to make a member of its group's
PlaceholderJob, a PlaceholderJob to decide, a PlaceholderJob whose options (the slurmjob annotations
its spec is made from) may have changed. The queue, the dispatch and the tests name the same
classes, so an item of an unknown kind is a type error rather than a silent pod reconcile. Which
event queues which item is said in :mod:`.events` (pods, PlaceholderJobs, Slurm jobs) and
:mod:`.optionwatch` (the workloads' annotations)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from slurm_bridge.core import objects
from slurm_bridge.operator.runtime.store import Key
from slurm_bridge.operator.views.slurmjobs import PhjRef


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
        meta = objects.meta(obj)
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
        meta = objects.meta(obj)
        return cls(meta.get("namespace", ""), meta.get("name", ""))

    @classmethod
    def of_job(cls, ref: PhjRef) -> PhjItem:
        """The PlaceholderJob a Slurm job names in its admin_comment."""
        return cls(ref.namespace, ref.name)


@dataclass(frozen=True, slots=True, order=True)
class OptionsItem:
    """The slurmjob annotations this PlaceholderJob's spec is made from may have changed: bring the
    spec in line, or say why not (:mod:`.reconfigure`)."""

    namespace: str
    name: str
    kind: ClassVar[str] = "options"

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> OptionsItem:
        meta = objects.meta(obj)
        return cls(meta.get("namespace", ""), meta.get("name", ""))


WorkItem = PodItem | PhjItem | OptionsItem
