"""A tenant owns its bridge jobs in Slurm and may ``scontrol update`` them; what Slurm holds for a
bridge job must stay what its pods need (docs/security.md, "A job's owner in Slurm"), on the real
slurmctld, the hybrid nodes' real slurmd and the real API server.

(a) alice shrinks her running gang's job off the node one of its pods runs on: the bridge sees it
within a bounded time (measured and printed), drains that node in Slurm naming the pod, ends the
pods, and lifts the drain once they are gone. (b) alice shrinks her waiting job below what its pod
was sized for: the pod is never released onto it, and the PlaceholderJob says why. (c) alice shrinks
one component of her CompositePodGroup's heterogeneous job off a node one of its pods runs on: that
node is drained naming the pod and the component's job, the PlaceholderJob says which component,
and every pod of every component ends with the whole job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e import util
from tests.e2e.test_composite import BACKFILL_WAIT, CPG_V, PG_V, G, all_done, composite_api, het_records
from tests.e2e.test_tenancy import wait_selected
from tests.e2e.util import get_phj, make_pod, read_pod, slurm_job
from tests.harness import TENANTS, SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
__all__ = ["composite_api"]  # a fixture, used by name
Obj = dict[str, Any]
A = TENANTS["a"]
P = names.SLURMJOB_PREFIX
PODGROUP = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
# Within one state poll (pollPeriodSeconds, 1 s locally) after the node list that shows the move
# (also once a period): this much leaves room for a busy machine.
DETECTION_BOUND_SECONDS = 5.0


def alice(ns: str) -> Obj:
    return {"namespaces": [ns], "user": {"name": A.user}, "group": {"id": A.gid},
            "accounts": {"default": A.accounts[0]}}  # fmt: skip


def co_resident(name: str, partition: str, cpu: str, memory: str, labels: dict[str, str] | None = None) -> Obj:
    """A coResident pod: its limits are its Slurm job's size."""
    annotations = {names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT, names.ANN_PARTITION: partition}
    pod = make_pod(name, cpu=cpu, memory=memory, annotations=annotations, labels=labels)
    for c in pod["spec"]["containers"]:
        c["resources"]["limits"] = {"cpu": cpu, "memory": memory}
    return pod


def node_line(slurm: SlurmEnv, node: str) -> str:
    return slurm.scontrol("show", "node", node, "-o")


def drained_for(slurm: SlurmEnv, node: str, ns: str, pod: str, job_id: int) -> bool:
    line = node_line(slurm, node)
    state = re.search(r"\bState=(\S+)", line)
    return bool(state and "DRAIN" in state.group(1) and f"pod {ns}/{pod} of Slurm job {job_id} " in line)


def shrink_off_one_node(slurm: SlurmEnv, ns: str, job_id: int, on: dict[str, str]) -> tuple[str, str, str]:
    """alice moves Slurm job ``job_id`` (its pods ``on`` two nodes) off one of them with her own
    ``scontrol update``; the bridge must drain that node naming its pod within the bound. Returns the
    node kept, the node lost and the pod left on it."""
    kept, lose = sorted(on)
    gone = on[lose]
    moved = slurm.native(A.user, "scontrol", "update", f"JobId={job_id}", f"NodeList={kept}")
    began = time.monotonic()
    assert moved.returncode == 0, f"alice's scontrol update failed: {moved.stdout}{moved.stderr}"
    wait_for(lambda: drained_for(slurm, lose, ns, gone, job_id), 30, f"{lose} drained naming {gone}", 0.05)
    detected = time.monotonic() - began
    print(f"\nthe owner's shrink of Slurm job {job_id} off {lose}: node drained naming the pod after {detected:.2f}s")
    assert detected <= DETECTION_BOUND_SECONDS, f"seen after {detected:.2f}s"
    return kept, lose, gone


def phj_status(custom: k8s.CustomObjectsApi, ns: str, name: str) -> Obj:
    return (get_phj(custom, ns, name) or {}).get("status") or {}


@pytest.fixture
def undrain(slurm_env: SlurmEnv) -> Iterator[list[str]]:
    """Nodes a test may leave drained by the bridge: resumed afterwards, whatever happened."""
    nodes: list[str] = []
    yield nodes
    for node in nodes:
        if "DRAIN" in node_line(slurm_env, node):
            slurm_env.slurm("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


@pytest.fixture
def job_shrink_allowed(slurm_env: SlurmEnv) -> Iterator[None]:
    """slurmctld without ``SchedulerParameters=disable_job_shrink`` (hack/slurm-policy.conf sets it,
    as docs/security.md advises): a site that lacks it, where an owner may shrink a running job.
    The setting is restored afterwards."""
    conf = slurm_env.root / "etc" / "slurm" / "slurm.conf"
    original = conf.read_text()
    lines = [
        ln.replace(",disable_job_shrink", "") if ln.startswith("SchedulerParameters=") else ln
        for ln in original.splitlines(keepends=True)
    ]

    def shrink_disabled() -> bool:
        params = [
            ln for ln in slurm_env.scontrol("show", "config").splitlines() if ln.startswith("SchedulerParameters")
        ]
        return any("disable_job_shrink" in ln for ln in params)

    conf.write_text("".join(lines))
    try:
        slurm_env.scontrol("reconfigure")
        wait_for(lambda: not shrink_disabled(), 30, "slurmctld to allow job shrinking")
        yield
    finally:
        conf.write_text(original)
        slurm_env.scontrol("reconfigure")
        wait_for(shrink_disabled, 30, "slurmctld to refuse job shrinking again")


@pytest.fixture
def waiting_partition(slurm_env: SlurmEnv) -> Iterator[str]:
    """A DOWN partition over the hybrid nodes, where a job waits until the test brings it UP."""
    yield from util.down_partition(slurm_env, "owner", slurm_env.hybrid_nodes)


def test_a_tenants_shrink_of_its_running_job_drains_the_pods_node_and_ends_the_pods(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    policy: Callable[[Obj], str], undrain: list[str], job_shrink_allowed: None,
) -> None:  # fmt: skip
    assert len(slurm_env.hybrid_nodes) >= 2, f"two hybrid nodes are needed, the cluster has {slurm_env.hybrid_nodes}"
    wait_selected(custom, policy(alice(ns)), ns)
    # A gang's job is configured by its workload's annotations (here the PodGroup's).
    options = {names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT, names.ANN_PARTITION: slurm_env.hybrid_partition}
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "g", "annotations": options}, "spec": {"minMember": 2}}  # fmt: skip
    custom.create_namespaced_custom_object(*PODGROUP[:2], ns, PODGROUP[2], group)
    members = ["g-0", "g-1"]
    for name in members:
        labels = {names.LABEL_POD_GROUP: "g"}
        core.create_namespaced_pod(ns, co_resident(name, slurm_env.hybrid_partition, "1", "64Mi", labels))
    status = wait_for(
        lambda: (s := phj_status(custom, ns, "podgroup-g")).get("phase") == names.PHASE_RUNNING and s,
        90,
        "gang running",
    )
    job_id = int(status["jobId"])
    assert (slurm_job(slurm_env, job_id) or {}).get("user_name") == A.user, "the job is alice's in Slurm"
    on = {read_pod(core, ns, m).spec.node_name: m for m in members}  # type: ignore[union-attr]
    assert set(on) == set(slurm_env.hybrid_nodes), on
    undrain += list(on)

    # Slurm 26.05 refuses NumNodes on the bridge's (external) running job, but takes a NodeList.
    kept, lose, gone = shrink_off_one_node(slurm_env, ns, job_id, on)

    ended = wait_for(
        lambda: (s := phj_status(custom, ns, "podgroup-g")).get("phase") == names.PHASE_FAILED and s, 30, "Failed"
    )
    assert ended["reason"] == names.REASON_ALLOCATION_CHANGED, ended
    assert f"pod {gone} is on node {lose}, which Slurm no longer holds for it" in ended["message"], ended["message"]
    assert "DRAIN" not in node_line(slurm_env, kept), "the node the job still holds is not drained"
    wait_for(lambda: all(read_pod(core, ns, m) is None for m in members), 90, "the gang's pods ended and gone")
    wait_for(lambda: "DRAIN" not in node_line(slurm_env, lose), 120, f"the handoff to lift its drain of {lose}")
    job = wait_for(lambda: (j := slurm_job(slurm_env, job_id)) and j["job_state"][0] != "RUNNING" and j, 60, "cancel")
    assert job["job_state"][0] in ("CANCELLED", "COMPLETED"), job


def test_a_tenants_shrink_of_its_pending_job_never_releases_the_pod_onto_less(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    policy: Callable[[Obj], str], waiting_partition: str,
) -> None:  # fmt: skip
    wait_selected(custom, policy(alice(ns)), ns)
    core.create_namespaced_pod(ns, co_resident("w", waiting_partition, "2", "2Gi"))
    status = wait_for(lambda: (s := phj_status(custom, ns, "w")).get("jobId") and s, 60, "w submitted")
    job_id = int(status["jobId"])
    shrink = ("NumCPUs=1", "CPUsPerTask=1", "MinCPUsNode=1", "MinMemoryNode=100")
    done = slurm_env.native(A.user, "scontrol", "update", f"JobId={job_id}", *shrink)
    assert done.returncode == 0, f"alice's scontrol update failed: {done.stdout}{done.stderr}"
    slurm_env.scontrol("update", f"PartitionName={waiting_partition}", "State=UP")
    ended = wait_for(
        lambda: (s := phj_status(custom, ns, "w")).get("phase") == names.PHASE_FAILED and s, 60, "w Failed"
    )
    assert ended["reason"] == names.REASON_ALLOCATION_SHORT, ended
    said = ended["message"]
    assert "100 MiB of memory per node where the pods need 2048 MiB" in said, said  # and 1 CPU, while it waits
    pod = read_pod(core, ns, "w")
    annotations = (pod.metadata.annotations or {}) if pod is not None else {}
    assert names.ANN_SLURM_NODE not in annotations and (pod is None or not pod.spec.node_name), "never released"
    wait_for(lambda: (j := slurm_job(slurm_env, job_id)) is None or j["job_state"][0] != "PENDING", 30, "cancelled")


def composite(custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, ns: str, name: str,
              parts: dict[str, tuple[int, str]]) -> list[str]:  # fmt: skip
    """A Workload, its CompositePodGroup (``gang.minGroupCount`` the number of PodGroups) and for
    each part a gang PodGroup ``<name>-<part>`` of ``parts[part][0]`` coResident pods (1 CPU, 64Mi)
    in partition ``parts[part][1]``, as the PodGroup's annotations say (components go in PodGroup
    name order); the pods' names."""
    gang = {"gang": {"minGroupCount": len(parts)}}
    templates = [{"name": t, "schedulingPolicy": {"gang": {"minCount": n}}} for t, (n, _) in parts.items()]
    workload = {"apiVersion": f"{G}/{PG_V}", "kind": "Workload", "metadata": {"name": name},
                "spec": {"compositePodGroupTemplates": [{"name": "all", "schedulingPolicy": gang,
                                                         "podGroupTemplates": templates}]}}  # fmt: skip
    custom.create_namespaced_custom_object(G, PG_V, ns, "workloads", workload)
    ref = {"workloadName": name, "templateName": "all"}
    group = {"apiVersion": f"{G}/{CPG_V}", "kind": "CompositePodGroup", "metadata": {"name": name},
             "spec": {"workloadRef": ref, "schedulingPolicy": gang}}  # fmt: skip
    custom.create_namespaced_custom_object(G, CPG_V, ns, "compositepodgroups", group)
    pods = []
    for part, (count, partition) in parts.items():
        options = {names.ANN_NODE_SHARING: names.NODE_SHARING_CO_RESIDENT, names.ANN_PARTITION: partition}
        spec = {"parentCompositePodGroupName": name, "workloadRef": {"workloadName": name, "templateName": part},
                "schedulingPolicy": {"gang": {"minCount": count}}}  # fmt: skip
        meta = {"name": f"{name}-{part}", "annotations": options}
        custom.create_namespaced_custom_object(
            G, PG_V, ns, "podgroups", {"apiVersion": f"{G}/{PG_V}", "kind": "PodGroup", "metadata": meta, "spec": spec}
        )
        for i in range(count):
            pod = make_pod(f"{name}-{part}-{i}", cpu="1", memory="64Mi")
            for c in pod["spec"]["containers"]:
                c["resources"]["limits"] = {"cpu": "1", "memory": "64Mi"}
            pod["spec"]["schedulingGroup"] = {"podGroupName": f"{name}-{part}"}
            core.create_namespaced_pod(ns, pod)
            pods.append(pod["metadata"]["name"])
    return pods


@pytest.mark.kubernetes(37)
@pytest.mark.usefixtures("composite_api")
@pytest.mark.parametrize(
    "workload_kinds",
    [((G, CPG_V, "compositepodgroups"), (G, PG_V, "podgroups"), (G, PG_V, "workloads"))],
    ids=["composite"],
)
def test_a_tenants_shrink_of_one_component_drains_its_pods_node_and_ends_every_pod(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv,
    policy: Callable[[Obj], str], undrain: list[str], job_shrink_allowed: None,
) -> None:  # fmt: skip
    assert len(slurm_env.hybrid_nodes) >= 2, f"two hybrid nodes are needed, the cluster has {slurm_env.hybrid_nodes}"
    wait_selected(custom, policy(alice(ns)), ns)
    # Component 0 (PodGroup h-a): one pod in the bridge's partition; component 1 (h-b): a pod on
    # each hybrid node. (Slurm's backfill starts a heterogeneous job when each component can have
    # nodes of its own: the hybrid partition has two.)
    parts = {"a": (1, slurm_env.partition), "b": (2, slurm_env.hybrid_partition)}
    pods = composite(custom, core, ns, "h", parts)
    status = wait_for(
        lambda: (s := phj_status(custom, ns, "cpg-h")).get("phase") == names.PHASE_RUNNING and s,
        BACKFILL_WAIT,
        "the composite running",
    )
    leader = int(status["jobId"])
    records = het_records(slurm_env, leader)
    assert [r["user_name"] for r in records] == [A.user, A.user], "every component is alice's in Slurm"
    component = int(records[1]["job_id"])
    on = {a["node"]: a["pod"] for a in status["assignments"] if a.get("offset") == 1}
    assert set(on) == set(slurm_env.hybrid_nodes), on
    undrain += list(on)

    kept, lose, gone = shrink_off_one_node(slurm_env, ns, component, on)

    ended = wait_for(
        lambda: (s := phj_status(custom, ns, "cpg-h")).get("phase") == names.PHASE_FAILED and s, 30, "Failed"
    )
    assert ended["reason"] == names.REASON_ALLOCATION_CHANGED, ended
    said = ended["message"]
    assert f"heterogeneous Slurm job {leader} holds less than its pods need" in said, said
    assert f"in component 1 (PodGroup h-b, Slurm job {component}), pod {gone} is on node {lose}" in said, said
    assert "DRAIN" not in node_line(slurm_env, kept), "the node the component still holds is not drained"
    wait_for(lambda: all(read_pod(core, ns, p) is None for p in pods), 90, "every pod of every component gone")
    wait_for(lambda: "DRAIN" not in node_line(slurm_env, lose), 120, f"the handoff to lift its drain of {lose}")
    wait_for(lambda: all_done(slurm_env, leader), 60, "the whole heterogeneous job cancelled")
