"""operator/placeholderjobs/sync/phjsync.py, the shell around lifecycle.decide, with fake Kubernetes and Slurm clients:
the plan's actions become the API calls the integration and e2e tests see (in order), a missing
member is confirmed with a GET, and an immediate allocation is written in one status patch."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import Invalid
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import pending as pd
from slurm_bridge.operator.placeholderjobs.decisions.inputs import DEVICES_RETRY_SECONDS
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmPoller
from slurm_bridge.operator.placeholderjobs.sync.devices import Prepared
from slurm_bridge.operator.placeholderjobs.sync.phjsync import PlaceholderJobs
from slurm_bridge.operator.runtime.store import ObjectStore, ParsedStore
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.errors import SlurmError, SlurmErrorDetail, SlurmUnavailable
from slurm_bridge.slurm.models import JobInfo, PartitionLimits
from tests.builders import make_phj, make_pod, slurm_job
from tests.unit.fakes import FakeNodeView, FakeSlurm
from tests.unit.kubefakes import FakeKube

Obj = dict[str, Any]


def shell_kube(objects: dict[str, Obj]) -> FakeKube:
    """The API server the shell writes to; a patch of an object the test did not store patches a stub."""
    return FakeKube(objects, stub_absent=True)


PHJ_PATH = "/apis/slinky.slurm.net/v1alpha1/namespaces/ns/placeholderjobs/p"
POD_PATH = "/api/v1/namespaces/ns/pods/p"


def placeholderjob(**status: Any) -> Obj:
    built = make_phj("p").uid("phj-uid").rv(3).generation(1).finalizer().owned_by_pod("p", "pod-uid")
    built.pods("p").spec(slurm={"nodes": 1})
    if status:
        built.status(**{"observedGeneration": 1, **status} if "jobId" in status else status)
    return built.obj()


def gated_pod() -> Obj:
    return make_pod("p").uid("pod-uid").rv(2).scheduler().gated().phase("Pending").obj()


def shell(
    kube: FakeKube, slurm: FakeSlurm, phj: Obj, pod: Obj | None, jobs: list[JobInfo], nodes: FakeNodeView | None = None
) -> PlaceholderJobs:
    """The shell over one PlaceholderJob; ``nodes``: Slurm's nodes as the node controller shows them
    (none listed yet, none left out, by default)."""
    config = Config()
    poller = SlurmPoller(slurm, config.bridgeId, config.pollPeriodSeconds, lambda _: None)
    ref = PhjRef(config.bridgeId, "ns", "p", "phj-uid")
    poller.snapshot = JobSnapshot({j.job_id: j for j in jobs}, {j.job_id: ref for j in jobs}, 0.0)
    poller.synced.set()
    pods, phjs = ObjectStore(), ParsedStore(PlaceholderJob.parse)
    phjs.upsert(phj)
    kube.objects[PHJ_PATH] = copy.deepcopy(phj)
    if pod is not None:
        pods.upsert(pod)
        kube.objects[POD_PATH] = copy.deepcopy(pod)
    view = nodes if nodes is not None else FakeNodeView()
    return PlaceholderJobs(config, kube, slurm, pods, phjs, poller, nodes=view)


def status_writes(kube: FakeKube) -> list[Obj]:
    return [b["status"] for (_, path), b in zip(kube.calls, kube.bodies, strict=True) if path.endswith("/status")]


def bind(jobs: PlaceholderJobs, node: str) -> None:
    """What the scheduler's bind looks like to the operator's pod cache."""
    pod = jobs.pods.get(("ns", "p"))
    assert pod is not None
    rv = str(int(pod["metadata"]["resourceVersion"]) + 1)
    jobs.pods.upsert(
        {**pod, "metadata": {**pod["metadata"], "resourceVersion": rv}, "spec": {**pod["spec"], "nodeName": node}}
    )


async def test_an_immediate_allocation_releases_the_pod_first_and_writes_status_once_when_bound() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = shell_kube({}), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    wait = await jobs.reconcile(("ns", "p"))
    assert wait is not None and 0 < wait <= lc.UNWRITTEN_SECONDS, "looked at again by then, bound or not"
    assert slurm.calls == ["allocate", "get 7"]
    assert status_writes(kube) == [], "nothing written before the pod is bound"
    assert kube.calls == [("patch", POD_PATH)], "the pod is released at once"
    assert kube.reasons == [], "routine steps post no Event (the scheduler's Scheduled says it)"
    assert jobs.poller.side("phj-uid").submitting, "remembered until a poll shows it"

    assert jobs.poller.snapshot is not None
    jobs.poller.snapshot.put(running, jobs.poller.snapshot.refs[7])
    assert await jobs.reconcile(("ns", "p")) == pytest.approx(wait, abs=1), "not bound yet: still nothing written"
    assert status_writes(kube) == []

    bind(jobs, "n1")
    assert await jobs.reconcile(("ns", "p")) is None
    [written] = status_writes(kube)
    assert written["jobId"] == 7 and written["phase"] == "Running" and written["nodeList"] == "n1"
    assert written["assignments"] == [{"pod": "p", "node": "n1"}] and written["submitTime"]
    assert written["observedGeneration"] == 1 and written["message"] == "Slurm job 7 allocated n1"
    assert {c["type"]: c["status"] for c in written["conditions"]} == {
        names.COND_SUBMITTED: "True",
        names.COND_ALLOCATED: "True",
        names.COND_READY: "True",
    }
    assert jobs._unwritten == {}
    await jobs.reconcile(("ns", "p"))
    assert len(status_writes(kube)) == 1, "and nothing more once it is written"


async def test_a_pod_held_for_a_missing_device_gets_its_allocation_written_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = shell_kube({}), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])

    async def missing(*_: Any) -> Prepared:
        return Prepared(problem="pod p: no device with Slurm index 0")

    monkeypatch.setattr(jobs.devices, "prepare", missing)
    assert await jobs.reconcile(("ns", "p")) == DEVICES_RETRY_SECONDS
    assert ("patch", POD_PATH) not in kube.calls, "held: not released"
    [written] = status_writes(kube)
    assert written["jobId"] == 7 and written["phase"] == "Allocated" and written["submitTime"]
    assert jobs.poller.snapshot is not None
    jobs.poller.snapshot.put(running, jobs.poller.snapshot.refs[7])
    await jobs.reconcile(("ns", "p"))
    assert len(status_writes(kube)) == 1, "written once, not again on each retry"


async def test_a_slow_bind_gets_the_allocation_written_when_the_wait_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lc, "UNWRITTEN_SECONDS", 0.0)
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = shell_kube({}), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    assert await jobs.reconcile(("ns", "p")) is None
    [written] = status_writes(kube)
    assert written["jobId"] == 7 and written["phase"] == "Allocated" and written["submitTime"]
    assert kube.calls.index(("patch", PHJ_PATH + "/status")) < kube.calls.index(("patch", POD_PATH))
    bind(jobs, "n1")
    assert jobs.poller.snapshot is not None
    jobs.poller.snapshot.put(running, jobs.poller.snapshot.refs[7])
    await jobs.reconcile(("ns", "p"))
    assert [w["phase"] for w in status_writes(kube)] == ["Allocated", "Running"]


async def test_a_restart_before_the_status_is_written_adopts_the_job_and_submits_nothing() -> None:
    running = JobInfo(job_id=7, name="ns/p", states=("RUNNING",), nodes=("n1",))
    kube, slurm = shell_kube({}), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    pod = jobs.pods.get(("ns", "p"))
    assert pod is not None and status_writes(kube) == []
    bound = {**pod, "spec": {**pod["spec"], "nodeName": "n1"}}
    # A new process: nothing in memory, the job found by the PlaceholderJob's uid in Slurm's list.
    kube2, slurm2 = shell_kube({}), FakeSlurm(running, next_id=6)
    jobs2 = shell(kube2, slurm2, placeholderjob(), bound, [running])
    assert await jobs2.reconcile(("ns", "p")) is None
    # Which spec the job was made with is not recorded yet: what it asks Slurm for is read (and
    # matches), and nothing is submitted, updated or cancelled.
    assert slurm2.calls == ["settings 7", "partitions"], "nothing submitted or cancelled"
    assert status_writes(kube2)[-1]["phase"] == "Running"
    assert all(w.get("jobId") in (None, 7) for w in status_writes(kube2))


@pytest.fixture
def announce_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued job's submit announced at once (lifecycle.QUEUED_QUIET_SECONDS 0), as before issue 31."""
    monkeypatch.setattr(lc, "QUEUED_QUIET_SECONDS", 0.0)


@pytest.mark.usefixtures("announce_at_once")
async def test_a_queued_job_says_so_and_its_pods_hear_when_slurm_allocates() -> None:
    pending = JobInfo(job_id=7, states=("PENDING",), reason="Resources")
    kube, slurm = shell_kube({}), FakeSlurm(pending, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    # Waiting in Slurm's queue is worth an Event, and the pod hears why (SlurmJobPending).
    assert kube.reasons == ["Submitted", names.EVENT_SLURM_JOB_PENDING, names.EVENT_SLURM_JOB_PENDING]
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    slurm.set(running)
    assert jobs.poller.snapshot is not None
    jobs.poller.snapshot.put(running, jobs.poller.snapshot.refs[7])
    await jobs.reconcile(("ns", "p"))
    assert ("patch", POD_PATH) in kube.calls and kube.reasons[3:] == ["SlurmAllocated"]
    assert jobs._told == {}, "forgotten once the wait is over"


async def test_a_member_missing_from_the_cache_is_read_before_the_job_is_given_up() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    phj = placeholderjob(jobId=7, phase="Running", assignments=[{"pod": "p", "node": "n1"}])
    kube, slurm = shell_kube({}), FakeSlurm(next_id=6)
    live = dict(gated_pod(), spec={"schedulerName": "slurm-bridge", "nodeName": "n1"}, status={"phase": "Running"})
    jobs = shell(kube, slurm, phj, None, [running])
    kube.objects[POD_PATH] = live  # the watch has not delivered it; a GET finds it
    await jobs.reconcile(("ns", "p"))
    assert ("get", POD_PATH) in kube.calls and slurm.calls == [] and "PodsDeleted" not in kube.reasons
    del kube.objects[POD_PATH]
    jobs.pods.delete(live)
    jobs.departures.note(dict(live, status={"phase": "Failed"}))  # the kubelet ended it, then it went
    gets = kube.calls.count(("get", POD_PATH))
    await jobs.reconcile(("ns", "p"))
    assert kube.calls.count(("get", POD_PATH)) == gets, "the watch delivered its deletion: no GET confirms it"
    # Marked released first (the job's admin_comment, the PlaceholderJob's ref where it is not
    # the bridge's yet), so the handoff holds nothing.
    assert slurm.calls == ["released 7", "cancel 7"] and kube.reasons[-1] == "PodsDeleted"
    assert kube.objects[PHJ_PATH]["status"]["phase"] == "Cancelled"


async def test_a_deleted_placeholderjob_ends_its_running_pod_and_keeps_the_job() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    phj = placeholderjob(jobId=7, phase="Running")
    phj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pod = dict(gated_pod(), spec={"schedulerName": "slurm-bridge", "nodeName": "n1"}, status={"phase": "Running"})
    kube, slurm = shell_kube({}), FakeSlurm(next_id=6)
    jobs = shell(kube, slurm, phj, pod, [running])
    assert await jobs.reconcile(("ns", "p")) == 5.0
    assert ("delete", POD_PATH) in kube.calls and slurm.calls == []
    assert kube.reasons == ["PlaceholderJobDeleted", "WaitingForPods"]
    await jobs.reconcile(("ns", "p"))
    assert kube.reasons.count("WaitingForPods") == 1, "said once"


class RefusingKube(FakeKube):
    """The API server refuses every patch of the pod with HTTP 422 (as for a label value over 63
    characters); ``new_uid`` makes a GET return another pod of that name instead."""

    def __init__(self, objects: dict[str, Obj], new_uid: str | None = None) -> None:
        super().__init__(objects)
        self.new_uid = new_uid

    async def patch(self, path: str, body: Any, patch_type: str = "merge") -> Obj:
        if path == POD_PATH:
            self.calls.append(("patch", path))
            self.bodies.append(body)
            raise Invalid(422, "Invalid", 'Pod "p" is invalid: metadata.labels: Invalid value: must be no more than 63')
        return await super().patch(path, body, patch_type)

    async def get(self, path: str, params: dict[str, str] | None = None) -> Obj | None:
        obj = copy.deepcopy(self.objects.get(path))  # not recorded: status_writes pairs calls with bodies
        if obj is not None and path == POD_PATH and self.new_uid:
            obj["metadata"]["uid"] = self.new_uid
        return obj


async def test_a_release_the_api_server_refuses_fails_the_placeholderjob_and_cancels_its_job() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = RefusingKube({}), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    assert await jobs.reconcile(("ns", "p")) == 0.0, "decided again at once: the terminal rows end the pod"
    assert kube.calls.count(("patch", POD_PATH)) == 2, "tried twice (the second time on a fresh read), then no more"
    assert "cancel 7" in slurm.calls, "the allocation is released"
    [written] = status_writes(kube)
    assert written["phase"] == names.PHASE_FAILED and written["reason"] == names.REASON_RELEASE_REJECTED
    assert written["jobId"] == 7, "the job id, still unwritten until then, is recorded with the failure"
    assert "metadata.labels" in written["message"], "the API server's own message"
    assert kube.reasons.count(names.REASON_RELEASE_REJECTED) == 2, "a Warning Event on the pod and the PlaceholderJob"

    # The next look ends the still-gated pod with the recorded reason and submits nothing.
    jobs.phjs.upsert(kube.objects[PHJ_PATH])
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls.count("allocate") == 1
    assert kube.bodies[-1]["status"]["phase"] == "Failed" and kube.calls[-1] == ("patch", POD_PATH + "/status")


async def test_a_422_for_a_new_pod_of_the_same_name_is_not_a_refusal() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = RefusingKube({}, new_uid="another-incarnation"), FakeSlurm(running, next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    assert kube.calls.count(("patch", POD_PATH)) == 1
    assert "cancel 7" not in slurm.calls and names.REASON_RELEASE_REJECTED not in kube.reasons


# ---- "why is my pod pending?": SlurmJobPending on the pod --------------------------------------------
def pending_events(kube: FakeKube) -> list[tuple[str, str]]:
    return [(kind, message) for kind, reason, message in kube.said if reason == names.EVENT_SLURM_JOB_PENDING]


def pending_job(reason: str, start: datetime | None = None) -> JobInfo:
    return slurm_job(7, "PENDING", reason=reason, start_time=start)


def put(jobs: PlaceholderJobs, job: JobInfo) -> None:
    assert jobs.poller.snapshot is not None
    jobs.poller.snapshot.put(job, jobs.poller.snapshot.refs[7])


@pytest.mark.usefixtures("announce_at_once")
async def test_a_waiting_pod_hears_slurms_reason_and_expected_start_on_submit() -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    kube, slurm = shell_kube({}), FakeSlurm(pending_job("Resources", start), next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    iso = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    message = f"Slurm job 7 is waiting: Resources (the nodes it needs are busy); Slurm expects it to start at {iso}"
    assert pending_events(kube) == [("PlaceholderJob", message), ("Pod", message)]
    [written] = status_writes(kube)
    assert written["reason"] == "Resources" and written["expectedStart"] == iso, "the -o wide columns"
    for _ in range(3):  # polls that see the same wait tell nothing more and write nothing
        await jobs.reconcile(("ns", "p"))
    assert len(pending_events(kube)) == 2 and len(status_writes(kube)) == 1


@pytest.mark.usefixtures("announce_at_once")
async def test_a_new_reason_is_told_at_once_a_reason_told_before_and_a_moved_start_not_within_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kube, slurm = shell_kube({}), FakeSlurm(pending_job(""), next_id=6)
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    assert pending_events(kube) == [], "Slurm has not said why yet: the PlaceholderJob's Submitted says it waits"
    put(jobs, pending_job("Priority"))
    assert await jobs.reconcile(("ns", "p")) is None
    assert [m for _, m in pending_events(kube)][-1].startswith("Slurm job 7 is waiting: Priority (")
    put(jobs, pending_job("Resources"))
    await jobs.reconcile(("ns", "p"))
    assert len(pending_events(kube)) == 4, "a reason not told before: at once"
    put(jobs, pending_job("Priority"))
    wait = await jobs.reconcile(("ns", "p"))
    assert len(pending_events(kube)) == 4, "Priority again (Slurm's reasons flip): held"
    assert wait is not None and 0 < wait <= pd.PENDING_REPORT_SECONDS
    assert status_writes(kube)[-1]["reason"] == "Priority", "status mirrors Slurm all the same"
    later = datetime.now(UTC) + timedelta(hours=1)
    put(jobs, pending_job("Priority", later))
    await jobs.reconcile(("ns", "p"))
    assert len(pending_events(kube)) == 4 and "expectedStart" not in status_writes(kube)[-1], "held too"
    monkeypatch.setattr(pd, "PENDING_REPORT_SECONDS", 0.0)  # the window has passed
    await jobs.reconcile(("ns", "p"))
    assert len(pending_events(kube)) == 6
    assert pending_events(kube)[-1][1].endswith(f"start at {later.strftime('%Y-%m-%dT%H:%M:%SZ')}")
    assert status_writes(kube)[-1] == {"expectedStart": later.strftime("%Y-%m-%dT%H:%M:%SZ")}


async def test_a_restarted_operator_does_not_tell_the_same_wait_again() -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    iso = start.strftime("%Y-%m-%dT%H:%M:%SZ")
    phj = placeholderjob(
        jobId=7, phase="Pending", slurmState="PENDING", reason="Resources", expectedStart=iso, observedGeneration=1
    )
    kube, slurm = shell_kube({}), FakeSlurm(next_id=6)
    jobs = shell(kube, slurm, phj, gated_pod(), [pending_job("Resources", start + timedelta(seconds=30))])
    assert await jobs.reconcile(("ns", "p")) is None
    assert pending_events(kube) == [] and status_writes(kube) == [], "status says what was told; 30 s is no news"
    assert slurm.calls == []


# ---- a changed spec and the pending job (decisions/specupdate.py decides) ------------------------------
def changed_spec(**slurm: Any) -> Obj:
    """A pending single pod's PlaceholderJob whose spec (generation 2) changed after its submit."""
    obj = placeholderjob(jobId=7, phase="Pending", slurmState="PENDING")
    obj["metadata"]["generation"] = 2
    obj["spec"]["slurm"] = {"nodes": 1, **slurm}
    obj["spec"]["group"] = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid"}
    return obj


async def test_a_changed_spec_is_sent_once_and_said_on_the_phj_its_pod_and_its_workload() -> None:
    pending = JobInfo(job_id=7, name="ns/p", states=("PENDING",), time_limit_minutes=5)
    kube, slurm = shell_kube({}), FakeSlurm(pending)
    jobs = shell(kube, slurm, changed_spec(timeLimitMinutes=7), gated_pod(), [pending])
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls == ["settings 7", "partitions", "update 7"]
    ((job_id, request, name, unlimited),) = slurm.updates
    assert (job_id, request.time_limit_minutes, name, unlimited) == (7, 7, "ns/p", False)
    written = status_writes(kube)[0]
    assert written["observedGeneration"] == 2
    (applied,) = [c for c in written["conditions"] if c["type"] == names.COND_SPEC_APPLIED]
    assert (applied["status"], applied["reason"]) == ("True", names.REASON_SLURM_JOB_UPDATED)
    assert [(kind, reason) for kind, reason, _ in kube.said] == [
        ("PlaceholderJob", names.REASON_SLURM_JOB_UPDATED), ("Pod", names.REASON_SLURM_JOB_UPDATED),
        ("Job", names.REASON_SLURM_JOB_UPDATED),
    ]  # fmt: skip
    assert "time limit 5 min -> 7 min" in kube.said[0][2]
    # The settled generation is not sent again: the next reconcile reads nothing and sends nothing.
    jobs.phjs.upsert(kube.objects[PHJ_PATH])
    slurm.calls.clear()
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls == []


async def test_slurms_refusal_of_a_changed_spec_is_said_with_its_words() -> None:
    pending = JobInfo(job_id=7, name="ns/p", states=("PENDING",), partition="main")
    kube, slurm = shell_kube({}), FakeSlurm(pending)
    slurm.update_refusal = SlurmError("POST job/7: Slurm refused the job update", status=422,
                                      errors=[SlurmErrorDetail("Invalid partition name specified", 2000)])  # fmt: skip
    jobs = shell(kube, slurm, changed_spec(partition="nope"), gated_pod(), [pending])
    await jobs.reconcile(("ns", "p"))
    (applied,) = [c for c in status_writes(kube)[0]["conditions"] if c["type"] == names.COND_SPEC_APPLIED]
    assert (applied["status"], applied["reason"]) == ("False", names.REASON_UPDATE_REJECTED)
    assert "Invalid partition name specified (Slurm error 2000)" in applied["message"]
    assert [reason for _, reason, _ in kube.said] == [names.REASON_UPDATE_REJECTED] * 3


async def test_an_update_slurm_could_not_be_asked_is_retried_with_backoff() -> None:
    pending = JobInfo(job_id=7, name="ns/p", states=("PENDING",))
    kube, slurm = shell_kube({}), FakeSlurm(pending)
    slurm.update_refusal = SlurmUnavailable("slurmrestd down")
    jobs = shell(kube, slurm, changed_spec(timeLimitMinutes=7), gated_pod(), [pending])
    with pytest.raises(SlurmUnavailable):
        await jobs.reconcile(("ns", "p"))
    assert status_writes(kube) == [], "the generation is not settled: it is decided again"


async def test_the_partitions_limits_are_read_again_for_a_partition_made_since() -> None:
    """The limits are kept 30 s; a spec naming a partition they do not list reads them again, so
    its MaxTime is checked (a partition made a moment ago, scontrol create partition)."""
    pending = JobInfo(job_id=7, name="ns/p", states=("PENDING",), partition="main", time_limit_minutes=5)
    kube, slurm = shell_kube({}), FakeSlurm(pending)
    slurm.partitions = [PartitionLimits(name="main")]
    jobs = shell(kube, slurm, changed_spec(partition="main", timeLimitMinutes=7), gated_pod(), [pending])
    await jobs.reconcile(("ns", "p"))
    slurm.partitions.append(PartitionLimits(name="short", max_time_minutes=30))
    obj = changed_spec(partition="short", timeLimitMinutes=45)
    obj["metadata"]["generation"] = 3
    obj["status"]["observedGeneration"] = 2
    jobs.phjs.upsert({**obj, "metadata": {**obj["metadata"], "resourceVersion": "9"}})
    slurm.calls.clear()
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls == ["settings 7", "partitions"], "read again, and nothing sent"
    assert kube.said[-1][1] == names.REASON_UPDATE_NOT_APPLIED and "MaxTime (30 min)" in kube.said[-1][2]


async def test_a_tenants_job_allocated_in_the_wrong_group_is_cancelled_unused_and_queued() -> None:
    """Allocated as alice (her primary group 2001) for a request naming group 3000: the job is
    cancelled before the pod is released, and the job is queued instead (job/submit sets it)."""
    phj = make_phj("p").uid("phj-uid").rv(3).generation(1).finalizer().owned_by_pod("p", "pod-uid")
    phj.pods("p").spec(slurm={"nodes": 1, "userName": "alice", "groupId": 3000})
    alice = JobInfo(
        job_id=7,
        states=("RUNNING",),
        nodes=("n1",),
        user_name="alice",
        user_id=2001,
        group_name="team-a",
        group_id=2001,
    )
    kube, slurm = shell_kube({}), FakeSlurm(alice, JobInfo(job_id=8, states=("PENDING",)), next_id=6)
    jobs = shell(kube, slurm, phj.obj(), gated_pod(), [])
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls == [
        "allocate as alice", "mark 7", "get 7", "released 7", "cancel 7", "partitions", "submit"
    ], ("marked released before the cancel (no handoff hold: no pod used it); the bridge's token queues it once its "
        "partition is known not RootOnly; a queued job is read later")  # fmt: skip
    assert ("patch", POD_PATH) not in kube.calls, "the pod never saw the wrong job"
    assert jobs._unwritten["phj-uid"].status.job_id == 8, "the queued job's submit, held for the quiet time"


async def test_a_queued_job_slurm_starts_at_once_costs_no_event_and_one_status_write() -> None:
    """Issue 31: a queued job that starts within lifecycle.QUEUED_QUIET_SECONDS is not announced as
    waiting; its pod is released first and the status written once, when the pod is bound."""
    pending = JobInfo(job_id=7, states=("PENDING",), reason="Priority")
    kube, slurm = shell_kube({}), FakeSlurm(pending, next_id=6)
    slurm.allocate_refusal = SlurmError("busy", errors=[SlurmErrorDetail("Requested nodes are busy", 2016)])
    jobs = shell(kube, slurm, placeholderjob(), gated_pod(), [])
    wait = await jobs.reconcile(("ns", "p"))
    assert wait == pytest.approx(lc.QUEUED_QUIET_SECONDS, abs=0.5) and kube.reasons == [] and kube.calls == []
    assert slurm.calls == ["allocate", "submit"], "a queued job is not read back: nothing is said yet"
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    slurm.set(running)
    ref = jobs.poller.news(7, "started")  # slurmctld's hook: job 7 started
    assert ref is not None
    await jobs.poller.read_now({7: ref})
    assert slurm.calls[-1] == "get 7"
    await jobs.reconcile(("ns", "p"))
    assert kube.calls == [("patch", POD_PATH)] and kube.reasons == [], "released at once, nothing said"
    bind(jobs, "n1")
    assert await jobs.reconcile(("ns", "p")) is None
    [written] = status_writes(kube)
    assert written["jobId"] == 7 and written["phase"] == "Running" and kube.reasons == []
