"""Fixtures of the kind layer (tests/kind), shared by its files."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.util import Native
from tests.harness import KIND_SH, PrerequisiteMissing, SlurmEnv, run


@pytest.fixture(scope="session")
def kind_bridge(cluster: dict[str, str]) -> dict[str, str]:
    """The bridge installed with its chart (hack/kind.sh install: an upgrade when it is there). The
    deployed tier, which runs after these tests, uninstalls it at its end."""
    proc = run(["bash", str(KIND_SH), "install"], check=False, timeout=1200)
    if proc.returncode != 0:
        raise PrerequisiteMissing(f"`hack/kind.sh install` failed:\n{proc.stderr[-3000:]}")
    return cluster


@pytest.fixture
def native(slurm_env: SlurmEnv) -> Iterator[Native]:
    """Native batch jobs of the test (tests/e2e/util.py Native), cancelled at its end."""
    jobs = Native(slurm_env)
    yield jobs
    jobs.cancel_all()
