"""Hybrid nodes are real Slurm nodes: a slurmd serves each (hack/cluster/slurmd.sh), so native
`sbatch` and `salloc` work runs there as the tenant who submitted it, and slurmdbd accounts for it.

The kwok hybrid nodes have no kubelet (kwok plays it), so only Slurm's side is looked at here, plus
the Kubernetes nodes' size, which must match Slurm's. The real node's own test, a container beside a
batch job, is tests/e2e/test_hybrid_real_node.py.
"""

from __future__ import annotations

import os
import secrets
from functools import partial
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.utils import parse_quantity

from tests.harness import TENANTS, SlurmEnv, sacct_record, sbatch_as, wait_for

ALICE = TENANTS["a"]


@pytest.fixture(scope="module")
def hybrid(slurm_env: SlurmEnv) -> list[str]:
    assert len(slurm_env.hybrid_nodes) >= 2, (
        f"the local cluster has {slurm_env.hybrid_nodes} as hybrid nodes; these tests need at least two "
        "(SB_HYBRID_NODES in hack/lib.sh)"
    )
    return slurm_env.hybrid_nodes


def node_fields(slurm: SlurmEnv, name: str) -> dict[str, str]:
    """`scontrol show node NAME -o`, as a dict of its KEY=VALUE words."""
    out = slurm.scontrol("show", "node", name, "-o")
    return dict(word.split("=", 1) for word in out.split() if "=" in word)


def test_hybrid_nodes_are_served_by_slurmd_and_sized_as_their_kubernetes_nodes(
    slurm_env: SlurmEnv, hybrid: list[str], core: k8s.CoreV1Api
) -> None:
    def in_service(name: str) -> dict[str, str] | None:
        fields = node_fields(slurm_env, name)
        return fields if fields["State"] in {"IDLE", "MIXED", "ALLOCATED"} else None

    for name in [*hybrid, slurm_env.real_node]:
        fields = wait_for(partial(in_service, name), 30, f"{name} in service in Slurm")
        # An external node is IDLE+EXTERNAL with no daemon; a slurmd reports its version and start.
        assert "EXTERNAL" not in fields["State"], fields["State"]
        assert fields.get("Version", "(null)") != "(null)" and fields.get("SlurmdStartTime", "None") != "None", fields
        allocatable = core.read_node(name).status.allocatable
        cpus, mib = parse_quantity(allocatable["cpu"]), parse_quantity(allocatable["memory"]) // 2**20
        assert int(fields["CPUTot"]) == cpus, f"{name}: Slurm has {fields['CPUTot']} CPUs, its kubelet {cpus}"
        assert int(fields["RealMemory"]) == mib, f"{name}: Slurm has {fields['RealMemory']} MiB, its kubelet {mib}"
        partition = slurm_env.real_partition if name == slurm_env.real_node else slurm_env.hybrid_partition
        assert fields["Partitions"] == partition, f"{name} is in {fields['Partitions']}, not only {partition}"
    # The default partition keeps its external nodes only, so existing tests and benchmarks see no change.
    for name in slurm_env.nodes:
        assert "EXTERNAL" in node_fields(slurm_env, name)["State"], name


def test_sbatch_runs_a_real_batch_script_as_the_tenant_and_slurmdbd_accounts_for_it(
    slurm_env: SlurmEnv, hybrid: list[str]
) -> None:
    out = f"/tmp/native-{secrets.token_hex(4)}-%j.out"
    script = '#!/bin/sh\necho "uid=$(id -u) gid=$(id -g) node=$SLURMD_NODENAME job=$SLURM_JOB_ID"\n'
    options = ["-p", slurm_env.hybrid_partition, "-w", hybrid[0], "-A", ALICE.accounts[0], "-n", "1", "--mem=64"]
    job_id = sbatch_as(slurm_env, ALICE.user, script, *options, "-o", out, "-J", "native-sbatch")
    record = wait_for(
        lambda: (r := sacct_record(slurm_env, job_id)) and r["State"] not in {"PENDING", "RUNNING"} and r,
        60,
        f"batch job {job_id} to end and be accounted",
    )
    assert record["State"] == "COMPLETED" and record["ExitCode"] == "0:0", record
    assert (record["User"], record["Account"], record["NodeList"]) == (ALICE.user, ALICE.accounts[0], hybrid[0])
    path = Path(str(slurm_env.root) + out.replace("%j", str(job_id)))
    try:
        assert path.read_text().split() == [
            f"uid={ALICE.uid}",
            f"gid={ALICE.gid}",
            f"node={hybrid[0]}",
            f"job={job_id}",
        ]
        assert os.stat(path).st_uid == ALICE.uid, "slurmstepd writes the output file as the job's user"
    finally:
        path.unlink(missing_ok=True)


def test_salloc_gets_an_allocation_and_runs_a_command_in_it(slurm_env: SlurmEnv, hybrid: list[str]) -> None:
    allocation = ["-p", slurm_env.hybrid_partition, "-w", hybrid[1], "-A", ALICE.accounts[0], "-N", "1", "--mem=64"]
    command = ["srun", "sh", "-c", 'echo "$SLURMD_NODENAME $(id -u) $SLURM_JOB_ID"']
    proc = slurm_env.native(ALICE.user, "salloc", *allocation, "-J", "native-salloc", *command)
    assert proc.returncode == 0, f"salloc failed: {proc.stderr}"
    granted = [w for ln in proc.stderr.splitlines() if "Granted job allocation" in ln for w in ln.split()]
    assert granted, f"salloc did not report its allocation: {proc.stderr}"
    job_id = int(granted[-1])
    assert proc.stdout.split() == [hybrid[1], str(ALICE.uid), str(job_id)], proc.stdout
    record = wait_for(
        lambda: (r := sacct_record(slurm_env, job_id)) and r["State"] == "COMPLETED" and r,
        60,
        f"allocation {job_id} accounted as COMPLETED",
    )
    assert (record["User"], record["Account"], record["NodeList"]) == (ALICE.user, ALICE.accounts[0], hybrid[1])
