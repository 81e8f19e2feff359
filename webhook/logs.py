"""JSON-line logs, one object per event, so decisions can be filtered by field.

Callers pass fields with ``extra={"fields": {...}}``; objects themselves are never logged, only
their kind, namespace and name.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str = "info") -> None:
    """JSON lines on stderr, unless the embedding process (a test runner) already set up logging."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    root.setLevel(level.upper())
    # aiohttp's access log repeats every request without the decision; the webhook logs its own.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
