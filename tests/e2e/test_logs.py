"""The bridge's real logs (the process bridge's log files, at DEBUG): one JSON format for all three
components, lines about an object carry its namespace, name and Slurm job id, and the Slurm JWT
appears in none of them."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import get_phj, make_pod, read_pod
from tests.harness import BRIDGE_SH, PrerequisiteMissing, SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
COMPONENTS = ("operator", "webhook", "extender")


def _restart(level: str) -> None:
    for c in COMPONENTS:
        proc = subprocess.run(["bash", str(BRIDGE_SH), "restart", c], env={**os.environ, "SB_LOG_LEVEL": level},
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        if proc.returncode != 0:
            raise PrerequisiteMissing(f"`SB_LOG_LEVEL={level} hack/bridge.sh restart {c}`: {proc.stderr[-3000:]}")


@pytest.fixture(scope="module")
def debug_bridge(bridge: dict[str, str]) -> Iterator[Path]:
    """The three components restarted at DEBUG; back at INFO afterwards."""
    _restart("DEBUG")
    try:
        yield Path(bridge["SB_STATE_DIR"]) / "logs"
    finally:
        _restart("INFO")


def _lines(logs: Path, component: str, offset: int) -> list[dict[str, Any]]:
    text = (logs / f"bridge-{component}.log").read_bytes()[offset:].decode(errors="replace")
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def test_real_logs_share_one_format_name_their_objects_and_never_hold_the_jwt(
    debug_bridge: Path, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, ns: str, slurm_env: SlurmEnv
) -> None:
    logs = debug_bridge
    offsets = {c: (logs / f"bridge-{c}.log").stat().st_size for c in COMPONENTS}
    # A Slurm annotation: the validating webhook reviews the create (a plain pod's create reaches no
    # webhook where the pod policy hands it over: webhook/podpolicy.py), so the webhook has a line.
    core.create_namespaced_pod(ns, make_pod("logged", annotations={names.ANN_TIMELIMIT: "10"}))
    wait_for(lambda: (p := read_pod(core, ns, "logged")) and p.status.phase == "Running", 60, "pod logged Running")
    job_id = get_phj(custom, ns, "logged")["status"]["jobId"]  # type: ignore[index]
    core.delete_namespaced_pod("logged", ns)
    wait_for(lambda: get_phj(custom, ns, "logged") is None, 60, "the PlaceholderJob finalized")

    lines = {c: _lines(logs, c, offsets[c]) for c in COMPONENTS}
    # At DEBUG every component logged, each line one JSON object with the same keys.
    for c, got in lines.items():
        assert got, f"bridge-{c}.log has no JSON line since the pod was made"
        for line in got:
            assert {"ts", "level", "logger", "msg"} <= set(line), (c, line)
            assert line["level"] in ("debug", "info", "warning", "error", "critical"), (c, line)
    assert any(line["level"] == "debug" for got in lines.values() for line in got), "DEBUG was not on"

    def about(c: str, words: str) -> list[dict[str, Any]]:
        return [ln for ln in lines[c] if words in ln["msg"] and ln.get("namespace") == ns]

    submitted = about("operator", f"submitted Slurm job {job_id}")
    assert submitted, "the operator's submit line carries the namespace"
    assert submitted[0]["name"] == "logged" and submitted[0]["jobId"] == job_id
    assert any(ln.get("jobId") == job_id for ln in about("operator", f"cancelled Slurm job {job_id}"))
    decisions = about("webhook", "admission decision")
    assert decisions and all(ln["name"] == "logged" and "jobId" in ln for ln in decisions)
    bound = about("extender", "bound")
    assert bound and bound[0]["name"] == "logged"

    # The token the operator read, in no line of any component, from the start of the logs.
    token = slurm_env.token
    assert len(token) > 20
    for c in COMPONENTS:
        text = (logs / f"bridge-{c}.log").read_text(errors="replace")
        assert token not in text, f"bridge-{c}.log holds the Slurm JWT"
        for part in token.split("."):  # nor one of its three parts (header, claims, signature)
            assert len(part) < 16 or part not in text, f"bridge-{c}.log holds part of the Slurm JWT"
