"""Times as Kubernetes writes them (RFC 3339, UTC, whole seconds: ``2026-11-29T17:00:00Z``), the
one form the bridge writes into statuses, conditions and annotations, and reads back."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(when: datetime) -> str:
    """A time as Kubernetes writes it."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_iso() -> str:
    return iso(datetime.now(UTC))


def parse_iso(text: str) -> datetime:
    """A time written as Kubernetes writes it (or any ISO 8601 form: a hand edit), aware, UTC when
    it names no zone; ValueError when it is none. ``fromisoformat``, not ``strptime``: it runs on
    every reconcile, and strptime costs about 30 times as much."""
    when = datetime.fromisoformat(text)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
