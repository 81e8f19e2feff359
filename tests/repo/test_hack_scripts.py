"""The cluster scripts fail with one clear line that says what to do, never a hang."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO, log_tails

LIB = REPO / "hack" / "lib.sh"


def _bash(script: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f". {LIB}; {script}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_port_in_use_names_the_port_and_the_variable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = _bash(f"check_port kube-apiserver {port} SB_APISERVER_PORT")
    assert proc.returncode == 1
    assert f"port {port} for kube-apiserver is in use" in proc.stderr
    assert "SB_APISERVER_PORT" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_daemon_not_ready_prints_its_log_tail(tmp_path: Path) -> None:
    proc = _bash(
        "start fake bash -c 'echo starting fake; echo fake is stuck >&2; sleep 30'; wait_ready fake 1 false",
        env={"SLURM_BRIDGE_STATE": str(tmp_path)},
    )
    _bash("stop fake", env={"SLURM_BRIDGE_STATE": str(tmp_path)})
    assert proc.returncode == 1
    assert "fake did not become ready within 1s" in proc.stderr
    assert "fake is stuck" in proc.stderr, "the log tail is shown"


def test_daemon_that_exits_is_reported_at_once(tmp_path: Path) -> None:
    proc = _bash("start fake bash -c 'echo bad flag >&2; exit 3'; wait_ready fake 30 false",
                 env={"SLURM_BRIDGE_STATE": str(tmp_path)}, timeout=20)  # fmt: skip
    assert proc.returncode == 1
    assert "fake exited during start-up" in proc.stderr and "bad flag" in proc.stderr


def test_missing_go_is_reported() -> None:
    go = shutil.which("go")
    assert go, "this test needs Go on PATH (the project builds its cluster binaries with it)"
    path = ":".join(p for p in os.environ["PATH"].split(":") if not Path(p, "go").exists())
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
    )
    assert proc.returncode == 1
    assert "Go is not installed" in proc.stderr


def test_not_root_is_reported() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test checks the root requirement and must itself run as root (as CI does)")
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "bash",
            str(REPO / "hack" / "cluster.sh"),
            "up",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": "/tmp"},
        timeout=60,
    )
    assert proc.returncode == 1
    assert "must run as root" in proc.stderr


def test_failing_go_build_is_reported(tmp_path: Path) -> None:
    # No module proxy: the build cannot fetch its sources and must say which build failed.
    env = {**os.environ, "SLURM_BRIDGE_CACHE": str(tmp_path), "GOPROXY": "off", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run(
        ["bash", str(REPO / "hack" / "build-binaries.sh"), "kwok"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 1
    assert "error: go install sigs.k8s.io/kwok/cmd/kwok@" in proc.stderr and "failed" in proc.stderr


def test_unknown_image_is_named() -> None:
    proc = subprocess.run(["bash", str(REPO / "hack" / "image.sh"), "archive", "nope"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1
    expected = "bridge, scheduler, pause, workload, dra-plugin, slurm or mariadb"
    assert f"unknown image 'nope' (expected {expected})" in proc.stderr


def test_a_pod_network_that_overlaps_a_routed_one_is_refused_before_anything_changes() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test makes a network interface and must run as root (as CI does)")
    subprocess.run(["ip", "link", "add", "sbtest0", "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", "10.250.77.1/24", "dev", "sbtest0"], check=True)
        subprocess.run(["ip", "link", "set", "sbtest0", "up"], check=True)
        net = {"SB_HOST_IP": "10.250.77.9", "SB_POD_CIDR": "10.250.77.0/24", "SB_POD_BRIDGE": "sbtestbr"}
        proc = subprocess.run(["bash", str(REPO / "hack" / "node.sh"), "net-up"],
                              capture_output=True, text=True, timeout=60, env={**os.environ, **net})  # fmt: skip
        assert proc.returncode == 1
        assert "SB_HOST_IP=10.250.77.9 is in a network this machine already routes" in proc.stderr
        assert "sbtest0" in proc.stderr and "SB_POD_CIDR" in proc.stderr
        assert subprocess.run(["ip", "link", "show", "sbtestbr"], capture_output=True).returncode != 0
    finally:
        subprocess.run(["ip", "link", "del", "sbtest0"], check=False)


@pytest.mark.parametrize("env_script", ["cluster.sh", "kind.sh"])
def test_cluster_env_output_does_not_overwrite_the_scripts_inputs(env_script: str) -> None:
    """`eval "$(hack/cluster.sh env)"` (as the README says), or hack/kind.sh's, must leave every SB_*
    setting the scripts read as it was: the node lists it prints once reused the count variables' names."""
    defaults = [
        REPO / "hack" / "lib.sh",
        REPO / "hack" / "kind" / "common.sh",
        *sorted((REPO / "hack" / "cluster").glob("*.sh")),  # cluster.sh's parts
    ]
    inputs = {name for f in defaults for name in re.findall(r"\$\{(SB_[A-Z0-9_]+):=", f.read_text())}
    script = (REPO / "hack" / env_script).read_text()
    body = script[script.index("cmd_env() {") :]
    body = body[: body.index("\n}\n")]
    exported = set(re.findall(r"^export (SB_[A-Z0-9_]+)=", body, re.M))
    assert exported, "cmd_env exports no SB_ variables: the pattern is stale"
    assert {"SB_NODES", "SB_GPU_NODES", "SB_HYBRID_NODES"} <= inputs, "lib.sh's defaults: the pattern is stale"
    # Values that are the same setting (the partition's name, the real node's name) may pass through.
    clash = {name for name in exported & inputs if not re.search(rf"^export {name}=\${name}$", body, re.M)}
    assert not clash, f"hack/{env_script} env would change these inputs: {sorted(clash)}"


def _build_editable(tmp_path: Path, warnings: str | None) -> str:
    """stderr of the editable build that hack/setup-python.sh's pip runs (setuptools' own backend)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    if warnings is not None:
        env["PYTHONWARNINGS"] = warnings
    code = "import sys; from setuptools import build_meta; build_meta.build_editable(sys.argv[1])"
    proc = subprocess.run([sys.executable, "-P", "-c", code, str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_setup_python_silences_setuptools_notice_about_the_mapped_folders(tmp_path: Path) -> None:
    script = (REPO / "hack" / "setup-python.sh").read_text()
    [setting] = re.findall(r'PYTHONWARNINGS="([^"]+)"', script)
    notice = "Please be careful with folders in your working directory"
    assert notice in _build_editable(tmp_path / "a", None), "the notice this guards against (setuptools changed?)"
    assert notice not in _build_editable(tmp_path / "b", setting)


@pytest.mark.parametrize(("wanted", "version"), [("1.34", "v1.34.4"), ("1.36", "v1.36.3"), ("v1.37.2", "v1.37.2")])
def test_sb_kubernetes_picks_the_clusters_version_and_its_own_binaries(wanted: str, version: str) -> None:
    proc = _bash('echo "$KUBERNETES_VERSION $KUBERNETES_MINOR $K8S_BIN_DIR"', {"SB_KUBERNETES": wanted})
    assert proc.returncode == 0, proc.stderr
    got, minor, bin_dir = proc.stdout.split()
    assert got == version and minor == version.split(".")[1] and bin_dir.endswith(f"/bin/kubernetes-{version}")


def test_an_unsupported_sb_kubernetes_names_the_supported_versions() -> None:
    proc = _bash("echo unreachable", {"SB_KUBERNETES": "1.33"})
    assert proc.returncode != 0 and "unreachable" not in proc.stdout
    assert "SB_KUBERNETES=1.33 is not a supported version" in proc.stderr and "v1.37.2" in proc.stderr


def test_failure_reports_show_the_operators_and_slurmctlds_logs_first(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    for name in ("bridge-extender", "slurmctld", "apiserver", "bridge-operator"):
        (tmp_path / "logs" / f"{name}.log").write_text("".join(f"{name} {i}\n" for i in range(40)))
    tails = log_tails(tmp_path, lines=3)
    assert list(tails) == ["bridge-operator", "slurmctld", "apiserver", "bridge-extender"]
    assert tails["slurmctld"] == "slurmctld 37\nslurmctld 38\nslurmctld 39"
