"""The package tree as the runtime sees it, read from pyproject.toml (the one place that says it).

``operator/``, ``webhook/`` and ``extender/`` cannot be top-level packages (the standard library's
``operator`` is loaded first), so ``[tool.setuptools.package-dir]`` maps each top-level folder into
``slurm_bridge``. The tests that check the package list and the import graph, and ``hack/lint.sh``
(mypy's tree of symlinks: ``python -P tests/packages.py``), read the mapping from here.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "slurm_bridge"


def _setuptools() -> dict[str, Any]:
    table: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return table


def package_dirs() -> dict[str, Path]:
    """Package name -> the folder that holds it, for each mapped folder (``slurm_bridge`` itself
    included)."""
    return {name: ROOT / folder for name, folder in _setuptools()["package-dir"].items()}


def listed_packages() -> list[str]:
    """The packages pyproject.toml installs (``[tool.setuptools] packages``)."""
    return list(_setuptools()["packages"])


def folder_packages() -> dict[str, Path]:
    """Every package the folders hold, by the name the runtime gives it: each folder under a
    mapped one that has Python files in it."""
    found: dict[str, Path] = {}
    for name, folder in package_dirs().items():
        for sub in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
            if "__pycache__" in sub.parts or not any(sub.glob("*.py")):
                continue
            found[".".join((name, *sub.relative_to(folder).parts))] = sub
    return found


def module_name(path: Path) -> str:
    """The runtime's dotted name of a source file (the longest mapped folder that holds it)."""
    path = path.resolve()
    best: tuple[str, Path] | None = None
    for name, folder in package_dirs().items():
        if path.is_relative_to(folder) and (best is None or len(folder.parts) > len(best[1].parts)):
            best = (name, folder)
    if best is None:
        raise ValueError(f"{path} is in no package folder of pyproject.toml")
    parts = list(path.relative_to(best[1]).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join((best[0], *parts))


def module_sources() -> dict[str, Path]:
    """Every first-party module's file, by its runtime name."""
    found: dict[str, Path] = {}
    for folder in package_dirs().values():
        for path in folder.rglob("*.py"):
            found.setdefault(module_name(path), path)
    return found


if __name__ == "__main__":
    # For hack/lint.sh: "<path in the typecheck tree> <folder>" of each folder mapped below the root.
    for name, folder in package_dirs().items():
        if name != ROOT_PACKAGE:
            sys.stdout.write(f"{name.replace('.', '/')} {folder.relative_to(ROOT)}\n")
