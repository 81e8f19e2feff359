"""Workloads as Slurm allocations on the real cluster: batch Jobs (one Slurm job per pod), and
JobSets, LeaderWorkerSets and coscheduling PodGroups as gangs (one Slurm job, one node per pod,
all pods released together), with their options read back from slurmrestd.

The JobSet and LeaderWorkerSet controllers are the real ones (hack/cluster.sh builds and starts
them); the PodGroup is only a CRD, so its pods are created here, as a user would.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import bridge_jobs_in, get_phj, has_gate, list_phjs, live_jobs, make_pod, read_pod, slurm_job
from tests.harness import BRIDGE_SH, CLUSTER_SH, SlurmEnv, holds_for, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge", "workload_controllers")

P = names.SLURMJOB_PREFIX
# kwok completes Job-owned pods at once; this keeps them Running (hack/kwok-stages.yaml).
KEEP_RUNNING = {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
Obj = dict[str, Any]


@pytest.fixture(scope="session")
def workload_controllers(cluster: dict[str, str]) -> None:
    """The JobSet and LeaderWorkerSet controllers; started on a cluster that predates them."""
    out = run(["bash", str(CLUSTER_SH), "status"]).stdout
    states = {ln.split()[0]: ln.split()[1] for ln in out.splitlines()[1:] if len(ln.split()) > 2}
    if states.get("jobset-controller") != "running" or states.get("lws-controller") != "running":
        proc = run(["bash", str(CLUSTER_SH), "start-workloads"], check=False, timeout=600)
        assert proc.returncode == 0, f"hack/cluster.sh start-workloads failed:\n{proc.stderr[-3000:]}"


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The custom workload kinds the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return (JOBSET, LWS, PODGROUP)


# --- manifests --------------------------------------------------------------------------------


def _container(cpu: str = "100m", gpus: int = 0) -> Obj:
    resources: Obj = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"name": "main", "image": "busybox", "resources": resources}


def _pod_template(annotations: dict[str, str] | None = None, gpus: int = 0) -> Obj:
    return {
        "metadata": {"annotations": {**KEEP_RUNNING, **(annotations or {})}},
        "spec": {"restartPolicy": "Never", "containers": [_container(gpus=gpus)]},
    }


def _jobset(
    name: str,
    replicated: list[tuple[str, int, int]],
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
    gpus: int = 0,
) -> Obj:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": rname,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": pods,
                            "completions": pods,
                            "backoffLimit": 0,
                            "template": _pod_template(template_annotations, gpus),
                        }
                    },
                }
                for rname, replicas, pods in replicated
            ]
        },
    }


def _create(custom: k8s.CustomObjectsApi, gvp: tuple[str, str, str], ns: str, body: Obj) -> None:
    custom.create_namespaced_custom_object(gvp[0], gvp[1], ns, gvp[2], body)


def _phase(custom: k8s.CustomObjectsApi, ns: str, name: str, phase: str, timeout: float = 60) -> Obj:
    phj: Obj = wait_for(
        lambda: (p := get_phj(custom, ns, name)) and (p.get("status") or {}).get("phase") == phase and p,
        timeout,
        f"PlaceholderJob {ns}/{name} {phase}",
    )
    return phj


def _pods(core: k8s.CoreV1Api, ns: str, selector: str = "") -> list[Any]:
    return list(core.list_namespaced_pod(ns, label_selector=selector).items)


def _bound_to_assignments(core: k8s.CoreV1Api, ns: str, phj: Obj) -> dict[str, str]:
    """pod -> node for every member, checking each pod runs on the node its PlaceholderJob assigned."""
    assignments = {a["pod"]: a["node"] for a in phj["status"]["assignments"]}
    assert sorted(assignments) == sorted(phj["spec"]["pods"])

    def bound(name: str) -> Any:
        pod = read_pod(core, ns, name)
        return pod if pod is not None and pod.spec.node_name else None

    for pod_name, node in assignments.items():
        pod = wait_for(functools.partial(bound, pod_name), 30, f"pod {pod_name} bound")
        assert pod.spec.node_name == node, f"{pod_name} runs on {pod.spec.node_name}, assigned {node}"
        assert pod.metadata.labels[names.LABEL_SLURM_JOB_ID] == str(phj["status"]["jobId"])
        assert not has_gate(pod)
    return assignments


def _one_gang_job(slurm_env: SlurmEnv, ns: str, phj: Obj, nodes: int) -> Obj:
    jobs = bridge_jobs_in(slurm_env, ns)
    assert [j["job_id"] for j in jobs] == [phj["status"]["jobId"]], "one Slurm job for the whole gang"
    job = slurm_job(slurm_env, phj["status"]["jobId"])
    assert job is not None
    assert job["node_count"]["number"] == nodes
    assert job["job_state"] == ["RUNNING"]
    return job


def _assert_unreleased_for(core: k8s.CoreV1Api, ns: str, seconds: float, selector: str = "") -> None:
    """For a few poll periods no pod may be released or bound."""
    holds_for(lambda: all(has_gate(p) and not p.spec.node_name for p in _pods(core, ns, selector)), seconds,
              "no pod released without its gang", interval=0.5)  # fmt: skip


# --- batch Job: one Slurm job per pod ---------------------------------------------------------


def test_job_with_parallelism_3_is_three_slurm_jobs(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "par", "annotations": {P + "timelimit": "15"}},
        "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0, "activeDeadlineSeconds": 3600,
                 "template": _pod_template({P + "timelimit": "99"})},
    }  # fmt: skip
    batch.create_namespaced_job(ns, job)
    pods = wait_for(lambda: (ps := _pods(core, ns, "job-name=par")) and len(ps) == 3 and ps, 30, "3 Job pods")
    for pod in pods:
        phj = _phase(custom, ns, pod.metadata.name, "Running")  # each pod is its own group
        assert phj["spec"]["pods"] == [pod.metadata.name]
        assert phj["spec"]["group"]["kind"] == "Job"
        assert phj["spec"]["slurm"]["nodes"] == 1
    jobs = bridge_jobs_in(slurm_env, ns)
    assert len(jobs) == 3, [j["job_id"] for j in jobs]
    for j in jobs:
        assert j["node_count"]["number"] == 1
        # The Job's annotation beats both its deadline (60 min) and the pod template's annotation.
        assert j["time_limit"]["number"] == 15


# --- JobSet: one gang -------------------------------------------------------------------------


def test_jobset_is_one_slurm_job_on_four_distinct_nodes(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    _create(custom, JOBSET, ns, _jobset("train", [("a", 1, 2), ("b", 1, 2)], {P + "timelimit": "20"}))
    phj = _phase(custom, ns, "jobset-train", "Running", timeout=90)
    assert phj["spec"]["minMember"] == 4
    assert len(phj["spec"]["pods"]) == 4
    assert phj["spec"]["group"]["kind"] == "JobSet" and phj["spec"]["group"]["name"] == "train"
    owner = phj["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("JobSet", "train"), "garbage-collected with its JobSet"
    assignments = _bound_to_assignments(core, ns, phj)
    assert len(set(assignments.values())) == 4, f"4 distinct nodes: {assignments}"
    job = _one_gang_job(slurm_env, ns, phj, 4)
    assert job["time_limit"]["number"] == 20
    assert len(_pods(core, ns, "jobset.sigs.k8s.io/jobset-name=train")) == 4
    assert len(list_phjs(custom, ns)) == 1


def test_root_workload_options_reach_slurm_and_templates_cannot_override(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    options = {
        P + "partition": slurm_env.partition,
        P + "account": "physics",
        P + "timelimit": "1:30:00",
        P + "constraints": "gpu",
    }
    template = {P + "timelimit": "7", P + "account": "someone-else", P + "constraints": "kwok"}
    _create(custom, JOBSET, ns, _jobset("opts", [("w", 1, 2)], options, template))
    phj = _phase(custom, ns, "jobset-opts", "Running", timeout=90)
    job = _one_gang_job(slurm_env, ns, phj, 2)
    assert job["partition"] == slurm_env.partition
    assert job["account"] == "physics"
    assert job["time_limit"]["number"] == 90
    assert job["features"] == "gpu"
    # The constraint held: both pods run on the GPU nodes (the only ones with feature "gpu").
    assert sorted(_bound_to_assignments(core, ns, phj).values()) == sorted(slurm_env.gpu_nodes)


def test_jobset_restart_runs_as_a_new_slurm_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """Pods that arrive after their gang ended (the JobSet restarted them) start a new gang."""
    jobset = _jobset("again", [("w", 1, 2)])
    jobset["spec"]["failurePolicy"] = {"maxRestarts": 1}
    _create(custom, JOBSET, ns, jobset)
    first = _phase(custom, ns, "jobset-again", "Running", timeout=90)
    # A container failing, as the kubelet would report it: the Job fails and the JobSet restarts.
    victim = first["spec"]["pods"][0]
    core.patch_namespaced_pod_status(victim, ns, {"status": {"phase": "Failed"}})
    second: Obj = wait_for(
        lambda: (p := get_phj(custom, ns, "jobset-again")) and p["metadata"]["uid"] != first["metadata"]["uid"]
        and (p.get("status") or {}).get("phase") == "Running" and p,
        90,
        "a new PlaceholderJob for the restarted JobSet, Running",
    )  # fmt: skip
    assert second["status"]["jobId"] != first["status"]["jobId"]
    assert not set(second["spec"]["pods"]) & set(first["spec"]["pods"])
    _bound_to_assignments(core, ns, second)
    old = wait_for(
        lambda: (j := slurm_job(slurm_env, first["status"]["jobId"])) and j["job_state"] != ["RUNNING"] and j,
        30,
        "the first run's Slurm job to end",
    )
    assert old["job_state"] == ["CANCELLED"]
    assert [j["job_id"] for j in live_jobs(slurm_env, ns)] == [second["status"]["jobId"]]


# --- LeaderWorkerSet: one gang per group ------------------------------------------------------


def _lws(name: str, replicas: int, size: int, restart_policy: str = "RecreateGroupOnPodRestart") -> Obj:
    template = {"spec": {"containers": [_container()]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "annotations": {P + "timelimit": "25"}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "restartPolicy": restart_policy, "workerTemplate": template},
        },
    }


def test_leaderworkerset_of_size_3_is_one_slurm_job_per_group(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    _create(custom, LWS, ns, _lws("serve", replicas=2, size=3))
    groups = [_phase(custom, ns, f"lws-serve-{i}", "Running", timeout=90) for i in range(2)]
    job_ids = set()
    for i, phj in enumerate(groups):
        assert phj["spec"]["minMember"] == 3
        assert sorted(phj["spec"]["pods"]) == sorted([f"serve-{i}", f"serve-{i}-1", f"serve-{i}-2"])
        assignments = _bound_to_assignments(core, ns, phj)
        assert len(set(assignments.values())) == 3, assignments
        job = slurm_job(slurm_env, phj["status"]["jobId"])
        assert job is not None and job["node_count"]["number"] == 3 and job["time_limit"]["number"] == 25
        job_ids.add(phj["status"]["jobId"])
    assert sorted(job_ids) == sorted(j["job_id"] for j in bridge_jobs_in(slurm_env, ns))
    assert len(job_ids) == 2


def test_recreated_gang_member_takes_its_predecessors_place(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """A late member (here a worker the StatefulSet recreates) joins the running allocation."""
    _create(custom, LWS, ns, _lws("solo", replicas=1, size=2, restart_policy="None"))
    phj = _phase(custom, ns, "lws-solo-0", "Running", timeout=90)
    before = _bound_to_assignments(core, ns, phj)
    old = read_pod(core, ns, "solo-0-1")
    assert old is not None
    core.delete_namespaced_pod("solo-0-1", ns, grace_period_seconds=0)
    new = wait_for(
        lambda: (p := read_pod(core, ns, "solo-0-1")) and p.metadata.uid != old.metadata.uid and p.spec.node_name and p,
        60,
        "the recreated worker bound",
    )
    assert new.spec.node_name == before["solo-0-1"], "the same node of the same allocation"
    after = get_phj(custom, ns, "lws-solo-0")
    assert after is not None
    assert after["metadata"]["uid"] == phj["metadata"]["uid"]
    assert after["status"]["jobId"] == phj["status"]["jobId"]
    assert after["spec"]["podUIDs"]["solo-0-1"] == new.metadata.uid
    assert len(bridge_jobs_in(slurm_env, ns)) == 1, "no second Slurm job"


# --- coscheduling PodGroup ---------------------------------------------------------------------


def _podgroup(name: str, min_member: int, annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"minMember": min_member},
    }


def _member(name: str, group: str, gpus: int = 0, cpu: str = "100m") -> Obj:
    return make_pod(name, labels={names.LABEL_POD_GROUP: group}, gpus=gpus, cpu=cpu)


def test_podgroup_submits_only_once_min_member_pods_exist(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    _create(custom, PODGROUP, ns, _podgroup("pg", 2, {P + "account": "gang"}))
    core.create_namespaced_pod(ns, _member("w0", "pg"))
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "podgroup-pg")) and (p.get("status") or {}).get("reason") and p,
        30,
        "the PodGroup's PlaceholderJob waiting",
    )
    assert phj["status"]["reason"] == "WaitingForPods", phj["status"]
    assert "1 of 2" in phj["status"]["message"]
    _assert_unreleased_for(core, ns, 4)
    assert bridge_jobs_in(slurm_env, ns) == [], "no Slurm job for an incomplete gang"

    core.create_namespaced_pod(ns, _member("w1", "pg"))
    phj = _phase(custom, ns, "podgroup-pg", "Running")
    assert sorted(phj["spec"]["pods"]) == ["w0", "w1"]
    assignments = _bound_to_assignments(core, ns, phj)
    assert len(set(assignments.values())) == 2
    job = _one_gang_job(slurm_env, ns, phj, 2)
    assert job["account"] == "gang"


def test_gang_larger_than_the_cluster_stays_pending_with_slurms_reason(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    size = len(slurm_env.nodes) + 1
    # The local Slurm has no accounting database: it keeps a job's QOS only until the job starts
    # (docs/workloads.md), so QOS is read back here, from a job that stays pending.
    options = {P + "qos": "high", P + "account": "physics", P + "timelimit": "45", P + "partition": slurm_env.partition}
    _create(custom, PODGROUP, ns, _podgroup("big", size, options))
    for i in range(size):
        core.create_namespaced_pod(ns, _member(f"b{i}", "big"))
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "podgroup-big")) and (p.get("status") or {}).get("jobId")
        and p["status"].get("slurmState") == "PENDING" and p["status"].get("reason") and p,
        60,
        "the oversized gang pending in Slurm",
    )  # fmt: skip
    assert phj["status"]["phase"] == "Pending"
    job = slurm_job(slurm_env, phj["status"]["jobId"])
    assert job is not None and job["job_state"] == ["PENDING"] and job["node_count"]["number"] == size
    assert (job["qos"], job["account"], job["partition"]) == ("high", "physics", slurm_env.partition)
    assert job["time_limit"]["number"] == 45
    # Slurm's own reason (PartitionNodeLimit or PartitionConfig, depending on its last evaluation).
    assert phj["status"]["reason"] in ("PartitionNodeLimit", "PartitionConfig"), phj["status"]
    _assert_unreleased_for(core, ns, 5)


def test_operator_restart_while_a_gang_forms_makes_one_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    _create(custom, PODGROUP, ns, _podgroup("rs", 3))
    core.create_namespaced_pod(ns, _member("r0", "rs"))
    core.create_namespaced_pod(ns, _member("r1", "rs"))
    wait_for(lambda: (p := get_phj(custom, ns, "podgroup-rs")) and len(p["spec"]["pods"]) == 2, 30, "2 members")
    run(["bash", str(BRIDGE_SH), "stop", "operator"])
    try:
        core.create_namespaced_pod(ns, _member("r2", "rs"))
    finally:
        run(["bash", str(BRIDGE_SH), "start", "operator"])
    phj = _phase(custom, ns, "podgroup-rs", "Running", timeout=90)
    assert sorted(phj["spec"]["pods"]) == ["r0", "r1", "r2"]
    assert len(set(_bound_to_assignments(core, ns, phj).values())) == 3
    _one_gang_job(slurm_env, ns, phj, 3)


# --- GPUs -------------------------------------------------------------------------------------


def test_gpu_pods_land_only_on_gpu_nodes(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    core.create_namespaced_pod(ns, make_pod("gpu", gpus=1))
    _create(custom, PODGROUP, ns, _podgroup("gpus", 2))
    core.create_namespaced_pod(ns, _member("g0", "gpus", gpus=1))
    core.create_namespaced_pod(ns, _member("g1", "gpus", gpus=3))

    single = _phase(custom, ns, "gpu", "Running")
    pod = wait_for(lambda: (p := read_pod(core, ns, "gpu")) and p.spec.node_name and p, 30, "GPU pod bound")
    assert pod.spec.node_name in slurm_env.gpu_nodes
    job = slurm_job(slurm_env, single["status"]["jobId"])
    assert job is not None and "gres/gpu:1" in job["tres_per_node"]

    gang = _phase(custom, ns, "podgroup-gpus", "Running")
    assert sorted(_bound_to_assignments(core, ns, gang).values()) == sorted(slurm_env.gpu_nodes)
    job = slurm_job(slurm_env, gang["status"]["jobId"])
    # Every node of a Slurm job gets the same request: the largest member's 3 GPUs.
    assert job is not None and "gres/gpu:3" in job["tres_per_node"]
