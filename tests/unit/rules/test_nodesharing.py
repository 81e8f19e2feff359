"""Node sharing (docs/colocation.md): the mode a job gets (config, the node-sharing and exclusive
annotations), the Slurm request of each mode in every REST API version, and the coResident rules
at admission (pods, every workload kind) and at submit (slurm_bridge/rules/nodesharing.py, translate.py,
webhook/validate.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config, ConfigError, parse_config
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX
from slurm_bridge.rules.jobannotations import validate_annotations
from slurm_bridge.rules.nodesharing import limit_problems, sharing_mode
from slurm_bridge.rules.translate import job_request
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.slurm.versions import CODECS
from slurm_bridge.webhook.mutate import mutate
from slurm_bridge.webhook.render import CO_RESIDENT_CHECK, webhook_configurations
from slurm_bridge.webhook.validate import validate
from tests.unit.webhook.test_webhook import BRIDGE_USER, SCHED, apply, make_pod, make_request, managed_pod

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
MODE = names.ANN_NODE_SHARING
CPU_DRA = EXTENDED_PREFIX + "dra.cpu"
CO = Config(schedulerName=SCHED, managedNamespaces=["slurm"], trustedUsers=[BRIDGE_USER], nodeSharing="coResident")
TS = CO.model_copy(update={"nodeSharing": "timeShared"})
EX = CO.model_copy(update={"nodeSharing": "exclusive"})
LIMITED: dict[str, Obj] = {
    "requests": {"cpu": "500m", "memory": "100Mi"},
    "limits": {"cpu": "1500m", "memory": "100.5Mi"},
}


def ctr(name: str = "c", /, **resources: Obj) -> Obj:
    return {"name": name, "image": "busybox", "resources": resources}


def pod(*containers: Obj, init: list[Obj] | None = None, annotations: Obj | None = None, **spec: Any) -> Obj:
    body: Obj = {"containers": list(containers), **spec}
    if init is not None:
        body["initContainers"] = init
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}, "spec": body}


# ---- the mode --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "values", "mode"),
    [
        ("timeShared", {}, "timeShared"),
        ("coResident", {}, "coResident"),
        ("exclusive", {}, "exclusive"),
        ("timeShared", {"node_sharing": "coResident"}, "coResident"),
        ("coResident", {"node_sharing": "exclusive"}, "exclusive"),
        ("coResident", {"exclusive": True}, "exclusive"),
        ("timeShared", {"exclusive": True}, "exclusive"),
        # exclusive "false": not whole nodes: the configured mode, or the Go bridge's MCS sharing
        ("coResident", {"exclusive": False}, "coResident"),
        ("timeShared", {"exclusive": False}, "timeShared"),
        ("exclusive", {"exclusive": False}, "timeShared"),
        ("exclusive", {"exclusive": False, "node_sharing": "coResident"}, "coResident"),
    ],
)
def test_the_mode_comes_from_node_sharing_then_exclusive_then_the_config(
    configured: Any, values: Obj, mode: str
) -> None:
    assert sharing_mode(configured, values) == mode


@pytest.mark.parametrize(
    ("exclusive", "mode", "ok"),
    [
        ("true", "exclusive", True),
        ("true", "coResident", False),
        ("TRUE", "timeShared", False),
        ("false", "exclusive", False),
        ("false", "coResident", True),
        ("false", "timeShared", True),
    ],
)
def test_exclusive_and_node_sharing_must_agree(exclusive: str, mode: str, ok: bool) -> None:
    errors = validate_annotations({names.ANN_EXCLUSIVE: exclusive, MODE: mode})
    if ok:
        assert errors == []
    else:
        (err,) = errors
        assert err.key == MODE and names.ANN_EXCLUSIVE in err.message and "keep one of the two" in err.message


def test_config_time_shared_needs_a_label_and_labels_are_checked() -> None:
    assert Config().nodeSharing == "timeShared" and Config().mcsLabel == "kubernetes"
    with pytest.raises(ConfigError, match="nodeSharing timeShared needs an mcsLabel"):
        parse_config({"mcsLabel": ""})
    assert parse_config({"mcsLabel": "", "nodeSharing": "coResident"}).mcsLabel == ""
    with pytest.raises(ConfigError, match="not an MCS label"):
        parse_config({"mcsLabel": "a b"})
    with pytest.raises(ConfigError, match="nodeSharing"):
        parse_config({"nodeSharing": "shared"})


# ---- the request of each mode ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "annotations", "mode", "label"),
    [
        (TS, {}, "timeShared", "kubernetes"),
        (TS.model_copy(update={"mcsLabel": "k8s"}), {}, "timeShared", "k8s"),
        (TS, {MODE: "exclusive"}, "exclusive", None),
        (TS, {names.ANN_EXCLUSIVE: "true"}, "exclusive", None),
        (TS, {MODE: "coResident"}, "coResident", None),
        (EX, {}, "exclusive", None),
        (EX, {names.ANN_EXCLUSIVE: "false"}, "timeShared", "kubernetes"),
        (CO, {}, "coResident", None),
        (CO, {MODE: "timeShared"}, "timeShared", "kubernetes"),
    ],
)
def test_each_mode_gives_its_request_and_only_time_sharing_carries_the_label(
    config: Config, annotations: Obj, mode: str, label: str | None
) -> None:
    req = job_request([pod(ctr(limits={"cpu": "1", "memory": "64Mi"}))], config=config, annotations=annotations)
    assert (req.node_sharing, req.mcs_label, req.exclusive) == (mode, label, None)
    assert req.crd_dict()["nodeSharing"] == mode


SHARING = {
    "exclusive": ({"shared": ["none"]}, "mcs_label"),
    "timeShared": ({"shared": ["mcs"], "mcs_label": "kubernetes"}, None),
    "coResident": ({}, "shared"),
}


@pytest.mark.parametrize("version", sorted(CODECS))
@pytest.mark.parametrize("mode", sorted(SHARING))
def test_the_slurm_request_of_each_mode_in_every_rest_version(version: str, mode: Any) -> None:
    codec = CODECS[version]
    req = JobRequest(partition="hybrid", node_sharing=mode, mcs_label="kubernetes" if mode == "timeShared" else None)
    want, absent = SHARING[mode]
    # an update keeps the sharing it was submitted with: Slurm turns an update to mcs into oversubscribe
    assert not {"shared", "mcs_label"} & set(codec.update_body(req))
    for body in (
        codec.submit_body(req, name="n", admin_comment="c")["job"],
        codec.allocate_body(req, name="n", admin_comment="c")["job"],
    ):
        got = {k: body[k] for k in ("shared", "mcs_label") if k in body}
        assert got == want
        assert "mcs_label" not in body if mode != "timeShared" else True
        assert absent is None or absent not in body
        # never the replacement fields of v0.0.45's read side, nor oversubscribe
        assert not {"exclusive", "oversubscribe"} & set(body) and body.get("shared") != ["oversubscribe"]


def test_a_coresident_request_drops_a_label_even_when_one_is_set() -> None:
    body = CODECS["v0.0.45"].submit_body(
        JobRequest(node_sharing="coResident", mcs_label="kubernetes"), name="n", admin_comment="c"
    )["job"]
    assert "shared" not in body and "mcs_label" not in body


def test_a_time_shared_request_without_a_label_is_a_bug_not_a_silent_native_neighbour() -> None:
    with pytest.raises(ValueError, match="MCS label"):
        CODECS["v0.0.45"].submit_body(JobRequest(node_sharing="timeShared"), name="n", admin_comment="c")


@pytest.mark.parametrize(
    ("exclusive", "label", "want"),
    [(True, None, {"shared": ["none"]}), (False, None, {}), (None, "team", {"mcs_label": "team"})],
)
def test_requests_from_before_the_modes_are_sent_as_before(
    exclusive: bool | None, label: str | None, want: Obj
) -> None:
    body = CODECS["v0.0.44"].submit_body(JobRequest(exclusive=exclusive, mcs_label=label), name="n", admin_comment="c")
    assert {k: body["job"][k] for k in ("shared", "mcs_label") if k in body["job"]} == want


# ---- coResident: sized from the limits, every container held by them ----------------------------------


def test_a_coresident_job_is_sized_from_the_limits_memory_rounded_up() -> None:
    req = job_request([pod(ctr(**LIMITED))], config=CO)
    assert (req.cpus_per_task, req.memory_per_node_mib) == (2, 101)  # 1500m -> 2 CPUs, 100.5Mi -> 101 MiB


@pytest.mark.parametrize(
    ("spec_pod", "problems"),
    [
        (pod(ctr(limits={"cpu": "1", "memory": "1Gi"})), []),
        (pod(ctr(requests={"cpu": "1", "memory": "1Gi"})), ["('c') has no memory limit (resources.limits.memory) and"]),
        (pod(ctr(limits={"cpu": "1"})), ["no memory limit (resources.limits.memory)"]),
        (pod(ctr(limits={"memory": "1Gi"})), ["neither a cpu limit"]),
        (
            pod(ctr(limits={"cpu": "1", "memory": "1Gi"}), init=[ctr("setup", limits={"cpu": "1"})]),
            ["spec.initContainers[0] ('setup') has no memory limit"],
        ),
        (  # a sidecar (restartable init container) too
            pod(
                ctr(limits={"cpu": "1", "memory": "1Gi"}),
                init=[{**ctr("log", limits={"memory": "10Mi"}), "restartPolicy": "Always"}],
            ),
            ["spec.initContainers[0] ('log') has neither a cpu limit"],
        ),
        # a pod-level limit holds every container
        (pod(ctr(), init=[ctr("i")], resources={"limits": {"cpu": "2", "memory": "1Gi"}}), []),
        (pod(ctr(limits={"memory": "1Gi"}), resources={"limits": {"cpu": "2"}}), []),
        # dra.cpu: every container runs on the devices (a template still has the request; a pod
        # the webhook rewrote has the recorded annotation)
        (pod(ctr(limits={CPU_DRA: "2", "memory": "1Gi"}), init=[ctr("i", limits={"memory": "1Mi"})]), []),
        (
            pod(
                ctr(limits={"memory": "1Gi"}),
                init=[ctr("i", limits={"memory": "1Mi"})],
                annotations={names.ANN_DEVICE_REQUESTS: json.dumps({"dra.cpu": 2})},
            ),
            [],
        ),
        (pod(ctr(limits={CPU_DRA: "2"})), ["no memory limit"]),
    ],
    ids=["limits", "requests-only", "no-memory", "no-cpu", "init", "sidecar", "pod-level", "pod-level-cpu",
         "dra-template", "dra-recorded", "dra-without-memory"],
)  # fmt: skip
def test_every_container_needs_a_memory_limit_and_a_cpu_limit_or_dra_cpu(spec_pod: Obj, problems: list[str]) -> None:
    found = limit_problems(spec_pod["spec"], spec_pod["metadata"]["annotations"])
    assert len(found) == len(problems) if problems else found == []
    for f, words in zip(found, problems, strict=False):
        assert words in f and names.ANN_NODE_SHARING in f and "coResident" in f, f


def test_at_submit_a_coresident_group_without_limits_is_refused_naming_pod_and_container() -> None:
    good, bad = pod(ctr(**LIMITED)), pod(ctr("main", requests={"cpu": "1"}))
    bad["metadata"]["name"] = "worker-1"
    with pytest.raises(ValueError, match=r"pod ns/worker-1: spec.containers\[0\] \('main'\) has no memory limit"):
        job_request([good, bad], config=CO)
    # the same pods as a timeShared or exclusive job need nothing
    assert job_request([good, bad], config=CO, annotations={MODE: "timeShared"}).node_sharing == "timeShared"
    # and a timeShared config's pod that asks for coResident is checked
    with pytest.raises(ValueError, match="has no memory limit"):
        job_request([bad], config=TS, annotations={MODE: "coResident"})


@pytest.mark.parametrize("key", [names.ANN_CPU_PER_TASK, names.ANN_MEM_PER_NODE])
def test_at_submit_sizing_annotations_of_a_coresident_job_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=f"{key}: the Slurm job of coResident node sharing is sized from"):
        job_request([pod(ctr(**LIMITED))], config=CO, annotations={key: "2"})
    assert job_request([pod(ctr(**LIMITED))], config=CO, annotations={key: "2", MODE: "exclusive"})


# ---- admission: pods ------------------------------------------------------------------------------------


def co_pod(resources: Obj | None = None, annotations: Obj | None = None, **kw: Any) -> Obj:
    p = managed_pod(annotations=annotations, **kw)
    p["spec"]["containers"][0]["resources"] = resources if resources is not None else {}
    return p


def test_admission_refuses_a_coresident_pod_without_limits_naming_the_container() -> None:
    d = validate(make_request(co_pod({"requests": {"cpu": "1"}})), CO)
    assert not d.allowed and d.code == 422
    assert "spec.containers[0] ('c') has no memory limit" in d.message and "nor the pod's" in d.message
    assert validate(make_request(co_pod(LIMITED)), CO).allowed
    # in the other modes nothing is asked of the pod
    assert validate(make_request(co_pod({"requests": {"cpu": "1"}})), TS).allowed
    assert validate(make_request(co_pod({"requests": {"cpu": "1"}}, {MODE: "exclusive"})), CO).allowed


def test_admission_checks_a_pod_that_asks_for_coresident_in_another_config() -> None:
    d = validate(make_request(co_pod({}, {MODE: "coResident"})), TS)
    assert not d.allowed and "has no memory limit" in d.message


@pytest.mark.parametrize("key", [names.ANN_CPU_PER_TASK, names.ANN_MEM_PER_NODE])
def test_admission_refuses_sizing_annotations_of_a_coresident_pod(key: str) -> None:
    d = validate(make_request(co_pod(LIMITED, {key: "4"})), CO)
    assert not d.allowed and f"{key}: the Slurm job of coResident node sharing is sized from" in d.message
    assert validate(make_request(co_pod(LIMITED, {key: "4"})), TS).allowed


def test_admission_warns_a_workload_member_without_limits_whose_root_decides() -> None:
    member = co_pod({"requests": {"cpu": "1"}}, owner=True)
    d = validate(make_request(member), CO)
    assert d.allowed and len(d.warnings) == 1
    assert "nodeSharing is coResident" in d.warnings[0] and names.ANN_NODE_SHARING in d.warnings[0]
    assert validate(make_request(member), TS).warnings == []


def test_admission_of_an_update_rechecks_only_changed_annotations() -> None:
    old = co_pod({"requests": {"cpu": "1"}}, {MODE: "timeShared"})
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    assert validate(make_request(new, operation="UPDATE", old=old), CO).allowed
    new["metadata"]["annotations"][MODE] = "coResident"
    d = validate(make_request(new, operation="UPDATE", old=old), CO)
    assert not d.allowed and "has no memory limit" in d.message


def test_the_pods_of_other_schedulers_are_not_the_bridges_to_judge() -> None:
    other = make_pod({"schedulerName": "other"}, annotations={MODE: "coResident"})
    assert validate(make_request(other), CO).allowed


# ---- admission: every workload kind ------------------------------------------------------------------------

NO_LIMITS = {"containers": [ctr(requests={"cpu": "1"})]}
WITH_LIMITS = {"containers": [ctr(**LIMITED)]}


def job(spec: Obj, annotations: Obj | None = None) -> tuple[Obj, Obj]:
    return {"metadata": {"name": "j", "annotations": annotations or {}}, "spec": {"template": {"spec": spec}}}, {
        "group": "batch",
        "kind": "Job",
    }


def jobset(spec: Obj, annotations: Obj | None = None) -> tuple[Obj, Obj]:
    rj = [{"name": "r", "template": {"spec": {"template": {"spec": spec}}}}]
    obj = {"metadata": {"name": "js", "annotations": annotations or {}}, "spec": {"replicatedJobs": rj}}
    return obj, {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}


def lws(spec: Obj, annotations: Obj | None = None) -> tuple[Obj, Obj]:
    tmpl = {"leaderTemplate": {"spec": WITH_LIMITS}, "workerTemplate": {"spec": spec}}
    obj = {"metadata": {"name": "l", "annotations": annotations or {}}, "spec": {"leaderWorkerTemplate": tmpl}}
    return obj, {"group": "leaderworkerset.x-k8s.io", "kind": "LeaderWorkerSet"}


TEMPLATED = {"job": (job, "spec.template.spec.containers[0]"),
             "jobset": (jobset, "spec.replicatedJobs[0].template.spec.template.spec.containers[0]"),
             "lws": (lws, "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]")}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(TEMPLATED))
def test_admission_refuses_coresident_workload_templates_without_limits(kind: str) -> None:
    make, where = TEMPLATED[kind]
    obj, gvk = make(NO_LIMITS)
    d = validate(make_request(obj, **gvk), CO)
    assert not d.allowed and d.code == 422 and f"{where} ('c') has no memory limit" in d.message, d.message
    assert validate(make_request(make(WITH_LIMITS)[0], **gvk), CO).allowed
    # the workload's own annotation decides the mode of its pods
    assert validate(make_request(make(NO_LIMITS, {MODE: "timeShared"})[0], **gvk), CO).allowed
    d = validate(make_request(make(NO_LIMITS, {MODE: "coResident"})[0], **gvk), TS)
    assert not d.allowed and "has no memory limit" in d.message


@pytest.mark.parametrize("kind", sorted(TEMPLATED))
@pytest.mark.parametrize("key", [names.ANN_CPU_PER_TASK, names.ANN_MEM_PER_NODE])
def test_admission_refuses_sizing_annotations_on_coresident_workloads(kind: str, key: str) -> None:
    obj, gvk = TEMPLATED[kind][0](WITH_LIMITS, {key: "2"})
    d = validate(make_request(obj, **gvk), CO)
    assert not d.allowed and f"{key}: the Slurm job of coResident node sharing" in d.message


GROUP_OBJECTS = {
    "coscheduling-podgroup": {"group": "scheduling.x-k8s.io", "version": "v1alpha1", "kind": "PodGroup"},
    "podgroup": {"group": "scheduling.k8s.io", "version": "v1beta1", "kind": "PodGroup"},
    "workload": {"group": "scheduling.k8s.io", "version": "v1beta1", "kind": "Workload"},
    "compositepodgroup": {"group": "scheduling.k8s.io", "version": "v1alpha3", "kind": "CompositePodGroup"},
}


@pytest.mark.parametrize("kind", sorted(GROUP_OBJECTS))
@pytest.mark.parametrize("key", [names.ANN_CPU_PER_TASK, names.ANN_MEM_PER_NODE])
def test_admission_refuses_sizing_annotations_on_group_objects_the_fork_let_through(kind: str, key: str) -> None:
    gvk = GROUP_OBJECTS[kind]
    obj: Obj = {"metadata": {"name": "g", "annotations": {key: "2"}}, "spec": {}}
    d = validate(make_request(obj, **gvk), CO)
    assert not d.allowed and f"{key}: the Slurm job of coResident node sharing" in d.message, d.message
    # the object's own node-sharing annotation, or the config, may say otherwise
    assert validate(make_request(obj, **gvk), TS).allowed
    obj["metadata"]["annotations"][MODE] = "exclusive"
    assert validate(make_request(obj, **gvk), CO).allowed
    obj["metadata"]["annotations"][MODE] = "coResident"
    assert not validate(make_request(obj, **gvk), TS).allowed


@pytest.mark.parametrize("kind", sorted(GROUP_OBJECTS))
def test_admission_refuses_contradicting_sharing_annotations_on_every_kind(kind: str) -> None:
    obj = {"metadata": {"name": "g", "annotations": {MODE: "coResident", names.ANN_EXCLUSIVE: "true"}}, "spec": {}}
    d = validate(make_request(obj, **GROUP_OBJECTS[kind]), TS)
    assert not d.allowed and "keep one of the two" in d.message


def test_a_job_whose_pods_join_a_podgroup_is_warned_not_refused() -> None:
    obj, gvk = job({**NO_LIMITS, "schedulingGroup": {"podGroupName": "pg"}})
    d = validate(make_request(obj, **gvk), CO)
    assert d.allowed and len(d.warnings) == 1 and "has no memory limit" in d.warnings[0]


def test_a_workload_update_that_changes_nothing_relevant_is_not_refused_again() -> None:
    obj, gvk = lws(NO_LIMITS, {MODE: "timeShared"})
    new = copy.deepcopy(obj)
    new["spec"]["replicas"] = 3
    assert validate(make_request(new, operation="UPDATE", old=obj, **gvk), CO).allowed
    new["metadata"]["annotations"][MODE] = "coResident"
    assert not validate(make_request(new, operation="UPDATE", old=obj, **gvk), CO).allowed


# ---- the validating webhook's match condition and the dra.cpu claim --------------------------------------


def test_coresident_config_sends_pods_without_limits_to_the_webhook() -> None:
    conds = {
        mode: webhook_configurations(cfg, bundle="x", url="https://127.0.0.1:9443")[1]["webhooks"][0]["matchConditions"]
        for mode, cfg in (("co", CO), ("ts", TS))
    }
    check = {mode: next(c["expression"] for c in cs if c["name"] == "something-to-check") for mode, cs in conds.items()}
    assert check["co"].endswith(" || " + CO_RESIDENT_CHECK) and CO_RESIDENT_CHECK not in check["ts"]
    assert "'memory' in c.resources.limits" in CO_RESIDENT_CHECK and "has(object.spec.resources)" in CO_RESIDENT_CHECK


def test_every_container_of_a_dra_cpu_pod_runs_on_the_slurm_allocated_cores() -> None:
    raw = make_pod(
        {
            "containers": [ctr("main", limits={CPU_DRA: "2", "memory": "1Gi"}), ctr("side", limits={"memory": "1Mi"})],
            "initContainers": [ctr("init", limits={"memory": "1Mi"})],
        }
    )
    decision = mutate(make_request(raw), CO)
    assert decision.allowed, decision.message
    out = apply(raw, decision.patch)
    entry = names.POD_CLAIM_ENTRY
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": entry}]
    assert out["spec"]["containers"][1]["resources"]["claims"] == [{"name": entry, "request": "cpu"}]
    assert out["spec"]["initContainers"][0]["resources"]["claims"] == [{"name": entry, "request": "cpu"}]
    d = validate(make_request(out), CO)
    assert d.allowed, d.message  # and so it passes the coResident rules
    req = job_request([out], config=CO)
    assert (req.cpus_per_task, req.memory_per_node_mib) == (2, 1025)  # main and its sidecar add up


def test_gpu_only_dra_pods_still_give_the_claim_to_one_container() -> None:
    gpu = EXTENDED_PREFIX + "gpu.nvidia.com"
    raw = make_pod({"containers": [ctr("main", limits={gpu: "1"}), ctr("side")]})
    out = apply(raw, mutate(make_request(raw), TS).patch)
    assert "claims" not in (out["spec"]["containers"][1].get("resources") or {})
