"""The default kube-scheduler's API client settings, read and, for a fair comparison, matched.

The local cluster's default kube-scheduler (hack/cluster/kube.sh) runs with the stock client
settings (``qps: 50, burst: 100``), the bridge's own kube-scheduler and kube-controller-manager
at 200/400: a default-scheduler run next to a bridge run compares the bridge against a rate
limiter as well. ``client_settings`` reads each scheduler's from its ``/configz`` (its port from
its command line, ``--secure-port``; the admin kubeconfig's client certificate), so that every
run says what it compared against. ``DefaultScheduler`` starts a second default kube-scheduler
(the same binary and feature gates, its own profile name, and ``clientConnection: {qps, burst}``
as given) that the default scheduler's pods of a run name, and stops it after: the comparison at
the bridge's settings without restarting the cluster's own scheduler, which other work shares.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# The profile name of the bench's own default scheduler: the default scheduler's pods of a run
# that compares at given settings name it (spec.schedulerName).
BENCH_SCHEDULER = "bench-default-scheduler"
STOCK = "stock"
BRIDGE = "bridge"


def parse_client(spec: str) -> tuple[float, int] | str:
    """``--default-client``: "stock" (the cluster's default scheduler as it runs), "bridge" (the
    bridge's kube-scheduler's qps and burst, read from it) or "QPS/BURST" (e.g. "200/400")."""
    if spec in (STOCK, BRIDGE):
        return spec
    qps, sep, burst = spec.partition("/")
    try:
        value = (float(qps), int(burst))
    except ValueError:
        value = (0.0, 0)
    if not sep or value[0] <= 0 or value[1] <= 0:
        raise ValueError(f"--default-client {spec!r}: expected stock, bridge or QPS/BURST (e.g. 200/400)")
    return value


def secure_port(argv: list[str]) -> int | None:
    """A Kubernetes component's ``--secure-port`` from its command line (either spelling)."""
    for i, arg in enumerate(argv):
        if arg == "--secure-port" and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith("--secure-port=") and arg.split("=", 1)[1].isdigit():
            return int(arg.split("=", 1)[1])
    return None


def cmdline(pid: int) -> list[str]:
    return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if a]


def _key(d: Any, key: str) -> Any:
    """``d[key]``, the key's case aside (a component's /configz may show its internal type)."""
    if isinstance(d, dict):
        return next((v for k, v in d.items() if k.lower() == key.lower()), None)
    return None


def client_settings(configz: dict[str, Any]) -> dict[str, Any]:
    """{"qps": ..., "burst": ...} of a kube-scheduler's /configz (``componentconfig``)."""
    conn = _key(_key(configz, "componentconfig"), "clientConnection")
    return {"qps": _key(conn, "qps"), "burst": _key(conn, "burst")}


def _tls(cert_file: str | None = None, key_file: str | None = None) -> ssl.SSLContext:
    """A component's serving certificate on 127.0.0.1 is its own, self-signed (no --tls-cert-file):
    not verified; the client certificate is what its delegated authentication checks."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert_file and key_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def configz(port: int, cert_file: str | None, key_file: str | None, timeout: float = 5) -> dict[str, Any]:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/configz", context=_tls(cert_file, key_file),
                                timeout=timeout) as r:  # fmt: skip
        out: dict[str, Any] = json.load(r)
        return out


def read_settings(pids: dict[str, int], cert_file: str | None, key_file: str | None) -> dict[str, dict[str, Any]]:
    """Each running scheduler's client settings (name -> {qps, burst}), or why it could not be read."""
    out: dict[str, dict[str, Any]] = {}
    for name, pid in pids.items():
        try:
            port = secure_port(cmdline(pid))
            if port is None:
                raise OSError(f"no --secure-port on its command line (pid {pid})")
            out[name] = client_settings(configz(port, cert_file, key_file))
        except (OSError, ValueError) as e:  # URLError and ssl's errors are OSErrors
            out[name] = {"error": str(e)}
    return out


def config(kubeconfig: str, qps: float, burst: int) -> str:
    """The bench's default scheduler's KubeSchedulerConfiguration (JSON is YAML): the defaults but
    for its client's rate, its profile's name and no leader election."""
    return json.dumps({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig, "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": BENCH_SCHEDULER}],
    }, indent=2)  # fmt: skip


def start_args(stock_argv: list[str], config_file: str, kubeconfig: str, port: int) -> list[str]:
    """The bench's default scheduler's flags: the stock one's feature gates (so the same plugins
    run), its own config, port and authentication."""
    gates = [a for a in stock_argv if a.startswith("--feature-gates=")]
    return ["--config", config_file, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig",
            kubeconfig, "--bind-address", "127.0.0.1", "--secure-port", str(port), *gates]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DefaultScheduler:
    """A second default kube-scheduler over a ``with`` block, at the given client qps and burst:
    the cluster's own (``stock_pid``)'s binary and feature gates, the profile ``BENCH_SCHEDULER``.
    Its log is ``log_file``; it is stopped by its pid."""

    def __init__(self, stock_pid: int, kubeconfig: str, qps: float, burst: int, log_file: Path) -> None:
        self.stock_pid, self.kubeconfig, self.qps, self.burst, self.log_file = (
            stock_pid, kubeconfig, qps, burst, log_file,
        )  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._dir = tempfile.TemporaryDirectory(prefix="bench-scheduler-")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> DefaultScheduler:
        exe = os.readlink(f"/proc/{self.stock_pid}/exe")
        cfg = Path(self._dir.name, "kube-scheduler.yaml")
        cfg.write_text(config(self.kubeconfig, self.qps, self.burst))
        self.port = _free_port()
        args = start_args(cmdline(self.stock_pid), str(cfg), self.kubeconfig, self.port)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"the bench's default kube-scheduler exited at start (its log: {self.log_file})")
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", context=_tls(), timeout=2):
                    return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)  # polled until healthy, within the deadline
        self.__exit__()
        raise RuntimeError(f"the bench's default kube-scheduler was not healthy within 60 s (its log: {self.log_file})")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._dir.cleanup()
