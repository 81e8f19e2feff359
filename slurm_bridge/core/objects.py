"""Kubernetes objects as the bridge holds them (decoded JSON), and readers of their metadata.

One home for the ``Obj`` alias and for the reads of ``metadata`` that every floor repeats. It
stands on the ground floor because the pure rules (slurm_bridge/rules/) and the metrics read
objects too, and neither may import the floor that talks to the API server.

Each reader is total: a missing or null ``metadata`` or field (or one of the wrong type) reads as
empty, never raises, so a reader can take an object straight from a watch event or a request.
The maps and lists come back as the object holds them (not copies), or a new empty one.
"""

# No ``from __future__ import annotations`` here: its name would clash with the reader below.
from collections.abc import Mapping
from typing import Any

# A Kubernetes object or a part of one, as decoded from JSON.
Obj = dict[str, Any]


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The object's ``metadata`` (empty when it has none)."""
    found = obj.get("metadata") if isinstance(obj, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _text(obj: Mapping[str, Any] | None, field: str) -> str | None:
    found = meta(obj).get(field)
    return found if isinstance(found, str) else None


def name(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.name`` (None when unset: e.g. an object only with a ``generateName``)."""
    return _text(obj, "name")


def namespace(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.namespace`` (None for a cluster-scoped object)."""
    return _text(obj, "namespace")


def uid(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.uid`` (None before the API server has stored the object)."""
    return _text(obj, "uid")


def deletion_timestamp(obj: Mapping[str, Any] | None) -> str | None:
    """``metadata.deletionTimestamp``: set once a delete is asked and finalizers hold the object."""
    return _text(obj, "deletionTimestamp")


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``metadata.labels`` (empty when none)."""
    found = meta(obj).get("labels")
    return found if isinstance(found, Mapping) else {}


def annotations(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``metadata.annotations`` (empty when none)."""
    found = meta(obj).get("annotations")
    return found if isinstance(found, Mapping) else {}


def owner_references(obj: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """``metadata.ownerReferences``, each a map (entries of another shape are left out)."""
    found = meta(obj).get("ownerReferences")
    return [r for r in found if isinstance(r, Mapping)] if isinstance(found, list) else []
