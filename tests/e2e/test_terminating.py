"""A terminating pod keeps its Slurm allocation (the Go bridge's bug #16).

A pod with a deletionTimestamp still runs on its node until its containers exit or its grace
period ends, so Slurm must not give that node to another job meanwhile. The pods here ask kwok to
keep them for their whole grace period (hack/kwok-stages.yaml), as a kubelet keeps a pod whose
containers ignore SIGTERM; then kwok stops them (phase Failed) and removes them, as a kubelet does.
A terminating gang member keeps its place and node too: a replacement waits for them
(docs/workloads.md, "Late members").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import bridge_jobs_in, get_phj, has_gate, live_jobs, make_pod, pod_events, read_pod, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")

GRACE = 10  # seconds: each pod's terminationGracePeriodSeconds
GRACEFUL = {"pod-delete.stage.kwok.x-k8s.io/graceful": "true"}
POLL_PERIOD = 1.0  # the local bridge's pollPeriodSeconds (hack/bridge.sh)
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The custom workloads the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return (PODGROUP,)


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


def test_a_terminating_gang_member_keeps_its_node_until_its_replacement_takes_it(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """A member of a running gang is deleted with a grace period while a replacement joins: the
    replacement stays gated while the member terminates (its place and node are still the
    member's), then is released to that node, in the same Slurm job (docs/workloads.md, "Late
    members")."""
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "r"},
             "spec": {"minMember": 2}}  # fmt: skip
    custom.create_namespaced_custom_object(*PODGROUP[:2], ns, PODGROUP[2], group)
    labels = {names.LABEL_POD_GROUP: "r"}
    for name in ("r-0", "r-1"):
        core.create_namespaced_pod(ns, _pod(name, labels=labels))
    job_id = _running_job(custom, ns, "podgroup-r")  # Running: every member is bound
    nodes = {name: _node_of(core, ns, name) for name in ("r-0", "r-1")}

    core.delete_namespaced_pod("r-1", ns)  # it stays for its grace period (GRACE seconds)
    wait_for(lambda: (p := read_pod(core, ns, "r-1")) and p.metadata.deletion_timestamp, 10, "r-1 terminating")
    core.create_namespaced_pod(ns, make_pod("r-2", labels=labels))
    told = _replacement_waits_while_the_member_terminates(core, custom, slurm_env, ns, job_id)
    assert told, "the bridge never told r-2 (GangFull) that it waits for r-1's place: the test tested nothing"

    bound = wait_for(lambda: (p := read_pod(core, ns, "r-2")) and p.spec.node_name and p, 30, "r-2 bound")
    assert bound.spec.node_name == nodes["r-1"], "the replacement runs on the node its predecessor freed"
    assert bound.metadata.labels[names.LABEL_SLURM_JOB_ID] == str(job_id), "in the gang's Slurm job"
    phj = _running(custom, ns, "podgroup-r")
    assert sorted(phj["spec"]["pods"]) == ["r-0", "r-2"]
    assert phj["status"]["jobId"] == job_id
    assert {a["pod"]: a["node"] for a in phj["status"]["assignments"]} == {"r-0": nodes["r-0"], "r-2": nodes["r-1"]}
    survivor = read_pod(core, ns, "r-0")
    assert survivor is not None and survivor.spec.node_name == nodes["r-0"] and not survivor.metadata.deletion_timestamp
    assert _job_state(slurm_env, job_id) == ["RUNNING"], "the gang's job was not ended"
    assert [j["job_id"] for j in bridge_jobs_in(slurm_env, ns)] == [job_id], "and not duplicated"
    assert [j["job_id"] for j in live_jobs(slurm_env, ns)] == [job_id]
    wait_for(lambda: any(e.reason == "MemberReplaced" and "r-1" in (e.message or "")
                         for e in _phj_events(core, ns, "podgroup-r")),
             10, "the MemberReplaced Event on the PlaceholderJob")  # fmt: skip


def _node_of(core: k8s.CoreV1Api, ns: str, name: str) -> str:
    node: str = wait_for(lambda: (p := read_pod(core, ns, name)) and p.spec.node_name, 30, f"{name} bound")
    return node


def _running(custom: k8s.CustomObjectsApi, ns: str, phj: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        lambda: (p := get_phj(custom, ns, phj)) and (p.get("status") or {}).get("phase") == "Running" and p,
        30, f"PlaceholderJob {phj} Running again",
    )  # fmt: skip
    return found


def _phj_events(core: k8s.CoreV1Api, ns: str, name: str) -> Iterator[k8s.CoreV1Event]:
    selector = f"involvedObject.name={name},involvedObject.kind=PlaceholderJob"
    yield from core.list_namespaced_event(ns, field_selector=selector).items


def _replacement_waits_while_the_member_terminates(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm: SlurmEnv, ns: str, job_id: int
) -> bool:
    """Until r-1 has stopped (gone, or phase Failed): r-2 is neither released nor a member, and
    the gang's job runs. Returns whether r-2 got its GangFull Event meanwhile. Each check reads r-2
    (or the PlaceholderJob) first and r-1 after it, so r-1 seen still holding its node means it
    held it when r-2 was read."""
    violations: list[str] = []
    told = False

    def r1_stopped() -> bool:
        nonlocal told
        newcomer, phj, state = read_pod(core, ns, "r-2"), get_phj(custom, ns, "podgroup-r"), _job_state(slurm, job_id)
        events = [e for e in pod_events(core, ns, "r-2") if e.reason == "GangFull"]
        old = read_pod(core, ns, "r-1")
        if old is None or old.status.phase in ("Succeeded", "Failed"):
            return True
        told = told or any("r-1" in (e.message or "") for e in events)
        if newcomer is not None and (newcomer.spec.node_name or not has_gate(newcomer)):
            violations.append(f"r-2 released (node {newcomer.spec.node_name!r}) while r-1 still terminates")
        if phj is not None and "r-2" in phj["spec"]["pods"]:
            violations.append(f"r-2 took a place while r-1 still terminates: {phj['spec']['pods']}")
        if state != ["RUNNING"]:
            violations.append(f"Slurm job {job_id} is {state} while r-0 and r-1 hold their nodes")
        return bool(violations)

    wait_for(r1_stopped, GRACE + 60, "r-1 to finish terminating", interval=0.5)
    assert not violations, violations[0]
    return told
