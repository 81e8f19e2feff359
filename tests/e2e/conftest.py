"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from tests.e2e.util import end_workloads
from tests.harness import SlurmEnv


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
