"""A JSON object whose one large list is decoded item by item.

A full ``GET jobs`` answer is about 8 KB of JSON a job (80 MB for 10,000 jobs) and holds every job
of the cluster, while the bridge keeps a few fields of its own jobs. Parsed whole, it became about
four times its size in Python objects at once, and the heap the operator kept afterwards grew by
up to 100 MB with every such list (docs/performance.md, run 11). Here each item is parsed by the
standard library's C scanner and handed to ``keep`` at once, so only one item's objects exist at a
time and only what ``keep`` returns stays.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    return found.end() if found is not None else at


def _expect(text: str, at: int, chars: str) -> tuple[str, int]:
    """The character at ``at`` (after white space), which must be one of ``chars``, and the index after it."""
    at = _skip(text, at)
    if at >= len(text) or text[at] not in chars:
        raise ValueError(f"expected one of {chars!r} at offset {at}")
    return text[at], at + 1


def parse_with_list(data: bytes, key: str, keep: Callable[[Any], Any | None]) -> Any:
    """``data`` decoded as JSON, except that an object's ``key`` list holds ``keep(item)`` for each
    item, in order, leaving out None. Anything but an object is decoded whole (``keep`` unused).
    Raises ValueError for text that is not JSON, as ``json.loads`` would."""
    text = data.decode("utf-8")
    start = _skip(text, 0)
    if not text.startswith("{", start):
        return json.loads(text)
    result: dict[str, Any] = {}
    try:
        at = _skip(text, start + 1)
        if text.startswith("}", at):
            at += 1
        else:
            while True:
                name, at = _DECODER.raw_decode(text, _skip(text, at))
                if not isinstance(name, str):
                    raise ValueError(f"an object key must be a string, at offset {at}")
                _, at = _expect(text, at, ":")
                at = _skip(text, at)
                if name == key and text.startswith("[", at):
                    result[name], at = _list(text, at + 1, keep)
                else:
                    result[name], at = _DECODER.raw_decode(text, at)
                sep, at = _expect(text, at, ",}")
                if sep == "}":
                    break
    except IndexError:
        raise ValueError("the JSON text ends too early") from None
    if _skip(text, at) != len(text):
        raise ValueError(f"extra data after the JSON object, at offset {at}")
    return result


def _list(text: str, at: int, keep: Callable[[Any], Any | None]) -> tuple[list[Any], int]:
    """The items after a list's ``[`` at ``at``, each through ``keep``; and the index after ``]``."""
    kept: list[Any] = []
    at = _skip(text, at)
    if text.startswith("]", at):
        return kept, at + 1
    while True:
        item, at = _DECODER.raw_decode(text, _skip(text, at))
        value = keep(item)
        del item  # its objects go before the next item is parsed
        if value is not None:
            kept.append(value)
        sep, at = _expect(text, at, ",]")
        if sep == "]":
            return kept, at
