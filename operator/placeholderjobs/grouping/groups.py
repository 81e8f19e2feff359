"""Which PlaceholderJob a pod belongs to, and where that job's options come from.

The rules (docs/workloads.md) follow the Go slurm-bridge where it has them:

- A pod whose ``spec.schedulingGroup.podGroupName`` names a built-in PodGroup (the Kubernetes
  Workload API, ``scheduling.k8s.io`` v1beta1 or v1alpha2, read through
  :mod:`slurm_bridge.kube.schedulingapi`) with a ``gang`` policy belongs to that gang. Its options merge
  the PodGroup's, the selected controller's (the JobSet or Job above the pod) and the Workload's
  annotations, later winning. A ``basic`` policy asks for no gang: the rules below decide.
- A pod labelled ``scheduling.x-k8s.io/pod-group`` belongs to that coscheduling PodGroup: a gang.
- Otherwise the pod's *controller* owner chain is walked, at most ``MAX_OWNER_DEPTH`` owners up,
  and the highest recognised workload decides: a JobSet is one gang, a LeaderWorkerSet one gang
  per group index, a batch Job one group per pod (not a gang).
- With no recognised workload the pod is its own group; its options come from the highest
  controller the bridge could read, or from the pod itself when it has no controller.

Otherwise options (``slurmjob.slinky.slurm.net/*``) are read from that root object only, so a pod template
cannot override what the workload says. A gang is one PlaceholderJob named after its root and
owned by it (garbage collection removes it with the workload), holding one Slurm job with one
node per member pod.

Resolution does I/O only through the ``get`` callable it is given, so the rules can be tested
with a dict of objects; everything else here is pure.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH, bounded, escape_pointer
from slurm_bridge.core.objects import Obj
from slurm_bridge.kube import schedulingapi
from slurm_bridge.kube.client import KubeError, resource_path
from slurm_bridge.kube.placeholderjob import Component, GroupSource, PlaceholderJobSpec
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.resume import Place
from slurm_bridge.rules.translate import time_limit_from_deadline
from slurm_bridge.rules.workloadkinds import GroupKind, group_kind
from slurm_bridge.slurm.models import JobRequest

# GET an API path: the object, None when it does not exist (404); other errors raise KubeError.
Getter = Callable[[str], Awaitable[Obj | None]]

# As the Go slurm-bridge: a longer chain is a loop or a mistake, not a workload.
MAX_OWNER_DEPTH: Final = 32

# The kinds (slurm_bridge/rules/workloadkinds.py has the table) by (API group, kind).
POD: Final[GroupKind] = workloadkinds.POD.group_kind
JOB: Final[GroupKind] = workloadkinds.JOB.group_kind
JOBSET: Final[GroupKind] = workloadkinds.JOBSET.group_kind
LWS: Final[GroupKind] = workloadkinds.LWS.group_kind
PODGROUP: Final[GroupKind] = workloadkinds.PODGROUP.group_kind
PODGROUP_API_VERSION: Final = workloadkinds.PODGROUP.api_version
# The built-in Workload API (feature gate GenericWorkload; slurm_bridge/kube/schedulingapi.py).
WORKLOAD_API_GROUP: Final = workloadkinds.WORKLOAD.group
SCHED_PODGROUP: Final[GroupKind] = workloadkinds.SCHED_PODGROUP.group_kind
WORKLOAD: Final[GroupKind] = workloadkinds.WORKLOAD.group_kind
# Versions of the Workload API whose PodGroup and Workload shapes the bridge knows, preferred
# first, with the PodGroup status condition that says the gang was scheduled.
WORKLOAD_API_VERSIONS: Final[Mapping[str, str]] = {
    v: schedulingapi.VERSIONS[v].condition for v in workloadkinds.SCHED_PODGROUP.versions
}

# Workloads that decide grouping when found in the owner chain (the highest one wins).
RECOGNIZED: Final = workloadkinds.DECIDES_GROUP
# spec.group.kind of a gang PlaceholderJob.
GANG_KINDS: Final = workloadkinds.GANG_KINDS

# Exclusive-placement annotations: the workload's controller or webhook holds back the other pods
# until a leader pod is scheduled, which a gang never is alone.
_LWS_EXCLUSIVE: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
_JOBSET_EXCLUSIVE: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"


class GroupError(Exception):
    """The pod's group cannot be resolved now; ``reason`` names it in the pod's Event.

    The pod stays gated; ``retry_after`` says when to look again (owners appear, RBAC is fixed).
    """

    def __init__(self, reason: str, message: str, retry_after: float = 30.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


async def read_group_object(get: Getter, api_version: str, kind: str, plural: str, ns: str, name: str, why: str) -> Obj:
    """A Workload API object (PodGroup, Workload, CompositePodGroup) a pod's group depends on.

    Workload controllers create the pods, their groups and the Workload in any order, so a missing
    one holds the pod (``<Kind>NotFound``, looked for again in 5 s); ``why`` says which field
    named it. 403 and other errors become ``<Kind>Forbidden`` / ``<Kind>Unreadable``.
    """
    missing, forbidden, unreadable = names.GROUP_OBJECT_PROBLEMS[kind]
    try:
        obj = await get(resource_path(api_version, plural, ns, name))
    except KubeError as e:
        if e.status == 403:
            message = f"the bridge may not read {kind} {ns}/{name} ({api_version}); grant it get on {plural}"
            raise GroupError(forbidden, message, 60.0) from None
        raise GroupError(unreadable, f"cannot read {kind} {ns}/{name} ({api_version}): {e}", 30.0) from None
    if obj is None:
        message = f"{why} {kind} {name}, which does not exist ({api_version}); the pod waits for it"
        raise GroupError(missing, message, 5.0)
    obj.setdefault("apiVersion", api_version)
    obj.setdefault("kind", kind)
    return obj


@dataclass(frozen=True)
class Group:
    name: str  # the PlaceholderJob's name
    namespace: str
    min_member: int  # pods that must exist before the Slurm job is submitted
    owner: Obj  # ownerReference placed on the PlaceholderJob
    source: Obj  # group reference recorded in spec.group
    annotations: dict[str, str] = field(default_factory=dict)  # root workload's slurmjob annotations
    derived: dict[str, object] = field(default_factory=dict)  # options derived from the workload
    gang: bool = False
    warnings: tuple[str, ...] = ()  # workload settings that defeat gang scheduling

    def options(self) -> Options:
        """What the PlaceholderJob records of the annotations its spec is made from (names.ANN_JOB_OPTIONS)."""
        return dict(self.annotations)

    def derived_for(self, pods: int) -> dict[str, object]:
        """Derived options for a request over ``pods`` member pods: a gang holds a node for every
        member it waits for, even before they all exist."""
        if not self.gang:
            return dict(self.derived)
        return {**self.derived, "nodes": max(self.min_member, pods)}


# --- small pure helpers -----------------------------------------------------------------------
# The slurmjob annotations a PlaceholderJob's spec was made from (names.ANN_JOB_OPTIONS): key ->
# value; a CompositePodGroup's, by component PodGroup.
Options = dict[str, Any]


def options_value(options: Mapping[str, Any]) -> str:
    """The annotation's value: the options as JSON, keys sorted (one text for one set)."""
    return json.dumps(options, sort_keys=True, separators=(",", ":"))


def recorded_options(phj: Mapping[str, Any]) -> Options | None:
    """The options a PlaceholderJob recorded (None: made before the bridge recorded them, or not
    readable)."""
    raw = objects.annotations(phj).get(names.ANN_JOB_OPTIONS)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def options_ops(phj: Mapping[str, Any], options: Mapping[str, Any]) -> list[Obj]:
    """JSON-patch operations that record ``options`` on the PlaceholderJob (other annotations kept)."""
    if objects.annotations(phj):
        path = f"/metadata/annotations/{escape_pointer(names.ANN_JOB_OPTIONS)}"
        return [{"op": "add", "path": path, "value": options_value(options)}]
    return [{"op": "add", "path": "/metadata/annotations", "value": {names.ANN_JOB_OPTIONS: options_value(options)}}]


def slurmjob_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """The object's own slurmjob annotations (the filter is slurm_bridge/rules/workloadkinds.py's)."""
    return workloadkinds.slurmjob_annotations(objects.annotations(obj))


def phj_name(*parts: str) -> str:
    """``parts`` joined by "-", shortened with a hash suffix when longer than a name may be.

    Every part comes from a valid object name, so the result is a valid DNS subdomain too.
    """
    return bounded("-".join(parts), MAX_NAME_LENGTH)


def _count(value: Any, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(value, 0)


def jobset_size(jobset: Mapping[str, Any]) -> int:
    """Pods a JobSet runs at once: the sum over replicatedJobs of replicas x active pods per Job.

    A Job runs ``parallelism`` pods (default 1), but never more than ``completions``.
    """
    total = 0
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = ((rjob.get("template") or {}).get("spec")) or {}
        parallelism = _count(job_spec.get("parallelism"), 1)
        completions = job_spec.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool):
            parallelism = min(parallelism, max(completions, 0))
        total += _count(rjob.get("replicas"), 1) * parallelism
    return max(total, 1)


def lws_size(lws: Mapping[str, Any]) -> int:
    """Pods per LeaderWorkerSet group: the leader and its workers (``leaderWorkerTemplate.size``)."""
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    return max(_count(template.get("size"), 1), 1)


def podgroup_size(podgroup: Mapping[str, Any]) -> int:
    return max(_count((podgroup.get("spec") or {}).get("minMember"), 1), 1)


def _ref(obj: Mapping[str, Any]) -> Obj:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}


def _owner_ref(obj: Mapping[str, Any]) -> Obj:
    # No blockOwnerDeletion: that would need the right to set finalizers on the workload.
    return {**_ref(obj), "blockOwnerDeletion": False}


# --- groups -----------------------------------------------------------------------------------


def pod_group(pod: Obj, root: Obj | None = None) -> Group:
    """The single-pod group of ``pod``. ``root`` is where its options come from: its batch Job,
    or the highest controller the bridge could read; None for a bare pod (the pod itself)."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": False}
    source: Obj = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    annotations = slurmjob_annotations(pod)
    derived: dict[str, object] = {}
    if root is not None:
        source = _ref(root)
        # The workload's annotations win over what its pod template carried.
        annotations = slurmjob_annotations(root)
        if group_kind(root) == JOB:
            deadline = (root.get("spec") or {}).get("activeDeadlineSeconds")
            if deadline:
                derived["time_limit_minutes"] = time_limit_from_deadline(int(deadline))
    return Group(meta["name"], meta["namespace"], 1, owner, source, annotations, derived)


def jobset_group(pod: Obj, jobset: Obj) -> Group:
    warnings = []
    spec = jobset.get("spec") or {}
    if ((spec.get("startupPolicy") or {}).get("startupPolicyOrder")) == "InOrder":
        warnings.append(
            "startupPolicy InOrder creates later Jobs only once earlier ones run, but the gang's Slurm job "
            "waits for every pod: the JobSet will not start"
        )
    annotated = [jobset, *((r.get("template") or {}) for r in spec.get("replicatedJobs") or [])]
    if any(_JOBSET_EXCLUSIVE in objects.annotations(o) for o in annotated):
        warnings.append(
            f"{_JOBSET_EXCLUSIVE} admits follower pods only once their leader is scheduled, but the gang's Slurm "
            "job waits for every pod: the JobSet will not start"
        )
    if any(r.get("dependsOn") for r in spec.get("replicatedJobs") or []):
        warnings.append(
            "replicatedJobs with dependsOn create their pods only after others progress, but the gang's "
            "Slurm job waits for every pod: the JobSet will not start"
        )
    return _gang(pod, jobset, jobset_size(jobset), ("jobset", jobset["metadata"]["name"]), warnings)


def lws_group(pod: Obj, lws: Obj) -> Group:
    labels = objects.labels(pod)
    index = labels.get(names.LABEL_LWS_GROUP_INDEX)
    if not index:
        raise GroupError(
            names.REASON_LWS_GROUP_UNKNOWN,
            f"the pod has no {names.LABEL_LWS_GROUP_INDEX} label, so its LeaderWorkerSet group is unknown "
            "(the LeaderWorkerSet controller's webhook sets it)",
            30.0,
        )
    warnings = []
    if (lws.get("spec") or {}).get("startupPolicy") == "LeaderReady":
        warnings.append(
            "startupPolicy LeaderReady creates workers only once the leader is ready, but the gang's Slurm "
            "job waits for every pod: the group will not start"
        )
    if _LWS_EXCLUSIVE in objects.annotations(lws):
        warnings.append(
            f"{_LWS_EXCLUSIVE} creates workers only once the leader is scheduled, but the gang's Slurm job "
            "waits for every pod: the group will not start"
        )
    return _gang(pod, lws, lws_size(lws), ("lws", lws["metadata"]["name"], index), warnings)


def podgroup_group(pod: Obj, podgroup: Obj) -> Group:
    return _gang(pod, podgroup, podgroup_size(podgroup), ("podgroup", podgroup["metadata"]["name"]))


def gang_min_count(podgroup: Mapping[str, Any]) -> int | None:
    """``schedulingPolicy.gang.minCount`` of a built-in PodGroup; None for a ``basic`` policy."""
    return schedulingapi.read_podgroup(podgroup).min_count


def podgroup_topology(podgroup: Mapping[str, Any]) -> dict[str, object]:
    """The job request's ``topology`` from a gang PodGroup's ``schedulingConstraints.topology``, or
    nothing (a topology annotation, as every annotation, wins over such derived values)."""
    topology = schedulingapi.topology_of(podgroup.get("spec") or {})
    return {"topology": topology} if topology else {}


def workload_name(podgroup: Mapping[str, Any]) -> str | None:
    """The Workload a built-in PodGroup was made from (v1beta1 ``workloadRef``, v1alpha2
    ``podGroupTemplateRef.workload``)."""
    return schedulingapi.read_podgroup(podgroup).workload


def unsupported_podgroup(podgroup: Mapping[str, Any]) -> GroupError | None:
    """Why the bridge cannot place a PodGroup's pods, whatever its policy (claims its pods share,
    topology constraints Slurm cannot honour; slurm_bridge/kube/schedulingapi.py): the webhook
    refuses such PodGroups, and one made before it looked (or with the webhook bypassed) gets this
    on its pods. The fields are immutable, so only a new PodGroup helps; looked at again in case it
    is replaced."""
    problems = schedulingapi.group_problems(podgroup.get("spec") or {}, "spec")
    if not problems:
        return None
    name = objects.name(podgroup)
    return GroupError(names.REASON_PODGROUP_UNSUPPORTED, f"PodGroup {name}: " + "; ".join(problems), 60.0)


def workload_podgroup_group(pod: Obj, podgroup: Obj, controller: Obj | None, workload: Obj | None) -> Group:
    """A pod of a built-in PodGroup with a gang policy. ``controller``: the JobSet or Job above the
    pod, if any.

    As in the Go slurm-bridge, options merge PodGroup <- controller <- Workload (the Workload
    wins a conflict), so shared settings go on the Workload and per-gang ones on the PodGroup.
    """
    annotations: dict[str, str] = {}
    for source in (podgroup, controller, workload):
        if source is not None:
            annotations.update(slurmjob_annotations(source))
    # As in the Go slurm-bridge, the Slurm job is named after the PodGroup (not the Workload, which
    # may have several) unless a job-name annotation says otherwise. The CRD's spec.slurm.jobName
    # holds 200 characters, an object name up to 253.
    derived: dict[str, object] = {"job_name": podgroup["metadata"]["name"][:200], **podgroup_topology(podgroup)}
    if controller is not None and group_kind(controller) == JOB:
        deadline = (controller.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline:
            derived["time_limit_minutes"] = time_limit_from_deadline(int(deadline))
    size = gang_min_count(podgroup) or 1
    gang = _gang(pod, podgroup, size, ("pg", podgroup["metadata"]["name"]))
    return replace(gang, annotations=annotations, derived=derived)


def _gang(pod: Obj, root: Obj, size: int, name_parts: tuple[str, ...], warnings: list[str] | None = None) -> Group:
    """A gang's group: named after, owned by and configured from its root workload."""
    return Group(
        phj_name(*name_parts),
        pod["metadata"]["namespace"],
        size,
        _owner_ref(root),
        _ref(root),
        slurmjob_annotations(root),
        gang=True,
        warnings=tuple(warnings or ()),
    )


def same_group(phj: Mapping[str, Any], group: Group) -> bool:
    """Whether an existing PlaceholderJob is this group's (and not one of an earlier workload of
    the same name, or an unrelated object that happens to have the name)."""
    source = (phj.get("spec") or {}).get("group") or {}
    return bool(source.get("uid") == group.source["uid"] and source.get("kind") == group.source["kind"])


def new_phj(
    group: Group,
    pods: list[str],
    request: JobRequest,
    pod_uids: dict[str, str] | None = None,
    *,
    components: list[Component] | None = None,
    min_components: int | None = None,
    resumes: Place | None = None,
) -> Obj:
    """A new PlaceholderJob for ``group``: owned by its root, with the bridge's finalizer;
    ``components``, ``min_components``: a CompositePodGroup's heterogeneous job; ``resumes``: the
    place of a preempted job of the same workload it takes (slurm_bridge/rules/resume.py)."""
    spec = PlaceholderJobSpec(
        pods=pods,
        pod_uids=pod_uids,
        min_member=group.min_member,
        group=GroupSource.model_validate(group.source),
        slurm=request,
        components=components,
        min_components=min_components,
    )
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {
            "name": group.name,
            "namespace": group.namespace,
            "labels": {
                names.LABEL_APP_NAME: names.APP_NAME,
                names.LABEL_APP_MANAGED_BY: names.APP_NAME,
            },
            "annotations": {
                names.ANN_JOB_OPTIONS: options_value(group.options()),
                **({names.ANN_RESUMES: resumes.encode()} if resumes is not None else {}),
            },
            "ownerReferences": [group.owner],
            "finalizers": [names.FINALIZER_PLACEHOLDER_JOB],
        },
        "spec": spec.crd_dict(),
    }
