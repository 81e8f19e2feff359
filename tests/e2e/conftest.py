"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
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


@pytest.fixture
def policy(custom: k8s.CustomObjectsApi) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Create TenantPolicies with unique names; every one is deleted after the test."""
    made: list[str] = []

    def create(spec: dict[str, Any]) -> str:
        name = f"e2e-{secrets.token_hex(4)}"
        body = {"apiVersion": names.API_VERSION, "kind": names.TP_KIND, "metadata": {"name": name}, "spec": spec}
        custom.create_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, body)
        made.append(name)
        return name

    yield create
    for name in made:
        try:
            custom.delete_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise
