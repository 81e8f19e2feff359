"""Every well-known name the bridge reads or writes, in one place.

Keys shared with the Go slurm-bridge (Slinky) keep its exact spelling and meaning so that
manifests written for it work unchanged here.
"""

from __future__ import annotations

from typing import Final

SLINKY_PREFIX: Final = "slinky.slurm.net/"
SCHEDULER_PREFIX: Final = "scheduler." + SLINKY_PREFIX
SLURMJOB_PREFIX: Final = "slurmjob." + SLINKY_PREFIX

# --- PlaceholderJob CRD -------------------------------------------------------------------
GROUP: Final = "slinky.slurm.net"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PlaceholderJob"
PLURAL: Final = "placeholderjobs"
SHORT_NAME: Final = "phj"

# --- TenantPolicy CRD (cluster-scoped; slurm_bridge/tenancy.py, docs/tenancy.md) ------------------
TP_KIND: Final = "TenantPolicy"
TP_PLURAL: Final = "tenantpolicies"
TP_SHORT_NAME: Final = "tp"
# Conditions on a TenantPolicy: Ready (it selects namespaces no other policy selects and is valid),
# AccountsValid (its accounts and QOS exist in Slurm's accounting, or Unknown when that cannot be read).
TP_COND_READY: Final = "Ready"
TP_COND_ACCOUNTS_VALID: Final = "AccountsValid"
TP_REASON_SELECTED: Final = "NamespacesSelected"
TP_REASON_NO_NAMESPACES: Final = "NoNamespaces"
TP_REASON_CONFLICT: Final = "NamespaceConflict"
TP_REASON_INVALID: Final = "InvalidSpec"
TP_REASON_ACCOUNTS_FOUND: Final = "AccountsFound"
TP_REASON_UNKNOWN_ACCOUNT: Final = "UnknownAccount"
TP_REASON_UNKNOWN_QOS: Final = "UnknownQOS"
TP_REASON_ACCOUNTING_UNAVAILABLE: Final = "AccountingUnavailable"
# Reasons of a PlaceholderJob the bridge refused for its namespace's policy (phase Failed).
REASON_TENANT_POLICY_VIOLATION: Final = "TenantPolicyViolation"
REASON_NO_TENANT_POLICY: Final = "NoTenantPolicy"
REASON_TENANT_POLICY_CONFLICT: Final = "TenantPolicyConflict"
# A PlaceholderJob whose job Slurm refused for its association, account, QOS or wckey twice (Failed).
REASON_SLURM_ASSOCIATION_REJECTED: Final = "SlurmAssociationRejected"
# The Submitted condition's reason after Slurm refused a job for its association, QOS or wckey
# once: the next such refusal of the same spec ends the PlaceholderJob (no retry storm).
REASON_ASSOCIATION_REJECTED: Final = "AssociationRejected"
# Slurm refused the job (status reason, Warning Event; submitted again 30 s later or on a change).
REASON_SUBMIT_REJECTED: Final = "SubmitRejected"
# A gang PlaceholderJob before its job exists: not every member pod yet, or fenced for its submit.
REASON_WAITING_FOR_PODS: Final = "WaitingForPods"
REASON_SUBMITTING: Final = "Submitting"
# The API server refused a member pod's release for good (HTTP 422): Failed, the job cancelled.
REASON_RELEASE_REJECTED: Final = "ReleaseRejected"
# The API server refused to create a pod's PlaceholderJob (HTTP 422): a Warning Event on the pod.
REASON_PHJ_REFUSED: Final = "PlaceholderJobRefused"
# Membership Events on a pod (Warning) while it cannot join its PlaceholderJob yet: its options do
# not make a Slurm job request; its PlaceholderJob's name belongs to another group, or to an earlier
# workload of the same name (garbage collection removes it).
REASON_INVALID_SLURM_OPTIONS: Final = "InvalidSlurmOptions"
REASON_PHJ_NAME_TAKEN: Final = "PlaceholderJobNameTaken"
REASON_WAITING_FOR_OLD_PHJ: Final = "WaitingForOldPlaceholderJob"
# Membership Events on a group's PlaceholderJob: a pod took an ended member's place (and node); a pod
# starts a new run of its group, so the ended PlaceholderJob is deleted and a new one made; the
# workload's settings keep the gang from ever starting (Warning).
REASON_MEMBER_REPLACED: Final = "MemberReplaced"
REASON_REPLACED: Final = "Replaced"
REASON_GANG_WILL_NOT_START: Final = "GangWillNotStart"
# The PlaceholderJob's other status, condition and Event reasons along its life (docs/architecture.md,
# "The PlaceholderJob decision table"). A job Slurm ended is SlurmJob<State> (SlurmJobTimeout, ...).
REASON_SUBMITTED: Final = "Submitted"  # condition Submitted; Event when the job waits in Slurm's queue
REASON_PENDING: Final = "Pending"  # condition Allocated=False while Slurm gives no reason
REASON_ALLOCATED: Final = "Allocated"  # condition Allocated
REASON_PODS_BOUND: Final = "PodsBound"  # condition Ready
REASON_ALLOCATION_MISMATCH: Final = "AllocationMismatch"  # fewer nodes than member pods: Failed
REASON_PODS_SUCCEEDED: Final = "PodsSucceeded"  # every member ended: Completed ...
REASON_PODS_DELETED: Final = "PodsDeleted"  # ... Cancelled ...
REASON_PODS_FAILED: Final = "PodsFailed"  # ... or Failed
REASON_SLURM_JOB_VANISHED: Final = "SlurmJobVanished"  # the job is no longer in Slurm: Failed
REASON_SLURM_JOB_ENDED: Final = "SlurmJobEnded"  # members ended after an end that recorded no reason
REASON_PHJ_DELETED: Final = "PlaceholderJobDeleted"  # members ended because their PlaceholderJob went
REASON_CANCELLED: Final = "Cancelled"  # Event: the deleted PlaceholderJob's job was cancelled
REASON_UPDATE_REJECTED: Final = "UpdateRejected"  # Event: Slurm refused a changed spec for a pending job
REASON_SLURM_ALLOCATED: Final = "SlurmAllocated"  # Event on a pod released after a wait in the queue
# Event on a TenantPolicy when live jobs it selects no longer fit it (they are never cancelled).
REASON_JOBS_OUTSIDE_POLICY: Final = "JobsOutsidePolicy"

# --- Annotations users may set (Go slurm-bridge compatible) --------------------------------
ANN_ACCOUNT: Final = SLURMJOB_PREFIX + "account"
ANN_CONSTRAINTS: Final = SLURMJOB_PREFIX + "constraints"
ANN_CPU_PER_TASK: Final = SLURMJOB_PREFIX + "cpu-per-task"
ANN_EXCLUSIVE: Final = SLURMJOB_PREFIX + "exclusive"
ANN_GRES: Final = SLURMJOB_PREFIX + "gres"
ANN_GROUP_ID: Final = SLURMJOB_PREFIX + "group-id"
ANN_JOB_NAME: Final = SLURMJOB_PREFIX + "job-name"
ANN_LICENSES: Final = SLURMJOB_PREFIX + "licenses"
ANN_MAX_NODES: Final = SLURMJOB_PREFIX + "max-nodes"
ANN_MEM_PER_NODE: Final = SLURMJOB_PREFIX + "mem-per-node"
ANN_MIN_NODES: Final = SLURMJOB_PREFIX + "min-nodes"
ANN_PARTITION: Final = SLURMJOB_PREFIX + "partition"
ANN_PRIORITY: Final = SLURMJOB_PREFIX + "priority"
ANN_QOS: Final = SLURMJOB_PREFIX + "qos"
ANN_RESERVATION: Final = SLURMJOB_PREFIX + "reservation"
ANN_TIMELIMIT: Final = SLURMJOB_PREFIX + "timelimit"
ANN_USER_ID: Final = SLURMJOB_PREFIX + "user-id"
ANN_WCKEY: Final = SLURMJOB_PREFIX + "wckey"

SLURMJOB_ANNOTATIONS: Final = frozenset(
    {
        ANN_ACCOUNT,
        ANN_CONSTRAINTS,
        ANN_CPU_PER_TASK,
        ANN_EXCLUSIVE,
        ANN_GRES,
        ANN_GROUP_ID,
        ANN_JOB_NAME,
        ANN_LICENSES,
        ANN_MAX_NODES,
        ANN_MEM_PER_NODE,
        ANN_MIN_NODES,
        ANN_PARTITION,
        ANN_PRIORITY,
        ANN_QOS,
        ANN_RESERVATION,
        ANN_TIMELIMIT,
        ANN_USER_ID,
        ANN_WCKEY,
    }
)

# --- Names only the bridge writes (reserved: users may not set them) -----------------------
# The Slurm node allocated to a pod (same key as the Go slurm-bridge).
ANN_SLURM_NODE: Final = SLINKY_PREFIX + "slurm-node"
# The Slurm job id of a pod's allocation (label, same key as the Go slurm-bridge).
LABEL_SLURM_JOB_ID: Final = SCHEDULER_PREFIX + "slurm-jobid"
# The PlaceholderJob a pod belongs to: the label holds its name, or for a name longer than a label
# value may be (63) a bounded form of it (kube.label_value); the annotation always the full name.
LABEL_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "placeholderjob"
ANN_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "placeholderjob"
# The Slurm device indices a pod's DRA claim holds, e.g. "gpu:0,2" (slurm_bridge/dra.py).
ANN_SLURM_DEVICES: Final = SLINKY_PREFIX + "slurm-devices"
# A pod of a CompositePodGroup runs in one component of a heterogeneous Slurm job: the job's id (its
# leader's) and the component's offset. The pod's LABEL_SLURM_JOB_ID is the component's own job id.
ANN_SLURM_HET_JOB_ID: Final = SLINKY_PREFIX + "slurm-het-job-id"
ANN_SLURM_HET_OFFSET: Final = SLINKY_PREFIX + "slurm-het-offset"

RESERVED_POD_LABELS: Final = frozenset({LABEL_SLURM_JOB_ID, LABEL_PLACEHOLDER_JOB})
RESERVED_POD_ANNOTATIONS: Final = frozenset(
    {ANN_SLURM_NODE, ANN_SLURM_DEVICES, ANN_PLACEHOLDER_JOB, ANN_SLURM_HET_JOB_ID, ANN_SLURM_HET_OFFSET}
)

# Kubernetes node <-> Slurm node mapping when the names differ (Go slurm-bridge key).
LABEL_SLURM_NODENAME: Final = SLINKY_PREFIX + "slurm-nodename"

# --- Placement (read only; slurm_bridge/nodeplacement.py, docs/annotations.md) ---------------
# A Kubernetes node labelled <prefix><feature>="true" has the Slurm node feature <feature>, so a
# pod's nodeSelector or required node affinity on that label becomes a Slurm constraint.
LABEL_NODE_FEATURE_PREFIX: Final = "feature." + SLINKY_PREFIX
# Kubernetes' node name label and node selector field; their values are read as Slurm node names.
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
# Nodes' operating system (well-known label); "linux" is every Slurm node's.
LABEL_OS: Final = "kubernetes.io/os"
FIELD_NODE_NAME: Final = "metadata.name"

# --- Scheduling gate, taint, finalizers -----------------------------------------------------
SCHEDULING_GATE: Final = SLINKY_PREFIX + "slurm-allocation"
TAINT_MANAGED_NODE: Final = SLINKY_PREFIX + "managed-node"
FINALIZER_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "slurm-job"

# --- Status vocabulary ----------------------------------------------------------------------
PHASE_PENDING: Final = "Pending"
PHASE_ALLOCATED: Final = "Allocated"
PHASE_RUNNING: Final = "Running"
PHASE_COMPLETED: Final = "Completed"
PHASE_FAILED: Final = "Failed"
PHASE_CANCELLED: Final = "Cancelled"
TERMINAL_PHASES: Final = frozenset({PHASE_COMPLETED, PHASE_FAILED, PHASE_CANCELLED})

COND_SUBMITTED: Final = "Submitted"
COND_ALLOCATED: Final = "Allocated"
COND_READY: Final = "Ready"  # every member pod is bound
COND_ENDED: Final = "Ended"

# Event on each waiting member pod and the PlaceholderJob: the Slurm job waits in Slurm's queue,
# with Slurm's reason in words and its expected start (operator/placeholderjobs/lifecycle.py, docs/troubleshooting.md).
EVENT_SLURM_JOB_PENDING: Final = "SlurmJobPending"

# Pod condition set before the bridge ends a pod, as Kubernetes' own evictors do.
POD_COND_DISRUPTION_TARGET: Final = "DisruptionTarget"

# Marker at the start of every Slurm admin_comment the bridge writes; the rest is JSON naming
# the PlaceholderJob, so a restarted bridge finds its jobs instead of submitting again.
ADMIN_COMMENT_PREFIX: Final = "slurm-bridge:"

# --- app.kubernetes.io labels ---------------------------------------------------------------
APP_NAME: Final = "slurm-bridge"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_APP_MANAGED_BY: Final = "app.kubernetes.io/managed-by"

# --- Node sync: cordon/drain <-> Slurm DRAIN/DOWN/FAIL (operator/nodes/controller.py, docs/nodes.md) -----
# Effect of TAINT_MANAGED_NODE (slurm_bridge/taints.py builds the taint and its matching toleration).
TAINT_MANAGED_NODE_EFFECT: Final = "NoExecute"
# Taint naming the state ("drain", "down" or "fail") in which Slurm or an administrator holds the
# node out of service; it is also the bridge's record that it has mirrored that outage.
TAINT_SLURM_STATE: Final = SLINKY_PREFIX + "slurm-state"
TAINT_SLURM_STATE_EFFECT: Final = "NoSchedule"
# Slurm's reason for the state in TAINT_SLURM_STATE, verbatim.
ANN_SLURM_REASON: Final = SLINKY_PREFIX + "slurm-reason"
# Value NODE_SYNC_OWNER: the bridge cordoned this node because Slurm holds it out of service.
ANN_CORDONED_BY: Final = SLINKY_PREFIX + "cordoned-by"
# Value NODE_SYNC_OWNER: the bridge drained the Slurm node because this node is cordoned.
ANN_SLURM_DRAINED_BY: Final = SLINKY_PREFIX + "slurm-drained-by"
NODE_SYNC_OWNER: Final = APP_NAME
# Every Slurm node reason the bridge writes starts with this: a DRAIN is the bridge's own only then.
SLURM_NODE_REASON_PREFIX: Final = "slurm-bridge:"

# --- DRA devices (slurm_bridge/dra.py) -------------------------------------------------------
# Set by the mutating webhook: the pod's DRA requests ({DeviceClass: count}, JSON), taken out of
# its container resources so that kube-scheduler does not pick the devices itself.
ANN_DEVICE_REQUESTS: Final = SLINKY_PREFIX + "device-requests"
# The pod's ResourceClaim entry (spec.resourceClaims[].name) that the webhook adds for them.
POD_CLAIM_ENTRY: Final = "slurm-devices"
# Kubernetes' finalizer on an allocated ResourceClaim (kube-controller-manager lifts it once no
# pod uses the claim any more); the bridge sets it on the claims it allocates, as kube-scheduler does.
RESOURCE_CLAIM_FINALIZER: Final = "resource.kubernetes.io/delete-protection"

# --- Dynamic external nodes: Kubernetes nodes registered in Slurm (operator/nodes/registration.py) ----
# The Go slurm-bridge's keys: a node with this label (any value) is registered in Slurm ...
LABEL_EXTERNAL_NODE: Final = SCHEDULER_PREFIX + "external-node"
# ... in these partitions (a comma list, passed as node features; default: the config's partition)
ANN_EXTERNAL_NODE_PARTITIONS: Final = SCHEDULER_PREFIX + "external-node-partitions"
# ... with this Slurm dynamic topology (the node line's Topology=, e.g. "topo-1:block-2").
ANN_TOPOLOGY_SPEC: Final = "topology.slinky.slurm.net/spec"
# The bridge's record on the Kubernetes node: the Slurm node line it registered (or is about to).
ANN_SLURM_REGISTRATION: Final = SLINKY_PREFIX + "slurm-registration"
# The Slurm node's comment that marks it as registered by the bridge with this bridgeId.
SLURM_NODE_COMMENT_PREFIX: Final = "slurm-bridge:"
# Reasons of the drains that take a registered node out of Slurm. Not SLURM_NODE_REASON_PREFIX:
# the node sync mirrors them as an outage (cordon), and must not lift them as its own.
SLURM_REGISTRATION_REASON_PREFIX: Final = "slurm-bridge-registration:"

# --- Workload grouping (read only; operator/placeholderjobs/grouping/groups.py, docs/workloads.md) --------------------
# A pod's coscheduling PodGroup (scheduler-plugins, scheduling.x-k8s.io/v1alpha1).
LABEL_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
# The condition Kubernetes' built-in PodGroup (scheduling.k8s.io, named by a pod's
# spec.schedulingGroup.podGroupName) reports its gang scheduled with; kube-scheduler sets it for
# the gangs it places, the bridge for those Slurm placed (operator/placeholderjobs/sync/groupconditions.py). v1alpha2
# (Kubernetes 1.36) calls it PodGroupScheduled; v1beta1 (1.37) PodGroupInitiallyScheduled, which
# stays True once True (slurm_bridge/workloadapi.py). The reasons are kube-scheduler's.
PODGROUP_COND_SCHEDULED: Final = "PodGroupScheduled"
PODGROUP_COND_INITIALLY_SCHEDULED: Final = "PodGroupInitiallyScheduled"
PODGROUP_REASON_SCHEDULED: Final = "Scheduled"
PODGROUP_REASON_UNSCHEDULABLE: Final = "Unschedulable"
# The condition a CompositePodGroup (scheduling.k8s.io/v1alpha3, Kubernetes 1.37) reports its
# whole tree scheduled with: kube-scheduler's for the groups it places, the bridge's for the
# heterogeneous Slurm jobs it makes of them (operator/placeholderjobs/grouping/compositereader.py). True is final.
COMPOSITE_COND_SCHEDULED: Final = "CompositePodGroupInitiallyScheduled"
# The LeaderWorkerSet and group a pod belongs to (set by the LeaderWorkerSet controller).
LABEL_LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
