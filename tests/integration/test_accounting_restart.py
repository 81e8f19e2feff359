"""`hack/cluster.sh up` starts a stopped slurmdbd (and MariaDB) again, as it does every other
process, and the accounting database survives it: associations and finished jobs are still there,
nothing is added twice, and jobs that end afterwards are accounted (issue 32 §3). It used to refuse
("run down and up"), which threw the whole cluster away."""

from __future__ import annotations

import os

import pytest

from tests.harness import CLUSTER_SH, TENANTS, SlurmEnv, process_states, run, sacct_record, sbatch_as, wait_for

ALICE = TENANTS["a"]


def associations(slurm: SlurmEnv) -> list[str]:
    """Every association in slurmdbd, as cluster|account|user."""
    out = run(
        ["bash", str(CLUSTER_SH), "slurm", "sacctmgr", "-n", "-P", "list", "assoc", "format=cluster,account,user"]
    )
    return sorted(out.stdout.split())


def pid_file(slurm: SlurmEnv, name: str) -> str:
    """The pid hack/cluster.sh recorded for a process (a restart records a new one)."""
    return (slurm.state_dir / "pids" / f"{name}.pid").read_text().strip()


def finished_job(slurm: SlurmEnv, name: str) -> int:
    """A native batch job of alice's that has ended and been accounted."""
    options = ["-p", slurm.hybrid_partition, "-A", ALICE.accounts[0], "-n", "1", "--mem=32", "-o", "/dev/null"]
    job_id = sbatch_as(slurm, ALICE.user, "#!/bin/sh\ntrue\n", *options, "-J", name)
    wait_for(
        lambda: (r := sacct_record(slurm, job_id)) and r["State"] == "COMPLETED",
        60,
        f"job {job_id} accounted as COMPLETED",
    )
    return job_id


@pytest.mark.parametrize("stopped", [("slurmdbd",), ("slurmdbd", "mariadb")], ids=["slurmdbd", "slurmdbd+mariadb"])
def test_up_restarts_stopped_accounting_and_keeps_its_database(slurm_env: SlurmEnv, stopped: tuple[str, ...]) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test runs `hack/cluster.sh up`, which needs root (as CI has)")
    before_job = finished_job(slurm_env, "before-restart")
    before = associations(slurm_env)
    assert f"slurm-bridge-local|{ALICE.accounts[0]}|{ALICE.user}" in before, before
    kept = {"munged", "slurmctld", "slurmrestd", "mariadb"} - set(stopped)
    pids = {n: pid_file(slurm_env, n) for n in kept}
    for name in stopped:
        run(["bash", str(CLUSTER_SH), "stop", name])
    assert all(process_states()[n] == "stopped" for n in stopped), process_states()

    proc = run(["bash", str(CLUSTER_SH), "up"], check=False, timeout=900)
    assert proc.returncode == 0, f"`hack/cluster.sh up` did not restart {stopped}:\n{proc.stderr[-3000:]}"

    states = process_states()
    assert all(states[n] == "running" for n in stopped), states
    assert {n: pid_file(slurm_env, n) for n in kept} == pids, "up restarted processes that were running"
    assert associations(slurm_env) == before, "the associations changed across the restart"
    record = sacct_record(slurm_env, before_job)
    assert record is not None and record["State"] == "COMPLETED", f"job {before_job} lost from the database: {record}"
    assert (record["User"], record["Account"]) == (ALICE.user, ALICE.accounts[0]), record
    finished_job(slurm_env, "after-restart")  # slurmctld reaches the new slurmdbd
