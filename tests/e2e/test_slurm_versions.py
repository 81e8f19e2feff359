"""A Slurm too old for the bridge, for real (issue 21 §6): Slurm 24.11 from Debian trixie (REST API
v0.0.40-42, no external jobs), started by hack/old-slurm.sh beside the local cluster. The Slurm
client names the release it found and the one it needs, and an operator pointed at it is not ready
and says so on /readyz, rather than waiting or retrying in silence."""

from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client as k8s

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmUnsupportedVersion
from tests.harness import REPO, wait_for


def test_the_slurm_client_names_the_old_release_and_the_one_it_needs(old_slurm: dict[str, str]) -> None:
    assert old_slurm["SLURM_RELEASE"].startswith("slurm 24.11"), old_slurm

    async def discover() -> SlurmUnsupportedVersion:
        async with SlurmClient(old_slurm["SLURM_REST_URL"], token_file=Path(old_slurm["SLURM_JWT_FILE"])) as c:
            with pytest.raises(SlurmUnsupportedVersion) as e:
                await c.api_version()
        return e.value

    error = asyncio.run(discover())
    assert error.release is not None and error.release.startswith("24.11"), error
    assert f"is Slurm {error.release}" in str(error) and "needs Slurm 25.05 or newer" in str(error)
    assert "v0.0.42" in error.offered and not {"v0.0.43", "v0.0.44", "v0.0.45"} & set(error.offered)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_an_operator_pointed_at_slurm_24_11_is_not_ready_and_says_why(
    old_slurm: dict[str, str], cluster: dict[str, str], core: k8s.CoreV1Api, tmp_path: Path
) -> None:
    # Its own bridge id, scheduler name and Lease namespace: it shares nothing with the bridge
    # the other tests use.
    ns = f"old-slurm-{secrets.token_hex(3)}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    port = _free_port()
    config = {
        "bridgeId": f"old-{secrets.token_hex(3)}",
        "schedulerName": f"old-slurm-{secrets.token_hex(3)}",
        "slurmRestApi": old_slurm["SLURM_REST_URL"],
        "slurmJwtFile": old_slurm["SLURM_JWT_FILE"],
        "operatorHealthListen": f"127.0.0.1:{port}",
        "managedNamespaces": [ns],
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    log = (tmp_path / "operator.log").open("w")
    operator = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "slurm-bridge-operator"), "--config", str(tmp_path / "config.yaml"),
         "--kubeconfig", str(kubeconfig), "--lease-namespace", ns, "--log-format", "text"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def refused() -> str | None:
            r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            return r.text if r.status_code == 503 and "Slurm 24.11" in r.text else None

        why = wait_for(refused, 60, "the operator's /readyz to name Slurm 24.11")
        assert "needs Slurm 25.05 or newer" in why and old_slurm["SLURM_REST_URL"] in why, why
        assert operator.poll() is None, "not ready, but running: it keeps checking, and an upgrade makes it ready"
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        log.close()
        core.delete_namespace(ns)
    assert "Slurm 24.11" in (tmp_path / "operator.log").read_text(), "the log says it too"
