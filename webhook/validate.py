"""Pod and workload validation.

Five rules: the labels and annotations through which the bridge records a pod's Slurm allocation
are only written by the bridge itself (a user copying them would make the bridge believe a pod
was allocated); ``slurmjob.slinky.slurm.net/*`` annotations must parse, so a typo is reported at
``kubectl apply`` instead of as a Slurm submission error later; a managed pod's placement
(nodeSelector, affinity, topology spread) must be one Slurm can honour (slurm_bridge/rules/nodeplacement.py),
because Slurm chooses its node and anything else would be ignored or leave the pod Pending; and a
built-in PodGroup, a Workload's PodGroup template or a Job's ``spec.scheduling`` must not ask for
what Slurm cannot give a gang it places: claims the group shares, topology constraints
(slurm_bridge/kube/schedulingapi.py, docs/workloads.md); and node sharing (webhook/sharing.py).
Slurm's devices reach a pod only through the bridge's claim (webhook/devicedoors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.kube import schedulingapi
from slurm_bridge.rules import tenancy, workloadkinds
from slurm_bridge.rules.dra.admission import (
    consistency_problems,
    device_plugin_problem,
    device_requests,
    plugin_gpu_fields,
)
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX, SHARD_CAPACITY, device_class
from slurm_bridge.rules.dra.inventory import largest_request
from slurm_bridge.rules.dra.recorded import recorded_requests
from slurm_bridge.rules.handoff import grace_problems
from slurm_bridge.rules.jobannotations import annotation_values, validate_annotations
from slurm_bridge.rules.nodeplacement import Placement, parse_placement
from slurm_bridge.rules.translate import job_request, placement_request_problems
from slurm_bridge.rules.workloadkinds import controller_of, scheduling_group_name, slurmjob_annotations
from slurm_bridge.slurm.models import JobRequest

from . import devicedoors, sharing
from .changes import pod_change_problems, workload_change_warnings
from .mutate import goes_to_bridge
from .resize import resize_problems
from .review import AdmissionRequest, Decision
from .templates import pod_templates, spec_of

_ONLY_BRIDGE: Final = "only slurm-bridge itself sets it"
# Pod spec fields that say where a pod may run (docs/annotations.md, "Placement").
PLACEMENT_FIELDS: Final = ("nodeSelector", "affinity", "topologySpreadConstraints")
# The labels and annotations of an object or pod template.
Meta = tuple[dict[str, str], dict[str, str]]


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _metadata(obj: Mapping[str, Any] | None) -> Meta | None:
    """(labels, annotations) of an object or pod template, None if there is no such object."""
    if not isinstance(obj, Mapping):
        return None
    return _str_map(objects.labels(obj)), _str_map(objects.annotations(obj))


def reserved_key_violations(
    new: Mapping[str, str],
    old: Mapping[str, str] | None,
    reserved: frozenset[str],
    what: str,
    where: str = "",
) -> list[str]:
    """Reserved keys set on create (``old`` is None) or added, changed or removed on update."""
    problems = []
    for key in sorted(reserved):
        before = None if old is None else old.get(key)
        after = new.get(key)
        if before == after:
            continue
        if old is None:
            problem = f"{what} {key}={after!r} is reserved ({_ONLY_BRIDGE}); remove it"
        elif before is None:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be added (value {after!r})"
        elif after is None:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be removed (value {before!r})"
        else:
            problem = f"{what} {key} is reserved ({_ONLY_BRIDGE}); it may not be changed from {before!r} to {after!r}"
        problems.append(where + problem)
    return problems


def annotation_problems(new: Mapping[str, str], old: Mapping[str, str] | None, where: str = "") -> list[str]:
    """Errors in the slurmjob annotations, checked on create and whenever they change."""
    ours = slurmjob_annotations(new)
    if old is not None and ours == slurmjob_annotations(old):
        return []
    if not ours:
        return []
    return [where + str(e) for e in validate_annotations(ours)]


def _check_pod_meta(
    new: Meta,
    old: Meta | None,
    trusted: bool,
    where: str = "",
) -> tuple[list[str], list[str]]:
    """(reserved-key problems, annotation problems) for one pod or pod template."""
    reserved: list[str] = []
    if not trusted:
        reserved += reserved_key_violations(
            new[0], None if old is None else old[0], names.RESERVED_POD_LABELS, "label", where
        )
        reserved += reserved_key_violations(
            new[1], None if old is None else old[1], names.RESERVED_POD_ANNOTATIONS, "annotation", where
        )
    invalid = annotation_problems(new[1], None if old is None else old[1], where)
    return reserved, invalid


def _placement_of(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(spec.get(k) for k in PLACEMENT_FIELDS)


def _own_group(pod: Mapping[str, Any]) -> bool:
    """A pod that is its own PlaceholderJob, configured by its own annotations
    (operator/placeholderjobs/grouping/groups.py): no controller, no PodGroup label and no built-in PodGroup."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return True
    labels = meta.get("labels") or {}
    if _in_podgroup(spec_of(pod)):
        return False
    return controller_of(pod) is None and not (isinstance(labels, Mapping) and labels.get(names.LABEL_POD_GROUP))


def _in_podgroup(spec: Mapping[str, Any]) -> bool:
    """Whether a pod (template) names a built-in PodGroup: its group, gang size and options (merged
    from the PodGroup, its Job or JobSet and the Workload) are then known only in the operator."""
    return scheduling_group_name(spec) is not None


def placement_check(
    specs: Mapping[str, Mapping[str, Any]], annotations: Mapping[str, str] | None, pods: int | None
) -> list[str]:
    """Placement problems of the pod specs (location -> spec) of one Slurm job.

    Each spec must be expressible on its own; then, when the job's ``annotations`` are known, the
    specs must also fit one job together (their node selections intersect, their features combine
    with the constraints annotation, and with ``pods`` known, a node list names as many nodes as
    the job holds), exactly as ``job_request`` will check in the operator.
    """
    problems: list[str] = []
    placements: list[Placement] = []
    for where, spec in specs.items():
        placement, found = parse_placement(spec, where)
        problems += found
        placements.append(placement)
    if problems or annotations is None or not specs:
        return problems
    together = placement_request_problems(placements, annotations, pods=pods)
    return [f"{', '.join(specs)}: {p}" for p in together]


def _pod_placement(
    pod: Mapping[str, Any], old: Mapping[str, Any] | None, config: Config, annotations_valid: bool
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of a pod's placement: checked on create; a change on update is refused.

    Only the bridge's pods: validation runs after mutation, so they carry its scheduler name. A
    pod that is its own group is checked as its whole Slurm job (with its own annotations); a
    member of a workload only on its own, as its group is known only to the operator.
    """
    spec = spec_of(pod)
    if spec.get("schedulerName") != config.schedulerName:
        return [], []
    own = _own_group(pod)
    annotations = slurmjob_annotations((_metadata(pod) or ({}, {}))[1])
    moved = old is not None and _placement_of(spec) != _placement_of(spec_of(old))
    if old is not None and not moved:
        before = slurmjob_annotations((_metadata(old) or ({}, {}))[1])
        if not own or annotations == before:
            return [], []
    if moved:
        # Kubernetes lets a scheduling-gated pod gain node affinity and nodeSelector entries, but
        # the bridge made the pod's Slurm job from its placement at creation: a change would not
        # reach Slurm, and kube-scheduler would then refuse the node Slurm allocated.
        return [
            "spec.nodeSelector and spec.affinity of a pod the bridge manages cannot change after it was "
            "created: its Slurm job was made from the placement it had then; delete the pod and create it "
            "with the new placement"
        ], []
    problems = placement_check({"spec": spec}, annotations if own and annotations_valid else None, 1)
    return problems, []


def _devices_no_node_has(pod: Mapping[str, Any], config: Config, slices: Sequence[Mapping[str, Any]]) -> list[str]:
    """A bridge pod's DRA request that no node's ResourceSlices could ever hold (its devices come
    from one node): refused, naming the class, rather than left pending for ever (docs/gpus.md).
    A class whose driver publishes nothing at all is not judged."""
    if spec_of(pod).get("schedulerName") != config.schedulerName:
        return []
    try:
        counts = recorded_requests(objects.annotations(pod))
    except ValueError:
        return []  # told by _pod_devices
    problems = []
    for name, count in sorted(counts.items()):
        cls = device_class(name)
        most = largest_request(slices, cls) if cls is not None else None
        if cls is None or most is None or count <= most:
            continue
        where = f"metadata.annotations[{names.ANN_DEVICE_REQUESTS}]"
        if cls.shared:
            problems.append(
                f"{where}: {count} {SHARD_CAPACITY} of DeviceClass {name} asked ({EXTENDED_PREFIX}{name}); "
                f"no GPU has more than {most} (the ResourceSlices of driver {cls.driver}: a GPU that allows several "
                f"allocations, with a {SHARD_CAPACITY!r} capacity; Kubernetes >= 1.36 keeps those fields): a "
                "pod's shards come from one GPU" + (f", so ask for at most {most}" if most else "")
            )
        else:
            problems.append(
                f"{where}: {count} device(s) of DeviceClass {name} asked ({EXTENDED_PREFIX}{name}); no node has "
                f"more than {most} (the ResourceSlices of driver {cls.driver}): a pod's devices come from one node, "
                f"so ask for at most {most}"
            )
    return problems


def _plugin_gpus(pod: Mapping[str, Any], config: Config) -> list[str]:
    """A bridge pod asking a device plugin's GPUs for a job in a partition of hybrid nodes
    (device_plugin_problem), when it is its own job: its partition is its annotation's or the
    config's. A workload member's is its group's, which the operator checks at submit (translate)."""
    if spec_of(pod).get("schedulerName") != config.schedulerName or not _own_group(pod):
        return []
    own = annotation_values(slurmjob_annotations((_metadata(pod) or ({}, {}))[1])).get("partition")
    partition = own if isinstance(own, str) else config.partition or None
    fields = plugin_gpu_fields(spec_of(pod))
    problem = device_plugin_problem(fields, partition, config.hybridPartitions, config.devicePluginFollowsSlurm)
    return [problem] if problem else []


def _template_plugin_gpus(
    managed: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Any],
    annotations: Mapping[str, str],
    config: Config,
) -> list[str]:
    """:func:`_plugin_gpus` for a workload's managed pod templates: the partition is the workload's
    annotation, else the template's, else the config's."""
    problems: list[str] = []
    root = annotation_values(slurmjob_annotations(annotations)).get("partition")
    for where, spec in managed.items():
        meta = (_metadata(templates.get(where[: -len(".spec")])) or ({}, {}))[1]
        partition = root or annotation_values(slurmjob_annotations(meta)).get("partition") or config.partition
        problem = device_plugin_problem(
            plugin_gpu_fields(spec, where),
            partition if isinstance(partition, str) and partition else None,
            config.hybridPartitions,
            config.devicePluginFollowsSlurm,
        )
        problems += [problem] if problem else []
    return problems


def _pod_devices(pod: Mapping[str, Any], old: Mapping[str, Any] | None, config: Config) -> list[str]:
    """DRA requests of a bridge pod (slurm_bridge/rules/dra/admission.py): the mutating webhook turned them into
    the bridge's claim and a request annotation, which must agree and not change afterwards. A pod
    that still requests DRA extended resources missed that rewrite: kube-scheduler would pick its
    devices, not Slurm."""
    spec = spec_of(pod)
    if spec.get("schedulerName") != config.schedulerName:
        return []
    counts, _, problems = device_requests(spec)
    if problems:
        return problems
    if counts:
        return [
            f"spec: DRA requests {sorted(counts)} were not turned into the bridge's device claim by its "
            "mutating webhook (was it unavailable?); create the pod again"
        ]
    if old is not None:
        before = ((_metadata(old) or ({}, {}))[1]).get(names.ANN_DEVICE_REQUESTS)
        after = ((_metadata(pod) or ({}, {}))[1]).get(names.ANN_DEVICE_REQUESTS)
        if before != after:
            return [
                f"metadata.annotations[{names.ANN_DEVICE_REQUESTS}] cannot change: the pod's Slurm job was "
                "made from its device requests at creation; delete the pod and create it again"
            ]
        return []
    return consistency_problems(pod)


class Tenants(Protocol):
    """The webhook's view of the TenantPolicies and namespaces (slurm_bridge/kube/cache.py)."""

    @property
    def synced(self) -> bool: ...

    @property
    def problem(self) -> str: ...

    def index(self) -> tenancy.TenantIndex: ...


def tenancy_problems(
    namespace: str,
    config: Config,
    tenants: Tenants | None,
    asked: Sequence[Mapping[str, str]],
    whole: JobRequest | None = None,
) -> list[str]:
    """Why the namespace's TenantPolicy refuses a managed pod or workload (docs/tenancy.md).

    ``asked``: the slurmjob annotations that configure its jobs (the workload's, its templates',
    or a pod's own). ``whole``: the pod's whole job request when the pod is its own group, so the
    caps on CPUs and GPUs and the default partition are checked here too; otherwise only what the
    annotations ask for is (the operator checks the whole job again before it submits it). No
    annotation at all needs nothing here in open mode: the tenant's defaults apply at submit.
    """
    if tenants is None:
        return []
    annotated = any(slurmjob_annotations(a) for a in asked)
    if not tenants.synced:
        if config.tenancy == "strict" or annotated or whole is not None:
            return [f"the webhook has not read the TenantPolicies yet ({tenants.problem}); try again in a moment"]
        return []
    match = tenants.index().match(namespace)
    if match.conflict:
        return [tenancy.conflict_message(namespace, match.conflict)]
    if match.policy is None:
        if config.tenancy == "strict":
            return [tenancy.no_policy_message(namespace)]
        return _untenanted_problems(config, asked, whole)
    policy = match.policy
    problems: list[tenancy.Violation] = []
    if whole is not None:
        problems += tenancy.check(tenancy.apply_defaults(whole, policy).model_dump(exclude_none=True), policy)
    for ann in asked:
        problems += tenancy.check(annotation_values(slurmjob_annotations(ann)), policy, derived=False)
    return list(dict.fromkeys(str(p) for p in problems))


def _untenanted_problems(config: Config, asked: Sequence[Mapping[str, str]], whole: JobRequest | None) -> list[str]:
    """Open mode, a namespace no policy selects: the operator-only fields its annotations set that
    the config's untenantedOperatorFields does not allow (the bridge's token would make Slurm
    honour them: docs/security.md)."""
    values = [annotation_values(slurmjob_annotations(a)) for a in asked]
    if whole is not None:
        values.append(whole.model_dump(exclude_none=True))
    found = [v for vs in values for v in tenancy.operator_field_violations(vs, config.untenantedOperatorFields, None)]
    return list(dict.fromkeys(tenancy.untenanted_message(v) for v in found))


def _pod_tenancy(
    request: AdmissionRequest, config: Config, tenants: Tenants | None, annotations_valid: bool
) -> list[str]:
    """The TenantPolicy's verdict on a managed pod: on create, and when its slurmjob annotations change."""
    pod = request.object or {}
    if tenants is None or spec_of(pod).get("schedulerName") != config.schedulerName:
        return []
    meta = _metadata(pod) or ({}, {})
    if request.operation == "UPDATE":
        before = slurmjob_annotations((_metadata(request.old_object) or ({}, {}))[1])
        if before == slurmjob_annotations(meta[1]):
            return []
    whole = None
    if _own_group(pod) and annotations_valid:
        try:
            whole = job_request([pod], config=config, annotations=slurmjob_annotations(meta[1]))
        except ValueError:
            whole = None  # reported by the other checks
    return tenancy_problems(request.namespace, config, tenants, [meta[1]], whole)


def workload_api_problems(request: AdmissionRequest, config: Config) -> list[str]:
    """What a built-in PodGroup, a CompositePodGroup, a Workload or a Job's ``spec.scheduling`` asks
    that the bridge cannot give (slurm_bridge/kube/schedulingapi.py). Checked on create: the fields are immutable."""
    if request.operation != "CREATE" or not isinstance(request.object, Mapping):
        return []
    gk, obj = (request.group, request.kind), request.object
    if gk == workloadkinds.SCHED_PODGROUP.group_kind:
        return schedulingapi.group_problems(spec_of(obj), "spec")
    if gk == workloadkinds.COMPOSITE_PODGROUP.group_kind:
        return schedulingapi.composite_problems(spec_of(obj), "spec")
    if gk == workloadkinds.WORKLOAD.group_kind:
        if request.version == "v1alpha1":  # Kubernetes 1.35
            return [f"{schedulingapi.GROUP}/v1alpha1 Workload: {schedulingapi.V1ALPHA1_WHY}"]
        return schedulingapi.workload_problems(obj)
    if gk == workloadkinds.JOB.group_kind:
        scheduling = schedulingapi.job_scheduling(spec_of(obj))
        template = spec_of(spec_of(obj).get("template"))
        if scheduling is not None and goes_to_bridge(template.get("schedulerName"), config.schedulerName):
            return schedulingapi.group_problems(scheduling, "spec.scheduling")
    return []


def workload_api_warnings(request: AdmissionRequest) -> list[str]:
    """What a built-in PodGroup, a CompositePodGroup or a Workload asks that the bridge accepts but
    does not translate (``preemptionPolicy: Never``, slurm_bridge/kube/schedulingapi.py). On create only."""
    if request.operation != "CREATE" or not isinstance(request.object, Mapping):
        return []
    gk = (request.group, request.kind)
    if gk in (workloadkinds.SCHED_PODGROUP.group_kind, workloadkinds.COMPOSITE_PODGROUP.group_kind):
        return schedulingapi.preemption_warnings(spec_of(request.object), "spec")
    if gk == workloadkinds.WORKLOAD.group_kind:
        return schedulingapi.workload_preemption_warnings(request.object)
    return []


def _decide(reserved: list[str], invalid: list[str], reason: str, warnings: list[str] | None = None) -> Decision:
    problems = reserved + invalid
    if not problems:
        return Decision(allowed=True, reason=reason, warnings=warnings or [])
    count = f"{len(problems)} problems: " if len(problems) > 1 else ""
    message = f"slurm-bridge: {count}" + "; ".join(problems)
    if reserved:
        return Decision(allowed=False, code=403, reason="Forbidden", message=message)
    return Decision(allowed=False, code=422, reason="Invalid", message=message)


def validate(
    request: AdmissionRequest,
    config: Config,
    tenants: Tenants | None = None,
    slices: Sequence[Mapping[str, Any]] | None = None,
    claims: devicedoors.PodClaims | None = None,
) -> Decision:
    """Validating webhook decision for pods and the workload kinds whose annotations configure
    Slurm jobs (slurm_bridge/rules/workloadkinds.py); their pod templates are checked like pods, so errors
    show early. ``tenants``: the TenantPolicies (None: no tenancy check, as before it existed);
    what a policy refuses is Forbidden (403), like a reserved key. ``slices``: the cluster's
    ResourceSlices (None: not read yet, so a pod's DRA request is not checked against them).
    ``claims``: what a pod's create names in spec.resourceClaims (webhook/devicedoors.py; None: not
    read, not checked). A ResourceClaim or ResourceClaimTemplate is checked for the classes only the
    bridge allocates."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision(allowed=True, reason=f"{request.operation} is always allowed")
    new_meta = _metadata(request.object)
    if new_meta is None:
        return Decision(allowed=True, reason="no object")
    old_meta = _metadata(request.old_object if request.operation == "UPDATE" else None)
    if (request.group, request.kind) == workloadkinds.POD.group_kind:
        if request.sub_resource == "resize":  # in-place resize: only the resources change (webhook/resize.py)
            pod = request.object or {}
            return _decide([], resize_problems(pod, request.old_object, config), "ok")
        if request.sub_resource == "ephemeralcontainers":  # kubectl debug (webhook/devicedoors.py)
            found = devicedoors.ephemeral_problems(request.object or {}, request.old_object, config)
            return _decide(found, [], "ok")
        return _validate_pod(request, config, tenants, new_meta, old_meta, slices, claims)
    if request.group == schedulingapi.RESOURCE_GROUP and request.kind in ("ResourceClaim", "ResourceClaimTemplate"):
        return _decide(devicedoors.claim_create_problems(request, config), [], "ok")
    return _validate_workload(request, config, tenants, new_meta, old_meta)


def _validate_pod(
    request: AdmissionRequest,
    config: Config,
    tenants: Tenants | None,
    new_meta: Meta,
    old_meta: Meta | None,
    slices: Sequence[Mapping[str, Any]] | None = None,
    claims: devicedoors.PodClaims | None = None,
) -> Decision:
    old_obj = request.old_object if request.operation == "UPDATE" else None
    trusted = request.username in config.trustedUsers
    reserved, invalid = _check_pod_meta(new_meta, old_meta, trusted)
    placement, warnings = _pod_placement(request.object or {}, old_obj, config, not invalid)
    devices = _pod_devices(request.object or {}, old_obj, config)
    if old_obj is None:  # a pod's grace period cannot change after its create
        devices += grace_problems(spec_of(request.object), config.handoff.maxGracePeriodSeconds, "spec")
        if slices is not None and not devices:
            devices += _devices_no_node_has(request.object or {}, config, slices)
        devices += _plugin_gpus(request.object or {}, config)
        if claims is not None:  # only the bridge allocates Slurm's devices (webhook/devicedoors.py)
            reserved += devicedoors.pod_claim_problems(claims)
    pod = request.object or {}
    found, more = (
        sharing.pod_problems(pod, old_meta and old_meta[1], _own_group(pod), config) if not invalid else ([], [])
    )
    reserved += _pod_tenancy(request, config, tenants, not invalid)
    if old_obj is not None:  # a change of its slurmjob annotations must reach its job (webhook/changes.py)
        policy = tenants.index().match(request.namespace).policy if tenants is not None and tenants.synced else None
        invalid += pod_change_problems(request.object or {}, old_obj, config, policy)
    return _decide(
        reserved, invalid + placement + devices + found, "trusted user" if trusted else "ok", warnings + more
    )


def _validate_workload(
    request: AdmissionRequest, config: Config, tenants: Tenants | None, new_meta: Meta, old_meta: Meta | None
) -> Decision:
    gk = (request.group, request.kind)
    paths = workloadkinds.VALIDATED_TEMPLATES.get(gk)
    if paths is None:
        return Decision(allowed=True, reason=f"kind {request.group}/{request.kind} is not checked")
    invalid = annotation_problems(new_meta[1], None if old_meta is None else old_meta[1])
    invalid += workload_api_problems(request, config)
    reserved, found, managed, moved = _check_templates(request, config, paths)
    invalid += found
    changed = moved or old_meta is None or slurmjob_annotations(new_meta[1]) != slurmjob_annotations(old_meta[1])
    if changed and managed:
        # A batch Job's pods are each their own Slurm job; the gangs' size is known in the operator,
        # and so are the options of pods that name a built-in PodGroup (or whose Job asks its
        # controller for a gang PodGroup, spec.scheduling): each is checked on its own.
        grouped = any(_in_podgroup(spec) for spec in managed.values())
        job_gang = gk == workloadkinds.JOB.group_kind and schedulingapi.job_gang(spec_of(request.object))
        annotations = None if invalid or grouped or job_gang else slurmjob_annotations(new_meta[1])
        makes_pods = _root_pod_maker(request) and not grouped
        single = (gk == workloadkinds.JOB.group_kind and not job_gang) or makes_pods
        invalid += placement_check(managed, annotations, 1 if single else None)
    if managed and (changed or any(_template_annotations_changed(request, paths, w) for w in managed)):
        templates = pod_templates(request.object, paths)
        invalid += _template_plugin_gpus(managed, templates, new_meta[1], config)
        asked = [new_meta[1]] + [(_metadata(templates.get(w[: -len(".spec")])) or ({}, {}))[1] for w in managed]
        reserved += tenancy_problems(request.namespace, config, tenants, asked)
        if _root_pod_maker(request) and not invalid:
            reserved += _each_pod_as_its_job(request, config, tenants, managed, templates, new_meta[1])
    found, warnings = sharing.workload_problems(request, managed, pod_templates(request.old_object, paths), config)
    warnings += workload_api_warnings(request)
    if managed and old_meta and gk not in workloadkinds.MAKES_PODS:
        # (a pod-making controller's change reaches only the pods it makes afterwards)
        warnings += workload_change_warnings(request.object, request.old_object)
    return _decide(reserved, invalid + found, "ok", warnings)


def _root_pod_maker(request: AdmissionRequest) -> bool:
    """A pod-making controller no other controller owns (a Deployment, a ReplicaSet made by hand;
    not a Deployment's ReplicaSet, not a LeaderWorkerSet's StatefulSet): its pods' jobs are judged
    whole here only then, since an owner's rules (a gang's size, its options) are not known here and
    the owner was judged at its own admission."""
    gk = (request.group, request.kind)
    return gk in workloadkinds.MAKES_PODS and controller_of(request.object or {}) is None


def _each_pod_as_its_job(
    request: AdmissionRequest,
    config: Config,
    tenants: Tenants | None,
    managed: Mapping[str, Mapping[str, Any]],
    templates: Mapping[str, Any],
    annotations: Mapping[str, str],
) -> list[str]:
    """The TenantPolicy's verdict on the whole job of each pod a pod-making controller (a
    Deployment, StatefulSet, ReplicaSet, DaemonSet) will make, as the operator judges it before its
    submit (caps on CPUs and GPUs, the default partition): a refusal there would fail every pod the
    controller makes again, so it is said here, once, at the object."""
    problems: list[str] = []
    for where, spec in managed.items():
        if _in_podgroup(spec):
            continue  # its group and options are known only in the operator
        meta = (_metadata(templates.get(where[: -len(".spec")])) or ({}, {}))[1]
        pod = {"metadata": {"annotations": dict(meta)}, "spec": {**spec, "schedulerName": config.schedulerName}}
        try:
            whole = job_request([pod], config=config, annotations=slurmjob_annotations(annotations))
        except ValueError:
            continue  # reported by the other checks
        found = tenancy_problems(request.namespace, config, tenants, [], whole)
        problems += [f"{where}: {p}" for p in found]
    return problems


def _check_templates(
    request: AdmissionRequest, config: Config, paths: Sequence[Sequence[str]]
) -> tuple[list[str], list[str], dict[str, Mapping[str, Any]], bool]:
    """(reserved-key problems, other problems, the bridge's pod specs by location, whether one of
    those was added or its placement changed) of a workload's pod templates."""
    update = request.operation == "UPDATE"
    old_templates = pod_templates(request.old_object if update else None, paths)
    trusted = request.username in config.trustedUsers
    reserved: list[str] = []
    invalid: list[str] = []
    managed: dict[str, Mapping[str, Any]] = {}
    moved = False
    for where, template in pod_templates(request.object, paths).items():
        t_new = _metadata(template)
        if t_new is None:
            continue
        t_old = _metadata(old_templates.get(where)) if update else None
        if update and t_old is None:
            t_old = ({}, {})  # a template added by an update: everything in it is new
        r, i = _check_pod_meta(t_new, t_old, trusted, f"{where}.metadata: ")
        reserved += r
        invalid += i
        spec = spec_of(template)
        if goes_to_bridge(spec.get("schedulerName"), config.schedulerName):
            managed[f"{where}.spec"] = spec
            # The pods' DRA requests would be refused one by one: say it on the workload.
            invalid += device_requests(spec, f"{where}.spec")[2]
            before = spec_of(old_templates.get(where)).get("terminationGracePeriodSeconds") if update else None
            if not update or before != spec.get("terminationGracePeriodSeconds"):  # an unchanged one stands
                invalid += grace_problems(spec, config.handoff.maxGracePeriodSeconds, f"{where}.spec")
            moved = (
                moved
                or where not in old_templates
                or _placement_of(spec) != _placement_of(spec_of(old_templates[where]))
            )
    return reserved, invalid, managed, moved


def _template_annotations_changed(request: AdmissionRequest, paths: Sequence[Sequence[str]], where: str) -> bool:
    """Whether the slurmjob annotations of the template at ``where`` (``...spec``) changed."""
    if request.operation != "UPDATE":
        return True
    at = where[: -len(".spec")]
    new = (_metadata(pod_templates(request.object, paths).get(at)) or ({}, {}))[1]
    old = (_metadata(pod_templates(request.old_object, paths).get(at)) or ({}, {}))[1]
    return slurmjob_annotations(new) != slurmjob_annotations(old)
