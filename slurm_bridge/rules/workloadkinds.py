"""The workload kinds the bridge knows, in one table, and the rules every component reads off it.

The webhook registers for and validates the kinds whose ``slurmjob.slinky.slurm.net/*``
annotations configure a Slurm job, checking their pod templates like pods (webhook/render.py,
webhook/validate.py); the operator walks a pod's controller owners through the same kinds and
lets the highest one it recognises decide the pod's group
(operator/placeholderjobs/grouping/groups.py). A kind added here is therefore registered,
validated and grouped alike. docs/workloads.md describes the grouping. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from slurm_bridge import names
from slurm_bridge.core import objects

GroupKind = tuple[str, str]  # (API group, kind)
# Where a pod template sits in a workload, key by key; "*" walks a list.
TemplatePath = tuple[str, ...]


@dataclass(frozen=True)
class WorkloadKind:
    group: str
    kind: str
    plural: str
    # Versions the bridge reads objects of this kind at itself, preferred first. Empty: it reads
    # them only as owners, at the version an ownerReference names, or not at all.
    versions: tuple[str, ...] = ()
    # The pod templates a workload of this kind holds.
    pod_templates: tuple[TemplatePath, ...] = ()
    # Its slurmjob annotations configure the Slurm job, so the webhook validates them.
    configures: bool = False
    # Found in a pod's controller owner chain, it decides the pod's group (the highest one wins).
    decides_group: bool = False
    # The PlaceholderJob of a group it roots is a gang (spec.group.kind names it).
    gang: bool = False
    # A controller that makes pods from its template for ever (a ReplicaSet replaces every pod
    # refused or failed): each pod is its own Slurm job, with this object's slurmjob annotations as
    # its options when it is the highest controller (operator/placeholderjobs/grouping/groups.py).
    # The webhook reviews it like a workload, so what would refuse its pods refuses it instead.
    makes_pods: bool = False

    @property
    def group_kind(self) -> GroupKind:
        return (self.group, self.kind)

    @property
    def api_version(self) -> str:
        """The preferred version the bridge reads this kind at, as ``group/version``."""
        return f"{self.group}/{self.versions[0]}" if self.group else self.versions[0]


JOB: Final = WorkloadKind(
    "batch", "Job", "jobs", pod_templates=(("spec", "template"),), configures=True, decides_group=True
)
JOBSET: Final = WorkloadKind(
    "jobset.x-k8s.io",
    "JobSet",
    "jobsets",
    pod_templates=(("spec", "replicatedJobs", "*", "template", "spec", "template"),),
    configures=True,
    decides_group=True,
    gang=True,
)
LWS: Final = WorkloadKind(
    "leaderworkerset.x-k8s.io",
    "LeaderWorkerSet",
    "leaderworkersets",
    pod_templates=(
        ("spec", "leaderWorkerTemplate", "leaderTemplate"),
        ("spec", "leaderWorkerTemplate", "workerTemplate"),
    ),
    configures=True,
    decides_group=True,
    gang=True,
)
# The coscheduling PodGroup (scheduler-plugins), named by a pod's LABEL_POD_GROUP label.
PODGROUP: Final = WorkloadKind(
    "scheduling.x-k8s.io", "PodGroup", "podgroups", versions=("v1alpha1",), configures=True, gang=True
)
# The Kubernetes Workload API (feature gate GenericWorkload): a pod names its built-in PodGroup in
# spec.schedulingGroup; operator/placeholderjobs/grouping/groups.py merges the PodGroup's, its controller's and the
# Workload's annotations. v1beta1 is Kubernetes 1.37's, v1alpha2 1.36's; the bridge reads whichever
# the API server serves, preferring the first, and slurm_bridge/kube/schedulingapi.py hides their shapes.
WORKLOAD_API_VERSIONS: Final = ("v1beta1", "v1alpha2")
WORKLOAD: Final = WorkloadKind(
    "scheduling.k8s.io", "Workload", "workloads", versions=WORKLOAD_API_VERSIONS, configures=True
)
SCHED_PODGROUP: Final = WorkloadKind(
    "scheduling.k8s.io", "PodGroup", "podgroups", versions=WORKLOAD_API_VERSIONS, configures=True, gang=True
)
POD: Final = WorkloadKind("", "Pod", "pods")
# Feature gate CompositePodGroup: a PodGroup names its parent in spec.parentCompositePodGroupName;
# a gang of gang PodGroups is one heterogeneous Slurm job
# (operator/placeholderjobs/grouping/compositepodgroups.py). Kubernetes 1.38 serves it at
# v1beta1, 1.37 at v1alpha3 (the same fields where the bridge reads); the newest served is read.
COMPOSITE_PODGROUP_VERSIONS: Final = ("v1beta1", "v1alpha3")
COMPOSITE_PODGROUP: Final = WorkloadKind(
    "scheduling.k8s.io",
    "CompositePodGroup",
    "compositepodgroups",
    versions=COMPOSITE_PODGROUP_VERSIONS,
    configures=True,
    gang=True,
)

_TEMPLATE: Final[tuple[TemplatePath, ...]] = (("spec", "template"),)

# Every kind, in the order the webhook registers them; the last ones commonly own pods and are
# listed so that the operator's owner walk needs no discovery call for them.
KINDS: Final[tuple[WorkloadKind, ...]] = (
    JOB,
    JOBSET,
    LWS,
    PODGROUP,
    WORKLOAD,
    SCHED_PODGROUP,
    POD,
    COMPOSITE_PODGROUP,
    WorkloadKind("", "ReplicationController", "replicationcontrollers", pod_templates=_TEMPLATE, makes_pods=True),
    WorkloadKind("batch", "CronJob", "cronjobs"),
    WorkloadKind("apps", "ReplicaSet", "replicasets", pod_templates=_TEMPLATE, makes_pods=True),
    WorkloadKind("apps", "StatefulSet", "statefulsets", pod_templates=_TEMPLATE, makes_pods=True),
    WorkloadKind("apps", "Deployment", "deployments", pod_templates=_TEMPLATE, makes_pods=True),
    WorkloadKind("apps", "DaemonSet", "daemonsets", pod_templates=_TEMPLATE, makes_pods=True),
)

# Derived views: what each component asks of the table.
CONFIGURING: Final[tuple[WorkloadKind, ...]] = tuple(k for k in KINDS if k.configures)
POD_TEMPLATES: Final[Mapping[GroupKind, tuple[TemplatePath, ...]]] = {
    k.group_kind: k.pod_templates for k in CONFIGURING
}
# What the validating webhook reviews: the configuring kinds and the pod-making controllers, with
# the pod templates of each (webhook/render.py, webhook/validate.py).
VALIDATED: Final[tuple[WorkloadKind, ...]] = tuple(k for k in KINDS if k.configures or k.makes_pods)
VALIDATED_TEMPLATES: Final[Mapping[GroupKind, tuple[TemplatePath, ...]]] = {
    k.group_kind: k.pod_templates for k in VALIDATED
}
MAKES_PODS: Final[frozenset[GroupKind]] = frozenset(k.group_kind for k in KINDS if k.makes_pods)
PLURALS: Final[Mapping[GroupKind, str]] = {k.group_kind: k.plural for k in KINDS}
DECIDES_GROUP: Final[frozenset[GroupKind]] = frozenset(k.group_kind for k in KINDS if k.decides_group)
GANG_KINDS: Final[frozenset[str]] = frozenset(k.kind for k in KINDS if k.gang)


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


def group_kind(obj_or_ref: Mapping[str, Any]) -> GroupKind:
    return (api_group(str(obj_or_ref.get("apiVersion", ""))), str(obj_or_ref.get("kind", "")))


def slurmjob_annotations(annotations: Mapping[str, Any] | None) -> dict[str, str]:
    """The ``slurmjob.slinky.slurm.net/*`` annotations among ``annotations``: the ones that
    configure a Slurm job."""
    return {k: str(v) for k, v in (annotations or {}).items() if k.startswith(names.SLURMJOB_PREFIX)}


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The object's controller ownerReference (the owner a pod's group is looked up through)."""
    return next((dict(ref) for ref in objects.owner_references(obj) if ref.get("controller")), None)


def scheduling_group_name(spec: Mapping[str, Any]) -> str | None:
    """The built-in PodGroup a pod (template) spec names in ``schedulingGroup.podGroupName``."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    return str(name) if name else None
