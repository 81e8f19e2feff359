"""What every entry point shares: config loading with a clean exit, and structured logging."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import NoReturn

from slurm_bridge.config import Config, ConfigError, load_config

EXIT_BAD_CONFIG = 2


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(level: str = "INFO", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "aiohttp.access", "kubernetes", "kopf.objects"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH", help="bridge config file (YAML); defaults apply without it")
    parser.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: $KUBECONFIG or in-cluster)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
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
