"""The kind workers' GPUs (docs/gpus.md#gpus-on-the-kind-workers): hack/cluster/gpus.py's layout and
devices, in the forms the kind cluster's parts read.

The layout is ``SB_KIND_GPUS`` (hack/kind/common.sh), in gpus.py's format (``NODE=GPU[,GPU...]``).
gpus.py stays the one source of the device shapes: slurm.conf's ``Gres=`` and gres.conf come from
it directly (hack/cluster/slurm-conf.sh, with ``SB_HYBRID_GPUS`` set to this layout); this script
gives what only kind needs:

  gpu_layout.py plugin-layout     the test DRA plugin's input (hack/kind/dra-plugin): per node, each
                                  device exactly as gpus.py publishes it and the device file Slurm's
                                  gres.conf names for it (path, major, minor), as JSON
  gpu_layout.py device-classes    gpus.py's DeviceClasses only, as a JSON List (the plugin publishes
                                  the ResourceSlices itself)
  gpu_layout.py device-files      "NODE PATH MAJOR MINOR" per gres.conf device file, for slurmd's
                                  container (hack/kind/slurm-image/sb-slurm makes them there)
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def _gpus() -> ModuleType:
    """hack/cluster/gpus.py (a script, not a package)."""
    path = Path(__file__).resolve().parents[1] / "cluster" / "gpus.py"
    spec = importlib.util.spec_from_file_location("hack_cluster_gpus", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _nodes(gpus: ModuleType) -> dict[str, Any]:
    text = os.environ.get("SB_KIND_GPUS", "")
    try:
        nodes: dict[str, Any] = gpus.layout(text)
    except SystemExit as e:  # gpus.py names its own variable
        raise SystemExit(str(e).replace("SB_HYBRID_GPUS", "SB_KIND_GPUS")) from None
    return nodes


def plugin_layout(gpus: ModuleType, nodes: dict[str, Any]) -> dict[str, Any]:
    """Per node, gpus.py's devices (one per whole GPU, one per MIG instance) beside the gres.conf
    record of the same GPU or instance: both lists go in Slurm's index order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for node, node_gpus in nodes.items():
        entries = out.setdefault(node, [])
        for g in node_gpus:
            devices, records = gpus.devices(g), g.records()
            if len(devices) != len(records):
                raise SystemExit(f"gpus.py gives {node}'s GPU {g.index} {len(devices)} devices, {len(records)} records")
            for device, (_, path, major, minor) in zip(devices, records, strict=True):
                entries.append({"device": device, "file": {"path": path, "major": major, "minor": minor}})
    return {"driver": gpus.DRIVER, "nodes": out}


def device_classes(gpus: ModuleType, nodes: dict[str, Any]) -> dict[str, Any]:
    listed: dict[str, Any] = gpus.manifests(nodes)
    return {**listed, "items": [i for i in listed["items"] if i["kind"] == "DeviceClass"]}


def device_files(nodes: dict[str, Any]) -> list[str]:
    return [
        f"{node} {path} {major} {minor}"
        for node, node_gpus in nodes.items()
        for g in node_gpus
        for _, path, major, minor in g.records()
    ]


def main(argv: list[str]) -> None:
    gpus = _gpus()
    nodes = _nodes(gpus)
    match argv:
        case ["plugin-layout"]:
            json.dump(plugin_layout(gpus, nodes), sys.stdout, indent=1)
        case ["device-classes"]:
            json.dump(device_classes(gpus, nodes), sys.stdout, indent=1)
        case ["device-files"]:
            print("\n".join(device_files(nodes)))
        case _:
            raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
