"""operator/placeholderjobs/members.py: pods joining a gang's PlaceholderJob (a coscheduling
PodGroup's), with a fake API server that checks each JSON patch's resourceVersion test.

The join: the first member makes the PlaceholderJob, later ones join it with a tested write, two at
once never lose each other, a late member takes an ended member's place, and a full gang makes a
newcomer wait. A terminating member keeps its place, and its node, until it is gone (issue 23 §4,
docs/workloads.md "Late members"): the newcomer waits, the member's end wakes it, and only then
does it take the place and the node."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import phj_path, pod_path
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.grouping.gangjoin import WAIT_SECONDS, Vacancies
from slurm_bridge.operator.placeholderjobs.members import Membership, member_pods
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.placeholderjobs.workitems import PhjItem, PodItem
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.models import JobInfo
from tests.builders import make_pod
from tests.unit.fakes import FakeJobReads, FakeNodeView, FakeSlurm
from tests.unit.kubefakes import FakeKube
from tests.unit.operator.placeholderjobs.test_composite_shape import PHJ as CPG_PHJ
from tests.unit.operator.placeholderjobs.test_composite_shape import Queue
from tests.unit.operator.placeholderjobs.test_composite_shape import add_pod as add_composite_pod
from tests.unit.operator.placeholderjobs.test_composite_shape import cluster as composite_cluster

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
NS = "ns"
GANG = "podgroup-g"
PHJ = phj_path(NS, GANG)
PODGROUP = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups/g"
JOB_ID = 7
DELETED_AT = "2026-11-24T03:00:00Z"


def writes(kube: FakeKube) -> list[tuple[str, str]]:
    """The writes made, in order: (verb, path)."""
    return [c for c in kube.calls if c[0] != "get"]


class Gang:
    """One coscheduling PodGroup ``g`` and the operator's membership side (pods cache, queue)."""

    def __init__(self, min_member: int = 2, kube: FakeKube | None = None) -> None:
        self.config = Config(managedNamespaces=[NS])
        self.kube = kube or FakeKube()
        self.rv = 100
        self.kube.objects[PODGROUP] = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                       "metadata": {"name": "g", "namespace": NS, "uid": "uid-pg"},
                                       "spec": {"minMember": min_member}}  # fmt: skip
        self.poller = SlurmPoller(FakeJobReads(), self.config.bridgeId, 1.0, lambda _: None)
        self.poller.snapshot = JobSnapshot({}, {}, 0.0)
        self.poller.synced.set()
        # As the controller makes them: PlaceholderJobs indexed by their member pods.
        self.pods, self.phjs, self.queue = ObjectStore(), ParsedStore(PlaceholderJob.parse, index=member_pods), Queue()
        self.m = Membership(self.config, self.kube, self.pods, self.phjs, self.queue, self.poller)  # type: ignore[arg-type]

    def add(self, name: str, uid: str | None = None) -> Obj:
        built = make_pod(name, NS).uid(uid or f"uid-{name}").label(names.LABEL_POD_GROUP, "g")
        built.scheduler(self.config.schedulerName).gated().container("c", requests={"cpu": "1"})
        pod = built.phase("Pending").obj()
        self.put(pod)
        return pod

    def stamp(self, obj: Obj) -> None:
        """Someone else's write, as the API server stores it: the next resourceVersion."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        obj["metadata"].setdefault("generation", 1)

    def put(self, pod: Obj) -> None:
        """A pod event: the API server and the watch cache agree."""
        self.stamp(pod)  # a newer resourceVersion, or the cache keeps what it has
        self.kube.objects[pod_path(NS, pod["metadata"]["name"])] = copy.deepcopy(pod)
        self.pods.upsert(copy.deepcopy(pod))

    def pod(self, name: str) -> Obj:
        return copy.deepcopy(self.kube.objects[pod_path(NS, name)])

    def terminate(self, name: str) -> None:
        """Deleted with a grace period: still running on its node."""
        pod = self.pod(name)
        pod["metadata"]["deletionTimestamp"] = DELETED_AT
        self.put(pod)

    def stop(self, name: str) -> None:
        """The kubelet stopped the deleted pod: phase Failed, the object not removed yet."""
        pod = self.pod(name)
        pod["status"]["phase"] = "Failed"
        self.put(pod)

    def remove(self, name: str) -> None:
        """The pod's DELETED event, as the controller handles it (operator/placeholderjobs/controller.py)."""
        pod = self.kube.objects.pop(pod_path(NS, name))
        self.pods.delete(pod)
        self.m.forget(pod["metadata"]["uid"])

    def bind(self, name: str, node: str) -> None:
        pod = self.pod(name)
        pod["spec"].pop("schedulingGates", None)
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        self.put(pod)

    def submit(self, nodes: tuple[str, ...] | None = None) -> None:
        """The gang's job in Slurm (status.jobId), running on ``nodes`` with the members bound."""
        phj = self.kube.objects[PHJ]
        status: Obj = {"jobId": JOB_ID, "phase": "Pending", "slurmState": "PENDING"}
        if nodes is not None:
            assignments = dict(zip(phj["spec"]["pods"], nodes, strict=True))
            status |= {"phase": "Running", "slurmState": "RUNNING", "nodeList": ",".join(nodes),
                       "assignments": [{"pod": p, "node": n} for p, n in assignments.items()]}  # fmt: skip
            for p, n in assignments.items():
                self.bind(p, n)
        phj["status"] = status
        self.stamp(phj)
        self.phjs.upsert(copy.deepcopy(phj))

    async def join(self, *names_: str) -> list[float | None]:
        return [await self.m.reconcile((NS, n)) for n in names_]

    def spec(self) -> Obj:
        spec: Obj = self.kube.objects[PHJ]["spec"]
        return spec

    def phj_writes(self) -> list[Any]:
        return [body for path, body in zip(self.kube.patches, self.kube.bodies, strict=True) if path == PHJ]

    def events(self, reason: str) -> list[tuple[str, str]]:
        return [(obj, message) for obj, r, message in self.kube.told("name", "reason", "message") if r == reason]

    def woken(self) -> list[str]:
        return [k.name for k in self.queue.keys if isinstance(k, PodItem)]


# --- the join -----------------------------------------------------------------------------------


async def test_the_first_member_makes_the_placeholderjob_and_the_next_joins_with_a_tested_write() -> None:
    g = Gang()
    g.add("g-0")
    assert await g.join("g-0") == [None]
    assert writes(g.kube) == [("create", PHJ.rsplit("/", 1)[0])], "one create of the PlaceholderJob"
    phj = g.kube.objects[PHJ]
    assert phj["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    assert (g.spec()["pods"], g.spec()["podUIDs"], g.spec()["minMember"]) == (["g-0"], {"g-0": "uid-g-0"}, 2)
    assert g.spec()["slurm"]["nodes"] == 2, "a node for each member the gang waits for"

    g.add("g-1")
    rv = phj["metadata"]["resourceVersion"]
    assert await g.join("g-1") == [None]
    [ops] = g.phj_writes()
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": rv}, "the write tests what it read"
    assert g.spec()["pods"] == ["g-0", "g-1"]
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-1": "uid-g-1"}
    assert g.spec()["slurm"]["nodes"] == 2
    assert PhjItem(NS, GANG) in g.queue.keys, "the PlaceholderJob looks at its new member"

    assert await g.join("g-0", "g-1") == [None, None], "members already"
    assert len(g.phj_writes()) == 1, "a member is not written again"


async def test_members_joining_at_once_never_lose_each_other() -> None:
    """Two operators (a leader and one that has not yet seen it lost its lease) join a member each
    at once: the resourceVersion test refuses the later write, which reads again."""
    g = Gang(min_member=3)
    other = Membership(g.config, g.kube, g.pods, g.phjs, Queue(), g.poller)  # type: ignore[arg-type]
    for name in ("g-0", "g-1", "g-2"):
        g.add(name)
    await g.join("g-0")
    await asyncio.gather(g.m.reconcile((NS, "g-1")), other.reconcile((NS, "g-2")))
    assert g.kube.refused == 1, "the two writes raced, and the resourceVersion test refused one"
    assert sorted(g.spec()["pods"]) == ["g-0", "g-1", "g-2"]
    assert set(g.spec()["podUIDs"]) == {"g-0", "g-1", "g-2"}
    assert g.spec()["slurm"]["nodes"] == 3


async def test_one_operator_joins_a_gangs_members_in_turn_one_create_and_one_patch_each() -> None:
    """A burst of members in one operator (issue 39): one create, then one patch a member, no
    refused write; the turns' locks go with the joins."""
    g = Gang(min_member=4)
    for name in ("g-0", "g-1", "g-2", "g-3"):
        g.add(name)
    await asyncio.gather(*(g.m.reconcile((NS, f"g-{i}")) for i in range(4)))
    assert g.kube.refused == 0, "a join in this operator raced another"
    assert sorted(g.spec()["pods"]) == ["g-0", "g-1", "g-2", "g-3"]
    assert not g.m.joins._turns


@pytest.mark.parametrize("end", ["Succeeded", "Failed", "gone"])
async def test_a_late_member_takes_the_place_and_node_of_an_ended_member(end: str) -> None:
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit()
    if end == "gone":
        g.remove("g-1")
    else:
        pod = g.pod("g-1")
        pod["status"]["phase"] = end
        g.put(pod)
    slurm_before = copy.deepcopy(g.spec()["slurm"])
    g.add("g-2")
    assert await g.join("g-2") == [None]
    assert g.spec()["pods"] == ["g-0", "g-2"], "the same slot, in the same place"
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-2": "uid-g-2"}
    assert g.spec()["slurm"] == slurm_before, "a submitted gang's request is not rewritten"
    ops = g.phj_writes()[-1]
    assert [op["path"] for op in ops] == ["/metadata/resourceVersion", "/spec/pods", "/spec/podUIDs"]
    [(_, message)] = g.events("MemberReplaced")
    assert message == "pod g-2 takes the place (and node) of ended member g-1"


async def test_a_full_gang_makes_one_more_pod_wait() -> None:
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit(("n1", "n2"))
    before = len(writes(g.kube))
    g.add("g-2")
    assert await g.join("g-2") == [WAIT_SECONDS]
    assert g.spec()["pods"] == ["g-0", "g-1"]
    assert len(writes(g.kube)) == before, "nothing written"
    [(pod, message)] = g.events("GangFull")
    assert pod == "g-2"
    assert message == ("the gang's Slurm job was submitted for 2 other pods and none of them has ended; "
                       "the pod waits for a free place")  # fmt: skip
    assert await g.join("g-2") == [WAIT_SECONDS]
    assert len(g.events("GangFull")) == 1, "a retry does not repeat the Event"


async def test_a_recreated_member_takes_its_own_place() -> None:
    """A StatefulSet or LeaderWorkerSet makes a pod of the same name again: a new uid, same slot."""
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit(("n1", "n2"))
    g.remove("g-1")
    g.add("g-1", uid="uid-g-1-again")
    assert await g.join("g-1") == [None]
    assert g.spec()["pods"] == ["g-0", "g-1"]
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-1": "uid-g-1-again"}
    assert g.events("MemberReplaced") == [], "its own place: nobody was replaced"


@pytest.mark.parametrize("end", ["terminating", "Failed"])
async def test_before_submission_a_member_that_is_going_drops_out(end: str) -> None:
    """Nothing is allocated yet, so a terminating member holds no node: the gang is not sized for it."""
    g = Gang(min_member=3)
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.terminate("g-1") if end == "terminating" else g.stop("g-1")
    g.add("g-2")
    assert await g.join("g-2") == [None]
    assert g.spec()["pods"] == ["g-0", "g-2"]
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-2": "uid-g-2"}
    assert g.spec()["slurm"]["nodes"] == 3


# --- a terminating member (issue 23 §4) --------------------------------------------------------


@pytest.mark.parametrize("end", ["deleted", "stopped"])
async def test_a_terminating_member_keeps_its_place_until_it_is_gone(end: str) -> None:
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit(("n1", "n2"))
    g.terminate("g-1")
    assert await g.join("g-1") == [None]
    assert g.woken() == [], "a terminating member frees nothing"

    g.add("g-2")
    assert await g.join("g-2") == [WAIT_SECONDS]
    assert g.spec()["pods"] == ["g-0", "g-1"]
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-1": "uid-g-1"}
    [(pod, message)] = g.events("GangFull")
    assert pod == "g-2"
    assert message == ("the gang's Slurm job was submitted for 2 other pods and none of them has ended "
                       "(terminating, keeping its place and node until it is gone: g-1); "
                       "the pod waits for a free place")  # fmt: skip
    assert g.events("MemberReplaced") == []

    # The kubelet stops it (phase Failed), or its DELETED event comes: the newcomer is woken.
    g.stop("g-1") if end == "stopped" else g.remove("g-1")
    assert await g.join("g-1") == [None]
    assert g.woken() == ["g-2"], "the member's end queues the pod that waits for its place"
    assert await g.join("g-2") == [None]
    assert g.spec()["pods"] == ["g-0", "g-2"]
    assert g.spec()["podUIDs"] == {"g-0": "uid-g-0", "g-2": "uid-g-2"}
    [(_, message)] = g.events("MemberReplaced")
    assert message == "pod g-2 takes the place (and node) of ended member g-1"

    g.queue.keys.clear()
    g.remove("g-2")
    await g.join("g-2")
    assert g.woken() == [], "nobody waits any more"


async def test_a_member_that_ends_while_the_newcomer_decides_wakes_it_again() -> None:
    """The newcomer reads the member terminating, the member's end is handled meanwhile: the
    newcomer was noted as waiting before the read, so it is queued again and joins."""
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit(("n1", "n2"))
    g.terminate("g-1")
    g.pods.delete(g.pod("g-1"))  # not in the cache: the newcomer GETs it
    read = g.kube.get

    async def get_then_end(path: str, params: dict[str, str] | None = None) -> Obj | None:
        found = await read(path, params)
        if path == pod_path(NS, "g-1") and found is not None:
            g.remove("g-1")
            await g.m.reconcile((NS, "g-1"))  # its DELETED event, handled by another worker
        return found

    g.kube.get = get_then_end  # type: ignore[method-assign]
    g.add("g-2")
    assert await g.join("g-2") == [WAIT_SECONDS], "it read the member still terminating"
    assert g.woken() == ["g-2"], "and the member's end queued it again"
    assert await g.join("g-2") == [None]
    assert g.spec()["pods"] == ["g-0", "g-2"]


async def test_the_replacement_gets_the_node_only_once_the_terminating_member_is_gone() -> None:
    """Through the PlaceholderJob's shell (phjsync.py): while the member terminates, its node stays
    assigned to it and the newcomer stays gated; once it is gone the newcomer is released to
    that node, in the same Slurm job."""
    g = Gang()
    for name in ("g-0", "g-1"):
        g.add(name)
    await g.join("g-0", "g-1")
    g.submit(("n1", "n2"))
    uid = g.kube.objects[PHJ]["metadata"]["uid"]
    job = JobInfo(job_id=JOB_ID, states=("RUNNING",), nodes=("n1", "n2"))
    g.poller.snapshot = JobSnapshot({JOB_ID: job}, {JOB_ID: PhjRef(g.config.bridgeId, NS, GANG, uid)}, 0.0)
    jobs = PlaceholderJobs(g.config, g.kube, FakeSlurm(), g.pods, g.phjs, g.poller, nodes=FakeNodeView())

    g.terminate("g-1")
    g.add("g-2")
    assert await g.join("g-2") == [WAIT_SECONDS]
    await jobs.reconcile((NS, GANG))
    assert [a["pod"] for a in g.kube.objects[PHJ]["status"]["assignments"]] == ["g-0", "g-1"]
    assert pod_path(NS, "g-2") not in g.kube.patches, "the newcomer stays gated"

    g.remove("g-1")
    await g.join("g-1", "g-2")
    g.phjs.upsert(copy.deepcopy(g.kube.objects[PHJ]))
    await jobs.reconcile((NS, GANG))
    status = g.kube.objects[PHJ]["status"]
    assert status["jobId"] == JOB_ID
    assert {a["pod"]: a["node"] for a in status["assignments"]} == {"g-0": "n1", "g-2": "n2"}
    released = g.pod("g-2")
    assert released["metadata"]["annotations"][names.ANN_SLURM_NODE] == "n2", "the freed node"
    assert released["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] == str(JOB_ID), "the same Slurm job"
    assert "schedulingGates" not in released["spec"]


async def test_a_terminating_member_of_a_composite_keeps_its_place_until_it_is_gone() -> None:
    """The same rule per component of a CompositePodGroup (compositemembers.py)."""
    kube, _, m, jobs, pods = composite_cluster()
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_composite_pod(kube, pods, name, group)
    for name in ("large-0", "large-1", "small-0"):
        await m.reconcile((NS, name))
    jobs.phjs.upsert(kube.objects[CPG_PHJ])
    await jobs.reconcile((NS, "cpg-c"))  # submitted: the components are fixed
    m.phjs.upsert(kube.objects[CPG_PHJ])

    old = copy.deepcopy(kube.objects[pod_path(NS, "large-1")])
    old["metadata"]["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 1)
    old["metadata"]["deletionTimestamp"] = DELETED_AT
    kube.objects[pod_path(NS, "large-1")] = old
    pods.upsert(copy.deepcopy(old))
    add_composite_pod(kube, pods, "large-2", "large")
    assert await m.reconcile((NS, "large-2")) == WAIT_SECONDS
    [(_, message)] = [
        (n, msg) for n, r, msg in kube.told("name", "reason", "message") if r == names.REASON_COMPOSITE_FULL
    ]
    assert "(terminating, keeping its place and node until it is gone: large-1)" in message
    assert kube.objects[CPG_PHJ]["spec"]["pods"] == ["large-0", "large-1", "small-0"]

    del kube.objects[pod_path(NS, "large-1")]
    pods.delete(old)
    m.forget(old["metadata"]["uid"])
    await m.reconcile((NS, "large-1"))
    assert PodItem(NS, "large-2") in m.queue.keys, "the member's end queues the pod that waits"  # type: ignore[attr-defined]
    assert await m.reconcile((NS, "large-2")) is None
    assert kube.objects[CPG_PHJ]["spec"]["pods"] == ["large-0", "large-2", "small-0"]
    assert kube.objects[CPG_PHJ]["spec"]["components"][0]["pods"] == ["large-0", "large-2"]


def test_the_waiting_message_names_a_few_terminating_members() -> None:
    assert Vacancies().note() == ""
    assert Vacancies(terminating=frozenset({"b", "a"})).note() == (
        " (terminating, each keeping its place and node until it is gone: a, b)")  # fmt: skip
    many = Vacancies(terminating=frozenset(f"w-{i}" for i in range(5)))
    assert many.note().endswith(": w-0, w-1, w-2 and 2 more)"), "a long list is cut"
    assert Vacancies(ended=frozenset({"x"}), terminating=frozenset({"y"})).free(submitted=True) == {"x"}
    assert Vacancies(ended=frozenset({"x"}), terminating=frozenset({"y"})).free(submitted=False) == {"x", "y"}
