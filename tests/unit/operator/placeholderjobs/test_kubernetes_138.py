"""Kubernetes 1.38's forms, shaped as the JSON tags of k8s.io/api v0.38.0-beta.0 say: the
CompositePodGroup at ``scheduling.k8s.io/v1beta1`` (found by discovery, preferred over 1.37's
``v1alpha3``; its scheduled condition written at the served version), a gang CompositePodGroup
template whose ``disruptionMode`` all reaches children outside its one Slurm job (refused, naming
the child's field), and ``preemptionPolicy: Never`` (accepted with a warning saying that Slurm's QOS
and partition decide preemption). A fake API stands in for the server."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube import schedulingapi
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    KUBERNETES,
    CompositeGroup,
    not_served_message,
    served_version,
)
from slurm_bridge.operator.placeholderjobs.grouping.groups import GroupError
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.sync.groupconditions import CompositeReporter
from slurm_bridge.rules import workloadkinds
from slurm_bridge.webhook.review import AdmissionRequest, Decision
from slurm_bridge.webhook.validate import validate
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_groups import NS, obj, pod

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

G = "scheduling.k8s.io"
PG_RESOURCES = ("workloads", "podgroups", "podgroups/status")
CPG_RESOURCES = ("compositepodgroups", "compositepodgroups/status")


def cpg_v1beta1(name: str = "c", **spec: Any) -> Obj:
    """A CompositePodGroup as v1beta1 (1.38) defines it: ``spec.workloadRef`` (required),
    ``schedulingPolicy.gang.minGroupCount`` (required in a gang), ``disruptionMode`` (a union,
    ``{"single": {}}`` by default), ``priorityClassName``, ``priority``, ``preemptionPolicy``."""
    body: Obj = {
        "workloadRef": {"workloadName": "w", "templateName": "all"},
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "disruptionMode": {"single": {}},
        "priorityClassName": "batch",
        "priority": 100,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    return obj(f"{G}/v1beta1", "CompositePodGroup", name, spec={**body, **spec})


def child(name: str, min_count: int = 1) -> Obj:
    """A v1beta1 PodGroup under CompositePodGroup c (``parentCompositePodGroupName`` needs ``workloadRef``)."""
    return obj(f"{G}/v1beta1", "PodGroup", name, spec={
        "parentCompositePodGroupName": "c",
        "workloadRef": {"workloadName": "w", "templateName": name},
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "disruptionMode": {"single": {}},
        "preemptionPolicy": "PreemptLowerPriority",
    })  # fmt: skip


def workload(*templates: Obj) -> Obj:
    """A Workload of CompositePodGroup templates; ``podGroupTemplates`` has no omitempty, so unset it is null."""
    return obj(
        f"{G}/v1beta1", "Workload", "w", spec={"podGroupTemplates": None, "compositePodGroupTemplates": list(templates)}
    )


class API(FakeKube):
    """The scheduling.k8s.io group as a 1.37 or 1.38 API server serves it: ``composites`` are the
    versions serving CompositePodGroups; objects are stored at every version that serves their kind."""

    def __init__(self, *objs: Obj, composites: tuple[str, ...], fail: dict[str, int] | None = None) -> None:
        served = ("v1", "v1beta1", *(v for v in composites if v != "v1beta1"))
        docs: dict[str, Obj] = {f"/apis/{G}": {"versions": [{"version": v} for v in served]}}
        for v in served:
            resources = (PG_RESOURCES if v == "v1beta1" else ()) + (CPG_RESOURCES if v in composites else ())
            docs[f"/apis/{G}/{v}"] = {"resources": [{"name": r} for r in resources]}
        super().__init__(fail=fail, docs=docs)
        for o in objs:
            plural = workloadkinds.PLURALS[(G, o["kind"])]
            for v in composites if o["kind"] == "CompositePodGroup" else ("v1beta1",):
                self.objects[f"/apis/{G}/{v}/namespaces/{NS}/{plural}/{o['metadata']['name']}"] = o


def member(name: str, group: str) -> Obj:
    p = pod(name)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


# --- which version is read --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("served", "chosen"),
    [({"v1beta1": {"podgroups", "compositepodgroups"}, "v1alpha3": {"compositepodgroups"}}, "v1beta1"),  # 1.38, both on
     ({"v1beta1": {"podgroups", "compositepodgroups"}}, "v1beta1"),  # 1.38, the alpha off
     ({"v1beta1": {"podgroups"}, "v1alpha3": {"podgroups", "compositepodgroups"}}, "v1alpha3"),  # 1.37
     ({"v1beta1": {"podgroups"}}, None),  # the gate off
     ({"v1": {"compositepodgroups"}, "v2": {"compositepodgroups"}}, None)],  # versions the bridge does not know
)  # fmt: skip
def test_the_newest_served_composite_version_is_read(served: dict[str, set[str]], chosen: str | None) -> None:
    assert served_version(served) == chosen


def test_composite_versions_in_the_kinds_table_newest_first() -> None:
    assert workloadkinds.COMPOSITE_PODGROUP.versions == ("v1beta1", "v1alpha3")
    assert workloadkinds.COMPOSITE_PODGROUP.api_version == f"{G}/v1beta1"
    assert tuple(KUBERNETES) == workloadkinds.COMPOSITE_PODGROUP.versions  # each with its release


def test_the_not_served_message_names_the_gate_and_each_releases_runtime_config() -> None:
    message = not_served_message("large", "c", ["v1beta1"])
    assert "CompositePodGroup feature gate" in message and "(served versions: v1beta1)" in message
    assert f"--runtime-config={G}/v1beta1=true on Kubernetes 1.38" in message
    assert f"--runtime-config={G}/v1alpha3=true on Kubernetes 1.37" in message


@pytest.mark.parametrize("composites", [("v1beta1",), ("v1beta1", "v1alpha3")], ids=["beta only", "both"])
async def test_a_v1beta1_composite_is_one_heterogeneous_job(composites: tuple[str, ...]) -> None:
    api = API(workload(), cpg_v1beta1(), child("small"), child("large", 2), composites=composites)
    resolver = GroupResolver(api.get)
    small = await resolver.resolve(member("small-0", "small"))
    large = await resolver.resolve(member("large-0", "large"))
    assert isinstance(small, CompositeGroup) and isinstance(large, CompositeGroup)
    assert small.name == large.name == "cpg-c"
    assert (small.component, small.min_member, large.component, large.min_member) == ("small", 1, "large", 2)
    assert small.source["apiVersion"] == f"{G}/v1beta1"  # the PlaceholderJob records the version read
    assert f"/apis/{G}/v1beta1/namespaces/{NS}/compositepodgroups/c" in api.reads
    assert not any("/v1alpha3/namespaces/" in r for r in api.reads)


async def test_without_the_api_the_pod_waits_with_what_to_turn_on() -> None:
    api = API(workload(), cpg_v1beta1(), child("large"), composites=())
    with pytest.raises(GroupError) as err:
        await GroupResolver(api.get).resolve(member("large-0", "large"))
    assert err.value.reason == names.REASON_COMPOSITE_API_NOT_SERVED
    assert f"{G}/v1beta1=true on Kubernetes 1.38" in err.value.message


@pytest.mark.parametrize("disruption", [{"all": {}}, {"single": {}}], ids=["all", "single"])
async def test_a_gang_composite_honours_either_disruption_mode(disruption: Obj) -> None:
    """One heterogeneous Slurm job, preempted and ended whole: all holds, single more strictly."""
    api = API(workload(), cpg_v1beta1(disruptionMode=disruption), child("large"), composites=("v1beta1",))
    group = await GroupResolver(api.get).resolve(member("large-0", "large"))
    assert isinstance(group, CompositeGroup) and group.name == "cpg-c"


# --- the scheduled condition, at the served version -----------------------------------------------


def phj_for(api_version: str) -> Obj:
    source = {"apiVersion": api_version, "kind": "CompositePodGroup", "name": "c", "uid": "uid-CompositePodGroup-c"}
    return {"metadata": {"namespace": NS, "name": "cpg-c"}, "spec": {"group": source}}


@pytest.mark.parametrize(
    ("recorded", "composites", "written"),
    [(f"{G}/v1beta1", ("v1beta1",), "v1beta1"),  # made on 1.38
     (f"{G}/v1alpha3", ("v1beta1",), "v1beta1"),  # made on 1.37, the cluster upgraded since
     (f"{G}/v1alpha3", ("v1beta1", "v1alpha3"), "v1beta1"),  # the newest served
     (f"{G}/v1alpha3", ("v1alpha3",), "v1alpha3"),  # 1.37
     (f"{G}/v1beta1", (), "v1beta1")],  # discovery names none: the recorded version
)  # fmt: skip
async def test_the_composite_condition_is_written_at_the_served_version(
    recorded: str, composites: tuple[str, ...], written: str
) -> None:
    cpg = cpg_v1beta1()
    cpg["metadata"].update(resourceVersion="4", generation=1)
    api = API(cpg, composites=composites)
    api.objects.setdefault(f"/apis/{recorded}/namespaces/{NS}/compositepodgroups/c", cpg)
    await CompositeReporter(api).report(phj_for(recorded), True, "Scheduled", "Slurm heterogeneous job 5 allocated")
    assert api.patches == [f"/apis/{G}/{written}/namespaces/{NS}/compositepodgroups/c/status"]
    (cond,) = api.bodies[0]["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "CompositePodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )


async def test_a_failed_discovery_writes_at_the_recorded_version() -> None:
    cpg = cpg_v1beta1()
    cpg["metadata"].update(resourceVersion="4")
    api = API(cpg, composites=("v1beta1",), fail={f"/apis/{G}": 503})
    await CompositeReporter(api).report(phj_for(f"{G}/v1beta1"), False, "Unschedulable", "pending")
    assert api.patches == [f"/apis/{G}/v1beta1/namespaces/{NS}/compositepodgroups/c/status"]


async def test_slurms_preemption_of_the_composites_job_says_disruption_target_once() -> None:
    """The bridge, the composite's scheduler, says its gang is preempted as kube-scheduler would:
    ``DisruptionTarget``, reason ``PreemptionByScheduler``, beside the scheduled condition."""
    cpg = cpg_v1beta1()
    cpg["metadata"].update(resourceVersion="4", generation=1)
    scheduled = {"type": "CompositePodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled",
                 "message": "m", "lastTransitionTime": "2026-12-02T06:00:00Z"}  # fmt: skip
    cpg["status"] = {"conditions": [scheduled]}
    api = API(cpg, composites=("v1beta1",))
    reporter = CompositeReporter(api)
    await reporter.disrupted(phj_for(f"{G}/v1beta1"), "Slurm job 5 is preempted")
    await reporter.disrupted(phj_for(f"{G}/v1beta1"), "Slurm job 5 is preempted")  # said once
    assert api.patches == [f"/apis/{G}/v1beta1/namespaces/{NS}/compositepodgroups/c/status"]
    conditions = {c["type"]: c for c in api.bodies[0]["status"]["conditions"]}
    assert conditions["CompositePodGroupInitiallyScheduled"]["status"] == "True"
    disrupted = conditions[names.GROUP_COND_DISRUPTION_TARGET]
    assert (disrupted["status"], disrupted["reason"]) == ("True", names.GROUP_REASON_PREEMPTION_BY_SCHEDULER)
    assert disrupted["message"] == "Slurm job 5 is preempted"


# --- admission: disruptionMode nesting in a Workload -------------------------------------------------

GANG_ALL: Obj = {"name": "all", "schedulingPolicy": {"gang": {"minGroupCount": 2}}, "disruptionMode": {"all": {}}}
# A PodGroupTemplate's schedulingConstraints has no omitempty: unset, it is null.
GANG_PG: Obj = {"name": "solver", "schedulingPolicy": {"gang": {"minCount": 4}}, "schedulingConstraints": None}
BASIC_PG: Obj = {"name": "viz", "schedulingPolicy": {"basic": {}}, "schedulingConstraints": None}
INNER: Obj = {"name": "inner", "schedulingPolicy": {"basic": {}}, "podGroupTemplates": [GANG_PG]}
WHERE = "spec.compositePodGroupTemplates[0]"


@pytest.mark.parametrize(
    ("template", "fields"),
    [({**GANG_ALL, "podGroupTemplates": [GANG_PG]}, []),
     ({**GANG_ALL, "podGroupTemplates": [GANG_PG, BASIC_PG]},
      [f"{WHERE}.podGroupTemplates[1].schedulingPolicy (basic) under {WHERE}.disruptionMode (all)"]),
     ({**GANG_ALL, "podGroupTemplates": [GANG_PG], "compositePodGroupTemplates": [INNER]},
      [f"{WHERE}.compositePodGroupTemplates[0] under {WHERE}.disruptionMode (all)"]),
     ({**GANG_ALL, "disruptionMode": {"single": {}}, "podGroupTemplates": [GANG_PG, BASIC_PG],
       "compositePodGroupTemplates": [INNER]}, []),  # single: children may be disrupted apart
     ({"name": "all", "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "podGroupTemplates": [BASIC_PG]},
      []),  # unset: single
     ({**GANG_ALL, "podGroupTemplates": [{**GANG_PG, "disruptionMode": {"single": {}}}]}, [])],  # inside the job
    ids=["gang children", "a basic child", "an inner composite", "single", "unset", "a single gang child"],
)  # fmt: skip
def test_disruption_mode_all_reaches_only_the_heterogeneous_job(template: Obj, fields: list[str]) -> None:
    problems = schedulingapi.workload_problems(workload(template))
    assert [p.split(": ")[0] for p in problems] == fields
    for p in problems:
        assert "one heterogeneous Slurm job" in p and "disruptionMode single" in p


def _create(kind: str, body: Obj, operation: str = "CREATE") -> Decision:
    request = AdmissionRequest("uid", operation, G, "v1beta1", kind, "", NS, "x", "someone", body,
                               body if operation == "UPDATE" else None)  # fmt: skip
    return validate(request, Config())


def test_the_webhook_refuses_the_workload_naming_the_child() -> None:
    decision = _create("Workload", workload({**GANG_ALL, "podGroupTemplates": [GANG_PG, BASIC_PG]}))
    assert not decision.allowed and decision.code == 422
    assert f"{WHERE}.podGroupTemplates[1].schedulingPolicy (basic)" in (decision.message or "")
    assert _create("Workload", workload({**GANG_ALL, "podGroupTemplates": [GANG_PG]})).allowed


@pytest.mark.parametrize(
    ("spec", "field"),
    [({"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}}, "spec.disruptionMode (all) without"),
     ({"schedulingConstraints": {"topology": [{"key": names.LABEL_TOPOLOGY_PREFIX + "block"}]}},
      "spec.schedulingConstraints.topology (")],
)  # fmt: skip
def test_a_v1beta1_composite_slurm_cannot_honour_is_refused(spec: Obj, field: str) -> None:
    decision = _create("CompositePodGroup", cpg_v1beta1(**spec))
    assert not decision.allowed and field in (decision.message or "")
    assert _create("CompositePodGroup", cpg_v1beta1(disruptionMode={"all": {}})).allowed


# --- admission: preemptionPolicy Never --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "body", "fields"),
    [("PodGroup", child("large"), []),
     ("PodGroup", obj(f"{G}/v1beta1", "PodGroup", "p", spec={**child("p")["spec"], "preemptionPolicy": "Never"}),
      ["spec.preemptionPolicy"]),
     ("CompositePodGroup", cpg_v1beta1(preemptionPolicy="Never"), ["spec.preemptionPolicy"]),
     ("CompositePodGroup", cpg_v1beta1(), []),
     ("Workload", workload({**GANG_ALL, "preemptionPolicy": "Never",
                            "podGroupTemplates": [{**GANG_PG, "preemptionPolicy": "Never"}]}),
      [f"{WHERE}.preemptionPolicy", f"{WHERE}.podGroupTemplates[0].preemptionPolicy"]),
     ("Workload", obj(f"{G}/v1beta1", "Workload", "w", spec={"podGroupTemplates": [
         {**GANG_PG, "preemptionPolicy": "Never"}, {**BASIC_PG, "preemptionPolicy": "PreemptLowerPriority"}]}),
      ["spec.podGroupTemplates[0].preemptionPolicy"])],
    ids=["PodGroup default", "PodGroup Never", "CompositePodGroup Never", "CompositePodGroup default",
         "composite template and child", "PodGroup template"],
)  # fmt: skip
def test_preemption_policy_never_is_accepted_with_a_warning(kind: str, body: Obj, fields: list[str]) -> None:
    """Slurm decides preemption by QOS and partition, not per job: Never is not translated. Not
    refused: 1.37 serves the same field at the same version, where it was accepted."""
    decision = _create(kind, body)
    assert decision.allowed
    warned = [w for w in decision.warnings if "preemptionPolicy (Never)" in w]
    assert [w.removeprefix("slurm-bridge: ").split(" (Never)")[0] for w in warned] == fields
    for w in warned:
        assert names.ANN_QOS in w and "PreemptType=preempt/none" in w
    # The field is immutable: an update (an annotation change) is not warned about again.
    assert not [w for w in _create(kind, body, "UPDATE").warnings if "preemptionPolicy" in w]
