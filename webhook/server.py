"""The HTTPS server the apiserver calls.

The webhook configurations' namespaceSelector limits calls to managed namespaces, so a decision is
a pure function of the AdmissionReview, of the TenantPolicies, namespaces and ResourceSlices the
webhook keeps in watch caches (slurm_bridge/kube/cache.py) and, for the few creates that need an
API the cluster may not serve, of API discovery (webhook/apis.py, cached): its only Kubernetes API
calls are those caches' lists and watches, a GET of a namespace created a moment ago, and those
discovery reads, and a GET of each ResourceClaim or template a pod's create names (webhook/devicedoors.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from aiohttp import web
from cryptography import x509

from slurm_bridge.core import logs, metrics
from slurm_bridge.core.config import Config, split_listen
from slurm_bridge.core.shutdown import HTTP_SHUTDOWN_SECONDS
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube.cache import TenantCache, WatchCache
from slurm_bridge.kube.client import KubeError
from slurm_bridge.kube.clusterapis import Discovery

from . import apis as api_checks
from . import devicedoors
from .mutate import mutate
from .review import AdmissionRequest, Decision, InvalidObject, MalformedReview, parse_review, review_response
from .validate import validate

log = logging.getLogger("slurm_bridge.webhook")

# A pod with its oldObject can exceed aiohttp's 1 MiB default; etcd stores objects up to 1.5 MiB.
MAX_BODY: Final = 8 * 1024 * 1024

Handler = Callable[[AdmissionRequest, Config], Decision | Awaitable[Decision]]


class ReloadingSSLContext(ssl.SSLContext):
    """A server TLS context whose certificate can be replaced while the server runs.

    asyncio creates every connection's TLS state through ``wrap_bio``, so delegating it to a
    freshly built inner context swaps the certificate for new connections atomically. Loading
    into the live context instead could leave it half updated (certificate without its key)
    if a rotation is caught mid-write.
    """

    def __new__(cls, cert_file: Path, key_file: Path) -> ReloadingSSLContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self._fingerprint = b""
        self._failed_fingerprint = b""
        self._current = self._build()

    def _read_fingerprint(self) -> bytes:
        h = hashlib.sha256()
        for f in (self.cert_file, self.key_file):
            h.update(f.read_bytes())
            h.update(b"\0")
        return h.digest()

    def _build(self) -> ssl.SSLContext:
        """A new context from the files; raises OSError or ssl.SSLError if they are not a valid pair."""
        before = self._read_fingerprint()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        # A rotation between reading and loading: load again on the next check.
        self._fingerprint = before if self._read_fingerprint() == before else b""
        return ctx

    def describe(self) -> dict[str, str]:
        """Subject, serial and expiry of the certificate on disk, for logs."""
        try:
            cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        except (OSError, ValueError) as e:
            return {"cert_error": str(e)}
        return {
            "cert_subject": cert.subject.rfc4514_string(),
            "cert_serial": format(cert.serial_number, "x"),
            "cert_not_after": cert.not_valid_after_utc.isoformat(),
        }

    def reload_if_changed(self) -> bool:
        """Swap in the files' certificate if they changed and form a valid pair; keep the old one if not."""
        try:
            fingerprint = self._read_fingerprint()
        except OSError as e:
            log.warning("cannot read TLS files", extra={"fields": {"error": str(e)}})
            return False
        if fingerprint == self._fingerprint or fingerprint == self._failed_fingerprint:
            return False
        try:
            new = self._build()
        except (OSError, ssl.SSLError) as e:
            self._failed_fingerprint = fingerprint  # warn once per bad version, retry when it changes
            log.warning(
                "new TLS certificate not loaded; still serving the previous one",
                extra={"fields": {"cert_file": str(self.cert_file), "error": str(e)}},
            )
            return False
        self._current = new
        self._failed_fingerprint = b""
        log.info("TLS certificate reloaded", extra={"fields": self.describe()})
        return True

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self._current.wrap_bio(
            incoming, outgoing, server_side=server_side, server_hostname=server_hostname, session=session
        )

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self._current.wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=server_hostname,
            session=session,
        )


def _log_fields(req: AdmissionRequest, decision: Decision, endpoint: str, started: float) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "endpoint": endpoint,
        "uid": req.uid,
        "operation": req.operation,
        "kind": f"{req.group}/{req.kind}" if req.group else req.kind,
        "namespace": req.namespace,
        "name": req.object_name,
        "user": req.username,
        "allowed": decision.allowed,
        "reason": decision.reason,
        "ms": round((time.monotonic() - started) * 1000, 2),
    }
    if req.sub_resource:
        fields["subresource"] = req.sub_resource
    if req.dry_run:
        fields["dry_run"] = True
    if decision.patch:
        fields["patch_ops"] = len(decision.patch)
    if not decision.allowed:
        fields["code"] = decision.code
        fields["message"] = decision.message
    return fields


def _admission_handler(
    config: Config, decide: Handler, endpoint: str, tenants: TenantCache | None = None
) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        body = await request.read()
        try:
            req = parse_review(body)
        except MalformedReview as e:
            log.warning("malformed AdmissionReview", extra={"fields": {"endpoint": endpoint, "error": str(e)}})
            metrics.admission(endpoint, "", "error", time.monotonic() - started)
            return web.Response(status=400, text=f"malformed AdmissionReview: {e}\n")
        # Every line of this admission names the object (a pod has no Slurm job yet).
        logs.bind(namespace=req.namespace, name=req.object_name, kind=req.kind)
        if tenants is not None and req.operation in ("CREATE", "UPDATE"):
            try:
                await tenants.ensure_namespace(req.namespace)  # created a moment ago: read its labels
            except (KubeError, OSError, TimeoutError) as e:
                log.warning("cannot read namespace %s: %s", req.namespace, e)
        result = "error"
        try:
            decided = decide(req, config)
            decision = await decided if inspect.isawaitable(decided) else decided
            result = "allowed" if decision.allowed else "denied"
        except InvalidObject as e:
            decision = Decision(allowed=False, code=400, reason="BadRequest", message=f"slurm-bridge: {e}")
            result = "denied"
        except Exception as e:
            # Never let one bad object take the server down; with failurePolicy Fail the
            # request is refused, and the message says why.
            log.exception("internal error", extra={"fields": {"endpoint": endpoint, "uid": req.uid}})
            decision = Decision(
                allowed=False,
                code=500,
                reason="InternalError",
                message=f"slurm-bridge webhook internal error: {type(e).__name__}: {e}",
            )
        log.info("admission decision", extra={"fields": _log_fields(req, decision, endpoint, started)})
        response = web.json_response(review_response(req.uid, decision))
        metrics.admission(endpoint, req.operation, result, time.monotonic() - started)
        return response

    return handle


def build_app(
    config: Config,
    is_ready: Callable[[], bool] = lambda: True,
    tenants: TenantCache | None = None,
    apis: Discovery | None = None,
    slices: WatchCache | None = None,
    claims: devicedoors.Get | None = None,
) -> web.Application:
    """``apis``: discovery for the creates that need an API the cluster may not serve (None: no
    Kubernetes credentials, so they are not checked). ``claims``: a GET of the API server, for the
    claims a pod's create names (None: no credentials, not checked)."""

    @web.middleware
    async def close_while_draining(request: web.Request, handler: Any) -> web.StreamResponse:
        # While draining, every answer ends its connection ("Connection: close"), so the API
        # server's next call opens a new one, which the Service routes to a replica that stays.
        response: web.StreamResponse = await handler(request)
        if not is_ready():
            response.force_close()
        return response

    app = web.Application(client_max_size=MAX_BODY, middlewares=[logs.request_scope, close_while_draining])

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        # Not gated on the TenantPolicy cache: a check that needs it fails closed per request with
        # its reason, and pods that ask for nothing a policy could refuse still get through.
        if is_ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="shutting down\n")

    async def mutate_checking_apis(req: AdmissionRequest, cfg: Config) -> Decision:
        need = api_checks.needs(req, cfg)
        if not need or apis is None:
            return mutate(req, cfg)
        return mutate(req, cfg, api_checks.problems(need, await api_checks.facts(need, apis)))

    app.router.add_post("/mutate", _admission_handler(config, mutate_checking_apis, "mutate"))

    async def validate_with_tenants(req: AdmissionRequest, cfg: Config) -> Decision:
        listed = slices.values() if slices is not None and slices.synced.is_set() else None
        named = None
        if claims is not None and devicedoors.reads_claims(req):
            named = await devicedoors.read_claims(req, claims)
        return validate(req, cfg, tenants, listed, named)

    app.router.add_post("/validate", _admission_handler(config, validate_with_tenants, "validate", tenants))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics.handler(metrics.WEBHOOK))
    return app


class WebhookServer:
    """The aiohttp HTTPS server with certificate reloading; ``start`` then ``stop``."""

    def __init__(
        self,
        config: Config,
        *,
        listen: str | None = None,
        tls_reload_seconds: float = 5.0,
        tenants: TenantCache | None = None,
        apis: Discovery | None = None,
        slices: WatchCache | None = None,
        claims: devicedoors.Get | None = None,
    ) -> None:
        self.config = config
        self.claims = claims  # the claims a pod's create names (webhook/devicedoors.py)
        self.tenants = tenants
        self.apis = apis
        self.slices = slices  # ResourceSlices: a DRA request no node can hold is refused (docs/gpus.md)
        self._slices_task: asyncio.Task[None] | None = None
        self.host, self._port = split_listen(listen or config.webhookListen)
        self.tls_reload_seconds = tls_reload_seconds
        self.ssl_context: ReloadingSSLContext | None = None
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def port(self) -> int:
        """The bound port (differs from the configured one when that is 0)."""
        if self._runner is not None:
            for addr in self._runner.addresses:
                if isinstance(addr, tuple):
                    return int(addr[1])
        return self._port

    async def start(self) -> None:
        """Raises OSError or ssl.SSLError when the certificate cannot be loaded or the port bound."""
        self.ssl_context = ReloadingSSLContext(self.config.webhookCertFile, self.config.webhookKeyFile)
        app = build_app(self.config, lambda: not self._stopping, self.tenants, self.apis, self.slices, self.claims)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=HTTP_SHUTDOWN_SECONDS)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port, ssl_context=self.ssl_context)
        try:
            await site.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self._watch = asyncio.create_task(self.ssl_context.watch(self.tls_reload_seconds))
        if self.tenants is not None:
            self.tenants.start()
        if self.slices is not None:
            self._slices_task = asyncio.create_task(self.slices.run(), name="resourceslices-watch")
        log.info(
            "webhook serving",
            extra={
                "fields": {
                    "listen": f"{self.host}:{self.port}",
                    "scheduler_name": self.config.schedulerName,
                    **self.ssl_context.describe(),
                }
            },
        )
        if not self.config.trustedUsers:
            log.warning(
                "trustedUsers is empty: every write of the bridge's reserved labels and annotations "
                "is refused, including the bridge's own"
            )

    async def stop(self, drain_seconds: float = 0.0) -> None:
        """Stop serving; with ``drain_seconds``, first answer not-ready and keep serving that long.

        A terminating pod stays a Service endpoint until the endpoint controller and kube-proxy
        have caught up; with ``failurePolicy: Fail`` a call that reaches a closed server fails the
        pod's creation. Draining keeps answering those calls (closing each connection after it)
        until traffic has moved to the other replicas.
        """
        self._stopping = True
        if drain_seconds > 0 and self._runner is not None:
            log.info("webhook draining", extra={"fields": {"seconds": drain_seconds}})
            await asyncio.sleep(drain_seconds)
        await cancel_and_wait([self._watch])
        self._watch = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.tenants is not None:
            await self.tenants.stop()
        await cancel_and_wait([self._slices_task])
        self._slices_task = None
        log.info("webhook stopped")
