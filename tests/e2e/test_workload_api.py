"""The Kubernetes Workload API on the real cluster, at the version it serves: the same tests run
against ``scheduling.k8s.io/v1beta1`` on Kubernetes 1.37 and ``v1alpha2`` on 1.36, with the
objects built in each version's shape (the module finds the served version once, by discovery,
and fails at once if this Kubernetes does not serve the version it must).

A Job whose pods name a PodGroup with ``gang.minCount`` 2 is one Slurm job whose pods start
together on distinct nodes, or, when Slurm cannot place the whole gang, none starts; options merge
PodGroup <- Job <- Workload; the PodGroup reports its scheduled condition as kube-scheduler would
(``PodGroupInitiallyScheduled`` at v1beta1, ``PodGroupScheduled`` at v1alpha2). On 1.37 the Job
controller makes the Workload and PodGroup from a Job's ``spec.scheduling`` and the bridge runs
that gang like a hand-made one. A PodGroup whose pods would share claims is refused at admission.

What the cluster must turn on (hack/cluster.sh): on 1.37, the feature gates ``GenericWorkload``,
``WorkloadWithJob`` and ``DRAWorkloadResourceClaims`` (kube-apiserver and
kube-controller-manager) and ``--runtime-config=scheduling.k8s.io/v1beta1=true``; on 1.36,
``GenericWorkload`` and ``DRAWorkloadResourceClaims`` and ``scheduling.k8s.io/v1alpha2=true``.
Kubernetes 1.34 and 1.35 serve no Workload API the bridge reads: there each test asserts that the
API server refuses a pod naming a PodGroup (strict field validation) instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.schedulingapi import KubeVersion
from slurm_bridge.operator.placeholderjobs.grouping.groups import phj_name
from tests.e2e.test_preemption import EXCLUSIVE
from tests.e2e.test_workloads import (
    KEEP_RUNNING,
    _assert_unreleased_for,
    _bound_to_assignments,
    _one_gang_job,
    _phase,
    _pods,
)
from tests.e2e.util import Native, bridge_jobs_in, get_phj, make_pod, pod_events, read_pod, slurm_job
from tests.harness import TENANTS, SlurmEnv, squeue_state, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

P = names.SLURMJOB_PREFIX
# Accounts the bridge's Slurm user has (hack/accounting.env BRIDGE_ACCOUNTS): Slurm enforces
# associations, so a job naming another account is refused.
GROUP = schedulingapi.GROUP
Obj = dict[str, Any]
# What each Kubernetes minor release must serve (None: no Workload API the bridge reads).
EXPECTED = {v.kubernetes: v.version for v in schedulingapi.VERSIONS.values()}


def expected_version(minor: int | None) -> str | None:
    if minor is None or minor < schedulingapi.FIRST_MINOR:
        return None
    return EXPECTED.get(minor) or schedulingapi.PREFERRED[0]


@dataclass(frozen=True)
class WorkloadAPI:
    """The cluster's Kubernetes version and the Workload API version it serves, and objects in
    that version's shape."""

    kube: KubeVersion
    version: str | None

    @property
    def api(self) -> str:
        assert self.version is not None
        return f"{GROUP}/{self.version}"

    @property
    def condition(self) -> str:
        assert self.version is not None
        return schedulingapi.VERSIONS[self.version].condition

    def workload(self, name: str, min_count: int, annotations: dict[str, str] | None = None) -> Obj:
        return {
            "apiVersion": self.api,
            "kind": "Workload",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {
                "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
                "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}],
            },
        }

    def podgroup(
        self, name: str, workload: str, min_count: int, annotations: dict[str, str] | None = None, **extra: Any
    ) -> Obj:
        if self.version == "v1beta1":
            ref: Obj = {"workloadRef": {"workloadName": workload, "templateName": "workers"}}
        else:
            ref = {"podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": "workers"}}}
        return {
            "apiVersion": self.api,
            "kind": "PodGroup",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {**ref, "schedulingPolicy": {"gang": {"minCount": min_count}}, **extra},
        }

    def create(self, custom: k8s.CustomObjectsApi, ns: str, body: Obj) -> Obj:
        plural = {"Workload": "workloads", "PodGroup": "podgroups"}[body["kind"]]
        assert self.version is not None
        created: Obj = custom.create_namespaced_custom_object(GROUP, self.version, ns, plural, body)
        return created

    def podgroups(self, custom: k8s.CustomObjectsApi, ns: str) -> list[Obj]:
        assert self.version is not None
        items: list[Obj] = custom.list_namespaced_custom_object(GROUP, self.version, ns, "podgroups")["items"]
        return items

    def scheduled(self, custom: k8s.CustomObjectsApi, ns: str, name: str) -> Obj | None:
        assert self.version is not None
        pg = custom.get_namespaced_custom_object(GROUP, self.version, ns, "podgroups", name)
        conditions = (pg.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == self.condition), None)


@pytest.fixture(scope="module")
def wapi(api_client: k8s.ApiClient) -> WorkloadAPI:
    """The served version, found once by discovery; a Kubernetes that does not serve the version
    it must (1.37: v1beta1, 1.36: v1alpha2) fails every test here, naming what to turn on."""
    info = k8s.VersionApi(api_client).get_code()
    kube = schedulingapi.kube_version({"major": info.major, "minor": info.minor, "gitVersion": info.git_version})
    served: dict[str, set[str]] = {}
    for group in k8s.ApisApi(api_client).get_api_versions().groups:
        if group.name == GROUP:
            for v in group.versions:
                if v.version != "v1":
                    listed = k8s.CustomObjectsApi(api_client).get_api_resources(GROUP, v.version).resources
                    served[v.version] = {r.name for r in listed}
    version = schedulingapi.choose_version(served)
    expected = expected_version(kube.minor)
    assert version == expected, (
        f"{kube} must serve the Workload API at {expected or 'no version the bridge reads'}, but discovery found "
        f"{version or 'none'} (served: {served}); {schedulingapi.workload_api_needs(kube)}"
    )
    return WorkloadAPI(kube, version)


@pytest.fixture
def workload_kinds(wapi: WorkloadAPI) -> tuple[tuple[str, str, str], ...]:
    """The Workload API objects the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    if wapi.version is None:
        return ()
    return ((GROUP, wapi.version, "podgroups"), (GROUP, wapi.version, "workloads"))


def _job(name: str, podgroup: str | None, pods: int, annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    pod_spec: Obj = {"restartPolicy": "Never", "containers": [container]}
    if podgroup:
        pod_spec["schedulingGroup"] = {"podGroupName": podgroup}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": KEEP_RUNNING}, "spec": pod_spec},
            **spec,
        },
    }


def _no_workload_api(wapi: WorkloadAPI, core: k8s.CoreV1Api, ns: str) -> None:
    """What Kubernetes 1.34/1.35 must do instead: ``spec.schedulingGroup`` is not a field there, so
    a pod naming a PodGroup is refused by the API server's strict field validation (kubectl's
    default), never run alone in silence by the bridge."""
    assert wapi.kube.minor is not None and wapi.kube.minor < schedulingapi.FIRST_MINOR, wapi
    pod = make_pod("grouped")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, pod, field_validation="Strict")
    assert err.value.status == 400 and "schedulingGroup" in (err.value.body or ""), err.value.body


def _refused(err: pytest.ExceptionInfo[ApiException]) -> str:
    message: str = json.loads(err.value.body or "{}").get("message", "")
    assert err.value.status == 422 and "slurm-bridge" in message, err.value.body
    return message


def test_job_with_a_workload_gang_starts_both_pods_together_on_distinct_nodes(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    wapi.create(custom, ns, wapi.workload("train", 2, {P + "account": "workload", P + "timelimit": "20"}))
    wapi.create(
        custom, ns, wapi.podgroup("train-workers", "train", 2, {P + "job-name": "train-gang", P + "account": "pg"})
    )
    batch.create_namespaced_job(ns, _job("train", "train-workers", 2, {P + "timelimit": "30", P + "qos": "normal"}))

    phj = _phase(custom, ns, "pg-train-workers", "Running", timeout=90)
    assert phj["spec"]["group"]["apiVersion"] == wapi.api
    assert phj["spec"]["minMember"] == 2
    pods = _pods(core, ns, "job-name=train")
    assert sorted(p.metadata.name for p in pods) == sorted(phj["spec"]["pods"])
    assignments = _bound_to_assignments(core, ns, phj)
    assert len(set(assignments.values())) == 2, f"two distinct nodes: {assignments}"
    job = _one_gang_job(slurm_env, ns, phj, 2)
    # PodGroup <- Job <- Workload: the Workload's account and time limit win; the PodGroup names it.
    assert (job["name"], job["account"], job["time_limit"]["number"]) == ("train-gang", "workload", 20)

    cond = wait_for(
        lambda: (c := wapi.scheduled(custom, ns, "train-workers")) and c["status"] == "True" and c,
        30,
        f"{wapi.condition}=True",
    )
    assert cond["reason"] == names.PODGROUP_REASON_SCHEDULED
    assert str(phj["status"]["jobId"]) in cond["message"]


def test_workload_gang_that_slurm_cannot_place_starts_no_pod(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    size = len(slurm_env.nodes) + 1  # one pod per node: more nodes than the partition has
    options = {P + "partition": slurm_env.partition}
    wapi.create(custom, ns, wapi.workload("big", size, options))
    wapi.create(custom, ns, wapi.podgroup("big-workers", "big", size))
    batch.create_namespaced_job(ns, _job("big", "big-workers", size))

    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "pg-big-workers")) and (p.get("status") or {}).get("jobId")
        and p["status"].get("slurmState") == "PENDING" and p["status"].get("reason") and p,
        90,
        "the oversized gang pending in Slurm",
    )  # fmt: skip
    job = slurm_job(slurm_env, phj["status"]["jobId"])
    assert job is not None and job["job_state"] == ["PENDING"] and job["node_count"]["number"] == size
    assert job["name"] == "big-workers", "no job-name annotation: the job is named after the PodGroup"
    assert len(_pods(core, ns, "job-name=big")) == size
    _assert_unreleased_for(core, ns, 5, "job-name=big")  # none of the gang starts
    cond = wait_for(lambda: wapi.scheduled(custom, ns, "big-workers"), 30, f"{wapi.condition} reported")
    assert (cond["status"], cond["reason"]) == ("False", names.PODGROUP_REASON_UNSCHEDULABLE)
    # Slurm's own reason (PartitionNodeLimit or PartitionConfig, depending on its last evaluation).
    reason = cond["message"].removeprefix(f"Slurm job {phj['status']['jobId']} is pending: ")
    assert reason in ("PartitionNodeLimit", "PartitionConfig"), cond


def test_pods_wait_for_their_podgroup_and_then_start(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    """A Job's pods may exist before their PodGroup: they wait for it, then start as a gang."""
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    batch.create_namespaced_job(ns, _job("late", "late-workers", 2))
    wait_for(lambda: len(_pods(core, ns, "job-name=late")) == 2, 30, "the Job's 2 pods")
    first = sorted(p.metadata.name for p in _pods(core, ns, "job-name=late"))[0]
    event = wait_for(
        lambda: next((e for e in pod_events(core, ns, first) if e.reason == "PodGroupNotFound"), None),
        30,
        "a PodGroupNotFound Event on the pod",
    )
    assert "late-workers" in event.message and wapi.api in event.message and event.type == "Warning"
    _assert_unreleased_for(core, ns, 2, "job-name=late")

    wapi.create(custom, ns, wapi.workload("late", 2))
    wapi.create(custom, ns, wapi.podgroup("late-workers", "late", 2))
    phj = _phase(custom, ns, "pg-late-workers", "Running", timeout=60)
    assert len(set(_bound_to_assignments(core, ns, phj).values())) == 2
    _one_gang_job(slurm_env, ns, phj, 2)


def test_a_podgroup_made_before_its_workload(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    """1.36's API server refuses a PodGroup whose Workload does not exist (admission plugin
    PodGroupWorkloadExists); 1.37's admits it, and its pods wait for the Workload (their options
    come from it too) with a WorkloadNotFound Event, then start."""
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    early = wapi.podgroup("early-workers", "early", 2)
    if wapi.version == "v1alpha2":
        with pytest.raises(ApiException) as err:
            wapi.create(custom, ns, early)
        assert err.value.status == 403 and "early" in (err.value.body or ""), err.value.body
        return
    wapi.create(custom, ns, early)
    batch.create_namespaced_job(ns, _job("early", "early-workers", 2))
    wait_for(lambda: len(_pods(core, ns, "job-name=early")) == 2, 30, "the Job's 2 pods")
    first = sorted(p.metadata.name for p in _pods(core, ns, "job-name=early"))[0]
    event = wait_for(
        lambda: next((e for e in pod_events(core, ns, first) if e.reason == "WorkloadNotFound"), None),
        30,
        "a WorkloadNotFound Event on the pod",
    )
    assert "Workload early" in event.message and event.type == "Warning"
    _assert_unreleased_for(core, ns, 2, "job-name=early")
    wapi.create(custom, ns, wapi.workload("early", 2, {P + "account": "gang"}))
    phj = _phase(custom, ns, "pg-early-workers", "Running", timeout=60)
    assert _one_gang_job(slurm_env, ns, phj, 2)["account"] == "gang"


def _controlled_by(obj: Obj, uid: str) -> bool:
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def test_a_podgroup_the_job_controller_makes_is_a_gang_like_one_made_by_hand(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
) -> None:
    """Kubernetes 1.37's Job controller (gate WorkloadWithJob) makes a Workload and a PodGroup from
    a Job's ``spec.scheduling`` and names the PodGroup in its pods: one Slurm job of 2 nodes,
    configured by the Job. Before 1.37 ``spec.scheduling`` is not a Job field: the API server drops
    it and the Job's pods are one Slurm job each, as for any Job."""
    gang = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    annotations = {P + "account": "physics", P + "timelimit": "15"}
    created = batch.create_namespaced_job(ns, _job("ctl", None, 2, annotations, scheduling=gang))
    uid = created.metadata.uid
    if wapi.version != "v1beta1":
        assert batch.read_namespaced_job("ctl", ns).spec.scheduling is None, "Kubernetes before 1.37 drops it"
        plain = wait_for(lambda: (p := _pods(core, ns, "job-name=ctl")) and len(p) == 2 and p, 30, "the Job's 2 pods")
        for each in plain:
            assert each.spec.scheduling_group is None
            _phase(custom, ns, each.metadata.name, "Running", timeout=60)  # each pod its own PlaceholderJob
        assert wapi.version is None or wapi.podgroups(custom, ns) == [], "no PodGroup before 1.37"
        assert len(bridge_jobs_in(slurm_env, ns)) == 2
        return

    stored = batch.read_namespaced_job("ctl", ns).spec.scheduling
    assert stored is not None, (
        f"{wapi.kube} dropped the Job's spec.scheduling: turn on the feature gate {schedulingapi.JOB_GATE}=true on "
        "kube-apiserver and kube-controller-manager"
    )
    pg = wait_for(
        lambda: next((g for g in wapi.podgroups(custom, ns) if _controlled_by(g, uid)), None),
        30,
        f"the Job controller's PodGroup (is {schedulingapi.JOB_GATE} on in kube-controller-manager?)",
    )
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    workload_ref = pg["spec"]["workloadRef"]
    wl = custom.get_namespaced_custom_object(GROUP, wapi.version, ns, "workloads", workload_ref["workloadName"])
    assert _controlled_by(wl, uid) and wl["spec"]["controllerRef"] == {
        "apiGroup": "batch",
        "kind": "Job",
        "name": "ctl",
    }
    pods = wait_for(lambda: (p := _pods(core, ns, "job-name=ctl")) and len(p) == 2 and p, 30, "the Job's 2 pods")
    for p in pods:
        assert p.spec.scheduling_group.pod_group_name == pg["metadata"]["name"]

    phj = _phase(custom, ns, phj_name("pg", pg["metadata"]["name"]), "Running", timeout=90)
    assert (phj["spec"]["group"]["kind"], phj["spec"]["group"]["uid"]) == ("PodGroup", pg["metadata"]["uid"])
    assert phj["spec"]["group"]["apiVersion"] == wapi.api and phj["spec"]["minMember"] == 2
    assert len(set(_bound_to_assignments(core, ns, phj).values())) == 2
    job = _one_gang_job(slurm_env, ns, phj, 2)
    assert (job["account"], job["time_limit"]["number"]) == ("physics", 15)
    assert job["name"] == pg["metadata"]["name"][:200]
    cond = wait_for(
        lambda: (c := wapi.scheduled(custom, ns, pg["metadata"]["name"])) and c["status"] == "True" and c,
        30,
        f"{wapi.condition}=True on the Job controller's PodGroup",
    )
    assert cond["reason"] == names.PODGROUP_REASON_SCHEDULED


def test_a_podgroup_whose_pods_would_share_claims_is_refused(
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    batch: k8s.BatchV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
) -> None:
    """Claims shared by a PodGroup would be allocated by kube-scheduler apart from Slurm's nodes:
    refused at admission (a PodGroup, a Workload's template, on 1.37 a Job's spec.scheduling), with
    what to do instead. The API server keeps these fields only with DRAWorkloadResourceClaims on."""
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    claims = [{"name": "fabric", "resourceClaimName": "ib-fabric"}]
    dropped = f"the API server dropped resourceClaims: turn on the feature gate DRAWorkloadResourceClaims ({wapi.kube})"

    wapi.create(custom, ns, wapi.workload("shared", 2))
    with pytest.raises(ApiException) as err:
        wapi.create(custom, ns, wapi.podgroup("shared-workers", "shared", 2, resourceClaims=claims))
        pytest.fail(dropped)
    message = _refused(err)
    assert "spec.resourceClaims (fabric)" in message and "deviceclass.resource.kubernetes.io" in message

    template = wapi.workload("shared-template", 2)
    template["spec"]["podGroupTemplates"][0]["resourceClaims"] = claims
    with pytest.raises(ApiException) as err:
        wapi.create(custom, ns, template)
        pytest.fail(dropped)
    assert "spec.podGroupTemplates[0].resourceClaims (fabric)" in _refused(err)

    if wapi.version == "v1beta1":
        scheduling = {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claims}
        with pytest.raises(ApiException) as err:
            batch.create_namespaced_job(ns, _job("shared-job", None, 2, scheduling=scheduling))
            pytest.fail(f"the Job was admitted: is {schedulingapi.JOB_GATE} on ({wapi.kube})?")
        assert "spec.scheduling.resourceClaims (fabric)" in _refused(err)
    assert wapi.podgroups(custom, ns) == [], "nothing was made from a refused object"


# ---- disruptionMode (issue 38 §2; docs/workloads.md#what-the-bridge-refuses-and-why) ----------------


def _all_together(wapi: WorkloadAPI) -> Any:
    """``disruptionMode`` all in the served version's shape (v1alpha2 names it PodGroup)."""
    return {"all": {}} if wapi.version == "v1beta1" else "PodGroup"


def test_disruption_mode_all_without_a_gang_is_refused_and_with_one_admitted(
    wapi: WorkloadAPI, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    """A basic group's pods are separate Slurm jobs, which Slurm preempts one by one: all together
    cannot be honoured. A gang is one Slurm job, disrupted whole."""
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    wapi.create(custom, ns, wapi.workload("loose", 2))
    basic = wapi.podgroup("loose-workers", "loose", 2, disruptionMode=_all_together(wapi))
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    with pytest.raises(ApiException) as err:
        wapi.create(custom, ns, basic)
        pytest.fail("a basic PodGroup with disruptionMode all was admitted")
    message = _refused(err)
    assert "spec.disruptionMode (" in message and "without spec.schedulingPolicy.gang" in message, message
    wapi.create(custom, ns, wapi.podgroup("tight-workers", "loose", 2, disruptionMode=_all_together(wapi)))
    assert [pg["metadata"]["name"] for pg in wapi.podgroups(custom, ns)] == ["tight-workers"]


def test_a_gang_disrupted_all_together_is_preempted_whole(
    wapi: WorkloadAPI, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv,
    native: Native,
) -> None:  # fmt: skip
    """A native job of the urgent QOS preempts one node of a two-node gang whose PodGroup says
    disruptionMode all: both pods end (the gang is one Slurm job), and the native job starts."""
    if wapi.version is None:
        return _no_workload_api(wapi, core, ns)
    nodes = slurm_env.hybrid_nodes[:2]
    assert len(nodes) == 2, f"this test needs two hybrid nodes, the cluster has {slurm_env.hybrid_nodes}"
    assert "preempt/qos" in slurm_env.scontrol("show", "config"), "slurmctld does not preempt by QOS"
    options = {P + "partition": slurm_env.hybrid_partition, P + "qos": "pods", **EXCLUSIVE}
    wapi.create(custom, ns, wapi.workload("fragile", 2))
    wapi.create(custom, ns, wapi.podgroup("fragile-workers", "fragile", 2, options, disruptionMode=_all_together(wapi)))
    members = [f"fragile-{i}" for i in range(2)]
    for name in members:
        pod = make_pod(name, cpu=str(slurm_env.node_cpus(nodes[0])))
        pod["spec"]["schedulingGroup"] = {"podGroupName": "fragile-workers"}
        core.create_namespaced_pod(ns, pod)

    def placed() -> list[str]:
        found = [read_pod(core, ns, n) for n in members]
        return sorted(p.spec.node_name for p in found if p and p.spec.node_name and p.status.phase == "Running")

    wait_for(lambda: placed() == sorted(nodes), 90, f"the gang running on {nodes}")
    job_id = int((get_phj(custom, ns, "pg-fragile-workers") or {})["status"]["jobId"])
    cpus = str(slurm_env.node_cpus(nodes[0]))
    preemptor = native.submit(TENANTS["a"], "-p", slurm_env.hybrid_partition, "-w", nodes[0], "-c", cpus,
                              "--mem=64", "--qos", "native-urgent")  # fmt: skip
    wait_for(lambda: all(read_pod(core, ns, n) is None for n in members), 90, "both gang members ended together")
    wait_for(lambda: squeue_state(slurm_env, preemptor) == "RUNNING", 60, f"the preemptor {preemptor} running")
    assert (slurm_job(slurm_env, job_id) or {}).get("job_state") == ["CANCELLED"]
