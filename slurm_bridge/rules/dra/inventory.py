"""A node's devices as its DRA driver publishes them (ResourceSlices), in Slurm's index order, with
the shares a GPU offers (shards), and the node inventory check: Slurm's GPUs and the driver's the same."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge.rules.dra.classes import MIG_TYPE, SHARD_CAPACITY, SHARD_GRES, DeviceClass
from slurm_bridge.rules.dra.gres import gpu_items, gres_items
from slurm_bridge.rules.resources import parse_quantity


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    type: str = ""  # the driver's ``type`` attribute: "gpu", "mig" ("" when it gives none)
    profile: str = ""  # a MIG device's ``profile``
    shards: int = 0  # its ``shards`` capacity, when it allows several allocations (consumable capacity)


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def _attr(device: Mapping[str, Any], key: str, kind: str) -> Any:
    value = (device.get("attributes") or {}).get(key)
    if isinstance(value, Mapping):
        found = value.get(kind)
        if (kind == "int" and type(found) is int) or (kind == "string" and isinstance(found, str)):
            return found
    return None


def _device_index(device: Mapping[str, Any]) -> int | None:
    return _attr(device, "index", "int")  # type: ignore[no-any-return]


def _shards(device: Mapping[str, Any]) -> int:
    """The device's ``shards`` capacity when it may be allocated several times (0 otherwise)."""
    if device.get("allowMultipleAllocations") is not True:
        return 0
    value = ((device.get("capacity") or {}).get(SHARD_CAPACITY) or {}).get("value")
    try:
        amount = parse_quantity(value) if value is not None else None
    except ValueError:
        return 0
    return int(amount) if amount is not None and amount.denominator == 1 and amount > 0 else 0


# The NVIDIA driver's device names since it stopped publishing ``index`` and ``minor``: a GPU
# ``gpu-<minor>``, a MIG device ``gpu-<parent minor>-mig-<GI profile id>-<placement start>-<size>``.
_GPU_NAME: Final = re.compile(r"^gpu-(?P<gpu>[0-9]+)$")
_MIG_NAME: Final = re.compile(r"^gpu-(?P<gpu>[0-9]+)-mig-[0-9]+-(?P<start>[0-9]+)-[0-9]+$")


def _slurm_order(device: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """Where Slurm numbers a device among a node's GPUs (docs/gpus.md): GPU by GPU (``index``; a
    MIG device's GPU is its ``parentIndex``), a whole GPU alone, a MIG GPU's instances by ``minor``;
    without those attributes, from the driver's names (the GPU's minor, the instance's placement
    start); None when neither says."""
    name = str(device.get("name") or "")
    if _attr(device, "type", "string") == "mig":
        parent = _attr(device, "parentIndex", "int")
        minor = _attr(device, "minor", "int")
        if parent is not None and minor is not None:
            return (parent, 1, minor)
        m = _MIG_NAME.match(name)
        return (int(m["gpu"]), 1, int(m["start"])) if m else None
    index = _device_index(device)
    if index is not None:
        return (index, 0, 0)
    m = _GPU_NAME.match(name)
    return (int(m["gpu"]), 0, 0) if m and _attr(device, "type", "string") == "gpu" else None


def node_devices(slices: Sequence[Mapping[str, Any]], driver: str, node: str) -> dict[int, Device]:
    """Slurm index -> device, over the driver's ResourceSlices for ``node`` (the newest generation
    of each pool).

    Whole GPUs only: a device's ``index``. With MIG devices (``type`` ``mig``), Slurm numbers the
    node's GPU GRES in one sequence, GPU by GPU and a MIG GPU instance by instance: the devices'
    position in :func:`_slurm_order`. Without those attributes: the natural name order. A
    partitionable device (one that consumes a shared counter) is never given: it is left out."""
    newest: dict[str, int] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == driver and spec.get("nodeName") == node:
            pool = spec.get("pool") or {}
            name = str(pool.get("name") or node)
            newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    found: list[tuple[tuple[int, int, int] | None, Device]] = []
    indexed: list[int | None] = []  # each device's index attribute
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver or spec.get("nodeName") != node:
            continue
        pool = spec.get("pool") or {}
        name = str(pool.get("name") or node)
        if int(pool.get("generation") or 0) != newest[name]:
            continue
        for d in spec.get("devices") or []:
            if d.get("consumesCounters"):
                continue
            device = Device(
                driver,
                name,
                str(d.get("name")),
                _attr(d, "type", "string") or "",
                _attr(d, "profile", "string") or "",
                _shards(d),
            )
            found.append((_slurm_order(d), device))
            indexed.append(_device_index(d))
    if any(d.type == "mig" for _, d in found) and all(o is not None for o, _ in found):
        return dict(enumerate(d for _, d in sorted(found, key=lambda f: f[0] or (0, 0, 0))))
    if found and all(i is not None for i in indexed):
        return {i: d for i, (_, d) in zip(indexed, found, strict=True) if i is not None}
    ordered = sorted((d for _, d in found), key=lambda d: (_natural(d.pool), _natural(d.name)))
    return dict(enumerate(ordered))


def slurm_gpu_inventory(node_gres: str) -> dict[str, int]:
    """A Slurm node's GPUs (its ``Gres``) by kind: ``gpu`` for whole GPUs (untyped, or of a GPU
    type such as ``h100``), ``gpu:<profile>`` for MIG instances (type ``1g.10gb``, or AutoDetect's
    ``h100_1g.10gb``)."""
    out: dict[str, int] = {}
    for typed, count in gpu_items(node_gres):
        if count is None:
            continue
        m = MIG_TYPE.search(typed)
        kind = f"gpu:{m.group(0).lstrip('_')}" if m else "gpu"
        out[kind] = out.get(kind, 0) + count
    shards = sum(n for name, _, n in gres_items(node_gres) if name == SHARD_GRES and n is not None)
    if shards:
        out[SHARD_GRES] = shards
    return out


def slice_gpu_inventory(slices: Sequence[Mapping[str, Any]], driver: str, node: str) -> dict[str, int]:
    """The driver's GPUs on ``node`` (newest pool generations, partitionable devices left out) by
    the same kinds as :func:`slurm_gpu_inventory`."""
    out: dict[str, int] = {}
    for d in node_devices(slices, driver, node).values():
        kind = f"gpu:{d.profile}" if d.type == "mig" else "gpu"
        out[kind] = out.get(kind, 0) + 1
        if d.shards:
            out[SHARD_GRES] = out.get(SHARD_GRES, 0) + d.shards
    return out


def devices_differ(
    node_gres: str, slices: Sequence[Mapping[str, Any]], node: str, driver: str = "gpu.nvidia.com"
) -> str:
    """Why Slurm's GPUs on a node and the DRA driver's are not the same devices ("" when they are,
    and when the node has neither): a new layout published (a MIG change) that gres.conf does not
    have yet, or the other way round."""
    slurm = slurm_gpu_inventory(node_gres)
    published = slice_gpu_inventory(slices, driver, node)
    if slurm == published:
        return ""
    return f"Slurm's GRES on node {node} has {said(slurm)}; driver {driver}'s ResourceSlices publish {said(published)}"


def said(inventory: Mapping[str, int], empty: str = "none") -> str:
    """An inventory of :func:`slurm_gpu_inventory` in words: ``2 whole GPU(s), 4 1g.10gb``."""
    words = (
        f"{n} {'whole GPU(s)' if k == 'gpu' else 'shard(s)' if k == SHARD_GRES else k.split(':', 1)[1]}"
        for k, n in sorted(inventory.items())
    )
    return ", ".join(words) or empty


def largest_request(slices: Sequence[Mapping[str, Any]], cls: DeviceClass) -> int | None:
    """The most devices of ``cls`` any one node publishes (None: no ResourceSlice of its driver
    at all, so nothing can be judged). A pod's devices come from one node. One pass over the
    slices to group them by node: a webhook call must not cost nodes x slices."""
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == cls.driver and spec.get("nodeName"):
            by_node.setdefault(str(spec["nodeName"]), []).append(s)
    if not by_node:
        return None
    best = 0
    for node, mine in by_node.items():
        if cls.kind == "cpus":
            count = len(node_devices(mine, cls.driver, node))
        elif cls.shared:  # a pod's shards come from one GPU
            count = max((d.shards for d in node_devices(mine, cls.driver, node).values()), default=0)
        else:
            count = slice_gpu_inventory(mine, cls.driver, node).get(
                "gpu" if not cls.profile else f"gpu:{cls.profile}", 0
            )
        best = max(best, count)
    return best
