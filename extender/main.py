"""Entry point: slurm-bridge-extender (the kube-scheduler extender that binds allocated pods)."""

from __future__ import annotations

import argparse
import logging

from aiohttp import web
from slurm_bridge.extender.server import make_app

from slurm_bridge.cli import add_common_args, config_or_exit, setup_logging
from slurm_bridge.config import split_listen
from slurm_bridge.kube import KubeClient

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
    host, port = split_listen(cfg.extenderListen)

    async def app_factory() -> web.Application:
        return make_app(KubeClient.from_environment(args.kubeconfig, component="slurm-bridge-extender"))

    log.info("extender listening on %s:%d", host, port)
    web.run_app(app_factory(), host=host, port=port, print=None, access_log=None)


if __name__ == "__main__":
    main()
