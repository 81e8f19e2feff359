"""hack/gpu-check.sh (docs/gpus.md): without a GPU it says so and exits 0; its helper
(hack/cluster/gpu_check.py) sets slurmd's view beside the bridge's DRA mapping, UUID by UUID."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "gpu-check.sh"
NO_GPU = "no NVIDIA GPU on this machine"


def _module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"hack_cluster_{name}", REPO / "hack" / "cluster" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gpu_check = _module("gpu_check")
gpus = _module("gpus")


def _path_without_nvidia_smi(tmp_path: Path) -> str:
    """A PATH of one folder: links to every command of this PATH but nvidia-smi."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.listdir(folder):
            target = bin_dir / entry
            if entry != "nvidia-smi" and not target.exists() and os.access(os.path.join(folder, entry), os.X_OK):
                target.symlink_to(os.path.join(folder, entry))
    return str(bin_dir)


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": _path_without_nvidia_smi(tmp_path)}
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    if os.path.exists("/dev/nvidia0"):
        assert NO_GPU not in proc.stdout, proc.stdout
        return
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        f"hack/gpu-check.sh: {NO_GPU} (no /dev/nvidia0, no nvidia-smi): nothing to check; "
        "the project builds and passes its tests without one (docs/gpus.md)"
    )


def test_help_and_a_wrong_argument() -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: hack/gpu-check.sh"), proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "--nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "unknown argument '--nope'" in proc.stderr


def test_slurm_counts_a_mig_gpu_by_its_instances() -> None:
    smi_l = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n"
        "  MIG 1g.10gb     Device  0: (UUID: MIG-c)\n"
        "  MIG 3g.40gb     Device  1: (UUID: MIG-d)\n"
        "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-e)\n"
    )
    assert gpu_check.gres_count(smi_l) == 4
    assert gpu_check.gres_count("") == 0


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], swap: bool) -> tuple[int, list[str]]:
    """slurmd -G's records for node n3 (a whole GPU, then a MIG GPU's two instances), as AutoDetect
    prints them, against the local cluster's ResourceSlices of the same GPUs (hack/cluster/gpus.py)."""
    whole, mig = gpus.layout("n3=h100,h100:1g.10gb+3g.40gb")["n3"]
    uuids = [mig.mig_uuid(m) for m in mig.migs]
    if swap:
        uuids.reverse()
    slurmd = ["[t] Gres Name=gpu Type=h100 Count=1 Index=0 ID=1 File=/dev/nvidia0 Links=-1,0 Flags=HAS_FILE"]
    slurmd += [
        f"[t] Gres Name=gpu Type=h100_{m.profile} Count=1 Index={1 + i} ID=1 "
        f"File=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap{20 + i} UniqueId={u} Flags=HAS_FILE"
        for i, (m, u) in enumerate(zip(mig.migs, uuids, strict=True))
    ]
    (tmp_path / "proc" / "0000:01:00.0").mkdir(parents=True)
    (tmp_path / "proc" / "0000:01:00.0" / "information").write_text(f"Device Minor: \t 0\nGPU UUID: \t {whole.uuid}\n")
    files = {
        "slurmd.out": "\n".join(slurmd) + "\n",
        "smi.csv": f"0, {whole.uuid}, NVIDIA H100, Disabled\n1, {mig.uuid}, NVIDIA H100, Enabled\n",
        "slices.json": json.dumps(gpus.manifests({"n3": [whole, mig]})),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    args = [str(tmp_path / n) for n in files]
    rc = gpu_check.main(["compare", *args, "n3", str(tmp_path / "proc")])
    return rc, capsys.readouterr().out.splitlines()


def test_both_views_agree_on_the_local_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _check(tmp_path, capsys, swap=False)
    assert (rc, lines[-1]) == (0, "views agree"), lines
    assert [line.split()[:2] for line in lines[1:-1]] == [
        ["0", "gpu-0"],
        ["1", "gpu-1-mig-1g10gb-0"],
        ["2", "gpu-1-mig-3g40gb-1"],
    ]


def test_a_different_order_is_named_by_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _check(tmp_path, capsys, swap=True)
    mig = gpus.layout("n3=h100,h100:1g.10gb+3g.40gb")["n3"][1]
    first, second = (mig.mig_uuid(m) for m in mig.migs)
    assert rc == 1
    assert lines[-1] == f"views DISAGREE at index 1: slurmd {second}, driver {first}"
