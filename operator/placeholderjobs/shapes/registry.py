"""Which shape a PlaceholderJob's job, or a pod's group, has: the one place that tells them apart."""

from __future__ import annotations

from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import CompositeGroup
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group
from slurm_bridge.operator.placeholderjobs.shapes.composite import Composite
from slurm_bridge.operator.placeholderjobs.shapes.gang import Gang
from slurm_bridge.operator.placeholderjobs.shapes.shape import JobShape
from slurm_bridge.operator.placeholderjobs.shapes.single import SinglePod

SINGLE: JobShape = SinglePod()
GANG: JobShape = Gang()
COMPOSITE: JobShape = Composite()


def shape_of(phj: PlaceholderJob) -> JobShape:
    """The shape of a PlaceholderJob's job, by the group it was made for (``spec.group``)."""
    if phj.is_composite():
        return COMPOSITE
    return GANG if phj.is_gang() else SINGLE


def shape_for(group: Group) -> JobShape:
    """The shape of the job a pod's group gets."""
    if isinstance(group, CompositeGroup):
        return COMPOSITE
    return GANG if group.gang else SINGLE
