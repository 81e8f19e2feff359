"""The folder tree is the package tree (issue 30 §1): pyproject.toml's package list matches the
folders, the runtime finds each package in its folder, and the import sorter counts the
components as first-party, as they are at runtime (mypy checks the same tree: hack/lint.sh builds
it from the same mapping)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packages import ROOT, folder_packages, listed_packages, module_name, package_dirs

pytestmark = pytest.mark.unit

RUFF = Path(sys.executable).with_name("ruff")


def test_the_package_list_matches_the_folders() -> None:
    listed, found = set(listed_packages()), set(folder_packages())
    assert listed == found, (
        f"folders that are not listed in pyproject.toml's packages: {sorted(found - listed)}; "
        f"listed packages without a folder: {sorted(listed - found)}"
    )


def test_every_package_folder_has_an_init() -> None:
    missing = [str(p.relative_to(ROOT)) for p in folder_packages().values() if not (p / "__init__.py").is_file()]
    assert not missing, f"package folders without __init__.py: {missing}"


def test_the_runtime_finds_each_package_in_its_folder() -> None:
    wrong = {}
    for name, folder in folder_packages().items():
        spec = importlib.util.find_spec(name)
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        if [Path(p).resolve() for p in where] != [folder.resolve()]:
            wrong[name] = where
    assert not wrong, f"packages the runtime finds elsewhere (reinstall: bash hack/setup-python.sh): {wrong}"


def test_source_files_are_named_as_at_runtime() -> None:
    assert module_name(ROOT / "operator" / "main.py") == "slurm_bridge.operator.main"
    assert module_name(ROOT / "operator" / "__init__.py") == "slurm_bridge.operator"
    assert module_name(ROOT / "slurm_bridge" / "slurm" / "client.py") == "slurm_bridge.slurm.client"
    assert set(package_dirs()) >= {"slurm_bridge", "slurm_bridge.operator", "slurm_bridge.webhook"}


GROUPED = """from __future__ import annotations

import kopf

from slurm_bridge import names
from slurm_bridge.operator.runtime.workqueue import WorkQueue
"""
# How ruff sorted the operator's imports before it knew them as first-party.
THIRD_PARTY = """from __future__ import annotations

import kopf
from slurm_bridge.operator.runtime.workqueue import WorkQueue

from slurm_bridge import names
"""


@pytest.mark.parametrize(("source", "sorted_"), [(GROUPED, True), (THIRD_PARTY, False)])
def test_the_import_sorter_counts_the_components_as_first_party(source: str, sorted_: bool) -> None:
    ruff = subprocess.run(
        [str(RUFF), "check", "--select", "I", "--stdin-filename", "operator/example.py", "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert (ruff.returncode == 0) == sorted_, ruff.stdout + ruff.stderr
