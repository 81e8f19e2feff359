"""The Kubernetes 1.36 Workload API on the real cluster (feature gate GenericWorkload and
scheduling.k8s.io/v1alpha2 on, hack/cluster.sh): a Job whose pods name a PodGroup with
``gang.minCount`` 2 is one Slurm job whose pods start together on distinct nodes, or, when Slurm
cannot place the whole gang, none starts; options merge PodGroup <- Job <- Workload; the
PodGroup reports ``PodGroupScheduled`` as kube-scheduler would.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.test_workloads import (
    KEEP_RUNNING,
    _assert_unreleased_for,
    _bound_to_assignments,
    _one_gang_job,
    _phase,
    _pods,
)
from tests.e2e.util import get_phj, pod_events, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

P = names.SLURMJOB_PREFIX
GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"
Obj = dict[str, Any]


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The Workload API objects the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return ((GROUP, VERSION, "podgroups"), (GROUP, VERSION, "workloads"))


def _workload(name: str, min_count: int, annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}],
        },
    }


def _podgroup(name: str, workload: str, min_count: int, annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "podGroupTemplateRef": {"workload": {"workloadName": workload, "podGroupTemplateName": "workers"}},
            "schedulingPolicy": {"gang": {"minCount": min_count}},
        },
    }


def _job(name: str, podgroup: str, pods: int, annotations: dict[str, str] | None = None) -> Obj:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": KEEP_RUNNING},
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGroup": {"podGroupName": podgroup},
                    "containers": [container],
                },
            },
        },
    }


def _create(custom: k8s.CustomObjectsApi, ns: str, body: Obj) -> None:
    plural = {"Workload": "workloads", "PodGroup": "podgroups"}[body["kind"]]
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)


def _scheduled_condition(custom: k8s.CustomObjectsApi, ns: str, name: str) -> Obj | None:
    pg = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "podgroups", name)
    conditions = (pg.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == names.PODGROUP_COND_SCHEDULED), None)


def test_job_with_a_workload_gang_starts_both_pods_together_on_distinct_nodes(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    _create(custom, ns, _workload("train", 2, {P + "account": "workload", P + "timelimit": "20"}))
    _create(custom, ns, _podgroup("train-workers", "train", 2, {P + "job-name": "train-gang", P + "account": "pg"}))
    batch.create_namespaced_job(ns, _job("train", "train-workers", 2, {P + "timelimit": "30", P + "qos": "normal"}))

    phj = _phase(custom, ns, "pg-train-workers", "Running", timeout=90)
    assert phj["spec"]["group"]["apiVersion"] == f"{GROUP}/{VERSION}"
    assert phj["spec"]["minMember"] == 2
    pods = _pods(core, ns, "job-name=train")
    assert sorted(p.metadata.name for p in pods) == sorted(phj["spec"]["pods"])
    assignments = _bound_to_assignments(core, ns, phj)
    assert len(set(assignments.values())) == 2, f"two distinct nodes: {assignments}"
    job = _one_gang_job(slurm_env, ns, phj, 2)
    # PodGroup <- Job <- Workload: the Workload's account and time limit win; the PodGroup names it.
    assert (job["name"], job["account"], job["time_limit"]["number"]) == ("train-gang", "workload", 20)

    cond = wait_for(
        lambda: (c := _scheduled_condition(custom, ns, "train-workers")) and c["status"] == "True" and c,
        30,
        "PodGroupScheduled=True",
    )
    assert cond["reason"] == names.PODGROUP_REASON_SCHEDULED
    assert str(phj["status"]["jobId"]) in cond["message"]


def test_workload_gang_that_slurm_cannot_place_starts_no_pod(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    size = len(slurm_env.nodes) + 1  # one pod per node: more nodes than the partition has
    options = {P + "partition": slurm_env.partition}
    _create(custom, ns, _workload("big", size, options))
    _create(custom, ns, _podgroup("big-workers", "big", size))
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
    cond = wait_for(
        lambda: (c := _scheduled_condition(custom, ns, "big-workers")) and c,
        30,
        "PodGroupScheduled reported",
    )
    assert (cond["status"], cond["reason"]) == ("False", names.PODGROUP_REASON_UNSCHEDULABLE)
    # Slurm's own reason (PartitionNodeLimit or PartitionConfig, depending on its last evaluation).
    reason = cond["message"].removeprefix(f"Slurm job {phj['status']['jobId']} is pending: ")
    assert reason in ("PartitionNodeLimit", "PartitionConfig"), cond


def test_pods_wait_for_their_podgroup_and_then_start(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """A Job's pods may exist before their PodGroup: they wait for it, then start as a gang."""
    batch.create_namespaced_job(ns, _job("late", "late-workers", 2))
    wait_for(lambda: len(_pods(core, ns, "job-name=late")) == 2, 30, "the Job's 2 pods")
    first = sorted(p.metadata.name for p in _pods(core, ns, "job-name=late"))[0]
    event = wait_for(
        lambda: next((e for e in pod_events(core, ns, first) if e.reason == "PodGroupNotFound"), None),
        30,
        "a PodGroupNotFound Event on the pod",
    )
    assert "late-workers" in event.message and event.type == "Warning"
    _assert_unreleased_for(core, ns, 2, "job-name=late")

    # The API server admits a PodGroup only once its Workload exists.
    _create(custom, ns, _workload("late", 2))
    _create(custom, ns, _podgroup("late-workers", "late", 2))
    phj = _phase(custom, ns, "pg-late-workers", "Running", timeout=60)
    assert len(set(_bound_to_assignments(core, ns, phj).values())) == 2
    _one_gang_job(slurm_env, ns, phj, 2)
