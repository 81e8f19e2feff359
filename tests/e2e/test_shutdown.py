"""Every component stops within seconds of SIGTERM, at any moment of its life (issue 36 §7).

Real processes against the local cluster: the operator with the shared bridge's own config (its
Lease default/slurm-bridge-operator, the shared operator stopped meanwhile), and with a Slurm of
its own that is unreachable or too old (Slurm 24.11, hack/old-slurm.sh: a bridge id, scheduler
name and Lease namespace of its own); the webhook and the extender. Each is sent SIGTERM at many
points of its start-up, a fresh process each time: after fixed delays, and at the phases its
/healthz, /readyz and log show (serving, leader, ready or not ready, standby). Each time it must
exit with status 0 within STOP_WITHIN seconds, and an operator must leave its Lease to no one: a
standby takes over at once, not after the Lease's 15 s.
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import socket
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s

from tests.harness import BRIDGE_SH, REPO, holds_for, run, wait_for

STOP_WITHIN = 5.0  # seconds from SIGTERM to the process's exit
# Seconds after the start. 0: the first moment the process's Python owns SIGTERM (its entry
# module's first line; before that the interpreter is still starting, and the kernel's default
# applies), seen in /proc/<pid>/status, so a slow start-up on a loaded machine does not move it.
DELAYS = (0.0, 0.3, 0.6, 1.0, 2.0, 4.0)
LEASE_SECONDS = 15  # the operator's leaseDurationSeconds: a takeover faster than this was handed over
BIN = REPO / ".venv" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Process:
    """One component process, its log in a file."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log_path = log
        with log.open("w") as out:
            # PYTHONFAULTHANDLER: a process that does not stop is sent SIGABRT, so its log shows where.
            env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.identity = f"{socket.gethostname()}_{self.proc.pid}"  # the operator's Lease identity

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.proc.poll() is None

    def says(self, text: str) -> bool:
        assert self.running(), f"{self.log_path.name} exited ({self.proc.returncode}):\n{self.log()[-3000:]}"
        return text in self.log()

    def alive_for(self, seconds: float) -> None:
        holds_for(self.running, seconds, f"{self.log_path.name} running", interval=min(0.05, seconds / 2))

    def owns_sigterm(self) -> bool:
        """Whether the process catches SIGTERM (its SigCgt mask), that is, its Python took it."""
        assert self.running(), f"{self.log_path.name} exited ({self.proc.returncode}):\n{self.log()[-3000:]}"
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
        return False

    def at(self, delay: float) -> str:
        """Wait until ``delay`` seconds after the start (0: until it owns SIGTERM); says when."""
        if delay:
            self.alive_for(delay)
            return f"{delay} s after its start"
        wait_for(self.owns_sigterm, 30, f"{self.log_path.name} to take SIGTERM", interval=0.002)
        return "at its first line"

    def stop(self, when: str) -> None:
        """SIGTERM; the process must exit with status 0 within STOP_WITHIN seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # the faulthandler's stacks into the log
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(
                f"{self.log_path.name}, SIGTERM {when}: still running {STOP_WITHIN} s later:\n{self.log()[-4000:]}"
            ) from None
        assert code == 0, f"{self.log_path.name}, SIGTERM {when}: exit status {code}:\n{self.log()[-4000:]}"

    def kill(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """Every process a test starts; any left running is killed at its end."""
    started: list[Process] = []
    yield started
    for p in started:
        p.kill()


def _get(url: str, **kw: Any) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2, **kw)
    except httpx.HTTPError:
        return None


class Operators:
    """Starts operators with one config (health port and log name their own)."""

    def __init__(
        self, config: dict[str, Any], lease: tuple[str, str], kubeconfig: Path, tmp: Path, started: list[Process]
    ):
        self.config, self.lease, self.kubeconfig, self.tmp, self.started = config, lease, kubeconfig, tmp, started
        self.ports: dict[int, int] = {}

    def start(self, name: str) -> Process:
        port = _free_port()
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**self.config, "operatorHealthListen": f"127.0.0.1:{port}"}))
        argv = [str(BIN / "slurm-bridge-operator"), "--config", str(path), "--kubeconfig", str(self.kubeconfig),
                "--lease-namespace", self.lease[0], "--log-format", "text"]  # fmt: skip
        p = Process(argv, self.tmp / f"{name}.log")
        self.started.append(p)
        self.ports[p.proc.pid] = port
        return p

    def readyz(self, p: Process) -> httpx.Response | None:
        assert p.running(), f"{p.log_path.name} exited ({p.proc.returncode}):\n{p.log()[-3000:]}"
        return _get(f"http://127.0.0.1:{self.ports[p.proc.pid]}/readyz")

    def holder(self, coordination: k8s.CoordinationV1Api) -> str:
        try:
            lease = coordination.read_namespaced_lease(self.lease[1], self.lease[0])
        except k8s.ApiException as e:
            if e.status == 404:
                return ""
            raise
        return str(lease.spec.holder_identity or "")


@pytest.fixture
def coordination(api_client: k8s.ApiClient) -> k8s.CoordinationV1Api:
    return k8s.CoordinationV1Api(api_client)


@pytest.fixture
def shared_config(bridge: dict[str, str]) -> Iterator[dict[str, Any]]:
    """The shared bridge's operator config, its operator stopped meanwhile (and started again)."""
    config_path = run(["bash", str(BRIDGE_SH), "config"]).stdout.strip()
    config: dict[str, Any] = yaml.safe_load(Path(config_path).read_text())
    run(["bash", str(BRIDGE_SH), "stop", "operator"], timeout=120)
    try:
        yield config
    finally:
        proc = run(["bash", str(BRIDGE_SH), "start", "operator"], check=False, timeout=300)
        assert proc.returncode == 0, f"the shared operator did not start again:\n{proc.stderr[-3000:]}"


def _own_config(slurm_url: str, jwt: str, namespace: str) -> dict[str, Any]:
    """An operator that shares nothing with the shared bridge: its bridge id (and so its Lease),
    scheduler name and managed namespace are its own."""
    tag = secrets.token_hex(3)
    return {"bridgeId": f"stop-{tag}", "schedulerName": f"stop-{tag}", "slurmRestApi": slurm_url,
            "slurmJwtFile": jwt, "managedNamespaces": [namespace]}  # fmt: skip


def _stops_at_every_delay(ops: Operators, coordination: k8s.CoordinationV1Api, name: str) -> None:
    for delay in DELAYS:
        p = ops.start(f"{name}-after-{delay}s")
        when = p.at(delay)
        p.stop(when)
        assert ops.holder(coordination) != p.identity, f"{when}: the Lease is left held by the stopped operator"


def _stops_at_each_phase(
    ops: Operators, coordination: k8s.CoordinationV1Api, name: str, settled: Callable[[httpx.Response], bool]
) -> None:
    """SIGTERM once /healthz answers, once it leads, once /readyz says what it settled on."""
    phases: list[tuple[str, Callable[[Process], Any]]] = [
        ("serving /healthz", lambda p: ops.readyz(p) is not None),
        ("leading", lambda p: p.says("became leader")),
        ("settled (/readyz)", lambda p: p.says("became leader") and (r := ops.readyz(p)) is not None and settled(r)),
    ]
    for phase, reached in phases:
        p = ops.start(f"{name}-{phase.split()[0]}")
        wait_for(functools.partial(reached, p), 60, f"the operator {phase}", interval=0.05)
        leading = p.says("became leader")
        p.stop(f"once {phase}")
        holder = ops.holder(coordination)
        assert holder != p.identity, f"once {phase}: the stopped operator still holds the Lease"
        if leading:
            assert holder == "", f"once {phase}: the Lease names {holder!r}, not no one"
        assert "released the leader lease" in p.log() or not leading, p.log()[-3000:]


def test_the_bridges_operator_stops_at_once_at_every_moment_and_hands_its_lease_over(
    shared_config: dict[str, Any], cluster: dict[str, str], coordination: k8s.CoordinationV1Api,
    tmp_path: Path, processes: list[Process],
) -> None:  # fmt: skip
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    lease = ("default", f"{shared_config.get('bridgeId', 'slurm-bridge')}-operator")
    ops = Operators(shared_config, lease, kubeconfig, tmp_path, processes)
    _stops_at_every_delay(ops, coordination, "op")
    _stops_at_each_phase(ops, coordination, "op", lambda r: r.status_code == 200 and r.text == "ok")


def test_a_standby_stops_at_once_and_a_stopped_leaders_standby_takes_over_at_once(
    shared_config: dict[str, Any], cluster: dict[str, str], coordination: k8s.CoordinationV1Api,
    tmp_path: Path, processes: list[Process],
) -> None:  # fmt: skip
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    ops = Operators(shared_config, ("default", f"{shared_config.get('bridgeId', 'slurm-bridge')}-operator"),
                    kubeconfig, tmp_path, processes)  # fmt: skip
    leader = ops.start("leader")
    wait_for(lambda: ops.holder(coordination) == leader.identity, 60, "the first operator to lead")

    def standby_ready(p: Process) -> bool:
        r = ops.readyz(p)
        return r is not None and r.status_code == 200 and "standby" in r.text

    standby = ops.start("standby")
    wait_for(lambda: standby_ready(standby), 60, "the second operator to be a ready standby", interval=0.1)
    standby.stop("as a ready standby")
    assert ops.holder(coordination) == leader.identity, "a standby's stop touches no Lease it does not hold"

    heir = ops.start("heir")
    wait_for(lambda: standby_ready(heir), 60, "the third operator to be a ready standby", interval=0.1)
    leader.stop("as the leader, with a standby")
    # The heir takes over within a few seconds (it retries each second), not after the Lease's
    # 15 s: the stopped leader emptied it.
    wait_for(lambda: ops.holder(coordination) == heir.identity, LEASE_SECONDS / 3, "the standby to take over at once")
    heir.stop("as the leader it just became")
    assert ops.holder(coordination) == ""


@pytest.mark.parametrize("slurm", ["unreachable", "24.11"])
def test_an_operator_whose_slurm_is_unreachable_or_too_old_stops_at_once_at_every_moment(
    slurm: str, request: pytest.FixtureRequest, cluster: dict[str, str], namespace: str,
    coordination: k8s.CoordinationV1Api, tmp_path: Path, processes: list[Process],
) -> None:  # fmt: skip
    if slurm == "unreachable":
        jwt = tmp_path / "jwt"
        jwt.write_text("not-a-token\n")
        url, token, says = f"http://127.0.0.1:{_free_port()}", str(jwt), "cannot reach slurmrestd"
    else:
        old: dict[str, str] = request.getfixturevalue("old_slurm")
        url, token, says = old["SLURM_REST_URL"], old["SLURM_JWT_FILE"], "Slurm 24.11"
    config = _own_config(url, token, namespace)
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    ops = Operators(config, (namespace, f"{config['bridgeId']}-operator"), kubeconfig, tmp_path, processes)
    _stops_at_every_delay(ops, coordination, slurm)
    _stops_at_each_phase(ops, coordination, slurm, lambda r: r.status_code == 503 and says in r.text)


def _component_stops(start: Callable[[str], Process], serving: Callable[[Process], bool], within: float = 0) -> None:
    for delay in DELAYS:
        p = start(f"after-{delay}s")
        p.stop(p.at(delay))
    p = start("serving")
    wait_for(lambda: p.running() and serving(p), 60, "the component to serve", interval=0.05)
    p.stop("once serving")


def test_the_webhook_stops_at_once_at_every_moment(
    cluster: dict[str, str], tmp_path: Path, processes: list[Process]
) -> None:
    tls = tmp_path / "tls"
    run([str(BIN / "slurm-bridge-webhook"), "gen-certs", "--dir", str(tls), "--host", "127.0.0.1"])
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    ports: dict[int, int] = {}

    def start(name: str, drain: float = 0) -> Process:
        port = _free_port()
        config = {"webhookListen": f"127.0.0.1:{port}", "webhookCertFile": str(tls / "tls.crt"),
                  "webhookKeyFile": str(tls / "tls.key")}  # fmt: skip
        (tmp_path / f"webhook-{name}.yaml").write_text(yaml.safe_dump(config))
        argv = [str(BIN / "slurm-bridge-webhook"), "--config", str(tmp_path / f"webhook-{name}.yaml"),
                "--kubeconfig", str(kubeconfig), "--log-format", "text",
                "serve", "--drain-seconds", str(drain)]  # fmt: skip
        p = Process(argv, tmp_path / f"webhook-{name}.log")
        processes.append(p)
        ports[p.proc.pid] = port
        return p

    def serving(p: Process) -> bool:
        r = _get(
            f"https://127.0.0.1:{ports[p.proc.pid]}/readyz", verify=ssl.create_default_context(cafile=tls / "ca.crt")
        )
        return r is not None and r.status_code == 200

    _component_stops(start, serving)
    # Its drain (the chart's default is 5 s) keeps serving that long, then it stops.
    draining = start("draining", drain=1.0)
    wait_for(lambda: draining.running() and serving(draining), 60, "the webhook to serve", interval=0.05)
    draining.stop("once serving, with a 1 s drain")
    assert "webhook draining" in draining.log()


def test_the_extender_stops_at_once_at_every_moment(
    cluster: dict[str, str], tmp_path: Path, processes: list[Process]
) -> None:
    kubeconfig = Path(cluster["SB_STATE_DIR"]) / "kubeconfig-bridge"
    ports: dict[int, int] = {}

    def start(name: str) -> Process:
        port, health = _free_port(), _free_port()
        config = {"extenderListen": f"127.0.0.1:{port}", "extenderHealthListen": f"127.0.0.1:{health}"}
        (tmp_path / f"extender-{name}.yaml").write_text(yaml.safe_dump(config))
        argv = [str(BIN / "slurm-bridge-extender"), "--config", str(tmp_path / f"extender-{name}.yaml"),
                "--kubeconfig", str(kubeconfig), "--log-format", "text"]  # fmt: skip
        p = Process(argv, tmp_path / f"extender-{name}.log")
        processes.append(p)
        ports[p.proc.pid] = health
        return p

    def serving(p: Process) -> bool:
        r = _get(f"http://127.0.0.1:{ports[p.proc.pid]}/readyz")
        return r is not None and r.status_code == 200

    _component_stops(start, serving)
