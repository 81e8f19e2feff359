"""Pods -> a CompositePodGroup's PlaceholderJob (I/O): the membership writes of a heterogeneous
job, by the rules of ``composite.plan_composite_join``.

As for gangs (operator/placeholderjobs/members.py, whose helpers this uses), every write carries a
resourceVersion test, so members joining at once never lose each other, and a fenced
PlaceholderJob counts as submitted. Each component's request is computed from its own pods and
options (``CompositeGroup``); ``spec.slurm`` repeats component 0's, ``spec.pods`` lists every
component's pods (the indexes and the member checks read it), ``spec.minMember`` is the sum of
the components' gang sizes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    REASON_COMPOSITE_FULL,
    CompositeGroup,
    CompositeJoin,
    Part,
    flat_pods,
    plan_composite_join,
)
from slurm_bridge.operator.placeholderjobs.grouping.vacancies import JoinState
from slurm_bridge.placeholderjob import Component, PlaceholderJobSpec

if TYPE_CHECKING:
    from slurm_bridge.operator.placeholderjobs.members import Membership

log = logging.getLogger(__name__)
Obj = dict[str, Any]


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


class CompositeMembership:
    """join(pod, group): make a pod of a CompositePodGroup a member of its component."""

    def __init__(self, members: Membership) -> None:
        self.m = members

    async def join(self, pod: Obj, group: CompositeGroup) -> float | None:
        return await self.m.join_retrying(
            (group.namespace, group.name),
            lambda: self._create(pod, group),
            lambda phj: self._join_once(pod, group, phj),
        )

    async def _join_once(self, pod: Obj, group: CompositeGroup, phj: Obj) -> tuple[bool, float | None]:
        """One attempt; (False, _): the PlaceholderJob changed meanwhile, read it again."""
        m = self.m
        meta, key = pod["metadata"], (group.namespace, group.name)
        state = await m.join_state(pod, group, phj)
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
        settled = await m.settle_join(plan.action, pod, phj, key, "composite", (REASON_COMPOSITE_FULL, plan.why))
        if settled is not None:
            return settled
        return await self._write(pod, group, phj, plan, submitted)

    async def _write(
        self, pod: Obj, group: CompositeGroup, phj: Obj, plan: CompositeJoin, submitted: bool
    ) -> tuple[bool, float | None]:
        m = self.m
        meta, key = pod["metadata"], (group.namespace, group.name)
        spec = m.phjs.model_of(phj).spec
        slurm = {c.pod_group: c.slurm.crd_dict() for c in spec.components or []}
        if not submitted:
            mine = next(p for p in plan.parts if p.pod_group == group.component)
            try:
                slurm[group.component] = (await m._gang_request(group, list(mine.pods), pod)).crd_dict()
            except ValueError as e:
                await m._tell(pod, "InvalidSlurmOptions", f"cannot build the Slurm request of PodGroup "
                              f"{group.component}'s component: {e}")  # fmt: skip
                return True, 30.0
        fields = composite_spec(plan.parts, slurm, group.min_components)
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": phj["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/pods", "value": fields["pods"]},
            {"op": "add", "path": "/spec/podUIDs", "value": plan.uids},
            {"op": "add", "path": "/spec/components", "value": fields["components"]},
        ]
        if not submitted:
            ops += [{"op": "add", "path": f"/spec/{k}", "value": fields[k]}
                    for k in ("slurm", "minMember", "minComponents")]  # fmt: skip
        replaced = (f"pod {meta['name']} takes the place (and node) of ended member {plan.slot} of PodGroup "
                    f"{group.component}'s component")  # fmt: skip
        joined = await m.patch_join(key, phj, ops, meta, replaced if plan.slot and plan.slot != meta["name"] else None)
        return joined, None

    async def _create(self, pod: Obj, group: CompositeGroup) -> float | None:
        m, meta = self.m, pod["metadata"]
        try:
            request = await m._gang_request(group, [meta["name"]], pod)
        except ValueError as e:
            await m._tell(pod, "InvalidSlurmOptions", f"cannot build the Slurm request of PodGroup "
                          f"{group.component}'s component: {e}")  # fmt: skip
            return 30.0
        parts = (Part(group.component, group.min_member, (meta["name"],)),)
        components = [Component(pod_group=p.pod_group, min_member=p.min_member, pods=list(p.pods), slurm=request)
                      for p in parts]  # fmt: skip
        made = await m.create_for_group(pod, group, request, "the composite", components, group.min_components)
        if not isinstance(made, dict):
            return made
        log.info(
            "PlaceholderJob %s/%s made for CompositePodGroup %s", group.namespace, group.name, group.source["name"]
        )
        return None
