"""What every entry point shares: config loading with a clean exit, and the one log setup (logs.py)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from slurm_bridge.core.config import Config, ConfigError, load_config
from slurm_bridge.core.logs import setup_logging

__all__ = ["add_common_args", "config_or_exit", "fail", "setup_logging"]

EXIT_BAD_CONFIG = 2
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH", help="bridge config file (YAML); defaults apply without it")
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)
    parser.add_argument("--log-format", default="json", choices=["json", "text"])


def fail(message: str, code: int = EXIT_BAD_CONFIG) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def config_or_exit(path: str | None) -> Config:
    """Load the config; on any problem print what is wrong and exit 2 before anything starts."""
    try:
        return load_config(path)
    except ConfigError as e:
        fail(f"invalid configuration:\n{e}")
