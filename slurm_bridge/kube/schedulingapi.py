"""The Kubernetes Workload API (``scheduling.k8s.io`` Workload and PodGroup) at every version the
bridge reads, behind one neutral view, and what a cluster must turn on to serve it.

Kubernetes 1.36 serves it at ``v1alpha2``, 1.37 at ``v1beta1`` (both behind the feature gate
``GenericWorkload`` and a ``--runtime-config`` entry). The two differ in shape where the bridge
looks: how a PodGroup names its Workload (``podGroupTemplateRef.workload`` against
``workloadRef``), the condition that says a gang was scheduled (``PodGroupScheduled`` against
``PodGroupInitiallyScheduled``, which never goes back to False once True) and the form of
``disruptionMode``. :func:`read_podgroup` reads either into a :class:`PodGroupView`, so the rest
of the bridge never asks which version it holds. 1.35's ``v1alpha1`` (pods name their Workload in
``spec.workloadRef``) is a different design the bridge does not read; it refuses such pods rather
than run their gang pod by pod. Kubernetes 1.38 keeps PodGroups and Workloads at ``v1beta1``, the same
where the bridge looks (``preemptionPolicy`` no longer behind a feature gate), and serves
CompositePodGroups at ``v1beta1`` too (1.37: ``v1alpha3``; the operator reads the newest served).

Also here: what the bridge refuses in a PodGroup, a Workload's PodGroup template or a Job's
``spec.scheduling`` (claims shared by the whole group, topology keys Slurm cannot place by; see
docs/workloads.md), and the messages that name the Kubernetes version found and the feature gate
and runtime-config it lacks. Pure: callers pass the API objects and discovery documents as dicts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.rules import workloadkinds
from slurm_bridge.rules.topology import topology_of_key

GROUP: Final = workloadkinds.SCHED_PODGROUP.group
PODGROUPS: Final = workloadkinds.SCHED_PODGROUP.plural
# resource.k8s.io/v1: the ResourceClaims and ResourceSlices of the bridge's DRA path (slurm_bridge/rules/dra/).
RESOURCE_GROUP: Final = "resource.k8s.io"
RESOURCE_VERSION: Final = "v1"
RESOURCE_CLAIMS: Final = "resourceclaims"
# The feature gate that turns the Workload API on (kube-apiserver, kube-controller-manager).
GATE: Final = "GenericWorkload"
# The Job controller's gate that makes a Workload and PodGroup from a Job's spec.scheduling.
JOB_GATE: Final = "WorkloadWithJob"


@dataclass(frozen=True)
class APIVersion:
    """One served version of the Workload API, as the bridge uses it."""

    version: str
    kubernetes: int  # the Kubernetes minor release (1.x) that serves it
    condition: str  # the PodGroup condition type that says its gang was scheduled
    sticky: bool  # the condition stays True once True (the bridge never writes False over it)

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"


VERSIONS: Final[Mapping[str, APIVersion]] = {
    v.version: v
    for v in (
        APIVersion("v1beta1", 37, names.PODGROUP_COND_INITIALLY_SCHEDULED, sticky=True),
        APIVersion("v1alpha2", 36, names.PODGROUP_COND_SCHEDULED, sticky=False),
    )
}
# Preferred first; the table (slurm_bridge/rules/workloadkinds.py) holds the order.
PREFERRED: Final[tuple[str, ...]] = workloadkinds.WORKLOAD_API_VERSIONS
# The first Kubernetes release whose Workload API the bridge reads.
FIRST_MINOR: Final = min(v.kubernetes for v in VERSIONS.values())


def version_of(api_version: str) -> APIVersion | None:
    """The known version an object's ``apiVersion`` names, None for any other."""
    group, _, version = api_version.rpartition("/")
    return VERSIONS.get(version) if group == GROUP else None


def choose_version(served: Mapping[str, Collection[str]]) -> str | None:
    """The version to read Workloads and PodGroups at: the first known one whose resources
    (``served``: version -> resource names, from API discovery) include PodGroups. The group also
    serves PriorityClasses (v1), so a served version without PodGroups does not count."""
    return next((v for v in PREFERRED if PODGROUPS in served.get(v, ())), None)


def served_versions(group_doc: Mapping[str, Any] | None) -> list[str]:
    """The versions an API group's discovery document (``GET /apis/<group>``) lists."""
    return [str(v.get("version")) for v in (group_doc or {}).get("versions") or [] if isinstance(v, Mapping)]


def resource_names(resource_list: Mapping[str, Any] | None) -> frozenset[str]:
    """The resources a version's discovery document (``GET /apis/<group>/<version>``) lists."""
    return frozenset(str(r.get("name")) for r in (resource_list or {}).get("resources") or [] if isinstance(r, Mapping))


# --- the Kubernetes version and what it must turn on ---------------------------------------------


@dataclass(frozen=True)
class KubeVersion:
    """The API server's version (``GET /version``); ``minor`` None when it could not be read."""

    git: str = ""
    minor: int | None = None

    def __str__(self) -> str:
        return f"Kubernetes {self.git}" if self.git else "this cluster (its version could not be read)"


def kube_version(doc: Mapping[str, Any] | None) -> KubeVersion:
    """Parse ``GET /version``. Some distributions report the minor as ``"37+"``."""
    doc = doc or {}
    git = str(doc.get("gitVersion") or "")
    digits = "".join(c for c in str(doc.get("minor") or "") if c.isdigit()) if str(doc.get("major")) == "1" else ""
    if not digits and git.startswith("v1."):
        digits = "".join(c for c in git[3:].split(".")[0] if c.isdigit())
    return KubeVersion(git, int(digits) if digits else None)


def workload_api_needs(kube: KubeVersion) -> str:
    """What ``kube`` must turn on (or become) to serve a Workload API the bridge reads."""
    if kube.minor is not None and kube.minor < FIRST_MINOR:
        older = " (1.35 has scheduling.k8s.io/v1alpha1, which slurm-bridge does not read)" if kube.minor == 35 else ""
        return (
            f"{kube} has no Workload API slurm-bridge can use{older}: upgrade to Kubernetes 1.{FIRST_MINOR} or later, "
            "or make the gang a JobSet, a LeaderWorkerSet or a coscheduling PodGroup (scheduling.x-k8s.io)"
        )
    gate = f"the feature gate {GATE}=true (kube-apiserver and kube-controller-manager)"
    by_minor = {v.kubernetes: v for v in VERSIONS.values()}
    if kube.minor is None:
        either = " or ".join(f"{v.api_version}=true on 1.{v.kubernetes}" for v in VERSIONS.values())
        return f"on {kube}, turn on {gate} and --runtime-config={either} (kube-apiserver)"
    newest = max(by_minor)
    chosen = by_minor.get(kube.minor) or by_minor[newest]
    newer = f" (newer than 1.{newest}, the last release slurm-bridge was tested with)" if kube.minor > newest else ""
    return f"on {kube}{newer}, turn on {gate} and --runtime-config={chosen.api_version}=true (kube-apiserver)"


def not_served_message(what: str, kube: KubeVersion, served: Iterable[str] = ()) -> str:
    """Why ``what`` (a pod naming a PodGroup, ...) cannot work: the Workload API is not served."""
    known = " or ".join(v.api_version for v in VERSIONS.values())
    others = sorted(set(served))
    found = f" (it serves {', '.join(f'{GROUP}/{v}' for v in others)})" if others else ""
    return f"{what}, but the API server serves no PodGroups at {known}{found}; {workload_api_needs(kube)}"


def resource_api_needs(kube: KubeVersion) -> str:
    """What ``kube`` must turn on to serve resource.k8s.io/v1 ResourceClaims (the bridge's DRA path)."""
    api = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
    if kube.minor is not None and kube.minor < 34:
        return f"{kube} has no {api} (it came in Kubernetes 1.34): upgrade to 1.34 or later"
    return (
        f"on {kube}, turn on the feature gate DynamicResourceAllocation=true (on by default) and do not turn "
        f"{api} off in --runtime-config"
    )


# --- PodGroups, one view for every version --------------------------------------------------------


@dataclass(frozen=True)
class PodGroupView:
    """What the bridge reads of a built-in PodGroup, whatever its version."""

    min_count: int | None  # gang size (schedulingPolicy.gang.minCount); None for a basic policy
    workload: str | None  # the Workload it was made from
    template: str | None  # that Workload's PodGroup template
    claims: tuple[str, ...] = ()  # names of the claims the group shares (spec.resourceClaims)
    topology: tuple[str, ...] = ()  # schedulingConstraints.topology keys
    disruption: str | None = None  # "single" / "all" (v1alpha2's "Pod" / "PodGroup")
    preemption: str | None = None  # spec.preemptionPolicy (v1beta1, gate PodGroupPreemptionPolicy)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _disruption(value: Any) -> str | None:
    if isinstance(value, str):  # v1alpha2: "Pod" | "PodGroup"
        return {"Pod": "single", "PodGroup": "all"}.get(value, value)
    if isinstance(value, Mapping):  # v1beta1: {single: {}} | {all: {}}
        return next((k for k in ("single", "all") if k in value), None)
    return None


def read_podgroup(podgroup: Mapping[str, Any]) -> PodGroupView:
    """A built-in PodGroup of either version as a :class:`PodGroupView`.

    v1beta1 names its Workload in ``spec.workloadRef {workloadName, templateName}``; v1alpha2 in
    ``spec.podGroupTemplateRef.workload {workloadName, podGroupTemplateName}``. The other shape is
    read too when the first is absent, so an object of an unexpected version is not misread.
    """
    spec = _map(podgroup.get("spec"))
    gang = _map(spec.get("schedulingPolicy")).get("gang")
    min_count = _count(gang.get("minCount")) if isinstance(gang, Mapping) else None
    beta = _map(spec.get("workloadRef"))
    alpha = _map(_map(spec.get("podGroupTemplateRef")).get("workload"))
    ref, template_key = (beta, "templateName") if beta else (alpha, "podGroupTemplateName")
    workload = ref.get("workloadName")
    template = ref.get(template_key)
    preemption = spec.get("preemptionPolicy")
    return PodGroupView(
        min_count=min_count,
        workload=str(workload) if workload else None,
        template=str(template) if template else None,
        claims=_claim_names(spec),
        topology=_topology_keys(spec),
        disruption=_disruption(spec.get("disruptionMode")),
        preemption=str(preemption) if preemption else None,
    )


def _claim_names(spec: Mapping[str, Any]) -> tuple[str, ...]:
    claims = spec.get("resourceClaims")
    if not isinstance(claims, list):
        return ()
    return tuple(str(_map(c).get("name") or f"[{i}]") for i, c in enumerate(claims))


def _topology_keys(spec: Mapping[str, Any]) -> tuple[str, ...]:
    topology = _map(spec.get("schedulingConstraints")).get("topology")
    if not isinstance(topology, list):
        return ()
    return tuple(str(_map(t).get("key") or "") for t in topology)


# --- what the bridge refuses ----------------------------------------------------------------------

SHARED_CLAIMS_WHY: Final = (
    "claims shared by a PodGroup are allocated by kube-scheduler's DRA plugin, apart from the nodes Slurm "
    "allocates, so they could name devices Slurm gave to another job or sit on nodes the gang does not get; "
    "slurm-bridge allocates devices through Slurm instead: request deviceclass.resource.kubernetes.io/<class> "
    f"in the pods' containers, or a GRES with the {names.ANN_GRES} annotation"
)
TOPOLOGY_BASIC_WHY: Final = (
    "with a basic policy Slurm places each pod's job on its own, so the pods cannot be kept within one topology "
    "domain; give the group a gang policy (schedulingPolicy.gang: one Slurm job, placed within one block or leaf "
    "switch) or drop the constraint"
)
COMPOSITE_TOPOLOGY_WHY: Final = (
    "a CompositePodGroup is one heterogeneous Slurm job whose components Slurm places each on its own, so they "
    "cannot be kept within one topology domain together; put the constraint on each child PodGroup instead "
    "(each component is then placed within one block or leaf switch)"
)


DISRUPTION_ALL_WHY: Final = (
    "with a basic policy Slurm schedules, preempts and ends each pod's job on its own, so the pods cannot be "
    "disrupted only all together; give the group a gang policy (schedulingPolicy.gang: its pods are one Slurm "
    "job, preempted and ended whole) or disruptionMode single"
)
COMPOSITE_DISRUPTION_ALL_WHY: Final = (
    "with a basic policy each child PodGroup is its own Slurm job, which Slurm preempts and ends on its own, so "
    "the children cannot be disrupted only all together; give the CompositePodGroup a gang policy "
    "(schedulingPolicy.gang: one heterogeneous Slurm job, preempted and ended whole) or disruptionMode single"
)


COMPOSITE_ALL_OUTSIDE_WHY: Final = (
    "a gang CompositePodGroup with disruptionMode all is one heterogeneous Slurm job, preempted and ended whole, "
    "whose components are its gang child PodGroups only; a basic child PodGroup's pods and a child "
    "CompositePodGroup are Slurm jobs of their own, which Slurm preempts and ends apart from it, so the children "
    "cannot be disrupted only all together; give the child PodGroup a gang policy, put the inner "
    "CompositePodGroup's PodGroups directly under this one, or give this one disruptionMode single"
)
PREEMPT_NEVER_WHY: Final = (
    "not translated: Slurm decides whether the group's job preempts others by its QOS "
    "(Preempt=) and partition (PriorityTier, with PreemptType=preempt/partition_prio), not per job. Never holds "
    "where Slurm preempts nothing (PreemptType=preempt/none, Slurm's default); elsewhere give the group a "
    f"{names.ANN_QOS} annotation naming a QOS that preempts no other, in a partition that preempts none"
)


def _is_gang(spec: Mapping[str, Any]) -> bool:
    return isinstance(_map(spec.get("schedulingPolicy")).get("gang"), Mapping)


def disruption_problems(spec: Mapping[str, Any], where: str, *, composite: bool = False) -> list[str]:
    """``disruptionMode`` all (v1alpha2: ``PodGroup``) where Slurm cannot honour it: on a group whose
    policy is not a gang, whose pods (or, for a CompositePodGroup, children) are separate Slurm jobs.
    A gang is one Slurm job (a composite gang one heterogeneous job), disrupted whole, which
    honours ``all`` and, more strictly, ``single`` (docs/workloads.md#what-the-bridge-refuses-and-why)."""
    mode = spec.get("disruptionMode")
    if _disruption(mode) != "all" or _is_gang(spec):
        return []
    shown = mode if isinstance(mode, str) else "all"
    return [
        f"{where}.disruptionMode ({shown}) without {where}.schedulingPolicy.gang: "
        + (COMPOSITE_DISRUPTION_ALL_WHY if composite else DISRUPTION_ALL_WHY)
    ]


def group_problems(spec: Mapping[str, Any], where: str) -> list[str]:
    """What the bridge cannot honour in a PodGroup's spec, a Workload's PodGroup template or a
    Job's ``spec.scheduling`` (the same field names in all three and in both versions); each
    problem names its field (``where`` is the object's path to ``spec``)."""
    problems = []
    claims = _claim_names(spec)
    if claims:
        problems.append(f"{where}.resourceClaims ({', '.join(claims)}): {SHARED_CLAIMS_WHY}")
    return problems + _topology_problems(spec, where) + disruption_problems(spec, where)


def _topology_problems(spec: Mapping[str, Any], where: str, *, composite: bool = False) -> list[str]:
    """A topology constraint the bridge cannot honour: a CompositePodGroup's own (``composite``),
    more than one key, a key that names no Slurm topology, or a group that is not a gang
    (docs/workloads.md#topology)."""
    keys = _topology_keys(spec)
    if not keys:
        return []
    field = f"{where}.schedulingConstraints.topology ({', '.join(keys)})"
    if composite:
        return [f"{field}: {COMPOSITE_TOPOLOGY_WHY}"]
    if len(keys) > 1:
        return [f"{field}: Slurm places a job within one unit of one topology; keep one key"]
    try:
        topology_of_key(keys[0])
    except ValueError as e:
        return [f"{field}: {e}"]
    return [] if _is_gang(spec) else [f"{field}: {TOPOLOGY_BASIC_WHY}"]


def topology_of(spec: Mapping[str, Any]) -> str | None:
    """The Slurm topology a group's one supported topology key names (None: no constraint, or one
    :func:`group_problems` refuses)."""
    keys = _topology_keys(spec)
    return None if not keys or _topology_problems(spec, "spec") else topology_of_key(keys[0])


def workload_problems(workload: Mapping[str, Any]) -> list[str]:
    """:func:`group_problems` of each of a Workload's PodGroup templates, and the disruption mode of
    each of its CompositePodGroup templates (Kubernetes 1.37)."""
    problems: list[str] = []
    spec = _map(workload.get("spec"))
    templates = spec.get("podGroupTemplates")
    for i, template in enumerate(templates if isinstance(templates, list) else []):
        problems += group_problems(_map(template), f"spec.podGroupTemplates[{i}]")
    composites = spec.get("compositePodGroupTemplates")
    for i, template in enumerate(composites if isinstance(composites, list) else []):
        problems += _composite_template_problems(_map(template), f"spec.compositePodGroupTemplates[{i}]")
    return problems


def composite_problems(spec: Mapping[str, Any], where: str) -> list[str]:
    """What the bridge cannot honour in a CompositePodGroup's own spec, an object's or a Workload
    template's: its topology constraint (Slurm places a heterogeneous job's components each on its
    own) and ``disruptionMode`` all without a gang policy."""
    return _topology_problems(spec, where, composite=True) + disruption_problems(spec, where, composite=True)


def _composite_template_problems(template: Mapping[str, Any], where: str) -> list[str]:
    """:func:`composite_problems` of a CompositePodGroup template, its disruption mode's nesting
    (:func:`disruption_nesting_problems`), and its children's."""
    problems = composite_problems(template, where) + disruption_nesting_problems(template, where)
    for key, check in (
        ("podGroupTemplates", group_problems),
        ("compositePodGroupTemplates", _composite_template_problems),
    ):
        for j, child in enumerate(_list(template.get(key))):
            problems += check(_map(child), f"{where}.{key}[{j}]")
    return problems


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def disruption_nesting_problems(template: Mapping[str, Any], where: str) -> list[str]:
    """A gang CompositePodGroup template with ``disruptionMode`` all whose children are not all
    components of its one heterogeneous Slurm job: a basic child PodGroup template, or any child
    CompositePodGroup template. Each problem names the child's field (``where`` is the template's
    path). Only a Workload shows the tree: a CompositePodGroup or a PodGroup alone does not."""
    if _disruption(template.get("disruptionMode")) != "all" or not _is_gang(template):
        return []
    problems = [
        f"{where}.podGroupTemplates[{j}].schedulingPolicy (basic) under {where}.disruptionMode (all): "
        + COMPOSITE_ALL_OUTSIDE_WHY
        for j, child in enumerate(_list(template.get("podGroupTemplates")))
        if not _is_gang(_map(child))
    ]
    problems += [
        f"{where}.compositePodGroupTemplates[{j}] under {where}.disruptionMode (all): " + COMPOSITE_ALL_OUTSIDE_WHY
        for j, _ in enumerate(_list(template.get("compositePodGroupTemplates")))
    ]
    return problems


def preemption_warnings(spec: Mapping[str, Any], where: str) -> list[str]:
    """``preemptionPolicy: Never`` (v1beta1 PodGroups, CompositePodGroups and their templates; the
    Priority admission plugin copies it from the PriorityClass): accepted, with a warning that says
    who decides preemption in Slurm. Not a refusal: 1.37 serves the same field at the same version,
    where the bridge accepted it, and most Slurm sites preempt nothing."""
    if spec.get("preemptionPolicy") != "Never":
        return []
    return [f"slurm-bridge: {where}.preemptionPolicy (Never) is {PREEMPT_NEVER_WHY}"]


def workload_preemption_warnings(workload: Mapping[str, Any]) -> list[str]:
    """:func:`preemption_warnings` of each of a Workload's templates, nested ones included."""

    def walk(template: Mapping[str, Any], where: str) -> list[str]:
        found = preemption_warnings(template, where)
        for key in ("podGroupTemplates", "compositePodGroupTemplates"):
            for j, child in enumerate(_list(template.get(key))):
                found += walk(_map(child), f"{where}.{key}[{j}]")
        return found

    spec = _map(workload.get("spec"))
    return [
        w
        for key in ("podGroupTemplates", "compositePodGroupTemplates")
        for i, template in enumerate(_list(spec.get(key)))
        for w in walk(_map(template), f"spec.{key}[{i}]")
    ]


def job_scheduling(job_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A batch Job's ``spec.scheduling`` (Kubernetes 1.37, gate WorkloadWithJob), if it has one."""
    scheduling = job_spec.get("scheduling")
    return scheduling if isinstance(scheduling, Mapping) else None


def job_gang(job_spec: Mapping[str, Any]) -> bool:
    """Whether a Job asks its controller for a gang PodGroup (``spec.scheduling.schedulingPolicy.gang``)."""
    scheduling = job_scheduling(job_spec) or {}
    return isinstance(_map(scheduling.get("schedulingPolicy")).get("gang"), Mapping)


# --- pods that name a group ----------------------------------------------------------------------


def scheduling_group(spec: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod (template) spec names (``spec.schedulingGroup.podGroupName``)."""
    return workloadkinds.scheduling_group_name(spec)


def v1alpha1_workload_ref(spec: Mapping[str, Any]) -> str | None:
    """The Workload a Kubernetes 1.35 pod (template) names in ``spec.workloadRef``."""
    ref = spec.get("workloadRef")
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return str(name) if name else ("?" if ref else None)


V1ALPHA1_WHY: Final = (
    "spec.workloadRef is Kubernetes 1.35's Workload API (scheduling.k8s.io/v1alpha1), which slurm-bridge does "
    f"not read, so the gang would be scheduled pod by pod; on Kubernetes 1.{FIRST_MINOR} or later name a PodGroup "
    "in spec.schedulingGroup.podGroupName, or make the gang a JobSet, a LeaderWorkerSet or a coscheduling PodGroup"
)
