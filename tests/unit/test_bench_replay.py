"""bench/replay.py, the operator's hot path replayed with no API server and no Slurm: the requests
it counts per pod are the operator's real ones (docs/performance-log.md, "API writes per bridge pod"),
so the CPU-per-pod figure cannot silently measure another path than the one the cluster runs."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

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
    assert r.slurm == {"POST job/allocate": PODS, "GET job/{id}": PODS, "POST job/{id}": PODS, "DELETE job/{id}": PODS}
    # the watch events until it runs: pod ADDED, released, bound, running; PlaceholderJob ADDED, status
    assert r.placed_events == {"pods": 4 * PODS, names.PLURAL: 2 * PODS}
    # then the pod terminating, Failed (the kubelet's terminal phase) and deleted (the
    # PlaceholderJob's depend on when its reconciles run)
    assert r.events["pods"] == 7 * PODS
    assert r.left == [], "every PlaceholderJob finalized and gone"
    assert r.cpu_ms["place"] > 0 and r.cpu_ms["end"] > 0


async def test_a_queued_pods_start_is_read_once_after_the_hooks_notice() -> None:
    """The queued path (issue 39): a submit, Slurm's start a little later, slurmctld's notice,
    one read, the release; the same seven writes until it runs."""
    r = await replay.replay(PODS, "watch", settle_seconds=30, path="queued")
    assert replay.check(r) == []
    assert r.hints_read == PODS, "every start read after its notice"
    assert r.slurm == {"POST job/submit": PODS, "GET job/{id}": PODS, "POST job/{id}": PODS, "DELETE job/{id}": PODS}
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
