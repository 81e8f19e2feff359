"""Entry point: slurm-bridge-extender (the kube-scheduler extender that binds allocated pods)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from functools import partial

from aiohttp import web

from slurm_bridge.cli import add_common_args, config_or_exit, setup_logging
from slurm_bridge.config import Config, split_listen
from slurm_bridge.extender.server import make_app, make_health_app
from slurm_bridge.kube import KubeClient
from slurm_bridge.kubecache import namespace_labels, namespaces_cache
from slurm_bridge.namespaces import ManagedNamespaces, uses_labels

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
    asyncio.run(serve(cfg, args.kubeconfig))


async def serve(cfg: Config, kubeconfig: str | None) -> None:
    """Serve until SIGTERM or SIGINT: the extender, and health alone on extenderHealthListen."""
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
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port).start()
        log.info("extender listening on %s (health also on %s)", cfg.extenderListen, cfg.extenderHealthListen or "-")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


if __name__ == "__main__":
    main()
