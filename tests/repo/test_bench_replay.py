"""bench/replay.py, the operator's hot path replayed with no API server and no Slurm: the requests
it counts per pod are the operator's real ones (bench/log, "API writes per bridge pod"),
so the CPU-per-pod figure cannot silently measure another path than the one the cluster runs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import replay  # bench/ is not a package

from slurm_bridge import names

PODS = 5
# The 7 writes of a pod placed at once, by who makes them; the operator's are its own 3.
PLACED = {
    "user POST pods": 1,
    "operator POST placeholderjobs": 1,
    "operator PATCH pods": 1,
    "extender POST pods/binding": 1,
    "kube-scheduler POST events": 1,
    "operator PATCH placeholderjobs/status": 1,
    "kubelet PATCH pods/status": 1,
}


def cancel_calls(r: replay.Result) -> int:
    """The cancel calls (taken out of ``r.slurm``): one job's, or those of jobs that ended together
    in one (``DELETE jobs/``); every job cancelled exactly once is ``r.cancels``' check."""
    return r.slurm.pop("DELETE job/{id}", 0) + r.slurm.pop("DELETE jobs/", 0)


@pytest.mark.parametrize("mode", ["watch", "direct", "kopf"])
async def test_the_replay_sends_the_seven_writes_per_pod_and_releases_each_pod_once(mode: str) -> None:
    r = await replay.replay(PODS, mode, settle_seconds=30)
    assert replay.check(r) == []
    assert {k: n / PODS for k, n in r.placed_requests.items()} == PLACED
    assert sum(n for k, n in r.placed_requests.items() if k.startswith("operator ")) == 3 * PODS
    assert r.released == Counter({f"b{i:04d}": 1 for i in range(PODS)}), "every pod released exactly once"
    assert r.phases == Counter({names.PHASE_RUNNING: PODS})
    # one allocation, one read and one cancel per pod: no resubmit, no second job; and the released
    # mark (the job's admin_comment) before the cancel, so the handoff's EpilogSlurmctld holds
    # nothing for a pod that stopped
    # (docs/colocation.md; skipped where Slurm's configuration has no EpilogSlurmctld)
    assert cancel_calls(r) in range(1, PODS + 1), "cancels that come together go in one call"
    assert r.slurm == {"POST job/allocate": PODS, "GET job/{id}": PODS, "POST job/{id}": PODS}
    assert r.cancels == {"marked": PODS}, "every job carried the released mark when it was cancelled"
    # slurmctld's hook sends nothing: an allocated job's comment asks for no start notice (the
    # answer said it started), and the released mark's for no end notice (the bridge ends it)
    assert r.notices == {}
    assert r.hook_answers == {} and r.hints_read == 0
    # the spec-update check ran on the pod events after the join and on each reconcile, found nothing
    assert r.options_recorded == PODS
    assert set(r.spec_checks) == {"pod", "phj"} and r.spec_checks["pod"] >= PODS
    assert "options" not in r.reconciles
    # the watch events until it runs: pod ADDED, released, bound, running; PlaceholderJob ADDED, status
    assert r.placed_events == {"pods": 4 * PODS, names.PLURAL: 2 * PODS}
    # then the pod terminating, Failed (the kubelet's terminal phase) and deleted (the
    # PlaceholderJob's depend on when its reconciles run)
    assert r.events["pods"] == 7 * PODS
    assert r.left == [], "every PlaceholderJob finalized and gone"
    assert "operator GET pods" not in r.requests, "a deletion the pod watch delivered is not confirmed by a GET"
    assert r.cpu_ms["place"] > 0 and r.cpu_ms["end"] > 0


async def test_a_queued_pods_start_is_read_once_after_the_hooks_notice() -> None:
    """The queued path (issue 39): a submit, Slurm's start a little later, slurmctld's notice,
    one read, the release; the same seven writes until it runs."""
    r = await replay.replay(PODS, "watch", settle_seconds=30, path="queued")
    assert replay.check(r) == []
    assert r.hints_read == PODS, "every start read after its notice"
    assert r.notices == {"started": PODS}, "no end notice: the released mark's comment asks for none"
    assert r.hook_answers == {202: PODS}, "the start notices are news"
    # and the partitions' flags, before a job goes with the bridge's token, read once and kept
    assert cancel_calls(r) in range(1, PODS + 1)
    assert r.slurm == {"POST job/submit": PODS, "GET job/{id}": PODS, "POST job/{id}": PODS, "GET partitions/": 1}
    assert r.cancels == {"marked": PODS}
    assert {k: n / PODS for k, n in r.placed_requests.items()} == PLACED
    assert r.released == Counter({f"b{i:04d}": 1 for i in range(PODS)})


async def test_the_end_of_a_pods_life_cancels_its_job_and_removes_the_finalizer() -> None:
    r = await replay.replay(PODS, "direct", settle_seconds=30)
    ops = Counter({k: n for k, n in r.requests.items() if k.startswith("operator ")})
    assert ops["operator PATCH placeholderjobs"] >= PODS, "the finalizer removed"
    assert ops["operator POST placeholderjobs"] == PODS, "no PlaceholderJob made twice"
    assert r.requests["garbage-collector DELETE placeholderjobs"] == PODS


def test_json_patch_applies_the_operators_ops_and_fails_a_test() -> None:
    obj = {"metadata": {"uid": "u", "finalizers": ["a", "b"], "labels": {"x": "1"}}, "spec": {"g": [1]}}
    out = replay.json_patch(obj, [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "2"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "remove", "path": "/spec/g"},
    ])  # fmt: skip
    assert out == {"metadata": {"uid": "u", "finalizers": ["b"], "labels": {"x": "1", "a/b": "2"}}, "spec": {}}
    assert replay.json_patch(obj, [{"op": "test", "path": "/metadata/uid", "value": "v"}]) is None
    assert replay.merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}


async def test_the_check_refuses_a_replay_that_left_the_usual_path() -> None:
    """What check() guards: a notice lost or read for nothing, a spec change found, a job cancelled
    without its released mark, a read more than the path's one."""
    r = await replay.replay(PODS, "direct", settle_seconds=30)
    assert replay.check(r) == []
    off = [
        dataclasses.replace(r, notices={"started": PODS}),
        dataclasses.replace(r, hook_answers={200: PODS}),
        dataclasses.replace(r, spec_checks={**r.spec_checks, "pod changed": 1}),
        dataclasses.replace(r, cancels={"marked": PODS - 1, "unmarked": 1}),
        dataclasses.replace(r, slurm={**r.slurm, "GET job/{id}": PODS + 1}),
        dataclasses.replace(r, options_recorded=PODS - 1),
    ]
    assert all(replay.check(x) for x in off), [replay.check(x) for x in off]


async def test_slurms_stand_in_answers_the_mark_as_slurmrestd_and_applies_it() -> None:
    """The released mark (a bare job_desc_msg setting admin_comment and comment): applied to the
    job, answered with slurmrestd's null results (which the client's codec reads as no failure);
    the cancel counts the mark. The hook's notices follow the job's comment as the script's test
    does: a job allocated without one is told of at its start and end, a job marked released not
    at its end."""
    slurm = replay.ReplaySlurm()
    sent: list[tuple[int, str]] = []
    slurm.notify = lambda job_id, event: sent.append((job_id, event))
    base = f"http://slurmrestd.invalid/slurm/{replay.SLURM_API}"
    job = {"job": {"name": "n", "admin_comment": 'slurm-bridge:{"bridge":"b"}'}}
    answer = slurm(httpx.Request("POST", f"{base}/job/allocate", json=job))
    job_id = answer.json()["job_id"]
    mark = 'slurm-bridge:{"bridge":"b","released":true}'
    quiet = 'slurm-bridge:{"notify":"none"}'
    answer = slurm(httpx.Request("POST", f"{base}/job/{job_id}", json={"admin_comment": mark, "comment": quiet}))
    assert answer.status_code == 200 and answer.json()["results"] is None and answer.json()["errors"] == []
    assert slurm.jobs[job_id]["admin_comment"] == mark and slurm.jobs[job_id]["comment"] == quiet
    read = slurm(httpx.Request("GET", f"{base}/job/{job_id}")).json()["jobs"][0]
    assert read["admin_comment"] == mark and read["job_state"] == ["RUNNING"]
    slurm(httpx.Request("DELETE", f"{base}/job/{job_id}"))
    for _ in range(2 * replay.ACTOR_DELAY_TURNS + 2):
        await asyncio.sleep(0)
    assert slurm.cancels == {"marked": 1} and slurm.later.pending == 0
    assert sent == [(job_id, "started")], "told of its start (no comment), not of the end it was marked for"
    assert slurm.unknown == []


def test_the_stand_in_api_server_counts_a_placeholderjobs_generation_as_kubernetes_does() -> None:
    """Its spec's changes and its deletion (a custom resource with finalizers) bump the generation,
    the spec-update check's input; status and metadata writes do not."""
    server = replay.ApiServer()
    meta = {"name": "p", "namespace": replay.NAMESPACE, "finalizers": ["f"]}
    body = {"apiVersion": names.API_VERSION, "kind": names.KIND, "metadata": meta, "spec": {"pods": ["p"]}}
    path = f"{replay.PHJ_PREFIX}/p"
    server.handle("POST", replay.PHJ_PREFIX, json.dumps(body).encode(), "application/json")
    assert server.objects[path]["metadata"]["generation"] == 1
    merge = "application/merge-patch+json"
    server.handle("PATCH", f"{path}/status", json.dumps({"status": {"phase": "Running"}}).encode(), merge)
    server.handle("PATCH", path, json.dumps({"metadata": {"annotations": {"a": "b"}}}).encode(), merge)
    assert server.objects[path]["metadata"]["generation"] == 1
    server.handle("PATCH", path, json.dumps({"spec": {"pods": ["p", "q"]}}).encode(), merge)
    assert server.objects[path]["metadata"]["generation"] == 2
    server._collect("p")  # the garbage collector's delete
    meta = server.objects[path]["metadata"]
    assert meta["generation"] == 3 and meta["deletionGracePeriodSeconds"] == 0 and meta["deletionTimestamp"]
