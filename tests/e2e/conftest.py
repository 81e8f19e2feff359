"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import Native, end_workloads
from tests.harness import MANAGED_LABEL, REPO, TENANTS, PrerequisiteMissing, SlurmEnv, run, wait_for

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


@pytest.fixture
def tenant_namespace(core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi) -> Iterator[str]:
    """A fresh managed namespace under a TenantPolicy of its own for tenant a (its user, group,
    accounts and QOS), once the policy's status selects it; both deleted after the test."""
    tenant = TENANTS["a"]
    ns = f"tenant-{secrets.token_hex(3)}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns, labels={MANAGED_LABEL: "true"})))
    name = f"e2e-{secrets.token_hex(4)}"
    spec = {
        "namespaces": [ns],
        "user": {"name": tenant.user},
        "group": {"id": tenant.gid},
        "accounts": {"default": tenant.accounts[0], "allowed": list(tenant.accounts)},
        "qos": {"default": tenant.qos, "allowed": [tenant.qos, "normal"]},
    }
    body = {"apiVersion": names.API_VERSION, "kind": names.TP_KIND, "metadata": {"name": name}, "spec": spec}
    custom.create_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, body)
    try:

        def selected() -> bool:
            policy = custom.get_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, name)
            return ns in (policy.get("status") or {}).get("namespaces", [])

        wait_for(selected, 30, f"TenantPolicy {name} to select {ns}")
        yield ns
    finally:
        custom.delete_cluster_custom_object(names.GROUP, names.VERSION, names.TP_PLURAL, name)
        core.delete_namespace(ns)


@pytest.fixture
def native(slurm_env: SlurmEnv) -> Iterator[Native]:
    """Native batch jobs of the test (tests/e2e/util.py Native), cancelled at its end."""
    jobs = Native(slurm_env)
    yield jobs
    jobs.cancel_all()
