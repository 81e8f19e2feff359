"""Kubernetes quantities, read exactly as the apiserver accepts them (slurm_bridge/rules/resources.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slurm_bridge.rules.resources import parse_quantity

pytestmark = pytest.mark.unit


# --- Kubernetes quantities ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Fraction(1)),
        ("0", Fraction(0)),
        ("500m", Fraction(1, 2)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        ("100n", Fraction(1, 10**7)),
        ("100u", Fraction(1, 10**4)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1.5e-3", Fraction(3, 2000)),
        ("2e+2", Fraction(200)),
        ("129e6", Fraction(129 * 10**6)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "1Gb", "1 Gi", "1gi", "1K", "Mi", "1.2.3", "1e", "1e1.5", "0x10", "1e400", "--1"]
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
