"""Kubernetes' time form (slurm_bridge/kube/times.py): what the bridge writes it reads back, and a
hand edit in another ISO 8601 form is read, not refused; anything else is a ValueError."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from slurm_bridge.kube.times import iso, now_iso, parse_iso

pytestmark = pytest.mark.unit


def test_what_the_bridge_writes_is_read_back_to_the_second() -> None:
    when = datetime(2026, 11, 29, 17, 0, 5, 999_999, tzinfo=UTC)
    assert iso(when) == "2026-11-29T17:00:05Z"
    assert parse_iso(iso(when)) == when.replace(microsecond=0)
    assert parse_iso(iso(when)).tzinfo is not None


def test_another_zone_is_written_as_utc() -> None:
    assert iso(datetime(2026, 11, 29, 18, 0, tzinfo=timezone(timedelta(hours=1)))) == "2026-11-29T17:00:00Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T17:00:00Z", datetime(2026, 11, 29, 17, tzinfo=UTC)),
        ("2026-11-29T17:00:00.250000Z", datetime(2026, 11, 29, 17, 0, 0, 250_000, tzinfo=UTC)),
        ("2026-11-29T18:00:00+01:00", datetime(2026, 11, 29, 17, tzinfo=UTC)),
        ("2026-11-29T17:00:00", datetime(2026, 11, 29, 17, tzinfo=UTC)),  # no zone: UTC
    ],
)
def test_iso_forms_are_read_as_aware_times(text: str, expected: datetime) -> None:
    got = parse_iso(text)
    assert got == expected and got.utcoffset() is not None


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "17:00:00"])
def test_what_is_no_time_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_iso(text)


def test_now_is_now() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    assert before <= parse_iso(now_iso()) <= datetime.now(UTC)
