"""slurm_bridge/slurm/jsonlist.py: a JSON object whose one list is decoded item by item."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurm_bridge.slurm.jsonlist import ListStream, parse_with_list

pytestmark = pytest.mark.unit

ANSWERS = [
    {"jobs": [{"job_id": 1, "admin_comment": "a"}, {"job_id": 2, "nested": {"x": [1, 2, {"y": None}]}}],
     "last_update": {"set": True, "number": 5}, "meta": {}, "errors": [], "warnings": []},
    {"meta": {"plugin": "x"}, "jobs": [], "errors": [{"error": "e", "error_number": 1}]},
    {"errors": [], "jobs": [[1, 2], "s", 3.5, True, False, {}], "null": None},
    {"other": [1, 2, 3]},
    {},
    {"jobs": {"not": "a list"}},
    {"jobs": ["ünïcode \u2603", "\"quoted\" \\ and \n escapes"]},
]  # fmt: skip


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("indent", [None, 2, "\t"])
def test_the_same_as_json_loads_when_every_item_is_kept(answer: dict[str, Any], indent: int | str | None) -> None:
    data = json.dumps(answer, indent=indent, ensure_ascii=False).encode()
    assert parse_with_list(b"  \n" + data + b"\r\n ", "jobs", lambda item: item) == answer


def test_each_item_goes_through_keep_in_order_and_none_is_left_out() -> None:
    seen: list[Any] = []

    def keep(item: Any) -> Any:
        seen.append(item)
        return item["job_id"] * 10 if item.get("mine") else None

    body = {"jobs": [{"job_id": 1, "mine": True}, {"job_id": 2}, {"job_id": 3, "mine": True}], "last_update": 7}
    assert parse_with_list(json.dumps(body).encode(), "jobs", keep) == {"jobs": [10, 30], "last_update": 7}
    assert [s["job_id"] for s in seen] == [1, 2, 3]


def test_only_the_named_list_goes_through_keep() -> None:
    body = {"nodes": [1, 2], "jobs": [3]}
    assert parse_with_list(json.dumps(body).encode(), "nodes", lambda i: i + 100) == {"nodes": [101, 102], "jobs": [3]}


@pytest.mark.parametrize("data", [b"[1, 2]", b"3", b'"s"', b"null"])
def test_what_is_not_an_object_is_decoded_whole(data: bytes) -> None:
    assert parse_with_list(data, "jobs", lambda i: pytest.fail("keep called")) == json.loads(data)


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"jobs": [1, 2', b'{"jobs": [1 2]}', b'{"jobs": [1,]}', b'{"a": 1,}', b'{"a" 1}', b"{1: 2}",
     b'{"a": 1} x', b'{"a": 1}}', b"<html>Bad gateway</html>", b'{"jobs": [{"a": }]}'],
)  # fmt: skip
def test_what_is_not_json_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_with_list(data, "jobs", lambda i: i)
    with pytest.raises(ValueError):
        json.loads(data)  # the same verdict as the standard parser's


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64])
def test_fed_in_pieces_it_decodes_the_same(answer: dict[str, Any], piece: int) -> None:
    """The transport hands the answer over as it is read: a piece may end anywhere, inside a number,
    a string, an escape or a character of several bytes."""
    data = json.dumps(answer, indent=1, ensure_ascii=False).encode()
    stream = ListStream("jobs", lambda item: item)
    for at in range(0, len(data), piece):
        stream.feed(data[at : at + piece])
    assert stream.close() == answer


def test_a_number_cut_at_a_piece_is_not_taken_too_soon() -> None:
    stream = ListStream("jobs", lambda item: item)
    for piece in (b'{"last_update": 12', b"34, ", b'"jobs": [5', b"6]}"):
        stream.feed(piece)
    assert stream.close() == {"last_update": 1234, "jobs": [56]}


def test_only_a_window_of_the_text_is_held() -> None:
    items = [{"job_id": i, "pad": "x" * 500} for i in range(2000)]
    data = json.dumps({"jobs": items, "last_update": 9}).encode()
    stream, kept = ListStream("jobs", lambda item: item["job_id"] if item["job_id"] % 1000 == 0 else None), 0
    for at in range(0, len(data), 4096):
        stream.feed(data[at : at + 4096])
        kept = max(kept, len(stream._text))
    assert stream.close() == {"jobs": [0, 1000], "last_update": 9}
    assert kept < 100_000, f"held {kept} characters of a {len(data)} byte answer"
