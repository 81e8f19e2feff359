"""Where the bench's scripts find the cluster and the deployed release: the environment
``hack/cluster.sh env`` and ``hack/deploy.sh env`` print. Its own module so that the scripts that
need it (``pipeline_latency``, ``bridge_resources`` and the rest) import it without importing
each other."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slurm_bridge.webhook.nodeguard import NAME_SUFFIX

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


def node_guards(policy_names: list[str]) -> list[str]:
    """The bridge's node-guard policies among a cluster's ValidatingAdmissionPolicies."""
    return [n for n in policy_names if n.endswith(NAME_SUFFIX)]


def refuse_node_guard(policy_names: list[str]) -> None:
    """A benchmark whose default-scheduler baseline runs on the bridge's nodes stops here when the
    node guard would refuse that baseline's pods: it says what to run instead, rather than failing
    mid-run on the first refused create."""
    found = node_guards(policy_names)
    if found:
        raise SystemExit(
            f"the node guard ({', '.join(found)}) refuses the default-scheduler baseline's pods on the bridge's "
            "nodes (they tolerate slinky.slurm.net/managed-node): run the benchmark against a bridge started "
            "with `SB_NODE_GUARD=false bash hack/bridge.sh up` (docs/performance.md)"
        )
