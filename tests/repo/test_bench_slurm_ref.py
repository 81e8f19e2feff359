"""bench/slurm_ref.py's arithmetic: S_ref, Slurm's own CPU per job, from a sampled run of
allocations, reads and cancels; and what a bridge pod costs beyond it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import slurm_ref  # bench/ is not a package
import sysstats


def test_s_ref_is_the_machines_cpu_per_job_less_the_benchmark_clients() -> None:
    row = {
        "cpu_seconds": {"slurmctld": 0.8, "slurmrestd": 0.4, "munged": 0.1, sysstats.BENCH_CLIENT: 0.3, "etcd": 0.1},
        "cpu_seconds_own": {"slurmctld": 0.5},
        "cpu_seconds_children": {"slurmctld": 0.3, sysstats.BENCH_CLIENT: 0.0},
        "machine_cpu_seconds": 2.5,  # 0.5 s of it the idle machine's
        "machine_idle_cpu_seconds": 0.5,
        "machine_net_cpu_seconds": 2.0,
    }
    got = slurm_ref.s_ref(row, 100)
    assert got["machine_ms_per_job"] == 20.0 and got["bench_client_ms_per_job"] == 3.0
    assert got["s_ref_ms_per_job"] == 17.0, "(2.5 - 0.5 idle - 0.3 client) s / 100 jobs"
    assert got["slurm_ms_per_job"] == {"slurmctld": 8.0, "slurmrestd": 4.0, "munged": 1.0}, "Slurm's only"
    assert got["own_children_ms_per_job"] == {"slurmctld": (5.0, 3.0)}, "slurmctld apart from its hooks"
    assert slurm_ref.s_ref(row, 0) == {"jobs": 0}


def test_what_a_bridge_pod_costs_beyond_slurms_own_work() -> None:
    assert slurm_ref.beyond_slurm(25.5, 17.0) == 8.5
    assert slurm_ref.beyond_slurm(None, 17.0) is None and slurm_ref.beyond_slurm(25.5, None) is None


def test_the_calibration_jobs_are_immediate_external_jobs_the_bridge_leaves_alone() -> None:
    job = slurm_ref.job_body("bench-sref-7", "slurm-bridge")["job"]
    assert job["immediate"] and job["flags"] == ["EXTERNAL_JOB"] and job["partition"] == "slurm-bridge"
    assert job["name"].startswith(slurm_ref.PREFIX)
    assert "admin_comment" not in job, "no bridge mark: not taken for an orphan"
    assert job["comment"] == 'slurm-bridge:{"notify":"none"}', "to slurmctld's hooks, a job as the bridge's pods'"


def test_hooks_off_leaves_out_slurmctlds_two_hook_lines_and_nothing_else() -> None:
    conf = (
        "ClusterName=local\n"
        "EpilogSlurmctld=/etc/slurm/slurm-bridge-notify.sh\n"
        "# PrologSlurmctld in a comment stays\n"
        "  PrologSlurmctld=/etc/slurm/slurm-bridge-handoff.sh\n"
        "EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh\n"
        "PreemptType=preempt/qos\n"
    )
    assert slurm_ref.without_hooks(conf) == (
        "ClusterName=local\n# PrologSlurmctld in a comment stays\nPreemptType=preempt/qos\n"
    )
    assert slurm_ref.without_hooks("NodeName=a\n") == "NodeName=a\n"


def test_slurmctlds_hooks_are_running_while_its_script_daemon_has_a_child(tmp_path: Path) -> None:
    def proc(pid: int, comm: str, *tasks: tuple[int, str]) -> None:
        (tmp_path / str(pid)).mkdir(exist_ok=True)
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        for tid, kids in tasks:
            (tmp_path / str(pid) / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
            (tmp_path / str(pid) / "task" / str(tid) / "children").write_text(kids)

    proc(100, "slurmctld", (100, ""), (101, "200 "))
    proc(200, "slurmscriptd", (200, ""))  # there as long as slurmctld
    assert not slurm_ref.hooks_running(100, tmp_path)
    proc(200, "slurmscriptd", (200, "300"))
    proc(300, "sh", (300, ""))  # a hook it runs
    assert slurm_ref.hooks_running(100, tmp_path)
    proc(100, "slurmctld", (100, "400"), (101, "200 "))
    proc(200, "slurmscriptd", (200, ""))
    proc(400, "sh", (400, ""))  # a Slurm that runs its hooks itself
    assert slurm_ref.hooks_running(100, tmp_path)
