"""A changed slurmjob annotation and the Slurm job it configures (issue 32 §1, docs/annotations.md
"Changing annotations"), on the real cluster and the real Slurm: a waiting pod's time limit and
partition reach its pending job, as does a Job's; Slurm's own refusal is said in an Event with its
words and the job keeps its value; what Slurm would let through from the bridge's token is not
sent; once Slurm allocated the job, the change is refused at admission (a pod) or said in an Event
(a Job, whose pods admission cannot see).

Jobs wait in two partitions this module makes DOWN over the kwok nodes for itself (``scontrol
create partition``, deleted afterwards), so nothing else on the shared cluster changes.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, pod_events, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
P = names.SLURMJOB_PREFIX
KEEP_RUNNING = {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}


@pytest.fixture
def down_partitions(slurm_env: SlurmEnv) -> Iterator[tuple[str, str]]:
    """Two DOWN partitions over the kwok nodes, where jobs wait (reason PartitionDown): the first
    with MaxTime 30 and DefaultTime 10, the second with MaxTime 60."""
    tag = secrets.token_hex(3)
    made = (f"annot-a-{tag}", f"annot-b-{tag}")
    nodes = ",".join(slurm_env.nodes)
    for name, limits in zip(made, (("MaxTime=30", "DefaultTime=10"), ("MaxTime=60",)), strict=True):
        slurm_env.scontrol("create", f"PartitionName={name}", f"Nodes={nodes}", "State=DOWN", *limits)
    yield made
    for name in made:
        slurm_env.slurm("scancel", "--partition", name, check=False)

    def deleted(name: str) -> bool:
        return slurm_env.slurm("scontrol", "delete", f"PartitionName={name}", check=False).returncode == 0

    for name in made:
        wait_for(functools.partial(deleted, name), 60, f"partition {name} deleted (its jobs gone)")


def _pending_job(custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, ns: str, name: str) -> Obj:
    """The pending Slurm job of PlaceholderJob ``name``, once the bridge submitted it."""
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, name)) and (p.get("status") or {}).get("jobId") and p,
        60,
        f"PlaceholderJob {ns}/{name} submitted",
    )
    job = slurm_job(slurm_env, phj["status"]["jobId"])
    assert job is not None and job["job_state"] == ["PENDING"], job
    return job


def _job_of(slurm_env: SlurmEnv, job_id: int, field: str, value: Any, timeout: float = 30) -> Obj:
    def reached() -> Obj | None:
        job = slurm_job(slurm_env, job_id)
        got = job.get(field) if job else None
        got = got.get("number") if isinstance(got, dict) else got
        return job if got == value else None

    found: Obj = wait_for(reached, timeout, f"Slurm job {job_id}'s {field} = {value!r}")
    return found


def _annotate(core: k8s.CoreV1Api, ns: str, name: str, annotations: dict[str, str | None]) -> None:
    core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": annotations}})


def _event(core: k8s.CoreV1Api, ns: str, name: str, reason: str, timeout: float = 30) -> str:
    found: str = wait_for(
        lambda: next((e.message for e in pod_events(core, ns, name) if e.reason == reason), None),
        timeout,
        f"Event {reason} on pod {ns}/{name}",
    )
    return found


def _spec_applied(custom: k8s.CustomObjectsApi, ns: str, name: str, status: str) -> Obj:
    def settled() -> Obj | None:
        phj = get_phj(custom, ns, name) or {}
        st = phj.get("status") or {}
        cond = next((c for c in st.get("conditions") or [] if c["type"] == names.COND_SPEC_APPLIED), None)
        done = cond and cond["status"] == status and st.get("observedGeneration") == phj["metadata"]["generation"]
        return cond if done else None

    cond: Obj = wait_for(settled, 30, f"PlaceholderJob {ns}/{name} SpecApplied={status}")
    return cond


def test_a_waiting_pods_time_limit_and_partition_reach_its_pending_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    down_partitions: tuple[str, str], ns: str,
) -> None:  # fmt: skip
    first, second = down_partitions
    core.create_namespaced_pod(ns, make_pod("w", annotations={P + "partition": first, P + "timelimit": "5"}))
    job = _pending_job(custom, slurm_env, ns, "w")
    assert job["time_limit"]["number"] == 5 and job["partition"] == first
    # The case: kubectl annotate --overwrite ... timelimit=7.
    _annotate(core, ns, "w", {P + "timelimit": "7"})
    _job_of(slurm_env, job["job_id"], "time_limit", 7)
    assert "time limit 5 min -> 7 min" in _event(core, ns, "w", names.REASON_SLURM_JOB_UPDATED)
    assert _spec_applied(custom, ns, "w", "True")["reason"] == names.REASON_SLURM_JOB_UPDATED
    _annotate(core, ns, "w", {P + "partition": second})
    moved = _job_of(slurm_env, job["job_id"], "partition", second)
    assert moved["time_limit"]["number"] == 7 and moved["job_state"] == ["PENDING"]
    phj = get_phj(custom, ns, "w") or {}
    assert phj["spec"]["slurm"]["partition"] == second


def test_slurms_refusal_is_said_with_its_words_and_the_job_keeps_its_value(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    down_partitions: tuple[str, str], ns: str,
) -> None:  # fmt: skip
    first, _ = down_partitions
    core.create_namespaced_pod(ns, make_pod("r", annotations={P + "partition": first, P + "timelimit": "5"}))
    job = _pending_job(custom, slurm_env, ns, "r")
    _annotate(core, ns, "r", {P + "partition": "no-such-partition", P + "timelimit": "8"})
    said = _event(core, ns, "r", names.REASON_UPDATE_REJECTED)
    assert "Invalid partition name specified" in said and "keeps what it had" in said, said
    cond = _spec_applied(custom, ns, "r", "False")
    assert cond["reason"] == names.REASON_UPDATE_REJECTED and "Invalid partition name specified" in cond["message"]
    # All or nothing: neither the partition nor the time limit sent with it changed.
    kept = slurm_job(slurm_env, job["job_id"]) or {}
    assert (kept["partition"], kept["time_limit"]["number"], kept["job_state"]) == (first, 5, ["PENDING"])


def test_what_slurm_would_let_through_from_the_bridge_is_not_sent(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    down_partitions: tuple[str, str], ns: str,
) -> None:  # fmt: skip
    """Slurm does not hold an update from SlurmUser's token to the partition's MaxTime (30 here)."""
    first, _ = down_partitions
    core.create_namespaced_pod(ns, make_pod("m", annotations={P + "partition": first, P + "timelimit": "5"}))
    job = _pending_job(custom, slurm_env, ns, "m")
    _annotate(core, ns, "m", {P + "timelimit": "45"})
    said = _event(core, ns, "m", names.REASON_UPDATE_NOT_APPLIED)
    assert f"above partition {first}'s MaxTime (30 min)" in said, said
    assert (slurm_job(slurm_env, job["job_id"]) or {})["time_limit"]["number"] == 5
    # Removing the time limit gives the partition's default, as for a new job.
    _annotate(core, ns, "m", {P + "timelimit": None})
    _job_of(slurm_env, job["job_id"], "time_limit", 10)


def _job_manifest(name: str, annotations: dict[str, str]) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"annotations": KEEP_RUNNING},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}},
    }  # fmt: skip


def _job_pod(core: k8s.CoreV1Api, ns: str, job: str) -> str:
    found: str = wait_for(
        lambda: next((p.metadata.name for p in core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items),
                     None),
        30,
        f"a pod of Job {job}",
    )  # fmt: skip
    return found


def _job_events(core: k8s.CoreV1Api, ns: str, job: str, reason: str) -> str:
    def found() -> str | None:
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={job},involvedObject.kind=Job")
        return next((e.message for e in events.items if e.reason == reason), None)

    message: str = wait_for(found, 30, f"Event {reason} on Job {ns}/{job}")
    return message


def test_a_jobs_annotation_change_reaches_its_pods_waiting_job(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    down_partitions: tuple[str, str], ns: str,
) -> None:  # fmt: skip
    first, second = down_partitions
    batch.create_namespaced_job(ns, _job_manifest("train", {P + "partition": first, P + "timelimit": "5"}))
    pod = _job_pod(core, ns, "train")
    job = _pending_job(custom, slurm_env, ns, pod)
    batch.patch_namespaced_job("train", ns, {"metadata": {"annotations": {P + "partition": second}}})
    _job_of(slurm_env, job["job_id"], "partition", second)
    assert f"partition {first} -> {second}" in _job_events(core, ns, "train", names.REASON_SLURM_JOB_UPDATED)


def test_once_allocated_a_pods_change_is_refused_at_admission_and_a_jobs_is_said(
    core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, ns: str
) -> None:
    core.create_namespaced_pod(ns, make_pod("a", annotations={P + "timelimit": "5", **KEEP_RUNNING}))
    wait_for(lambda: ((get_phj(custom, ns, "a") or {}).get("status") or {}).get("phase") == "Running", 60, "a runs")
    with pytest.raises(ApiException) as refused:
        _annotate(core, ns, "a", {P + "timelimit": "7"})
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "was already allocated" in body and P + "timelimit" in body and "delete the pod" in body, body
    # A Job's pods cannot be seen at admission: the change is stored, and said on the Job.
    batch.create_namespaced_job(ns, _job_manifest("done", {P + "timelimit": "5"}))
    pod = _job_pod(core, ns, "done")
    wait_for(lambda: ((get_phj(custom, ns, pod) or {}).get("status") or {}).get("phase") == "Running", 60, "runs")
    batch.patch_namespaced_job("done", ns, {"metadata": {"annotations": {P + "timelimit": "9"}}})
    said = _job_events(core, ns, "done", names.REASON_UPDATE_TOO_LATE)
    assert "already allocated" in said and P + "timelimit" in said, said
    phj = get_phj(custom, ns, pod) or {}
    running = slurm_job(slurm_env, phj["status"]["jobId"]) or {}
    assert running["time_limit"]["number"] == 5
