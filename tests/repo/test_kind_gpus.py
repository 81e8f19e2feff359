"""The kind workers' GPUs (docs/gpus.md#gpus-on-the-kind-workers), without a cluster: one layout
(SB_KIND_GPUS) gives slurm.conf's Gres=, gres.conf, slurmd's device files and the test DRA plugin's
input, and they agree device by device (tests/kind/test_gpus.py checks them on a running cluster)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.harness import REPO
from tests.repo.test_cluster_config import lines, slurm_conf

HACK = REPO / "hack"
LAYOUT = "w1=h100,h100 w2=h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb"


def kind_bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` after hack/lib.sh and hack/kind/common.sh, as hack/kind.sh sources them."""
    return subprocess.run(["bash", "-c", f". {HACK / 'lib.sh'}; . {HACK / 'kind' / 'common.sh'}; {script}"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})  # fmt: skip


def gpu_layout(command: str, layout: str = LAYOUT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SB_KIND_GPUS": layout}
    script = str(HACK / "kind" / "gpu_layout.py")
    return subprocess.run(["python3", "-P", script, command], capture_output=True, text=True, timeout=60, env=env)


def test_the_default_layout_follows_the_clusters_workers() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("SB_KIND_GPUS", "SB_KIND_CLUSTER", "SB_KIND_WORKERS")}
    got = {}
    for workers in ("0", "1", "2", "3"):
        proc = subprocess.run(
            ["bash", "-c", f". {HACK / 'lib.sh'}; . {HACK / 'kind' / 'common.sh'}; echo \"$SB_KIND_GPUS\""],
            capture_output=True, text=True, timeout=60, env={**env, "SB_KIND_WORKERS": workers},
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        got[workers] = proc.stdout.strip()
    whole, mig = "slurm-bridge-worker=h100,h100", "slurm-bridge-worker2=h100:1g.10gb+1g.10gb+1g.10gb+1g.10gb+3g.40gb"
    assert got == {"0": "", "1": whole, "2": f"{whole} {mig}", "3": f"{whole} {mig}"}
    assert kind_bash('echo "$SB_KIND_GPUS"', {"SB_KIND_GPUS": ""}).stdout.strip() == "", "empty means none"


def test_slurm_conf_and_gres_conf_give_the_workers_their_gpus_from_the_one_writer() -> None:
    conf = slurm_conf("workers=w1=10.0.0.1 w2=10.0.0.2 w3=10.0.0.3", f"worker_gpus={LAYOUT}")
    nodes = lines(conf, "NodeName")
    assert nodes["w1"]["Gres"] == "gpu:h100:2" and nodes["w2"]["Gres"] == "gpu:1g.10gb:4,gpu:3g.40gb:1"
    assert "Gres" not in nodes["w3"]
    assert "GresTypes=gpu" in conf
    proc = subprocess.run(["bash", str(HACK / "cluster" / "slurm-conf.sh"), "gres.conf", f"worker_gpus={LAYOUT}"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    records = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    assert records[0] == "NodeName=w1 Name=gpu Type=h100 File=/dev/nvidia0"
    assert [r.split()[0] for r in records] == ["NodeName=w1"] * 2 + ["NodeName=w2"] * 5, "only the workers' GPUs"
    assert records[-1].startswith("NodeName=w2 Name=gpu Type=3g.40gb File=/dev/nvidia-caps/"), records


def test_the_plugins_devices_are_gpus_pys_and_each_names_slurms_device_file_of_its_index() -> None:
    proc = gpu_layout("plugin-layout")
    assert proc.returncode == 0, proc.stderr
    layout: dict[str, Any] = json.loads(proc.stdout)
    assert layout["driver"] == "gpu.nvidia.com"
    conf = subprocess.run(["bash", str(HACK / "cluster" / "slurm-conf.sh"), "gres.conf", f"worker_gpus={LAYOUT}"],
                          capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    for node, entries in layout["nodes"].items():
        files = [ln.split("File=")[1] for ln in conf.splitlines() if ln.startswith(f"NodeName={node} ")]
        assert [e["file"]["path"] for e in entries] == files, f"{node}: the devices in Slurm's index order"
    w1 = layout["nodes"]["w1"]
    assert [e["device"]["name"] for e in w1] == ["gpu-0", "gpu-1"]
    assert w1[1]["file"] == {"path": "/dev/nvidia1", "major": 195, "minor": 1}
    mig = layout["nodes"]["w2"]
    profiles = [e["device"]["attributes"]["profile"]["string"] for e in mig]
    assert profiles == ["1g.10gb"] * 4 + ["3g.40gb"]
    assert all(e["file"]["major"] == 236 and e["file"]["path"].endswith(str(e["file"]["minor"])) for e in mig)
    files = gpu_layout("device-files").stdout.split("\n")
    assert files[0] == "w1 /dev/nvidia0 195 0" and len([f for f in files if f]) == 7
    classes = json.loads(gpu_layout("device-classes").stdout)["items"]
    assert {c["kind"] for c in classes} == {"DeviceClass"}
    assert {c["metadata"]["name"] for c in classes} >= {"gpu.nvidia.com", "mig-1g.10gb.nvidia.com"}


def test_a_wrong_layout_is_refused_naming_the_kind_variable() -> None:
    proc = gpu_layout("plugin-layout", "w1=a100")
    assert proc.returncode != 0 and "SB_KIND_GPUS: GPU type 'a100' of w1" in proc.stderr, proc.stderr
