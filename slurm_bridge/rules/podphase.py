"""Whether a pod has ended, read off its phase: what the PlaceholderJob controller's member
bookkeeping and the handoff's reading of a node's pods both ask. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pod_phase(pod: Mapping[str, Any] | None) -> str | None:
    """The pod's phase; "Pending" before the API server gave it one (a null status too)."""
    return None if pod is None else str((pod.get("status") or {}).get("phase") or "Pending")


def pod_ended(pod: Mapping[str, Any] | None) -> bool:
    """Gone, or in a terminal phase. A terminating pod (deletionTimestamp) has not ended: its
    containers run until they exit or its grace period is over, on the node it holds."""
    return pod is None or pod_phase(pod) in ("Succeeded", "Failed")
