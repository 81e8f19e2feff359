"""docs/performance.md's tables in the page's shape (issue 39): bench/pagetables.py builds them from
what the benches measure (each bench prints its own at the end of a run), bench/summarize.py over
several runs' --json output, min - max."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pagetables  # bench/ is not a package
import summarize

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "performance.md").read_text()


def row(mode: str, scheduler: str, *, pods: int = 200, **values: Any) -> dict[str, Any]:
    return {"mode": mode, "scheduler": scheduler, "pods": pods, "bound": pods, "busy": 0, "date": "2026-11-26",
            "commit": "d6ae460", **values}  # fmt: skip


def queued(p50: float, p99: float) -> dict[str, Any]:
    return {"paths": {"queue": 100}, pagetables.START_TO_RELEASED: {"p50": p50, "p99": p99, "n": 100}}


# Two runs of `--pods 200 --rates 20,0 --tenant`, then a busy and an idle-queued run (100 pods, 20/s).
RUNS: list[pagetables.Run] = [
    [
        row("20/s", "slurm-bridge", p50_s=0.03, p99_s=0.2, pods_per_s=20.0, api_writes_per_pod=7.0,
            slurm_calls_per_pod=2.1, operator_cpu_ms_per_pod=10.5, machine_cpu_ratio=2.5),
        row("20/s", "slurm-bridge tenant", p50_s=0.05, p99_s=0.3, pods_per_s=20.0, slurm_calls_per_pod=3.15),
        row("20/s", "default-scheduler", p50_s=0.007, p99_s=0.02, pods_per_s=20.0, api_writes_per_pod=4.0),
        row("burst", "slurm-bridge", pods_per_s=40.0, ratio_to_default=0.4, create_span_s=1.0,
            operator_cpu_ms_per_pod=7.0),
        row("burst", "default-scheduler", pods_per_s=98.0, create_span_s=0.5),
    ],
    [
        row("20/s", "slurm-bridge", p50_s=0.026, p99_s=0.6, pods_per_s=20.0, api_writes_per_pod=7.02,
            slurm_calls_per_pod=2.2, operator_cpu_ms_per_pod=12.0, machine_cpu_ratio=2.8),
        row("20/s", "slurm-bridge tenant", p50_s=0.06, p99_s=0.3, pods_per_s=20.0),
        row("20/s", "default-scheduler", p50_s=0.006, p99_s=0.03, pods_per_s=20.1),
        row("burst", "slurm-bridge", pods_per_s=36.4, ratio_to_default=0.37, create_span_s=1.25,
            operator_cpu_ms_per_pod=6.6),
        row("burst", "default-scheduler", pods_per_s=99.0, create_span_s=0.4),
    ],
    [
        row("20/s", "slurm-bridge", pods=100, busy=20, commit="55757f0", p50_s=0.75, p99_s=1.3,
            breakdown=queued(0.1, 0.18), operator_cpu_ms_per_pod=8.5),
        row("20/s", "default-scheduler", pods=100, commit="55757f0", p50_s=0.004, p99_s=0.02),
    ],
    [
        row("20/s", "slurm-bridge", pods=100, commit="55757f0", p50_s=0.61, p99_s=1.2,
            breakdown=queued(0.18, 0.39)),
        row("20/s", "default-scheduler", pods=100, commit="55757f0", p50_s=0.004, p99_s=0.02),
    ],
]  # fmt: skip


def test_each_profiles_table_is_the_runs_min_to_max_with_runs_dates_commits_and_the_target() -> None:
    lines = pagetables.pipeline_tables(RUNS)
    assert "| the bridge, plain (2 runs, 2026-11-26, `d6ae460`) | 0.026 - 0.03 s | 0.2 - 0.6 s | 20 | " \
        "p50 ≤ 0.1 s, p99 ≤ 0.5 s: met in 1 of 2 |" in lines  # fmt: skip
    # a tenant's pods against the plain pods of the same run: 0.05 ≤ 2 * 0.03, 0.06 > 2 * 0.026
    assert "| the bridge, under a TenantPolicy (2 runs, 2026-11-26, `d6ae460`) | 0.05 - 0.06 s | 0.3 s | 20 | " \
        f"p50 ≤ 2{pagetables.TIMES} plain, p99 ≤ 0.5 s: met in 1 of 2 |" in lines  # fmt: skip
    assert "| default scheduler (4 runs, 2026-11-26, `d6ae460`, `55757f0`) | 0.004 - 0.007 s | 0.02 - 0.03 s | " \
        "20 - 20.1 | - |" in lines, "the default scheduler's pods of every run at that rate"  # fmt: skip
    assert (
        "| 200 pods (2 runs, 2026-11-26, `d6ae460`) | 36.4 - 40 | 98 - 99 | **0.37 - 0.4** | ≥ 75 pods/s: not met |"
        in lines
    )
    assert "| busy: 20 higher-priority jobs wait in the partition, 20/s (1 run, 2026-11-26, `55757f0`) | 0.1 s | " \
        "0.18 s | 0.75 / 1.3 s | p50 ≤ 0.1 s, p99 ≤ 0.3 s: met |" in lines  # fmt: skip
    assert "| idle-queued: immediate allocation off, 20/s (1 run, 2026-11-26, `55757f0`) | 0.18 s | 0.39 s | " \
        "0.61 / 1.2 s | p50 ≤ 0.1 s, p99 ≤ 0.3 s: not met |" in lines  # fmt: skip
    # the burst's creates: 200 / 1.0 s and 200 / 1.25 s through the webhook, 200 / 0.5 and 200 / 0.4 without
    assert "| 200 pods' creates in their burst (2 runs, 2026-11-26, `d6ae460`) | 160 - 200 | 400 - 500 | " \
        "**0.32 - 0.5** | ≥ 0.5: met in 1 of 2 |" in lines  # fmt: skip
    costs = lines[lines.index("What a pod costs:") + 2 :]
    assert costs[0] == "| per pod | 20/s plain (2 runs) | 20/s tenant (2 runs) | 200-pod burst (2 runs) | " \
        "20/s busy (1 run) | 20/s idle-queued (1 run) | target |"  # fmt: skip
    assert "| API writes | 7 - 7.02 | - | - | - | - | ≤ 7: met (the default scheduler's: 4) |" in costs
    assert "| Slurm calls while it starts | 2.1 - 2.2 | 3.15 | - | - | - | ≤ 3: met in 2 of 3 |" in costs
    assert "| Slurm calls over its whole life | - | - | - | - | - | - |" in costs, "a field no run measured: a dash"
    assert "| the operator's CPU | 10.5 - 12 ms | - | 6.6 - 7 ms | 8.5 ms | - | ≤ 5 ms: not met |" in costs


def test_the_other_benches_tables() -> None:
    admission = {"pods": 1000, "date": "2026-11-26", "commit": "merge-all", "ratio": 0.6,
                 "through the webhook": {"creates_per_s": 674.0}, "without it": {"creates_per_s": 1115.0}}  # fmt: skip
    assert "| 1,000 dry-run creates, nothing else running (1 run, 2026-11-26, `merge-all`) | 674 | 1,115 | " \
        "**0.6** | ≥ 0.5: met |" in pagetables.creates_table([admission], [])  # fmt: skip
    sharing = [[{"mode": "coResident", "pods_per_s": 34.6, "p50_s": 0.92, "p99_s": 1.37, "most_at_once": 100,
                 "slurm_calls_per_pod": 2.07}, {"mode": "default-scheduler", "pods_per_s": 192.8, "p50_s": 0.09,
                 "p99_s": 0.14, "most_at_once": 100}]]  # fmt: skip
    lines = pagetables.sharing_table(sharing)
    assert "| `coResident` (1 run) | 34.6 | 0.92 / 1.37 s | 100 | 2.07 |" in lines
    assert "| default scheduler (1 run) | 192.8 | 0.09 / 0.14 s | 100 | - |" in lines
    profiles = (("cpu", "CPU only", "6 CPUs", 3.2), ("gpu", "one whole GPU each", "1 GPU", 0.64))
    gpus = [[{"profile": p, "what": w, "free": f, "pods_per_s": r, "p50_s": 2.0, "p99_s": 6.0}
             for p, w, f, r in profiles]]  # fmt: skip
    assert "| one whole GPU each (1 run) | 1 GPU | 0.64 | 0.2 | 2 / 6 s |" in pagetables.gpus_table(gpus)
    report = {"kwok_nodes": 1005, "slurm_jobs": 10012, "date": "2026-11-26", "commit": "55757f0",
              "idle": {"slurmrestd_cpu_percent": 2.05, "operator_cpu_percent": 2.85, "operator_rss_mib": 307,
                       "single_job_reads": 12},
              "idle_after_restart": {"slurmrestd_cpu_percent": 1.4, "operator_cpu_percent": 1.9,
                                     "operator_rss_mib": 251, "single_job_reads": 0},
              "restart": {"stop_to_ready_s": 18.7, "stop_to_queue_empty_s": 18.8, "slurm_jobs_changed": 0},
              "new_pods": {"pods": 50, "bound": 50, "p50_s": 0.046, "p99_s": 0.272}}  # fmt: skip
    lines = pagetables.scale_table([report])
    assert lines[0] == "10,012 Slurm jobs on 1,005 kwok nodes (1 run, 2026-11-26, `55757f0`):"
    assert "| slurmrestd's CPU (idle / 30 s after a restart) | 2.05 % / 1.4 % of a core | ≤ 3 %: met |" in lines
    assert "| the operator's RSS (idle / after a restart) | 307 MiB / 251 MiB | " \
        "≤ 300 MB at rest (after a restart): met |" in lines  # fmt: skip
    assert "| 50 new pods at 5/s meanwhile, create → bound | p50 0.046 s, p99 0.272 s | p50 ≤ 1 s: met |" in lines


@pytest.mark.parametrize(
    "header",
    [
        pagetables.STEADY,
        pagetables.BURST,
        pagetables.QUEUED,
        pagetables.CREATES,
        pagetables.SHARING,
        pagetables.GPUS,
        pagetables.SCALE,
    ],
)
def test_the_page_shows_each_table_in_the_benchs_columns(header: tuple[str, ...]) -> None:
    assert pagetables.markdown(header, [])[0] in PAGE.splitlines()


def test_the_pages_costs_table_has_the_benchs_first_and_last_columns() -> None:
    costs = pagetables.costs_table(RUNS)[2]
    page = next(line for line in PAGE.splitlines() if line.startswith("| per pod |"))
    assert costs.startswith("| per pod |") and costs.endswith("| target |") and page.endswith("| target |")
    rows = {line.split(" | ")[0] for line in pagetables.costs_table(RUNS)[4:] if line.startswith("| ")}
    assert rows <= {line.split(" | ")[0] for line in PAGE.splitlines()}, "the page has a row for each of the bench's"


def test_summarize_reads_each_benchs_output() -> None:
    read = summarize.Runs()
    read.add(json.dumps(RUNS[0], indent=2))
    read.add(json.dumps({"pods": 1000, "ratio": 0.6, "through the webhook": {}, "without it": {}}))
    read.add(json.dumps([{"mode": "coResident", "pods_per_s": 34.6}]))
    read.add(json.dumps([{"profile": "cpu", "pods_per_s": 3.2}]))
    progress = json.dumps({"kwok_nodes": 1005, "jobs": 10000})
    last = json.dumps({"kwok_nodes": 1005, "jobs": 10000, "idle": {"slurmrestd_cpu_percent": 2.05}}, indent=2)
    read.add(f"{progress}\n{json.dumps({'idle': {}})}\n{last}\n\n10,012 Slurm jobs on 1,005 kwok nodes:\n| a | b |\n")
    assert [len(read.pipeline), len(read.admission), len(read.sharing), len(read.gpus)] == [1, 1, 1, 1]
    assert read.scale == [json.loads(last)], "scale.py's last report, its table's lines skipped"
    tables = read.tables()
    for caption in ("Pods at a steady rate (20/s):", "Bursts: every pod created at once:", "What a pod costs:",
                    "Creates through the webhook:", "Sharing nodes with native jobs, pods at once:",
                    "GPU pods beside native GPU jobs, pods at once:"):  # fmt: skip
        assert caption in tables


def test_a_run_is_stamped_with_its_date_and_commit() -> None:
    stamp = pagetables.stamp()
    assert len(str(stamp["date"])) == 10
    assert stamp["commit"] is None or str(stamp["commit"])[:7].isalnum()


def test_summarize_shows_the_default_schedulers_client_idle_steal_and_own_cpu() -> None:
    runs = [
        row("burst", "slurm-bridge", default_client="bench 200/400",
            cpu_ms_per_pod={"idle baseline": 4.0, "steal": 0.5}, cpu_ms_per_pod_own_children={"slurmctld": [6.0, 2.5]}),
        row("burst", "slurm-bridge", default_client="stock 50/100",
            cpu_ms_per_pod={"idle baseline": 5.0}, cpu_ms_per_pod_own_children={"slurmctld": [7.0, 3.0]}),
    ]  # fmt: skip
    lines = [" ".join(line.split()) for line in summarize.cpu_lines(runs)]
    assert lines == [
        "default scheduler client bench 200/400, stock 50/100", "idle baseline CPU ms/pod 4 - 5",
        "steal CPU ms/pod 0.5", "slurmctld own / children ms/pod 6 - 7 / 2.5 - 3",
    ]  # fmt: skip
    assert {"added_cpu_ms_per_pod", "apiserver_cpu_ratio", "pod_watchers"} <= set(summarize.FIELDS)


def test_a_pass_without_slurmctlds_hooks_is_its_own_column_paired_with_its_own_default_row() -> None:
    on = {"scheduler": "slurm-bridge", "mode": "burst", "pods": 200, "slurm_hooks": "on"}
    off = {**on, "slurm_hooks": "off"}
    d_on = {"scheduler": "default-scheduler", "mode": "burst", "pods": 200, "slurm_hooks": "on", "p50_s": 1.0}
    d_off = {**d_on, "slurm_hooks": "off", "p50_s": 2.0}
    run = [on, d_on, off, d_off]
    assert pagetables.kind(on) == "plain" and pagetables.kind(off) == "plain, slurmctld's hooks off"
    assert pagetables.partner(run, off, "default") is d_off and pagetables.partner(run, on, "default") is d_on
    assert pagetables.kind({**on, "slurm_hooks": None}) == "plain", "runs recorded before the flag"
