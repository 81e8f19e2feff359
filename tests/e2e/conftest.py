"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.e2e.util import end_workloads
from tests.harness import REPO, PrerequisiteMissing, SlurmEnv, run

OLD_SLURM_SH = REPO / "hack" / "old-slurm.sh"


@pytest.fixture
def workload_kinds() -> tuple[tuple[str, str, str], ...]:
    """(group, version, plural) of the custom workloads `ns` deletes; a test module overrides it."""
    return ()


@pytest.fixture
def ns(
    managed_namespace: str, core: k8s.CoreV1Api, batch: k8s.BatchV1Api, custom: k8s.CustomObjectsApi,
    slurm_env: SlurmEnv, workload_kinds: tuple[tuple[str, str, str], ...],
) -> Iterator[str]:  # fmt: skip
    """A managed namespace whose workloads, pods and Slurm jobs all end with the test."""
    yield managed_namespace
    end_workloads(managed_namespace, core, batch, custom, slurm_env, workload_kinds)


@pytest.fixture(scope="module")
def old_slurm(cluster: dict[str, str]) -> Iterator[dict[str, str]]:
    """Slurm 24.11's slurmctld and slurmrestd (the root is built once, then reused), beside the
    local cluster (tests/e2e/test_slurm_versions.py, test_shutdown.py)."""
    proc = run(["bash", str(OLD_SLURM_SH), "up"], check=False, timeout=900)
    if proc.returncode != 0:
        raise PrerequisiteMissing(
            f"`hack/old-slurm.sh up` failed (it needs Debian trixie's Slurm):\n{proc.stderr[-3000:]}"
        )
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    yield env
    run(["bash", str(OLD_SLURM_SH), "down"], check=False, timeout=120)
