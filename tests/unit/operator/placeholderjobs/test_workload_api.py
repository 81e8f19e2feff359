"""The Kubernetes Workload API at both versions the bridge reads (v1beta1 of 1.37, v1alpha2 of
1.36), each test on both shapes: pods naming a built-in PodGroup (spec.schedulingGroup) with a
``gang`` policy form a gang (a ``basic`` policy leaves the usual rules to decide, as in the Go
bridge); options merge PodGroup <- controller <- Workload; PodGroups the 1.37 Job controller makes
are read like hand-made ones; the PodGroup's scheduled condition is written once per change, with
each version's type; admission refuses what Slurm cannot give a gang (a fake API stands in for the
server)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH
from slurm_bridge.kube.clusterapis import Discovery
from slurm_bridge.operator.placeholderjobs.grouping.groups import GroupError, gang_min_count, workload_name
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.sync.groupconditions import PodGroupReporter, podgroup_of
from slurm_bridge.rules.translate import job_request
from slurm_bridge.webhook.review import AdmissionRequest, Decision
from slurm_bridge.webhook.validate import validate
from tests.unit.kubefakes import FakeKube, FakeStatusAPI
from tests.unit.operator.placeholderjobs.test_groups import JOB, JOBSET, JOBSET_JOB, NS, P, obj, path_of, pod, ref

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

GROUP = "scheduling.k8s.io"
KUBE = {"v1beta1": "v1.37.2", "v1alpha2": "v1.36.3"}


@dataclass(frozen=True)
class Shape:
    """One served version of the Workload API and how its objects look."""

    version: str

    @property
    def api(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def base(self) -> str:
        return f"/apis/{self.api}/namespaces/{NS}"

    @property
    def condition(self) -> str:
        return names.PODGROUP_COND_INITIALLY_SCHEDULED if self.version == "v1beta1" else names.PODGROUP_COND_SCHEDULED

    def docs(self) -> dict[str, Obj]:
        git = KUBE[self.version]
        return {
            "/version": {"major": "1", "minor": git.split(".")[1], "gitVersion": git},
            f"/apis/{GROUP}": {"versions": [{"version": "v1"}, {"version": self.version}]},
            f"/apis/{self.api}": {"resources": [{"name": n} for n in ("workloads", "podgroups", "podgroups/status")]},
        }

    def workload_ref(self, workload: str, template: str) -> Obj:
        """How a PodGroup names the Workload and template it was made from."""
        if self.version == "v1beta1":
            return {"workloadRef": {"workloadName": workload, "templateName": template}}
        return {"podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": template}}}


SHAPES = [Shape("v1beta1"), Shape("v1alpha2")]


@pytest.fixture(params=SHAPES, ids=[s.version for s in SHAPES])
def shape(request: pytest.FixtureRequest) -> Shape:
    s: Shape = request.param
    return s


def workload(s: Shape, name: str = "train", annotations: dict[str, str] | None = None, **kw: Any) -> Obj:
    return obj(s.api, "Workload", name, annotations=annotations, spec={
        "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]}, **kw)  # fmt: skip


def podgroup(s: Shape, name: str = "train-workers", *, policy: Obj | None = None, wl: str | None = "train",
             template: str = "workers", annotations: dict[str, str] | None = None, extra: Obj | None = None,
             **kw: Any) -> Obj:  # fmt: skip
    spec: Obj = {"schedulingPolicy": policy if policy is not None else {"gang": {"minCount": 2}}}
    if wl:
        spec.update(s.workload_ref(wl, template))
    return obj(s.api, "PodGroup", name, annotations=annotations, spec={**spec, **(extra or {})}, **kw)


class API(FakeKube):
    def __init__(self, s: Shape, *objs: Obj, docs: dict[str, Obj] | None = None,
                 fail: dict[str, int] | None = None) -> None:  # fmt: skip
        super().__init__(fail=fail, docs=s.docs() if docs is None else docs)
        for o in objs:
            plural = {"Workload": "workloads", "PodGroup": "podgroups"}.get(o["kind"])
            if plural and o["apiVersion"].startswith(GROUP + "/"):
                self.objects[f"/apis/{o['apiVersion']}/namespaces/{NS}/{plural}/{o['metadata']['name']}"] = o
            else:
                self.objects[path_of(o)] = o


def member(name: str = "train-0", group: str = "train-workers", **kw: Any) -> Obj:
    p = pod(name, **kw)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


async def test_gang_from_podgroup_with_merged_options(shape: Shape) -> None:
    job = obj("batch/v1", "Job", "train", annotations={P + "account": "job", P + "qos": "job"},
              spec={"activeDeadlineSeconds": 600})  # fmt: skip
    api = API(
        shape,
        podgroup(shape, annotations={P + "job-name": "per-gang", P + "qos": "pg", P + "account": "pg"}),
        workload(shape, annotations={P + "account": "wl", P + "partition": "debug"}),
        job,
    )
    group = await GroupResolver(api.get).resolve(member(owner=job, annotations={P + "qos": "pod-ignored"}))
    assert group.gang and group.min_member == 2
    assert group.name == "pg-train-workers"
    src = group.source
    assert (src["apiVersion"], src["kind"], src["name"]) == (shape.api, "PodGroup", "train-workers")
    assert (group.owner["kind"], group.owner["name"]) == ("PodGroup", "train-workers")
    # PodGroup <- selected controller <- Workload: the Workload wins, the pod's own do not count.
    assert group.annotations == {P + "job-name": "per-gang", P + "qos": "job", P + "account": "wl",
                                 P + "partition": "debug"}  # fmt: skip
    assert group.derived == {"time_limit_minutes": 10, "job_name": "train-workers"}
    assert group.derived_for(1)["nodes"] == 2  # the gang holds a node for each member it waits for
    assert f"{shape.base}/workloads/train" in api.reads


async def test_the_slurm_job_is_named_after_the_podgroup_unless_an_annotation_says(shape: Shape) -> None:
    policy = {"gang": {"minCount": 2}}
    long_name = "w" * 253  # the CRD's spec.slurm.jobName holds 200 characters
    for name, wl_annotations, expected in (
        ("train-workers", None, "train-workers"),
        (long_name, None, long_name[:200]),
        ("train-workers", {P + "job-name": "from-workload"}, "from-workload"),
    ):
        api = API(shape, podgroup(shape, name, policy=policy), workload(shape, annotations=wl_annotations))
        the_pod = member(group=name)
        group = await GroupResolver(api.get).resolve(the_pod)
        request = job_request([the_pod], config=Config(), derived=group.derived_for(1), annotations=group.annotations)
        assert request.job_name == expected
        assert len(group.name) <= MAX_NAME_LENGTH


async def test_jobset_above_the_job_is_the_selected_controller(shape: Shape) -> None:
    api = API(shape, podgroup(shape, wl=None), JOBSET_JOB, JOBSET)
    group = await GroupResolver(api.get).resolve(member("js-a-0-0", owner=JOBSET_JOB))
    # The intermediate Job's annotations are ignored; the JobSet's apply.
    assert group.annotations == {P + "partition": "gpu", P + "timelimit": "30"}
    assert group.gang and group.min_member == 2


async def test_the_podgroup_wins_over_a_coscheduling_label(shape: Shape) -> None:
    api = API(shape, podgroup(shape, wl=None))
    group = await GroupResolver(api.get).resolve(member(labels={names.LABEL_POD_GROUP: "other"}))
    assert group.source["kind"] == "PodGroup" and group.source["apiVersion"] == shape.api


async def test_basic_policy_leaves_the_usual_rules_to_decide(shape: Shape) -> None:
    """As in the Go slurm-bridge: ``basic`` asks for no gang, so the owner rules decide (a Job's pod
    is its own job with the Job's options; a bare pod keeps its own annotations)."""
    api = API(shape, podgroup(shape, policy={"basic": {}}, annotations={P + "qos": "pg"}), workload(shape), JOB)
    group = await GroupResolver(api.get).resolve(member("train-x", owner=JOB))
    assert not group.gang and group.min_member == 1 and group.name == "train-x"
    assert (group.source["kind"], group.source["name"]) == ("Job", "train")
    assert group.annotations == {P + "timelimit": "90"}
    bare = await GroupResolver(api.get).resolve(member("solo", annotations={P + "qos": "mine"}))
    assert (bare.name, bare.annotations, bare.gang) == ("solo", {P + "qos": "mine"}, False)
    assert f"{shape.base}/workloads/train" not in api.reads, "a basic PodGroup's Workload is not read"


async def test_discovery_is_done_once(shape: Shape) -> None:
    api = API(shape, podgroup(shape, wl=None))
    resolver = GroupResolver(api.get)
    for i in range(3):
        await resolver.resolve(member(f"p{i}"))
    assert api.reads.count(f"/apis/{GROUP}") == 1
    assert api.reads.count(f"/apis/{shape.api}") == 1
    assert "/version" not in api.reads, "the version is read only to explain an API that is not served"


async def test_v1beta1_is_preferred_when_both_are_served() -> None:
    beta, alpha = SHAPES
    versions = [{"version": v} for v in ("v1", "v1alpha2", "v1beta1")]
    docs = {**alpha.docs(), **beta.docs(), f"/apis/{GROUP}": {"versions": versions}}
    api = API(beta, podgroup(beta, wl=None), podgroup(alpha, wl=None), docs=docs)
    group = await GroupResolver(api.get).resolve(member())
    assert group.source["apiVersion"] == beta.api
    assert f"{alpha.base}/podgroups/train-workers" not in api.reads


async def test_discovery_is_asked_again_after_a_while(shape: Shape) -> None:
    """An administrator who turns the API on restarts the API server; the bridge sees it without a restart."""
    now = [0.0]
    api = API(shape, podgroup(shape, wl=None), docs={f"/apis/{GROUP}": {"versions": [{"version": "v1"}]}})
    resolver = GroupResolver(api.get, apis=Discovery(api.get, clock=lambda: now[0]))
    with pytest.raises(GroupError) as err:
        await resolver.resolve(member())
    assert err.value.reason == "WorkloadAPINotServed"
    api.docs = shape.docs()
    now[0] += 11  # a missing API is looked for again after 10 s
    assert (await resolver.resolve(member())).gang


# --- PodGroups the Job controller makes (Kubernetes 1.37, gate WorkloadWithJob) -------------------


def controller_made(s: Shape, job: Obj, min_count: int | None = 2) -> tuple[Obj, Obj, list[Obj]]:
    """The Workload, PodGroup and pods the Job controller makes for ``job``, shaped exactly as
    kubernetes v1.37.2 pkg/controller/job/job_scheduling_manager.go and the workloadbuilder
    (v1beta1), or v1.36.3's (v1alpha2, an Indexed Job with parallelism == completions), do:
    names ``<job>-<hash>`` and ``<workload>-<template>-<hash>``, template ``<job>-pgt-0``, the Job
    as controller of both, the Workload as a non-controller owner of the PodGroup, the pods owned by
    the Job and (non-controller) by the PodGroup, naming it in spec.schedulingGroup."""
    jname, template = job["metadata"]["name"], f"{job['metadata']['name']}-pgt-0"
    wname = f"{jname}-5d8f7c9b4x"
    policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    wl_spec: Obj = {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": jname},
                    "podGroupTemplates": [{"name": template, "schedulingPolicy": policy}]}  # fmt: skip
    wl = obj(s.api, "Workload", wname, owner=job, spec=wl_spec)
    wl["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    pg_spec: Obj = {**s.workload_ref(wname, template), "schedulingPolicy": policy}
    if s.version == "v1beta1":
        pg_spec |= {"disruptionMode": {"single": {}}, "priority": 0}  # API defaults and the Priority plugin
    pg = obj(s.api, "PodGroup", f"{wname}-{template}-7b6c5d4f9x", owner=job, spec=pg_spec,
             extra_owners=[ref(wl, controller=False)])  # fmt: skip
    pods = []
    for i in range(2):
        p = pod(f"{jname}-{i}-abcde", owner=job, labels={"batch.kubernetes.io/job-name": jname, "job-name": jname},
                extra_owners=[ref(pg, controller=False)])  # fmt: skip
        p["spec"]["schedulingGroup"] = {"podGroupName": pg["metadata"]["name"]}
        pods.append(p)
    return wl, pg, pods


async def test_a_job_controller_podgroup_is_a_gang_configured_by_the_job(shape: Shape) -> None:
    job = obj("batch/v1", "Job", "train", annotations={P + "account": "physics", P + "partition": "batch"},
              spec={"parallelism": 2, "completions": 2, "activeDeadlineSeconds": 120,
                    "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}}})  # fmt: skip
    wl, pg, pods = controller_made(shape, job)
    api = API(shape, job, wl, pg)
    resolver = GroupResolver(api.get)
    groups = [await resolver.resolve(p) for p in pods]
    assert {g.name for g in groups} == {f"pg-{pg['metadata']['name']}"}, "both pods: one gang"
    group = groups[0]
    assert group.gang and group.min_member == 2
    assert (group.owner["kind"], group.owner["name"], group.owner["uid"]) == (
        "PodGroup", pg["metadata"]["name"], pg["metadata"]["uid"])  # fmt: skip
    assert group.annotations == {P + "account": "physics", P + "partition": "batch"}
    assert group.derived == {"time_limit_minutes": 2, "job_name": pg["metadata"]["name"]}
    assert f"{shape.base}/workloads/{wl['metadata']['name']}" in api.reads


async def test_a_job_controller_basic_podgroup_leaves_each_pod_its_own_job(shape: Shape) -> None:
    """Kubernetes 1.37 gives every Job a ``basic`` PodGroup when WorkloadWithJob is on: its pods
    stay one Slurm job each, configured by the Job."""
    job = obj("batch/v1", "Job", "plain", annotations={P + "qos": "normal"}, spec={"parallelism": 2})
    wl, pg, pods = controller_made(shape, job, min_count=None)
    api = API(shape, job, wl, pg)
    group = await GroupResolver(api.get).resolve(pods[0])
    assert (group.gang, group.name, group.source["kind"]) == (False, pods[0]["metadata"]["name"], "Job")
    assert group.annotations == {P + "qos": "normal"}


async def test_a_job_controller_podgroup_of_the_longest_names(shape: Shape) -> None:
    """A Job's name has at most 63 characters; the controller's PodGroup name may then reach 253."""
    job = obj("batch/v1", "Job", "j" * 63, spec={"parallelism": 2})
    wl, pg, pods = controller_made(shape, job)
    pg["metadata"]["name"] = "p" * 253
    for p in pods:
        p["spec"]["schedulingGroup"]["podGroupName"] = "p" * 253
    api = API(shape, job, wl, pg)
    group = await GroupResolver(api.get).resolve(pods[0])
    assert len(group.name) <= MAX_NAME_LENGTH and group.name.startswith("pg-ppp")
    assert group.derived["job_name"] == "p" * 200


# --- refusals and errors --------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [{"gang": {"minCount": 2}}, {"basic": {}}], ids=["gang", "basic"])
@pytest.mark.parametrize(
    ("extra", "detail"),
    [({"resourceClaims": [{"name": "fabric", "resourceClaimName": "ib"}]}, "spec.resourceClaims (fabric)"),
     ({"schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]}},
      "spec.schedulingConstraints.topology (topology.kubernetes.io/rack)")],
    ids=["shared claims", "topology"],
)  # fmt: skip
async def test_a_podgroup_slurm_cannot_honour_holds_its_pods_with_why(
    shape: Shape, policy: Obj, extra: Obj, detail: str
) -> None:
    api = API(shape, podgroup(shape, policy=policy, extra=extra), workload(shape), JOB)
    with pytest.raises(GroupError) as err:
        await GroupResolver(api.get).resolve(member(owner=JOB))
    assert err.value.reason == "PodGroupUnsupported"
    assert detail in err.value.message and "train-workers" in err.value.message
    assert err.value.retry_after >= 60


def _errors(s: Shape) -> list[tuple[str, API, str, tuple[str, ...]]]:
    no_api: dict[str, Obj] = {"/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.2"},
              f"/apis/{GROUP}": {"versions": [{"version": "v1"}]}}  # fmt: skip
    return [
        ("the PodGroup does not exist yet: the pod waits for it", API(s, workload(s)), "PodGroupNotFound",
         ("train-workers", s.api)),
        ("its Workload does not exist yet", API(s, podgroup(s)), "WorkloadNotFound", ("Workload train",)),
        ("the bridge may not read PodGroups", API(s, fail={f"{s.base}/podgroups/train-workers": 403}),
         "PodGroupForbidden", ("grant it get on podgroups",)),
        ("the Workload API is not served", API(s, docs=no_api), "WorkloadAPINotServed",
         ("Kubernetes v1.37.2", "GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true")),
        ("the group is not there at all", API(s, docs={"/version": {"major": "1", "minor": "36+",
                                                                    "gitVersion": "v1.36.3-gke.1"}}),
         "WorkloadAPINotServed", ("v1.36.3-gke.1", "--runtime-config=scheduling.k8s.io/v1alpha2=true")),
        ("only an unknown version serves PodGroups",
         API(s, docs={f"/apis/{GROUP}": {"versions": [{"version": "v1"}, {"version": "v9"}]},
                      f"/apis/{GROUP}/v9": {"resources": [{"name": "podgroups"}]}}),
         "WorkloadAPINotServed", ("scheduling.k8s.io/v9", "its version could not be read")),
        ("discovery fails", API(s, fail={f"/apis/{GROUP}": 500}), "WorkloadAPIUnreadable", ("scheduling.k8s.io",)),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(_errors(SHAPES[0]))), ids=[e[0] for e in _errors(SHAPES[0])])
async def test_errors(shape: Shape, case: int) -> None:
    _, api, reason, details = _errors(shape)[case]
    with pytest.raises(GroupError) as err:
        await GroupResolver(api.get).resolve(member())
    assert err.value.reason == reason
    for detail in details:
        assert detail in err.value.message
    assert err.value.retry_after > 0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [({"schedulingPolicy": {"gang": {"minCount": 4}}}, 4), ({"schedulingPolicy": {"gang": {}}}, 1),
     ({"schedulingPolicy": {"basic": {}}}, None), ({}, None)],
)  # fmt: skip
def test_gang_min_count(spec: Obj, expected: int | None) -> None:
    assert gang_min_count({"spec": spec}) == expected


def test_workload_name(shape: Shape) -> None:
    assert workload_name(podgroup(shape)) == "train"
    assert workload_name(podgroup(shape, wl=None)) is None


# --- the PodGroup's condition -------------------------------------------------------------------


def reporter(api: FakeStatusAPI, served: Shape) -> PodGroupReporter:
    docs = served.docs()

    async def discover(path: str) -> Obj | None:
        return docs.get(path)

    return PodGroupReporter(api, Discovery(discover))


def phj_for(pg: Obj) -> Obj:
    m = pg["metadata"]
    return {"metadata": {"namespace": NS, "name": "pg-" + m["name"]},
            "spec": {"group": {"apiVersion": pg["apiVersion"], "kind": "PodGroup", "name": m["name"],
                               "uid": m["uid"]}}}  # fmt: skip


def _pg(s: Shape) -> Obj:
    pg = podgroup(s)
    pg["metadata"].update(resourceVersion="7", generation=3)
    pg["status"] = {"conditions": [{"type": "Other", "status": "True", "reason": "X", "message": ""}]}
    return pg


async def test_condition_written_once_per_change_and_keeps_others(shape: Shape) -> None:
    pg = _pg(shape)
    api = FakeStatusAPI(pg)
    rep = reporter(api, shape)
    await rep.report(phj_for(pg), False, "Unschedulable", "Slurm job 5 is pending: Resources")
    await rep.report(phj_for(pg), False, "Unschedulable", "Slurm job 5 is pending: Resources")
    await rep.report(phj_for(pg), True, "Scheduled", "Slurm job 5 allocated n[1-2]")
    assert len(api.patches) == 2
    path, body = api.patches[-1]
    assert path == f"{shape.base}/podgroups/train-workers/status"
    assert body["metadata"] == {"resourceVersion": "7"}  # never over a change it did not see
    conds = {c["type"]: c for c in body["status"]["conditions"]}
    assert conds["Other"]["reason"] == "X"
    sched = conds[shape.condition]
    assert (sched["status"], sched["reason"], sched["observedGeneration"]) == ("True", "Scheduled", 3)
    assert api.gets == 2


async def test_condition_already_there_after_a_restart_is_not_written(shape: Shape) -> None:
    pg = _pg(shape)
    pg["status"]["conditions"].append({"type": shape.condition, "status": "True",
                                       "reason": "Scheduled", "message": "m"})  # fmt: skip
    api = FakeStatusAPI(pg)
    rep = reporter(api, shape)
    await rep.report(phj_for(pg), True, "Scheduled", "m")
    await rep.report(phj_for(pg), True, "Scheduled", "m")
    assert api.patches == [] and api.gets == 1


async def test_v1beta1_initially_scheduled_stays_true_and_v1alpha2_follows_the_gang(shape: Shape) -> None:
    """A later run of the gang waits in Slurm: v1alpha2's PodGroupScheduled says so, v1beta1's
    PodGroupInitiallyScheduled stays True, as kube-scheduler leaves it."""
    pg = _pg(shape)
    api = FakeStatusAPI(pg)
    rep = reporter(api, shape)
    await rep.report(phj_for(pg), True, "Scheduled", "Slurm job 5 allocated n[1-2]")
    await rep.report(phj_for(pg), False, "Unschedulable", "Slurm job 6 is pending: Resources")
    now = {c["type"]: c for c in (api.obj or {})["status"]["conditions"]}[shape.condition]
    assert now["status"] == ("True" if shape.version == "v1beta1" else "False")
    assert len(api.patches) == (1 if shape.version == "v1beta1" else 2)


async def test_the_condition_is_written_at_the_version_served_now() -> None:
    """A PlaceholderJob made on 1.36 (v1alpha2) whose cluster now serves v1beta1 (an upgrade)."""
    beta, alpha = SHAPES
    pg = _pg(alpha)
    api = FakeStatusAPI(pg)
    await reporter(api, beta).report(phj_for(pg), True, "Scheduled", "m")
    path, body = api.patches[0]
    assert path == f"{beta.base}/podgroups/train-workers/status"
    assert names.PODGROUP_COND_INITIALLY_SCHEDULED in {c["type"] for c in body["status"]["conditions"]}


@pytest.mark.parametrize("failure", ["conflict", "server error", "recreated"])
async def test_failed_or_stale_writes_are_tried_again(shape: Shape, failure: str) -> None:
    pg = _pg(shape)
    stale = phj_for(pg)
    if failure == "recreated":
        stale["spec"]["group"]["uid"] = "an-older-podgroup"
    api = FakeStatusAPI(pg, conflict=failure == "conflict", error=500 if failure == "server error" else None)
    rep = reporter(api, shape)
    await rep.report(stale, True, "Scheduled", "m")
    await rep.report(stale, True, "Scheduled", "m")
    assert api.patches == []
    assert api.gets == 2  # nothing was remembered as written


def test_only_builtin_podgroups_are_reported(shape: Shape) -> None:
    assert podgroup_of(phj_for(_pg(shape))) is not None
    coscheduling = {"spec": {"group": {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                       "name": "pg", "uid": "u"}}}  # fmt: skip
    assert podgroup_of(coscheduling) is None
    assert podgroup_of({"spec": {"group": {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}}}) is None


async def test_a_forbidden_write_is_reported_once_per_condition(shape: Shape, caplog: pytest.LogCaptureFixture) -> None:
    pg = _pg(shape)
    rep = reporter(FakeStatusAPI(pg, error=403), shape)
    for _ in range(3):
        await rep.report(phj_for(pg), True, "Scheduled", "m")
    assert len([r for r in caplog.records if "cannot set" in r.getMessage()]) == 1


# --- admission: pods that name a built-in PodGroup, and what a group may not ask -----------------

_TWO_NODES = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}]}}}  # fmt: skip


def _admit(kind: str, spec: Obj, job_spec: Obj | None = None) -> Decision:
    config = Config()
    if kind == "Pod":
        obj_ = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w0", "namespace": NS},
                "spec": {**spec, "schedulerName": config.schedulerName}}  # fmt: skip
        group = ""
    else:
        obj_ = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
                "spec": {"parallelism": 2, "template": {"spec": spec}, **(job_spec or {})}}  # fmt: skip
        group = "batch"
    request = AdmissionRequest("uid", "CREATE", group, "v1", kind, "", NS, "x", "someone", obj_, None)
    return validate(request, config)


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_a_gang_may_pin_one_node_per_member(kind: str) -> None:
    """A 2-pod gang naming exactly its 2 nodes is valid (the operator sizes the job from the
    PodGroup), while a pod that is its own 1-node job may not name 2 nodes."""
    spec: Obj = {"affinity": _TWO_NODES, "containers": [{"name": "c", "image": "busybox"}]}
    refused = _admit(kind, spec)
    assert not refused.allowed and "name exactly 1 node(s)" in (refused.message or "")
    assert _admit(kind, {**spec, "schedulingGroup": {"podGroupName": "train-workers"}}).allowed


def test_a_job_asking_its_controller_for_a_gang_may_pin_one_node_per_member() -> None:
    spec: Obj = {"affinity": _TWO_NODES, "containers": [{"name": "c", "image": "busybox"}]}
    gang: Obj = {"scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    assert _admit("Job", spec, gang).allowed
    basic: Obj = {"scheduling": {"schedulingPolicy": {"basic": {}}}}
    assert not _admit("Job", spec, basic).allowed, "a basic policy: each pod is its own 1-node job"


def _create(group: str, version: str, kind: str, body: Obj, operation: str = "CREATE") -> Decision:
    request = AdmissionRequest("uid", operation, group, version, kind, "", NS, "x", "someone", body,
                               body if operation == "UPDATE" else None)  # fmt: skip
    return validate(request, Config())


CLAIMS: Obj = {"resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "ib"}]}
TOPOLOGY: Obj = {"schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]}}


@pytest.mark.parametrize(("extra", "field"), [(CLAIMS, "spec.resourceClaims (fabric)"),
                                              (TOPOLOGY, "spec.schedulingConstraints.topology")])  # fmt: skip
def test_a_podgroup_that_shares_claims_or_wants_topology_is_refused(shape: Shape, extra: Obj, field: str) -> None:
    decision = _create(GROUP, shape.version, "PodGroup", podgroup(shape, extra=extra))
    assert not decision.allowed and decision.code == 422
    assert field in (decision.message or "")
    assert "Slurm" in (decision.message or "")
    assert _create(GROUP, shape.version, "PodGroup", podgroup(shape)).allowed
    # The fields are immutable: an update (a status or annotation change) is not refused for them.
    assert _create(GROUP, shape.version, "PodGroup", podgroup(shape, extra=extra), "UPDATE").allowed


def test_a_workload_template_that_shares_claims_is_refused(shape: Shape) -> None:
    wl = workload(shape)
    wl["spec"]["podGroupTemplates"].append({"name": "b", "schedulingPolicy": {"basic": {}}, **CLAIMS})
    decision = _create(GROUP, shape.version, "Workload", wl)
    assert not decision.allowed
    assert "spec.podGroupTemplates[1].resourceClaims (fabric)" in (decision.message or "")
    assert _create(GROUP, shape.version, "Workload", workload(shape)).allowed


def test_a_job_whose_controller_would_make_a_podgroup_that_shares_claims_is_refused() -> None:
    spec: Obj = {"containers": [{"name": "c", "image": "busybox"}]}
    decision = _admit("Job", spec, {"scheduling": {"schedulingPolicy": {"gang": {}}, **CLAIMS, **TOPOLOGY}})
    message = decision.message or ""
    assert not decision.allowed and "spec.scheduling.resourceClaims" in message
    assert "spec.scheduling.schedulingConstraints.topology" in message
    other = {**spec, "schedulerName": "someone-else"}  # not the bridge's pods: not the bridge's business
    assert _admit("Job", other, {"scheduling": CLAIMS}).allowed


def test_a_composite_podgroup_slurm_cannot_honour_is_refused_at_its_create() -> None:
    def composite(**spec: Any) -> Obj:
        gang = {"schedulingPolicy": {"gang": {"minGroupCount": 2}}}
        meta = {"name": "c", "namespace": NS}
        return {
            "apiVersion": f"{GROUP}/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": meta,
            "spec": {**gang, **spec},
        }

    block = {"topology": [{"key": names.LABEL_TOPOLOGY_PREFIX + "block"}]}
    decision = _create(GROUP, "v1alpha3", "CompositePodGroup", composite(schedulingConstraints=block))
    assert not decision.allowed and "spec.schedulingConstraints.topology (" in (decision.message or "")
    basic_all = composite(disruptionMode={"all": {}})
    basic_all["spec"]["schedulingPolicy"] = {"basic": {}}
    decision = _create(GROUP, "v1alpha3", "CompositePodGroup", basic_all)
    assert not decision.allowed and "spec.disruptionMode (all) without" in (decision.message or "")
    assert _create(GROUP, "v1alpha3", "CompositePodGroup", composite(disruptionMode={"all": {}})).allowed


def test_preemption_and_disruption_settings_are_accepted() -> None:
    """Slurm preempts only whole jobs and the bridge then ends every member, so both disruption
    modes hold; priority and preemptionPolicy are kube-scheduler's, which places no gang of the
    bridge's (docs/workloads.md)."""
    beta = SHAPES[0]
    extra = {"disruptionMode": {"all": {}}, "priorityClassName": "high", "priority": 1000,
             "preemptionPolicy": "Never"}  # fmt: skip
    assert _create(GROUP, "v1beta1", "PodGroup", podgroup(beta, extra=extra)).allowed
    alpha = SHAPES[1]
    assert _create(GROUP, "v1alpha2", "PodGroup", podgroup(alpha, extra={"disruptionMode": "PodGroup"})).allowed


def test_a_kubernetes_135_workload_is_refused_and_later_alphas_are_not_ours() -> None:
    v1alpha1 = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Workload", "metadata": {"name": "w", "namespace": NS},
                "spec": {"podGroups": [{"name": "g", "policy": {"gang": {"minCount": 2}}}]}}  # fmt: skip
    decision = _create(GROUP, "v1alpha1", "Workload", v1alpha1)
    assert not decision.allowed and "1.35" in (decision.message or "") and "spec.schedulingGroup" in (
        decision.message or "")  # fmt: skip
    # v1alpha3 (1.37's CompositePodGroup API) is not refused for its version.
    assert _create(GROUP, "v1alpha3", "Workload", {**v1alpha1, "apiVersion": f"{GROUP}/v1alpha3",
                                                   "spec": {"podGroupTemplates": []}}).allowed  # fmt: skip
