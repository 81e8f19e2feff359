"""The core pipeline on the real cluster and the real Slurm: pod -> PlaceholderJob -> Slurm
external job -> bound pod, and back."""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.slurm.reasons import explain
from tests.e2e.phj_schema import assert_matches_crd
from tests.e2e.util import (
    bridge_jobs_in,
    get_phj,
    has_gate,
    list_phjs,
    make_pod,
    pod_events,
    read_pod,
    refused_allocation,
    slurm_job,
    wait_for_idle_nodes,
)
from tests.harness import BRIDGE_SH, CLUSTER_SH, REPO, SlurmEnv, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
T = TypeVar("T")


@pytest.fixture(autouse=True)
def placeholderjobs_match_the_crd(request: pytest.FixtureRequest, custom: k8s.CustomObjectsApi) -> Iterator[None]:
    """After each test, every PlaceholderJob the bridge wrote in its namespace, whatever state the
    test left it in, matches the CRD's openAPIV3Schema (the namespace is deleted after this)."""
    ns = request.getfixturevalue("managed_namespace") if "managed_namespace" in request.fixturenames else None
    yield
    if ns is not None:
        for phj in list_phjs(custom, ns):
            assert_matches_crd(phj)


def _running_phj(custom: k8s.CustomObjectsApi, ns: str, name: str, timeout: float = 30) -> dict[str, Any]:
    phj: dict[str, Any] = wait_for(
        lambda: (p := get_phj(custom, ns, name)) and (p.get("status") or {}).get("phase") == "Running" and p,
        timeout,
        f"PlaceholderJob {ns}/{name} Running",
    )
    assert_matches_crd(phj)  # every condition (Submitted, Allocated, Ready) fully written
    assert {c["type"] for c in phj["status"]["conditions"]} >= {"Submitted", "Allocated", "Ready"}
    return phj


def test_bare_pod_runs_on_the_node_slurm_chose(
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    managed_namespace: str,
    slurm_env: SlurmEnv,
    cluster: dict[str, str],
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("p"))
    phj = _running_phj(custom, ns, "p")
    job_id = phj["status"]["jobId"]
    pod = wait_for(lambda: (p := read_pod(core, ns, "p")) and p.status.phase == "Running" and p, 30, "pod Running")
    assert pod.spec.scheduler_name == "slurm-bridge"
    assert not has_gate(pod)
    job = slurm_job(slurm_env, job_id)
    assert job is not None and job["job_state"] == ["RUNNING"]
    assert "EXTERNAL_JOB" in job["flags"]
    assert job["nodes"] == pod.spec.node_name, "pod bound to exactly the node Slurm allocated"
    assert pod.metadata.annotations[names.ANN_SLURM_NODE] == pod.spec.node_name
    assert pod.metadata.labels[names.LABEL_SLURM_JOB_ID] == str(job_id)
    assert phj["status"]["assignments"] == [{"pod": "p", "node": pod.spec.node_name}]
    kubectl = ["kubectl", "--kubeconfig", cluster["KUBECONFIG"], "get", "placeholderjobs", "-n", ns]
    # The long member and node lists only with -o wide (printer columns of priority 1).
    out = run(kubectl).stdout
    header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    assert header == ["NAME", "JOBID", "PHASE", "REASON", "AGE"]
    assert row[:3] == ["p", str(job_id), "Running"]
    out = run([*kubectl, "-o", "wide"]).stdout
    header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    assert header[:5] == ["NAME", "PODS", "JOBID", "PHASE", "NODES"]
    assert row[:5] == ["p", "p", str(job_id), "Running", pod.spec.node_name]


def test_pod_in_unmanaged_namespace_is_untouched(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, namespace: str, slurm_env: SlurmEnv
) -> None:
    core.create_namespaced_pod(namespace, make_pod("plain"))
    pod = wait_for(
        lambda: (p := read_pod(core, namespace, "plain")) and p.status.phase == "Running" and p, 30, "pod Running"
    )
    assert pod.spec.scheduler_name == "default-scheduler"
    assert not has_gate(pod)
    assert names.ANN_SLURM_NODE not in (pod.metadata.annotations or {})
    assert list_phjs(custom, namespace) == []
    assert bridge_jobs_in(slurm_env, namespace) == []


@pytest.mark.parametrize(
    "cpu",
    [
        "100",  # more than one node has: Slurm refuses the submit
        "1000",  # more than the whole partition: Slurm queues it with a reason
    ],
)
def test_pod_larger_than_any_node_stays_gated_with_slurms_reason(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, cpu: str
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("huge", cpu=cpu))
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "huge")) and (p.get("status") or {}).get("reason") and p,
        30,
        "PlaceholderJob to show a reason",
    )
    status = phj["status"]
    assert status["phase"] == "Pending"
    assert status["reason"], status
    assert status.get("message"), status
    # For a few poll periods the pod must stay gated and unbound.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pod = read_pod(core, ns, "huge")
        assert pod is not None and has_gate(pod) and not pod.spec.node_name, "an unallocated pod was released"
        time.sleep(0.5)


PENDING_EVENT = re.compile(r"^Slurm job (\d+) is waiting: (\w+) \((.+?)\)(; Slurm expects it to start at \S+Z)?$")


def test_a_waiting_pod_says_why_in_its_events_a_few_times_not_every_poll(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, cluster: dict[str, str]
) -> None:
    """Issue 22 section 3: `kubectl describe pod` answers "why is my pod pending?" with Slurm's job,
    its reason in words and its expected start (when Slurm has one), in a handful of Events."""
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("waits-why", cpu="1000"))  # more than the partition: queued
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "waits-why")) and (p.get("status") or {}).get("reason") and p,
        60,
        "the PlaceholderJob to show Slurm's reason",
    )
    job_id = phj["status"]["jobId"]
    assert phj["status"]["phase"] == "Pending" and job_id, phj["status"]

    def told() -> list[k8s.CoreV1Event]:
        return [e for e in pod_events(core, ns, "waits-why") if e.reason == names.EVENT_SLURM_JOB_PENDING]

    def names_current_reason() -> bool:
        reason = ((get_phj(custom, ns, "waits-why") or {}).get("status") or {}).get("reason")
        return any(f"is waiting: {reason} (" in (e.message or "") for e in told())

    wait_for(names_current_reason, 60, "a SlurmJobPending Event on the pod naming Slurm's current reason")
    for event in told():
        assert event.type == "Normal" and event.involved_object.kind == "Pod", event
        match = PENDING_EVENT.match(event.message or "")
        assert match is not None, event.message
        assert int(match[1]) == job_id and match[3] == explain(match[2]), event.message
    kubectl = ["kubectl", "--kubeconfig", cluster["KUBECONFIG"], "-n", ns]
    described = run([*kubectl, "describe", "pod", "waits-why"]).stdout
    assert names.EVENT_SLURM_JOB_PENDING in described and f"Slurm job {job_id} is waiting: " in described, described
    header = run([*kubectl, "get", "placeholderjobs", "-o", "wide"]).stdout.splitlines()[0].split()
    assert header[5:7] == ["REASON", "EXPECTEDSTART"], header
    # Several poll periods, pending reads (every 10 s) and a full list (every 30 s) later: still a
    # handful of Events, not one a poll; the pod stays gated.
    deadline = time.monotonic() + 35
    while time.monotonic() < deadline:
        pod = read_pod(core, ns, "waits-why")
        assert pod is not None and has_gate(pod) and not pod.spec.node_name, "an unallocated pod was released"
        time.sleep(1)
    assert 1 <= len(told()) <= 3, [e.message for e in told()]
    on_phj = [
        e for e in core.list_namespaced_event(ns, field_selector="involvedObject.name=waits-why").items
        if e.involved_object.kind == "PlaceholderJob" and e.reason == names.EVENT_SLURM_JOB_PENDING
    ]  # fmt: skip
    assert 1 <= len(on_phj) <= 3, [e.message for e in on_phj]


def _slurm_call(slurm_env: SlurmEnv, call: Callable[[SlurmClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with SlurmClient(slurm_env.url, slurm_env.token_file) as c:
            return await call(c)

    return asyncio.run(go())


def test_pod_that_cannot_start_now_is_queued_and_runs_when_slurm_frees_nodes(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    # Someone else's job holds every node: the immediate allocation is refused, so the bridge
    # queues the job (job/submit) and Slurm starts it once the nodes are free.
    blocker = JobRequest(
        partition=slurm_env.partition, nodes=len(slurm_env.nodes), exclusive=True, time_limit_minutes=10
    )
    wait_for_idle_nodes(slurm_env, slurm_env.nodes)
    blocker_id = _slurm_call(
        slurm_env, lambda c: c.submit_external_job(blocker, name="e2e-blocker", admin_comment="e2e blocker")
    )
    try:
        # It needs every node: jobs of earlier tests' namespaces (still being deleted) may hold some.
        wait_for(
            lambda: (j := slurm_job(slurm_env, blocker_id)) and j["job_state"] == ["RUNNING"], 120, "blocker RUNNING"
        )
        core.create_namespaced_pod(ns, make_pod("waits"))
        phj = wait_for(
            lambda: (p := get_phj(custom, ns, "waits")) and (p.get("status") or {}).get("jobId") and p,
            30,
            "PlaceholderJob with a queued Slurm job",
        )
        assert phj["status"]["phase"] == "Pending", phj["status"]
        job_id = phj["status"]["jobId"]
        job = slurm_job(slurm_env, job_id)
        assert job is not None and job["job_state"] == ["PENDING"], job
        pod = read_pod(core, ns, "waits")
        assert pod is not None and has_gate(pod) and not pod.spec.node_name
        wait_for(
            lambda: ((get_phj(custom, ns, "waits") or {}).get("status") or {}).get("reason"),
            30,
            "the PlaceholderJob to show why Slurm keeps the job pending",
        )
    finally:
        _slurm_call(slurm_env, lambda c: c.cancel_job(blocker_id))
    phj = _running_phj(custom, ns, "waits")
    assert phj["status"]["jobId"] == job_id, "the queued job ran; nothing was submitted twice"
    pod = wait_for(lambda: (p := read_pod(core, ns, "waits")) and p.spec.node_name and p, 30, "pod bound")
    assert phj["status"]["assignments"] == [{"pod": "waits", "node": pod.spec.node_name}]
    assert [j["job_id"] for j in bridge_jobs_in(slurm_env, ns)] == [job_id], "one job, the queued one"
    attempts = [j for j in bridge_jobs_in(slurm_env, ns, refused=True) if j["job_id"] != job_id]
    assert all(refused_allocation(j) for j in attempts), attempts


def test_deleting_the_pod_cancels_the_slurm_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("gone"))
    job_id = _running_phj(custom, ns, "gone")["status"]["jobId"]
    core.delete_namespaced_pod("gone", ns)
    wait_for(lambda: get_phj(custom, ns, "gone") is None, 30, "PlaceholderJob garbage-collected")
    job = wait_for(
        lambda: (j := slurm_job(slurm_env, job_id)) and j["job_state"] != ["RUNNING"] and j, 30, "job to end"
    )
    assert job["job_state"] == ["CANCELLED"]


def test_scancel_ends_the_pod_with_an_event(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    core.create_namespaced_pod(ns, make_pod("victim"))
    job_id = _running_phj(custom, ns, "victim")["status"]["jobId"]
    run(["bash", str(CLUSTER_SH), "slurm", "scancel", str(job_id)])
    wait_for(
        lambda: (
            (p := read_pod(core, ns, "victim")) is None or p.metadata.deletion_timestamp or p.status.phase == "Failed"
        ),
        30,
        "pod ended",
    )
    events = wait_for(
        lambda: [e for e in pod_events(core, ns, "victim") if e.reason == "SlurmJobCancelled"], 10, "pod Event"
    )
    assert f"Slurm job {job_id}" in events[0].message
    assert "cancelled" in events[0].message
    assert events[0].type == "Warning"


def test_invalid_annotation_is_rejected_at_admission(core: k8s.CoreV1Api, managed_namespace: str) -> None:
    pod = make_pod("bad", annotations={names.ANN_TIMELIMIT: "ten"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(managed_namespace, pod)
    assert err.value.status in (400, 403, 422)
    assert names.ANN_TIMELIMIT in err.value.body
    assert '"ten"' in err.value.body or "ten" in err.value.body


def test_reserved_annotation_is_rejected_at_admission(core: k8s.CoreV1Api, managed_namespace: str) -> None:
    pod = make_pod("sneaky", annotations={names.ANN_SLURM_NODE: "kwok-node-1"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(managed_namespace, pod)
    assert names.ANN_SLURM_NODE in err.value.body


def test_reserved_label_on_an_otherwise_plain_pod_is_rejected_at_admission(
    core: k8s.CoreV1Api, managed_namespace: str
) -> None:
    """The label alone sends the create to the validating webhook (webhook/render.py)."""
    pod = make_pod("sneaky-label", labels={names.LABEL_SLURM_JOB_ID: "42"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(managed_namespace, pod)
    assert err.value.status == 403
    assert names.LABEL_SLURM_JOB_ID in err.value.body


def _assert_one_job_per_phj(slurm_env: SlurmEnv, ns: str, expected: int) -> None:
    jobs = bridge_jobs_in(slurm_env, ns)
    by_uid: dict[str, list[int]] = {}
    for j in jobs:
        by_uid.setdefault(j["_ref"]["uid"], []).append(j["job_id"])
    duplicates = {uid: ids for uid, ids in by_uid.items() if len(ids) > 1}
    assert not duplicates, f"PlaceholderJobs with more than one Slurm job: {duplicates}"
    assert len(by_uid) == expected, f"expected {expected} Slurm jobs, found {len(by_uid)}"


def _all_bound(core: k8s.CoreV1Api, ns: str, n: int) -> bool:
    pods = core.list_namespaced_pod(ns).items
    return len(pods) == n and all(p.spec.node_name and p.status.phase == "Running" for p in pods)


def test_operator_restart_during_50_submissions_makes_no_duplicates(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    for i in range(50):
        core.create_namespaced_pod(ns, make_pod(f"w{i:02d}"))
        if i == 20:
            # Kill the operator mid-stream (SIGTERM to its process group, then SIGKILL).
            run(["bash", str(BRIDGE_SH), "stop", "operator"])
    run(["bash", str(BRIDGE_SH), "start", "operator"])
    wait_for(lambda: _all_bound(core, ns, 50), 120, "all 50 pods bound and Running")
    _assert_one_job_per_phj(slurm_env, ns, 50)
    for phj in list_phjs(custom, ns):
        job = slurm_job(slurm_env, phj["status"]["jobId"])
        assert job is not None and job["job_state"] == ["RUNNING"], phj["metadata"]["name"]


def test_slurmrestd_outage_pods_wait_then_run_without_duplicates(
    core: k8s.CoreV1Api, managed_namespace: str, slurm_env: SlurmEnv
) -> None:
    ns = managed_namespace
    run(["bash", str(CLUSTER_SH), "stop", "slurmrestd"])
    try:
        for i in range(5):
            core.create_namespaced_pod(ns, make_pod(f"o{i}"))
        # Throughout a 30 s outage the pods wait, gated and unbound.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            released = [
                (p.metadata.name, p.spec.node_name, p.spec.scheduling_gates)
                for p in core.list_namespaced_pod(ns).items
                if not has_gate(p) or p.spec.node_name
            ]
            assert not released, f"pods released without Slurm: {released}"
            time.sleep(1)
    finally:
        run(["bash", str(CLUSTER_SH), "start-slurm"])
    wait_for(lambda: _all_bound(core, ns, 5), 60, "pods bound after slurmrestd returned")
    _assert_one_job_per_phj(slurm_env, ns, 5)


@pytest.mark.parametrize("component", ["operator", "webhook", "extender"])
def test_bad_config_exits_with_a_clear_message(tmp_path: Any, component: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("schedulerName: slurm-bridge\npollPeriodSecond: 1\npartition: [x]\n")
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / f"slurm-bridge-{component}"), "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pollPeriodSecond" in proc.stderr and "unknown key" in proc.stderr
    assert "partition" in proc.stderr
