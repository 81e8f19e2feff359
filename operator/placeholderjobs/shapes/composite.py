"""A CompositePodGroup's heterogeneous Slurm job (Kubernetes 1.37): pods join their component of
one PlaceholderJob by the rules of ``compositepodgroups.plan_composite_join``; the job's
decisions are :mod:`.hetjob`'s.

As for gangs, every membership write carries a resourceVersion test, so members joining at once
never lose each other, and a fenced PlaceholderJob counts as submitted. Each component's request
is computed from its own pods and options (``CompositeGroup``); ``spec.slurm`` repeats component
0's, ``spec.pods`` lists every component's pods (the indexes and the member checks read it),
``spec.minMember`` is the sum of the components' gang sizes.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube.placeholderjob import Component, PlaceholderJob, PlaceholderJobSpec, PlaceholderJobStatus
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Members, Tenancy
from slurm_bridge.operator.placeholderjobs.decisions.plan import Action, Placed, Plan
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    CompositeGroup,
    CompositeJoin,
    Part,
    flat_pods,
    plan_composite_join,
)
from slurm_bridge.operator.placeholderjobs.grouping.gangjoin import JoinState
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group, options_ops, recorded_options
from slurm_bridge.operator.placeholderjobs.grouping.joining import Attempt, Joins
from slurm_bridge.operator.placeholderjobs.shapes import hetjob
from slurm_bridge.operator.placeholderjobs.shapes.shape import Followed
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.slurm.models import JobInfo

log = logging.getLogger(__name__)


def parts_of(spec: PlaceholderJobSpec) -> tuple[Part, ...]:
    return tuple(Part(c.pod_group, c.min_member, tuple(c.pods)) for c in spec.components or [])


def composite_spec(parts: tuple[Part, ...], slurm: dict[str, Obj], min_components: int) -> Obj:
    """The spec fields of a composite's PlaceholderJob for ``parts`` (``slurm``: PodGroup ->
    its component's request in CRD form)."""
    components = [
        {"podGroup": p.pod_group, "minMember": p.min_member, "pods": list(p.pods), "slurm": slurm[p.pod_group]}
        for p in parts
    ]
    return {
        "pods": list(flat_pods(parts)),
        "components": components,
        "slurm": components[0]["slurm"],
        "minMember": sum(p.min_member for p in parts),
        "minComponents": min_components,
    }


class Composite:
    """:class:`.shape.JobShape` for a CompositePodGroup: one component per child PodGroup."""

    name = "composite"
    plain: ClassVar[bool] = False

    # ---- decisions (pure: :mod:`.hetjob`) --------------------------------------------------------
    def submit(self, phj: PlaceholderJob, members: Members, tenancy: Tenancy | None, now: Clock) -> Plan:
        return hetjob.submit(phj, members, tenancy, now)

    def adopted(self, status: PlaceholderJobStatus, slurm: SlurmSide) -> PlaceholderJobStatus:
        """The heterogeneous job's id, when the job found is its leader."""
        if slurm.job is not None and slurm.job.het_job_id == slurm.job_id:
            status.het_job_id = slurm.job_id
        return status

    def placed(self, phj: PlaceholderJob, placed: Placed, submitted: PlaceholderJobStatus) -> PlaceholderJobStatus:
        """Each component's own job id, at once."""
        if placed.components:
            parts: dict[int, JobInfo | None] = {c.het_job_offset: c for c in placed.parts}
            parts.setdefault(0, placed.job)
            spec_parts = phj.spec.components or []
            submitted.components = hetjob.component_status(spec_parts, [parts.get(i) for i in range(len(spec_parts))])
        return submitted

    def follow(self, job: Followed) -> Plan:
        return hetjob.follow(job)

    def cancels(self, slurm: SlurmSide) -> tuple[Action, ...]:
        return hetjob.cancels(slurm)

    # ---- joins -----------------------------------------------------------------------------------
    async def join(self, pod: Obj, group: Group, joins: Joins) -> float | None:
        if not isinstance(group, CompositeGroup):
            raise TypeError(f"a CompositePodGroup's job joins the pods of its components, not of {group.source}")
        return await joins.join_group(self, pod, group)

    async def join_once(self, pod: Obj, group: CompositeGroup, phj: Obj, joins: Joins) -> Attempt:
        """One attempt; (False, _): the PlaceholderJob changed meanwhile, read it again."""
        meta, key = pod["metadata"], (group.namespace, group.name)
        state = await joins.join_state(pod, group, phj)
        if not isinstance(state, JoinState):
            return state
        spec, status, submitted, vacancies = state.phj.spec, state.phj.status, state.submitted, state.vacancies
        plan = plan_composite_join(
            parts_of(spec),
            spec.pod_uids or {},
            meta["name"],
            meta["uid"],
            group.component,
            group.min_member,
            submitted=submitted,
            terminal=status.phase in names.TERMINAL_PHASES,
            ended=vacancies.free(submitted),
            note=vacancies.note(),
        )
        settled = await joins.settle_join(
            plan.action, pod, phj, key, "composite", (names.REASON_COMPOSITE_FULL, plan.why)
        )
        if settled is not None:
            return settled
        return await self._write(pod, group, phj, plan, submitted, joins)

    async def _write(
        self, pod: Obj, group: CompositeGroup, phj: Obj, plan: CompositeJoin, submitted: bool, joins: Joins
    ) -> Attempt:
        meta, key = pod["metadata"], (group.namespace, group.name)
        spec = joins.phjs.model_of(phj).spec
        slurm = {c.pod_group: c.slurm.crd_dict() for c in spec.components or []}
        if not submitted:
            mine = next(p for p in plan.parts if p.pod_group == group.component)
            try:
                slurm[group.component] = (await joins.group_request(group, list(mine.pods), pod)).crd_dict()
            except ValueError as e:
                await joins.tell(pod, names.REASON_INVALID_SLURM_OPTIONS, _invalid(group, e))
                return True, 30.0
        fields = composite_spec(plan.parts, slurm, group.min_components)
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": phj["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/pods", "value": fields["pods"]},
            {"op": "add", "path": "/spec/podUIDs", "value": plan.uids},
            {"op": "add", "path": "/spec/components", "value": fields["components"]},
        ]
        if not submitted:
            ops += [
                {"op": "add", "path": f"/spec/{k}", "value": fields[k]} for k in ("slurm", "minMember", "minComponents")
            ]
            recorded = recorded_options(phj) or {}
            ops += options_ops(phj, {**recorded, **group.options()})  # this component's, as its request now
        replaced = (
            f"pod {meta['name']} takes the place (and node) of ended member {plan.slot} of PodGroup "
            f"{group.component}'s component"
        )
        joined = await joins.patch_join(
            key, phj, ops, meta, replaced if plan.slot and plan.slot != meta["name"] else None
        )
        return joined, None

    async def create(self, pod: Obj, group: CompositeGroup, joins: Joins) -> float | None:
        meta = pod["metadata"]
        try:
            request = await joins.group_request(group, [meta["name"]], pod)
        except ValueError as e:
            await joins.tell(pod, names.REASON_INVALID_SLURM_OPTIONS, _invalid(group, e))
            return 30.0
        parts = (Part(group.component, group.min_member, (meta["name"],)),)
        components = [
            Component(pod_group=p.pod_group, min_member=p.min_member, pods=list(p.pods), slurm=request) for p in parts
        ]
        made = await joins.create_for_group(pod, group, request, "the composite", components, group.min_components)
        if not isinstance(made, dict):
            return made
        log.info(
            "PlaceholderJob %s/%s made for CompositePodGroup %s", group.namespace, group.name, group.source["name"]
        )
        return None


def _invalid(group: CompositeGroup, e: ValueError) -> str:
    return f"cannot build the Slurm request of PodGroup {group.component}'s component: {e}"
