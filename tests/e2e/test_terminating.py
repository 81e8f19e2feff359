"""A terminating pod keeps its Slurm allocation (the Go bridge's bug #16).

A pod with a deletionTimestamp still runs on its node until its containers exit or its grace
period ends, so Slurm must not give that node to another job meanwhile. The pods here ask kwok to
keep them for their whole grace period (hack/kwok-stages.yaml), as a kubelet keeps a pod whose
containers ignore SIGTERM; then kwok stops them (phase Failed) and removes them, as a kubelet does.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, read_pod, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

GRACE = 10  # seconds: each pod's terminationGracePeriodSeconds
GRACEFUL = {"pod-delete.stage.kwok.x-k8s.io/graceful": "true"}
POLL_PERIOD = 1.0  # the local bridge's pollPeriodSeconds (hack/bridge.sh)
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


def _pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = make_pod(name, annotations=GRACEFUL, labels=labels)
    body["spec"]["terminationGracePeriodSeconds"] = GRACE
    return body


def _running_job(custom: k8s.CustomObjectsApi, ns: str, phj: str) -> int:
    status = wait_for(
        lambda: (s := (get_phj(custom, ns, phj) or {}).get("status") or {}).get("phase") == "Running" and s,
        60, f"PlaceholderJob {phj} Running",
    )  # fmt: skip
    return int(status["jobId"])


def _job_state(slurm: SlurmEnv, job_id: int) -> list[str]:
    job = slurm_job(slurm, job_id)
    return list(job["job_state"]) if job else ["GONE"]


def _held_until_gone(core: k8s.CoreV1Api, slurm: SlurmEnv, ns: str, pods: list[str], job_id: int) -> float:
    """Watch the pods end: while any still holds its node, the job must stay RUNNING. Returns
    how long the pods were terminating (from the first deletionTimestamp seen to the last gone)."""
    first_terminating: float | None = None
    released_early: list[str] = []

    def all_gone_or_released() -> bool:
        nonlocal first_terminating
        # The job first, then the pods: the bridge ends the job only after the pods are gone or
        # terminal, so a pod that still holds its node after the job was seen ended is a real
        # early release (the other order would count a pod that ended between the two reads).
        state = _job_state(slurm, job_id)
        holding = []
        for name in pods:
            pod = read_pod(core, ns, name)
            if pod is not None and pod.status.phase not in ("Succeeded", "Failed"):
                holding.append(name)
                if pod.metadata.deletion_timestamp and first_terminating is None:
                    first_terminating = time.monotonic()
        if not holding:
            return True
        if state != ["RUNNING"]:
            released_early.append(f"Slurm job {job_id} is {state} while pods {holding} still hold their nodes")
        return bool(released_early)

    wait_for(all_gone_or_released, GRACE + 60, f"pods {pods} to finish terminating")
    assert not released_early, released_early[0]
    assert first_terminating is not None, "no pod was seen terminating"
    return time.monotonic() - first_terminating


def _ends_within_two_poll_periods(slurm: SlurmEnv, job_id: int) -> None:
    # Two poll periods, plus one second for this test's own polling of Slurm.
    wait_for(lambda: _job_state(slurm, job_id) != ["RUNNING"], 2 * POLL_PERIOD + 1,
             f"Slurm job {job_id} to end within two poll periods of its last pod ending")  # fmt: skip


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
def test_a_terminating_pod_keeps_its_slurm_job_until_it_is_gone(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv, propagation: str
) -> None:
    """Background: the PlaceholderJob (owned by the pod) outlives it. Foreground: the garbage
    collector deletes the PlaceholderJob first, while the pod is still terminating."""
    ns = managed_namespace
    core.create_namespaced_pod(ns, _pod("p"))
    job_id = _running_job(custom, ns, "p")
    core.delete_namespaced_pod("p", ns, propagation_policy=propagation)
    terminating_for = _held_until_gone(core, slurm_env, ns, ["p"], job_id)
    assert terminating_for >= GRACE - 2, f"the pod terminated for {terminating_for:.1f}s, not its grace period"
    _ends_within_two_poll_periods(slurm_env, job_id)
    if propagation == "Foreground":
        wait_for(lambda: get_phj(custom, ns, "p") is None, 30, "the PlaceholderJob to be finalized")


def test_a_gang_keeps_its_slurm_job_until_every_member_is_gone(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    """Deleting the workload (here a PodGroup) deletes its PlaceholderJob at once, while its pods
    still terminate: the job is released only when the last one is gone."""
    ns = managed_namespace
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 2}}  # fmt: skip
    custom.create_namespaced_custom_object(*PODGROUP[:2], ns, PODGROUP[2], group)
    members = ["g-0", "g-1"]
    for name in members:
        core.create_namespaced_pod(ns, _pod(name, labels={names.LABEL_POD_GROUP: "g"}))
    job_id = _running_job(custom, ns, "podgroup-g")
    # One member goes at once, the other stays for its grace period.
    core.delete_namespaced_pod("g-0", ns, grace_period_seconds=0)
    core.delete_namespaced_pod("g-1", ns)
    custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, "podgroup-g")
    _held_until_gone(core, slurm_env, ns, members, job_id)
    _ends_within_two_poll_periods(slurm_env, job_id)
    wait_for(lambda: get_phj(custom, ns, "podgroup-g") is None, 30, "the PlaceholderJob to be finalized")


def test_deleting_a_placeholderjob_ends_its_running_pod_before_releasing_the_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, _pod("p"))
    job_id = _running_job(custom, ns, "p")
    custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, ns, names.PLURAL, "p")
    pod = wait_for(lambda: (p := read_pod(core, ns, "p")) and p.metadata.deletion_timestamp and p, 30,
                   "the bridge to delete the pod of the deleted PlaceholderJob")  # fmt: skip
    reasons = {c.reason for c in pod.status.conditions or [] if c.type == names.POD_COND_DISRUPTION_TARGET}
    assert reasons == {"PlaceholderJobDeleted"}
    _held_until_gone(core, slurm_env, ns, ["p"], job_id)
    _ends_within_two_poll_periods(slurm_env, job_id)
