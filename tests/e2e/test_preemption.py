"""Preemption both ways between pods and native jobs (issue 28 §4; docs/colocation.md, "Preemption").

The local Slurm preempts by QOS (hack/slurm-policy.conf, hack/accounting.env): ``native-urgent``
native jobs preempt pods of QOS ``pods`` (PreemptMode CANCEL with a GraceTime: the bridge ends the
pod gracefully, with a ``SlurmJobPreempted`` Event naming the likely preemptor, and releases its
job once it stopped), and pods of QOS ``pods-urgent`` preempt native jobs of QOS ``native`` (the
cluster's REQUEUE: a ``--requeue`` batch job goes back to the queue). The pods run on the hybrid
nodes (kwok plays their kubelet, a real slurmd runs the native batch jobs); each takes a whole
node's CPUs so that only a preemption lets the other side start.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import (
    KWOK_COMPLETE_DELAY,
    get_phj,
    job_fields,
    list_phjs,
    make_pod,
    pod_events,
    read_pod,
    slurm_job,
)
from tests.harness import TENANTS, SlurmEnv, sbatch_as, squeue_state, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
ALICE = TENANTS["a"]
HOST = "kubernetes.io/hostname"
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
# The pods take whole nodes, as exclusive jobs. Not timeShared (the local default): Slurm's MCS
# filter (MCSParameters=ondemandselect) keeps a job off a node whose jobs carry another label before
# preemption is weighed, so time-shared pods and native jobs only take turns (docs/colocation.md).
EXCLUSIVE = {names.ANN_NODE_SHARING: names.NODE_SHARING_EXCLUSIVE}


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The custom workloads the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return (PODGROUP,)


@pytest.fixture
def hybrid(slurm_env: SlurmEnv) -> list[str]:
    assert len(slurm_env.hybrid_nodes) >= 2, (
        f"these tests need two hybrid nodes, the cluster has {slurm_env.hybrid_nodes}"
    )
    conf = slurm_env.scontrol("show", "config")
    assert "preempt/qos" in conf, "slurmctld does not preempt by QOS: restart the cluster (hack/slurm-policy.conf)"
    return slurm_env.hybrid_nodes[:2]


@pytest.fixture
def natives(slurm_env: SlurmEnv) -> Iterator[list[int]]:
    """Native jobs a test submits, cancelled after it."""
    jobs: list[int] = []
    yield jobs
    for job_id in jobs:
        slurm_env.slurm("scancel", str(job_id), check=False)
    for job_id in jobs:

        def gone(j: int = job_id) -> bool:
            return squeue_state(slurm_env, j) == ""

        wait_for(gone, 60, f"native job {job_id} to leave the queue")


def native(slurm: SlurmEnv, node: str, qos: str, *more: str) -> tuple[int, Path]:
    """A native batch job of alice's taking every CPU of ``node``; it notes when it starts."""
    marker = f"/tmp/preempt-native-{secrets.token_hex(4)}.start"
    script = f"#!/bin/sh\ndate +%s.%N >> {marker}\nexec sleep 600\n"
    options = ["-p", slurm.hybrid_partition, "-w", node, "-A", ALICE.accounts[0], "-c", str(slurm.node_cpus(node))]
    options += ["--mem=64", "-o", "/dev/null", "-J", f"native-{qos}", "--qos", qos, *more]
    return sbatch_as(slurm, ALICE.user, script, *options), Path(f"{slurm.root}{marker}")


def whole_node_pod(slurm: SlurmEnv, name: str, node: str | None, qos: str, labels: dict[str, str] | None = None) -> (
    dict[str, Any]
):  # fmt: skip
    # A gang member's Slurm options are its PodGroup's (``labels``: it names one).
    annotations = None if labels else {names.ANN_PARTITION: slurm.hybrid_partition, names.ANN_QOS: qos, **EXCLUSIVE}
    body = make_pod(
        name, cpu=str(slurm.node_cpus(node or slurm.hybrid_nodes[0])), annotations=annotations, labels=labels
    )
    if node is not None:
        body["spec"]["nodeSelector"] = {HOST: node}
    return body


def operator_calls(cluster: dict[str, str]) -> dict[str, int]:
    stats = httpx.get(f"http://127.0.0.1:{cluster.get('SB_OPERATOR_PORT', '28080')}/stats", timeout=10).json()
    calls: dict[str, int] = stats["slurm_requests_by_kind"]
    return calls


def bound_to(core: k8s.CoreV1Api, ns: str, name: str) -> str | None:
    pod = read_pod(core, ns, name)
    return pod.spec.node_name if pod is not None and pod.status.phase == "Running" else None


def preempted_event(core: k8s.CoreV1Api, ns: str, pod: str) -> k8s.CoreV1Event | None:
    return next((e for e in pod_events(core, ns, pod) if e.reason == names.REASON_SLURM_JOB_PREEMPTED), None)


# ---- a pod preempts native work ----------------------------------------------------------------
def test_a_pod_preempts_a_native_job_which_slurm_requeues_and_the_pod_binds(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, hybrid: list[str],
    natives: list[int], cluster: dict[str, str],
) -> None:  # fmt: skip
    node = hybrid[0]
    victim, _ = native(slurm_env, node, "native", "--requeue")
    natives.append(victim)
    wait_for(lambda: squeue_state(slurm_env, victim) == "RUNNING", 60, f"native job {victim} running on {node}")
    before = operator_calls(cluster)
    core.create_namespaced_pod(ns, whole_node_pod(slurm_env, "urgent", node, "pods-urgent"))
    wait_for(lambda: bound_to(core, ns, "urgent") == node, 90, f"pod urgent bound to {node}")
    fields = job_fields(slurm_env, victim)
    assert fields["JobState"] == "PENDING" and int(fields["Restarts"]) >= 1, fields  # requeued, not killed
    after = operator_calls(cluster)
    # A job that may preempt is queued (job/submit), never an immediate allocation: that one
    # preempts its victims and then fails with 2016 (Slurm 26.05).
    assert after.get("POST /job/allocate", 0) == before.get("POST /job/allocate", 0)
    assert after.get("POST /job/submit", 0) > before.get("POST /job/submit", 0)


# ---- native work preempts a pod ----------------------------------------------------------------
def test_a_native_job_preempts_a_job_owned_pod_which_is_recreated_and_waits_in_slurms_queue(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str,
    hybrid: list[str], natives: list[int],
) -> None:  # fmt: skip
    node = hybrid[1]
    pod = whole_node_pod(slurm_env, "worker", node, "pods")
    # A Job's slurmjob annotations are the Job's own (docs/workloads.md); kwok keeps its pod running.
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "work", "annotations": pod["metadata"]["annotations"]},
           "spec": {"backoffLimit": 3, "template": {"metadata": {"annotations": {KWOK_COMPLETE_DELAY: "3600s"}},
                                                      "spec": pod["spec"]}}}  # fmt: skip
    batch.create_namespaced_job(ns, job)

    def running_pod() -> str | None:
        pods = core.list_namespaced_pod(ns, label_selector="job-name=work").items
        return next((p.metadata.name for p in pods if p.status.phase == "Running" and p.spec.node_name == node), None)

    first = wait_for(running_pod, 90, f"the Job's pod running on {node}")
    first_job = int((get_phj(custom, ns, first) or {})["status"]["jobId"])
    preemptor, marker = native(slurm_env, node, "native-urgent")
    natives.append(preemptor)
    event = wait_for(lambda: preempted_event(core, ns, first), 60, f"{names.REASON_SLURM_JOB_PREEMPTED} on {first}")
    assert f"likely preempted by Slurm job {preemptor}" in event.message, event.message
    wait_for(lambda: marker.exists(), 60, f"the preemptor {preemptor} to start")
    assert (slurm_job(slurm_env, first_job) or {}).get("job_state") == ["CANCELLED"]  # released by the bridge

    def waiting_replacement() -> tuple[str, dict[str, Any]] | None:
        for p in core.list_namespaced_pod(ns, label_selector="job-name=work").items:
            status = (get_phj(custom, ns, p.metadata.name) or {}).get("status") or {}
            if p.metadata.name != first and status.get("jobId") and status.get("phase") == "Pending":
                return p.metadata.name, status
        return None

    replacement, status = wait_for(waiting_replacement, 60, "the Job's replacement pod waiting in Slurm's queue")
    assert squeue_state(slurm_env, int(status["jobId"])) == "PENDING"
    assert bound_to(core, ns, replacement) is None
    slurm_env.slurm("scancel", str(preemptor))  # the preemptor ends: the replacement runs
    wait_for(lambda: bound_to(core, ns, replacement) == node, 90, f"the replacement {replacement} bound to {node}")


# ---- gangs, both ways --------------------------------------------------------------------------
def test_a_gang_is_preempted_whole_and_a_gang_preempts_native_jobs_on_every_node(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, hybrid: list[str],
    natives: list[int],
) -> None:  # fmt: skip

    def group(name: str, qos: str) -> dict[str, Any]:
        """A gang of two; its slurmjob annotations are the PodGroup's (docs/workloads.md)."""
        annotations = {names.ANN_PARTITION: slurm_env.hybrid_partition, names.ANN_QOS: qos, **EXCLUSIVE}
        return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": name, "annotations": annotations}, "spec": {"minMember": 2}}  # fmt: skip

    def gang_job(pod: str) -> int:
        phj = next(p for p in list_phjs(custom, ns) if pod in p["spec"]["pods"])
        return int(phj["status"]["jobId"])

    # A native job preempts one node of a gang of QOS pods: the whole gang ends.
    custom.create_namespaced_custom_object(*PODGROUP[:2], ns, PODGROUP[2], group("low", "pods"))
    for i in range(2):
        core.create_namespaced_pod(
            ns, whole_node_pod(slurm_env, f"low-{i}", None, "pods", {names.LABEL_POD_GROUP: "low"})
        )
    wait_for(lambda: all(bound_to(core, ns, f"low-{i}") for i in range(2)), 90, "the gang low running")
    low_job = gang_job("low-0")
    assert sorted(filter(None, (bound_to(core, ns, f"low-{i}") for i in range(2)))) == sorted(hybrid)
    preemptor, marker = native(slurm_env, hybrid[0], "native-urgent")
    natives.append(preemptor)
    for i in range(2):

        def told(i: int = i) -> k8s.CoreV1Event | None:
            return preempted_event(core, ns, f"low-{i}")

        event = wait_for(told, 60, f"low-{i} told it is preempted")
        assert f"likely preempted by Slurm job {preemptor}" in event.message, event.message
    wait_for(lambda: all(read_pod(core, ns, f"low-{i}") is None for i in range(2)), 60, "both gang members gone")
    wait_for(lambda: marker.exists(), 60, f"the preemptor {preemptor} to start")
    assert (slurm_job(slurm_env, low_job) or {}).get("job_state") == ["CANCELLED"]
    slurm_env.slurm("scancel", str(preemptor))
    wait_for(lambda: squeue_state(slurm_env, preemptor) == "", 60, f"native job {preemptor} gone")

    # A gang of QOS pods-urgent preempts the native jobs on both nodes (requeued) and binds.
    victims = [native(slurm_env, n, "native", "--requeue")[0] for n in hybrid]
    natives.extend(victims)
    wait_for(lambda: all(squeue_state(slurm_env, v) == "RUNNING" for v in victims), 60, "the native jobs running")
    custom.create_namespaced_custom_object(*PODGROUP[:2], ns, PODGROUP[2], group("high", "pods-urgent"))
    for i in range(2):
        core.create_namespaced_pod(
            ns, whole_node_pod(slurm_env, f"high-{i}", None, "pods-urgent", {names.LABEL_POD_GROUP: "high"})
        )
    wait_for(
        lambda: sorted(filter(None, (bound_to(core, ns, f"high-{i}") for i in range(2)))) == sorted(hybrid),
        180, "the gang high bound to both hybrid nodes",
    )  # fmt: skip
    for v in victims:
        fields = job_fields(slurm_env, v)
        assert fields["JobState"] == "PENDING" and int(fields["Restarts"]) >= 1, fields
