"""Pure decisions of the PlaceholderJob controller."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from slurm_bridge import names
from slurm_bridge.core.kubeformats import label_value
from slurm_bridge.kube import conditions
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.decisions import allocation, phjstatus, pods
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import (
    decode_admin_comment,
    default_job_name,
    encode_admin_comment,
)
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.rules import podphase
from slurm_bridge.slurm.models import JobInfo
from tests.builders import make_pod


def test_admin_comment_round_trip_and_foreign_comments() -> None:
    ref = PhjRef("slurm-bridge", "ns", "name", "0000-1111")
    comment = encode_admin_comment(ref)
    assert comment.startswith(names.ADMIN_COMMENT_PREFIX)
    assert decode_admin_comment(comment) == ref
    assert decode_admin_comment("set by an admin") is None
    assert decode_admin_comment(names.ADMIN_COMMENT_PREFIX + "{not json") is None
    assert decode_admin_comment(names.ADMIN_COMMENT_PREFIX + '{"ns": "a"}') is None


@pytest.mark.parametrize(
    ("pods", "nodes", "current", "expected"),
    [
        (["p"], ["n1"], {}, {"p": "n1"}),
        (["b", "a"], ["n1", "n2"], {}, {"a": "n1", "b": "n2"}),
        (["a", "b"], ["n1", "n2"], {"b": "n1"}, {"b": "n1", "a": "n2"}),  # kept across restarts
        (["a", "b"], ["n1"], {}, None),  # too few nodes
        (["a"], ["n2"], {"a": "n1"}, {"a": "n2"}),  # stale assignment to a node no longer held
    ],
)
def test_assign_nodes(
    pods: list[str], nodes: list[str], current: dict[str, str], expected: dict[str, str] | None
) -> None:
    assert allocation.assign_nodes(pods, nodes, current) == expected


def test_assignments_are_distinct() -> None:
    got = allocation.assign_nodes([f"p{i}" for i in range(8)], [f"n{i}" for i in range(8)], {})
    assert got is not None and len(set(got.values())) == 8


@pytest.mark.parametrize(
    ("phases", "phase", "reason"),
    [
        ({"a": "Succeeded", "b": "Succeeded"}, names.PHASE_COMPLETED, "PodsSucceeded"),
        ({"a": None}, names.PHASE_CANCELLED, "PodsDeleted"),
        ({"a": "Failed", "b": "Succeeded"}, names.PHASE_FAILED, "PodsFailed"),
        ({"a": None, "b": "Succeeded"}, names.PHASE_FAILED, "PodsFailed"),
    ],
)
def test_pods_end_phase(phases: dict[str, str | None], phase: str, reason: str) -> None:
    got = phjstatus.pods_end_phase(phases)
    assert got[:2] == (phase, reason)


@pytest.mark.parametrize(
    ("state", "phase", "reason"),
    [
        ("CANCELLED", names.PHASE_CANCELLED, "SlurmJobCancelled"),
        ("TIMEOUT", names.PHASE_FAILED, "SlurmJobTimeout"),
        ("NODE_FAIL", names.PHASE_FAILED, "SlurmJobNodeFail"),
        ("PREEMPTED", names.PHASE_FAILED, "SlurmJobPreempted"),
        ("COMPLETED", names.PHASE_COMPLETED, "SlurmJobCompleted"),
    ],
)
def test_end_of_job_names_what_slurm_did(state: str, phase: str, reason: str) -> None:
    got = phjstatus.end_of_job(JobInfo(job_id=7, states=(state,), reason="SomeReason"), 7)
    assert got[:2] == (phase, reason)
    assert "Slurm job 7" in got[2] and "SomeReason" in got[2]


def test_vanished_job() -> None:
    assert phjstatus.end_of_job(None, 9)[1] == "SlurmJobVanished"


def test_set_condition_keeps_transition_time_unless_status_flips() -> None:
    conds = conditions.set_condition_dicts(None, "Ready", False, "Waiting", "m", None)
    t0 = conds[0]["lastTransitionTime"]
    conds[0]["lastTransitionTime"] = "2000-01-01T00:00:00Z"
    same = conditions.set_condition_dicts(conds, "Ready", False, "StillWaiting", "m2", 3)
    assert same[0]["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    assert same[0]["reason"] == "StillWaiting" and same[0]["observedGeneration"] == 3
    flipped = conditions.set_condition_dicts(same, "Ready", True, "Bound", "ok", None)
    assert flipped[0]["lastTransitionTime"] != "2000-01-01T00:00:00Z" and t0
    assert [c["type"] for c in conditions.set_condition_dicts(flipped, "Other", True, "r", "m", None)] == [
        "Ready",
        "Other",
    ]


def _pod(annotations: dict[str, str] | None, labels: dict[str, str] | None, gates: list[str]) -> dict[str, object]:
    built = make_pod("p").uid("u1").gated(*gates)
    if annotations is not None:
        built.meta(annotations=annotations)
    if labels is not None:
        built.meta(labels=labels)
    return built.obj()


@pytest.mark.parametrize(
    ("annotations", "labels", "gates", "left_gates"),
    [
        (None, None, [names.SCHEDULING_GATE], None),
        ({"a": "1"}, {"l": "x"}, [names.SCHEDULING_GATE, "other/gate"], [{"name": "other/gate"}]),
        ({}, {}, ["other/gate"], [{"name": "other/gate"}]),
    ],
)
def test_release_patch_applies_cleanly(
    annotations: dict[str, str] | None, labels: dict[str, str] | None, gates: list[str], left_gates: object
) -> None:
    pod = _pod(annotations, labels, gates)
    patched = jsonpatch.apply_patch(pod, pods.release_pod_patch(pod, "node-3", 42, "phj"))
    assert patched["metadata"]["annotations"][names.ANN_SLURM_NODE] == "node-3"
    assert patched["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] == "42"
    assert patched["metadata"]["labels"][names.LABEL_PLACEHOLDER_JOB] == "phj"
    assert patched["spec"].get("schedulingGates") == left_gates
    assert pods.pod_is_released(patched, "node-3")
    assert not pods.pod_is_released(pod, "node-3")


def test_release_patch_of_a_253_character_placeholderjob_name_fits_a_label() -> None:
    long_name = "p" * 253
    pod = _pod({"a": "1"}, {"l": "x"}, [names.SCHEDULING_GATE])
    patched = jsonpatch.apply_patch(pod, pods.release_pod_patch(pod, "node-3", 42, long_name))
    label = patched["metadata"]["labels"][names.LABEL_PLACEHOLDER_JOB]
    assert len(label) <= 63 and label == label_value(long_name) and label.startswith("ppp")
    assert patched["metadata"]["annotations"][names.ANN_PLACEHOLDER_JOB] == long_name, "the full name"


def test_release_patch_tests_the_pod_uid() -> None:
    ops = pods.release_pod_patch(_pod(None, None, []), "n", 1, "p")
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "u1"}


def test_hostlist_compression() -> None:
    assert allocation.compress_hostlist(["kwok-node-1", "kwok-node-2", "kwok-node-4"]) == "kwok-node-[1-2,4]"
    assert allocation.compress_hostlist([]) == ""
    # A list compressed before is answered from the cache, whatever sequence carries it.
    assert allocation.compress_hostlist(("kwok-node-1", "kwok-node-2", "kwok-node-4")) == "kwok-node-[1-2,4]"
    assert allocation.compress_hostlist(["kwok-node-4", "kwok-node-1"]) == "kwok-node-[1,4]"


def resubmit_wait(status: dict[str, Any], generation: int, retry: float, now: Any) -> float:
    """PlaceholderJob.resubmit_wait of a PlaceholderJob with this status and generation."""
    obj = {"metadata": {"generation": generation}, "spec": {"pods": [], "slurm": {}}, "status": status}
    return PlaceholderJob.parse(obj).resubmit_wait(retry, now)


def test_refused_spec_waits_before_the_next_submit() -> None:
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    refused = {"reason": "SubmitRejected", "submitTime": "2026-01-01T12:00:20Z", "observedGeneration": 1}
    assert resubmit_wait(refused, 1, 30, now) == 20
    assert resubmit_wait(refused, 2, 30, now) == 0, "a changed spec is tried at once"
    assert resubmit_wait(refused, 1, 30, now + timedelta(seconds=25)) == 0
    assert resubmit_wait({"reason": "Resources"}, 1, 30, now) == 0
    assert resubmit_wait(refused | {"jobId": 4}, 1, 30, now) == 0


def _member(phase: str, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u"}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("pod", "holds"),
    [
        (None, False),  # gone
        (_member("Running"), True),
        (_member("Running", terminating=True), True),  # still runs on its node until it is gone
        (_member("Pending", terminating=True), True),
        (_member("Succeeded", terminating=True), False),
        (_member("Failed"), False),
    ],
)
def test_a_pod_holds_its_allocation_until_it_is_gone_or_terminal(pod: dict[str, Any] | None, holds: bool) -> None:
    assert podphase.pod_ended(pod) is not holds
    assert (list(pods.holding_allocation({"p": pod}).values()) == [pod]) is holds


def test_a_gang_holds_its_allocation_while_any_member_does() -> None:
    gone, done, leaving = None, _member("Succeeded"), _member("Running", terminating=True)
    assert list(pods.holding_allocation({"a": gone, "b": done, "c": leaving}).values()) == [leaving]
    assert list(pods.holding_allocation({"a": gone, "b": done}).values()) == []
    assert pods.pod_terminating(leaving) and not pods.pod_terminating(done)


def test_a_pod_the_kubelet_stopped_for_its_deletion_counts_as_deleted() -> None:
    members = {"a": None, "b": _member("Failed", terminating=True), "c": _member("Failed"), "d": _member("Succeeded")}
    assert phjstatus.end_phases(members) == {"a": None, "b": None, "c": "Failed", "d": "Succeeded"}
    deleted = phjstatus.pods_end_phase(phjstatus.end_phases({"a": None, "b": _member("Failed", terminating=True)}))
    assert deleted[:2] == (names.PHASE_CANCELLED, "PodsDeleted")


def test_conditions_from_an_older_bridge_are_completed_so_the_next_write_is_valid() -> None:
    """The CRD now requires every metav1.Condition field; an older bridge left some out, and a
    status write sends the whole list, so every entry must come out complete."""
    old = [{"type": "Submitted", "status": "True"}, {"type": "Allocated", "status": "False", "reason": "Resources"}]
    out = conditions.set_condition_dicts(old, "Allocated", True, "Allocated", "ok", 4)
    required = {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"}
    assert all(required <= set(c) for c in out), out
    submitted, allocated = out
    assert submitted["reason"] == "Unknown" and submitted["observedGeneration"] == 0
    assert allocated["observedGeneration"] == 4 and allocated["lastTransitionTime"] != "1970-01-01T00:00:00Z"


def test_the_default_job_name_of_the_longest_names_is_bounded_and_distinct() -> None:
    ns, a, b = "n" * 63, "p" * 252 + "a", "p" * 252 + "b"
    assert default_job_name("ns", "pod") == "ns/pod"
    long_a, long_b = default_job_name(ns, a), default_job_name(ns, b)
    assert len(long_a) == 200 and long_a.startswith(ns + "/ppp") and long_a != long_b
