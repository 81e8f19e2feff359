"""The local cluster's GPUs on hybrid nodes (docs/gpus.md): one layout, every view of it.

This machine has no GPU. The hybrid nodes' slurmd get GPUs on device files that stand in for
``/dev/nvidia*`` (in the Slurm root only), and this script plays the NVIDIA DRA driver's part for
the same GPUs: it publishes them as ResourceSlices of driver ``gpu.nvidia.com``, with the attributes
that driver gives (``type``, ``index``, ``minor``, ``uuid``, ``productName``; for a MIG device also
``profile``, ``parentIndex``, ``parentUUID``). Slurm and Kubernetes thus see the same devices, as on
a real node where slurmd's ``AutoDetect=nvml`` and the driver read one NVML.

The layout (``SB_HYBRID_GPUS``, hack/lib.sh): space-separated ``NODE=GPU[,GPU...]``, where a GPU
is ``TYPE`` (a whole GPU of that Slurm type), ``TYPE/SHARDS`` (a whole GPU that Slurm also offers as
SHARDS ``shard`` GRES, e.g. ``h100/8``: one gres.conf ``shard`` record on the GPU's file; the driver
publishes it as a device that allows several allocations, with a ``shards`` capacity, for DRA
consumable capacity) or ``TYPE:PROFILE+PROFILE...`` (a GPU in MIG mode with that static layout, e.g.
``h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb``: a MIG instance is one typed Slurm GRES,
``gpu:1g.10gb``, one gres.conf record each).

  gpus.py gres NODE           slurm.conf's Gres= of NODE ("" when it has none)
  gpus.py gres-conf           gres.conf's records of every node of the layout
  gpus.py device-files ROOT   create the stand-in device files under ROOT (idempotent)
  gpus.py manifests           the DeviceClasses and ResourceSlices, as a JSON List (kubectl apply -f -)

Slurm numbers a node's ``gpu`` GRES in gres.conf order; the records here go GPU by GPU, and within
a MIG GPU instance by instance, which is the order slurm_bridge/rules/dra/inventory.py maps Slurm's indices
back to devices in (``index``, or ``parentIndex`` then ``minor`` for MIG devices).
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from dataclasses import dataclass

DRIVER = "gpu.nvidia.com"
PRODUCTS = {"h100": ("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi")}
PROFILE = re.compile(r"^(?P<g>[1-7])g\.(?P<gb>[0-9]+)gb(\+me)?$")
# /dev/nvidia-caps minors of the stand-in MIG devices (one per instance: a real one has two, its GPU
# instance's and its compute instance's; one file is enough for Slurm to keep an index)
MIG_CAP_BASE = 100


@dataclass(frozen=True)
class Mig:
    profile: str
    minor: int  # the instance's order on its GPU (the driver's minor, here its position)


@dataclass(frozen=True)
class Gpu:
    node: str
    index: int
    type: str
    migs: tuple[Mig, ...] = ()
    shards: int = 0  # Slurm ``shard`` GRES on this (whole) GPU

    @property
    def uuid(self) -> str:
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.node}.gpu{self.index}.slurm-bridge.test')}"

    def mig_uuid(self, m: Mig) -> str:
        return f"MIG-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{self.node}.gpu{self.index}.mig{m.minor}.slurm-bridge.test')}"

    def records(self) -> list[tuple[str, str, int, int]]:
        """(Slurm type, device file, major, minor) of each GRES record: the GPU itself, or one per
        MIG instance, in Slurm's index order."""
        if not self.migs:
            return [(self.type, f"/dev/nvidia{self.index}", 195, self.index)]
        caps = [MIG_CAP_BASE + 10 * self.index + m.minor for m in self.migs]
        return [(m.profile, f"/dev/nvidia-caps/nvidia-cap{c}", 236, c) for m, c in zip(self.migs, caps, strict=True)]


def layout(text: str) -> dict[str, list[Gpu]]:
    """NODE -> its GPUs, from SB_HYBRID_GPUS; SystemExit naming what is wrong."""
    nodes: dict[str, list[Gpu]] = {}
    for item in text.split():
        node, sep, spec = item.partition("=")
        if not sep or not node or not spec:
            raise SystemExit(f"SB_HYBRID_GPUS: {item!r} is not NODE=GPU[,GPU...]")
        gpus = nodes.setdefault(node, [])
        for part in spec.split(","):
            part, _, shards = part.partition("/")
            if shards and (not shards.isdigit() or not 1 <= int(shards) <= 64):
                raise SystemExit(f"SB_HYBRID_GPUS: {node}'s shards {shards!r} are not a number from 1 to 64")
            kind, _, profiles = part.partition(":")
            if shards and profiles:
                raise SystemExit(f"SB_HYBRID_GPUS: {node}'s {part}/{shards}: a GPU in MIG mode has no shards")
            if kind not in PRODUCTS:
                raise SystemExit(f"SB_HYBRID_GPUS: GPU type {kind!r} of {node} is not one of {sorted(PRODUCTS)}")
            migs = tuple(Mig(p, i) for i, p in enumerate(filter(None, profiles.split("+"))))
            for m in migs:
                if not PROFILE.match(m.profile):
                    raise SystemExit(f"SB_HYBRID_GPUS: {m.profile!r} of {node} is not a MIG profile (e.g. 1g.10gb)")
            if sum(int(m.profile[0]) for m in migs) > 7:
                raise SystemExit(f"SB_HYBRID_GPUS: {node}'s MIG layout {profiles} uses more than 7 compute slices")
            gpus.append(Gpu(node, len(gpus), kind, migs, int(shards or 0)))
    return nodes


def gres(gpus: list[Gpu]) -> str:
    """Gres= of slurm.conf: counts per Slurm type (a whole GPU's type, or a MIG profile), then the
    shards."""
    counts: dict[str, int] = {}
    for g in gpus:
        for t, *_ in g.records():
            counts[t] = counts.get(t, 0) + 1
    shards = sum(g.shards for g in gpus)
    return ",".join([*(f"gpu:{t}:{n}" for t, n in counts.items()), *([f"shard:{shards}"] if shards else [])])


def gres_conf(nodes: dict[str, list[Gpu]]) -> list[str]:
    """One record per whole GPU and per MIG instance, in Slurm's index order; then a node's
    ``shard`` records, one per GPU that has shards, in the same order (slurm_bridge/rules/dra/claims.py
    reads the n-th shard record as the n-th such GPU)."""
    gpu_records = [
        f"NodeName={node} Name=gpu Type={kind} File={path}"
        for node, gpus in nodes.items()
        for g in gpus
        for kind, path, _, _ in g.records()
    ]
    shard_records = [
        f"NodeName={node} Name=shard Count={g.shards} File={g.records()[0][1]}"
        for node, gpus in nodes.items()
        for g in gpus
        if g.shards
    ]
    return gpu_records + shard_records


def device_files(root: str, nodes: dict[str, list[Gpu]]) -> None:
    """Character devices (NVIDIA's majors) slurmd can stat; nothing opens them."""
    paths = {path: (major, minor) for gpus in nodes.values() for g in gpus for _, path, major, minor in g.records()}
    for path, (major, minor) in paths.items():
        full = root.rstrip("/") + path
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if not os.path.exists(full):
            os.mknod(full, 0o600 | 0o020000, os.makedev(major, minor))


def _attrs(**values: object) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for key, v in values.items():
        if isinstance(v, bool):
            out[key] = {"bool": v}
        elif isinstance(v, int):
            out[key] = {"int": v}
        elif key in ("cudaComputeCapability", "driverVersion"):
            out[key] = {"version": v}
        else:
            out[key] = {"string": v}
    return out


def devices(g: Gpu) -> list[dict[str, object]]:
    """The driver's devices for one GPU: the GPU itself, or its MIG instances (a GPU in MIG mode is
    published as its instances only)."""
    product, arch, cc, memory = PRODUCTS[g.type]
    common = {"productName": product, "brand": "Nvidia", "architecture": arch,
              "cudaComputeCapability": cc, "driverVersion": "580.95.5"}  # fmt: skip
    if not g.migs:
        attrs = _attrs(type="gpu", index=g.index, minor=g.index, uuid=g.uuid, **common)
        capacity: dict[str, object] = {"memory": {"value": memory}}
        whole: dict[str, object] = {"name": f"gpu-{g.index}", "attributes": attrs, "capacity": capacity}
        if g.shards:  # DRA consumable capacity (Kubernetes >= 1.36): a claim consumes shards of it
            whole["allowMultipleAllocations"] = True
            capacity["shards"] = {"value": str(g.shards)}
        return [whole]
    out = []
    for m in g.migs:
        match = PROFILE.match(m.profile)
        assert match
        attrs = _attrs(
            type="mig", profile=m.profile, index=g.index, parentIndex=g.index, minor=m.minor,
            uuid=g.mig_uuid(m), parentUUID=g.uuid, **common,
        )  # fmt: skip
        name = f"gpu-{g.index}-mig-{m.profile.replace('.', '')}-{m.minor}"
        capacity = {"memory": {"value": f"{match['gb']}Gi"}, "multiprocessors": {"value": str(16 * int(match["g"]))}}
        out.append({"name": name, "attributes": attrs, "capacity": capacity})
    return out


def manifests(nodes: dict[str, list[Gpu]]) -> dict[str, object]:
    """DeviceClasses (the driver's gpu.nvidia.com and mig.nvidia.com, and one per MIG profile of the
    layout, as a site adds for the bridge: docs/gpus.md) and one ResourceSlice per node."""
    items: list[dict[str, object]] = []
    attr = f'device.attributes["{DRIVER}"]'
    classes = {"gpu.nvidia.com": f'device.driver == "{DRIVER}" && {attr}.type == "gpu"',
               "mig.nvidia.com": f'device.driver == "{DRIVER}" && {attr}.type == "mig"'}  # fmt: skip
    if any(g.shards for gpus in nodes.values() for g in gpus):
        shareable = f'"shards" in device.capacity["{DRIVER}"]'
        classes["shard.nvidia.com"] = f'device.driver == "{DRIVER}" && {attr}.type == "gpu" && {shareable}'

    for gpus in nodes.values():
        for g in gpus:
            for m in g.migs:
                classes[f"mig-{m.profile}.nvidia.com"] = (
                    f'device.driver == "{DRIVER}" && {attr}.type == "mig" && {attr}.profile == "{m.profile}"'
                )
    for name, cel in sorted(classes.items()):
        items.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
                      "spec": {"selectors": [{"cel": {"expression": cel}}]}})  # fmt: skip
    for node, gpus in nodes.items():
        items.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}", "labels": {"app.kubernetes.io/managed-by": "hack-cluster-gpus"}},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [d for g in gpus for d in devices(g)]},
        })  # fmt: skip
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str]) -> None:
    nodes = layout(os.environ.get("SB_HYBRID_GPUS", ""))
    match argv:
        case ["gres", node]:
            print(gres(nodes.get(node, [])))
        case ["gres-conf"]:
            print("\n".join(gres_conf(nodes)))
        case ["device-files", root]:
            device_files(root, nodes)
        case ["manifests"]:
            json.dump(manifests(nodes), sys.stdout, indent=1)
        case _:
            raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
