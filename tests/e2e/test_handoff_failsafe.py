"""The handoff fails safe (issue 36 §2 and §3; docs/colocation.md, "The handoff").

On ``real-node-1`` a real kubelet runs the pod's lingering container (hack/workload: it goes on
LINGER seconds after SIGTERM, inside its grace period) and a real slurmd a tenant's native batch
job that waits for the whole node. Each test checks, timed from the container's cgroup, that the
native job starts only after the container's last process exited:

- the pod is force-deleted (``grace_period_seconds=0``) while the node's kubelet is stopped: its
  object is gone at once while the container runs on; the bridge keeps the pod's Slurm job until
  the deletion plus the pod's grace period and the margin;
- the operator is stopped for longer than the old hold (grace + 2 x margin) while an administrator
  ``scancel``s the pod's job; it is started again afterwards;
- the script's reservation is gone (deleted by hand, as when the script could not reserve): the
  handoff loop drains the node at once with a reason naming the pod, and lifts the drain once the
  container stopped.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import is_released
from tests.e2e.test_handoff import (
    GRACE,
    LINGER,
    ExitWatch,
    Native,
    Running,
    container_pids,
    handoff_pod,
    handoff_script,
    native_after_container,
    native_waiting,
    setup,
    start_pod,
    wait_pending,
    workload_image,
)
from tests.e2e.util import get_phj, read_pod, slurm_job
from tests.harness import BRIDGE_SH, CLUSTER_SH, REPO, SlurmEnv, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
__all__ = ["handoff_script", "setup", "workload_image"]  # the fixtures, used by name
NODE_SH = REPO / "hack" / "node.sh"
MARGIN = 10  # handoff.marginSeconds of the local bridge (hack/bridge.sh)
OLD_HOLD = GRACE + 2 * MARGIN  # what the script's reservation held before it lasted until released
KUBELET_AWAY = 15  # seconds the real node's kubelet is stopped across a forced delete
VANISHED_GRACE = 60  # the force-deleted pod's grace period (handoff.maxGracePeriodSeconds): held 70 s


@pytest.fixture
def pod_jobs(slurm_env: SlurmEnv) -> Iterator[list[int]]:
    """The pods' Slurm jobs: a handoff reservation or drain one of them leaves behind (a failed test,
    a hold of a day, a bridge of other code next) is lifted, so the real node stays usable."""
    jobs: list[int] = []
    yield jobs
    for job_id in jobs:
        line = reservation_of(slurm_env, job_id)
        if line is not None:
            slurm_env.slurm("scontrol", "delete", line.split()[0], check=False)
        state, reason = node_reason(slurm_env)
        if "DRAIN" in state and reason.startswith("slurm-bridge-handoff") and f"of Slurm job {job_id} " in reason:
            slurm_env.slurm("scontrol", "update", f"NodeName={slurm_env.real_node}", "State=UNDRAIN", check=False)


def reservation_of(slurm: SlurmEnv, job_id: int) -> str | None:
    prefix = f"ReservationName=handoff-{job_id}_"
    return next((ln for ln in slurm.scontrol("show", "res", "-o").splitlines() if ln.startswith(prefix)), None)


def start_lingering(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm: SlurmEnv, image: str, linger: int, grace: int
) -> Running:
    """The handoff tests' pod (tests/e2e/test_handoff.py), lingering ``linger`` s after SIGTERM
    within a ``grace`` s grace period: long enough that a drain is seen while it runs."""
    name = f"failsafe-{secrets.token_hex(3)}"
    body = handoff_pod(name, image, slurm)
    body["spec"]["terminationGracePeriodSeconds"] = grace
    body["spec"]["containers"][0]["args"] = [str(linger)]
    core.create_namespaced_pod(ns, body)

    def running() -> tuple[int, list[int]] | None:
        pod = read_pod(core, ns, name)
        job_id = ((get_phj(custom, ns, name) or {}).get("status") or {}).get("jobId")
        pids = container_pids(pod) if pod is not None and pod.status.phase == "Running" else []
        return (int(job_id), pids) if job_id and pids else None

    job_id, pids = wait_for(running, 120, f"pod {name}'s container running on {slurm.real_node}")
    return Running(name, job_id, ExitWatch(pids))


def node_reason(slurm: SlurmEnv) -> tuple[str, str]:
    """The real node's Slurm state and reason."""
    line = slurm.scontrol("show", "node", slurm.real_node, "-o")
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    reason = line.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in line else ""
    return fields.get("State", ""), reason


def whole_node_native(slurm_env: SlurmEnv, setup: dict[str, Any]) -> Native:
    """A tenant's native job for every CPU of the real node, ended with the test."""
    native = native_waiting(slurm_env, slurm_env.node_cpus(slurm_env.real_node))
    setup["natives"].append(native)
    return native


def test_a_force_deleted_pods_job_is_held_until_its_container_stopped(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, workload_image: str,
    setup: dict[str, Any], pod_jobs: list[int],
) -> None:  # fmt: skip
    """A kubelet that hears of a forced delete stops the containers within its 2 s minimum grace
    (checked on real-node-1); one that does not hear of it (its node partitioned, the kubelet down:
    PodGC of a NotReady node, a deleted Node) goes on until it is back. The kubelet is stopped
    KUBELET_AWAY seconds across the delete: the pod object is gone at once, its container runs on."""
    pod = start_lingering(core, custom, ns, slurm_env, workload_image, linger=LINGER, grace=VANISHED_GRACE)
    pod_jobs.append(pod.job_id)
    native = whole_node_native(slurm_env, setup)
    wait_pending(slurm_env, native)
    run(["bash", str(CLUSTER_SH), "stop", "kubelet"], timeout=60)
    try:
        deleted = time.time()
        core.delete_namespaced_pod(
            pod.name, ns, body=k8s.V1DeleteOptions(grace_period_seconds=0, propagation_policy="Background")
        )
        wait_for(lambda: not any(p.metadata.name == pod.name for p in core.list_namespaced_pod(ns).items), 10,
                 f"pod {pod.name}'s object gone")  # fmt: skip
        wait_for(lambda: time.time() - deleted > KUBELET_AWAY or native.started_at() is not None, KUBELET_AWAY + 10,
                 "the kubelet's absence")  # fmt: skip
    finally:
        run(["bash", str(NODE_SH), "up"], timeout=300)
    gap = native_after_container(slurm_env, native, pod, timeout=150, core=core, ns=ns)
    exited = pod.watch.exited_at or 0.0
    assert exited - deleted >= KUBELET_AWAY, f"the container exited {exited - deleted:.1f}s after the delete"
    final = slurm_job(slurm_env, pod.job_id) or {}
    assert final.get("job_state") == ["CANCELLED"], final.get("job_state")
    assert is_released(str(final.get("admin_comment") or "")), "released by the bridge, exactly"
    assert reservation_of(slurm_env, pod.job_id) is None
    print(
        f"\nforce delete: container exited {exited - deleted:.2f}s after the delete; native job {native.job_id} "
        f"started {gap:.3f}s after the container exited"
    )


def test_a_job_slurm_ends_while_the_operator_is_away_holds_until_the_container_stopped(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, workload_image: str,
    setup: dict[str, Any], pod_jobs: list[int],
) -> None:  # fmt: skip
    pod = start_pod(core, custom, ns, slurm_env, workload_image)
    pod_jobs.append(pod.job_id)
    native = whole_node_native(slurm_env, setup)
    wait_pending(slurm_env, native)
    run(["bash", str(BRIDGE_SH), "stop", "operator"], timeout=60)
    try:
        slurm_env.slurm("scancel", str(pod.job_id))  # an administrator ends the pod's job
        away = time.time()
        wait_for(lambda: time.time() - away > OLD_HOLD + 5 or native.started_at() is not None, OLD_HOLD + 30,
                 "the old hold to pass")  # fmt: skip
        assert native.started_at() is None, (
            f"native job {native.job_id} started {native.started_at() - away:.1f}s after the scancel, while pod "  # type: ignore[operator]
            f"{pod.name}'s container still runs (the operator is away)"
        )
    finally:
        run(["bash", str(BRIDGE_SH), "restart", "operator"], timeout=120)
    gap = native_after_container(slurm_env, native, pod, timeout=150, core=core, ns=ns)
    wait_for(lambda: reservation_of(slurm_env, pod.job_id) is None, 30, "the reservation released")
    wait_for(lambda: "DRAIN" not in node_reason(slurm_env)[0], 30, f"{slurm_env.real_node} not drained")
    print(f"\noperator away {OLD_HOLD + 5}s: native job {native.job_id} started {gap:.3f}s after the container exited")


def test_a_pod_running_with_no_hold_drains_its_node_at_once_until_its_container_stopped(
    slurm_env: SlurmEnv, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, workload_image: str,
    setup: dict[str, Any], pod_jobs: list[int],
) -> None:  # fmt: skip
    pod = start_lingering(core, custom, ns, slurm_env, workload_image, linger=25, grace=40)
    pod_jobs.append(pod.job_id)
    slurm_env.slurm("scancel", str(pod.job_id))  # Slurm ends the pod's job...
    reservation = wait_for(lambda: reservation_of(slurm_env, pod.job_id), 10, f"Slurm job {pod.job_id}'s reservation")
    name = reservation.split()[0].split("=", 1)[1]
    slurm_env.slurm("scontrol", "delete", f"ReservationName={name}")  # ...and the script's hold is gone
    gone = time.time()

    def drained() -> str | None:
        state, reason = node_reason(slurm_env)
        return reason if "DRAIN" in state and f"pod {ns}/{pod.name} of Slurm job {pod.job_id}" in reason else None

    reason = wait_for(drained, 10, f"{slurm_env.real_node} drained for pod {pod.name}")
    drained_after = time.time() - gone
    assert reason.startswith("slurm-bridge-handoff[") and "nothing holds its CPUs" in reason, reason
    native = whole_node_native(slurm_env, setup)
    gap = native_after_container(slurm_env, native, pod, timeout=120, core=core, ns=ns)
    wait_for(lambda: "DRAIN" not in node_reason(slurm_env)[0], 30, f"{slurm_env.real_node}'s drain lifted")
    print(
        f"\nno hold: {slurm_env.real_node} drained {drained_after:.2f}s after the reservation went; native job "
        f"{native.job_id} started {gap:.3f}s after the container exited"
    )
