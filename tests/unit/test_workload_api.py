"""The Kubernetes 1.36 Workload API: pods naming a built-in PodGroup (spec.schedulingGroup) with a
``gang`` policy form a gang (a ``basic`` policy leaves the usual rules to decide, as in the Go
bridge); options merge PodGroup <- controller <- Workload; the PodGroup's scheduled condition is
written once per change (a fake API stands in for the server)."""

from __future__ import annotations

from typing import Any

import pytest
from slurm_bridge.operator.groups import GroupError, gang_min_count, workload_name
from slurm_bridge.operator.podgroups import PodGroupReporter, podgroup_of
from slurm_bridge.operator.resolver import GroupResolver
from slurm_bridge.webhook.review import AdmissionRequest, Decision
from slurm_bridge.webhook.validate import validate

from slurm_bridge import names
from slurm_bridge.config import Config
from slurm_bridge.kube import Conflict, KubeError
from slurm_bridge.translate import job_request

from .test_groups import JOB, JOBSET, JOBSET_JOB, NS, FakeAPI, P, obj, pod

pytestmark = pytest.mark.unit
Obj = dict[str, Any]

V = "scheduling.k8s.io/v1alpha2"
BASE = f"/apis/{V}/namespaces/{NS}"
DOCS = {
    "/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}, {"version": "v1alpha2"}]},
    f"/apis/{V}": {"resources": [{"name": "workloads"}, {"name": "podgroups"}, {"name": "podgroups/status"}]},
}


def workload(name: str = "train", annotations: dict[str, str] | None = None) -> Obj:
    return obj(V, "Workload", name, annotations=annotations, spec={
        "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]})  # fmt: skip


def podgroup(name: str = "train-workers", *, policy: Obj | None = None, wl: str | None = "train",
             annotations: dict[str, str] | None = None) -> Obj:  # fmt: skip
    spec: Obj = {"schedulingPolicy": policy if policy is not None else {"gang": {"minCount": 2}}}
    if wl:
        spec["podGroupTemplateRef"] = {"workload": {"workloadName": wl, "podGroupTemplateName": "workers"}}
    return obj(V, "PodGroup", name, annotations=annotations, spec=spec)


class API(FakeAPI):
    def __init__(self, *objs: Obj, docs: dict[str, Obj] | None = None, fail: dict[str, int] | None = None) -> None:
        super().__init__(fail=fail, docs=DOCS if docs is None else docs)
        for o in objs:
            plural = {"Workload": "workloads", "PodGroup": "podgroups"}.get(o["kind"])
            if plural and o["apiVersion"] == V:
                self.objects[f"{BASE}/{plural}/{o['metadata']['name']}"] = o
            else:
                self.objects.update(FakeAPI(o).objects)


def member(name: str = "train-0", group: str = "train-workers", **kw: Any) -> Obj:
    p = pod(name, **kw)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


async def test_gang_from_podgroup_with_merged_options() -> None:
    job = obj("batch/v1", "Job", "train", annotations={P + "account": "job", P + "qos": "job"},
              spec={"activeDeadlineSeconds": 600})  # fmt: skip
    api = API(
        podgroup(annotations={P + "job-name": "per-gang", P + "qos": "pg", P + "account": "pg"}),
        workload(annotations={P + "account": "wl", P + "partition": "debug"}),
        job,
    )
    group = await GroupResolver(api.get).resolve(member(owner=job, annotations={P + "qos": "pod-ignored"}))
    assert group.gang and group.min_member == 2
    assert group.name == "pg-train-workers"
    assert (group.source["apiVersion"], group.source["kind"], group.source["name"]) == (V, "PodGroup", "train-workers")
    assert (group.owner["kind"], group.owner["name"]) == ("PodGroup", "train-workers")
    # PodGroup <- selected controller <- Workload: the Workload wins, the pod's own do not count.
    assert group.annotations == {P + "job-name": "per-gang", P + "qos": "job", P + "account": "wl",
                                 P + "partition": "debug"}  # fmt: skip
    assert group.derived == {"time_limit_minutes": 10, "job_name": "train-workers"}
    assert group.derived_for(1)["nodes"] == 2  # the gang holds a node for each member it waits for


async def test_the_slurm_job_is_named_after_the_podgroup_unless_an_annotation_says() -> None:
    policy = {"gang": {"minCount": 2}}
    long_name = "w" * 253  # the CRD's spec.slurm.jobName holds 200 characters
    for name, wl_annotations, expected in (
        ("train-workers", None, "train-workers"),
        (long_name, None, long_name[:200]),
        ("train-workers", {P + "job-name": "from-workload"}, "from-workload"),
    ):
        api = API(podgroup(name, policy=policy), workload(annotations=wl_annotations))
        the_pod = member(group=name)
        group = await GroupResolver(api.get).resolve(the_pod)
        request = job_request([the_pod], config=Config(), derived=group.derived_for(1), annotations=group.annotations)
        assert request.job_name == expected


async def test_jobset_above_the_job_is_the_selected_controller() -> None:
    api = API(podgroup(wl=None), JOBSET_JOB, JOBSET)
    group = await GroupResolver(api.get).resolve(member("js-a-0-0", owner=JOBSET_JOB))
    # The intermediate Job's annotations are ignored; the JobSet's apply.
    assert group.annotations == {P + "partition": "gpu", P + "timelimit": "30"}
    assert group.gang and group.min_member == 2


async def test_the_podgroup_wins_over_a_coscheduling_label() -> None:
    api = API(podgroup(wl=None))
    group = await GroupResolver(api.get).resolve(member(labels={names.LABEL_POD_GROUP: "other"}))
    assert group.source["kind"] == "PodGroup" and group.source["apiVersion"] == V


async def test_basic_policy_leaves_the_usual_rules_to_decide() -> None:
    """As in the Go slurm-bridge: ``basic`` asks for no gang, so the owner rules decide (a Job's pod
    is its own job with the Job's options; a bare pod keeps its own annotations)."""
    api = API(podgroup(policy={"basic": {}}, annotations={P + "qos": "pg"}), workload(), JOB)
    group = await GroupResolver(api.get).resolve(member("train-x", owner=JOB))
    assert not group.gang and group.min_member == 1 and group.name == "train-x"
    assert (group.source["kind"], group.source["name"]) == ("Job", "train")
    assert group.annotations == {P + "timelimit": "90"}
    bare = await GroupResolver(api.get).resolve(member("solo", annotations={P + "qos": "mine"}))
    assert (bare.name, bare.annotations, bare.gang) == ("solo", {P + "qos": "mine"}, False)
    assert f"{BASE}/workloads/train" not in api.calls, "a basic PodGroup's Workload is not read"


async def test_discovery_is_done_once() -> None:
    api = API(podgroup(wl=None))
    resolver = GroupResolver(api.get)
    for i in range(3):
        await resolver.resolve(member(f"p{i}"))
    assert api.calls.count("/apis/scheduling.k8s.io") == 1
    assert api.calls.count(f"/apis/{V}") == 1


ERRORS: list[tuple[str, API, str, str]] = [
    ("the PodGroup does not exist yet: the pod waits for it", API(workload()), "PodGroupNotFound", "train-workers"),
    ("its Workload does not exist yet", API(podgroup()), "WorkloadNotFound", "Workload train"),
    ("the bridge may not read PodGroups", API(fail={f"{BASE}/podgroups/train-workers": 403}), "PodGroupForbidden",
     "grant it get on podgroups"),
    ("the Workload API is not served", API(docs={"/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}]}}),
     "WorkloadAPINotServed", "GenericWorkload"),
    ("only an unknown version is served",
     API(docs={"/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}, {"version": "v9"}]}}),
     "WorkloadAPINotServed", "v9"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "api", "reason", "detail"), ERRORS, ids=[e[0] for e in ERRORS])
async def test_errors(case: str, api: API, reason: str, detail: str) -> None:
    with pytest.raises(GroupError) as err:
        await GroupResolver(api.get).resolve(member())
    assert err.value.reason == reason
    assert detail in err.value.message
    assert err.value.retry_after > 0


@pytest.mark.parametrize(
    ("spec", "expected"),
    [({"schedulingPolicy": {"gang": {"minCount": 4}}}, 4), ({"schedulingPolicy": {"gang": {}}}, 1),
     ({"schedulingPolicy": {"basic": {}}}, None), ({}, None)],
)  # fmt: skip
def test_gang_min_count(spec: Obj, expected: int | None) -> None:
    assert gang_min_count({"spec": spec}) == expected


def test_workload_name() -> None:
    assert workload_name(podgroup()) == "train"
    assert workload_name(podgroup(wl=None)) is None
    assert workload_name({"spec": {"workloadRef": {"workloadName": "w"}}}) == "w"  # the later API's shape


# --- the PodGroup's condition -------------------------------------------------------------------


class StatusAPI:
    """GET and PATCH of one PodGroup; PATCH answers Conflict when told to."""

    def __init__(self, pg: Obj | None, conflict: bool = False, error: int | None = None) -> None:
        self.pg = pg
        self.patches: list[tuple[str, Obj]] = []
        self.gets = 0
        self.conflict = conflict
        self.error = error

    async def get(self, path: str) -> Obj | None:
        self.gets += 1
        return self.pg

    async def patch(self, path: str, body: Obj, patch_type: str = "merge") -> Obj:
        if self.conflict:
            raise Conflict(409, "Conflict", "changed")
        if self.error:
            raise KubeError(self.error, "Forbidden", "no")
        self.patches.append((path, body))
        assert self.pg is not None
        self.pg = {**self.pg, "status": body["status"]}
        return self.pg


def phj_for(pg: Obj) -> Obj:
    m = pg["metadata"]
    return {"metadata": {"namespace": NS, "name": "pg-" + m["name"]},
            "spec": {"group": {"apiVersion": pg["apiVersion"], "kind": "PodGroup", "name": m["name"],
                               "uid": m["uid"]}}}  # fmt: skip


def _pg() -> Obj:
    pg = podgroup()
    pg["metadata"].update(resourceVersion="7", generation=3)
    pg["status"] = {"conditions": [{"type": "Other", "status": "True", "reason": "X", "message": ""}]}
    return pg


async def test_condition_written_once_per_change_and_keeps_others() -> None:
    pg = _pg()
    api = StatusAPI(pg)
    reporter = PodGroupReporter(api)  # type: ignore[arg-type]
    await reporter.report(phj_for(pg), False, "Unschedulable", "Slurm job 5 is pending: Resources")
    await reporter.report(phj_for(pg), False, "Unschedulable", "Slurm job 5 is pending: Resources")
    await reporter.report(phj_for(pg), True, "Scheduled", "Slurm job 5 allocated n[1-2]")
    assert len(api.patches) == 2
    path, body = api.patches[-1]
    assert path == f"{BASE}/podgroups/train-workers/status"
    assert body["metadata"] == {"resourceVersion": "7"}  # never over a change it did not see
    conds = {c["type"]: c for c in body["status"]["conditions"]}
    assert conds["Other"]["reason"] == "X"
    sched = conds[names.PODGROUP_COND_SCHEDULED]
    assert (sched["status"], sched["reason"], sched["observedGeneration"]) == ("True", "Scheduled", 3)
    assert api.gets == 2


async def test_condition_already_there_after_a_restart_is_not_written() -> None:
    pg = _pg()
    pg["status"]["conditions"].append({"type": names.PODGROUP_COND_SCHEDULED, "status": "True",
                                       "reason": "Scheduled", "message": "m"})  # fmt: skip
    api = StatusAPI(pg)
    reporter = PodGroupReporter(api)  # type: ignore[arg-type]
    await reporter.report(phj_for(pg), True, "Scheduled", "m")
    await reporter.report(phj_for(pg), True, "Scheduled", "m")
    assert api.patches == [] and api.gets == 1


@pytest.mark.parametrize("failure", ["conflict", "server error", "recreated"])
async def test_failed_or_stale_writes_are_tried_again(failure: str) -> None:
    pg = _pg()
    stale = phj_for(pg)
    if failure == "recreated":
        stale["spec"]["group"]["uid"] = "an-older-podgroup"
    api = StatusAPI(pg, conflict=failure == "conflict", error=500 if failure == "server error" else None)
    reporter = PodGroupReporter(api)  # type: ignore[arg-type]
    await reporter.report(stale, True, "Scheduled", "m")
    await reporter.report(stale, True, "Scheduled", "m")
    assert api.patches == []
    assert api.gets == 2  # nothing was remembered as written


def test_only_builtin_podgroups_are_reported() -> None:
    assert podgroup_of(phj_for(_pg())) is not None
    coscheduling = {"spec": {"group": {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                       "name": "pg", "uid": "u"}}}  # fmt: skip
    assert podgroup_of(coscheduling) is None
    assert podgroup_of({"spec": {"group": {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u"}}}) is None


# --- admission: pods that name a built-in PodGroup -----------------------------------------------

_TWO_NODES = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}]}}}  # fmt: skip


def _admit(kind: str, spec: Obj) -> Decision:
    config = Config()
    if kind == "Pod":
        obj_ = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w0", "namespace": NS},
                "spec": {**spec, "schedulerName": config.schedulerName}}  # fmt: skip
        group = ""
    else:
        obj_ = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
                "spec": {"parallelism": 2, "template": {"spec": spec}}}  # fmt: skip
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


async def test_a_forbidden_write_is_reported_once_per_condition(caplog: pytest.LogCaptureFixture) -> None:
    pg = _pg()
    reporter = PodGroupReporter(StatusAPI(pg, error=403))  # type: ignore[arg-type]
    for _ in range(3):
        await reporter.report(phj_for(pg), True, "Scheduled", "m")
    assert len([r for r in caplog.records if "cannot set" in r.getMessage()]) == 1
