"""The code's shape: no function over 60 lines in the components and the shared package, so that
each step stays small enough to read in one go (a new long function is split where it grows, not
listed here as an exception).

The module cap of 450 lines (issue 23) is retired (issue 40): it bent code, by moving concerns
apart to stay under a number. Modules are split by concern. What is left is a smoke alarm far
above every module (1,200 lines), for a module that has swallowed several concerns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("operator", "webhook", "extender", "slurm_bridge")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 1200


def sources() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (ROOT / d).rglob("*.py"))


def test_the_packages_are_found() -> None:
    found = {p.relative_to(ROOT).parts[0] for p in sources()}
    assert found == set(PACKAGES), found


def test_no_module_is_near_a_smoke_alarm_size() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {long}"


def test_no_function_is_over_60_lines() -> None:
    long = {}
    for p in sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_formatting_is_skipped_for_tables_only() -> None:
    """``# fmt: skip`` keeps a table's rows as written (issue 30 §6): a module's constant written as
    a literal tuple, list, dict or set. Code is left to the formatter."""
    stray = []
    for p in sources():
        text = p.read_text()
        tree = ast.parse(text)
        tables = {
            n.end_lineno
            for n in tree.body
            if isinstance(n, ast.Assign | ast.AnnAssign)
            and isinstance(n.value, ast.Tuple | ast.List | ast.Dict | ast.Set)
        }
        for number, line in enumerate(text.splitlines(), start=1):
            if line.rstrip().endswith("# fmt: skip") and number not in tables:
                stray.append(f"{p.relative_to(ROOT)}:{number}")
    assert not stray, f"# fmt: skip on code that is not a table: {stray}"


def test_no_component_waits_with_asyncio_wait_for() -> None:
    """Python 3.11's ``asyncio.wait_for`` loses a cancel that comes in the turn its awaitable
    finishes (it returns the result instead), so a stop could hang until the next period or the
    watchdog; ``asyncio.timeout`` keeps it (tests/unit/operator/runtime/test_pollloop.py shows the race)."""
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sources()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "asyncio.wait_for(" in line
    ]
    assert found == [], f"use asyncio.timeout instead of asyncio.wait_for at {found}"
