"""Kubernetes 1.37 CompositePodGroups on the real cluster: a gang CompositePodGroup whose children
are gang PodGroups is one heterogeneous Slurm job (docs/workloads.md, "CompositePodGroups").

Each test builds the native hierarchy a workload controller would: a Workload
(``scheduling.k8s.io/v1beta1``) with a composite template, the CompositePodGroup (``v1alpha3``,
``gang.minGroupCount`` 2), two child PodGroups (``v1beta1``, ``parentCompositePodGroupName``):
``<name>-large`` (``minCount`` 2, pods of 2 CPUs) and ``<name>-small`` (``minCount`` 1, a pod of
1 CPU), and bare pods naming them in ``spec.schedulingGroup``. Components go in PodGroup name
order, so ``large`` is component 0 (the leader) and ``small`` component 1.

Assumes: Kubernetes 1.37 with the feature gates CompositePodGroup, GenericWorkload and
TopologyAwareWorkloadScheduling and ``--runtime-config`` ``scheduling.k8s.io/v1alpha3`` and
``v1beta1`` (a cluster without them fails here, naming what is missing; nothing is skipped);
a bridge that reads the Workload API at ``v1beta1``; at least 3 idle Slurm nodes in the
partition (4 locally); Slurm's backfill interval well under BACKFILL_WAIT (a heterogeneous job
starts only in a backfill pass: ``SchedulerParameters=bf_interval=2`` locally).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import hostlist
import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.test_tenancy import wait_selected
from tests.e2e.test_tenant_rights import alice
from tests.e2e.util import API, bridge_jobs_in, get_phj, has_gate, make_pod, read_pod
from tests.harness import CLUSTER_SH, SlurmEnv, holds_for, run, wait_for

# CompositePodGroup is Kubernetes 1.37's: on an older cluster of the matrix these are deselected.
pytestmark = [pytest.mark.usefixtures("bridge", "composite_api"), pytest.mark.kubernetes(37)]

P = names.SLURMJOB_PREFIX
G = "scheduling.k8s.io"
PG_V, CPG_V = "v1beta1", "v1alpha3"
# A heterogeneous job waits for a backfill pass (bf_interval: 30 s by default), then the pods bind.
BACKFILL_WAIT = 120.0
DONE = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def composite_api(custom: k8s.CustomObjectsApi) -> None:
    """The APIs this module needs, or a failure that names the missing one and how to serve it."""
    needed = ((CPG_V, "compositepodgroups", "CompositePodGroup"), (PG_V, "podgroups", "GenericWorkload"),
              (PG_V, "workloads", "GenericWorkload"))  # fmt: skip
    for version, plural, gate in needed:
        try:
            custom.list_cluster_custom_object(G, version, plural, limit=1)
        except ApiException as e:
            if e.status == 404:
                pytest.fail(
                    f"the cluster does not serve {G}/{version} {plural}: CompositePodGroups need Kubernetes 1.37 "
                    f"with the feature gates CompositePodGroup, GenericWorkload and TopologyAwareWorkloadScheduling "
                    f"(kube-apiserver, kube-controller-manager, kube-scheduler) and --runtime-config="
                    f"{G}/{CPG_V}=true,{G}/{PG_V}=true (missing: feature gate {gate} or that runtime-config)"
                )
            raise


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """The Workload API objects the `ns` fixture (tests/e2e/conftest.py) deletes after a test."""
    return ((G, CPG_V, "compositepodgroups"), (G, PG_V, "podgroups"), (G, PG_V, "workloads"))


# ---- the hierarchy -------------------------------------------------------------------------------
def hierarchy(
    custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, ns: str, name: str, *, large: int = 2,
    annotations: dict[str, dict[str, str]] | None = None,
) -> list[str]:  # fmt: skip
    """Create the Workload, the CompositePodGroup, its two PodGroups and their pods; the pods' names."""
    notes = annotations or {}
    # The large gang's minCount is its size: with a smaller one the job may be submitted (a few
    # milliseconds after the minCount-th pod joins) before the last pods are created.
    leaf = {"large": large, "small": 1}
    workload = {
        "apiVersion": f"{G}/{PG_V}", "kind": "Workload",
        "metadata": {"name": name, "annotations": notes.get("workload", {})},
        "spec": {"compositePodGroupTemplates": [{
            "name": "all", "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "podGroupTemplates": [{"name": t, "schedulingPolicy": {"gang": {"minCount": n}}} for t, n in leaf.items()],
        }]},
    }  # fmt: skip
    custom.create_namespaced_custom_object(G, PG_V, ns, "workloads", workload)
    composite = {
        "apiVersion": f"{G}/{CPG_V}", "kind": "CompositePodGroup",
        "metadata": {"name": name, "annotations": notes.get("composite", {})},
        "spec": {"workloadRef": {"workloadName": name, "templateName": "all"},
                 "schedulingPolicy": {"gang": {"minGroupCount": 2}}},
    }  # fmt: skip
    custom.create_namespaced_custom_object(G, CPG_V, ns, "compositepodgroups", composite)
    pods = []
    for part, count in (("large", large), ("small", 1)):
        podgroup = {
            "apiVersion": f"{G}/{PG_V}", "kind": "PodGroup",
            "metadata": {"name": f"{name}-{part}", "annotations": notes.get(part, {})},
            "spec": {"parentCompositePodGroupName": name,
                     "workloadRef": {"workloadName": name, "templateName": part},
                     "schedulingPolicy": {"gang": {"minCount": leaf[part]}}},
        }  # fmt: skip
        custom.create_namespaced_custom_object(G, PG_V, ns, "podgroups", podgroup)
        for i in range(count):
            pod = make_pod(f"{name}-{part}-{i}", cpu="2" if part == "large" else "1")
            pod["spec"]["schedulingGroup"] = {"podGroupName": f"{name}-{part}"}
            core.create_namespaced_pod(ns, pod)
            pods.append(pod["metadata"]["name"])
    return pods


def het_records(slurm: SlurmEnv, leader: int) -> list[Obj]:
    """Every component of a heterogeneous job (the leader's record holds them), by offset."""
    r = httpx.get(f"{slurm.url}{API}/job/{leader}", headers=slurm.headers(), timeout=20)
    if r.status_code != 200:
        return []
    jobs: list[Obj] = r.json().get("jobs") or []
    return sorted(jobs, key=lambda j: j["het_job_offset"]["number"])


def gated_while_pending(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str,
                        pods: list[str]) -> Obj:  # fmt: skip
    """Wait for the composite's PlaceholderJob to run, checking at every look that while it has not
    been allocated no pod of any component was released or bound: all or nothing."""
    early: list[str] = []

    def running() -> Obj | None:
        # The pods first: the allocation is written before any pod is released, so a
        # PlaceholderJob still Pending when read after them means they were read unallocated.
        seen = {n: read_pod(core, ns, n) for n in pods}
        phj = get_phj(custom, ns, f"cpg-{name}")
        phase = ((phj or {}).get("status") or {}).get("phase")
        if phase in (None, "Pending"):
            early.extend(f"{n} released while the PlaceholderJob was {phase}" for n, pod in seen.items()
                         if pod is not None and (not has_gate(pod) or pod.spec.node_name))  # fmt: skip
        return phj if phase == "Running" else None

    phj: Obj = wait_for(running, BACKFILL_WAIT, f"PlaceholderJob {ns}/cpg-{name} Running", interval=0.5)
    assert not early, early
    return phj


def running_composite(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, name: str) -> tuple[Obj, list[str]]:
    pods = hierarchy(custom, core, ns, name)
    return gated_while_pending(core, custom, ns, name, pods), pods


def ended(core: k8s.CoreV1Api, ns: str, pods: list[str]) -> bool:
    def gone(name: str) -> bool:
        p = read_pod(core, ns, name)
        return p is None or bool(p.metadata.deletion_timestamp) or p.status.phase in ("Failed", "Succeeded")

    return all(gone(n) for n in pods)


def all_done(slurm: SlurmEnv, leader: int) -> bool:
    records = het_records(slurm, leader)
    return all(set(j["job_state"]) & DONE for j in records)


# ---- the tests -----------------------------------------------------------------------------------
def test_a_composite_is_one_heterogeneous_job_whose_pods_start_together(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    notes = {"workload": {P + "timelimit": "20"}, "composite": {P + "timelimit": "15"},
             "large": {P + "timelimit": "30"}}  # fmt: skip
    pods = hierarchy(custom, core, ns, "train", annotations=notes)
    phj = gated_while_pending(core, custom, ns, "train", pods)
    status, spec = phj["status"], phj["spec"]
    leader = status["jobId"]
    assert status["hetJobId"] == leader
    assert spec["group"]["kind"] == "CompositePodGroup" and spec["group"]["name"] == "train"
    assert [(c["podGroup"], c["minMember"]) for c in spec["components"]] == [("train-large", 2), ("train-small", 1)]
    components = {c["offset"]: c for c in status["components"]}
    assert components[0]["jobId"] == leader and components[1]["jobId"] != leader
    assert [components[o]["podGroup"] for o in (0, 1)] == ["train-large", "train-small"]

    # Slurm: one heterogeneous job, a component per PodGroup, each on its own pods' nodes.
    records = het_records(slurm_env, leader)
    assert [(j["het_job_id"]["number"], j["het_job_offset"]["number"]) for j in records] == [(leader, 0), (leader, 1)]
    assert [j["job_id"] for j in records] == [components[0]["jobId"], components[1]["jobId"]]
    assert all(j["job_state"] == ["RUNNING"] for j in records), [j["job_state"] for j in records]
    assert [j["node_count"]["number"] for j in records] == [2, 1]
    assert [j["cpus_per_task"]["number"] for j in records] == [2, 1], "each component sized for its own pods"
    # Options: the child PodGroup's over the CompositePodGroup's over the Workload's.
    assert [j["time_limit"]["number"] for j in records] == [30, 15]
    assert sorted(j["job_id"] for j in bridge_jobs_in(slurm_env, ns)) == sorted(j["job_id"] for j in records), (
        "every component carries the bridge's admin comment; no other job was made"
    )

    assignments = {a["pod"]: (a["node"], a["offset"]) for a in status["assignments"]}
    assert sorted(assignments) == sorted(pods)
    for offset, record in enumerate(records):
        mine = [p for p in pods if assignments[p][1] == offset]
        assert len(mine) == (2 if offset == 0 else 1)
        assert {assignments[p][0] for p in mine} == set(hostlist.expand_hostlist(record["nodes"])), (
            f"component {offset}'s pods run on its nodes"
        )
        for name in mine:
            pod = read_pod(core, ns, name)  # Running: every member is bound
            assert pod is not None and pod.spec.node_name == assignments[name][0]
            assert pod.metadata.labels[names.LABEL_SLURM_JOB_ID] == str(record["job_id"])
            assert pod.metadata.annotations[names.ANN_SLURM_HET_JOB_ID] == str(leader)
            assert pod.metadata.annotations[names.ANN_SLURM_HET_OFFSET] == str(offset)

    def scheduled() -> Obj | None:
        cpg = custom.get_namespaced_custom_object(G, CPG_V, ns, "compositepodgroups", "train")
        assert cpg["metadata"]["uid"] == spec["group"]["uid"]
        conditions = (cpg.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == names.COMPOSITE_COND_SCHEDULED and c["status"] == "True"),
                    None)  # fmt: skip

    condition = wait_for(scheduled, 30, f"{names.COMPOSITE_COND_SCHEDULED}=True on the CompositePodGroup")
    assert str(leader) in condition["message"]


def test_a_composite_slurm_cannot_place_starts_no_pod_of_any_podgroup(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """The large PodGroup needs more nodes than the partition has; the small one alone would fit,
    and still none of its pods starts."""
    size = len(slurm_env.nodes) + 1
    pods = hierarchy(custom, core, ns, "big", large=size)
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "cpg-big")) and (p.get("status") or {}).get("jobId")
        and p["status"].get("slurmState") == "PENDING" and p,
        90,
        "the composite's heterogeneous job pending in Slurm",
    )  # fmt: skip
    records = het_records(slurm_env, phj["status"]["jobId"])
    assert len(records) == 2 and all(j["job_state"] == ["PENDING"] for j in records), records
    assert [j["node_count"]["number"] for j in records] == [size, 1]
    holds_for(
        lambda: all((p := read_pod(core, ns, n)) is not None and has_gate(p) and not p.spec.node_name for n in pods),
        10,
        "no pod of the composite released while Slurm cannot place all of it",
        interval=0.5,
    )  # fmt: skip


@pytest.fixture
def root_only_partition(slurm_env: SlurmEnv) -> Iterator[str]:
    """A RootOnly partition over the kwok nodes (DOWN: nothing would start there), deleted after."""
    name = f"rootonly-{secrets.token_hex(3)}"
    slurm_env.scontrol("create", f"PartitionName={name}", f"Nodes={','.join(slurm_env.nodes)}", "RootOnly=YES",
                       "State=DOWN")  # fmt: skip
    yield name
    slurm_env.slurm("scancel", "--partition", name, check=False)
    wait_for(
        lambda: slurm_env.slurm("scontrol", "delete", f"PartitionName={name}", check=False).returncode == 0,
        60,
        f"partition {name} deleted",
    )


def test_a_tenants_composite_is_refused_in_a_root_only_partition(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv,
    policy: Callable[[Obj], str], root_only_partition: str,
) -> None:  # fmt: skip
    """A heterogeneous job is queued with the bridge's token, alice in its user_id, which Slurm lets
    into a RootOnly partition that alice could not submit to: the bridge refuses it itself, nothing
    is submitted, and the PlaceholderJob fails naming the partition (docs/tenancy.md)."""
    wait_selected(custom, policy(alice(ns)), ns)
    where = {P + "partition": root_only_partition}
    pods = hierarchy(custom, core, ns, "locked", annotations={"workload": where, "composite": where})
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, "cpg-locked")) and (p.get("status") or {}).get("phase") == "Failed" and p,
        90,
        "the tenant's composite refused",
    )  # fmt: skip
    status = phj["status"]
    assert status["reason"] == names.REASON_PARTITION_REFUSES_TENANT, status
    assert f"partition {root_only_partition} is RootOnly" in status["message"] and "heterogeneous" in status["message"]
    assert not status.get("jobId"), "nothing was submitted"
    queued = slurm_env.slurm("squeue", "--noheader", "--partition", root_only_partition, "-o", "%i").stdout
    assert queued.strip() == "", queued
    wait_for(lambda: ended(core, ns, pods), 60, "the composite's pods ended")


def test_scancel_of_one_component_ends_every_pod_and_the_whole_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    phj, pods = running_composite(core, custom, ns, "part")
    leader = phj["status"]["jobId"]
    small = next(c["jobId"] for c in phj["status"]["components"] if c["offset"] == 1)
    run(["bash", str(CLUSTER_SH), "slurm", "scancel", str(small)])
    ended_phj = wait_for(
        lambda: (p := get_phj(custom, ns, "cpg-part")) and p["status"].get("phase") in names.TERMINAL_PHASES and p,
        30,
        "the composite's PlaceholderJob ended",
    )  # fmt: skip
    assert ended_phj["status"]["reason"] == "SlurmJobCancelled"
    # Component 1's end, or component 0's too if Slurm's scancel of one component took the leader along.
    assert f"of heterogeneous Slurm job {leader}" in ended_phj["status"]["message"], ended_phj["status"]
    wait_for(lambda: ended(core, ns, pods), 30, "every pod of both PodGroups ended")
    wait_for(lambda: all_done(slurm_env, leader), 30, f"every component of Slurm job {leader} ended")


def test_every_pod_ending_cancels_the_heterogeneous_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    phj, pods = running_composite(core, custom, ns, "bye")
    leader = phj["status"]["jobId"]
    for name in pods:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    done = wait_for(
        lambda: (p := get_phj(custom, ns, "cpg-bye")) and p["status"].get("phase") in names.TERMINAL_PHASES and p,
        60,
        "the composite's PlaceholderJob ended with its pods",
    )  # fmt: skip
    assert (done["status"]["phase"], done["status"]["reason"]) == ("Cancelled", "PodsDeleted")
    wait_for(lambda: all_done(slurm_env, leader), 30, f"every component of Slurm job {leader} cancelled")
    assert all("CANCELLED" in j["job_state"] for j in het_records(slurm_env, leader))


def test_deleting_the_composite_cancels_the_heterogeneous_job(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    phj, pods = running_composite(core, custom, ns, "gone")
    leader = phj["status"]["jobId"]
    custom.delete_namespaced_custom_object(G, CPG_V, ns, "compositepodgroups", "gone")
    wait_for(lambda: get_phj(custom, ns, "cpg-gone") is None, 90, "the PlaceholderJob garbage-collected")
    assert ended(core, ns, pods), "the finalizer ends the pods before it releases the job"
    wait_for(lambda: all_done(slurm_env, leader), 30, f"every component of Slurm job {leader} cancelled")
