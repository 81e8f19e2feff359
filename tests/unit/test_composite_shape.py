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
from slurm_bridge.kube.client import Conflict, phj_path, pod_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import PhjRef, encode_admin_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import JobSnapshot, SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.placeholderjobs.workitems import WorkItem
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from tests.unit.fakes import FakeSlurm

from .test_compositepodgroups import API, composite, member, podgroup, workload

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
NS = "ns"
LEADER = 30
PHJ = phj_path(NS, "cpg-c")


class Kube(API):
    """The fake API of test_compositepodgroups, writable: create, JSON and merge patches, Events."""

    def __init__(self, *objs: Obj) -> None:
        self.rv = 10
        super().__init__(*(self._stamp(copy.deepcopy(o)) for o in objs))
        self.events: list[tuple[str, str, str]] = []  # (object name, reason, message)
        self.writes: list[tuple[str, Any]] = []
        self.refused = 0  # JSON patches whose test failed

    def _stamp(self, obj: Obj) -> Obj:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata'].get('name')}")
        obj["metadata"].setdefault("generation", 1)
        return obj

    async def create(self, path: str, obj: Obj) -> Obj:
        full = f"{path}/{obj['metadata']['name']}"
        if full in self.objects:
            raise Conflict(409, "AlreadyExists", "exists")
        self.objects[full] = self._stamp(copy.deepcopy(obj))
        self.writes.append(("create", full))
        return copy.deepcopy(self.objects[full])

    async def patch(self, path: str, body: Any, patch_type: str = "merge") -> Obj:
        await asyncio.sleep(0)  # let concurrent reconciles interleave, as real calls do
        base = path.removesuffix("/status")
        obj = copy.deepcopy(self.objects[base])
        self.writes.append((path, body))
        if patch_type == "json":
            for op in body:
                keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].strip("/").split("/")]
                parent = obj
                for k in keys[:-1]:
                    parent = parent.setdefault(k, {})
                if op["op"] == "test":
                    if parent.get(keys[-1]) != op["value"]:
                        self.refused += 1
                        raise Conflict(422, "Invalid", "test failed")
                elif op["op"] in ("add", "replace"):
                    parent[keys[-1]] = copy.deepcopy(op["value"])
                elif op["op"] == "remove":
                    parent.pop(keys[-1], None)
        else:
            for k, v in body.items():
                if isinstance(v, dict):
                    obj.setdefault(k, {}).update(v)
                else:
                    obj[k] = v
        self.objects[base] = self._stamp(obj)
        return copy.deepcopy(obj)

    async def delete(self, path: str, *, uid: str | None = None) -> Obj | None:
        self.writes.append(("delete", path))
        return self.objects.pop(path, None)

    async def event(self, obj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


class Queue:
    def __init__(self) -> None:
        self.keys: list[WorkItem] = []

    def add(self, key: WorkItem) -> None:
        self.keys.append(key)


def cluster() -> tuple[Kube, FakeSlurm, Membership, PlaceholderJobs, ObjectStore]:
    kube, slurm = (
        Kube(workload(), composite(), podgroup("small", min_count=1), podgroup("large")),
        FakeSlurm(next_id=LEADER - 1, allocates=False),
    )
    config = Config(managedNamespaces=[NS])
    poller = SlurmPoller(slurm, config.bridgeId, 1.0, lambda _: None)
    poller.snapshot = JobSnapshot({}, {}, 0.0)
    poller.synced.set()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse, index=member_pods)  # as the controller makes it
    m = Membership(config, kube, pods, phjs, Queue(), poller)  # type: ignore[arg-type]
    jobs = PlaceholderJobs(config, kube, slurm, pods, phjs, poller)  # type: ignore[arg-type]
    return kube, slurm, m, jobs, pods


def add_pod(kube: Kube, pods: ObjectStore, name: str, group: str) -> Obj:
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
    assert [e[1] for e in kube.events] == ["Submitted"]
    released = [w for w in kube.writes if w[0].startswith(pod_path(NS, ""))]
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
    before = len(kube.writes)
    await jobs.reconcile((NS, "cpg-c"))
    order = [w[0] for w in kube.writes[before:]]
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
    [(name, reason, message)] = [e for e in kube.events if e[1] != "Submitted"]
    assert (name, reason) == ("extra-0", "CompositeFull") and "submitted without PodGroup extra" in message
    assert "extra-0" not in kube.objects[PHJ]["spec"]["pods"]


async def test_joining_members_never_lose_each_other() -> None:
    """Two pods join at once: the resourceVersion test makes the later write read again."""
    kube, _, m, _, pods = cluster()
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await m.reconcile((NS, "large-0"))
    await asyncio.gather(m.reconcile((NS, "large-1")), m.reconcile((NS, "small-0")))
    assert kube.refused == 1, "the two writes raced"
    assert sorted(kube.objects[PHJ]["spec"]["pods"]) == ["large-0", "large-1", "small-0"]
    assert [c["podGroup"] for c in kube.objects[PHJ]["spec"]["components"]] == ["large", "small"]
