"""The neutral reader of the Workload API (slurm_bridge/kube/schedulingapi.py) on both shapes, the
version and gate messages, and the cached discovery around them (slurm_bridge/kube/clusterapis.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import KubeError
from slurm_bridge.kube.clusterapis import MISSING_TTL, Discovery
from slurm_bridge.kube.schedulingapi import KubeVersion, PodGroupView, kube_version, read_podgroup
from slurm_bridge.operator.placeholderjobs.sync.groupconditions import condition_change
from slurm_bridge.rules import workloadkinds
from tests.unit.kubefakes import FakeKube

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

BETA_PG: Obj = {
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "kind": "PodGroup",
    "spec": {
        "workloadRef": {"workloadName": "train", "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "disruptionMode": {"all": {}},
        "preemptionPolicy": "Never",
        "resourceClaims": [{"name": "fabric", "resourceClaimName": "ib"}],
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    },
}
ALPHA_PG: Obj = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "spec": {
        "podGroupTemplateRef": {"workload": {"workloadName": "train", "podGroupTemplateName": "workers"}},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "disruptionMode": "PodGroup",
        "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "ib"}],
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    },
}


def test_both_shapes_read_the_same() -> None:
    beta, alpha = read_podgroup(BETA_PG), read_podgroup(ALPHA_PG)
    common = {"min_count": 4, "workload": "train", "template": "workers", "claims": ("fabric",),
              "topology": ("topology.kubernetes.io/rack",), "disruption": "all"}  # fmt: skip
    for view in (beta, alpha):
        assert {k: getattr(view, k) for k in common} == common
    assert (beta.preemption, alpha.preemption) == ("Never", None)


@pytest.mark.parametrize(
    ("spec", "view"),
    [
        ({}, PodGroupView(None, None, None)),
        ({"schedulingPolicy": {"basic": {}}}, PodGroupView(None, None, None)),
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, PodGroupView(1, None, None)),
        ({"schedulingPolicy": {"gang": {"minCount": True}}}, PodGroupView(1, None, None)),
        ({"workloadRef": {"workloadName": "w"}}, PodGroupView(None, "w", None)),
        ({"podGroupTemplateRef": {}}, PodGroupView(None, None, None)),
        ({"podGroupTemplateRef": {"workload": None}}, PodGroupView(None, None, None)),
        ({"disruptionMode": "Pod"}, PodGroupView(None, None, None, disruption="single")),
        ({"disruptionMode": {"single": {}}}, PodGroupView(None, None, None, disruption="single")),
        ({"resourceClaims": [{}]}, PodGroupView(None, None, None, claims=("[0]",))),
        ({"resourceClaims": "junk", "schedulingConstraints": {"topology": "x"}}, PodGroupView(None, None, None)),
    ],
)
def test_read_podgroup_at_the_edges(spec: Obj, view: PodGroupView) -> None:
    assert read_podgroup({"spec": spec}) == view


def test_the_versions_the_table_reads_are_the_ones_described() -> None:
    assert (
        set(schedulingapi.VERSIONS)
        == set(workloadkinds.WORKLOAD_API_VERSIONS)
        == set(workloadkinds.SCHED_PODGROUP.versions)
    )
    assert schedulingapi.PREFERRED[0] == "v1beta1"
    assert schedulingapi.VERSIONS["v1beta1"].condition == names.PODGROUP_COND_INITIALLY_SCHEDULED
    assert schedulingapi.VERSIONS["v1alpha2"].condition == names.PODGROUP_COND_SCHEDULED
    assert schedulingapi.version_of("scheduling.k8s.io/v1beta1") is schedulingapi.VERSIONS["v1beta1"]
    assert schedulingapi.version_of("scheduling.x-k8s.io/v1alpha2") is None
    assert schedulingapi.version_of("scheduling.k8s.io/v1alpha1") is None


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        ({"v1beta1": {"podgroups", "workloads"}, "v1alpha2": {"podgroups"}}, "v1beta1"),
        ({"v1beta1": {"priorityclasses"}, "v1alpha2": {"podgroups"}}, "v1alpha2"),
        ({"v1alpha3": {"podgroups", "compositepodgroups"}}, None),
        ({"v1alpha1": {"workloads"}}, None),
        ({}, None),
    ],
)
def test_choose_version(served: dict[str, set[str]], chosen: str | None) -> None:
    assert schedulingapi.choose_version(served) == chosen


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"major": "1", "minor": "37", "gitVersion": "v1.37.2"}, KubeVersion("v1.37.2", 37)),
        ({"major": "1", "minor": "36+", "gitVersion": "v1.36.3-eks-1"}, KubeVersion("v1.36.3-eks-1", 36)),
        ({"gitVersion": "v1.34.3"}, KubeVersion("v1.34.3", 34)),
        ({"major": "2", "minor": "0", "gitVersion": "v2.0.0"}, KubeVersion("v2.0.0", None)),
        (None, KubeVersion()),
    ],
)
def test_kube_version(doc: Obj | None, expected: KubeVersion) -> None:
    assert kube_version(doc) == expected


@pytest.mark.parametrize(
    ("minor", "expected", "absent"),
    [
        (37, ("Kubernetes v1.x", "GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"), "1.36"),
        (36, ("GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true", "kube-controller-manager"),
         "v1beta1"),
        (35, ("upgrade to Kubernetes 1.36", "v1alpha1, which slurm-bridge does not read", "JobSet"), "runtime-config"),
        (34, ("has no Workload API", "upgrade to Kubernetes 1.36"), "v1alpha1"),
        (38, ("newer than 1.37", "--runtime-config=scheduling.k8s.io/v1beta1=true"), "v1alpha2"),
        (None, ("could not be read", "scheduling.k8s.io/v1beta1=true on 1.37",
                "scheduling.k8s.io/v1alpha2=true on 1.36"), "upgrade"),
    ],
)  # fmt: skip
def test_what_each_kubernetes_must_turn_on(minor: int | None, expected: tuple[str, ...], absent: str) -> None:
    message = schedulingapi.workload_api_needs(KubeVersion("v1.x" if minor else "", minor))
    for part in expected:
        assert part in message
    assert absent not in message


def test_not_served_message_names_what_is_served() -> None:
    message = schedulingapi.not_served_message("spec.schedulingGroup asks", KubeVersion("v1.37.2", 37), ["v1alpha3"])
    assert message.startswith("spec.schedulingGroup asks, but the API server serves no PodGroups at ")
    assert "(it serves scheduling.k8s.io/v1alpha3)" in message and "v1.37.2" in message


def test_resource_api_needs() -> None:
    assert "upgrade to 1.34" in schedulingapi.resource_api_needs(KubeVersion("v1.33.0", 33))
    assert "DynamicResourceAllocation=true" in schedulingapi.resource_api_needs(KubeVersion("v1.34.3", 34))


@pytest.mark.parametrize("pg", [BETA_PG, ALPHA_PG], ids=["v1beta1", "v1alpha2"])
def test_group_problems(pg: Obj) -> None:
    problems = schedulingapi.group_problems(pg["spec"], "spec")
    assert [p.split(":")[0] for p in problems] == [
        "spec.resourceClaims (fabric)",
        "spec.schedulingConstraints.topology (topology.kubernetes.io/rack)",
    ]
    assert "deviceclass.resource.kubernetes.io" in problems[0] and names.LABEL_TOPOLOGY_PREFIX in problems[1]
    gang = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert (
        schedulingapi.group_problems({**gang, "disruptionMode": {"all": {}}, "preemptionPolicy": "Never"}, "spec") == []
    )
    assert schedulingapi.group_problems({"resourceClaims": [], "schedulingConstraints": {}}, "spec") == []


def test_workload_problems_name_the_template() -> None:
    wl = {"spec": {"podGroupTemplates": [{"name": "a"}, {"name": "b", "resourceClaims": [{"name": "c"}]}]}}
    assert [p.split(":")[0] for p in schedulingapi.workload_problems(wl)] == [
        "spec.podGroupTemplates[1].resourceClaims (c)"
    ]
    assert schedulingapi.workload_problems({"spec": {"podGroupTemplates": "junk"}}) == []


@pytest.mark.parametrize(
    ("spec", "refused"),
    [({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}}, False),
     ({"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"single": {}}}, False),
     ({"schedulingPolicy": {"basic": {}}, "disruptionMode": {"single": {}}}, False),
     ({"schedulingPolicy": {"basic": {}}}, False),
     ({"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}}, True),
     ({"schedulingPolicy": {"basic": {}}, "disruptionMode": "PodGroup"}, True)],  # v1alpha2's word for all
)  # fmt: skip
def test_disruption_mode_all_needs_a_gang(spec: Obj, refused: bool) -> None:
    """A gang is one Slurm job, disrupted whole: all is honoured, single more strictly. A basic
    group's pods are separate Slurm jobs, which Slurm preempts one by one: all is refused."""
    problems = schedulingapi.group_problems(spec, "spec")
    assert bool(problems) == refused, problems
    if refused:
        assert problems[0].startswith("spec.disruptionMode (") and "schedulingPolicy.gang" in problems[0], problems


def test_a_workloads_composite_templates_are_checked_too() -> None:
    child = {"name": "w", "schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}}
    basic_all = {
        "name": "sim",
        "schedulingPolicy": {"basic": {}},
        "disruptionMode": {"all": {}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        "podGroupTemplates": [child],
    }
    problems = schedulingapi.workload_problems({"spec": {"compositePodGroupTemplates": [basic_all]}})
    assert [p.split(" (")[0] for p in problems] == [
        "spec.compositePodGroupTemplates[0].schedulingConstraints.topology",
        "spec.compositePodGroupTemplates[0].disruptionMode",
        "spec.compositePodGroupTemplates[0].podGroupTemplates[0].disruptionMode",
    ]
    assert "put the constraint on each child PodGroup" in problems[0]
    assert "one heterogeneous Slurm job" in problems[1]
    gang = {**basic_all, "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "schedulingConstraints": {}}
    gang["podGroupTemplates"] = []
    assert schedulingapi.workload_problems({"spec": {"compositePodGroupTemplates": [gang]}}) == []


BLOCK = names.LABEL_TOPOLOGY_PREFIX + "block"
GANG = {"schedulingPolicy": {"gang": {"minCount": 2}}}


def _constrained(*keys: str, **spec: Any) -> Obj:
    return {**GANG, "schedulingConstraints": {"topology": [{"key": k} for k in keys]}, **spec}


@pytest.mark.parametrize(
    ("spec", "topology", "refused"),
    [(_constrained(BLOCK), "block", ""),
     (_constrained(names.LABEL_TOPOLOGY_PREFIX + "s" * 63), "s" * 63, ""),
     (GANG, None, ""),
     (_constrained(), None, ""),
     (_constrained("topology.kubernetes.io/zone"), None, "cannot place a gang by 'topology.kubernetes.io/zone'"),
     (_constrained("kubernetes.io/hostname"), None, f"as {names.LABEL_TOPOLOGY_PREFIX}<topology>"),
     (_constrained(names.LABEL_TOPOLOGY_PREFIX + "s" * 64), None, "use such a key"),
     (_constrained(BLOCK, names.LABEL_TOPOLOGY_PREFIX + "switch"), None, "keep one key"),
     (_constrained(BLOCK, schedulingPolicy={"basic": {}}), None, "give the group a gang policy")],
)  # fmt: skip
def test_a_gangs_topology_key_names_a_slurm_topology(spec: Obj, topology: str | None, refused: str) -> None:
    """A gang is one Slurm job, placed within one block or leaf switch of the topology its key
    names; any other key, several, or a basic group's is refused, naming the field."""
    problems = schedulingapi.group_problems(spec, "spec")
    assert schedulingapi.topology_of(spec) == topology
    if refused:
        assert len(problems) == 1 and problems[0].startswith("spec.schedulingConstraints.topology ("), problems
        assert refused in problems[0], problems
    else:
        assert problems == []


def test_a_composite_templates_child_may_carry_a_topology_but_not_the_composite() -> None:
    child = {"name": "w", **_constrained(BLOCK)}
    composite = {"name": "sim", "schedulingPolicy": {"gang": {"minGroupCount": 1}}, "podGroupTemplates": [child]}
    assert schedulingapi.workload_problems({"spec": {"compositePodGroupTemplates": [composite]}}) == []
    composite["schedulingConstraints"] = {"topology": [{"key": BLOCK}]}
    (problem,) = schedulingapi.workload_problems({"spec": {"compositePodGroupTemplates": [composite]}})
    assert problem.startswith("spec.compositePodGroupTemplates[0].schedulingConstraints.topology (")


def test_job_scheduling() -> None:
    assert schedulingapi.job_gang({"scheduling": {"schedulingPolicy": {"gang": {}}}})
    assert not schedulingapi.job_gang({"scheduling": {"schedulingPolicy": {"basic": {}}}})
    assert not schedulingapi.job_gang({"scheduling": {}}) and not schedulingapi.job_gang({})
    assert schedulingapi.job_scheduling({"scheduling": None}) is None


def test_v1alpha1_workload_ref() -> None:
    assert schedulingapi.v1alpha1_workload_ref({"workloadRef": {"name": "w", "podGroup": "g"}}) == "w"
    assert schedulingapi.v1alpha1_workload_ref({"workloadRef": {}}) is None
    assert schedulingapi.v1alpha1_workload_ref({"workloadRef": {"podGroup": "g"}}) == "?"
    assert schedulingapi.v1alpha1_workload_ref({}) is None


# --- the condition a report writes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "current", "report", "write"),
    [
        ("v1alpha2", None, (True, "Scheduled", "m"), True),
        ("v1alpha2", ("True", "Scheduled", "m"), (True, "Scheduled", "m"), False),
        ("v1alpha2", ("True", "Scheduled", "m"), (False, "Unschedulable", "p"), True),
        ("v1beta1", None, (False, "Unschedulable", "p"), True),
        ("v1beta1", ("False", "Unschedulable", "p"), (True, "Scheduled", "m"), True),
        ("v1beta1", ("True", "Scheduled", "m"), (False, "Unschedulable", "p"), False),
        ("v1beta1", ("True", "Scheduled", "m"), (True, "Scheduled", "other run"), False),
    ],
)
def test_condition_change(
    version: str, current: tuple[str, str, str] | None, report: tuple[bool, str, str], write: bool
) -> None:
    v = schedulingapi.VERSIONS[version]
    conditions = [{"type": "Other", "status": "True"}]
    if current:
        conditions.append({"type": v.condition, "status": current[0], "reason": current[1], "message": current[2]})
    assert condition_change(v, conditions, *report) is write


# --- discovery, cached ---------------------------------------------------------------------------


def discovery(docs: dict[str, Obj], fail: dict[str, int] | None = None) -> FakeKube:
    """Discovery documents by path; chosen paths fail with an HTTP status."""
    return FakeKube(docs=docs, fail=fail)


BOTH: dict[str, Obj] = {
    "/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
    "/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}, {"version": "v1beta1"}, {"version": "v1alpha3"}]},
    "/apis/scheduling.k8s.io/v1beta1": {"resources": [{"name": "podgroups"}, {"name": "workloads"}]},
    "/apis/scheduling.k8s.io/v1alpha3": {"resources": [{"name": "podgroups"}, {"name": "compositepodgroups"}]},
    "/apis/resource.k8s.io/v1": {"resources": [{"name": "resourceclaims"}, {"name": "resourceslices"}]},
}


async def test_discovery_answers_and_caches() -> None:
    docs = discovery(BOTH)
    now = [0.0]
    apis = Discovery(docs.get, ttl=60, clock=lambda: now[0])
    answers = await asyncio.gather(*(apis.workload_version() for _ in range(5)))
    assert answers == ["v1beta1"] * 5
    assert docs.reads.count("/apis/scheduling.k8s.io") == 1, "concurrent askers share one read"
    assert "/apis/scheduling.k8s.io/v1" not in docs.reads, "v1 holds only PriorityClasses"
    assert await apis.serves_resource_claims() is True
    assert (await apis.kube_version()).minor == 37
    assert await apis.workload_api_missing("x") is None
    now[0] = 59
    await apis.workload_version()
    assert docs.reads.count("/apis/scheduling.k8s.io") == 1
    now[0] = 61
    await apis.workload_version()
    assert docs.reads.count("/apis/scheduling.k8s.io") == 2
    apis.forget()
    await apis.workload_version()
    assert docs.reads.count("/apis/scheduling.k8s.io") == 3


async def test_a_missing_api_is_looked_for_again_sooner() -> None:
    missing: dict[str, Obj] = {
        "/version": BOTH["/version"],
        "/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}]},
    }
    docs = discovery(missing)
    now = [0.0]
    apis = Discovery(docs.get, ttl=60, clock=lambda: now[0])
    message = await apis.workload_api_missing("a pod names a PodGroup")
    assert message is not None and "Kubernetes v1.37.2" in message and "scheduling.k8s.io/v1beta1=true" in message
    assert await apis.serves_resource_claims() is False
    docs.docs = BOTH
    now[0] = MISSING_TTL + 1
    assert await apis.workload_version() == "v1beta1"
    assert await apis.serves_resource_claims() is True


async def test_discovery_errors_are_raised_and_not_remembered() -> None:
    docs = discovery(BOTH, fail={"/apis/scheduling.k8s.io": 503, "/version": 403})
    apis = Discovery(docs.get)
    with pytest.raises(KubeError):
        await apis.workload_version()
    assert await apis.kube_version() == KubeVersion(), "an unreadable version is unknown, not an error"
    docs.fail = {}
    assert await apis.workload_version() == "v1beta1"
