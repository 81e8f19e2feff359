"""The co-location checks of the hybrid-nodes issue (issue 28; docs/colocation.md) on kind's workers:
a real kubelet runs each pod's real container and a real slurmd each native batch job, on the same
worker (issue 29 §5). The local cluster's versions are tests/e2e/test_node_sharing.py (the modes)
and tests/e2e/test_handoff.py (the handoff).

Every job here is sized from what Slurm says the worker has (its CPUs), so pods and native jobs
really contend for it: a native job asks for every CPU the pod's job leaves, or for all of them.
Native jobs are alice's (``sbatch --uid`` in the slurmctld pod, as tests/kind/test_hybrid.py
submits them), and are cancelled at each test's end; the namespaces go with their pods' jobs.
"""

from __future__ import annotations

import secrets
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.test_node_sharing import (
    bound,
    end_pod,
    job_cpus,
    node_cpus,
    running_on,
    state,
    the_job_of,
    told_why,
    unbound,
    waits_for,
)
from tests.e2e.util import Native, get_phj, make_pod, pod_events, read_pod, slurm_job, wait_for_idle_nodes
from tests.harness import TENANTS, SlurmEnv, holds_for, wait_for
from tests.kind.test_hybrid import worker_names

pytestmark = pytest.mark.usefixtures("kind_bridge")
ALICE = TENANTS["a"]
HOLD = 3  # seconds two things must stay so (several of the bridge's poll periods and Slurm's passes)
GRACE = 20  # the handoff pod's terminationGracePeriodSeconds (within the chart's maxGracePeriodSeconds)
LINGER = 6  # how long its container goes on after SIGTERM (hack/workload), inside GRACE


@pytest.fixture
def worker(core: k8s.CoreV1Api, slurm_env: SlurmEnv) -> str:
    """The first kind worker, free of Slurm jobs (an earlier test's namespace may still be ending)."""
    node = worker_names(core)[0]
    wait_for_idle_nodes(slurm_env, [node])
    return node


def cpus_of(slurm: SlurmEnv, node: str) -> int:
    """The worker's CPUs as Slurm counts them (slurm.conf's CPUs=; the kubelet counts the host's)."""
    cpus = node_cpus(slurm, node)[1]
    assert cpus >= 2, f"Slurm gives {node} {cpus} CPUs: too few to share"
    return cpus


def slurm_says(slurm: SlurmEnv, job_id: int) -> str:
    """A job's state and Slurm's reason, for a failure's message."""
    j = slurm_job(slurm, job_id) or {}
    return f"{j.get('job_state')} {j.get('state_reason')} on {j.get('nodes') or '-'}"


def kind_pod(name: str, mode: str | None, node: str, *, image: str | None = None) -> dict[str, Any]:
    """A bridge pod on ``node`` with CPU and memory limits (coResident needs them): one Slurm CPU.
    It asks the kubelet for 100m only: the kubelets count this machine's few cores."""
    manifest = make_pod(name, cpu="100m", memory="64Mi", annotations={names.ANN_NODE_SHARING: mode} if mode else None)
    container = manifest["spec"]["containers"][0]
    container["resources"]["limits"] = {"cpu": "100m", "memory": "64Mi"}
    if image:  # the lingering workload: its own entrypoint, told how long to linger
        container |= {"image": image, "imagePullPolicy": "Never", "args": [str(LINGER)]}
        container.pop("command", None)
        manifest["spec"]["terminationGracePeriodSeconds"] = GRACE
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return manifest


def test_co_resident_a_pod_and_a_native_job_fill_a_worker_together_and_each_waits_for_the_other(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    native: Native, worker: str,
) -> None:  # fmt: skip
    ns, node = managed_namespace, worker
    cpus = cpus_of(slurm_env, node)
    core.create_namespaced_pod(ns, kind_pod("co-pod", "coResident", node))
    wait_for(lambda: bound(core, ns, "co-pod", node), 120, f"the coResident pod running on {node}")
    pod_job = the_job_of(custom, ns, "co-pod")
    assert job_cpus(slurm_env, pod_job) == 1, "a coResident pod holds its own CPU only"
    # A native job for every other CPU of the worker: it starts beside the pod, and the worker is full.
    # QOS native: alice's default QOS holds her to a few CPUs at once (hack/accounting.env).
    rest = native.submit(ALICE, "-w", node, "-c", str(cpus - 1), "--mem=64", "--qos=native", "--chdir=/tmp",
                         name="co-rest")  # fmt: skip

    def together() -> bool:
        return (
            running_on(slurm_env, rest, node)
            and running_on(slurm_env, pod_job, node)
            and bound(core, ns, "co-pod", node)
            and node_cpus(slurm_env, node) == (cpus, cpus)
        )

    try:
        wait_for(together, 60, f"native job {rest} ({cpus - 1} CPUs) running beside the pod's job {pod_job} on {node}")
    except AssertionError as e:
        raise AssertionError(f"{e}: Slurm says {slurm_says(slurm_env, rest)}, and of the pod's job "
                             f"{slurm_says(slurm_env, pod_job)}") from None  # fmt: skip
    holds_for(together, HOLD, f"the pod's job and native job {rest} filling {node} ({cpus} CPUs) at once")
    fields = "JobID,User,Account,NodeList,AllocCPUS,State"

    def accounted() -> dict[str, list[str]]:
        out = slurm_env.sacct("-X", "-n", "-P", "-j", f"{rest},{pod_job}", "-o", fields)
        rows = {ln.split("|")[0]: ln.split("|") for ln in out.splitlines() if ln}
        return rows if {str(rest), str(pod_job)} <= set(rows) else {}

    rows = wait_for(accounted, 60, "sacct to list both jobs")
    assert rows[str(rest)][1:6] == [ALICE.user, ALICE.accounts[0], node, str(cpus - 1), "RUNNING"], rows
    assert rows[str(pod_job)][3:6] == [node, "1", "RUNNING"], rows
    # A second pod waits for the native job's CPUs, with Slurm's reason on the pod and its PlaceholderJob.
    core.create_namespaced_pod(ns, kind_pod("co-waits", "coResident", node))
    waiting = the_job_of(custom, ns, "co-waits")
    wait_for(lambda: told_why(core, ns, "co-waits", "Resources"), 60, "the second pod told Slurm's reason (Resources)")
    status = (get_phj(custom, ns, "co-waits") or {}).get("status") or {}
    assert status.get("phase") == names.PHASE_PENDING and status.get("reason") == "Resources", status
    holds_for(lambda: unbound(core, ns, "co-waits") and waits_for(slurm_env, waiting, "Resources"), HOLD,
              f"the second pod waiting while {node} is full")  # fmt: skip
    native.cancel(rest)
    wait_for(lambda: bound(core, ns, "co-waits", node), 120, "the second pod running once the native job ended")
    assert running_on(slurm_env, waiting, node) and running_on(slurm_env, pod_job, node)


def test_exclusive_a_pod_waits_while_a_native_job_holds_part_of_the_worker(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    native: Native, worker: str,
) -> None:  # fmt: skip
    ns, node = managed_namespace, worker
    cpus = cpus_of(slurm_env, node)
    small = native.submit(ALICE, "-w", node, "-c", "1", "--mem=64", "--chdir=/tmp", name="ex-small")
    wait_for(lambda: running_on(slurm_env, small, node), 60, f"a 1-CPU native job {small} on {node}")
    core.create_namespaced_pod(ns, kind_pod("whole", "exclusive", node))
    pod_job = the_job_of(custom, ns, "whole")
    wait_for(lambda: told_why(core, ns, "whole", "Resources"), 60, "the pod told why it waits (Resources)")
    status = (get_phj(custom, ns, "whole") or {}).get("status") or {}
    assert status.get("phase") == names.PHASE_PENDING and status.get("reason") == "Resources", status
    holds_for(lambda: unbound(core, ns, "whole") and waits_for(slurm_env, pod_job, "Resources")
              and running_on(slurm_env, small, node), HOLD,
              f"the exclusive pod waiting for the whole of {node} ({cpus - 1} of {cpus} CPUs free)")  # fmt: skip
    native.cancel(small)
    wait_for(lambda: bound(core, ns, "whole", node), 120, "the pod on the whole worker once the native job ended")
    assert job_cpus(slurm_env, pod_job) == cpus and node_cpus(slurm_env, node) == (cpus, cpus), "it holds every CPU"
    pod = read_pod(core, ns, "whole")
    assert pod is not None and pod.status.container_statuses[0].state.running is not None, "no running container"
    # Nothing else starts there while it runs, not even a 1-CPU native job.
    late = native.submit(ALICE, "-w", node, "-c", "1", "--mem=64", "--chdir=/tmp", name="ex-late")
    holds_for(lambda: state(slurm_env, late) == "PENDING", HOLD, "a native job waiting for the exclusive pod's worker")
    end_pod(core, ns, "whole")
    wait_for(lambda: running_on(slurm_env, late, node), 60, "the native job running once the exclusive pod ended")


# ---- the handoff ------------------------------------------------------------------------------------


def kubectl(cluster: dict[str, str], *args: str) -> list[str]:
    return ["kubectl", "--kubeconfig", cluster["KUBECONFIG"], *args]


def log_time(line: str) -> float:
    """The time of a ``kubectl logs --timestamps`` line (RFC 3339, nanoseconds; the CRI log's, which
    the container runtime stamps as it reads the line): seconds since the epoch."""
    stamp = line.split(" ", 1)[0].removesuffix("Z")
    whole, _, frac = stamp.partition(".")
    return datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp() + float(f"0.{frac or 0}")


def slurmd_pod(core: k8s.CoreV1Api, node: str) -> str:
    pods = core.list_namespaced_pod("slurm", label_selector="app.kubernetes.io/name=slurmd").items
    found = [p.metadata.name for p in pods if p.spec.node_name == node]
    assert found, f"no slurmd pod on {node}"
    return str(found[0])


@pytest.fixture
def handoff_script(slurm_env: SlurmEnv) -> None:
    """The kind cluster's slurmctld runs the project's EpilogSlurmctld (hack/slurm-policy.conf,
    installed from the slurm-config ConfigMap by hack/kind/slurm-image/sb-slurm)."""
    conf = slurm_env.scontrol("show", "config")
    line = next((ln for ln in conf.splitlines() if ln.startswith("EpilogSlurmctld")), "")
    assert "slurm-bridge-handoff.sh" in line, (
        f"the kind cluster's slurmctld runs no handoff script ({line.strip() or 'no EpilogSlurmctld'}): "
        "recreate it (hack/kind.sh down && hack/kind.sh up)"
    )


def test_handoff_scancel_of_the_pods_job_holds_its_cpu_until_the_container_stopped(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, managed_namespace: str, slurm_env: SlurmEnv,
    native: Native, worker: str, cluster: dict[str, str], handoff_script: None,
) -> None:  # fmt: skip
    ns, node = managed_namespace, worker
    image = cluster.get("SB_LINGER_IMAGE", "")
    assert image, "`hack/kind.sh env` names no SB_LINGER_IMAGE: the cluster was made by an older hack/kind.sh up"
    cpus = cpus_of(slurm_env, node)
    name = f"handoff-{secrets.token_hex(3)}"
    # coResident: the handoff holds the job's own CPU count (a time-shared job's hold is the whole node).
    core.create_namespaced_pod(ns, kind_pod(name, "coResident", node, image=image))

    def running() -> bool:
        p = read_pod(core, ns, name)
        return bool(p and p.status.phase == "Running" and p.status.container_statuses[0].state.running)

    wait_for(running, 120, f"pod {name}'s lingering container running on {node}")
    pod_job = the_job_of(custom, ns, name)
    # The container's output as it comes, stamped by the runtime; it ends when the container does.
    logs = subprocess.Popen(kubectl(cluster, "-n", ns, "logs", "-f", "--timestamps", name),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    marker = f"/tmp/handoff-native-{secrets.token_hex(4)}.out"
    slurmd = slurmd_pod(core, node)
    try:
        # alice's job for the whole worker: it waits while the pod's job holds a CPU of it.
        proc = slurm_env.slurm(
            "sbatch", "--parsable", f"--uid={ALICE.uid}", f"--gid={ALICE.gid}", "-A", ALICE.accounts[0],
            "-J", "handoff-native", "-w", node, "-c", str(cpus), "--mem=64", "--qos=native", "--chdir=/tmp",
            f"--output={marker}",
            "--wrap", "date +%s.%N; exec sleep 600",
        )  # fmt: skip
        waiting = int(proc.stdout.strip().split(";")[0])
        native.ids.append(waiting)  # cancelled at the end
        wait_for(lambda: waits_for(slurm_env, waiting, "Resources"), 60, f"native job {waiting} pending (Resources)")
        slurm_env.slurm("scancel", str(pod_job))  # an administrator ends the pod's job
        reservation = wait_for(
            lambda: next((ln for ln in slurm_env.scontrol("show", "res", "-o").splitlines()
                          if ln.startswith(f"ReservationName=handoff-{pod_job}_")), None),
            15, f"the handoff reservation for Slurm job {pod_job}",
        )  # fmt: skip
        # The pod's one CPU; or the whole node when slurmctld gave that CPU to the waiting native job
        # before the epilog ran (Slurm then refuses a count, even with IGNORE_JOBS; the prolog holds
        # the native job): the same rule as tests/e2e/test_handoff.py's local twin
        assert f"Nodes={node}" in reservation, reservation
        assert "CoreCnt=1 " in reservation or "Flags=IGNORE_JOBS" in reservation, reservation

        def started() -> float | None:
            out = subprocess.run(kubectl(cluster, "-n", "slurm", "exec", slurmd, "-c", "slurmd", "--", "cat", marker),
                                 capture_output=True, text=True, timeout=30).stdout.strip()  # fmt: skip
            return float(out) if out else None

        start = wait_for(started, 180, f"native job {waiting} to start on {node}", interval=0.5)
        out, err = logs.communicate(timeout=60)
    finally:
        if logs.poll() is None:
            logs.kill()
            logs.wait()
        subprocess.run(kubectl(cluster, "-n", "slurm", "exec", slurmd, "-c", "slurmd", "--", "rm", "-f", marker),
                       capture_output=True, timeout=30, check=False)  # fmt: skip
    lines = out.splitlines()
    term = next((log_time(ln) for ln in lines if "workload: SIGTERM" in ln), None)
    stopped = next((log_time(ln) for ln in lines if "workload: stopped" in ln), None)
    assert term is not None and stopped is not None, f"the container's log lacks its SIGTERM or its end: {out}{err}"
    assert stopped - term >= LINGER - 1, f"the container went on {stopped - term:.2f}s after SIGTERM, not {LINGER}s"
    gap = start - stopped
    assert gap > 0, f"native job {waiting} started {-gap:.3f}s before pod {name}'s container stopped"
    events = [e.reason for e in pod_events(core, ns, name)]
    assert names.REASON_HANDOFF_HELD in events and names.REASON_SLURM_JOB_CANCELLED in events, events
    wait_for(lambda: f"handoff-{pod_job}_" not in slurm_env.scontrol("show", "res"), 30, "the reservation gone")
    final = slurm_job(slurm_env, waiting) or {}
    assert final.get("job_state") == ["RUNNING"] and final.get("nodes") == node, final.get("job_state")
    print(
        f"\nkind handoff: the container lingered {stopped - term:.2f}s after SIGTERM; native job {waiting} "
        f"({cpus} CPUs) started {gap:.3f}s after its last line"
    )
