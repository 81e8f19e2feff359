"""The one log setup of the operator, the webhook and the extender.

One JSON object per line (python-json-logger), the same keys everywhere: ``ts`` (UTC, ISO 8601
with milliseconds), ``level``, ``logger``, ``msg``, ``error`` (``Type: message`` of a logged
exception; ``traceback`` beside it), and the fields a call passes as ``extra={"fields": {...}}``.

Lines about one object carry ``namespace``, ``name`` and ``jobId`` (``null`` until known) without
every call naming them: the entry point of a reconcile or an admission sets them in a context
variable (:func:`bind`, :func:`work_item`), which asyncio copies into the tasks it starts.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from aiohttp import web
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as _LibJsonFormatter

# The fields of the object a line is about; None outside any reconcile or admission.
_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("slurm_bridge_log_context", default=None)
OBJECT_KEYS = ("namespace", "name", "jobId")
# Libraries that repeat every request or event without a decision of the bridge's.
_NOISY = ("httpx", "httpcore", "aiohttp.access", "kubernetes", "kopf.objects")


def bind(**fields: Any) -> None:
    """Add fields to the current context: every later line of this task (and of tasks it starts)
    carries them. ``namespace``/``name`` start a new object: its ``jobId`` is reset unless given."""
    current = _CONTEXT.get() or {}
    if "namespace" in fields or "name" in fields:
        rest = {k: v for k, v in current.items() if k not in OBJECT_KEYS and k != "kind"}
        current = {"namespace": None, "name": None, "jobId": None, **rest}
    _CONTEXT.set({**current, **fields})


def context() -> dict[str, Any]:
    return dict(_CONTEXT.get() or {})


@contextmanager
def scope(**fields: Any) -> Iterator[None]:
    """The fields for the lines logged inside the block only."""
    token = _CONTEXT.set(dict(_CONTEXT.get() or {}))
    try:
        bind(**fields)
        yield
    finally:
        _CONTEXT.reset(token)


R = TypeVar("R")


@runtime_checkable
class ObjectItem(Protocol):
    """A work item about one namespaced object (the PlaceholderJob controller's items)."""

    kind: str
    namespace: str
    name: str


ItemT = TypeVar("ItemT", bound=Hashable)
# Whether each work item type is an ObjectItem: a runtime Protocol check costs about 6.5 us (it
# walks the protocol's members), once per reconcile; the answer is the type's, so it is kept.
_OBJECT_ITEM_TYPES: dict[type, bool] = {}


def _is_object_item(item: object) -> bool:
    known = _OBJECT_ITEM_TYPES.get(type(item))
    if known is None:
        known = _OBJECT_ITEM_TYPES[type(item)] = isinstance(item, ObjectItem)
    return known


def work_item(func: Callable[[Any, ItemT], Awaitable[R]]) -> Callable[[Any, ItemT], Awaitable[R]]:
    """Decorate a work queue's handler ``(self, item)``: the lines of each reconcile of an
    :class:`ObjectItem` name its object."""

    @functools.wraps(func)
    async def wrapper(self: Any, item: ItemT) -> R:
        fields: dict[str, Any] = {}
        if _is_object_item(item):
            named: Any = item
            fields = {"kind": named.kind, "namespace": named.namespace, "name": named.name}
        with scope(**fields):
            return await func(self, item)

    return wrapper


@web.middleware
async def request_scope(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp middleware: each request starts with no object fields (a kept-alive connection
    serves many requests in one task, so one request's fields must not reach the next's lines)."""
    token = _CONTEXT.set(None)
    try:
        response: web.StreamResponse = await handler(request)
        return response
    finally:
        _CONTEXT.reset(token)


def _utc(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """Context first, then the call's own ``fields``: a call may say more than its context."""
    out = dict(_CONTEXT.get() or {})
    fields = getattr(record, "fields", None)
    if isinstance(fields, dict):
        out.update(fields)
    return out


def _error(record: logging.LogRecord) -> str | None:
    if record.exc_info and record.exc_info[1] is not None:
        e = record.exc_info[1]
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return None


class JsonFormatter(_LibJsonFormatter):
    """python-json-logger with the bridge's key names, context and ``fields`` flattened."""

    def __init__(self) -> None:
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger", "message": "msg", "exc_info": "traceback"},
            # "fields" is flattened below; "taskName" (3.12+) says nothing to a reader.
            reserved_attrs=[*RESERVED_ATTRS, "fields", "taskName"],
            json_default=str,
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        log_data["ts"] = _utc(record.created)
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()
        error = _error(record)
        if error is not None:
            log_data["error"] = error
        for key, value in _fields_of(record).items():
            if key not in ("ts", "level", "logger", "msg"):
                log_data[key] = value


class TextFormatter(logging.Formatter):
    """For a terminal: the message, then the same fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields_of(record)
        if fields:
            head, sep, tail = text.partition("\n")  # keep a traceback below the fields
            text = head + " " + " ".join(f"{k}={v}" for k, v in fields.items()) + sep + tail
        return text


def setup_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Log to stderr in ``fmt`` (json or text) at ``level``; replaces any handler already set."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in _NOISY:
        # At DEBUG the bridge's own lines are wanted, not every library's request log (httpx's
        # would print request headers, the Slurm JWT among them).
        logging.getLogger(noisy).setLevel(logging.WARNING)
