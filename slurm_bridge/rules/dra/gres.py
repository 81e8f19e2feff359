"""What Slurm is asked for a pod's DRA requests, and what Slurm's GRES lists say (a job's TRES per
node, a node's Gres): GPUs whole or of a MIG profile, and shards."""

from __future__ import annotations

from collections.abc import Mapping

from slurm_bridge.rules.dra.classes import MIG_TYPE, SHARD_GRES, mapped_class


def gpu_items(gres: str | None) -> list[tuple[str, int | None]]:
    """(type, count) of each ``gpu`` item of a GRES list: a job's TRES per node (``gres/gpu:2``,
    ``gres/gpu:1g.10gb:1,gres/shard:2``) or a node's Gres (``gpu:h100:2(S:0)``); type "" when
    untyped, count None when not given."""
    return [(typed, count) for name, typed, count in gres_items(gres) if name == "gpu"]


def gres_items(gres: str | None) -> list[tuple[str, str, int | None]]:
    """(name, type, count) of each item of a GRES list (``gres/shard:2``, ``gpu:h100:2(S:0)``); type
    "" when untyped, count None when not given."""
    out: list[tuple[str, str, int | None]] = []
    for item in filter(None, (gres or "").split(",")):
        parts = item.split("(")[0].strip().removeprefix("gres/").split(":")
        typed = parts[1] if len(parts) >= 2 and not parts[1].isdigit() else ""
        out.append((parts[0], typed, int(parts[-1]) if len(parts) >= 2 and parts[-1].isdigit() else None))
    return out


def untyped_gpu_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPUs of any type: Slurm could meet it with a MIG instance,
    which is not a GPU to give whole."""
    return any(not typed for typed, _ in gpu_items(gres))


def typed_gpu_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPUs of a MIG profile (``gres/gpu:1g.10gb:1``)."""
    return any(MIG_TYPE.search(typed) for typed, _ in gpu_items(gres))


def shard_request(gres: str | None) -> bool:
    """A job's TRES per node asks for GPU shares (``gres/shard:2``)."""
    return any(name == SHARD_GRES and count is not None for name, _, count in gres_items(gres))


def mig_node(node_gres: str) -> bool:
    """A Slurm node (its ``Gres``, e.g. ``gpu:1g.10gb:4,gpu:3g.40gb:1``) with MIG instances among
    its GPUs: jobs asking for untyped GPUs are kept off it (submitted with it excluded)."""
    return typed_gpu_request(node_gres)


def slurm_needs(counts: Mapping[str, int]) -> tuple[dict[str, int], int | None]:
    """({GRES[:type]: count per node}, CPUs or None) that the requests ask Slurm for."""
    gres: dict[str, int] = {}
    cpus: int | None = None
    for cls_name, count in counts.items():
        cls = mapped_class(cls_name)
        if cls.kind == "gres":
            gres[cls.slurm_gres] = gres.get(cls.slurm_gres, 0) + count
        else:
            cpus = (cpus or 0) + count
    return gres, cpus
