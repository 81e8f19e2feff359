"""The credential loader that replaces the ``kubernetes`` package at run time (slurm_bridge.kube.kubeconfig):
exec plugins run again when their token expires or is refused, token files are read again when
they change, the in-cluster path uses KUBERNETES_SERVICE_HOST (no DNS), and TLS material from a
kubeconfig or a service account is used as given. The API servers are aiohttp fakes on loopback;
TLS ones use certificates from trustme."""

from __future__ import annotations

import json
import ssl
import sys
from base64 import b64encode
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml
from aiohttp import web

from slurm_bridge.core import http1
from slurm_bridge.kube import kubeconfig
from slurm_bridge.kube.client import KubeClient, _load_credentials
from slurm_bridge.operator.runtime.login import login as kopf_login

Handler = Callable[[web.Request], Awaitable[web.Response]]


class TokenServer:
    """The API server over HTTPS, for the client's transport (not a KubeClient fake): accepts one bearer token
    at a time (``valid``); records what each request sent."""

    def __init__(self) -> None:
        self.valid: set[str] = set()
        self.seen: list[str] = []
        self.peer_certs: list[Any] = []

    async def handler(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        self.seen.append(auth)
        self.peer_certs.append(request.transport.get_extra_info("peercert") if request.transport else None)
        if self.valid and auth.removeprefix("Bearer ") not in self.valid:
            return web.json_response({"reason": "Unauthorized", "message": "bad token"}, status=401)
        return web.json_response({"ok": True})


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[TokenServer, ssl.SSLContext | None], Awaitable[int]]]:
    runners: list[web.AppRunner] = []

    async def start(api: TokenServer, tls: ssl.SSLContext | None = None) -> int:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", api.handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        runners.append(runner)
        port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return port

    yield start
    for r in runners:
        await r.cleanup()


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
    }))  # fmt: skip
    return path


PLUGIN = """#!{python}
# A credential plugin as cloud kubeconfigs use: each run issues the next token and counts runs.
import json, os, pathlib, sys, datetime
state = pathlib.Path(os.environ["PLUGIN_STATE"])
n = int(state.read_text()) + 1 if state.exists() else 1
state.write_text(str(n))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
pathlib.Path(os.environ["PLUGIN_STATE"] + ".info").write_text(json.dumps(info))
ttl = float(os.environ.get("PLUGIN_TTL", "3600"))
exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl)
status = {{"token": f"{{sys.argv[1]}}-{{n}}", "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}}
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def plugin_kubeconfig(tmp_path: Path, server: str, ttl: float) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "get-token"
    script.write_text(PLUGIN.format(python=sys.executable))
    script.chmod(0o755)
    user = {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/get-token", "args": ["tok"],
        "env": [{"name": "PLUGIN_STATE", "value": str(tmp_path / "runs")}, {"name": "PLUGIN_TTL", "value": str(ttl)}],
        "interactiveMode": "Never", "provideClusterInfo": True,
    }}  # fmt: skip
    return write_kubeconfig(tmp_path / "kubeconfig", server, user)


async def test_an_exec_plugin_token_is_cached_until_it_expires(tmp_path: Path, serve: Any) -> None:
    api = TokenServer()
    port = await serve(api)
    server = f"http://127.0.0.1:{port}"
    # The command is relative to the kubeconfig's directory, as client-go resolves it.
    creds = kubeconfig.load(str(plugin_kubeconfig(tmp_path, server, ttl=3600)))
    assert isinstance(creds.auth, kubeconfig.ExecToken) and creds.namespace == "team"
    kube = KubeClient(creds.server, None, creds.auth)
    try:
        for _ in range(3):
            assert await kube.get("/api") == {"ok": True}
    finally:
        await kube.aclose()
    assert api.seen == ["Bearer tok-1"] * 3
    assert creds.auth.runs == 1
    info = json.loads((tmp_path / "runs.info").read_text())
    assert info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == server  # provideClusterInfo


async def test_an_expiring_exec_token_is_renewed_before_use(tmp_path: Path, serve: Any) -> None:
    api = TokenServer()
    port = await serve(api)
    # Each token expires within the renewal margin, so every request runs the plugin again.
    creds = kubeconfig.load(str(plugin_kubeconfig(tmp_path, f"http://127.0.0.1:{port}", ttl=2)))
    kube = KubeClient(creds.server, None, creds.auth)
    try:
        await kube.get("/api")
        await kube.get("/api")
    finally:
        await kube.aclose()
    assert api.seen == ["Bearer tok-1", "Bearer tok-2"]
    assert creds.auth is not None and creds.auth.expiration is not None
    assert creds.auth.expiration < datetime.now(UTC) + timedelta(seconds=60)


async def test_a_refused_exec_token_is_fetched_anew_and_the_request_retried(tmp_path: Path, serve: Any) -> None:
    api = TokenServer()
    port = await serve(api)
    creds = kubeconfig.load(str(plugin_kubeconfig(tmp_path, f"http://127.0.0.1:{port}", ttl=3600)))
    kube = KubeClient(creds.server, None, creds.auth)
    try:
        api.valid = {"tok-1"}
        await kube.get("/api")
        api.valid = {"tok-2"}  # revoked server-side before its reported expiry
        assert await kube.get("/api") == {"ok": True}
    finally:
        await kube.aclose()
    assert api.seen == ["Bearer tok-1", "Bearer tok-1", "Bearer tok-2"]


async def test_a_failing_exec_plugin_names_the_command_and_its_error(tmp_path: Path) -> None:
    script = tmp_path / "broken"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stderr.write('not logged in')\nsys.exit(3)\n")
    script.chmod(0o755)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(script)}}
    creds = kubeconfig.load(str(write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", user)))
    assert creds.auth is not None
    with pytest.raises(kubeconfig.CredentialsError, match=r"broken exited with 3: not logged in"):
        await creds.auth.token()


async def test_a_rewritten_token_file_is_read_again_after_a_401(tmp_path: Path, serve: Any) -> None:
    api = TokenServer()
    port = await serve(api)
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    path = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}", {"tokenFile": "token"})
    server, tls, auth = _load_credentials(str(path))
    assert isinstance(auth, kubeconfig.FileToken) and auth.path == token_file
    kube = KubeClient(server, tls, auth)
    try:
        api.valid = {"first"}
        await kube.get("/api")
        token_file.write_text("second-and-longer\n")  # rotated, as the kubelet does
        api.valid = {"second-and-longer"}  # and the old one no longer accepted
        assert await kube.get("/api") == {"ok": True}
    finally:
        await kube.aclose()
    assert api.seen == ["Bearer first", "Bearer first", "Bearer second-and-longer"]


async def test_a_token_file_is_looked_at_again_after_the_recheck_period(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a")
    now = [0.0]
    source = kubeconfig.FileToken(token_file, recheck=10.0, clock=lambda: now[0])
    assert await source.token() == "a"
    token_file.write_text("bb")
    now[0] = 5.0
    assert await source.token() == "a"  # not stat'ed on every request
    now[0] = 10.0
    assert await source.token() == "bb"


def tls_server(ca: trustme.CA, *, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(ctx)
    return ctx


async def test_in_cluster_uses_the_service_env_the_ca_and_the_rotating_token(
    tmp_path: Path, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    api = TokenServer()
    port = await serve(api, tls_server(ca))
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("pod-token-1")
    (sa / "namespace").write_text("slurm-bridge")
    ca.cert_pem.write_to_path(str(sa / "ca.crt"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    creds = kubeconfig.load(None, sa_dir=sa)
    # The Service's address from the environment, never https://kubernetes.default.svc (DNS).
    assert (creds.server, creds.namespace, creds.source) == (f"https://127.0.0.1:{port}", "slurm-bridge", "in-cluster")
    kube = KubeClient(creds.server, creds.ssl_context(), creds.auth)
    try:
        api.valid = {"pod-token-1"}
        await kube.get("/api")
        (sa / "token").write_text("pod-token-2")
        api.valid = {"pod-token-2"}
        await kube.get("/api")
    finally:
        await kube.aclose()
    assert api.seen[0] == "Bearer pod-token-1" and api.seen[-1] == "Bearer pod-token-2"


def test_in_cluster_server_brackets_ipv6_and_needs_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    assert kubeconfig.in_cluster_server() == "https://[fd00::1]:6443"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(kubeconfig.CredentialsError, match="KUBERNETES_SERVICE_HOST is not set"):
        kubeconfig.in_cluster_server()


async def test_kubeconfig_ca_data_and_client_certificate_data_are_used(tmp_path: Path, serve: Any) -> None:
    ca, users_ca = trustme.CA(), trustme.CA()
    api = TokenServer()
    port = await serve(api, tls_server(ca, client_ca=users_ca))
    user_cert = users_ca.issue_cert("alice@example.test")
    path = write_kubeconfig(
        tmp_path / "kc",
        f"https://127.0.0.1:{port}",
        {"client-certificate-data": b64encode(user_cert.cert_chain_pems[0].bytes()).decode(),
         "client-key-data": b64encode(user_cert.private_key_pem.bytes()).decode()},
        {"certificate-authority-data": b64encode(ca.cert_pem.bytes()).decode()},
    )  # fmt: skip
    server, tls, auth = _load_credentials(str(path))
    assert auth is None
    kube = KubeClient(server, tls, auth)
    try:
        assert await kube.get("/api") == {"ok": True}
    finally:
        await kube.aclose()
    # The server required a client certificate (CERT_REQUIRED), and saw the kubeconfig's.
    assert ("email", "alice@example.test") in api.peer_certs[0]["subjectAltName"]


async def test_kopf_login_carries_the_exec_token_and_its_expiry(tmp_path: Path, serve: Any) -> None:
    api = TokenServer()
    port = await serve(api)
    path = plugin_kubeconfig(tmp_path, f"http://127.0.0.1:{port}", ttl=600)
    creds = kubeconfig.load(str(path))
    kube = KubeClient.from_credentials(creds)  # the operator's own client shares kopf's credentials
    try:
        first = await kopf_login(creds)
        second = await kopf_login(creds)  # kopf logs in again only when the last login failed
        assert (first.token, second.token) == ("tok-1", "tok-2")
        await kube.get("/api")
        assert api.seen[-1] == "Bearer tok-2", "the client uses the token kopf's login renewed: one plugin run"
    finally:
        await kube.aclose()
    assert first.server == f"http://127.0.0.1:{port}" and first.default_namespace == "team"
    assert first.expiration is not None
    assert timedelta(seconds=500) < first.expiration - datetime.now(UTC) <= timedelta(seconds=600)


async def test_kopf_login_in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("pod-token")
    (sa / "namespace").write_text("ns")
    (sa / "ca.crt").write_text("")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(kubeconfig, "SA_DIR", sa)
    info = await kopf_login(kubeconfig.load(None))
    assert (info.server, info.token, info.default_namespace) == ("https://10.96.0.1:443", "pod-token", "ns")
    assert info.ca_path == str(sa / "ca.crt")


def test_kubeconfig_errors_name_the_problem(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", {"username": "a", "password": "b"})
    with pytest.raises(kubeconfig.CredentialsError, match="basic auth"):
        kubeconfig.load(str(path))
    path.write_text(yaml.safe_dump({"clusters": [], "contexts": [], "users": []}))
    with pytest.raises(kubeconfig.CredentialsError, match="current-context is not set"):
        kubeconfig.load(str(path))


async def test_a_server_certificate_from_another_ca_is_refused(tmp_path: Path, serve: Any) -> None:
    server_ca, other_ca = trustme.CA(), trustme.CA()
    port = await serve(TokenServer(), tls_server(server_ca))
    path = write_kubeconfig(
        tmp_path / "kc", f"https://127.0.0.1:{port}", {"token": "t"},
        {"certificate-authority-data": b64encode(other_ca.cert_pem.bytes()).decode()},
    )  # fmt: skip
    kube = KubeClient(*_load_credentials(str(path)))
    try:
        with pytest.raises(http1.ConnectFailed, match="CERTIFICATE_VERIFY_FAILED") as refused:
            await kube.get("/api")
        assert isinstance(refused.value.__cause__, ssl.SSLCertVerificationError)
    finally:
        await kube.aclose()
