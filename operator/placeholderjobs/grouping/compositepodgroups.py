"""A CompositePodGroup (``scheduling.k8s.io/v1beta1`` on Kubernetes 1.38, ``v1alpha3`` on 1.37)
as one heterogeneous Slurm job: which pods belong to it, where each component's options come
from, and how pods join.

A built-in PodGroup names its parent in ``spec.parentCompositePodGroupName``. When that parent
has a ``gang`` policy, every pod of every child gang PodGroup belongs to one PlaceholderJob,
``cpg-<composite>``, owned by the CompositePodGroup, and to one heterogeneous Slurm job with a
component per child PodGroup (docs/workloads.md, "CompositePodGroups"):

- each component holds one node per member pod (at least the child's ``gang.minCount``), sized
  and configured on its own: options merge Workload <- controller <- CompositePodGroup <- child
  PodGroup, the most specific winning, because a heterogeneous job's parts differ by design;
- components are ordered by PodGroup name, which gives their offsets;
- the job is submitted once at least ``minGroupCount`` components exist and every component has
  all its member pods (operator/placeholderjobs/shapes/hetjob.py decides); after that its components are fixed: a pod
  of a PodGroup that had no pods then waits for the job to end, as a late gang member does.

A ``basic`` parent schedules its children independently, so each child stays its own gang
(operator/placeholderjobs/grouping/groups.py). A gang CompositePodGroup inside another gang one cannot be one flat Slurm
job faithfully (the inner ``minGroupCount`` would be lost) and is refused with an Event.
Pure: the reads are compositeio.py's, the writes compositemembers.py's (both beside this module).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.operator.placeholderjobs.grouping.groups import (
    JOB,
    Group,
    GroupError,
    Options,
    gang_min_count,
    phj_name,
    podgroup_topology,
    slurmjob_annotations,
)
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.translate import time_limit_from_deadline
from slurm_bridge.rules.workloadkinds import GroupKind, group_kind

COMPOSITE: Final[GroupKind] = workloadkinds.COMPOSITE_PODGROUP.group_kind
API_GROUP: Final = workloadkinds.COMPOSITE_PODGROUP.group
PLURAL: Final = workloadkinds.COMPOSITE_PODGROUP.plural
# The versions whose CompositePodGroup shape the bridge knows, preferred first.
VERSIONS: Final = workloadkinds.COMPOSITE_PODGROUP.versions
# The Kubernetes minor release (1.x) that serves each of them.
KUBERNETES: Final[Mapping[str, int]] = {"v1beta1": 38, "v1alpha3": 37}
# Slurm's MAX_HET_JOB_COMPONENTS: a heterogeneous job has at most this many components.
MAX_COMPONENTS: Final = 128


def parent_name(obj: Mapping[str, Any]) -> str | None:
    """The CompositePodGroup a PodGroup (or a CompositePodGroup) names as its parent."""
    name = (obj.get("spec") or {}).get("parentCompositePodGroupName")
    return str(name) if name else None


def min_group_count(composite: Mapping[str, Any]) -> int | None:
    """``schedulingPolicy.gang.minGroupCount`` of a CompositePodGroup; None for a ``basic`` policy."""
    gang = (((composite.get("spec") or {}).get("schedulingPolicy")) or {}).get("gang")
    if not isinstance(gang, Mapping):
        return None
    count = gang.get("minGroupCount")
    return max(count, 1) if isinstance(count, int) and not isinstance(count, bool) else 1


def served_version(served: Mapping[str, Collection[str]]) -> str | None:
    """The newest known version whose resources (``served``: version -> names, from discovery)
    include CompositePodGroups; None when none does."""
    return next((v for v in VERSIONS if PLURAL in served.get(v, ())), None)


def not_served_message(podgroup: str, parent: str, served: Collection[str]) -> str:
    """Why a PodGroup's parent cannot be read: no known version serves CompositePodGroups; names the
    feature gate and, per Kubernetes release, the runtime-config that serves them."""
    known = ", ".join(f"{API_GROUP}/{v}" for v in VERSIONS)
    runtime = " or ".join(f"--runtime-config={API_GROUP}/{v}=true on Kubernetes 1.{KUBERNETES[v]}" for v in VERSIONS)
    return (
        f"PodGroup {podgroup} names CompositePodGroup {parent} as its parent, but the API server serves no "
        f"CompositePodGroups in {known} (served versions: {', '.join(sorted(served)) or 'none'}); enable the "
        f"CompositePodGroup feature gate and {runtime}"
    )


def is_composite(phj: Mapping[str, Any]) -> bool:
    """Whether a PlaceholderJob is a CompositePodGroup's (a heterogeneous Slurm job)."""
    return group_kind(((phj.get("spec") or {}).get("group")) or {}) == COMPOSITE


def nested(composite: Mapping[str, Any], parent: Mapping[str, Any]) -> GroupError:
    """A gang CompositePodGroup whose parent is a gang too: refused (the pod waits, with an Event)."""
    inner, outer = composite["metadata"]["name"], parent["metadata"]["name"]
    return GroupError(
        names.REASON_NESTED_COMPOSITE,
        f"CompositePodGroup {inner} is a gang inside gang CompositePodGroup {outer}: the bridge makes one "
        f"heterogeneous Slurm job of a gang CompositePodGroup whose children are PodGroups, and a flat Slurm job "
        f"cannot keep the inner minGroupCount; give {outer} a basic policy (each inner CompositePodGroup is then "
        f"its own Slurm job) or put the PodGroups directly under {outer}",
        300.0,
    )


@dataclass(frozen=True)
class CompositeGroup(Group):
    """The group of a pod of a CompositePodGroup's child gang PodGroup.

    ``name``, ``owner`` and ``source`` are the composite's; ``min_member``, ``annotations`` and
    ``derived`` the pod's component's (its child PodGroup ``component``); ``min_components`` is
    the composite's ``minGroupCount``.
    """

    component: str = ""
    min_components: int = 1

    def options(self) -> Options:
        """A composite records its options by component PodGroup."""
        return {self.component: dict(self.annotations)}


def _ref(obj: Mapping[str, Any]) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def composite_group(
    pod: Obj, podgroup: Obj, composite: Obj, controller: Obj | None, workload: Obj | None
) -> CompositeGroup:
    """The pod's group: the composite's PlaceholderJob, its PodGroup's component.

    Options merge Workload <- controller (the Job or JobSet above the pod) <- CompositePodGroup
    <- child PodGroup: the most specific wins, so shared settings go on the Workload or the
    composite and each component's own (partition, resources) on its PodGroup.
    """
    annotations: dict[str, str] = {}
    for source in (workload, controller, composite, podgroup):
        if source is not None:
            annotations.update(slurmjob_annotations(source))
    cname = composite["metadata"]["name"]
    # The heterogeneous job is named after the composite (cut to spec.slurm.jobName's 200).
    derived: dict[str, object] = {"job_name": cname[:200], **podgroup_topology(podgroup)}
    if controller is not None and group_kind(controller) == JOB:
        deadline = (controller.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline:
            derived["time_limit_minutes"] = time_limit_from_deadline(int(deadline))
    return CompositeGroup(
        phj_name("cpg", cname),
        pod["metadata"]["namespace"],
        gang_min_count(podgroup) or 1,
        {**_ref(composite), "blockOwnerDeletion": False},
        _ref(composite),
        annotations,
        derived,
        gang=True,
        component=podgroup["metadata"]["name"],
        min_components=min_group_count(composite) or 1,
    )


# --- joining -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """A component as membership sees it: its PodGroup, gang size and member pods."""

    pod_group: str
    min_member: int
    pods: tuple[str, ...]


def flat_pods(parts: Sequence[Part]) -> tuple[str, ...]:
    """Every component's pods, in offset order: the PlaceholderJob's ``spec.pods``."""
    return tuple(p for part in parts for p in part.pods)


@dataclass(frozen=True)
class CompositeJoin:
    """What to do with a pod of a composite (as ``groups.Join``, per component).

    ``add``/``replace``: write ``parts`` and ``uids`` into the spec; ``wait``: ``why`` says what
    the pod waits for; ``slot``: the member whose place (and node) the pod took."""

    action: Literal["member", "add", "replace", "wait", "recycle"]
    parts: tuple[Part, ...] = ()
    uids: dict[str, str] = field(default_factory=dict)
    slot: str = ""
    why: str = ""


def plan_composite_join(
    parts: Sequence[Part],
    uids: Mapping[str, str],
    pod: str,
    uid: str,
    component: str,
    component_min: int,
    *,
    submitted: bool,
    terminal: bool,
    ended: Collection[str],
    note: str = "",
) -> CompositeJoin:
    """Membership rules of a composite: a gang's (``gangjoin.plan_join``) per component.

    Before submission a pod joins its component (made when its first pod comes; components kept
    in PodGroup name order, their offsets), and that component's ended members drop out, so they
    hold no node (its request is sized again for the pods it now has; other components keep
    theirs, and a component whose members ended waits for new ones, as a gang does). After
    submission a component's size is fixed and a pod only takes over the slot of an
    earlier incarnation of its name or of an ended member of its own component (the nodes are
    that component's); a pod whose PodGroup is not a component of the submitted job waits.
    ``note``: what the message of a full component adds (its terminating members).
    """
    owner = next((part for part in parts if pod in part.pods), None)
    recorded = uids.get(pod)
    if owner is not None and recorded in (None, uid):
        return CompositeJoin("member")
    if terminal:
        return CompositeJoin("recycle")
    if owner is not None:
        # An earlier pod of this name (names are unique, so it is gone): the new one is the member.
        return CompositeJoin("replace", tuple(parts), {**uids, pod: uid}, slot=pod)
    if not submitted:
        return _grow(parts, {**uids, pod: uid}, pod, component, component_min, ended)
    return _take_place(parts, uids, pod, uid, component, ended, note)


def _take_place(
    parts: Sequence[Part],
    uids: Mapping[str, str],
    pod: str,
    uid: str,
    component: str,
    ended: Collection[str],
    note: str,
) -> CompositeJoin:
    """After submission: the pod takes the place of an ended member of its own component, or waits."""
    mine = next((part for part in parts if part.pod_group == component), None)
    if mine is None:
        return CompositeJoin(
            "wait",
            why=(
                f"the heterogeneous Slurm job was submitted without PodGroup {component}, which had no pods then, "
                "and a submitted job cannot gain a component; the pod waits for the job to end"
            ),
        )
    free = sorted(p for p in mine.pods if p in ended)
    if not free:
        return CompositeJoin(
            "wait",
            why=(
                f"PodGroup {component}'s component of the heterogeneous Slurm job was submitted for "
                f"{len(mine.pods)} other pods and none of them has ended{note}; the pod waits for a free place"
            ),
        )
    slot = free[0]
    new_parts = tuple(
        Part(part.pod_group, part.min_member, tuple(pod if p == slot else p for p in part.pods))
        if part is mine
        else part
        for part in parts
    )
    new_uids = {p: u for p, u in uids.items() if p != slot}
    return CompositeJoin("replace", new_parts, {**new_uids, pod: uid}, slot=slot)


def _grow(
    parts: Sequence[Part],
    uids: Mapping[str, str],
    pod: str,
    component: str,
    component_min: int,
    ended: Collection[str],
) -> CompositeJoin:
    """Before submission: the pod joins its component (made if it has none yet), whose ended
    members drop out; ``uids`` already names the pod."""
    kept: list[Part] = []
    for part in parts:
        if part.pod_group == component:  # its minCount may have changed meanwhile (it is mutable)
            part = Part(component, component_min, (*(p for p in part.pods if p not in ended), pod))
        kept.append(part)
    if not any(part.pod_group == component for part in kept):
        if len(kept) >= MAX_COMPONENTS:
            return CompositeJoin(
                "wait",
                why=(
                    f"a heterogeneous Slurm job has at most {MAX_COMPONENTS} components, and this one has "
                    f"{len(kept)} PodGroups already; PodGroup {component} cannot be one more"
                ),
            )
        kept.append(Part(component, component_min, (pod,)))
    kept.sort(key=lambda part: part.pod_group)
    members = set(flat_pods(kept))
    return CompositeJoin("add", tuple(kept), {p: u for p, u in uids.items() if p in members})
