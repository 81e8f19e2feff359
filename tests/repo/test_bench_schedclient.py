"""bench/schedclient.py: the default kube-scheduler's client settings read from its /configz, and
the bench's own default scheduler's configuration, for a comparison at the bridge's settings."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import schedclient  # bench/ is not a package


@pytest.mark.parametrize(
    ("spec", "want"),
    [("stock", "stock"), ("bridge", "bridge"), ("200/400", (200.0, 400)), ("12.5/30", (12.5, 30))],
)
def test_the_default_client_option(spec: str, want: object) -> None:
    assert schedclient.parse_client(spec) == want


@pytest.mark.parametrize("spec", ["200", "200/", "/400", "a/b", "0/400", "200/-1", "fast"])
def test_a_default_client_that_is_none_of_them_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="stock, bridge or QPS/BURST"):
        schedclient.parse_client(spec)


def test_the_port_from_the_command_line() -> None:
    assert schedclient.secure_port(["kube-scheduler", "--bind-address", "127.0.0.1", "--secure-port", "20259"]) == 20259
    assert schedclient.secure_port(["kube-scheduler", "--secure-port=20261"]) == 20261
    assert schedclient.secure_port(["kube-scheduler", "--secure-port"]) is None


def test_client_settings_from_configz_in_either_spelling() -> None:
    versioned = {"componentconfig": {"clientConnection": {"kubeconfig": "k", "qps": 50, "burst": 100}}}
    internal = {"componentconfig": {"ClientConnection": {"Kubeconfig": "k", "QPS": 200, "Burst": 400}}}
    assert schedclient.client_settings(versioned) == {"qps": 50, "burst": 100}
    assert schedclient.client_settings(internal) == {"qps": 200, "burst": 400}
    assert schedclient.client_settings({}) == {"qps": None, "burst": None}


def test_the_benchs_scheduler_differs_from_the_stock_one_only_in_its_client_and_name() -> None:
    cfg = json.loads(schedclient.config("/k/kubeconfig", 200.0, 400))
    assert cfg["clientConnection"] == {"kubeconfig": "/k/kubeconfig", "qps": 200.0, "burst": 400}
    assert cfg["profiles"] == [{"schedulerName": schedclient.BENCH_SCHEDULER}]
    assert cfg["leaderElection"] == {"leaderElect": False}
    stock = ["/bin/kube-scheduler", "--kubeconfig", "/k", "--secure-port", "20259", "--feature-gates=A=true,B=true"]
    args = schedclient.start_args(stock, "/c.yaml", "/k", 31000)
    assert args[-1] == "--feature-gates=A=true,B=true", "the same feature gates: the same plugins"
    assert args[args.index("--secure-port") + 1] == "31000" and args[args.index("--config") + 1] == "/c.yaml"


def test_read_settings_asks_each_schedulers_configz_on_its_port(tmp_path: Path) -> None:
    """A stand-in scheduler: a process whose command line names the port a local HTTPS server serves
    /configz on, with its own (unverified) certificate."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    body = json.dumps({"componentconfig": {"clientConnection": {"qps": 50, "burst": 100}}}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/configz"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            self.wfile.write(body if ok else b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    stand_in = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "--secure-port", str(port)],
                                stdin=subprocess.PIPE)  # fmt: skip
    bare = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        got = schedclient.read_settings({"kube-scheduler": stand_in.pid, "bridge-scheduler": bare.pid}, None, None)
    finally:
        for p in (stand_in, bare):
            p.communicate(b"")
        server.shutdown()
    assert got["kube-scheduler"] == {"qps": 50, "burst": 100}
    assert "no --secure-port" in got["bridge-scheduler"]["error"]
