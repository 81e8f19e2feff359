"""Entry point: slurm-bridge-extender (the kube-scheduler extender that binds allocated pods)."""

from __future__ import annotations

from slurm_bridge.core.signals import exit_on_signal

# Before the imports below: from here on a SIGTERM ends the process with status 0.
exit_on_signal()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import logging  # noqa: E402
from functools import partial  # noqa: E402

from aiohttp import web  # noqa: E402

from slurm_bridge.core import shutdown  # noqa: E402
from slurm_bridge.core.cli import add_common_args, config_or_exit, setup_logging  # noqa: E402
from slurm_bridge.core.config import Config, split_listen  # noqa: E402
from slurm_bridge.extender.server import make_app, make_health_app  # noqa: E402
from slurm_bridge.kube.cache import namespace_labels, namespaces_cache  # noqa: E402
from slurm_bridge.kube.client import KubeClient  # noqa: E402
from slurm_bridge.rules.namespaces import ManagedNamespaces, uses_labels  # noqa: E402

log = logging.getLogger("slurm_bridge.extender")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="slurm-bridge-extender",
        description="kube-scheduler extender: only the Slurm-allocated node passes; bind binds it.",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    cfg = config_or_exit(args.config)
    setup_logging(args.log_level, args.log_format)
    shutdown.run(lambda _: serve(cfg, args.kubeconfig))


async def serve(cfg: Config, kubeconfig: str | None) -> None:
    """Serve until the process's stop cancels this (slurm_bridge/core/shutdown.py): the extender, and
    health alone on extenderHealthListen; requests in flight get HTTP_SHUTDOWN_SECONDS."""
    kube = KubeClient.from_environment(kubeconfig, component="slurm-bridge-extender")
    # Only pods of managed namespaces are placed; a selector needs the namespaces' labels.
    cache = namespaces_cache(kube) if uses_labels(cfg) else None
    labels = None if cache is None else partial(namespace_labels, cache)
    sites = [(make_app(kube, ManagedNamespaces(cfg, labels), cache), split_listen(cfg.extenderListen))]
    if cfg.extenderHealthListen:
        sites.append((make_health_app(), split_listen(cfg.extenderHealthListen)))
    runners = []
    try:
        for app, (host, port) in sites:
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown.HTTP_SHUTDOWN_SECONDS)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
        log.info("extender listening on %s (health also on %s)", cfg.extenderListen, cfg.extenderHealthListen or "-")
        await asyncio.Event().wait()  # until the stop's cancel
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


if __name__ == "__main__":
    main()
