"""Pods and workloads -> one Slurm job request, as pure functions.

The parts have homes of their own: the slurmjob annotations in :mod:`slurm_bridge.rules.jobannotations`,
a pod's cpus, memory and GPUs in :mod:`slurm_bridge.rules.podresources`, its required placement in
:mod:`slurm_bridge.rules.nodeplacement`. Here they become one ``JobRequest``: each node sized for the
largest pod, every node suiting every pod, annotations over defaults. Nothing here does I/O:
callers pass pods and workloads as the plain dicts the Kubernetes API returns, and get back values
or errors that name the offending key or pod, so the webhook can reject a manifest with a useful
message and the operator can build a ``JobRequest`` without a second validation path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.rules import nodesharing
from slurm_bridge.rules.dra.admission import device_plugin_problem, plugin_gpu_fields
from slurm_bridge.rules.dra.classes import MIG_CLASS_EXAMPLE, SHARD_GRES
from slurm_bridge.rules.dra.gres import shard_request, typed_gpu_request, untyped_gpu_request
from slurm_bridge.rules.jobannotations import parse_annotations, read_annotations
from slurm_bridge.rules.nodeplacement import Placement, pod_placement
from slurm_bridge.rules.podresources import pod_label, pod_resources
from slurm_bridge.rules.slurmconstraints import check_constraint, combine_constraints
from slurm_bridge.slurm.models import JobRequest

__all__ = [
    "exclude_unfit",
    "job_request",
    "placement_request_problems",
    "time_limit_from_deadline",
]

_CONSTRAINTS_MAX: Final = 1024  # the CRD's maxLength of spec.slurm.constraints


def time_limit_from_deadline(seconds: int) -> int:
    """Slurm minutes for a Kubernetes deadline, rounded up so Slurm never ends the job early.

    Kubernetes only accepts positive deadlines; anything else is a caller bug (a Slurm limit of 0
    would mean "forever", the opposite of what a zero deadline says).
    """
    if isinstance(seconds, bool) or seconds < 1:
        raise ValueError(f"a deadline must be a positive number of seconds, got {seconds!r}")
    return max(1, -(-seconds // 60))


def _common_placement(placements: Iterable[Placement]) -> Placement:
    """Where every pod of one job may run: each node of the job must suit each pod (as each node
    is sized for the largest pod), so the pods' placements are intersected."""
    common = Placement()
    for p in dict.fromkeys(placements):
        common &= p
    if common.impossible:
        raise ValueError(
            "the pods' required node names have no node in common, but one Slurm job holds the nodes of all of "
            "them and each of its nodes must suit every pod; give the pods node selections that overlap"
        )
    return common


def _placement_fields(placement: Placement, *, holds: int | None, constraints: str | None) -> dict[str, object]:
    """required_nodes, excluded_nodes and constraints for ``placement``.

    Slurm allocates *every* node of a required node list, so a list means "one of these" exactly
    when it names as many nodes as the job may hold (``holds``, None when not known yet).
    """
    out: dict[str, object] = {}
    if placement.nodes is not None:
        if holds is not None and len(placement.nodes) != holds:
            listed = ", ".join(sorted(placement.nodes))
            raise ValueError(
                f"the pods' required node names allow {len(placement.nodes)} node(s) ({listed}), but Slurm "
                f"allocates every node of a required node list and this job holds {holds} node(s) (one per pod, "
                f"unless {names.ANN_MIN_NODES} or {names.ANN_MAX_NODES} say more); name exactly {holds} node(s), "
                f"or select nodes by a node feature label ({names.LABEL_NODE_FEATURE_PREFIX}<feature>) instead"
            )
        out["required_nodes"] = sorted(placement.nodes)
    elif placement.excluded:
        out["excluded_nodes"] = sorted(placement.excluded)
    combined = combine_constraints(constraints, placement.constraint())
    if combined is not None and combined != constraints:
        try:
            check_constraint(combined)
        except ValueError as e:
            raise ValueError(
                f"the Slurm constraint {combined!r} built from the pods' node features is not valid: {e}"
            ) from None
        if len(combined) > _CONSTRAINTS_MAX:
            raise ValueError(
                f"the Slurm constraint built from the pods' node features is {len(combined)} characters long "
                f"(at most {_CONSTRAINTS_MAX}); select fewer features"
            )
        out["constraints"] = combined
    return out


def _holds(nodes: object, max_nodes: object) -> int | None:
    """How many nodes the job may hold, None when not known yet."""
    return max_nodes if isinstance(max_nodes, int) else nodes if isinstance(nodes, int) else None


def placement_request_problems(
    placements: Sequence[Placement], annotations: Mapping[str, str], *, pods: int | None
) -> list[str]:
    """Whether pods with these placements (each one expressible) fit one Slurm job, for admission.

    The placements must intersect, combine with the constraints annotation and, when the group's
    pod count is known (``pods``; None for a gang), name as many nodes as the job holds. Invalid
    annotations are left to :func:`~slurm_bridge.rules.jobannotations.validate_annotations` and give no
    problem here.
    """
    values, errors = read_annotations(annotations)
    if errors or not placements:
        return []
    holds = None if pods is None else _holds(values.get("nodes", pods), values.get("max_nodes"))
    constraints = values.get("constraints")
    try:
        common = _common_placement(placements)
        _placement_fields(common, holds=holds, constraints=constraints if isinstance(constraints, str) else None)
    except ValueError as e:
        return [str(e)]
    return []


def _pod_fields(pods: Sequence[Mapping[str, Any]], config: Config) -> dict[str, object]:
    """The bridge's defaults and what the pods' own resources ask for: a node per pod, each sized
    for the largest pod (Slurm gives every node of a job the same per-node request)."""
    need = [pod_resources(p) for p in pods]
    fields: dict[str, object] = {
        "partition": config.partition or None,
        "nodes": len(pods),
        "tasks_per_node": 1,
        "cpus_per_task": max(r.cpus for r in need),
    }
    memory = [r.memory_mib for r in need if r.memory_mib is not None]
    if memory:
        fields["memory_per_node_mib"] = max(memory)
    gres = gpu_gres([r.gpus for r in need])
    if gres:
        fields["gres"] = gres
    return fields


def gpu_gres(per_pod: Sequence[Mapping[str, int]]) -> str:
    """The job's GPU TRES per node, for the largest pod of each kind: ``gres/gpu:N`` for whole GPUs
    (device plugin or DRA), ``gres/gpu:<profile>:N`` per MIG profile (``dra/gpu:1g.10gb``), typed
    ones in name order after the untyped; then ``gres/shard:N`` for GPU shares (``dra/shard``)."""
    need: dict[str, int] = {}
    shards = 0
    for gpus in per_pod:
        kinds: dict[str, int] = {}
        for key, count in gpus.items():
            if key == f"dra/{SHARD_GRES}":
                shards = max(shards, count)
                continue
            _, _, typed = key.removeprefix("dra/").partition(":") if key.startswith("dra/") else ("", "", "")
            kinds[typed] = kinds.get(typed, 0) + count
        for typed, count in kinds.items():
            need[typed] = max(need.get(typed, 0), count)
    items = [f"gres/gpu:{t + ':' if t else ''}{n}" for t, n in sorted(need.items()) if n]
    return ",".join(items + ([f"gres/{SHARD_GRES}:{shards}"] if shards else []))


def _sharing_fields(
    pods: Sequence[Mapping[str, Any]], config: Config, from_annotations: Mapping[str, object]
) -> dict[str, object]:
    """The job's node sharing (nodesharing.sharing_mode) and its MCS label, which only a
    time-shared job carries; a coResident job's pods must have the limits it is sized from."""
    mode = nodesharing.sharing_mode(config.nodeSharing, from_annotations)
    if mode == names.NODE_SHARING_CO_RESIDENT:
        problems = nodesharing.annotation_problems(from_annotations, mode)
        for p in pods:
            meta = objects.meta(p)
            found = nodesharing.limit_problems(p.get("spec") or {}, meta.get("annotations") or {})
            problems += [f"{pod_label(p)}: {f}" for f in found]
        if problems:
            raise ValueError("; ".join(problems))
    return {
        "node_sharing": mode,
        "exclusive": None,  # the mode says it
        "mcs_label": config.mcsLabel if mode == names.NODE_SHARING_TIME_SHARED else None,
    }


def _pods_placement(pods: Sequence[Mapping[str, Any]]) -> Placement:
    """What every node of the job must satisfy; a placement Slurm cannot honour names its pod."""
    placements: list[Placement] = []
    for p in pods:
        try:
            placements.append(pod_placement(p.get("spec") or {}))
        except ValueError as e:
            raise ValueError(f"{pod_label(p)}: {e}") from None
    return _common_placement(placements)


def _check_derived(derived: Mapping[str, object]) -> None:
    """A derived value that names no field is a caller bug, not something to drop in silence."""
    unknown = sorted(set(derived) - set(JobRequest.model_fields))
    if unknown:
        raise ValueError(f"derived values name no JobRequest field: {', '.join(unknown)}")


def _check_node_counts(fields: Mapping[str, object], pods: int, from_annotations: Mapping[str, object]) -> None:
    """Each pod needs a node of its own, and max_nodes cannot be below the node count."""
    nodes = fields["nodes"]
    if isinstance(nodes, int) and nodes < pods:
        source = names.ANN_MIN_NODES if "nodes" in from_annotations else "the derived node count"
        raise ValueError(
            f"{source} ({nodes}) is below the number of pods ({pods}): each pod needs a node of its "
            f"own, so a group of {pods} pods needs at least {pods} nodes"
        )
    max_nodes = fields.get("max_nodes")
    if isinstance(max_nodes, int) and isinstance(nodes, int) and max_nodes < nodes:
        source = names.ANN_MAX_NODES if "max_nodes" in from_annotations else "the derived max_nodes"
        raise ValueError(f"{source} ({max_nodes}) is below the node count ({nodes}) this job needs")


def _check_topology(fields: Mapping[str, object]) -> None:
    """A topology job is one segment of exactly its node count (Slurm's ``--segment``), so its
    node count cannot be a range."""
    nodes, max_nodes = fields.get("nodes"), fields.get("max_nodes")
    if fields.get("topology") and max_nodes is not None and max_nodes != nodes:
        raise ValueError(
            f"{names.ANN_MAX_NODES} ({max_nodes}) beside a topology constraint: a gang placed within one "
            f"{fields['topology']} unit is one segment of exactly its {nodes} nodes; remove {names.ANN_MAX_NODES}"
        )


def job_request(
    pods: Sequence[Mapping[str, Any]],
    *,
    config: Config,
    derived: Mapping[str, object] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JobRequest:
    """One Slurm job that holds a node for each pod of a group (a gang, or a single pod).

    Precedence, lowest first: bridge defaults and the pods' own resources < ``derived`` (values
    the caller took from the workload, e.g. a Job's deadline) < ``annotations`` (the root
    workload's; a bare pod passes its own). Each node is sized for the largest pod because Slurm
    gives every node of a job the same per-node request; likewise every node must suit every
    pod's required placement (nodeSelector, node affinity), which is ANDed with the constraints
    annotation. The node sharing comes from the annotations or the config (slurm_bridge/rules/nodesharing.py).
    Raises ValueError for invalid annotations, a node count that cannot hold every pod, a placement
    Slurm cannot honour, or a coResident job whose pods lack the limits it is sized from.
    """
    if not pods:
        raise ValueError("a Slurm job needs at least one pod")
    fields = _pod_fields(pods, config)
    placement = _pods_placement(pods)
    if derived:
        _check_derived(derived)
        fields.update(derived)
    from_annotations = parse_annotations(annotations) if annotations else {}
    fields.update(from_annotations)
    fields.update(_sharing_fields(pods, config, from_annotations))
    _check_node_counts(fields, len(pods), from_annotations)
    _check_topology(fields)
    _check_plugin_gpus(pods, fields.get("partition"), config)
    constraints = fields.get("constraints")
    holds = _holds(fields["nodes"], fields.get("max_nodes"))
    fields.update(
        _placement_fields(placement, holds=holds, constraints=constraints if isinstance(constraints, str) else None)
    )
    return JobRequest.model_validate(fields)


def _check_plugin_gpus(pods: Sequence[Mapping[str, Any]], partition: object, config: Config) -> None:
    """Device-plugin GPUs in a partition of hybrid nodes (device_plugin_problem): the operator's
    last word, for the pods whose partition the webhook could not know (a workload member's)."""
    fields = [f"{pod_label(p)}: {f}" for p in pods for f in plugin_gpu_fields(p.get("spec") or {})]
    where = partition if isinstance(partition, str) else None
    problem = device_plugin_problem(fields, where, config.hybridPartitions, config.devicePluginFollowsSlurm)
    if problem:
        raise ValueError(problem)


def exclude_unfit(request: JobRequest, unfit: Iterable[str]) -> JobRequest:
    """The request as submitted: without the Slurm nodes whose ``SlurmResourcesFit`` is False
    (``unfit``: a kubelet that offers less than Slurm counts, operator/nodes/resourcesfit.py), where
    kube-scheduler would refuse the pod Slurm placed, so the job would hold its cores for ever.

    Added to ``excluded_nodes`` (sbatch's ``--exclude``) at each submit, never to the
    PlaceholderJob's spec: the condition changes with the nodes. Raises ValueError, naming the
    nodes and what to do, when the job *requires* such a node (Slurm allocates every node of a
    required list): the submit is then refused before Slurm sees it, and tried again later.
    """
    bad = set(unfit)
    if not bad:
        return request
    if request.required_nodes:
        blocked = sorted(bad.intersection(request.required_nodes))
        if blocked:
            listed = ", ".join(blocked)
            raise ValueError(
                f"{names.REASON_NODES_DO_NOT_FIT}: the job requires node(s) {listed}, whose kubelet offers less than "
                f"Slurm counts (node condition {names.NODE_COND_SLURM_RESOURCES_FIT}=False; kubectl describe node "
                f"{blocked[0]}): kube-scheduler could not bind a pod Slurm placed there, so the job is not "
                "submitted (tried again while the pod waits); fix the node's size in slurm.conf or its kubelet's "
                "allocatable, or select other nodes"
            )
        return request  # every node is named: nothing else could be allocated
    excluded = sorted(bad.union(request.excluded_nodes or ()))
    return request.model_copy(update={"excluded_nodes": excluded})


def exclude_mig_nodes(request: JobRequest, mig_nodes: Iterable[str], mismatched: Iterable[str] = ()) -> JobRequest:
    """The request as submitted (docs/gpus.md): a job asking for untyped GPUs (``gres/gpu:N``)
    without the nodes that have MIG instances among their GPUs (``mig_nodes``: :func:`mig_node`
    of each Slurm node's Gres), where Slurm would meet it with MIG slices; a job asking for MIG
    slices (``gres/gpu:<profile>:N``) without the nodes whose ``SlurmDevicesMatch`` is False
    (``mismatched``: Slurm's indices there no longer name the driver's devices). Like
    :func:`exclude_unfit`, at each submit, never in the spec; ValueError, naming the nodes, when
    the job requires one."""
    bad: set[str] = set()
    if untyped_gpu_request(request.gres):
        bad |= set(mig_nodes)
        why = (
            f"the job asks for whole GPUs ({request.gres}) and requires node(s) {{nodes}}, whose GPUs are MIG "
            f"instances: Slurm would give it MIG slices; ask for a MIG profile ({MIG_CLASS_EXAMPLE}) or "
            "select nodes with whole GPUs"
        )
    if typed_gpu_request(request.gres) or shard_request(request.gres):
        bad |= set(mismatched)
        why = (
            f"the job asks for MIG slices or GPU shards ({request.gres}) and requires node(s) {{nodes}}, whose GPU "
            "layout in Slurm and in the DRA driver's ResourceSlices differ (node condition "
            f"{names.NODE_COND_SLURM_DEVICES_MATCH}=False): not submitted until they agree (tried again while the "
            "pod waits)"
        )
    if not bad:
        return request
    if request.required_nodes:
        blocked = sorted(bad.intersection(request.required_nodes))
        if blocked:
            raise ValueError(why.format(nodes=", ".join(blocked)))
        return request
    excluded = sorted(bad.union(request.excluded_nodes or ()))
    return request.model_copy(update={"excluded_nodes": excluded})
