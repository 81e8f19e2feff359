"""Slurm's own value formats inside the JSON: hostlist expressions, GRES strings and GRES details,
state flag lists, times and counts that may be unset (Slurm's "number with flags")."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import hostlist

from .wire import NoVal, WireTime


def time_of(v: WireTime) -> datetime | None:
    n = v.value() if isinstance(v, NoVal) else v
    return datetime.fromtimestamp(n, tz=UTC) if n else None


def minutes_of(v: WireTime) -> int | None:
    return v.value() if isinstance(v, NoVal) else v


def number_of(v: NoVal | int | None) -> int:
    """A count or id that Slurm may leave unset (0 then)."""
    n = v.value() if isinstance(v, NoVal) else v
    return n or 0


def base_first(states: list[str] | str, base: frozenset[str]) -> tuple[str, ...]:
    """Upper-cased states with the base state first, whatever order the server used."""
    items = [s.upper() for s in ([states] if isinstance(states, str) else states) if s]
    if isinstance(states, str):  # old "RUNNING+COMPLETING" style
        items = [p for s in items for p in s.replace("+", " ").split()]
    bases = [s for s in items if s in base]
    return tuple(bases[:1] + [s for s in items if s not in bases[:1]])


def csv_items(v: list[str] | str | None) -> tuple[str, ...]:
    if v is None:
        return ()
    items = v.split(",") if isinstance(v, str) else v
    return tuple(s.strip() for s in items if s.strip())


def expand_nodes(nodes: str | None) -> tuple[str, ...]:
    """``"kwok-node-[1-2,4]"`` -> the node names, in Slurm's order."""
    if not nodes or nodes in ("(null)", "None"):
        return ()
    names: list[str] = hostlist.expand_hostlist(nodes)
    return tuple(names)


def gres_to_tres_per_node(gres: str) -> str:
    """Accept sbatch's ``--gres`` form ("gpu:2") as well as Slurm's TRES form ("gres/gpu:2")."""
    items = [g.strip() for g in gres.split(",") if g.strip()]
    return ",".join(g if "/" in g.split(":", 1)[0] else f"gres/{g}" for g in items)


# One GRES of a node's detail: name[:type][:count], then "(IDX:0-1,3)" or "(CNT:2)"; a type has a
# non-digit, so that (as in Slurm) "gpu:2" is a count.
_GRES_DETAIL = re.compile(
    r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]*[^:(\d][^:(]*))?(?::(?P<count>\d+))?(?:\((?P<what>IDX|CNT):(?P<list>[^)]*)\))?$"
)


def _gres_items(detail: str) -> list[str]:
    """The items of a GRES list, split at commas outside parentheses."""
    items, depth, current = [], 0, ""
    for ch in detail:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i for i in (i.strip() for i in items) if i]


def parse_gres_detail(detail: str) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """({GRES name: indices}, {GRES name: count}) of one node's GRES detail, such as
    ``gpu:2(IDX:0,2)``, ``gpu:a100:1(IDX:3),shard:0(IDX:N/A)`` or ``gpu(CNT:2)`` (no indices:
    the GRES has no device files); a typed item also under ``name:type`` (``gpu:a100``). A shared
    GRES's item (``shard:2(2/8,0/8)``) counts here; :func:`parse_gres_shares` says where."""
    indices: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for item in _gres_items(detail):
        m = _GRES_DETAIL.match(item)
        if not m:
            shared = _GRES_SHARES.match(item)
            if shared:
                counts[shared["name"]] = counts.get(shared["name"], 0) + int(shared["count"])
            continue
        what, listed = m["what"], m["list"] or ""
        # A typed item counts under its name and under name:type (a MIG profile's GRES: gpu:1g.10gb).
        keys = [m["name"], f"{m['name']}:{m['type']}"] if m["type"] else [m["name"]]
        for name in keys:
            if what == "CNT" and listed.isdigit():
                counts[name] = counts.get(name, 0) + int(listed)
            elif what == "IDX" and listed and listed != "N/A":
                found = _index_list(listed)
                indices.setdefault(name, []).extend(found)
                counts[name] = counts.get(name, 0) + len(found)
            elif m["count"]:
                counts[name] = counts.get(name, 0) + int(m["count"])
    return {k: tuple(sorted(v)) for k, v in indices.items()}, counts


# A shared GRES (``shard``) in a job's detail: its count, then the job's share of each of the
# node's records (GPUs) as used/total, in gres.conf order: ``shard:2(2/8,0/8)``, or with the type
# Slurm takes from the GPU's record (``shard:h100:2(2/8,0/8)``).
_GRES_SHARES = re.compile(
    r"^(?P<name>[^:(]+)(?::[^:(]*[^:(\d][^:(]*)?:(?P<count>\d+)\((?P<shares>\d+/\d+(?:,\d+/\d+)*)\)$"
)


def parse_gres_shares(detail: str) -> dict[str, tuple[int, ...]]:
    """{GRES name: the job's count on each of the node's records of it} of a job's GRES detail
    (``shard:2(2/8,0/8)`` -> ``{"shard": (2, 0)}``): which GPUs a job's shards are on."""
    out: dict[str, tuple[int, ...]] = {}
    for item in _gres_items(detail):
        m = _GRES_SHARES.match(item)
        if m:
            out[m["name"]] = tuple(int(part.split("/")[0]) for part in m["shares"].split(","))
    return out


def _index_list(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out
