"""hack/gpu-check.sh's parsing and comparison (docs/gpus.md): what slurmd's GPU autodetection sees,
beside the devices the bridge's DRA mapping gives for the same Slurm indices.

  gpu_check.py count < (nvidia-smi -L)
      how many ``gpu`` GRES Slurm makes of these GPUs: a MIG GPU's instances, else the GPU itself
  gpu_check.py compare SLURMD_OUT SMI_CSV SLICES_JSON NODE [PROC_GPUS_DIR]
      SLURMD_OUT: ``slurmd -G``'s output; SMI_CSV: ``nvidia-smi --query-gpu=index,uuid,name,
      mig.mode.current --format=csv,noheader``; SLICES_JSON: ``kubectl get resourceslices -o json``.
      Prints the DRA mapping's devices by Slurm index and, index by index, whether both name the
      same UUID; exit 1 at the first disagreement. Needs slurm_bridge: the repository's .venv.

Slurm's UUID at an index: a MIG instance's ``UniqueId``; for a whole GPU the UUID of the GPU whose
device minor its ``File=/dev/nvidiaN`` is (``/proc/driver/nvidia/gpus/*/information``), else the
whole GPUs' UUIDs in nvidia-smi's index order. The functions are pure; ``main`` reads the files.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

DRIVER = "gpu.nvidia.com"
_GRES = re.compile(r"\bGres Name=gpu\b(?P<rest>.*)$")


def gres_count(smi_l: str) -> int:
    """``gpu`` GRES count from ``nvidia-smi -L``: each MIG device, and each GPU without any."""
    count = pending = 0  # pending: the last GPU line, not yet followed by a MIG line
    for line in smi_l.splitlines():
        if line.startswith("GPU "):
            count, pending = count + pending, 1
        elif line.strip().startswith("MIG "):
            count, pending = count + 1, 0
    return count + pending


def slurmd_gres(output: str) -> list[dict[str, str]]:
    """The ``Gres Name=gpu ...`` records of ``slurmd -G``, as key -> value."""
    out = []
    for line in output.splitlines():
        m = _GRES.search(line)
        if m:
            out.append(dict(re.findall(r"(\w+)=(\S+)", m["rest"])))
    return out


def minor_uuids(information: Iterable[str]) -> dict[int, str]:
    """Device minor -> GPU UUID, from the driver's ``/proc/driver/nvidia/gpus/*/information`` files."""
    out = {}
    for text in information:
        minor = re.search(r"^Device Minor:\s*(\d+)", text, re.M)
        uuid = re.search(r"^GPU UUID:\s*(\S+)", text, re.M)
        if minor and uuid:
            out[int(minor[1])] = uuid[1]
    return out


def slurm_uuids(records: Sequence[Mapping[str, str]], minors: Mapping[int, str], smi_csv: str) -> dict[int, str]:
    """Slurm index -> the UUID of the device slurmd numbers there ("" when unknown)."""
    rows = [[c.strip() for c in line.split(",")] for line in smi_csv.splitlines() if line.strip()]
    whole = iter([r[1] for r in sorted(rows, key=lambda r: int(r[0])) if len(r) >= 4 and r[3] != "Enabled"])
    out = {}
    for i, rec in enumerate(records):
        index = int(rec["Index"]) if rec.get("Index", "").isdigit() else i
        if rec.get("UniqueId"):
            out[index] = rec["UniqueId"]
            continue
        m = re.search(r"/dev/nvidia(\d+)\b", rec.get("File", ""))
        out[index] = minors.get(int(m[1]), "") if m and minors else next(whole, "")
    return out


def device_uuids(slices: Sequence[Mapping[str, Any]], node: str) -> dict[tuple[str, str], str]:
    """(pool, device name) -> its ``uuid`` attribute, over the driver's slices for ``node``."""
    out = {}
    for s in sorted(slices, key=lambda s: int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0)):
        spec = s.get("spec") or {}
        if spec.get("driver") != DRIVER or spec.get("nodeName") != node:
            continue
        pool = str((spec.get("pool") or {}).get("name") or node)
        for d in spec.get("devices") or []:
            uuid = ((d.get("attributes") or {}).get("uuid") or {}).get("string")
            out[pool, str(d.get("name"))] = str(uuid or "")
    return out


def compare(
    slurm: Mapping[int, str], dra: Mapping[int, Any], uuids: Mapping[tuple[str, str], str], node: str
) -> list[str]:
    """The table and the verdict: one row per Slurm index, the DRA device and both UUIDs."""
    lines = [f"{'index':<6}{'device':<34}{'type':<6}{'profile':<10}{'driver uuid':<42}slurmd uuid"]
    verdict = "views agree"
    for i in sorted(set(slurm) | set(dra)):
        d = dra.get(i)
        theirs = uuids.get((d.pool, d.name), "") if d else ""
        ours = slurm.get(i, "")
        name, kind, profile = (d.name, d.type, d.profile) if d else ("(none)", "", "")
        same = bool(ours) and ours == theirs
        mark = "ok" if same else "MISMATCH"
        lines.append(f"{i:<6}{name:<34}{kind:<6}{profile or '-':<10}{theirs or '-':<42}{ours or '-'}  {mark}")
        if not same and verdict == "views agree":
            verdict = f"views DISAGREE at index {i}: slurmd {ours or 'none'}, driver {theirs or 'none'}"
    if not slurm and not dra:
        verdict = f"views DISAGREE: neither slurmd nor {DRIVER}'s ResourceSlices for node {node} show a GPU"
    return [*lines, verdict]


def main(argv: list[str]) -> int:
    match argv:
        case ["count"]:
            print(gres_count(sys.stdin.read()))
            return 0
        case ["compare", slurmd_out, smi_csv, slices_json, node, *rest]:
            from slurm_bridge.rules.dra.inventory import node_devices

            proc = Path(rest[0] if rest else "/proc/driver/nvidia/gpus")
            info = [p.read_text() for p in sorted(proc.glob("*/information"))] if proc.is_dir() else []
            slices = json.loads(Path(slices_json).read_text()).get("items") or []
            slurm = slurm_uuids(slurmd_gres(Path(slurmd_out).read_text()), minor_uuids(info), Path(smi_csv).read_text())
            lines = compare(slurm, node_devices(slices, DRIVER, node), device_uuids(slices, node), node)
            print("\n".join(lines))
            return 0 if lines[-1] == "views agree" else 1
        case _:
            raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
