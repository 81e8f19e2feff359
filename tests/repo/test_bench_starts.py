"""bench/starts.py lines up each pod's start: pure logic over recorded steps."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import starts  # bench/ is not a package

pytestmark = pytest.mark.unit


def test_the_breakdown_counts_signed_starts_and_splits_start_to_release_by_how_the_start_is_known() -> None:
    created = {"a": 0.0, "b": 0.0, "c": 0.0}
    bound = {"a": 1.3, "b": 1.4, "c": 1.5}
    jobs = {"a": 1, "b": 2, "c": 3}
    operator = {
        1: {"path": "queue", "hint_started": 1.05, "signed_start": 1.05, "running_read": 1.05, "released": 1.1},
        2: {"path": "queue", "hint_started": 1.2, "running_read": 1.25, "released": 1.3},
        3: {"path": "queue", "running_read": 1.3, "hint_started": 1.35, "released": 1.4},  # a poll came first
    }
    slurm = {1: (1.0, "log"), 2: (1.0, "log"), 3: (1.45, "prolog end")}
    b = starts.breakdown(created, {}, bound, jobs, operator, slurm)
    out = b.summary()
    assert (out["read_after_hint"], out["taken_from_signed_hint"]) == (2, 1)
    assert out["slurm_start_from"] == {"log": 2, "prolog end": 1}
    assert out["Slurm's start (log) -> pod released"]["n"] == 2
    assert out["Slurm's start (prolog end) -> pod released"] == {"p50": -0.05, "p99": -0.05, "n": 1}
    assert out["Slurm's start -> pod released"]["n"] == 3
