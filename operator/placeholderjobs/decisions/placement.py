"""Where a new job may go, decided before anything reaches Slurm (pure): a gang placed by a topology
only where one unit of it holds the gang (docs/workloads.md#topology), and every job without the
nodes kube-scheduler would refuse its pods on or where its GPUs would be the wrong kind
(docs/gpus.md, docs/colocation.md). The shell (sync/phjsync.py) reads what this needs: the node
controller's sets and table (views.slurmnodes.NodeView) and each named partition's ``Topology=``,
once per partition; this returns the submit to send or the refusal's words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.decisions.plan import Submit
from slurm_bridge.rules import topology
from slurm_bridge.rules.dra.gres import typed_gpu_request, untyped_gpu_request
from slurm_bridge.rules.translate import exclude_mig_nodes, exclude_unfit
from slurm_bridge.slurm.models import JobRequest, NodeInfo

NODES_NOT_READ = "Slurm's node list is not read yet, so where the topology's units are is not known; tried again"


@dataclass(frozen=True)
class NodeSets:
    """The Slurm nodes a new job is submitted without, as the node controller knows them: ``unfit``
    (``SlurmResourcesFit=False``), ``mig`` (MIG instances among their GPUs: no whole GPU from
    them), ``mismatched`` (``SlurmDevicesMatch=False``: no MIG slice or shard from them)."""

    unfit: frozenset[str] = frozenset()
    mig: frozenset[str] = frozenset()
    mismatched: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Refusal:
    """The submit is not sent: ``words`` say why (the status's message, the pods' Event)."""

    words: str


def placed_by_topology(action: Submit) -> tuple[JobRequest, ...]:
    """The requests a topology places (each component's, for a heterogeneous job)."""
    return tuple(r for r in (action.components or (action.request,)) if r.topology)


def partitions_to_read(placed: tuple[JobRequest, ...]) -> tuple[str, ...]:
    """The partitions whose ``Topology=`` :func:`topology_problem` needs, each once, in order; none
    when a request names no partition (it is refused without a read)."""
    if any(not r.partition for r in placed):
        return ()
    return tuple(dict.fromkeys(p for r in placed for p in (r.partition or "").split(",")))


def partition_unread(error: str) -> Refusal:
    """Slurm answered, but not with the partition (a permission, say): said, and tried again."""
    return Refusal(f"not submitted: its partition could not be read: {error}")


def topology_problem(
    placed: tuple[JobRequest, ...], nodes: Mapping[str, NodeInfo] | None, topologies: Mapping[str, str | None]
) -> str | None:
    """Why a request placed by a topology cannot be honoured where it would go
    (``topology.placement_problem``): Slurm's nodes not read yet, no partition named (Slurm's
    default one may place by another topology), its partition places jobs by another topology, or
    no unit there holds it. ``topologies``: each partition of :func:`partitions_to_read`, read."""
    if not placed:
        return None
    if nodes is None:
        return NODES_NOT_READ
    for request in placed:
        assert request.topology is not None
        if not request.partition:
            return (
                f"{names.LABEL_TOPOLOGY_PREFIX}{request.topology}: the job names no partition, and Slurm's default "
                f"one may place by another topology; name a partition with Topology={request.topology} "
                f"({names.ANN_PARTITION})"
            )
        for partition in request.partition.split(","):
            sizes = topology.unit_sizes(nodes.values(), partition, request.topology)
            found = topology.placement_problem(request.topology, request.nodes, partition, topologies[partition], sizes)
            if found:
                return found
    return None


def without_nodes(action: Submit, sets: NodeSets) -> Submit:
    """The submit without the unfit nodes (``translate.exclude_unfit``) and, for GPUs, without the
    nodes where they would be MIG slices or Slurm's and the driver's MIG layouts differ
    (``translate.exclude_mig_nodes``), for each component of a heterogeneous job too. Raises
    ValueError, naming the nodes, when a request requires one."""
    if not sets.unfit and not sets.mig and not sets.mismatched:
        return action

    def submitted(request: JobRequest) -> JobRequest:
        return exclude_mig_nodes(exclude_unfit(request, sets.unfit), sets.mig, sets.mismatched)

    return replace(action, request=submitted(action.request), components=tuple(submitted(c) for c in action.components))


def decide(
    action: Submit, sets: NodeSets, nodes: Mapping[str, NodeInfo] | None, topologies: Mapping[str, str | None]
) -> Submit | Refusal:
    """The submit to send, or why nothing is sent: the topology's check first, then the nodes left out."""
    problem = topology_problem(placed_by_topology(action), nodes, topologies)
    if problem is not None:  # Slurm would spread it, or place it by another topology
        return Refusal(f"not submitted: {problem}")
    try:
        return without_nodes(action, sets)
    except ValueError as e:  # it requires a node kube-scheduler would refuse
        return Refusal(str(e))


def left_out(asked: JobRequest, sent: JobRequest, sets: NodeSets) -> str:
    """What Slurm's refusal's message adds when the bridge submitted the job without some nodes:
    which, and why (the job may fit only there: then it is refused until they are in reach again)."""
    dropped = sorted(set(sent.excluded_nodes or ()) - set(asked.excluded_nodes or ()))
    if not dropped:
        return ""
    mig = sets.mig if untyped_gpu_request(sent.gres) else frozenset()
    mismatched = sets.mismatched if typed_gpu_request(sent.gres) else frozenset()

    def why(node: str) -> str:
        if node in mig:
            return "whose GPUs are MIG instances"
        if node in mismatched:
            return f"{names.NODE_COND_SLURM_DEVICES_MATCH}=False"
        return f"{names.NODE_COND_SLURM_RESOURCES_FIT}=False"

    listed = ", ".join(f"{n} ({why(n)})" for n in dropped)
    return f"; submitted without node(s) {listed} (docs/gpus.md, docs/colocation.md): tried again while the pod waits"
