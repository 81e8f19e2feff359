"""``slurm-bridge-webhook``: serve the admission webhook, or prepare what registering it needs."""

from __future__ import annotations

from slurm_bridge.core.signals import exit_on_signal

# Before the imports below: from here on a SIGTERM ends the process with status 0.
exit_on_signal()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import logging  # noqa: E402
import ssl  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

from slurm_bridge.core import shutdown  # noqa: E402
from slurm_bridge.core.cli import EXIT_BAD_CONFIG, add_common_args, config_or_exit, fail, setup_logging  # noqa: E402
from slurm_bridge.core.config import Config  # noqa: E402
from slurm_bridge.kube import kubeconfig as kubeconfig_loader  # noqa: E402
from slurm_bridge.kube.cache import TenantCache, WatchCache, slices_cache  # noqa: E402
from slurm_bridge.kube.client import KubeClient  # noqa: E402
from slurm_bridge.kube.clusterapis import Discovery  # noqa: E402

from .certs import DEFAULT_HOSTS, CertError, write_certs  # noqa: E402
from .nodeguard import node_guard_policy  # noqa: E402
from .podpolicy import pod_policy  # noqa: E402
from .render import MAX_NAME, RenderError, ca_bundle, parse_service, render_yaml, webhook_configurations  # noqa: E402
from .server import WebhookServer  # noqa: E402

log = logging.getLogger("slurm_bridge.webhook")

# Longer than the endpoint controller and kube-proxy take to drop a terminating pod (about a second).
DEFAULT_DRAIN_SECONDS = 5.0


def _add_render_config(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The render-config command's arguments (hack/bridge.sh renders the local configurations)."""
    r = sub.add_parser(
        "render-config",
        help="print the Mutating- and ValidatingWebhookConfiguration and the node guard as YAML",
        description="Print a MutatingWebhookConfiguration and a ValidatingWebhookConfiguration "
        "(multi-document YAML) scoped by the configured managed namespaces, then the node guard: a "
        "ValidatingAdmissionPolicy and its binding, <name>-node-guard, that refuse every other pod "
        "tolerating the managed-node taint (docs/security.md); with --pod-policy, the "
        "MutatingAdmissionPolicy <name>-pods and its binding, which hand a plain pod to the bridge "
        "without a webhook call (Kubernetes >= 1.36; docs/configuration.md).",
    )
    target = r.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL the apiserver calls, for example https://127.0.0.1:9443")
    target.add_argument(
        "--service", metavar="NAMESPACE/NAME[:PORT]", help="in-cluster Service to call (port 443 by default)"
    )
    r.add_argument("--ca-file", required=True, type=Path, help="PEM CA certificate that signed the serving certificate")
    r.add_argument(
        "--name",
        default="slurm-bridge",
        help=f"name of both configuration objects, a DNS subdomain of at most {MAX_NAME} characters "
        "(default: %(default)s)",
    )
    r.add_argument(
        "--without-node-guard",
        action="store_true",
        help="leave the node guard out (a benchmark's default-scheduler baseline on the bridge's nodes)",
    )
    r.add_argument(
        "--pod-policy",
        action="store_true",
        help="add the MutatingAdmissionPolicy for plain pods (the API server must serve "
        "admissionregistration.k8s.io/v1 MutatingAdmissionPolicy: Kubernetes >= 1.36)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slurm-bridge-webhook",
        description="Admission webhook of slurm-bridge: hands pods in managed namespaces to Slurm "
        "and rejects invalid slurmjob annotations and reserved labels.",
        epilog="--kubeconfig is for reading TenantPolicies, namespaces, ResourceSlices, the ResourceClaims and "
        "templates a pod names, and API discovery (serve only).",
    )
    # The operator's and extender's flags (slurm_bridge/core/cli.py): the chart passes them to all three.
    add_common_args(p)
    sub = p.add_subparsers(dest="command", metavar="{serve,render-config,gen-certs}")

    serve = sub.add_parser("serve", help="run the HTTPS webhook server (the default command)")
    serve.add_argument(
        "--drain-seconds",
        type=float,
        default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM, answer not-ready but keep serving this long before stopping, so the "
        "Service stops routing calls here first (default: %(default)s; 0 for a local process)",
    )

    _add_render_config(sub)

    g = sub.add_parser(
        "gen-certs",
        help="write a self-signed CA and a serving certificate",
        description="Write ca.crt, ca.key, tls.crt and tls.key into DIR. An existing CA there is reused "
        "unless --new-ca is given, so the registered caBundle stays valid.",
    )
    g.add_argument("--dir", required=True, type=Path, help="output directory (created if missing)")
    g.add_argument(
        "--host",
        action="append",
        default=None,
        help=f"IP address or DNS name to serve; repeat it (default: {' '.join(DEFAULT_HOSTS)})",
    )
    g.add_argument("--days", type=int, default=365, help="serving certificate lifetime (default: %(default)s)")
    g.add_argument("--new-ca", action="store_true", help="make a new CA even if DIR already has one")
    return p


async def _serve(config: Config, drain_seconds: float, kubeconfig: str | None) -> None:
    """Serve until the process's stop cancels this (slurm_bridge/core/shutdown.py), at whatever step
    of start-up; then drain (a second signal cuts the drain short) and stop."""
    server, kube = await _start(config, kubeconfig)
    try:
        await asyncio.Event().wait()  # until the stop's cancel
    finally:
        try:
            await server.stop(drain_seconds)
        finally:
            if kube is not None:
                await kube.aclose()


async def _start(config: Config, kubeconfig: str | None) -> tuple[WebhookServer, KubeClient | None]:
    kube: KubeClient | None = None
    apis: Discovery | None = None
    slices: WatchCache | None = None
    try:
        creds = await asyncio.to_thread(kubeconfig_loader.load, kubeconfig)
        kube = KubeClient.from_credentials(creds, component="slurm-bridge-webhook", max_connections=4)
        tenants = TenantCache(kube)
        apis = Discovery(kube.get)  # the Workload API and DRA checks of webhook/apis.py
        slices = slices_cache(kube)
    except kubeconfig_loader.CredentialsError as e:
        # Serve anyway (pods that ask for nothing a policy could refuse still get through in open
        # mode), but every tenancy check fails closed with this message.
        problem = f"no Kubernetes credentials to read TenantPolicies with ({e}); pass --kubeconfig or run in a pod"
        log.error("%s", problem)
        tenants = TenantCache(None, unavailable=problem)
    server = WebhookServer(
        config, tenants=tenants, apis=apis, slices=slices, claims=kube.get if kube is not None else None
    )
    try:
        await server.start()
    except BaseException:  # the start failed or was cancelled by a stop: close the client, re-raise
        if kube is not None:
            await kube.aclose()
        raise
    return server, kube


def _cmd_serve(args: argparse.Namespace, config: Config) -> int:
    setup_logging(args.log_level, args.log_format)
    drain = getattr(args, "drain_seconds", DEFAULT_DRAIN_SECONDS)
    try:
        shutdown.run(lambda _: _serve(config, drain, args.kubeconfig), drain + shutdown.STOP_DEADLINE_SECONDS)
    except (OSError, ssl.SSLError) as e:
        fail(
            f"cannot serve on {config.webhookListen} with certificate {config.webhookCertFile} "
            f"and key {config.webhookKeyFile}: {e}"
        )
    return 0


def _cmd_render(args: argparse.Namespace, config: Config) -> int:
    try:
        pem = args.ca_file.read_bytes()
    except OSError as e:
        raise RenderError(f"cannot read --ca-file {args.ca_file}: {e.strerror}") from None
    service = parse_service(args.service) if args.service else None
    docs = webhook_configurations(
        config, bundle=ca_bundle(pem, str(args.ca_file)), url=args.url, service=service, name=args.name
    )
    if not args.without_node_guard:
        docs += node_guard_policy(config, name=args.name)
    if args.pod_policy:
        docs += pod_policy(config, name=args.name)
    sys.stdout.write(render_yaml(docs))
    return 0


def _cmd_gen_certs(args: argparse.Namespace) -> int:
    files = write_certs(args.dir, args.host or list(DEFAULT_HOSTS), days=args.days, new_ca=args.new_ca)
    ca = "reused" if files.reused_ca else "new"
    print(f"CA ({ca}): {files.ca_cert} {files.ca_key}")
    print(f"serving certificate: {files.cert} {files.key}")
    return 0


def _run(args: argparse.Namespace) -> int:
    command = args.command or "serve"
    try:
        if command == "gen-certs":
            return _cmd_gen_certs(args)  # needs no configuration
        config = config_or_exit(args.config)
        if command == "render-config":
            return _cmd_render(args, config)
        return _cmd_serve(args, config)
    except (RenderError, CertError) as e:
        fail(str(e))


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 2 for bad input (configuration, arguments, certificates), as the other components."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except SystemExit as e:  # slurm_bridge.core.cli's exits print the problem first; returned as a status
        return e.code if isinstance(e.code, int) else EXIT_BAD_CONFIG
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
