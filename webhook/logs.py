"""The webhook logs like the other components (slurm_bridge/logs.py): one JSON object per line.

Callers pass fields with ``extra={"fields": {...}}``; objects themselves are never logged, only
their kind, namespace and name.
"""

from __future__ import annotations

from slurm_bridge.logs import JsonFormatter, setup_logging

__all__ = ["JsonFormatter", "setup_logging"]
