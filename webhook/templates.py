"""Where a pod's or a workload's specs are: a workload kind's pod templates by location (the paths of
``workloadkinds.POD_TEMPLATES``) and an object's ``spec``, read the same by every admission check."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any


def spec_of(obj: Any) -> Mapping[str, Any]:
    """An object's ``spec`` ({} when it has none or it is not a mapping)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def _walk(obj: Any, path: Sequence[str], at: str) -> Iterator[tuple[str, Any]]:
    if not path:
        yield at, obj
        return
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                yield from _walk(item, rest, f"{at}[{i}]")
        return
    if isinstance(obj, Mapping) and head in obj:
        yield from _walk(obj[head], rest, f"{at}.{head}" if at else head)


def pod_templates(obj: Mapping[str, Any] | None, paths: Sequence[Sequence[str]]) -> dict[str, Any]:
    """The pod templates of a workload by location, for example ``spec.replicatedJobs[0]...``."""
    found: dict[str, Any] = {}
    for path in paths:
        found.update(_walk(obj, path, ""))
    return found
