"""A group's changed slurmjob annotations -> its PlaceholderJob's spec (operator/placeholderjobs/
reconfigure.py, the rules of slurm_bridge/rules/jobchanges.py), with a fake API server: every key, before
the submit, while the job waits, once it is allocated; a workload's annotations; the record that
makes each change decided once; and the workload watch that queues them (optionwatch.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.grouping.groups import options_value, recorded_options
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.operator.placeholderjobs.members import Membership, own_options_changed, phj_index
from slurm_bridge.operator.placeholderjobs.optionwatch import OptionSources, watched
from slurm_bridge.operator.placeholderjobs.reconfigure import Reconfigure
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.workitems import OptionsItem, PhjItem, WorkItem
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.rules import jobchanges, tenancy
from slurm_bridge.slurm.models import JobRequest
from tests.builders import make_phj, make_pod, slurm_job
from tests.unit.fakes import FakeSlurm
from tests.unit.kubefakes import FakeKube

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
PHJ_PATH = "/apis/slinky.slurm.net/v1alpha1/namespaces/ns/placeholderjobs/p"
JOB_PATH = "/apis/batch/v1/namespaces/ns/jobs/train"
P = names.SLURMJOB_PREFIX


class Queue:
    def __init__(self) -> None:
        self.items: list[WorkItem] = []

    def add(self, item: WorkItem) -> None:
        self.items.append(item)


SPEC: Obj = {"nodes": 1, "partition": "slurm-bridge", "cpusPerTask": 1, "tasksPerNode": 1, "timeLimitMinutes": 5}


def pod(annotations: dict[str, str], *, job: bool = False) -> Obj:
    built = make_pod("p").uid("p-uid").rv(3).scheduler().gated().phase("Pending").container()
    for k, v in annotations.items():
        built.annotation(k, v)
    if job:
        built.owner({"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"}, controller=True)
    return built.obj()


def placeholderjob(
    recorded: dict[str, str] | None, *, phase: str | None = "Pending", job: bool = False, **slurm: Any
) -> Obj:
    built = make_phj("p").uid("phj-uid").rv(5).generation(1).finalizer().owned_by_pod("p", "p-uid").pods("p")
    source = (
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"}
        if job
        else {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "p-uid"}
    )
    built.spec(slurm={**SPEC, **slurm}, group=source)
    if recorded is not None:
        built.annotation(names.ANN_JOB_OPTIONS, options_value(recorded))
    if phase is not None:
        built.status(phase=phase, jobId=7, observedGeneration=1)
    return built.obj()


def setup(
    phj: Obj, pod_obj: Obj, *, state: str = "PENDING", objects: dict[str, Obj] | None = None, tenants: Any = None
) -> tuple[Reconfigure, FakeKube]:
    kube = FakeKube({PHJ_PATH: copy.deepcopy(phj), **(objects or {})})
    config = Config()
    poller = SlurmPoller(FakeSlurm(), config.bridgeId, config.pollPeriodSeconds, lambda _: None)
    jobs = (
        []
        if phj.get("status", {}).get("jobId") is None
        else [slurm_job(7, state, nodes=("n1",) if state == "RUNNING" else ())]
    )
    ref = PhjRef(config.bridgeId, "ns", "p", "phj-uid")
    poller.snapshot = JobSnapshot({j.job_id: j for j in jobs}, {j.job_id: ref for j in jobs}, 0.0)
    poller.synced.set()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse, index=phj_index)
    pods.upsert(pod_obj)
    phjs.upsert(phj)
    resolver = GroupResolver(kube.get)
    queue = Queue()
    recon = Reconfigure(config, kube, pods, phjs, poller, resolver, queue, tenants)  # type: ignore[arg-type]
    return recon, kube


def stored(kube: FakeKube) -> PlaceholderJob:
    return PlaceholderJob.parse(kube.objects[PHJ_PATH])


# ---- while the job waits: each key ------------------------------------------------------------------
UPDATABLE = [
    (P + "timelimit", "5", "7", "time_limit_minutes", 7),
    (P + "partition", "slurm-bridge", "short", "partition", "short"),
    (P + "qos", "normal", "high", "qos", "high"),
    (P + "account", "a", "b", "account", "b"),
    (P + "priority", "5", "100", "priority", 100),
    (P + "constraints", "fast", "fast&big", "constraints", "fast&big"),
    (P + "min-nodes", "1", "2", "nodes", 2),
    (P + "max-nodes", "1", "3", "max_nodes", 3),
    (P + "job-name", "a", "train-3", "job_name", "train-3"),
]


@pytest.mark.parametrize(("key", "old", "new", "field", "value"), UPDATABLE, ids=[u[0][len(P) :] for u in UPDATABLE])
async def test_a_changeable_key_reaches_the_spec_of_a_waiting_job(
    key: str, old: str, new: str, field: str, value: Any
) -> None:
    before = {key: old}
    recon, kube = setup(placeholderjob(before), pod({key: new}))
    assert await recon.reconcile(("ns", "p")) is None
    after = stored(kube)
    assert getattr(after.spec.slurm, field) == value
    assert after.metadata.generation == 2, "the spec's new generation is what decisions/specupdate.py sends"
    assert recorded_options(kube.objects[PHJ_PATH]) == {key: new}
    assert kube.said == []
    assert recon.queue.items == [PhjItem("ns", "p")]  # type: ignore[attr-defined]  # the test's Queue
    # Decided once: the record matches now.
    recon.phjs.upsert(kube.objects[PHJ_PATH])
    kube.patches.clear()
    assert await recon.reconcile(("ns", "p")) is None and kube.patches == []


FIXED = [
    (P + "cpu-per-task", "1", "2"),
    (P + "mem-per-node", "1Gi", "2Gi"),
    (P + "gres", "gpu:1", "gpu:2"),
    (P + "exclusive", "true", "false"),
    (P + "licenses", "a:1", "a:2"),
    (P + "reservation", "r1", "r2"),
    (P + "wckey", "w1", "w2"),
    (P + "user-id", "1000", "1001"),
    (P + "group-id", "1000", "1001"),
]


@pytest.mark.parametrize(("key", "old", "new"), FIXED, ids=[f[0][len(P) :] for f in FIXED])
async def test_a_key_fixed_at_submit_is_said_and_not_applied(key: str, old: str, new: str) -> None:
    recon, kube = setup(placeholderjob({key: old}), pod({key: new}))
    await recon.reconcile(("ns", "p"))
    after = stored(kube)
    assert after.spec.slurm == PlaceholderJob.parse(placeholderjob({key: old})).spec.slurm
    assert recorded_options(kube.objects[PHJ_PATH]) == {key: new}, "said once"
    kinds = [(kind, reason) for kind, reason, _ in kube.said]
    assert kinds == [("PlaceholderJob", names.REASON_UPDATE_NOT_APPLIED), ("Pod", names.REASON_UPDATE_NOT_APPLIED)]
    message = kube.said[0][2]
    assert key in message and "cannot change once the Slurm job is submitted" in message


@pytest.mark.parametrize("key", [P + "priority", P + "account"])
async def test_a_removal_slurm_cannot_go_back_from_is_said(key: str) -> None:
    recon, kube = setup(placeholderjob({key: "5", P + "timelimit": "5"}, priority=5, account="5"),
                        pod({P + "timelimit": "9"}))  # fmt: skip
    await recon.reconcile(("ns", "p"))
    after = stored(kube)
    # The time limit goes through; the removed key keeps its value, and that is said.
    assert after.spec.slurm.time_limit_minutes == 9
    assert getattr(after.spec.slurm, "priority" if key.endswith("priority") else "account") is not None
    assert kube.said and f"{key} removed" in kube.said[0][2] and "instead" in kube.said[0][2]


async def test_an_account_removed_in_a_namespace_with_a_default_account_goes_back_to_it() -> None:
    policy = tenancy.TenantPolicy.from_object(
        {"metadata": {"name": "t"}, "spec": {"namespaces": ["ns"], "accounts": {"default": "team-a"}}}
    )

    class Tenants:
        synced = True

        def index(self) -> tenancy.TenantIndex:
            return tenancy.TenantIndex([policy], {"ns": {}})

    recon, kube = setup(placeholderjob({P + "account": "team-b"}, account="team-b"), pod({}), tenants=Tenants())
    await recon.reconcile(("ns", "p"))
    assert stored(kube).spec.slurm.account is None and kube.said == []


# ---- before the submit, and once allocated -----------------------------------------------------------
async def test_before_the_submit_the_request_is_made_again_as_for_a_new_job() -> None:
    phj = placeholderjob({P + "gres": "gpu:1"}, phase=None, gres="gres/gpu:1")
    recon, kube = setup(phj, pod({P + "gres": "gpu:2", P + "timelimit": "8"}))
    await recon.reconcile(("ns", "p"))
    after = stored(kube).spec.slurm
    assert (after.gres, after.time_limit_minutes) == ("gres/gpu:2", 8) and kube.said == []


async def test_once_allocated_no_key_changes_and_the_change_is_said_too_late() -> None:
    phj = placeholderjob({P + "timelimit": "5"}, phase="Running")
    recon, kube = setup(phj, pod({P + "timelimit": "7"}), state="RUNNING")
    await recon.reconcile(("ns", "p"))
    assert stored(kube).spec.slurm.time_limit_minutes == 5
    assert {reason for _, reason, _ in kube.said} == {names.REASON_UPDATE_TOO_LATE}
    assert "Slurm job 7 was already allocated" in kube.said[0][2]


async def test_a_job_that_started_before_the_status_says_so_is_allocated() -> None:
    """The poller's view sees a start first: the status still says Pending."""
    recon, kube = setup(placeholderjob({P + "timelimit": "5"}), pod({P + "timelimit": "7"}), state="RUNNING")
    await recon.reconcile(("ns", "p"))
    assert stored(kube).spec.slurm.time_limit_minutes == 5 and kube.said[0][1] == names.REASON_UPDATE_TOO_LATE


# ---- a workload's annotations -------------------------------------------------------------------------
def batch_job(annotations: dict[str, str]) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ns", "uid": "job-uid", "annotations": annotations},
            "spec": {}}  # fmt: skip


async def test_a_jobs_annotations_configure_its_pods_job_and_are_said_on_the_job() -> None:
    phj = placeholderjob({P + "partition": "a"}, job=True, partition="a")
    objects = {JOB_PATH: batch_job({P + "partition": "b", P + "wckey": "w"})}
    # The pod's own annotations are not its job's options: its Job's are.
    recon, kube = setup(phj, pod({P + "partition": "ignored"}, job=True), objects=objects)
    await recon.reconcile(("ns", "p"))
    assert stored(kube).spec.slurm.partition == "b"
    assert [(kind, reason) for kind, reason, _ in kube.said] == [
        ("PlaceholderJob", names.REASON_UPDATE_NOT_APPLIED), ("Pod", names.REASON_UPDATE_NOT_APPLIED),
        ("Job", names.REASON_UPDATE_NOT_APPLIED),
    ]  # fmt: skip


async def test_a_placeholderjob_made_before_options_were_recorded_is_compared_field_by_field() -> None:
    same = placeholderjob(None, timeLimitMinutes=5)
    recon, kube = setup(same, pod({P + "timelimit": "5"}))
    await recon.reconcile(("ns", "p"))
    assert kube.patches == [], "nothing differs: nothing written"
    recon, kube = setup(placeholderjob(None, timeLimitMinutes=5), pod({P + "timelimit": "6"}))
    await recon.reconcile(("ns", "p"))
    assert stored(kube).spec.slurm.time_limit_minutes == 6


async def test_a_placeholderjob_changed_meanwhile_is_decided_again() -> None:
    recon, kube = setup(placeholderjob({P + "timelimit": "5"}), pod({P + "timelimit": "7"}))
    kube.objects[PHJ_PATH]["metadata"]["resourceVersion"] = "6"  # written since the cache saw it
    assert await recon.reconcile(("ns", "p")) == 0.05
    assert recon.phjs.get(("ns", "p"))["metadata"]["resourceVersion"] == "6"  # type: ignore[index]
    assert await recon.reconcile(("ns", "p")) is None
    assert stored(kube).spec.slurm.time_limit_minutes == 7


# ---- what queues the work -----------------------------------------------------------------------------
def test_a_bare_pods_own_annotations_are_compared_with_the_record() -> None:
    phj = PlaceholderJob.parse(placeholderjob({P + "timelimit": "5"}))
    assert not own_options_changed(pod({P + "timelimit": "5"}), phj)
    assert own_options_changed(pod({P + "timelimit": "7"}), phj)
    assert not own_options_changed(
        pod({P + "timelimit": "7"}, job=True), PlaceholderJob.parse(placeholderjob({}, job=True))
    )


def test_the_new_placeholderjob_records_the_options_its_spec_is_made_from() -> None:
    from slurm_bridge.operator.placeholderjobs.grouping.groups import new_phj, pod_group

    made = new_phj(pod_group(pod({P + "timelimit": "7", "other": "x"})), ["p"], JobRequest())
    assert json.loads(made["metadata"]["annotations"][names.ANN_JOB_OPTIONS]) == {P + "timelimit": "7"}


def test_every_configuring_kind_is_watched_at_a_version() -> None:
    kinds = {k.kind for k, _ in watched()}
    assert kinds == {"Job", "JobSet", "LeaderWorkerSet", "PodGroup", "Workload", "CompositePodGroup"}
    assert ("Job", "v1") in {(k.kind, v) for k, v in watched()}


def test_a_workloads_annotation_change_queues_the_placeholderjobs_it_configures() -> None:
    phjs: ParsedStore[PlaceholderJob] = ParsedStore(PlaceholderJob.parse, index=phj_index)
    phjs.upsert(placeholderjob({P + "partition": "a"}, job=True))
    queue = Queue()
    sources = OptionSources(None, phjs, queue)  # type: ignore[arg-type]  # no watch runs here
    kind, _ = next((k, v) for k, v in watched() if k.kind == "Job")
    held = sources.informers[0].known
    meta = batch_job({P + "partition": "a"})
    sources.on_event(kind, held, "ADDED", meta)  # type: ignore[arg-type]
    assert queue.items == [], "listed with what the PlaceholderJob recorded"
    sources.on_event(kind, held, "MODIFIED", {**meta, "status": {"active": 1}})  # type: ignore[arg-type]
    assert queue.items == [], "a change of something else"
    sources.on_event(kind, held, "MODIFIED", batch_job({P + "partition": "b"}))  # type: ignore[arg-type]
    assert queue.items == [OptionsItem("ns", "p")]


def test_a_change_made_while_no_operator_watched_is_found_at_the_list() -> None:
    phjs: ParsedStore[PlaceholderJob] = ParsedStore(PlaceholderJob.parse, index=phj_index)
    phjs.upsert(placeholderjob({P + "partition": "a"}, job=True))
    queue = Queue()
    sources = OptionSources(None, phjs, queue)  # type: ignore[arg-type]
    kind, _ = next((k, v) for k, v in watched() if k.kind == "Job")
    sources.on_event(kind, sources.informers[0].known, "ADDED", batch_job({P + "partition": "b"}))  # type: ignore[arg-type]
    assert queue.items == [OptionsItem("ns", "p")]


def test_jobchanges_classifies_every_key_of_the_annotation_table() -> None:
    from slurm_bridge.rules.jobannotations import ANNOTATION_FIELDS

    assert set(ANNOTATION_FIELDS) >= jobchanges.UPDATABLE
    for key in ANNOTATION_FIELDS:
        problems = jobchanges.waiting_problems({key: "1"}, {key: "2"}, default_account=True)
        assert (key in problems) == (key not in jobchanges.UPDATABLE)
        assert key in jobchanges.allocated_problems({key: "1"}, {key: "2"}, "Slurm job 1")


def test_a_topology_jobs_node_count_stays_as_submitted() -> None:
    """Slurm keeps a waiting job's segment size whatever an update says (Slurm 26.05): a topology
    job's node count cannot change, where another job's can."""
    for key in (names.ANN_MIN_NODES, names.ANN_MAX_NODES):
        assert jobchanges.waiting_problems({key: "2"}, {key: "3"}, default_account=True) == {}
        (problem,) = jobchanges.waiting_problems({key: "2"}, {key: "3"}, default_account=True, topology=True).values()
        assert "placed by a topology" in problem and "keeps its node count" in problem
    spec = JobRequest(nodes=2, topology="block")
    fresh = spec.model_copy(update={"nodes": 3})
    old, new = {names.ANN_MIN_NODES: "2"}, {names.ANN_MIN_NODES: "3"}
    result = jobchanges.respec("waiting", old, new, spec, fresh, job="Slurm job 1", default_account=True)
    assert result.spec is None and names.ANN_MIN_NODES in result.problems


async def test_a_bare_pods_annotation_change_queues_its_placeholderjob_and_its_options() -> None:
    """The pod watch brings the change: the pod's PlaceholderJob is decided, and its options looked at."""
    config = Config(managedNamespaces=["ns"])
    poller = SlurmPoller(FakeSlurm(), config.bridgeId, config.pollPeriodSeconds, lambda _: None)
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse, index=phj_index)
    phjs.upsert(placeholderjob({P + "timelimit": "5"}))
    queue = Queue()
    members = Membership(config, FakeKube({}), pods, phjs, queue, poller)  # type: ignore[arg-type]
    pods.upsert(pod({P + "timelimit": "5"}))
    await members.reconcile(("ns", "p"))
    assert queue.items == [PhjItem("ns", "p")]
    changed = pod({P + "timelimit": "7"})
    changed["metadata"]["resourceVersion"] = "4"
    pods.upsert(changed)
    await members.reconcile(("ns", "p"))
    assert queue.items[1:] == [PhjItem("ns", "p"), OptionsItem("ns", "p")]
