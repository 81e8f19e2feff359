"""bench/summarize.py prints docs/performance.md's tables in the page's shape (issue 39), from the
rows bench/pipeline_latency.py --json writes."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import summarize  # bench/ is not a package


def row(mode: str, scheduler: str, **values: Any) -> dict[str, Any]:
    return {"mode": mode, "scheduler": scheduler, "pods": 200, **values}


def test_the_tables_have_the_pages_columns_and_each_cell_is_the_runs_min_to_max() -> None:
    rows: summarize.Runs = defaultdict(list)
    for r in (
        row("20/s", "slurm-bridge", p50_s=0.03, p99_s=0.2, pods_per_s=20.0, api_writes_per_pod=7.0,
            slurm_calls_per_pod=2.1, operator_cpu_ms_per_pod=10.5, machine_cpu_ratio=2.5),
        row("20/s", "slurm-bridge", p50_s=0.026, p99_s=0.3, pods_per_s=20.0, api_writes_per_pod=7.0,
            slurm_calls_per_pod=2.2, operator_cpu_ms_per_pod=12.0, machine_cpu_ratio=2.8),
        row("20/s", "default-scheduler", p50_s=0.007, p99_s=0.02, pods_per_s=20.0),
        row("burst", "slurm-bridge", pods_per_s=40.0, ratio_to_default=0.4, operator_cpu_ms_per_pod=7.0),
        row("burst", "slurm-bridge", pods_per_s=36.4, ratio_to_default=0.37, operator_cpu_ms_per_pod=6.6),
        row("burst", "default-scheduler", pods_per_s=98.0),
        row("burst", "default-scheduler", pods_per_s=99.0),
    ):  # fmt: skip
        rows[(r["mode"], r["scheduler"])].append(r)
    lines = summarize.tables(rows)
    text = "\n".join(lines)
    assert "| pods (runs) | create → bound p50 | p99 | pods/s |" in lines
    assert "| slurm-bridge, 20/s (2) | 0.026 - 0.03 s | 0.2 - 0.3 s | 20 |" in lines
    assert "| default-scheduler, 20/s (1) | 0.007 s | 0.02 s | 20 |" in lines
    assert "| burst (runs) | the bridge, pods/s | default, pods/s | **ratio** |" in lines
    assert "| 200 pods, slurm-bridge (2) | 36.4 - 40 | 98 - 99 | **0.37 - 0.4** |" in lines
    assert "| per pod (runs) | slurm-bridge, 20/s (2) | slurm-bridge, burst (2) |" in lines
    assert "| the operator's CPU | 10.5 - 12 ms | 6.6 - 7 ms |" in lines
    assert "| Slurm calls over its whole life | - | - |" in lines, "a field no run measured: a dash"
    assert "default-scheduler, burst" not in text.split("| per pod")[1], "costs are the bridge's"
