"""Node sharing between pods and native Slurm jobs on hybrid nodes (issue 28 §2, §5;
docs/colocation.md), with real slurmd and real batch jobs: coResident (core by core, at once),
timeShared (in turns), exclusive (whole nodes), each order of waiting with Slurm's reason on the
pod, a real container and a real batch process on real-node-1, the SlurmResourcesFit condition,
accounting and fair share of both kinds, and backfill both ways.

The bridge runs with the default nodeSharing (timeShared); each pod names its mode with the
annotation slurmjob.slinky.slurm.net/node-sharing, so one bridge serves every mode here. Native
jobs are submitted as the tenants with ``sbatch --uid`` through ``SlurmEnv.slurm`` (root's Slurm
commands where Slurm runs: the local cluster's root, or the kind cluster's slurmctld pod), and
Slurm is read over REST, so the tests need nothing of the local cluster but its node names; the
exceptions are named where they are (the real node's container processes, the operator's /stats).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.builders import make_pod as build_pod
from tests.e2e.test_hybrid_real_node import container_pids, node_image, uid_of  # noqa: F401
from tests.e2e.test_tenancy import tenant_spec, wait_selected
from tests.e2e.util import API, Native, get_phj, pod_events, read_pod, slurm_job, wait_for_idle_nodes
from tests.harness import TENANTS, SlurmEnv, holds_for, run, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
ALICE, BOB = TENANTS["a"], TENANTS["b"]
MODE = names.ANN_NODE_SHARING
REAL_NODE_TAINT = "slurm-bridge.local/real-node"  # hack/lib.sh REAL_NODE_KEY: only pods that tolerate it run there
HOLD = 4  # seconds two things must stay so (several of the bridge's poll periods and Slurm's passes)


# ---- Slurm, as an administrator reads it ------------------------------------------------------------


@pytest.fixture
def hybrid(slurm_env: SlurmEnv) -> list[str]:
    """The kwok hybrid nodes (real slurmd, 4 CPUs), free of jobs."""
    assert len(slurm_env.hybrid_nodes) >= 2, f"the cluster has hybrid nodes {slurm_env.hybrid_nodes}, want 2"
    wait_for_idle_nodes(slurm_env, slurm_env.hybrid_nodes)
    return slurm_env.hybrid_nodes


def job(slurm: SlurmEnv, job_id: int) -> Obj:
    found = slurm_job(slurm, job_id)
    assert found is not None, f"Slurm has no job {job_id}"
    return found


def state(slurm: SlurmEnv, job_id: int) -> str:
    return str(job(slurm, job_id)["job_state"][0])


def running_on(slurm: SlurmEnv, job_id: int, node: str) -> bool:
    j = job(slurm, job_id)
    return j["job_state"][0] == "RUNNING" and j.get("nodes") == node


def waits_for(slurm: SlurmEnv, job_id: int, reason: str) -> bool:
    j = job(slurm, job_id)
    return j["job_state"][0] == "PENDING" and j.get("state_reason") == reason


def pending_for(slurm: SlurmEnv, job_id: int, reason: str) -> bool:
    """waits_for, for wait_for: what the job shows instead is its last error (the timeout names it)."""
    j = job(slurm, job_id)
    got = (j["job_state"][0], j.get("state_reason"))
    if got != ("PENDING", reason):
        raise AssertionError(f"job {job_id} is {got[0]} ({got[1]}), priority {j.get('priority')}")
    return True


def node_cpus(slurm: SlurmEnv, node: str) -> tuple[int, int]:
    """(CPUs that running jobs hold on a Slurm node, its CPUs). The held CPUs are summed over the
    jobs: a node's own ``alloc_cpus`` in REST was seen behind (0 with a job running, 1 with two,
    Slurm 26.05.5), so it is not what is checked."""
    r = httpx.get(f"{slurm.url}{API}/node/{node}", headers=slurm.headers(), timeout=20)
    r.raise_for_status()
    cpus = int(r.json()["nodes"][0]["cpus"])
    jobs = httpx.get(f"{slurm.url}{API}/jobs", headers=slurm.headers(), timeout=20).raise_for_status().json()["jobs"]
    held = sum(int(j["cpus"]["number"]) for j in jobs if j["job_state"][0] == "RUNNING" and j.get("nodes") == node)
    return held, cpus


def job_cpus(slurm: SlurmEnv, job_id: int) -> int:
    return int(job(slurm, job_id)["cpus"]["number"])


# ---- pods --------------------------------------------------------------------------------------------


def pod(
    name: str,
    mode: str,
    *,
    node: str | None = None,
    partition: str = "hybrid",
    cpu: str = "1",
    memory: str = "100Mi",
    annotations: Obj | None = None,
    image: str | None = None,
) -> Obj:
    """A bridge pod of the given node sharing, with limits (coResident needs them), on ``node``."""
    built = build_pod(name).meta(annotations={MODE: mode, names.ANN_PARTITION: partition, **(annotations or {})})
    built.container(
        "main",
        image=image or "busybox",
        command=None if image else ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        requests={"cpu": cpu, "memory": memory},
        limits={"cpu": cpu, "memory": memory},
    ).spec(restartPolicy="Never")
    if node:
        built.spec(nodeSelector={"kubernetes.io/hostname": node})
    return built.manifest()


def phj_job(custom: k8s.CustomObjectsApi, ns: str, name: str) -> int | None:
    status = ((get_phj(custom, ns, name) or {}).get("status")) or {}
    job_id = status.get("jobId")
    return int(job_id) if job_id else None


def the_job_of(custom: k8s.CustomObjectsApi, ns: str, name: str) -> int:
    found: int = wait_for(lambda: phj_job(custom, ns, name), 60, f"pod {name}'s Slurm job")
    return found


def bound(core: k8s.CoreV1Api, ns: str, name: str, node: str | None = None) -> bool:
    p = read_pod(core, ns, name)
    return bool(p and p.spec.node_name and (node is None or p.spec.node_name == node) and p.status.phase == "Running")


def unbound(core: k8s.CoreV1Api, ns: str, name: str) -> bool:
    p = read_pod(core, ns, name)
    return bool(p and not p.spec.node_name)


def told_why(core: k8s.CoreV1Api, ns: str, name: str, reason: str) -> bool:
    """Slurm's reason is on the pod: a SlurmJobPending Event naming it."""
    return any(
        e.reason == names.EVENT_SLURM_JOB_PENDING and f"is waiting: {reason} (" in (e.message or "")
        for e in pod_events(core, ns, name)
    )


def end_pod(core: k8s.CoreV1Api, ns: str, name: str) -> None:
    with contextlib.suppress(k8s.exceptions.ApiException):
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


# ---- the modes ---------------------------------------------------------------------------------------


def test_co_resident_a_native_batch_job_and_a_pod_share_one_node_at_once_and_sacct_has_both(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str],
) -> None:  # fmt: skip
    node = hybrid[0]
    batch = native.submit(ALICE, "-p", slurm_env.hybrid_partition, "-w", node, "-c", "2", "--mem=200", name="co-native")
    wait_for(lambda: running_on(slurm_env, batch, node), 30, f"the 2-CPU native job {batch} running on {node}")
    core.create_namespaced_pod(ns, pod("co-pod", "coResident", node=node))
    wait_for(lambda: bound(core, ns, "co-pod", node), 60, f"the coResident pod bound and running on {node}")
    pod_job = the_job_of(custom, ns, "co-pod")

    def together() -> bool:
        return (
            running_on(slurm_env, batch, node)
            and running_on(slurm_env, pod_job, node)
            and bound(core, ns, "co-pod", node)
            and node_cpus(slurm_env, node) == (3, 4)
        )

    holds_for(together, HOLD, f"native job {batch} (2 CPUs) and the pod's job {pod_job} (1 CPU) on {node} at once")
    assert job_cpus(slurm_env, pod_job) == 1, "a coResident pod holds its own CPU only"
    fields = "JobID,User,Account,NodeList,AllocCPUS,State"

    def accounted() -> dict[str, list[str]]:
        out = slurm_env.sacct("-X", "-n", "-P", "-j", f"{batch},{pod_job}", "-o", fields)
        rows = {ln.split("|")[0]: ln.split("|") for ln in out.splitlines() if ln}
        return rows if {str(batch), str(pod_job)} <= set(rows) else {}

    rows = wait_for(accounted, 60, "sacct to list both jobs")
    assert rows[str(batch)][1:5] == [ALICE.user, ALICE.accounts[0], node, "2"], rows
    assert rows[str(pod_job)][3:5] == [node, "1"], rows
    assert rows[str(batch)][5] == rows[str(pod_job)][5] == "RUNNING", rows


def test_time_shared_pods_and_native_jobs_take_turns_on_a_node(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str],
) -> None:  # fmt: skip
    node = hybrid[0]
    partition = ["-p", slurm_env.hybrid_partition, "-w", node, "-c", "1", "--mem=100"]
    first = native.submit(ALICE, *partition, name="ts-first")
    wait_for(lambda: running_on(slurm_env, first, node), 30, f"native job {first} running on {node}")
    # a pod waits while a native job holds the node, though three CPUs are free
    core.create_namespaced_pod(ns, pod("ts-waits", "timeShared", node=node))
    pod_job = the_job_of(custom, ns, "ts-waits")
    wait_for(lambda: told_why(core, ns, "ts-waits", "Resources"), 60, "the pod told Slurm's reason (Resources)")
    holds_for(lambda: unbound(core, ns, "ts-waits") and running_on(slurm_env, first, node), HOLD,
              "the time-shared pod waiting beside a native job")  # fmt: skip
    native.cancel(first)
    wait_for(lambda: bound(core, ns, "ts-waits", node), 60, "the pod to run once the native job ended")
    assert running_on(slurm_env, pod_job, node)
    # and a native job waits while the pod holds the node: they take turns
    second = native.submit(ALICE, *partition, name="ts-second")
    wait_for(lambda: waits_for(slurm_env, second, "Resources"), 30, f"native job {second} to wait (Resources)")
    holds_for(lambda: waits_for(slurm_env, second, "Resources") and bound(core, ns, "ts-waits", node), HOLD,
              "the native job waiting beside the time-shared pod")  # fmt: skip
    end_pod(core, ns, "ts-waits")
    wait_for(lambda: running_on(slurm_env, second, node), 60, "the native job to start once the pod's job ended")
    assert state(slurm_env, pod_job) in ("CANCELLED", "COMPLETED"), "the pod's job ended before it"


def test_time_shared_pods_share_a_node_among_themselves(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, hybrid: list[str]
) -> None:
    node = hybrid[0]
    for name in ("ts-a", "ts-b"):
        core.create_namespaced_pod(ns, pod(name, "timeShared", node=node))
    wait_for(lambda: bound(core, ns, "ts-a", node) and bound(core, ns, "ts-b", node), 60, f"both pods on {node}")
    jobs = [the_job_of(custom, ns, n) for n in ("ts-a", "ts-b")]
    assert all(running_on(slurm_env, j, node) for j in jobs) and node_cpus(slurm_env, node)[0] == 2
    labels = {job(slurm_env, j).get("mcs_label") for j in jobs}
    assert labels == {"kubernetes"}, f"the jobs' MCS labels: {labels}"


def test_exclusive_a_pod_waits_for_a_whole_node(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str],
) -> None:  # fmt: skip
    node = hybrid[0]
    small = native.submit(ALICE, "-p", slurm_env.hybrid_partition, "-w", node, "-c", "1", "--mem=100", name="ex-small")
    wait_for(lambda: running_on(slurm_env, small, node), 30, f"a 1-CPU native job {small} on {node}")
    core.create_namespaced_pod(ns, pod("whole", "exclusive", node=node))
    pod_job = the_job_of(custom, ns, "whole")
    wait_for(lambda: told_why(core, ns, "whole", "Resources"), 60, "the pod told why it waits (Resources)")
    holds_for(lambda: unbound(core, ns, "whole") and waits_for(slurm_env, pod_job, "Resources"), HOLD,
              "the exclusive pod waiting for the whole node")  # fmt: skip
    native.cancel(small)
    wait_for(lambda: bound(core, ns, "whole", node), 60, "the pod to run on the whole node")
    assert job_cpus(slurm_env, pod_job) == 4 and node_cpus(slurm_env, node) == (4, 4), "it holds every CPU"
    # nothing else starts there while it runs, not even a 1-CPU native job
    late = native.submit(ALICE, "-p", slurm_env.hybrid_partition, "-w", node, "-c", "1", "--mem=100", name="ex-late")
    holds_for(lambda: state(slurm_env, late) == "PENDING", HOLD, "a native job waiting for the exclusive pod's node")


def test_co_resident_each_waits_for_the_other_with_slurms_reason(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str],
) -> None:  # fmt: skip
    node = hybrid[0]
    opts = ["-p", slurm_env.hybrid_partition, "-w", node, "--mem=100"]
    # a native job waits for a pod's resources
    core.create_namespaced_pod(ns, pod("holds-3", "coResident", node=node, cpu="3"))
    wait_for(lambda: bound(core, ns, "holds-3", node), 60, "a 3-CPU coResident pod running")
    waiting = native.submit(ALICE, *opts, "-c", "2", name="co-waits")
    wait_for(lambda: waits_for(slurm_env, waiting, "Resources"), 30, "the 2-CPU native job to wait (Resources)")
    holds_for(lambda: waits_for(slurm_env, waiting, "Resources"), HOLD, "the native job waiting for the pod's CPUs")
    end_pod(core, ns, "holds-3")
    wait_for(lambda: running_on(slurm_env, waiting, node), 60, "the native job to start once the pod's job ended")
    # and a pod waits for a native job's, with Slurm's reason on the pod
    wide = native.submit(ALICE, *opts, "-c", "2", name="co-holds")  # with `waiting`: 4 of 4 CPUs
    wait_for(lambda: running_on(slurm_env, wide, node), 30, "a second 2-CPU native job running")
    core.create_namespaced_pod(ns, pod("waits-2", "coResident", node=node, cpu="1"))
    pod_job = the_job_of(custom, ns, "waits-2")
    wait_for(lambda: told_why(core, ns, "waits-2", "Resources"), 60, "the pod told Slurm's reason (Resources)")
    phj = get_phj(custom, ns, "waits-2") or {}
    assert phj["status"]["phase"] == names.PHASE_PENDING and phj["status"]["reason"] == "Resources", phj["status"]
    holds_for(lambda: unbound(core, ns, "waits-2"), HOLD, "the pod waiting for the native jobs' CPUs")
    native.cancel(wide)
    wait_for(lambda: bound(core, ns, "waits-2", node), 60, "the pod to run once a native job ended")
    assert running_on(slurm_env, pod_job, node) and running_on(slurm_env, waiting, node)


def test_real_node_a_real_container_and_a_real_batch_process_at_once(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    node_image: str,  # noqa: F811
) -> None:  # fmt: skip
    """The local cluster's real node only (its containers' cgroups and the Slurm root are read here);
    tests/kind/test_hybrid.py is the kind tier's counterpart."""
    node = slurm_env.real_node
    wait_for_idle_nodes(slurm_env, [node])
    manifest = pod("real-pod", "coResident", node=node, partition=slurm_env.real_partition, memory="64Mi",
                   image=node_image)  # fmt: skip
    manifest["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    manifest["spec"]["tolerations"] = [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    core.create_namespaced_pod(ns, manifest)
    batch = native.submit(
        ALICE, "-p", slurm_env.real_partition, "-w", node, "-c", "1", "--mem=64", name="beside-bridge-pod"
    )
    pod_job = the_job_of(custom, ns, "real-pod")

    def both() -> tuple[list[int], int] | None:
        p = read_pod(core, ns, "real-pod")
        if not p or p.status.phase != "Running" or not running_on(slurm_env, batch, node):
            return None
        pids = container_pids(p)
        procs = batch_processes(slurm_env, batch)
        return (pids, procs[0]) if pids and procs and running_on(slurm_env, pod_job, node) else None

    pids, proc = wait_for(both, 90, f"the bridge pod's container and batch job {batch} both running on {node}")
    holds_for(both, HOLD, f"container {pids} and batch process {proc} running together")
    assert uid_of(proc) == ALICE.uid, "the batch process runs as the tenant"
    assert node_cpus(slurm_env, node) == (2, 2), "the pod's CPU and the batch job's CPU: the real node's two"
    print(f"on {node}: bridge pod job {pod_job} container processes {pids}; batch job {batch} process {proc}")


def batch_processes(slurm: SlurmEnv, job_id: int) -> list[int]:
    """The processes of a batch job on this host: those whose environment names its job id
    (slurmstepd gives every task SLURM_JOB_ID)."""
    found = []
    root = str(Path(slurm.root).resolve())
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if str(Path(p, "root").resolve()) != root or Path(p, "comm").read_text().strip() != "sleep":
                continue
            env = Path(p, "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in env:
            found.append(int(p.name))
    return found


# ---- what the nodes say ------------------------------------------------------------------------------


def fit_condition(core: k8s.CoreV1Api, node: str) -> k8s.V1NodeCondition | None:
    conditions = core.read_node(node).status.conditions or []
    return next((c for c in conditions if c.type == names.NODE_COND_SLURM_RESOURCES_FIT), None)


def test_the_resources_fit_condition_is_true_where_sized_right_and_false_where_not(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, cluster: dict[str, str]
) -> None:
    right = [slurm_env.hybrid_nodes[0], slurm_env.real_node, slurm_env.nodes[0]]
    wrong = slurm_env.missized_node
    assert wrong, "the local cluster has no mis-sized node (hack/lib.sh SB_MISSIZED_NODE; hack/cluster.sh down && up)"
    r = httpx.get(f"{slurm_env.url}{API}/node/{wrong}", headers=slurm_env.headers(), timeout=20)
    assert r.status_code == 200 and r.json().get("nodes"), (
        f"Slurm has no node {wrong}: the running cluster was started by a hack/cluster.sh without it; "
        "run hack/cluster.sh down && hack/cluster.sh up"
    )
    conds = wait_for(
        lambda: all(fit_condition(core, n) for n in [*right, wrong]) and {n: fit_condition(core, n) for n in right},
        60,
        f"the {names.NODE_COND_SLURM_RESOURCES_FIT} condition on {right} and {wrong}",
    )
    for node, cond in conds.items():
        assert (cond.status, cond.reason) == ("True", names.REASON_SLURM_SIZE_FITS), (node, cond.message)
    cond = wait_for(lambda: fit_condition(core, wrong), 60, f"{wrong}'s {names.NODE_COND_SLURM_RESOURCES_FIT}")
    assert (cond.status, cond.reason) == ("False", names.REASON_SLURM_SIZE_EXCEEDS), cond
    # both sides' numbers: Slurm's line (4 CPUs, 8192 MiB), the kwok node's half of it
    assert f"Slurm may allocate 4 CPUs and 8192 MiB on node {wrong}" in cond.message, cond.message
    assert "the kubelet's allocatable is 2 CPUs and 4096 MiB" in cond.message, cond.message
    assert "Slurm's size is 2 CPUs and 4096 MiB too large" in cond.message, cond.message
    described = run(["kubectl", "--kubeconfig", cluster["KUBECONFIG"], "describe", "node", wrong]).stdout
    assert names.NODE_COND_SLURM_RESOURCES_FIT in described and names.REASON_SLURM_SIZE_EXCEEDS in described


def test_the_operator_checked_slurms_side_of_its_node_sharing(cluster: dict[str, str]) -> None:
    """The local process bridge's /stats (the operator's health port): the default timeShared
    against the local slurm.conf's MCSPlugin=mcs/label, MCSParameters=ondemand,ondemandselect."""
    port = Path(cluster["SB_STATE_DIR"], "bridge-operator.port").read_text().strip()

    def checks() -> Obj:
        stats = httpx.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()
        return {c["check"]: c for c in stats.get("slurmSetup") or []}

    found = wait_for(lambda: checks().get("mcs_plugin"), 30, "the operator's check of MCSPlugin")
    assert found["state"] == "ok" and "MCSPlugin=mcs/label" in found["message"], found


# ---- accounting and fair share -----------------------------------------------------------------------


def raw_usage(slurm: SlurmEnv) -> dict[tuple[str, str], int]:
    out = slurm.slurm("sshare", "-a", "-P", "-n", "-o", "Account,User,RawUsage").stdout
    usage = {}
    for line in out.splitlines():
        account, user, raw = (f.strip() for f in line.split("|"))
        if user:
            usage[(account, user)] = int(raw or 0)
    return usage


def test_sacct_lists_native_jobs_and_pods_side_by_side_and_fair_share_counts_both(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str], policy: Callable[[Obj], str],
) -> None:  # fmt: skip
    """The pods of a namespace run as its tenant (alice, TenantPolicy); bob's native job beside them.
    RawUsage grows once per PriorityCalcPeriod (1 minute, hack/slurm-policy.conf): this waits up to 3."""
    name = policy(tenant_spec(ALICE, ns))
    wait_selected(custom, name, ns)
    before = raw_usage(slurm_env)
    node = hybrid[1]
    core.create_namespaced_pod(ns, pod("acct-pod", "coResident", node=node, cpu="2"))
    wait_for(lambda: bound(core, ns, "acct-pod", node), 60, "alice's pod running")
    pod_job = the_job_of(custom, ns, "acct-pod")
    alice_native = native.submit(ALICE, "-p", slurm_env.hybrid_partition, "-w", node, "-c", "1", "--mem=100",
                                 name="acct-native")  # fmt: skip
    bob_native = native.submit(BOB, "-p", slurm_env.hybrid_partition, "-w", node, "-c", "1", "--mem=100",
                               name="acct-bob")  # fmt: skip
    wait_for(lambda: running_on(slurm_env, alice_native, node) and running_on(slurm_env, bob_native, node), 30,
             "both native jobs running beside the pod")  # fmt: skip
    fields = "JobID,JobName,User,Account,Partition,NodeList,AllocCPUS,State"

    def listed() -> dict[str, list[str]]:
        out = slurm_env.sacct("-A", ALICE.accounts[0], "-X", "-n", "-P", "-o", fields, "-S", "now-30minutes")
        rows = {ln.split("|")[0]: ln.split("|") for ln in out.splitlines() if ln}
        return rows if {str(pod_job), str(alice_native)} <= set(rows) else {}

    rows = wait_for(listed, 60, f"sacct -A {ALICE.accounts[0]} to list the pod's and the native job")
    assert rows[str(pod_job)][1:7] == [f"{ns}/acct-pod", ALICE.user, ALICE.accounts[0], "hybrid", node, "2"], rows
    assert rows[str(alice_native)][1:7] == ["acct-native", ALICE.user, ALICE.accounts[0], "hybrid", node, "1"], rows
    assert str(bob_native) not in rows, "another account's job is not listed"

    def grown() -> dict[tuple[str, str], int] | None:
        now = raw_usage(slurm_env)
        keys = [(ALICE.accounts[0], ALICE.user), (BOB.accounts[0], BOB.user)]
        return now if all(now.get(k, 0) > before.get(k, 0) for k in keys) else None

    after = wait_for(grown, 180, "sshare's RawUsage of alice (pod and native job) and bob (native job) to grow", 5)
    alice = after[(ALICE.accounts[0], ALICE.user)] - before.get((ALICE.accounts[0], ALICE.user), 0)
    bob = after[(BOB.accounts[0], BOB.user)] - before.get((BOB.accounts[0], BOB.user), 0)
    print(f"RawUsage grew: team-a|alice +{alice} (pod 2 CPUs + native 1 CPU), team-b|bob +{bob} (native 1 CPU)")


# ---- backfill ----------------------------------------------------------------------------------------


def top_priority(slurm: SlurmEnv, job_id: int) -> None:
    """The wide job first in Slurm's queue, whatever fair share says (root may set it)."""
    slurm.scontrol("update", f"jobid={job_id}", "priority=4000000000")


def test_backfill_a_short_pod_starts_ahead_of_a_wide_native_job_a_long_one_does_not(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str], policy: Callable[[Obj], str],
) -> None:  # fmt: skip
    """The pods are a tenant's (alice, TenantPolicy), so their jobs are queued (job/submit) and
    Slurm's priority and backfill order them. An immediate allocation (the bridge's default path
    for other pods, immediateAllocation: true) starts a pod that fits now ahead of any waiting job:
    docs/colocation.md, "Accounting, fair share and backfill". The wide job is bob's, so that it
    waits for nodes, not at alice's QOS limit."""
    name = policy(tenant_spec(ALICE, ns))
    wait_selected(custom, name, ns)
    part = ["-p", slurm_env.hybrid_partition, "--mem=100"]
    busy = native.submit(ALICE, *part, "-w", hybrid[0], "-c", "2", "-t", "3", name="bf-running")
    wait_for(lambda: running_on(slurm_env, busy, hybrid[0]), 30, "a native job holding half of a hybrid node")
    wide = native.submit(BOB, *part, "-N", str(len(hybrid)), "--exclusive", "-t", "10", name="bf-wide")
    top_priority(slurm_env, wide)
    wait_for(lambda: pending_for(slurm_env, wide, "Resources"), 30, "the wide native job to wait for whole nodes")
    wait_for(
        lambda: job(slurm_env, wide)["start_time"]["number"] > time.time() + 60,
        30,
        "Slurm to expect the wide job once the running one's time limit ends (minutes away)",
    )
    core.create_namespaced_pod(ns, pod("short", "coResident", annotations={names.ANN_TIMELIMIT: "1"}))
    core.create_namespaced_pod(ns, pod("long", "coResident"))  # no time limit: the partition's INFINITE
    wait_for(lambda: bound(core, ns, "short"), 30, "the 1-minute pod to start ahead of the wide job (backfill)")
    long_job = the_job_of(custom, ns, "long")
    wait_for(
        lambda: told_why(core, ns, "long", "Priority"), 60, "the pod without a time limit told it waits (Priority)"
    )
    holds_for(lambda: unbound(core, ns, "long") and state(slurm_env, wide) == "PENDING", HOLD,
              "the long pod waiting behind the wide job")  # fmt: skip
    assert waits_for(slurm_env, long_job, "Priority")
    flags = slurm_env.sacct("-X", "-n", "-P", "-j", str(the_job_of(custom, ns, "short")), "-o", "Flags")
    assert "SchedBackfill" in flags, f"the short pod's job was started by backfill: {flags!r}"


def test_backfill_a_short_native_job_starts_ahead_of_a_wide_pod_a_long_one_does_not(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, native: Native,
    hybrid: list[str],
) -> None:  # fmt: skip
    part = ["-p", slurm_env.hybrid_partition, "--mem=100"]
    busy = native.submit(ALICE, *part, "-w", hybrid[0], "-c", "2", "-t", "3", name="bf-running")
    wait_for(lambda: running_on(slurm_env, busy, hybrid[0]), 30, "a native job holding half of a hybrid node")
    wide_pod = pod("wide", "exclusive", annotations={names.ANN_MIN_NODES: str(len(hybrid)), names.ANN_TIMELIMIT: "10"})
    core.create_namespaced_pod(ns, wide_pod)
    wide = the_job_of(custom, ns, "wide")
    top_priority(slurm_env, wide)
    wait_for(lambda: pending_for(slurm_env, wide, "Resources"), 30, "the wide pod's job to wait for whole nodes")
    wait_for(lambda: told_why(core, ns, "wide", "Resources"), 60, "the wide pod told why it waits (Resources)")
    short = native.submit(ALICE, *part, "-c", "1", "-t", "1", name="bf-short")
    long = native.submit(ALICE, *part, "-c", "1", name="bf-long")  # the partition's INFINITE
    wait_for(lambda: state(slurm_env, short) == "RUNNING", 30, "the 1-minute native job to start ahead of the pod")
    holds_for(lambda: waits_for(slurm_env, long, "Priority") and unbound(core, ns, "wide"), HOLD,
              "the long native job waiting behind the wide pod")  # fmt: skip
