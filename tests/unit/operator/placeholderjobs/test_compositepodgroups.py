"""CompositePodGroups (Kubernetes 1.37, scheduling.k8s.io/v1alpha3) as one heterogeneous Slurm
job: which pods belong to the composite and to which component, where each component's options
come from, how pods join, and the composite's scheduled condition
(operator/placeholderjobs/grouping/compositepodgroups.py, grouping/compositereader.py). A fake API
stands in for the server; it serves the PodGroup and the Workload at whichever scheduling.k8s.io
version the resolver discovers."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH
from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobSpec
from slurm_bridge.operator.placeholderjobs.grouping.compositepodgroups import (
    MAX_COMPONENTS,
    CompositeGroup,
    CompositeJoin,
    Part,
    composite_group,
    flat_pods,
    is_composite,
    min_group_count,
    parent_name,
    plan_composite_join,
)
from slurm_bridge.operator.placeholderjobs.grouping.groups import GroupError
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.shapes.composite import composite_spec
from slurm_bridge.operator.placeholderjobs.sync.groupconditions import CompositeReporter
from tests.unit.kubefakes import FakeKube, FakeStatusAPI
from tests.unit.operator.placeholderjobs.test_groups import JOB, NS, P, obj, pod

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

G = "scheduling.k8s.io"
CPG_V = f"{G}/v1alpha3"
PG_VERSIONS = ("v1alpha2", "v1beta1")  # where PodGroups and Workloads are served (either may be chosen)


def workload(name: str = "w", annotations: dict[str, str] | None = None) -> Obj:
    return obj(f"{G}/v1beta1", "Workload", name, annotations=annotations, spec={"compositePodGroupTemplates": [
        {"name": "all", "schedulingPolicy": {"gang": {"minGroupCount": 2}},
         "podGroupTemplates": [{"name": "small", "schedulingPolicy": {"gang": {"minCount": 1}}},
                               {"name": "large", "schedulingPolicy": {"gang": {"minCount": 2}}}]}]})  # fmt: skip


def composite(name: str = "c", *, policy: Obj | None = None, parent: str | None = None,
              annotations: dict[str, str] | None = None) -> Obj:  # fmt: skip
    spec: Obj = {"workloadRef": {"workloadName": "w", "templateName": "all"},
                 "schedulingPolicy": policy if policy is not None else {"gang": {"minGroupCount": 2}}}  # fmt: skip
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return obj(CPG_V, "CompositePodGroup", name, annotations=annotations, spec=spec)


def podgroup(name: str, *, parent: str | None = "c", min_count: int | None = 2,
             annotations: dict[str, str] | None = None) -> Obj:  # fmt: skip
    """A child PodGroup in the v1beta1 shape (workloadRef, parentCompositePodGroupName)."""
    spec: Obj = {"workloadRef": {"workloadName": "w", "templateName": name},
                 "schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}  # fmt: skip
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return obj(f"{G}/v1beta1", "PodGroup", name, annotations=annotations, spec=spec)


def member(name: str, group: str, **kw: Any) -> Obj:
    p = pod(name, **kw)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


class API(FakeKube):
    """GETs answered from stored objects (and discovery documents); chosen paths fail."""

    def __init__(self, *objs: Obj, served: tuple[str, ...] = ("v1", *PG_VERSIONS, "v1alpha3"),
                 fail: dict[str, int] | None = None) -> None:  # fmt: skip
        docs: dict[str, Obj] = {f"/apis/{G}": {"versions": [{"version": v} for v in served]}}
        for v in served:
            resources = ["workloads", "podgroups", "podgroups/status"] if v in PG_VERSIONS else []
            if v == "v1alpha3":
                resources += ["workloads", "podgroups", "compositepodgroups", "compositepodgroups/status"]
            docs[f"/apis/{G}/{v}"] = {"resources": [{"name": r} for r in resources]}
        super().__init__(fail=fail, docs=docs)
        for o in objs:
            self.put(o)

    def put(self, o: Obj) -> None:
        plural = {"Workload": "workloads", "PodGroup": "podgroups", "CompositePodGroup": "compositepodgroups",
                  "Job": "jobs"}[o["kind"]]  # fmt: skip
        versions = ["v1"] if o["kind"] == "Job" else ["v1alpha3"] if plural == "compositepodgroups" else PG_VERSIONS
        group = "batch" if o["kind"] == "Job" else G
        for v in versions:
            self.objects[f"/apis/{group}/{v}/namespaces/{NS}/{plural}/{o['metadata']['name']}"] = o


# --- the pure rules -------------------------------------------------------------------------------


def test_parent_policy_and_kind() -> None:
    assert parent_name(podgroup("a")) == "c"
    assert parent_name(podgroup("a", parent=None)) is None
    assert min_group_count(composite()) == 2
    assert min_group_count(composite(policy={"gang": {}})) == 1
    assert min_group_count(composite(policy={"basic": {}})) is None
    phj = {"spec": {"group": {"apiVersion": CPG_V, "kind": "CompositePodGroup", "name": "c", "uid": "u"}}}
    typed = PlaceholderJob.parse({"spec": {"pods": [], "slurm": {}, **phj["spec"]}})
    assert is_composite(phj) and typed.is_composite() and typed.is_gang()
    assert not is_composite({"spec": {"group": {"apiVersion": f"{G}/v1beta1", "kind": "PodGroup"}}})


def test_a_component_takes_its_podgroups_size_and_the_most_specific_options() -> None:
    wl = workload(annotations={P + "account": "wl", P + "partition": "wl", P + "qos": "wl", P + "timelimit": "9"})
    cpg = composite(annotations={P + "partition": "cpg", P + "qos": "cpg"})
    pg = podgroup("large", annotations={P + "qos": "pg", P + "mem-per-node": "2G"})
    group = composite_group(member("large-0", "large"), pg, cpg, JOB, wl)
    assert isinstance(group, CompositeGroup) and group.gang
    assert (group.name, group.namespace, group.component, group.min_member, group.min_components) == (
        "cpg-c", NS, "large", 2, 2)  # fmt: skip
    # Workload <- Job <- CompositePodGroup <- PodGroup: the most specific wins.
    assert group.annotations == {P + "account": "wl", P + "partition": "cpg", P + "qos": "pg",
                                 P + "timelimit": "90", P + "mem-per-node": "2G"}  # fmt: skip
    assert group.derived == {"job_name": "c", "time_limit_minutes": 61}  # the Job's deadline, rounded up
    uid = "uid-CompositePodGroup-c"
    assert group.owner == {"apiVersion": CPG_V, "kind": "CompositePodGroup", "name": "c", "uid": uid,
                           "blockOwnerDeletion": False}  # fmt: skip
    assert group.source["kind"] == "CompositePodGroup"
    assert group.derived_for(1) == {**group.derived, "nodes": 2}  # a node for each member it waits for
    assert group.derived_for(3)["nodes"] == 3


def test_a_components_podgroup_topology_places_that_component() -> None:
    """A child PodGroup's topology constraint is its component's: placed within one unit."""
    pg = podgroup("large")
    pg["spec"]["schedulingConstraints"] = {"topology": [{"key": names.LABEL_TOPOLOGY_PREFIX + "block"}]}
    group = composite_group(member("large-0", "large"), pg, composite(), None, None)
    assert group.derived == {"job_name": "c", "topology": "block"}
    pg["spec"]["schedulingConstraints"] = {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    assert "topology" not in composite_group(member("large-0", "large"), pg, composite(), None, None).derived


def test_names_at_the_limit() -> None:
    long = "c" * MAX_NAME_LENGTH
    group = composite_group(member("p", "a" * 253), podgroup("a" * 253, parent=long), composite(long), None, None)
    assert len(group.name) <= MAX_NAME_LENGTH and group.name.startswith("cpg-ccc")
    assert group.derived["job_name"] == "c" * 200  # spec.slurm.jobName holds 200
    assert group.component == "a" * 253


def parts(*specs: tuple[str, int, tuple[str, ...]]) -> tuple[Part, ...]:
    return tuple(Part(*s) for s in specs)


A = ("a", 1, ("a0",))
B = ("b", 2, ("b0", "b1"))
UIDS = {"a0": "ua0", "b0": "ub0", "b1": "ub1"}

JOINS: list[tuple[str, dict[str, Any], CompositeJoin]] = [
    ("a recorded member", dict(pod="b1", uid="ub1", component="b"), CompositeJoin("member")),
    ("a member whose uid was not recorded", dict(pod="b1", uid="x", component="b", uids={}), CompositeJoin("member")),
    ("a pod of an ended run", dict(pod="new", uid="n", component="b", terminal=True), CompositeJoin("recycle")),
    ("a new incarnation of a member's name", dict(pod="b1", uid="ub1-2", component="b"),
     CompositeJoin("replace", parts(A, B), {**UIDS, "b1": "ub1-2"}, slot="b1")),
    ("before submission a pod joins its component", dict(pod="b2", uid="ub2", component="b"),
     CompositeJoin("add", parts(A, ("b", 2, ("b0", "b1", "b2"))), {**UIDS, "b2": "ub2"})),
    ("a new PodGroup's first pod makes its component, in name order", dict(pod="aa0", uid="uaa0", component="aa"),
     CompositeJoin("add", parts(A, ("aa", 2, ("aa0",)), B), {**UIDS, "aa0": "uaa0"})),
    ("ended members of its own component drop out; the others' stay", dict(
        pod="b2", uid="ub2", component="b", ended={"b0", "a0"}),
     CompositeJoin("add", parts(A, ("b", 2, ("b1", "b2"))), {"a0": "ua0", "b1": "ub1", "b2": "ub2"})),
    ("a changed minCount is taken", dict(pod="b2", uid="ub2", component="b", minimum=3),
     CompositeJoin("add", parts(A, ("b", 3, ("b0", "b1", "b2"))), {**UIDS, "b2": "ub2"})),
    ("after submission: the slot of an ended member of its component", dict(
        pod="b2", uid="ub2", component="b", submitted=True, ended={"b0"}),
     CompositeJoin("replace", parts(A, ("b", 2, ("b2", "b1"))), {"a0": "ua0", "b1": "ub1", "b2": "ub2"},
                   slot="b0")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "expected"), JOINS, ids=[j[0] for j in JOINS])
def test_plan_composite_join(case: str, args: dict[str, Any], expected: CompositeJoin) -> None:
    got = plan_composite_join(
        parts(A, B), args.get("uids", UIDS), args["pod"], args["uid"], args["component"], args.get("minimum", 2),
        submitted=args.get("submitted", False), terminal=args.get("terminal", False), ended=args.get("ended", set()),
    )  # fmt: skip
    assert got == expected


@pytest.mark.parametrize(
    ("component", "ended", "why"),
    [("b", set(), "none of them has ended"),
     ("b", {"a0"}, "none of them has ended"),  # an ended member of another component holds another's node
     ("z", {"a0", "b0"}, "submitted without PodGroup z")],
)  # fmt: skip
def test_a_submitted_job_never_grows_nor_moves_nodes_between_components(component: str, ended: set[str],
                                                                       why: str) -> None:  # fmt: skip
    got = plan_composite_join(parts(A, B), UIDS, "new", "n", component, 1, submitted=True, terminal=False, ended=ended)
    assert got.action == "wait" and why in got.why


def test_at_most_128_components() -> None:
    full = tuple(Part(f"pg{i:03}", 1, (f"p{i}",)) for i in range(MAX_COMPONENTS))
    got = plan_composite_join(full, {}, "new", "n", "zz", 1, submitted=False, terminal=False, ended=())
    assert got.action == "wait" and "at most 128 components" in got.why
    assert (
        plan_composite_join(full, {}, "new", "n", "pg000", 1, submitted=False, terminal=False, ended=()).action == "add"
    )


def test_the_spec_of_a_composite_is_valid_and_flat() -> None:
    got = composite_spec(parts(A, B), {"a": {"nodes": 1, "cpusPerTask": 1}, "b": {"nodes": 2, "cpusPerTask": 4}}, 2)
    assert got["pods"] == list(flat_pods(parts(A, B))) == ["a0", "b0", "b1"]
    assert got["slurm"] == {"nodes": 1, "cpusPerTask": 1}  # component 0's, the leader's
    assert (got["minMember"], got["minComponents"]) == (3, 2)
    spec = PlaceholderJobSpec.model_validate({**got, "group": {"kind": "CompositePodGroup"}})
    assert [(c.pod_group, c.min_member, c.pods, c.slurm.nodes) for c in spec.components or []] == [
        ("a", 1, ["a0"], 1), ("b", 2, ["b0", "b1"], 2)]  # fmt: skip


# --- the resolver -------------------------------------------------------------------------------


def objects() -> list[Obj]:
    return [workload(), composite(), podgroup("small", min_count=1), podgroup("large")]


async def test_pods_of_every_child_resolve_to_the_composite_each_in_its_component() -> None:
    api = API(*objects())
    resolver = GroupResolver(api.get)
    small = await resolver.resolve(member("small-0", "small"))
    large = await resolver.resolve(member("large-1", "large"))
    assert isinstance(small, CompositeGroup) and isinstance(large, CompositeGroup)
    assert small.name == large.name == "cpg-c"
    assert (small.component, small.min_member, large.component, large.min_member) == ("small", 1, "large", 2)
    assert small.source["apiVersion"] == CPG_V
    # Discovery once; the CompositePodGroup is read per pod (a pod that is a member needs no read).
    assert api.reads.count(f"/apis/{G}/v1alpha3") == 1


async def test_a_basic_parent_leaves_each_podgroup_a_gang_of_its_own() -> None:
    api = API(workload(), composite(policy={"basic": {}}), podgroup("large"))
    group = await GroupResolver(api.get).resolve(member("large-0", "large"))
    assert not isinstance(group, CompositeGroup) and group.gang and group.name == "pg-large"


async def test_a_basic_parent_that_must_be_disrupted_all_together_is_refused() -> None:
    """Its children are separate Slurm jobs, which Slurm preempts one by one
    (docs/workloads.md#what-the-bridge-refuses-and-why)."""
    parent = composite(policy={"basic": {}})
    parent["spec"]["disruptionMode"] = {"all": {}}
    with pytest.raises(GroupError) as refused:
        await GroupResolver(API(workload(), parent, podgroup("large")).get).resolve(member("large-0", "large"))
    assert refused.value.reason == names.REASON_PODGROUP_UNSUPPORTED
    assert "CompositePodGroup c: spec.disruptionMode (all) without spec.schedulingPolicy.gang" in refused.value.message


@pytest.mark.parametrize("policy", [{"gang": {"minGroupCount": 2}}, {"basic": {}}])
async def test_a_composite_that_wants_its_own_topology_is_refused(policy: Obj) -> None:
    """Slurm places a heterogeneous job's components each on its own: the constraint belongs on each
    child PodGroup (docs/workloads.md#topology-a-gang-within-one-block-or-leaf-switch)."""
    parent = composite(policy=policy)
    parent["spec"]["schedulingConstraints"] = {"topology": [{"key": names.LABEL_TOPOLOGY_PREFIX + "block"}]}
    with pytest.raises(GroupError) as refused:
        await GroupResolver(API(workload(), parent, podgroup("large")).get).resolve(member("large-0", "large"))
    assert refused.value.reason == names.REASON_PODGROUP_UNSUPPORTED
    assert "CompositePodGroup c: spec.schedulingConstraints.topology (" in refused.value.message
    assert "on each child PodGroup" in refused.value.message


async def test_a_basic_podgroup_under_a_gang_composite_is_not_part_of_it() -> None:
    api = API(workload(), composite(), podgroup("small", min_count=None))
    group = await GroupResolver(api.get).resolve(member("small-0", "small"))
    assert not group.gang and group.name == "small-0"  # the usual rules: a bare pod is its own group


async def test_a_gang_inside_a_basic_composite_is_one_job() -> None:
    api = API(workload(), composite("outer", policy={"basic": {}}), composite("c", parent="outer"), podgroup("large"))
    group = await GroupResolver(api.get).resolve(member("large-0", "large"))
    assert isinstance(group, CompositeGroup) and group.name == "cpg-c"


CPG_PATH = f"/apis/{G}/v1alpha3/namespaces/{NS}/compositepodgroups/c"
COMPOSITE_ERRORS: list[tuple[str, API, str, str]] = [
    ("the CompositePodGroup does not exist yet: the pod waits for it", API(workload(), podgroup("large")),
     "CompositePodGroupNotFound", "names as its parent CompositePodGroup c"),
    ("the bridge may not read CompositePodGroups", API(*objects(), fail={CPG_PATH: 403}),
     "CompositePodGroupForbidden", "grant it get on compositepodgroups"),
    ("the API server fails", API(*objects(), fail={CPG_PATH: 500}), "CompositePodGroupUnreadable", "cannot read"),
    ("v1alpha3 is not served", API(*objects(), served=("v1", *PG_VERSIONS)), "CompositePodGroupAPINotServed",
     "CompositePodGroup feature gate"),
    ("a gang inside a gang", API(workload(), composite("outer"), composite("c", parent="outer"), podgroup("large")),
     names.REASON_NESTED_COMPOSITE, "cannot keep the inner minGroupCount"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "api", "reason", "detail"), COMPOSITE_ERRORS, ids=[e[0] for e in COMPOSITE_ERRORS])
async def test_composite_errors_keep_the_pod_waiting_with_a_reason(case: str, api: API, reason: str,
                                                                  detail: str) -> None:  # fmt: skip
    with pytest.raises(GroupError) as err:
        await GroupResolver(api.get).resolve(member("large-0", "large"))
    assert err.value.reason == reason
    assert detail in err.value.message
    assert err.value.retry_after > 0


async def test_the_api_not_served_names_runtime_config() -> None:
    with pytest.raises(GroupError) as err:
        await GroupResolver(API(*objects(), served=("v1", *PG_VERSIONS)).get).resolve(member("large-0", "large"))
    assert f"--runtime-config={G}/v1alpha3=true" in err.value.message


# --- the composite's condition ------------------------------------------------------------------


def phj_for(cpg: Obj) -> Obj:
    m = cpg["metadata"]
    return {
        "metadata": {"namespace": NS, "name": "cpg-" + m["name"]},
        "spec": {"group": {"apiVersion": CPG_V, "kind": "CompositePodGroup", "name": m["name"], "uid": m["uid"]}},
    }


async def test_the_composite_reports_scheduled_once_and_never_back() -> None:
    cpg = composite()
    cpg["metadata"].update(resourceVersion="4", generation=2)
    api = FakeStatusAPI(cpg)
    reporter = CompositeReporter(api)
    await reporter.report(phj_for(cpg), False, "Unschedulable", "Slurm job 5 is pending")
    await reporter.report(phj_for(cpg), True, "Scheduled", "Slurm heterogeneous job 5 allocated n[1-3]")
    await reporter.report(phj_for(cpg), True, "Scheduled", "Slurm heterogeneous job 5 allocated n[1-3]")
    assert len(api.patches) == 2
    path, body = api.patches[-1]
    assert path == CPG_PATH + "/status" and body["metadata"] == {"resourceVersion": "4"}
    (cond,) = body["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["observedGeneration"]) == (
        names.COMPOSITE_COND_SCHEDULED, "True", "Scheduled", 2)  # fmt: skip
    # True is final (Kubernetes' rule): a later pending report does not turn it back.
    await CompositeReporter(api).report(phj_for(cpg), False, "Unschedulable", "pending again")
    assert len(api.patches) == 2


async def test_other_placeholderjobs_are_not_reported() -> None:
    api = FakeStatusAPI(composite())
    pg = {"metadata": {"namespace": NS, "name": "pg-x"},
          "spec": {"group": {"apiVersion": f"{G}/v1beta1", "kind": "PodGroup", "name": "x", "uid": "u"}}}  # fmt: skip
    await CompositeReporter(api).report(pg, True, "Scheduled", "m")
    assert api.patches == []
