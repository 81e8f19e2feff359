"""Where the bench's scripts find the cluster and the deployed release: the environment
``hack/cluster.sh env`` and ``hack/deploy.sh env`` print. Its own module so that the scripts that
need it (``pipeline_latency``, ``bridge_resources`` and the rest) import it without importing
each other."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cluster_env() -> dict[str, str]:
    out = subprocess.run(["bash", str(REPO / "hack" / "cluster.sh"), "env"], check=True, capture_output=True, text=True)
    env = {}
    for line in out.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v.strip('"')
    return env


def deploy_env() -> dict[str, str]:
    out = subprocess.run(["bash", str(REPO / "hack" / "deploy.sh"), "env"], check=True, capture_output=True, text=True)
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
