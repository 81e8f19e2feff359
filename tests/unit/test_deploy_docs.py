"""docs/quickstart.md shows the very `helm install` that hack/deploy.sh runs, which is what the
demo and the deployed test tier install."""

from __future__ import annotations

import shlex
from pathlib import Path

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


def _helm_install(text: str, verb: str) -> list[str]:
    prefix = f"helm {verb} slurm-bridge "
    # The local cluster's install (the real-cluster section has one of its own).
    found = [shlex.split(ln, comments=True) for ln in _lines(text) if ln.startswith(prefix) and VALUES in ln]
    assert len(found) == 1, f"expected one `{prefix}... {VALUES} ...`, found {len(found)}"
    return found[0]


def test_quickstart_shows_the_helm_install_that_deploy_runs() -> None:
    doc = _helm_install((REPO / "docs" / "quickstart.md").read_text(), "install")
    script = _helm_install((REPO / "hack" / "deploy.sh").read_text(), "$verb")
    assert doc[2:] == script[2:], f"docs/quickstart.md:\n  {shlex.join(doc)}\nhack/deploy.sh:\n  {shlex.join(script)}"
