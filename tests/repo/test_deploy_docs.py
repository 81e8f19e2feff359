"""docs/quickstart.md shows the very `helm install` that hack/deploy.sh runs (the local cluster) and
the one hack/kind.sh runs (kind), which are what the demo and the deployed test tier install."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VALUES = "hack/local-values.yaml"


def _lines(text: str) -> list[str]:
    """Lines with their shell continuation lines joined."""
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        out.append(current + stripped)
        current = ""
    return out


def _helm_install(text: str, verb: str, values: str = VALUES) -> list[str]:
    prefix = f"helm {verb} slurm-bridge "
    # The install of one cluster, told apart by its values file (the real-cluster section has its own).
    found = [shlex.split(ln, comments=True) for ln in _lines(text) if ln.startswith(prefix) and values in ln]
    assert len(found) == 1, f"expected one `{prefix}... {values} ...`, found {len(found)}"
    return found[0]


@pytest.mark.parametrize(("script", "values"), [("deploy.sh", VALUES), ("kind.sh", "hack/kind/values.yaml")])
def test_quickstart_shows_the_helm_install_that_the_script_runs(script: str, values: str) -> None:
    doc = _helm_install((REPO / "docs" / "quickstart.md").read_text(), "install", values)
    ran = _helm_install((REPO / "hack" / script).read_text(), "$verb", values)
    assert doc[2:] == ran[2:], f"docs/quickstart.md:\n  {shlex.join(doc)}\nhack/{script}:\n  {shlex.join(ran)}"
