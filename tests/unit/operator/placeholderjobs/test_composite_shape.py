"""A CompositePodGroup through the operator's shells, with fake Kubernetes and Slurm clients:
pods join their components of one PlaceholderJob (operator/placeholderjobs/shapes/composite.py), the PlaceholderJob
becomes one heterogeneous submit, and the release labels each pod with its component's job and
annotates it with the job's id and its offset (operator/placeholderjobs/sync/phjsync.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import phj_path, pod_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.placeholderjobs.workitems import WorkItem
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from tests.unit.fakes import FakeNodeView, FakeSlurm
from tests.unit.operator.placeholderjobs.test_compositepodgroups import API, composite, member, podgroup, workload

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
NS = "ns"
LEADER = 30
PHJ = phj_path(NS, "cpg-c")


def cluster_objects(*objs: Obj) -> API:
    """The fake API server with the composite's objects as the API server stores them."""
    stored = []
    for i, o in enumerate(objs):
        o = copy.deepcopy(o)
        meta = o.setdefault("metadata", {})
        meta.update(resourceVersion=str(i + 1), generation=meta.get("generation", 1))
        meta.setdefault("uid", f"uid-{meta.get('name')}")
        stored.append(o)
    return API(*stored)


class Queue:
    def __init__(self) -> None:
        self.keys: list[WorkItem] = []

    def add(self, key: WorkItem) -> None:
        self.keys.append(key)


def cluster() -> tuple[API, FakeSlurm, Membership, PlaceholderJobs, ObjectStore]:
    kube, slurm = (
        cluster_objects(workload(), composite(), podgroup("small", min_count=1), podgroup("large")),
        FakeSlurm(next_id=LEADER - 1, allocates=False),
    )
    config = Config(managedNamespaces=[NS])
    poller = SlurmPoller(slurm, config.bridgeId, 1.0, lambda _: None)
    poller.snapshot = JobSnapshot({}, {}, 0.0)
    poller.synced.set()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse, index=member_pods)  # as the controller makes it
    m = Membership(config, kube, pods, phjs, Queue(), poller)  # type: ignore[arg-type]
    jobs = PlaceholderJobs(config, kube, slurm, pods, phjs, poller, nodes=FakeNodeView())
    return kube, slurm, m, jobs, pods


def add_pod(kube: API, pods: ObjectStore, name: str, group: str) -> Obj:
    p = member(name, group)
    cpu = "2" if group == "large" else "1"
    p["spec"].update(schedulerName="slurm-bridge", schedulingGates=[{"name": names.SCHEDULING_GATE}],
                     containers=[{"name": "c", "resources": {"requests": {"cpu": cpu}}}])  # fmt: skip
    p["status"] = {"phase": "Pending"}
    p["metadata"]["resourceVersion"] = "1"
    kube.objects[pod_path(NS, name)] = p
    pods.upsert(p)
    return p


async def join_all(m: Membership, pods: ObjectStore, *names_: str) -> None:
    for name in names_:
        assert await m.reconcile((NS, name)) is None


async def test_pods_of_every_child_join_one_placeholderjob_each_in_its_component() -> None:
    kube, _, m, _, pods = cluster()
    for name, group in (("large-0", "large"), ("small-0", "small"), ("large-1", "large")):
        add_pod(kube, pods, name, group)
    await join_all(m, pods, "large-0", "small-0", "large-1")
    phj = kube.objects[PHJ]
    spec = phj["spec"]
    assert spec["group"]["kind"] == "CompositePodGroup" and phj["metadata"]["ownerReferences"][0]["name"] == "c"
    assert [(c["podGroup"], c["minMember"], c["pods"]) for c in spec["components"]] == [
        ("large", 2, ["large-0", "large-1"]), ("small", 1, ["small-0"])]  # fmt: skip
    assert spec["pods"] == ["large-0", "large-1", "small-0"]
    assert set(spec["podUIDs"]) == set(spec["pods"])
    assert (spec["minMember"], spec["minComponents"]) == (3, 2)
    large, small = (c["slurm"] for c in spec["components"])
    assert (large["nodes"], large["cpusPerTask"], small["nodes"], small["cpusPerTask"]) == (2, 2, 1, 1)
    assert spec["slurm"] == large, "spec.slurm is component 0's request"
    assert large["jobName"] == small["jobName"] == "c"


async def test_the_composite_is_one_heterogeneous_job_released_all_at_once() -> None:
    kube, slurm, m, jobs, pods = cluster()
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await join_all(m, pods, "large-0", "large-1", "small-0")
    jobs.phjs.upsert(kube.objects[PHJ])
    assert await jobs.reconcile((NS, "cpg-c")) is None
    assert slurm.calls == ["submit het 2 c", f"get all {LEADER}"]
    assert [r.nodes for r in slurm.requests] == [2, 1]
    status = kube.objects[PHJ]["status"]
    assert (status["jobId"], status["hetJobId"], status["phase"]) == (LEADER, LEADER, "Pending")
    assert [(c["offset"], c["podGroup"], c["jobId"]) for c in status["components"]] == [
        (0, "large", LEADER), (1, "small", LEADER + 1)]  # fmt: skip
    assert "submitted heterogeneous Slurm job 30" in status["message"]
    assert kube.reasons == ["Submitted"]
    released = [p for p in kube.patches if p.startswith(pod_path(NS, ""))]
    assert released == [], "nothing released while the job waits"

    # Slurm's backfill starts every component at once.
    snap = jobs.poller.snapshot
    assert snap is not None
    ref = PhjRef(Config().bridgeId, NS, "cpg-c", kube.objects[PHJ]["metadata"]["uid"])
    nodes = {0: ("n1", "n2"), 1: ("n3",)}
    for j in list(slurm.jobs.values()):
        snap.put(j.model_copy(update={"states": ("RUNNING",), "nodes": nodes[j.het_job_offset],
                                      "admin_comment": encode_admin_comment(ref)}), ref)  # fmt: skip
    jobs.phjs.upsert(kube.objects[PHJ])
    before = len(kube.patches)
    await jobs.reconcile((NS, "cpg-c"))
    order = kube.patches[before:]
    assert order[0] == PHJ + "/status", "the assignments are recorded before any pod is touched"
    assert sorted(order[1:4]) == [pod_path(NS, n) for n in ("large-0", "large-1", "small-0")]
    cpg_status = f"/apis/scheduling.k8s.io/v1alpha3/namespaces/{NS}/compositepodgroups/c/status"
    assert order[4:] == [cpg_status]
    (condition,) = kube.objects[cpg_status.removesuffix("/status")]["status"]["conditions"]
    assert (condition["type"], condition["status"]) == (names.COMPOSITE_COND_SCHEDULED, "True")
    status = kube.objects[PHJ]["status"]
    assert status["phase"] == "Allocated"
    assert {(a["pod"], a["node"], a["offset"]) for a in status["assignments"]} == {
        ("large-0", "n1", 0), ("large-1", "n2", 0), ("small-0", "n3", 1)}  # fmt: skip
    for name, job_id, offset in (("large-0", LEADER, 0), ("large-1", LEADER, 0), ("small-0", LEADER + 1, 1)):
        p = kube.objects[pod_path(NS, name)]
        assert p["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] == str(job_id)
        annotations = p["metadata"]["annotations"]
        assert annotations[names.ANN_SLURM_HET_JOB_ID] == str(LEADER)
        assert annotations[names.ANN_SLURM_HET_OFFSET] == str(offset)
        assert annotations[names.ANN_PLACEHOLDER_JOB] == "cpg-c"
        assert "schedulingGates" not in p["spec"]


async def test_a_podgroup_that_had_no_pods_at_submission_waits_for_the_job_to_end() -> None:
    kube, _, m, jobs, pods = cluster()
    kube.put(podgroup("extra", min_count=1))
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await join_all(m, pods, "large-0", "large-1", "small-0")
    jobs.phjs.upsert(kube.objects[PHJ])
    await jobs.reconcile((NS, "cpg-c"))
    m.phjs.upsert(kube.objects[PHJ])
    add_pod(kube, pods, "extra-0", "extra")
    assert await m.reconcile((NS, "extra-0")) == 5.0
    [(name, reason, message)] = [e for e in kube.told("name", "reason", "message") if e[1] != "Submitted"]
    assert (name, reason) == ("extra-0", "CompositeFull") and "submitted without PodGroup extra" in message
    assert "extra-0" not in kube.objects[PHJ]["spec"]["pods"]


async def test_joining_members_never_lose_each_other() -> None:
    """Two pods join at once through two operators (a leader and one that has not yet seen it lost
    its lease): the resourceVersion test makes the later write read again."""
    kube, _, m, _, pods = cluster()
    j = m.joins
    other = Membership(j.config, kube, pods, j.phjs, Queue(), j.poller)  # type: ignore[arg-type]
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await m.reconcile((NS, "large-0"))
    small = pods.get((NS, "small-0"))
    assert small is not None
    await other.groups.resolve(small)  # its reads of the composite done: the two writes meet
    await asyncio.gather(m.reconcile((NS, "large-1")), other.reconcile((NS, "small-0")))
    assert kube.refused == 1, "the two writes raced"
    assert sorted(kube.objects[PHJ]["spec"]["pods"]) == ["large-0", "large-1", "small-0"]
    assert [c["podGroup"] for c in kube.objects[PHJ]["spec"]["components"]] == ["large", "small"]


async def test_one_operator_joins_a_groups_members_in_turn_without_a_refused_write() -> None:
    """In one operator a group's joins take turns (issue 39): a burst of members costs one patch
    each, no 409 and read again."""
    kube, _, m, _, pods = cluster()
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await m.reconcile((NS, "large-0"))
    await asyncio.gather(m.reconcile((NS, "large-1")), m.reconcile((NS, "small-0")))
    assert kube.refused == 0, "a join in this operator raced another"
    assert not m.joins._turns, "a group's lock outlived its joins"
    assert sorted(kube.objects[PHJ]["spec"]["pods"]) == ["large-0", "large-1", "small-0"]
    assert [c["podGroup"] for c in kube.objects[PHJ]["spec"]["components"]] == ["large", "small"]
