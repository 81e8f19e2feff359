"""Slurm's network topology seen in Kubernetes (issue 38 §3; docs/nodes.md#network-topology), and
gangs placed by it (§4; docs/workloads.md#topology).

The local cluster's Slurm has two topologies beside its flat default (hack/cluster/slurm-conf.sh):
``block`` (topology/block) and ``switch`` (topology/tree), each node's place also on its NodeName
line. The node controller labels each Kubernetes node ``topology.slinky.slurm.net/<topology>`` with
its block or leaf switch. Read here independently of the bridge: ``scontrol show topology``.

Two partitions over the kwok nodes place their jobs by those topologies (``SB_BLOCK_PARTITION``,
``Topology=block``; ``SB_SWITCH_PARTITION``, ``Topology=switch``). A gang with a topology key (a
Workload API PodGroup's ``schedulingConstraints.topology``, or the ``slurmjob.slinky.slurm.net/topology``
annotation on an older gang) is one Slurm job within one block or leaf switch: it waits while no
unit has room, though a plain job would take the free nodes spread over two, and lands in one when
one has. One no unit of its partition can hold, or sent where another topology places, is never
submitted, and its PlaceholderJob says why; a key the bridge cannot place by is refused at admission.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import hostlist
import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from slurm_bridge.kube import schedulingapi
from tests.e2e.test_workload_api import WorkloadAPI, wapi
from tests.e2e.test_workloads import PODGROUP, _assert_unreleased_for, _bound_to_assignments
from tests.e2e.util import API, bridge_jobs_in, get_phj, make_pod, slurm_job
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
__all__ = ["wapi"]  # the Workload API version fixture, shared with test_workload_api.py
P = names.SLURMJOB_PREFIX
TOPOLOGIES = ("block", "switch")
SYNC = 90  # the node controller's whole node list (60 s: a Topology= update does not mark Slurm's table changed)


def slurm_places(slurm: SlurmEnv) -> dict[str, dict[str, str]]:
    """node -> {topology: its block, or its leaf switch}, from ``scontrol show topology <name>``."""
    out: dict[str, dict[str, str]] = {}
    for topo in TOPOLOGIES:
        for line in slurm.scontrol("show", "topology", topo).splitlines():
            m = re.match(r"\s*(?:BlockName|SwitchName)=(\S+)(.*)", line)
            if not m or (topo == "switch" and "Level=0" not in m.group(2)):
                continue  # aggregated blocks and upper switches are not a node's own place
            nodes = re.search(r"Nodes=(\S+)", m.group(2))
            for node in hostlist.expand_hostlist(nodes.group(1)) if nodes else []:
                out.setdefault(node, {})[topo] = m.group(1)
    return out


def labels_of(core: k8s.CoreV1Api) -> dict[str, dict[str, str]]:
    """node -> {topology: label value} of every Kubernetes node."""
    prefix = names.LABEL_TOPOLOGY_PREFIX
    return {
        n.metadata.name: {
            k.removeprefix(prefix): v for k, v in (n.metadata.labels or {}).items() if k.startswith(prefix)
        }
        for n in core.list_node().items
    }


@pytest.fixture
def moved(slurm_env: SlurmEnv) -> Iterator[list[tuple[str, str]]]:
    """(node, its Topology= before) of each node a test moves; put back at the end."""
    done: list[tuple[str, str]] = []
    yield done
    for node, topology in done:
        slurm_env.scontrol("update", f"nodename={node}", f"topology={topology}")


def test_nodes_carry_their_place_in_each_slurm_topology_and_follow_a_change(
    core: k8s.CoreV1Api, slurm_env: SlurmEnv, moved: list[tuple[str, str]]
) -> None:
    places = slurm_places(slurm_env)
    assert len({p.get("block") for p in places.values()}) >= 2, f"the cluster's Slurm has fewer than 2 blocks: {places}"
    kube_nodes = set(labels_of(core))
    want = {n: places.get(n, {}) for n in kube_nodes}
    assert any(want.values()), f"no Kubernetes node is in Slurm's topology: {sorted(kube_nodes)} / {places}"

    def differ() -> dict[str, tuple[dict[str, str], dict[str, str]]]:
        """node -> (its labels, Slurm's places) where they differ."""
        now = labels_of(core)
        return {n: (now.get(n, {}), w) for n, w in want.items() if now.get(n, {}) != w}

    wait_for(lambda: not differ(), SYNC, "topology labels as Slurm says")
    assert not differ(), differ()
    assert labels_of(core)[slurm_env.real_node] == {}, "a node in no topology has no topology labels"

    # Slurm moves a node to another block and leaf switch: its labels follow.
    node = next(n for n in sorted(want) if want[n].get("block"))
    other = next(n for n in sorted(want) if want[n].get("block") not in (None, want[node]["block"]))
    moved.append((node, f"block:{want[node]['block']},switch:{want[node]['switch']}"))
    slurm_env.scontrol(
        "update", f"nodename={node}", f"topology=block:{want[other]['block']},switch:{want[other]['switch']}"
    )
    assert slurm_places(slurm_env)[node] == want[other], "Slurm did not move the node"
    wait_for(lambda: labels_of(core)[node] == want[other] or None, SYNC, f"{node}'s labels moved to {want[other]}")


# ---- gangs placed by a topology (issue 38 §4) ------------------------------------------------------

Obj = dict[str, Any]


@pytest.fixture
def workload_kinds(wapi: WorkloadAPI) -> tuple[tuple[str, str, str], ...]:
    """The gang objects the `ns` fixture deletes: coscheduling PodGroups and the Workload API's."""
    served = ((schedulingapi.GROUP, wapi.version, "podgroups"), (schedulingapi.GROUP, wapi.version, "workloads"))
    return (PODGROUP, *(served if wapi.version else ()))


def partitions(slurm_env: SlurmEnv) -> dict[str, str]:
    """topology -> the local cluster's partition placed by it (hack/lib.sh)."""
    found = slurm_env.topology_partitions
    assert set(found) == {"block", "switch"}, (
        f"the cluster names partitions for topologies {sorted(found)}, not block and switch "
        "(SB_BLOCK_PARTITION, SB_SWITCH_PARTITION): restart it with hack/cluster.sh down && hack/cluster.sh up"
    )
    return found


@pytest.fixture
def holds(slurm_env: SlurmEnv) -> Iterator[dict[str, int]]:
    """node -> an external job of the test that holds it whole (Slurm's own, not a pod's); ended at
    the end of the test, or by the test with :func:`release`."""
    held: dict[str, int] = {}
    yield held
    for job_id in held.values():
        httpx.delete(f"{slurm_env.url}{API}/job/{job_id}", headers=slurm_env.headers(), timeout=30)


def hold(slurm_env: SlurmEnv, held: dict[str, int], node: str, partition: str) -> None:
    job = {
        "name": "holder",
        "partition": partition,
        "required_nodes": [node],
        "minimum_nodes": 1,
        "maximum_nodes": 1,
        "flags": ["EXTERNAL_JOB"],
        "current_working_directory": "/tmp",
        "shared": ["none"],
    }
    answer = httpx.post(
        f"{slurm_env.url}{API}/job/submit", json={"job": job}, headers=slurm_env.headers(), timeout=30
    ).json()
    assert answer.get("job_id") and not answer.get("errors"), f"holding {node} was refused: {answer}"
    held[node] = int(answer["job_id"])
    wait_for(lambda: (slurm_job(slurm_env, held[node]) or {}).get("job_state") == ["RUNNING"], 30, f"{node} held")


def release(slurm_env: SlurmEnv, held: dict[str, int], node: str) -> None:
    httpx.delete(f"{slurm_env.url}{API}/job/{held.pop(node)}", headers=slurm_env.headers(), timeout=30)


def two_units(slurm_env: SlurmEnv, topology: str) -> tuple[list[str], list[str]]:
    """The first two units of ``topology`` among the kwok nodes, two nodes each or more."""
    places = slurm_places(slurm_env)
    units: dict[str, list[str]] = {}
    for node in slurm_env.nodes:
        if topology in places.get(node, {}):
            units.setdefault(places[node][topology], []).append(node)
    found = [sorted(u) for _, u in sorted(units.items()) if len(u) >= 2]
    assert len(found) >= 2, f"the local Slurm's {topology} topology has fewer than two units of two kwok nodes: {units}"
    return found[0], found[1]


def coscheduled(
    ns: str, custom: k8s.CustomObjectsApi, core: k8s.CoreV1Api, name: str, size: int, options: dict[str, str]
) -> str:
    """A coscheduling PodGroup of ``size`` pods with the gang's options; its PlaceholderJob's name."""
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "annotations": options},
        "spec": {"minMember": size},
    }
    custom.create_namespaced_custom_object(PODGROUP[0], PODGROUP[1], ns, PODGROUP[2], group)
    for i in range(size):
        core.create_namespaced_pod(ns, make_pod(f"{name}-{i}", labels={names.LABEL_POD_GROUP: name}))
    return f"podgroup-{name}"


def workload_gang(
    ns: str,
    wapi: WorkloadAPI,
    custom: k8s.CustomObjectsApi,
    core: k8s.CoreV1Api,
    name: str,
    size: int,
    options: dict[str, str],
    key: str,
) -> str:
    """A Workload API PodGroup of ``size`` pods whose ``schedulingConstraints.topology`` is ``key``."""
    wapi.create(custom, ns, wapi.workload(name, size))
    constraint = {"schedulingConstraints": {"topology": [{"key": key}]}}
    wapi.create(custom, ns, wapi.podgroup(f"{name}-workers", name, size, options, **constraint))
    for i in range(size):
        pod = make_pod(f"{name}-{i}")
        pod["spec"]["schedulingGroup"] = {"podGroupName": f"{name}-workers"}
        core.create_namespaced_pod(ns, pod)
    return f"pg-{name}-workers"


@pytest.mark.parametrize("topology", ["block", "switch"])
def test_a_gang_waits_for_one_unit_with_room_and_lands_there_not_on_nodes_spread_over_two(
    topology: str,
    wapi: WorkloadAPI,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    ns: str,
    slurm_env: SlurmEnv,
    holds: dict[str, int],
) -> None:
    """One node of each of two units is held: the two free nodes are in different units, where a
    plain job of two would run at once. The gang of two asked within one unit waits (Slurm's reason
    on its PlaceholderJob), and lands in the second unit once that one is whole again. The block
    gang asks in Kubernetes' terms where the Workload API is served; the switch gang (and the block
    one on older Kubernetes) with the annotation."""
    partition, key = partitions(slurm_env)[topology], names.LABEL_TOPOLOGY_PREFIX + topology
    first, second = two_units(slurm_env, topology)
    hold(slurm_env, holds, first[0], partition)
    hold(slurm_env, holds, second[0], partition)
    options = {P + "partition": partition, P + "node-sharing": names.NODE_SHARING_EXCLUSIVE}
    if topology == "block" and wapi.version is not None:
        name = workload_gang(ns, wapi, custom, core, "near", 2, options, key)
    else:
        name = coscheduled(ns, custom, core, "near", 2, {**options, P + "topology": key})

    phj = wait_for(
        lambda: (
            (p := get_phj(custom, ns, name))
            and (p.get("status") or {}).get("jobId")
            and p["status"].get("slurmState") == "PENDING"
            and p["status"].get("reason")
            and p
        ),
        90,
        "the gang pending in Slurm while no unit has room",
    )
    job = slurm_job(slurm_env, phj["status"]["jobId"])
    assert job is not None and job["job_state"] == ["PENDING"], job
    assert (job["segment_size"], job["required_switches"]) == (2, 1), "one segment of 2 nodes, one leaf switch"
    _assert_unreleased_for(core, ns, 4)

    release(slurm_env, holds, second[0])
    phj = wait_for(
        lambda: (p := get_phj(custom, ns, name)) and (p.get("status") or {}).get("phase") == "Running" and p,
        90,
        f"the gang running once {second} has room",
    )
    placed = set(_bound_to_assignments(core, ns, phj).values())
    assert placed == set(second[:2]), f"the gang runs on {sorted(placed)}, not within {topology} unit {second}"
    assert [j["job_id"] for j in bridge_jobs_in(slurm_env, ns)] == [phj["status"]["jobId"]], "one Slurm job"


def test_a_gang_no_unit_can_hold_or_sent_where_another_topology_places_is_not_submitted(
    core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    """A gang larger than every block of its partition would be spread by Slurm; one whose key names
    the tree while its partition places by blocks would not be placed by the tree: neither is
    submitted, each PlaceholderJob says why (and is tried again), and no pod starts."""
    parts = partitions(slurm_env)
    sizes = [len(u) for u in two_units(slurm_env, "block")]
    big = max(sizes) + 1
    assert big <= len(slurm_env.nodes), (
        f"the partition has {len(slurm_env.nodes)} nodes: a gang of {big} would not fit at all"
    )
    block, switch = names.LABEL_TOPOLOGY_PREFIX + "block", names.LABEL_TOPOLOGY_PREFIX + "switch"
    too_big = coscheduled(ns, custom, core, "big", big, {P + "partition": parts["block"], P + "topology": block})
    elsewhere = coscheduled(ns, custom, core, "tree", 2, {P + "partition": parts["block"], P + "topology": switch})

    def said(name: str) -> Obj:
        found: Obj = wait_for(
            lambda: (
                (p := get_phj(custom, ns, name))
                and (p.get("status") or {}).get("reason") == names.REASON_SUBMIT_REJECTED
                and p
            ),
            60,
            f"{name} not submitted, with why",
        )
        return found

    message = said(too_big)["status"]["message"]
    assert f"needs {big} nodes within one block unit" in message and f"partition {parts['block']} has" in message, (
        message
    )
    message = said(elsewhere)["status"]["message"]
    assert "places its jobs by topology block" in message and "Topology=switch" in message, message
    assert bridge_jobs_in(slurm_env, ns) == [], "nothing submitted to Slurm"
    _assert_unreleased_for(core, ns, 3)


def test_a_topology_key_the_bridge_cannot_place_by_is_refused_at_admission(
    wapi: WorkloadAPI, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    """Kubernetes' own zone key names no Slurm topology: refused, naming the key and what works, in
    a Workload API PodGroup (where served) and in the annotation of an older gang."""
    zone = "topology.kubernetes.io/zone"
    group = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "zoned", "annotations": {P + "topology": zone}},
        "spec": {"minMember": 2},
    }
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(PODGROUP[0], PODGROUP[1], ns, PODGROUP[2], group)
        pytest.fail("a PodGroup with an unplaceable topology annotation was admitted")
    message = json.loads(err.value.body or "{}").get("message", "")
    assert err.value.status == 422 and P + "topology" in message and zone in message, err.value.body
    assert names.LABEL_TOPOLOGY_PREFIX + "<topology>" in message, message
    if wapi.version is None:
        return
    wapi.create(custom, ns, wapi.workload("zoned", 2))
    constrained = wapi.podgroup("zoned-workers", "zoned", 2, schedulingConstraints={"topology": [{"key": zone}]})
    with pytest.raises(ApiException) as err:
        wapi.create(custom, ns, constrained)
        pytest.fail("a PodGroup with an unplaceable topology key was admitted")
    message = json.loads(err.value.body or "{}").get("message", "")
    assert err.value.status == 422 and f"spec.schedulingConstraints.topology ({zone})" in message, err.value.body
    assert wapi.podgroups(custom, ns) == [], "nothing was made from a refused PodGroup"
