"""Kubernetes credentials without the official client: kubeconfig, exec plugins, in-cluster.

The bridge's clients (slurm_bridge.kube.client for writes, kopf for watches) both get their server, TLS
material and bearer token here, so the image does not carry the ``kubernetes`` package (~126 MB)
only to read a kubeconfig. What client-go's loaders do that matters to a long-running process is
kept: tokens that change under it (the kubelet's projected service-account token file,
``tokenFile``) are read again, and exec plugins (client.authentication.k8s.io ExecCredential, as
cloud providers' kubeconfigs use) are run again before their token expires or after a 401.
Not supported: basic auth (removed in Kubernetes 1.19), ``tls-server-name``, and the legacy
``auth-provider`` plugins (gcp/azure/oidc, removed from client-go in 1.26) beyond a static
``access-token`` they left behind.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from slurm_bridge.kube.times import parse_iso

log = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
# A token file is looked at again at most this often (client-go re-reads it every minute); a 401
# makes the next request read it at once.
TOKEN_FILE_RECHECK_SECONDS = 10.0
# An exec credential is renewed this long before the expiry it reported, so no request carries
# a token that expires in flight.
EXEC_EXPIRY_MARGIN_SECONDS = 10.0
EXEC_TIMEOUT_SECONDS = 60.0


class CredentialsError(Exception):
    """The kubeconfig or service account cannot give usable credentials (the message says why)."""


class TokenSource:
    """Where the bearer token comes from; ``invalidate`` after a 401 makes the next call fetch anew."""

    async def token(self) -> str:
        raise NotImplementedError

    def invalidate(self) -> None:
        return None

    @property
    def expiration(self) -> datetime | None:
        return None


class StaticToken(TokenSource):
    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token


class FileToken(TokenSource):
    """A token file that is rewritten in place (projected service-account tokens rotate)."""

    def __init__(
        self, path: Path, *, recheck: float = TOKEN_FILE_RECHECK_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._recheck, self._clock = recheck, clock
        self._token = ""
        self._stamp: tuple[int, int, int] | None = None
        self._checked = -float("inf")

    async def token(self) -> str:
        now = self._clock()
        if now - self._checked >= self._recheck or not self._token:
            self._checked = now
            # A stat and a read of a few hundred bytes from a tmpfs, at most every few seconds:
            # not worth a thread hop on every request.
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                self._token = self.path.read_text().strip()
                self._stamp = stamp
        return self._token

    def invalidate(self) -> None:
        self._checked = -float("inf")


@dataclass
class ExecPlugin:
    """A kubeconfig ``user.exec`` stanza."""

    command: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    api_version: str = EXEC_API_VERSIONS[0]
    interactive_mode: str = "IfAvailable"
    provide_cluster_info: bool = False
    base_dir: Path = Path()


class ExecToken(TokenSource):
    """Runs an exec credential plugin, caches its token until shortly before it expires.

    The plugin may also return a client certificate; it is loaded into ``tls`` (the SSLContext the
    client's connections use), so new connections present it.
    """

    def __init__(
        self,
        plugin: ExecPlugin,
        cluster: dict[str, Any],
        tls: ssl.SSLContext | None = None,
        *,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.plugin, self.cluster, self.tls = plugin, cluster, tls
        self._wall = wall_clock
        self._token: str | None = None
        self._expiry: datetime | None = None
        self._lock = asyncio.Lock()
        self.runs = 0
        self.certificate: tuple[str, str] | None = None  # PEM certificate and key from the plugin

    @property
    def expiration(self) -> datetime | None:
        return self._expiry

    def _fresh(self) -> bool:
        if self._token is None:
            return False
        if self._expiry is None:
            return True
        return (self._expiry - self._wall()).total_seconds() > EXEC_EXPIRY_MARGIN_SECONDS

    async def token(self) -> str:
        if self._fresh():
            return self._token or ""
        async with self._lock:  # one plugin run for all requests waiting on it
            if not self._fresh():
                await self._run()
        return self._token or ""

    def invalidate(self) -> None:
        self._token = None

    def _exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.plugin.provide_cluster_info:
            info = {k: v for k, v in self.cluster.items() if k in ("server", "tls-server-name", "proxy-url")}
            if "certificate-authority-data" in self.cluster:
                info["certificate-authority-data"] = self.cluster["certificate-authority-data"]
            if "insecure-skip-tls-verify" in self.cluster:
                info["insecure-skip-tls-verify"] = self.cluster["insecure-skip-tls-verify"]
            for ext in self.cluster.get("extensions") or []:
                if ext.get("name") == "client.authentication.k8s.io/exec":
                    info["config"] = ext.get("extension")
            spec["cluster"] = {_camel(k): v for k, v in info.items()}
        return json.dumps({"apiVersion": self.plugin.api_version, "kind": "ExecCredential", "spec": spec})

    async def _run(self) -> None:
        plugin = self.plugin
        if plugin.interactive_mode == "Always":
            raise CredentialsError(f"exec plugin {plugin.command} needs a terminal (interactiveMode: Always)")
        command = plugin.command
        if os.sep in command and not os.path.isabs(command):
            command = str(plugin.base_dir / command)  # relative to the kubeconfig, as in client-go
        env = {**os.environ, **plugin.env, "KUBERNETES_EXEC_INFO": self._exec_info()}
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *plugin.args,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise CredentialsError(f"exec plugin {command}: cannot run: {e}") from e
        try:
            async with asyncio.timeout(EXEC_TIMEOUT_SECONDS):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CredentialsError(f"exec plugin {command}: no answer within {EXEC_TIMEOUT_SECONDS:.0f} s") from None
        self.runs += 1
        if proc.returncode != 0:
            raise CredentialsError(
                f"exec plugin {command} exited with {proc.returncode}: {err.decode(errors='replace').strip()[:500]}"
            )
        try:
            cred = json.loads(out)
        except ValueError as e:
            raise CredentialsError(f"exec plugin {command}: output is not JSON: {e}") from e
        if cred.get("apiVersion") != plugin.api_version or cred.get("kind") != "ExecCredential":
            raise CredentialsError(
                f"exec plugin {command}: returned {cred.get('apiVersion')}/{cred.get('kind')}, "
                f"expected {plugin.api_version}/ExecCredential"
            )
        status = cred.get("status") or {}
        token, cert, key = status.get("token"), status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not (cert and key):
            raise CredentialsError(f"exec plugin {command}: status has neither a token nor a client certificate")
        expiry = status.get("expirationTimestamp")
        self._expiry = _parse_time(expiry) if expiry else None
        if cert and key and (cert, key) != self.certificate:
            self.certificate = (cert, key)
            if self.tls is not None:
                _load_chain(self.tls, cert.encode(), key.encode())
        self._token = token or ""


@dataclass
class Credentials:
    """What a client needs to reach one API server as one user."""

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = None  # PEM
    insecure: bool = False
    cert_path: str | None = None
    cert_data: bytes | None = None  # PEM
    key_path: str | None = None
    key_data: bytes | None = None  # PEM
    auth: TokenSource | None = None
    namespace: str | None = None
    source: str = ""  # the kubeconfig path or "in-cluster", for messages

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context for this server, made once and shared: an exec plugin's client
        certificate is loaded into it when the plugin returns one."""
        # A given CA is the only one trusted, as in client-go; the system's only without one.
        ctx = ssl.create_default_context(cafile=self.ca_path, cadata=self.ca_data.decode() if self.ca_data else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_path and self.key_path:
            ctx.load_cert_chain(self.cert_path, self.key_path)
        elif self.cert_data and self.key_data:
            _load_chain(ctx, self.cert_data, self.key_data)
        if isinstance(self.auth, ExecToken):
            self.auth.tls = ctx
        return ctx


def in_cluster_server() -> str:
    """The API server as a pod sees it: the kubernetes Service's address from the environment the
    kubelet sets, as client-go's in-cluster config does. Not https://kubernetes.default.svc, which
    needs cluster DNS."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        raise CredentialsError(
            "KUBERNETES_SERVICE_HOST is not set: not running in a pod; pass --kubeconfig or set KUBECONFIG"
        )
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def in_cluster(sa_dir: Path | None = None) -> Credentials:
    """The pod's service account: the kubelet-rotated token file, its CA, its namespace."""
    sa_dir = sa_dir or SA_DIR
    ns_file = sa_dir / "namespace"
    return Credentials(
        server=in_cluster_server(),
        ca_path=str(sa_dir / "ca.crt"),
        auth=FileToken(sa_dir / "token"),
        namespace=ns_file.read_text().strip() if ns_file.exists() else None,
        source="in-cluster",
    )


def load(kubeconfig: str | None = None, *, sa_dir: Path | None = None) -> Credentials:
    """Credentials as client-go picks them: ``kubeconfig`` (the --kubeconfig flag), else
    $KUBECONFIG (paths joined with ':', first value wins), else the pod's service account, else
    ~/.kube/config."""
    spec = kubeconfig or os.environ.get("KUBECONFIG")
    sa_dir = sa_dir or SA_DIR
    if not spec:
        if (sa_dir / "token").exists():
            return in_cluster(sa_dir)
        default = Path("~/.kube/config").expanduser()
        if not default.exists():
            raise CredentialsError("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod")
        spec = str(default)
    paths = [Path(p).expanduser() for p in spec.split(os.pathsep) if p.strip()]
    return from_kubeconfig(paths)


_Sections = dict[str, dict[str, tuple[dict[str, Any], Path]]]


def _read_kubeconfigs(paths: list[Path]) -> tuple[str | None, _Sections]:
    """The current context and the named contexts, clusters and users, each with the directory its
    relative paths start from; the first file that names one wins, as in client-go."""
    current: str | None = None
    sections: _Sections = {"contexts": {}, "clusters": {}, "users": {}}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise CredentialsError(f"cannot read kubeconfig {path}: {e}") from e
        current = current or doc.get("current-context")
        for section, key in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in doc.get(section) or []:
                sections[section].setdefault(item["name"], (item.get(key) or {}, path.parent))
    return current, sections


def _user_auth(user: dict[str, Any], cluster: dict[str, Any], user_dir: Path, where: str) -> TokenSource | None:
    """The user's bearer token source (exec plugin, token, token file, auth-provider's token)."""
    if user.get("username") or user.get("password"):
        raise CredentialsError(f"kubeconfig {where}: basic auth (username/password) is not supported")
    if user.get("exec"):
        ex = user["exec"]
        if ex.get("apiVersion") not in EXEC_API_VERSIONS:
            raise CredentialsError(
                f"kubeconfig {where}: exec apiVersion {ex.get('apiVersion')!r} "
                f"is not one of {', '.join(EXEC_API_VERSIONS)}"
            )
        plugin = ExecPlugin(
            command=ex["command"],
            args=[str(a) for a in ex.get("args") or []],
            env={e["name"]: str(e["value"]) for e in ex.get("env") or []},
            api_version=ex["apiVersion"],
            interactive_mode=ex.get("interactiveMode") or "IfAvailable",
            provide_cluster_info=bool(ex.get("provideClusterInfo")),
            base_dir=user_dir,
        )
        return ExecToken(plugin, cluster)
    if user.get("token"):
        return StaticToken(str(user["token"]))
    if user.get("tokenFile"):
        return FileToken(Path(_relative(user["tokenFile"], user_dir) or ""))
    if token := ((user.get("auth-provider") or {}).get("config") or {}).get("access-token"):
        return StaticToken(str(token))
    return None


def _relative(value: str | None, base: Path) -> str | None:
    return str(base / Path(value).expanduser()) if value else None  # absolute paths stay as they are


def from_kubeconfig(paths: list[Path]) -> Credentials:
    current, sections = _read_kubeconfigs(paths)
    where = ":".join(map(str, paths))
    if not current:
        raise CredentialsError(f"kubeconfig {where}: current-context is not set")
    if current not in sections["contexts"]:
        raise CredentialsError(f"kubeconfig {where}: context {current!r} not found")
    context = sections["contexts"][current][0]
    if context.get("cluster") not in sections["clusters"]:
        raise CredentialsError(f"kubeconfig {where}: cluster {context.get('cluster')!r} not found")
    cluster, cluster_dir = sections["clusters"][context["cluster"]]
    user, user_dir = sections["users"].get(context.get("user") or "", ({}, paths[0].parent))
    if not cluster.get("server"):
        raise CredentialsError(f"kubeconfig {where}: cluster {context['cluster']!r} has no server")
    creds = Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_path=_relative(cluster.get("certificate-authority"), cluster_dir),
        ca_data=_b64(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_path=_relative(user.get("client-certificate"), user_dir),
        cert_data=_b64(user.get("client-certificate-data")),
        key_path=_relative(user.get("client-key"), user_dir),
        key_data=_b64(user.get("client-key-data")),
        namespace=context.get("namespace"),
        source=where,
    )
    creds.auth = _user_auth(user, cluster, user_dir, where)
    return creds


def _b64(value: str | None) -> bytes | None:
    return base64.b64decode(value) if value else None


def _camel(key: str) -> str:
    head, *rest = key.split("-")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _parse_time(value: str) -> datetime:
    try:
        return parse_iso(value)
    except ValueError as e:
        raise CredentialsError(f"exec plugin: bad expirationTimestamp {value!r}") from e


def _load_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: write the PEMs to a private temporary directory."""
    with tempfile.TemporaryDirectory(prefix="sb-tls-") as d:
        cert_file, key_file = Path(d) / "tls.crt", Path(d) / "tls.key"
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        ctx.load_cert_chain(str(cert_file), str(key_file))
