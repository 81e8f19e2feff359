"""Whether a pod has ended, read off its phase, for every shape a pod's status can have."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge.rules.podphase import pod_ended, pod_phase


@pytest.mark.parametrize(
    ("pod", "phase", "ended"),
    [
        (None, None, True),
        ({}, "Pending", False),
        ({"status": None}, "Pending", False),
        ({"status": {}}, "Pending", False),
        ({"status": {"phase": "Running"}}, "Running", False),
        ({"status": {"phase": "Succeeded"}}, "Succeeded", True),
        ({"status": {"phase": "Failed"}}, "Failed", True),
        ({"metadata": {"deletionTimestamp": "2026-12-02T00:00:00Z"}, "status": {"phase": "Running"}}, "Running", False),
    ],
)
def test_a_pod_has_ended_when_gone_or_in_a_terminal_phase(pod: Any, phase: str | None, ended: bool) -> None:
    assert pod_phase(pod) == phase
    assert pod_ended(pod) is ended
