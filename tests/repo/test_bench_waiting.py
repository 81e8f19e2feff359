"""bench/waiting_pods.py's pure parts: API writes per waiting pod, SlurmJobPending Events per
object, and when the run may start measuring."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import waiting_pods  # bench/ is not a package

from slurm_bridge import names


def event(kind: str, name: str, reason: str = waiting_pods.PENDING_EVENT) -> dict[str, Any]:
    return {"reason": reason, "involvedObject": {"kind": kind, "name": name}}


def test_the_event_reason_is_the_bridges() -> None:
    assert waiting_pods.PENDING_EVENT == names.EVENT_SLURM_JOB_PENDING


def test_writes_per_waiting_pod() -> None:
    total, by_kind = waiting_pods.per_pod(
        {"POST pods": 10.0, "POST events": 30.0, "PATCH placeholderjobs/status": 10}, 10
    )
    assert total == 5.0 and by_kind == {"PATCH placeholderjobs/status": 1.0, "POST events": 3.0, "POST pods": 1.0}


def test_events_per_object() -> None:
    events = [event("Pod", "a"), event("Pod", "a"), event("Pod", "b"), event("PlaceholderJob", "a"),
              event("PlaceholderJob", "a", "Submitted")]  # fmt: skip
    assert waiting_pods.events_per_pod(events) == {
        "PlaceholderJob": {"objects": 1, "max": 1, "mean": 1.0},
        "Pod": {"objects": 2, "max": 2, "mean": 1.5},
    }


def test_the_run_measures_only_once_every_job_waits_with_a_reason() -> None:
    def phj(**status: Any) -> dict[str, Any]:
        return {"status": status}

    assert waiting_pods.unready([phj(jobId=1, reason="PartitionDown")], 2) == "1/2 PlaceholderJobs exist"
    assert waiting_pods.unready([phj(jobId=1, reason="PartitionDown"), phj(jobId=2)], 2) == (
        "1/2 jobs wait with Slurm's reason"
    )
    refused = waiting_pods.unready([phj(reason="SubmitRejected", message="invalid partition")], 1)
    assert refused is not None and "SB_PENDING_PARTITION" in refused and "invalid partition" in refused
    assert waiting_pods.unready([phj(jobId=1, reason="PartitionDown")], 1) is None
