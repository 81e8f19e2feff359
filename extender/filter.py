"""The extender's decision, as a pure function: only the node Slurm allocated to the pod passes."""

from __future__ import annotations

from typing import Any

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.extender.protocol import ExtenderArgs, ExtenderFilterResult, NodeList


def _node_name(node: dict[str, Any]) -> str:
    return objects.name(node) or ""


def filter_nodes(args: ExtenderArgs, *, managed: bool = True, why: str = "") -> ExtenderFilterResult:
    """Keep the allocated node; every other candidate fails with a reason the scheduler reports.

    A pod without an allocation fails on every node as *unresolvable*: no amount of preemption
    on the Kubernetes side can help until Slurm allocates. So does a pod of a namespace the bridge
    does not manage (``managed`` False, ``why`` the message; slurm_bridge/rules/namespaces.py): the
    webhook never checked it, so even a node annotation its author wrote is not honoured.
    """
    annotations = objects.annotations(args.Pod)
    allocated = annotations.get(names.ANN_SLURM_NODE, "")
    candidates = [_node_name(n) for n in args.Nodes.items] if args.Nodes else list(args.NodeNames or [])
    if not managed:
        return _result(args, [], {}, dict.fromkeys(candidates, why or "the pod's namespace is not managed"))
    if not allocated:
        msg = "waiting for Slurm to allocate a node (see the pod's PlaceholderJob)"
        return _result(args, [], {}, dict.fromkeys(candidates, msg))
    keep = [n for n in candidates if n == allocated]
    failed = {n: f"Slurm allocated node {allocated} to this pod" for n in candidates if n != allocated}
    return _result(args, keep, failed, {})


def _result(
    args: ExtenderArgs, keep: list[str], failed: dict[str, str], unresolvable: dict[str, str]
) -> ExtenderFilterResult:
    if args.Nodes is not None:
        nodes = [n for n in args.Nodes.items if _node_name(n) in keep]
        return ExtenderFilterResult(
            Nodes=NodeList(items=nodes), FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable
        )
    return ExtenderFilterResult(NodeNames=keep, FailedNodes=failed, FailedAndUnresolvableNodes=unresolvable)
