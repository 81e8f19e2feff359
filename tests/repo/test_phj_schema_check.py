"""The e2e tests' PlaceholderJob schema check (tests/e2e/phj_schema.py) accepts what the bridge
writes and names the path of what the CRD refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.phj_schema import assert_matches_crd, schema_errors

COND = {"type": "Submitted", "status": "True", "reason": "Submitted", "message": "submitted Slurm job 7",
        "lastTransitionTime": "2026-11-22T12:00:00Z", "observedGeneration": 1}  # fmt: skip
PHJ: dict[str, Any] = {
    "apiVersion": "slinky.slurm.net/v1alpha1",
    "kind": "PlaceholderJob",
    "metadata": {"name": "p", "namespace": "n", "generation": 1},
    "spec": {"pods": ["p"], "slurm": {"partition": "debug", "nodes": 1}},
    "status": {
        "phase": "Running",
        "jobId": 7,
        "podList": "p",
        "nodeList": "knode1",
        "assignments": [{"pod": "p", "node": "knode1"}],
        "submitTime": "2026-11-22T12:00:00Z",
        "conditions": [COND],
    },
}


def test_a_complete_placeholderjob_matches() -> None:
    assert schema_errors(PHJ) == []
    assert_matches_crd(PHJ)


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (
            lambda p: p["status"]["conditions"][0].pop("observedGeneration"),
            "$.status.conditions[0]",
            "'observedGeneration' is a required property",
        ),
        (
            lambda p: p["status"]["conditions"][0].update(lastTransitionTime="yesterday"),
            "$.status.conditions[0].lastTransitionTime",
            "date-time",
        ),
        (lambda p: p["status"].update(phase="Sleeping"), "$.status.phase", "is not one of"),
        (lambda p: p["spec"]["slurm"].update(nodes=0), "$.spec.slurm.nodes", "less than the minimum"),
        (lambda p: p["spec"].update(pods=[]), "$.spec.pods", "should be non-empty"),
    ],
    ids=["condition-without-generation", "bad-time", "unknown-phase", "zero-nodes", "no-pods"],
)
def test_a_mismatch_fails_naming_its_path(change: Any, path: str, words: str) -> None:
    phj = copy.deepcopy(PHJ)
    change(phj)
    errors = schema_errors(phj)
    assert any(e.startswith(f"{path}: ") and words in e for e in errors), errors
    with pytest.raises(AssertionError, match="PlaceholderJob n/p does not match"):
        assert_matches_crd(phj)
