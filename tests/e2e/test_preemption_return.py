"""Preempted work comes back at its place (docs/colocation.md, "Preemption"; slurm_bridge/rules/resume.py).

On the local cluster the QOS ``pods-requeue`` is preempted by ``native-urgent`` native jobs with
``PreemptMode=REQUEUE`` and a GraceTime (hack/accounting.env), and the local bridge keeps a place
for one return (``preemption.maxReturns: 1``, hack/bridge.sh). The pods take whole hybrid nodes
(kwok plays their kubelet, a real slurmd runs the native jobs), so that only a preemption lets
the other side start, and the queue order decides who starts when the nodes free up.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from slurm_bridge.rules import resume
from tests.e2e.test_hybrid_real_node import node_image  # noqa: F401
from tests.e2e.test_node_sharing import REAL_NODE_TAINT
from tests.e2e.test_preemption import natives  # noqa: F401  (the native jobs a test submits, cancelled after it)
from tests.e2e.util import KWOK_COMPLETE_DELAY, get_phj, job_fields, list_phjs, pod_events, read_pod
from tests.harness import TENANTS, SlurmEnv, sbatch_as, squeue_state, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
ALICE = TENANTS["a"]
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
QOS = "pods-requeue"
URGENT_PRIORITY = 1_000_000


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The custom workloads the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return (JOBSET,)


@pytest.fixture
def hybrid(slurm_env: SlurmEnv) -> list[str]:
    assert len(slurm_env.hybrid_nodes) >= 2, (
        f"these tests need two hybrid nodes, the cluster has {slurm_env.hybrid_nodes}"
    )
    qos = slurm_env.slurm("sacctmgr", "-n", "-P", "list", "qos", QOS, "format=name,preemptmode").stdout
    assert f"{QOS}|requeue" in qos, (
        f"QOS {QOS} with PreemptMode=requeue is missing: restart the cluster (hack/accounting.env)"
    )
    return slurm_env.hybrid_nodes[:2]


def slurm_annotations(slurm: SlurmEnv, qos: str = QOS) -> dict[str, str]:
    return {
        names.ANN_PARTITION: slurm.hybrid_partition,
        names.ANN_QOS: qos,
        names.ANN_NODE_SHARING: names.NODE_SHARING_EXCLUSIVE,
    }


def pod_template(slurm: SlurmEnv) -> dict[str, Any]:
    cpu = str(slurm.node_cpus(slurm.hybrid_nodes[0]))
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
    return {
        "metadata": {"annotations": {KWOK_COMPLETE_DELAY: "3600s"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 5, "containers": [container]},
    }


def native(slurm: SlurmEnv, qos: str, *options: str) -> int:
    """A native batch job of alice's on the hybrid nodes (``options`` say which and how many)."""
    script = "#!/bin/sh\nexec sleep 600\n"
    base = ["-p", slurm.hybrid_partition, "-A", ALICE.accounts[0], "--mem=64", "-o", "/dev/null", "--qos", qos]
    return sbatch_as(slurm, ALICE.user, script, *base, "-J", f"native-{qos}-{secrets.token_hex(2)}", *options)


def urgent_job(slurm: SlurmEnv, *options: str) -> int:
    """A native job of QOS native-urgent, which preempts the pods' QOS, and first in the queue: an
    urgent job is (its priority set by the administrator, here), so no job queued before it takes
    the nodes its preemption frees."""
    job = native(slurm, "native-urgent", *options)
    slurm.scontrol("update", f"JobId={job}", f"Priority={URGENT_PRIORITY}")
    return job


def priority(slurm: SlurmEnv, job_id: int) -> int:
    return int(job_fields(slurm, job_id)["Priority"])


def phj_job(custom: k8s.CustomObjectsApi, ns: str, name: str, other_than: int | None = None) -> int | None:
    status = (get_phj(custom, ns, name) or {}).get("status") or {}
    job = status.get("jobId")
    return int(job) if job and int(job) != other_than else None


def events(core: k8s.CoreV1Api, ns: str, name: str, reason: str) -> list[str]:
    """The messages of ``reason`` Events on the PlaceholderJob ``name`` (Events outlive it)."""
    found = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [e.message for e in found if e.reason == reason]


def running_pods(core: k8s.CoreV1Api, ns: str, selector: str) -> list[Any]:
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def test_a_preempted_jobset_comes_back_ahead_of_the_jobs_queued_while_it_ran(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, hybrid: list[str],
    natives: list[int],  # noqa: F811
) -> None:  # fmt: skip
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "annotations": slurm_annotations(slurm_env)},
        "spec": {
            "failurePolicy": {"maxRestarts": 3},
            "replicatedJobs": [{
                "name": "w", "replicas": 1,
                "template": {"spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                                      "template": pod_template(slurm_env)}},
            }],
        },
    }  # fmt: skip
    custom.create_namespaced_custom_object(JOBSET[0], JOBSET[1], ns, JOBSET[2], body)
    selector = "jobset.sigs.k8s.io/jobset-name=train"
    wait_for(lambda: len(running_pods(core, ns, selector)) == 2, 120, "the JobSet's two pods running")
    phj_name = next(p["metadata"]["name"] for p in list_phjs(custom, ns) if p["spec"]["group"]["kind"] == "JobSet")
    first = phj_job(custom, ns, phj_name)
    assert first is not None
    place = priority(slurm_env, first)

    # Three jobs queue while it runs, each for both hybrid nodes, behind it (a lower priority).
    waiting = [native(slurm_env, "native", "-N2", "--exclusive") for _ in range(3)]
    natives.extend(waiting)
    for job in waiting:

        def pending(j: int = job) -> bool:
            return squeue_state(slurm_env, j) == "PENDING"

        def behind(j: int = job) -> bool:
            return priority(slurm_env, j) < place

        wait_for(pending, 30, f"native job {job} pending")
        own = priority(slurm_env, job)
        if own >= place:  # behind it, as a job queued later with the same weights is
            slurm_env.native(ALICE.user, "scontrol", "update", f"JobId={job}", f"Nice={own - place + 1}")
        wait_for(behind, 30, f"native job {job} behind Slurm job {first}")

    # An urgent native job preempts it; it ends whole, and its place is kept.
    urgent = urgent_job(slurm_env, "-w", hybrid[0], "--exclusive")
    natives.append(urgent)
    wait_for(
        lambda: events(core, ns, phj_name, names.REASON_PLACE_KEPT), 90, f"{names.REASON_PLACE_KEPT} on {phj_name}"
    )
    wait_for(lambda: squeue_state(slurm_env, urgent) == "RUNNING", 120, f"the urgent job {urgent} running")

    # The JobSet restarts: one new Slurm job for its new pods, at the preempted job's place.
    second = wait_for(lambda: phj_job(custom, ns, phj_name, other_than=first), 120, "the JobSet's new Slurm job")
    resumed = resume.decode_place((get_phj(custom, ns, phj_name) or {})["metadata"]["annotations"][names.ANN_RESUMES])
    assert resumed is not None and resumed.job_id == first and resumed.priority == place, resumed
    assert priority(slurm_env, second) == place
    said = wait_for(lambda: events(core, ns, phj_name, names.REASON_RESUMED_AT_PLACE), 30, "the ResumedAtPlace Event")
    assert any(f"place of Slurm job {first}" in m and f"Slurm job {urgent}" in m for m in said), said
    assert squeue_state(slurm_env, second) == "PENDING"  # the urgent job holds a node it needs

    # The urgent job ends: the JobSet starts before the three jobs queued while it ran.
    slurm_env.slurm("scancel", str(urgent))
    wait_for(lambda: len(running_pods(core, ns, selector)) == 2, 120, "the JobSet's new pods running")
    assert squeue_state(slurm_env, second) == "RUNNING"
    assert [squeue_state(slurm_env, j) for j in waiting] == ["PENDING"] * 3

    # sacct shows the link once slurmdbd has the job's record (at its end): the JobSet is deleted.
    custom.delete_namespaced_custom_object(JOBSET[0], JOBSET[1], ns, JOBSET[2], "train")

    def linked() -> bool:
        """The new job's admin comment, as sacct shows it, names the job it resumes."""
        out = slurm_env.sacct("-j", str(second), "-X", "-n", "-P", "-o", "AdminComment%400").strip()
        if not out.startswith(names.ADMIN_COMMENT_PREFIX):
            return False
        return bool(json.loads(out.removeprefix(names.ADMIN_COMMENT_PREFIX)).get(names.ADMIN_COMMENT_RESUMES) == first)

    wait_for(linked, 120, f"sacct linking Slurm job {second} to {first}")


def test_an_indexed_job_returns_once_a_copy_takes_no_place_and_cancel_does_not_come_back(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str,
    hybrid: list[str], natives: list[int],  # noqa: F811
) -> None:  # fmt: skip
    node = hybrid[1]
    template = pod_template(slurm_env)
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}

    def job(name: str, qos: str, ignore_disruption: bool = True) -> dict[str, Any]:
        spec: dict[str, Any] = {"completionMode": "Indexed", "completions": 1, "parallelism": 1,
                                "backoffLimit": 0, "template": template}  # fmt: skip
        if ignore_disruption:  # preemption is no failure of the work: its pod is made again
            ignore = {"action": "Ignore", "onPodConditions": [{"type": names.POD_COND_DISRUPTION_TARGET}]}
            spec["podFailurePolicy"] = {"rules": [ignore]}
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"app": "work"},
                "annotations": slurm_annotations(slurm_env, qos)}, "spec": spec}  # fmt: skip

    def running(name: str, *but: str) -> Any:
        pods = running_pods(core, ns, f"job-name={name}")
        return next((p for p in pods if p.metadata.name not in but), None)

    def gone(name: str) -> None:
        batch.delete_namespaced_job(name, ns, propagation_policy="Foreground")

        def deleted() -> bool:
            jobs = batch.list_namespaced_job(ns, field_selector=f"metadata.name={name}").items
            return not jobs and not core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items

        wait_for(deleted, 120, f"the Job {name} and its pods gone")

    def preempt(pod: str) -> None:
        """An urgent native job on the node until the pod's PlaceholderJob says how it ended."""
        urgent = urgent_job(slurm_env, "-w", node, "--exclusive")
        natives.append(urgent)
        wait_for(
            lambda: events(core, ns, pod, names.REASON_PLACE_KEPT) + events(core, ns, pod, names.REASON_PLACE_NOT_KEPT),
            90, f"the place of {pod}'s job decided",
        )  # fmt: skip
        wait_for(lambda: squeue_state(slurm_env, urgent) == "RUNNING", 120, f"the urgent job {urgent} running")
        slurm_env.slurm("scancel", str(urgent))

    batch.create_namespaced_job(ns, job("work", QOS))
    first = wait_for(lambda: running("work"), 120, "the Job's pod running").metadata.name
    first_job = phj_job(custom, ns, first)
    assert first_job is not None
    place = priority(slurm_env, first_job)
    preempt(first)
    assert events(core, ns, first, names.REASON_PLACE_KEPT), pod_events(core, ns, first)

    # Its replacement (index 0 again) takes the place: once (maxReturns 1 here).
    second = wait_for(lambda: running("work", first), 120, "the Job's replacement running").metadata.name
    resumed = resume.decode_place((get_phj(custom, ns, second) or {})["metadata"]["annotations"].get(names.ANN_RESUMES))
    assert resumed is not None and resumed.job_id == first_job and resumed.priority == place, resumed
    preempt(second)
    bound = events(core, ns, second, names.REASON_PLACE_NOT_KEPT)
    assert any("1 times already" in m for m in bound), bound
    third = wait_for(lambda: running("work", first, second), 120, "the Job's second replacement running").metadata.name
    assert names.ANN_RESUMES not in ((get_phj(custom, ns, third) or {})["metadata"].get("annotations") or {})

    # A copy of another workload (its name and labels, a new uid) takes no place of the old one's:
    # "lead" counts its preemption as a failure (no podFailurePolicy), so its place stays free.
    gone("work")
    batch.create_namespaced_job(ns, job("lead", QOS, ignore_disruption=False))
    lead = wait_for(lambda: running("lead"), 120, "the Job lead running").metadata.name
    preempt(lead)
    assert events(core, ns, lead, names.REASON_PLACE_KEPT), pod_events(core, ns, lead)
    gone("lead")
    batch.create_namespaced_job(ns, job("lead", QOS))  # the same name and labels: another workload
    copy = wait_for(lambda: running("lead"), 120, "the new Job lead running").metadata.name
    assert names.ANN_RESUMES not in ((get_phj(custom, ns, copy) or {})["metadata"].get("annotations") or {})
    gone("lead")

    # Under CANCEL the work does not come back at its place: its pod fails (no DisruptionTarget), so
    # the Job counts it (backoffLimit 0: the Job fails, and makes no new pod).
    batch.create_namespaced_job(ns, job("once", "pods"))
    once = wait_for(lambda: running("once"), 120, "the Job once running").metadata.name
    preempt(once)
    assert any("CANCEL" in m for m in events(core, ns, once, names.REASON_PLACE_NOT_KEPT))

    def failed() -> bool:
        status = batch.read_namespaced_job("once", ns).status
        return any(c.type == "Failed" and c.status == "True" for c in status.conditions or [])

    wait_for(failed, 120, "the Job once failed (its preempted pod counted)")
    assert [p.metadata.name for p in core.list_namespaced_pod(ns, label_selector="job-name=once").items] in ([], [once])


class Calls(BaseHTTPRequestHandler):
    """Notes when each path is called (the kubelet calling a pod's preStop hook)."""

    seen: dict[str, float]

    def do_GET(self) -> None:
        self.seen[self.path] = time.time()
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook_server() -> Iterator[tuple[int, dict[str, float]]]:
    """An HTTP server on this machine that a real kubelet's preStop hook calls."""
    seen: dict[str, float] = {}
    handler = type("Seen", (Calls,), {"seen": seen})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = HTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port, seen
    server.shutdown()


def test_a_preempted_pods_prestop_hook_runs_within_the_grace_time_before_its_preemptor_starts(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi, ns: str,
    natives: list[int], node_image: str, hook_server: tuple[int, dict[str, float]],  # noqa: F811
) -> None:  # fmt: skip
    """A training job checkpoints in its preStop hook (docs/colocation.md, "Checkpointing within the
    grace time"): on the real node (a real kubelet runs the hook), a native job preempts the pod's
    job; the hook runs after the preemption is said and before the preemptor starts, within the
    QOS's GraceTime."""
    port, seen = hook_server
    node = slurm_env.real_node
    assert node, "the local cluster has no real node (hack/node.sh)"
    # Exclusive: its Slurm job holds the whole node whatever the pod asks, so only a preemption lets
    # the native job start there.
    container = {
        "name": "main",
        "image": node_image,
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        "lifecycle": {"preStop": {"httpGet": {"host": "127.0.0.1", "port": port, "path": "/checkpoint"}}},
    }
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "containers": [container],
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip
    annotations = {names.ANN_PARTITION: slurm_env.real_partition, names.ANN_QOS: QOS,
                   names.ANN_NODE_SHARING: names.NODE_SHARING_EXCLUSIVE}  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ckpt", "annotations": annotations},
           "spec": {"backoffLimit": 0, "template": {"spec": spec}}}  # fmt: skip
    batch.create_namespaced_job(ns, job)

    def running() -> Any:
        found = core.list_namespaced_pod(ns, label_selector="job-name=ckpt").items
        return next((p for p in found if p.status.phase == "Running"), None)

    pod = wait_for(running, 120, "the pod running")
    name = pod.metadata.name
    marker = f"/tmp/ckpt-{secrets.token_hex(4)}.start"
    script = f"#!/bin/sh\ndate +%s.%N >> {marker}\nexec sleep 600\n"
    urgent = sbatch_as(slurm_env, ALICE.user, script, "-p", slurm_env.real_partition, "-w", node, "--exclusive",
                       "-A", ALICE.accounts[0], "--mem=64", "--qos", "native-urgent", "-o", "/dev/null")  # fmt: skip
    natives.append(urgent)
    wait_for(lambda: events(core, ns, name, names.REASON_PLACE_KEPT), 90, f"{name} preempted, its place kept")
    preempted = time.time()
    wait_for(lambda: "/checkpoint" in seen, 60, f"{name}'s preStop hook called")
    wait_for(lambda: squeue_state(slurm_env, urgent) == "RUNNING", 120, f"the urgent job {urgent} running")
    start_file = Path(f"{slurm_env.root}{marker}")
    wait_for(start_file.exists, 30, f"the urgent job {urgent} noted its start")
    started = float(start_file.read_text().split()[0])
    assert seen["/checkpoint"] - preempted < 90, "the hook ran past the QOS's GraceTime"
    assert seen["/checkpoint"] <= started, "the preemptor started before the pod's hook ran"
    wait_for(lambda: read_pod(core, ns, name) is None, 60, f"{name} gone")
