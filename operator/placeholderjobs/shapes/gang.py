"""A gang (a JobSet, a LeaderWorkerSet group, a coscheduling or built-in PodGroup): its pods join
one PlaceholderJob named after the gang's root, by the membership rules of ``gangjoin.plan_join``,
and start together on one Slurm job with a node per member. Its decisions are a plain job's
(:mod:`.plainjob`), fenced before the submit."""

from __future__ import annotations

from typing import ClassVar

from slurm_bridge import names
from slurm_bridge.core.objects import Obj
from slurm_bridge.operator.placeholderjobs.grouping.gangjoin import Join, JoinState, gang_full, plan_join
from slurm_bridge.operator.placeholderjobs.grouping.groups import Group, options_ops
from slurm_bridge.operator.placeholderjobs.grouping.joining import Attempt, Joins
from slurm_bridge.operator.placeholderjobs.shapes.plainjob import PlainJob


class Gang(PlainJob):
    name = "gang"
    fenced: ClassVar[bool] = True

    async def join(self, pod: Obj, group: Group, joins: Joins) -> float | None:
        """Make the pod a member of its gang's PlaceholderJob (docs/workloads.md, "Late members")."""
        return await joins.join_group(self, pod, group)

    async def create(self, pod: Obj, group: Group, joins: Joins) -> float | None:
        meta = pod["metadata"]
        try:
            request = await joins.group_request(group, [meta["name"]], pod)
        except ValueError as e:
            await joins.tell(pod, names.REASON_INVALID_SLURM_OPTIONS, f"cannot build a Slurm job request: {e}")
            return 30.0
        made = await joins.create_for_group(pod, group, request, "the gang")
        if not isinstance(made, dict):
            return made
        for warning in group.warnings:
            await joins.kube.event(made, names.REASON_GANG_WILL_NOT_START, warning, warning=True)
        return None

    async def join_once(self, pod: Obj, group: Group, phj: Obj, joins: Joins) -> Attempt:
        """One attempt; (False, _): the PlaceholderJob changed meanwhile, read it again."""
        meta, key = pod["metadata"], (group.namespace, group.name)
        state = await joins.join_state(pod, group, phj)
        if not isinstance(state, JoinState):
            return state
        spec, submitted, vacancies = state.phj.spec, state.submitted, state.vacancies
        plan = plan_join(
            spec.pods,
            spec.pod_uids or {},
            meta["name"],
            meta["uid"],
            submitted=submitted,
            terminal=state.phj.status.phase in names.TERMINAL_PHASES,
            ended=vacancies.free(submitted),
        )
        full = gang_full(len(spec.pods), vacancies)
        settled = await joins.settle_join(plan.action, pod, phj, key, "gang", full)
        if settled is not None:
            return settled
        return await self._write_membership(pod, group, phj, plan, submitted, joins)

    async def _write_membership(
        self, pod: Obj, group: Group, phj: Obj, plan: Join, submitted: bool, joins: Joins
    ) -> Attempt:
        meta, key = pod["metadata"], (group.namespace, group.name)
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": phj["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/pods", "value": list(plan.pods)},
            {"op": "add", "path": "/spec/podUIDs", "value": plan.uids},
        ]
        if not submitted:
            try:
                request = await joins.group_request(group, list(plan.pods), pod)
            except ValueError as e:
                await joins.tell(pod, names.REASON_INVALID_SLURM_OPTIONS, f"cannot build a Slurm job request: {e}")
                return True, 30.0
            ops.append({"op": "add", "path": "/spec/slurm", "value": request.crd_dict()})
            ops.append({"op": "add", "path": "/spec/minMember", "value": group.min_member})
            ops += options_ops(phj, group.options())  # what the spec is made from now
        replaced = f"pod {meta['name']} takes the place (and node) of ended member {plan.slot}"
        joined = await joins.patch_join(
            key, phj, ops, meta, replaced if plan.slot and plan.slot != meta["name"] else None
        )
        return joined, None
