"""The metadata readers are total: a missing, null or ill-typed metadata or field reads as empty
(None for a single field), never raises; a present one reads as the object holds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from slurm_bridge.core import objects

pytestmark = pytest.mark.unit

FULL: dict[str, Any] = {
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "uid": "u-1",
        "deletionTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"a": "1"},
        "annotations": {"b": "2"},
        "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}],
    }
}

# (reader, what a full object reads as, what an object without the field reads as)
READERS: list[tuple[Callable[[Any], Any], Any, Any]] = [
    (objects.name, "p", None),
    (objects.namespace, "ns", None),
    (objects.uid, "u-1", None),
    (objects.deletion_timestamp, "2026-01-01T00:00:00Z", None),
    (objects.labels, {"a": "1"}, {}),
    (objects.annotations, {"b": "2"}, {}),
    (objects.owner_references, [{"kind": "Job", "name": "j", "controller": True}], []),
]

# Objects that hold none of the fields, each a way one goes missing.
EMPTY: dict[str, Any] = {
    "no object": None,
    "no metadata": {"kind": "Pod"},
    "null metadata": {"metadata": None},
    "metadata not a map": {"metadata": ["x"]},
    "empty metadata": {"metadata": {}},
    "null fields": {
        "metadata": dict.fromkeys(
            ("name", "namespace", "uid", "deletionTimestamp", "labels", "annotations", "ownerReferences")
        )
    },
    "ill-typed fields": {
        "metadata": {
            "name": 1,
            "namespace": ["ns"],
            "uid": {},
            "deletionTimestamp": 0,
            "labels": ["a"],
            "annotations": "b",
            "ownerReferences": {"kind": "Job"},
        }
    },
}


@pytest.mark.parametrize("reader, full, _", READERS, ids=[r[0].__name__ for r in READERS])
def test_a_present_field_reads_as_held(reader: Callable[[Any], Any], full: Any, _: Any) -> None:
    assert reader(FULL) == full


@pytest.mark.parametrize("case", EMPTY)
@pytest.mark.parametrize("reader, _, empty", READERS, ids=[r[0].__name__ for r in READERS])
def test_a_missing_field_reads_as_empty(reader: Callable[[Any], Any], _: Any, empty: Any, case: str) -> None:
    assert reader(EMPTY[case]) == empty


def test_maps_are_the_objects_own_and_the_empty_one_is_new_each_time() -> None:
    assert objects.labels(FULL) is FULL["metadata"]["labels"]
    assert objects.meta(FULL) is FULL["metadata"]
    assert objects.annotations({}) is not objects.annotations({})


def test_owner_references_leave_out_entries_that_are_not_maps() -> None:
    obj = {"metadata": {"ownerReferences": [None, "x", {"kind": "Job"}]}}
    assert objects.owner_references(obj) == [{"kind": "Job"}]


@pytest.mark.parametrize("case", EMPTY)
def test_meta_of_an_object_without_metadata_is_empty(case: str) -> None:
    obj = EMPTY[case]
    expected = obj["metadata"] if case in ("empty metadata", "null fields", "ill-typed fields") else {}
    assert objects.meta(obj) == expected
