"""Condition types: the PlaceholderJob's, the TenantPolicy's, the one set on pods the bridge ends,
and the scheduled conditions of PodGroups and CompositePodGroups."""

from typing import Final

# Conditions on a TenantPolicy: Ready (it selects namespaces no other policy selects and is valid),
# AccountsValid (its accounts and QOS exist in Slurm's accounting, or Unknown when that cannot be read).
TP_COND_READY: Final = "Ready"
TP_COND_ACCOUNTS_VALID: Final = "AccountsValid"
COND_SUBMITTED: Final = "Submitted"
COND_ALLOCATED: Final = "Allocated"
COND_READY: Final = "Ready"  # every member pod is bound
COND_ENDED: Final = "Ended"
# Whether the Slurm job has spec.slurm of the condition's observedGeneration: True once a change
# was sent to the pending job (or found applied), False with why not (docs/annotations.md).
COND_SPEC_APPLIED: Final = "SpecApplied"
# Pod condition set before the bridge ends a pod, as Kubernetes' own evictors do.
POD_COND_DISRUPTION_TARGET: Final = "DisruptionTarget"
# The condition Kubernetes' built-in PodGroup (scheduling.k8s.io, named by a pod's
# spec.schedulingGroup.podGroupName) reports its gang scheduled with; kube-scheduler sets it for
# the gangs it places, the bridge for those Slurm placed (operator/placeholderjobs/sync/groupconditions.py). v1alpha2
# (Kubernetes 1.36) calls it PodGroupScheduled; v1beta1 (1.37) PodGroupInitiallyScheduled, which
# stays True once True (slurm_bridge/kube/schedulingapi.py). The reasons are kube-scheduler's.
PODGROUP_COND_SCHEDULED: Final = "PodGroupScheduled"
PODGROUP_COND_INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"
# The condition a CompositePodGroup (scheduling.k8s.io/v1beta1 on Kubernetes 1.38, v1alpha3 on 1.37) reports its
# whole tree scheduled with: kube-scheduler's for the groups it places, the bridge's for the
# heterogeneous Slurm jobs it makes of them (operator/placeholderjobs/grouping/compositereader.py). True is final.
COMPOSITE_COND_SCHEDULED: Final = "CompositePodGroupInitiallyScheduled"
# Kubernetes' condition and reason on a PodGroup or CompositePodGroup whose gang is being preempted
# (kube-scheduler's workload-aware preemption): the bridge sets them when Slurm preempts the gang's
# job (operator/placeholderjobs/sync/groupconditions.py).
GROUP_COND_DISRUPTION_TARGET: Final = "DisruptionTarget"
GROUP_REASON_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
# Node condition (the node controller's, on every Kubernetes node that is a Slurm node): whether the
# CPUs and memory Slurm may allocate there fit in the kubelet's allocatable minus what pods the
# bridge does not place request (docs/colocation.md).
NODE_COND_SLURM_RESOURCES_FIT: Final = "SlurmResourcesFit"
# Whether Slurm's GPUs on a node (gres.conf) and the NVIDIA DRA driver's ResourceSlices describe the
# same devices (docs/gpus.md): False after a MIG layout change until both sides agree again.
NODE_COND_SLURM_DEVICES_MATCH: Final = "SlurmDevicesMatch"
