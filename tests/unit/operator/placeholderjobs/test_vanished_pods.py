"""A pod that vanishes is not a pod that stopped (docs/design/handoff.md, "A pod that vanishes"): the
departures the pod watch records, the lifecycle's release held for a vanished member
(operator/placeholderjobs/decisions/vanished.py), across a restart, and the shell's record."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.vanished import record_value, recorded
from slurm_bridge.operator.placeholderjobs.sync.phjsync import departed_of
from slurm_bridge.operator.runtime import departures as departures_module
from slurm_bridge.operator.runtime.departures import Departure, Departures, by_job, pod_job_index, running_in
from slurm_bridge.operator.runtime.store import ObjectStore
from slurm_bridge.slurm.models import JobInfo
from tests.builders import make_pod
from tests.unit.fakes import FakeSlurm
from tests.unit.operator.placeholderjobs.test_lifecycle import JOB, NOW, phj, slurm_side, summary
from tests.unit.operator.placeholderjobs.test_phjsync import placeholderjob, shell, shell_kube
from tests.unit.situations import decide_in

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
MARGIN, MAX_GRACE = 15, 300
HANDOFF = lc.Handoff(MARGIN, max_grace=MAX_GRACE)


def last_state(phase: str, *, node: str | None = "n1", grace: int = 20, job_id: int | None = JOB) -> Obj:
    built = make_pod("p").uid("p-uid").scheduler().phase(phase)
    if node:
        built.node(node)
    obj = built.obj()
    obj["spec"]["terminationGracePeriodSeconds"] = grace
    if job_id is not None:
        obj["metadata"]["labels"] = {names.LABEL_SLURM_JOB_ID: str(job_id)}
    return obj


# ---- departures -------------------------------------------------------------------------------------
def test_a_pod_removed_before_a_terminal_phase_may_run_for_its_grace_period_and_the_margin() -> None:
    at = NOW.wall
    assert Departure(last_state("Running"), at).runs_until(MARGIN) == at + timedelta(seconds=20 + MARGIN)
    assert Departure(last_state("Failed"), at).runs_until(MARGIN) is None, "the kubelet reported it stopped"
    assert Departure(last_state("Succeeded"), at).runs_until(MARGIN) is None
    assert Departure(last_state("Pending", node=None), at).runs_until(MARGIN) is None, "never bound: never ran"


def test_departures_are_found_by_name_and_by_job() -> None:
    d = Departures(clock=lambda: NOW.wall)
    d.note(last_state("Running"))
    assert d.of("ns", "p") is not None and d.of("ns", "q") is None
    assert [x.pod["metadata"]["name"] for x in d.by_job({JOB})[JOB]] == ["p"] and d.by_job({8}) == {}


def test_the_pod_store_finds_a_jobs_pods_and_those_that_run() -> None:
    store = ObjectStore(index=pod_job_index)
    store.upsert(last_state("Running"))
    assert store.indexed(by_job(JOB)) and store.indexed(running_in(JOB))
    store.upsert(dict(last_state("Failed"), metadata={**last_state("Failed")["metadata"], "resourceVersion": "9"}))
    assert store.indexed(by_job(JOB)) and not store.indexed(running_in(JOB)), "an ended pod runs no more"


# ---- the lifecycle: the release waits -------------------------------------------------------------------
def decided(obj: Obj, departed: dict[str, datetime | None], state: str = "RUNNING") -> pl.Plan:
    parsed = PlaceholderJob.parse(obj)
    gone = {"p": None}
    return decide_in(parsed, slurm_side(state), gone, NOW, gone, scheduler="s", handoff=HANDOFF, departed=departed)


def test_a_running_jobs_release_waits_for_a_vanished_members_grace_and_is_recorded() -> None:
    until = NOW.wall + timedelta(seconds=35)
    plan = decided(phj("Running"), {"p": until})
    assert not any(isinstance(a, pl.Cancel) for a in plan.actions), "not released under a container that may run"
    [record] = [a for a in plan.actions if isinstance(a, pl.RecordVanished)]
    assert record.until == (("p", until),) and "Slurm job 7 keeps its CPUs" in record.message
    assert plan.requeue == 35.0
    assert ("status", "Cancelled", "PodsDeleted") in [summary(a) for a in plan.actions], "the pods' end is said"


def test_a_member_gone_unseen_is_held_for_the_longest_grace_fail_safe() -> None:
    plan = decided(phj("Running"), {})  # it went while the operator was away
    [record] = [a for a in plan.actions if isinstance(a, pl.RecordVanished)]
    assert record.until == (("p", NOW.wall + timedelta(seconds=MAX_GRACE + MARGIN)),)
    assert not any(isinstance(a, pl.Cancel) for a in plan.actions)


def test_a_member_that_ended_before_it_went_releases_at_once() -> None:
    plan = decided(phj("Running"), {"p": None})
    assert [a.job_id for a in plan.actions if isinstance(a, pl.Cancel)] == [JOB]
    assert not any(isinstance(a, pl.RecordVanished) for a in plan.actions)


def test_the_record_survives_a_restart_and_releases_when_its_time_passed() -> None:
    held = phj("Failed", reason=names.REASON_PODS_DELETED)
    later = NOW.wall + timedelta(seconds=10)
    held["metadata"]["annotations"] = {names.ANN_VANISHED_PODS: record_value({"p": later})}
    plan = decided(held, {})  # restarted: no departure, the record says
    assert [summary(a) for a in plan.actions] == [] and plan.requeue == 10.0, "no second record, no cancel"
    held["metadata"]["annotations"] = {names.ANN_VANISHED_PODS: record_value({"p": NOW.wall})}
    assert [summary(a) for a in decided(held, {}).actions] == [("cancel", JOB)]


def test_a_pending_job_holds_no_cores_and_is_cancelled_at_once() -> None:
    plan = decided(phj("Running"), {"p": NOW.wall + timedelta(seconds=35)}, state="PENDING")
    assert [a.job_id for a in plan.actions if isinstance(a, pl.Cancel)] == [JOB]


def test_a_deleted_placeholderjob_keeps_its_finalizer_while_a_vanished_member_may_run() -> None:
    plan = decided(phj("Deleted"), {"p": NOW.wall + timedelta(seconds=35)})
    kinds = [type(a).__name__ for a in plan.actions]
    assert "Finalize" not in kinds and "Cancel" not in kinds and "RecordVanished" in kinds
    assert not any(isinstance(a, pl.Event) and a.reason == names.REASON_CANCELLED for a in plan.actions)
    assert "Finalize" in [type(a).__name__ for a in decided(phj("Deleted"), {"p": None}).actions]


def test_an_unreadable_record_counts_as_none() -> None:
    obj = phj("Running")
    obj["metadata"]["annotations"] = {names.ANN_VANISHED_PODS: "{not json"}
    assert recorded(PlaceholderJob.parse(obj)) == {}


# ---- the shell ------------------------------------------------------------------------------------------
async def test_the_shell_records_a_vanished_member_and_cancels_nothing_then_releases_after_its_time() -> None:
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",))
    kube, slurm = shell_kube({}), FakeSlurm(next_id=6)
    jobs = shell(kube, slurm, placeholderjob(jobId=7, phase="Running"), None, [running])
    vanished = last_state("Running")
    vanished["metadata"]["uid"] = "pod-uid"
    jobs.departures.note(vanished)  # force-deleted: the DELETED event's pod was Running
    await jobs.reconcile(("ns", "p"))
    assert slurm.calls == [], "the job keeps its cores"
    [body] = [b for b in kube.bodies if isinstance(b, dict) and "metadata" in b]
    until = json.loads(body["metadata"]["annotations"][names.ANN_VANISHED_PODS])["p"]
    assert datetime.fromisoformat(until) > datetime.now(datetime.fromisoformat(until).tzinfo)
    assert names.REASON_PODS_VANISHED in kube.reasons
    # A restarted shell (no departures) with the record: still nothing; once it passed: released.
    recorded_phj = placeholderjob(jobId=7, phase="Running")
    recorded_phj["metadata"]["annotations"] = body["metadata"]["annotations"]
    again = shell(shell_kube({}), slurm, recorded_phj, None, [running])
    await again.reconcile(("ns", "p"))
    assert slurm.calls == []
    recorded_phj["metadata"]["annotations"] = {names.ANN_VANISHED_PODS: record_value({"p": NOW.wall})}
    done = shell(shell_kube({}), slurm, recorded_phj, None, [running])
    await done.reconcile(("ns", "p"))
    assert slurm.calls == ["released 7", "cancel 7"]


def test_a_vanished_pod_holds_its_job_only_where_native_work_may_run() -> None:
    obj = placeholderjob(jobId=7, phase="Running", assignments=[{"pod": "p", "node": "n1"}])
    parsed = PlaceholderJob.parse(obj)
    departures = Departures(clock=lambda: NOW.wall)
    vanished = last_state("Running")
    vanished["metadata"]["uid"] = "pod-uid"
    departures.note(vanished)
    until = NOW.wall + timedelta(seconds=20 + MARGIN)
    assert departed_of(parsed, {"p": None}, departures, MARGIN, lambda _: True) == {"p": until}
    assert departed_of(parsed, {"p": None}, departures, MARGIN, lambda _: None) == {"p": until}, "not known: held"
    assert departed_of(parsed, {"p": None}, departures, MARGIN, lambda _: False) == {"p": None}, "an EXTERNAL node"
    unseen = Departures()
    assert departed_of(parsed, {"p": None}, unseen, MARGIN, lambda _: True) == {}, "gone unseen: held fail safe"
    assert departed_of(parsed, {"p": None}, unseen, MARGIN, lambda _: False) == {"p": None}


def test_an_ended_pods_departure_is_kept_briefly_a_vanished_ones_past_the_longest_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    d = Departures(clock=lambda: NOW.wall)
    ended = last_state("Failed")
    vanished = last_state("Running")
    vanished["metadata"]["name"] = "q"
    d.note(ended)
    d.note(vanished)
    kept = d.of("ns", "q")
    assert kept is not None and set(kept.pod) == {"metadata", "spec", "status"}, "a slim copy"
    clock[0] += departures_module.KEEP_ENDED_SECONDS + 1
    d.note(last_state("Succeeded") | {"metadata": {"name": "r", "namespace": "ns"}})
    assert d.of("ns", "p") is None and d.of("ns", "q") is not None
    clock[0] += departures_module.KEEP_SECONDS
    d.note(last_state("Succeeded") | {"metadata": {"name": "s", "namespace": "ns"}})
    assert d.of("ns", "q") is None and len(d) == 1
