"""A JSON object whose one large list is decoded item by item, as the answer arrives.

A full ``GET jobs`` answer is about 8 KB of JSON a job (80 MB for 10,000 jobs) and holds every job
of the cluster, while the bridge keeps a few fields of its own jobs. Parsed whole, it became about
four times its size in Python objects at once (bench/log, run 11); read whole and then
decoded item by item, its bytes and their text were still held at once, and the operator's RSS
peaked at 395 - 434 MiB with 10,000 jobs (run 14). ``ListStream`` is fed the answer as it is read
(the transport hands each piece over: :mod:`.transport`): each item is parsed by the standard
library's C scanner and handed to ``keep`` at once, and the text already parsed is dropped, so only
a window of the text (what the socket's buffer holds) and one item's objects exist at a time.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
# Parsed text is dropped once this much of it has piled up in front of the window.
_TRIM = 1 << 16


class _More(Exception):
    """The text so far ends inside the next value: wait for the next piece."""


class ListStream:
    """``parse_with_list``, fed piece by piece (``feed``), the result from ``close``.

    A value is parsed once the text holds it whole; a piece that ends inside one is kept until the
    next arrives (a failed attempt is not retried before the unparsed text has doubled, so a large
    value costs linear time). Anything but an object is decoded whole at the end.
    """

    def __init__(self, key: str, keep: Callable[[Any], Any | None]) -> None:
        self._key, self._keep = key, keep
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text, self._at = "", 0
        self._state = "start"
        self._result: dict[str, Any] = {}
        self._name = ""
        self._kept: list[Any] = []
        self._whole: list[str] | None = None  # not an object: all of its text, decoded at the end
        self._wait_for = 0  # the unparsed length a retry waits for

    def feed(self, data: bytes) -> None:
        text = self._utf8.decode(data)
        if self._whole is not None:
            self._whole.append(text)
            return
        self._text += text
        if len(self._text) - self._at >= self._wait_for:
            self._run(final=False)

    def close(self) -> Any:
        """The decoded answer; ValueError for text that is not JSON, as ``json.loads`` would."""
        self.feed(b"")
        self._text += self._utf8.decode(b"", final=True)
        if self._whole is not None:
            return json.loads("".join(self._whole) + self._text)
        self._run(final=True)
        if self._state != "done":
            raise ValueError("the JSON text ends too early")
        return self._result

    # ---- the states: each step consumes one token or value, or raises _More -----------------
    def _run(self, *, final: bool) -> None:
        try:
            while self._state != "done" or self._skip() < len(self._text):
                if self._state == "done":
                    raise ValueError(f"extra data after the JSON object, at offset {self._at}")
                self._step(final)
                if self._whole is not None:
                    return
        except _More:
            if final:
                raise ValueError("the JSON text ends too early") from None
            self._wait_for = 2 * (len(self._text) - self._at)
        else:
            self._wait_for = 0
        if self._at >= _TRIM:
            self._text, self._at = self._text[self._at :], 0

    def _step(self, final: bool) -> None:
        state = self._state
        if state == "start":
            if self._char(final) != "{":
                self._whole, self._text, self._at = [self._text[self._at :]], "", 0
                return
            self._take("key_or_end")
        elif state in ("key_or_end", "key"):
            if state == "key_or_end" and self._char(final) == "}":
                self._take("done")
                return
            name = self._value(final)
            if not isinstance(name, str):
                raise ValueError(f"an object key must be a string, at offset {self._at}")
            self._name, self._state = name, "colon"
        elif state == "colon":
            self._expect(":", final)
            self._state = "value"
        elif state == "value":
            if self._name == self._key and self._char(final) == "[":
                self._take("item_or_end")
            else:
                self._result[self._name] = self._value(final)
                self._state = "object_next"
        elif state == "object_next":
            self._state = "key" if self._expect(",}", final) == "," else "done"
        elif state == "item_or_end":
            self._list_end() if self._char(final) == "]" else self._item(final)
        elif state == "item":
            self._item(final)
        elif state == "item_next":
            if self._expect(",]", final) == ",":
                self._state = "item"
            else:
                self._list_end(taken=True)

    def _item(self, final: bool) -> None:
        item = self._value(final)
        value = self._keep(item)
        del item  # its objects go before the next item is parsed
        if value is not None:
            self._kept.append(value)
        self._state = "item_next"

    def _list_end(self, taken: bool = False) -> None:
        if not taken:
            self._at = self._skip() + 1
        self._result[self._key], self._kept = self._kept, []
        self._state = "object_next"

    # ---- the text ----------------------------------------------------------------------------
    def _skip(self) -> int:
        found = _SPACE.match(self._text, self._at)
        self._at = found.end() if found is not None else self._at
        return self._at

    def _char(self, final: bool) -> str:
        at = self._skip()
        if at >= len(self._text):
            raise _More
        return self._text[at]

    def _take(self, state: str) -> None:
        self._at += 1
        self._state = state

    def _expect(self, chars: str, final: bool) -> str:
        char = self._char(final)
        if char not in chars:
            raise ValueError(f"expected one of {chars!r} at offset {self._at}")
        self._at += 1
        return char

    def _value(self, final: bool) -> Any:
        """The value at the window's start. One that ends with the text may go on in the next
        piece (a number, ``true``): in an object or a list a value is always followed by more."""
        at = self._skip()
        try:
            value, end = _DECODER.raw_decode(self._text, at)
        except ValueError:
            if final:
                raise
            raise _More from None
        if end >= len(self._text) and not final:
            raise _More
        self._at = end
        return value


def parse_with_list(data: bytes, key: str, keep: Callable[[Any], Any | None]) -> Any:
    """``data`` decoded as JSON, except that an object's ``key`` list holds ``keep(item)`` for each
    item, in order, leaving out None. Anything but an object is decoded whole (``keep`` unused).
    Raises ValueError for text that is not JSON, as ``json.loads`` would."""
    stream = ListStream(key, keep)
    stream.feed(data)
    return stream.close()
