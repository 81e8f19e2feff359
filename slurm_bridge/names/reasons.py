"""Every reason the bridge gives: of its Events (on pods, PlaceholderJobs, nodes, TenantPolicies), of
its conditions, and of a pod's wait for its group (docs/troubleshooting.md lists them). A reason is
CamelCase and says what happened. Code passes these names, never a literal:
tests/unit/names/test_names_by_kind.py checks every call that carries a reason, and that no reason's value is
written anywhere else.
"""

from typing import Final

# --- TenantPolicy conditions (Ready, AccountsValid) and Events --------------------------------------
TP_REASON_SELECTED: Final = "NamespacesSelected"
TP_REASON_NO_NAMESPACES: Final = "NoNamespaces"
TP_REASON_CONFLICT: Final = "NamespaceConflict"
TP_REASON_INVALID: Final = "InvalidSpec"
TP_REASON_ACCOUNTS_FOUND: Final = "AccountsFound"
TP_REASON_UNKNOWN_ACCOUNT: Final = "UnknownAccount"
TP_REASON_UNKNOWN_QOS: Final = "UnknownQOS"
TP_REASON_ACCOUNTING_UNAVAILABLE: Final = "AccountingUnavailable"
# Event on a TenantPolicy when live jobs it selects no longer fit it (they are never cancelled).
REASON_JOBS_OUTSIDE_POLICY: Final = "JobsOutsidePolicy"

# --- A PlaceholderJob's life (docs/design/placeholderjob-lifecycle.md, "The PlaceholderJob decision table") -
# Refused for its namespace's policy (phase Failed).
REASON_TENANT_POLICY_VIOLATION: Final = "TenantPolicyViolation"
REASON_NO_TENANT_POLICY: Final = "NoTenantPolicy"
REASON_TENANT_POLICY_CONFLICT: Final = "TenantPolicyConflict"
# A job field only a Slurm operator may set (priority), asked for in a namespace no TenantPolicy
# selects while the config's untenantedOperatorFields does not list it (docs/security.md).
REASON_OPERATOR_FIELD_REFUSED: Final = "OperatorFieldRefused"
# A tenant's job the bridge would queue with its own token (a heterogeneous job, a group that is not
# the user's primary one) in a partition its tenant could not submit to (RootOnly): Failed, nothing
# submitted (slurm_bridge/rules/partitionaccess.py).
REASON_PARTITION_REFUSES_TENANT: Final = "PartitionRefusesTenant"
# A PlaceholderJob whose job Slurm refused for its association, account, QOS or wckey twice (Failed).
REASON_SLURM_ASSOCIATION_REJECTED: Final = "SlurmAssociationRejected"
# The Submitted condition's reason after Slurm refused a job for its association, QOS or wckey
# once: the next such refusal of the same spec ends the PlaceholderJob (no retry storm).
REASON_ASSOCIATION_REJECTED: Final = "AssociationRejected"
# Slurm refused the job (status reason, Warning Event; submitted again 30 s later or on a change);
# the live member pods hear it as SlurmSubmitRejected.
REASON_SUBMIT_REJECTED: Final = "SubmitRejected"
REASON_SLURM_SUBMIT_REJECTED: Final = "SlurmSubmitRejected"
# A group's PlaceholderJob before its job exists: not every member pod yet, or fenced for its submit.
REASON_WAITING_FOR_PODS: Final = "WaitingForPods"
REASON_SUBMITTING: Final = "Submitting"
# The API server refused a member pod's release for good (HTTP 422): Failed, the job cancelled.
REASON_RELEASE_REJECTED: Final = "ReleaseRejected"
REASON_SUBMITTED: Final = "Submitted"  # condition Submitted; Event when the job waits in Slurm's queue
REASON_PENDING: Final = "Pending"  # condition Allocated=False while Slurm gives no reason
REASON_ALLOCATED: Final = "Allocated"  # condition Allocated
REASON_PODS_BOUND: Final = "PodsBound"  # condition Ready
REASON_ALLOCATION_MISMATCH: Final = "AllocationMismatch"  # fewer nodes than member pods: Failed
# What Slurm holds for the job is less than its pods need (its owner changed it with scontrol
# update: rules/allocationmatch.py). Before the release: Failed, the job cancelled, no pod released.
# Under released or bound pods: Failed, their nodes drained naming them, the pods ended, the job
# cancelled once they stopped.
REASON_ALLOCATION_SHORT: Final = "SlurmAllocationShort"
REASON_ALLOCATION_CHANGED: Final = "SlurmAllocationChanged"
REASON_PODS_SUCCEEDED: Final = "PodsSucceeded"  # every member ended: Completed ...
REASON_PODS_DELETED: Final = "PodsDeleted"  # ... Cancelled ...
REASON_PODS_FAILED: Final = "PodsFailed"  # ... or Failed
REASON_SLURM_JOB_VANISHED: Final = "SlurmJobVanished"  # the job is no longer in Slurm: Failed
REASON_SLURM_JOB_ENDED: Final = "SlurmJobEnded"  # members ended after an end that recorded no reason
REASON_PHJ_DELETED: Final = "PlaceholderJobDeleted"  # members ended because their PlaceholderJob went
REASON_CANCELLED: Final = "Cancelled"  # Event: the deleted PlaceholderJob's job was cancelled
REASON_UPDATE_REJECTED: Final = "UpdateRejected"  # Event: Slurm refused a changed spec for a pending job
# A changed spec or slurmjob annotation and its pending Slurm job (docs/annotations.md, "Changing
# annotations"): applied (Event, condition SpecApplied=True); not sent, because the bridge's checks
# refuse it (a key fixed once the job is submitted, the partition's limits, a value Slurm cannot go
# back to); or too late, because Slurm allocated the job before the change reached it.
REASON_SLURM_JOB_UPDATED: Final = "SlurmJobUpdated"
REASON_UPDATE_NOT_APPLIED: Final = "UpdateNotApplied"
REASON_UPDATE_TOO_LATE: Final = "UpdateTooLate"
REASON_SLURM_ALLOCATED: Final = "SlurmAllocated"  # Event on a pod released after a wait in the queue
# Event on each waiting member pod and the PlaceholderJob: the Slurm job waits in Slurm's queue,
# with Slurm's reason in words and its expected start (docs/troubleshooting.md).
EVENT_SLURM_JOB_PENDING: Final = "SlurmJobPending"
# Slurm ended the job under live pods: SlurmJob<State>, the phase it gives (slurm_job_ended).
REASON_SLURM_JOB_COMPLETED: Final = "SlurmJobCompleted"
REASON_SLURM_JOB_CANCELLED: Final = "SlurmJobCancelled"
REASON_SLURM_JOB_TIMEOUT: Final = "SlurmJobTimeout"
REASON_SLURM_JOB_NODE_FAIL: Final = "SlurmJobNodeFail"
REASON_SLURM_JOB_PREEMPTED: Final = "SlurmJobPreempted"
REASON_SLURM_JOB_BOOT_FAIL: Final = "SlurmJobBootFail"
REASON_SLURM_JOB_DEADLINE: Final = "SlurmJobDeadline"
REASON_SLURM_JOB_OUT_OF_MEMORY: Final = "SlurmJobOutOfMemory"
REASON_SLURM_JOB_FAILED: Final = "SlurmJobFailed"
SLURM_JOB_ENDED: Final = {
    "COMPLETED": REASON_SLURM_JOB_COMPLETED,
    "CANCELLED": REASON_SLURM_JOB_CANCELLED,
    "TIMEOUT": REASON_SLURM_JOB_TIMEOUT,
    "NODE_FAIL": REASON_SLURM_JOB_NODE_FAIL,
    "PREEMPTED": REASON_SLURM_JOB_PREEMPTED,
    "BOOT_FAIL": REASON_SLURM_JOB_BOOT_FAIL,
    "DEADLINE": REASON_SLURM_JOB_DEADLINE,
    "OUT_OF_MEMORY": REASON_SLURM_JOB_OUT_OF_MEMORY,
    "FAILED": REASON_SLURM_JOB_FAILED,
}


# The handoff (docs/colocation.md): the bridge ends the pods itself ahead of Slurm, and releases the
# job once their containers stopped. SlurmJobPreempted (above) when Slurm chose the job as a
# preemption victim (its QOS GraceTime runs); SlurmTimeLimitReached when the job's time limit (plus
# the partition's OverTimeLimit) leaves no more than the pods' grace period and the margin.
REASON_SLURM_TIME_LIMIT_REACHED: Final = "SlurmTimeLimitReached"
# Events on a pod (and its node) while its Slurm job ended under it: the job's cores are held by a
# handoff reservation until its containers stop; the pod outlived its grace period and the margin,
# so its node is drained in Slurm; the drain is lifted once the pod is gone.
REASON_HANDOFF_HELD: Final = "SlurmHandoffHeld"
REASON_HANDOFF_NODE_DRAINED: Final = "HandoffNodeDrained"
REASON_HANDOFF_NODE_UNDRAINED: Final = "HandoffNodeUndrained"
# Events on a pod that runs on a Slurm node without holding a Slurm allocation there, and on its
# node: the Slurm node is drained, and the drain lifted once no such pod is left (docs/nodes.md).
REASON_UNALLOCATED_POD_NODE_DRAINED: Final = "UnallocatedPodNodeDrained"
REASON_UNALLOCATED_POD_NODE_UNDRAINED: Final = "UnallocatedPodNodeUndrained"
# Events on a node one of whose GPUs (a device the bridge maps to Slurm GRES) is tainted NoSchedule or
# NoExecute in its ResourceSlice or by a DeviceTaintRule: the Slurm node is drained naming the device
# and taint, and the drain lifted once no such taint is left (docs/gpus.md, "Device taints").
REASON_DEVICE_TAINT_NODE_DRAINED: Final = "DeviceTaintNodeDrained"
REASON_DEVICE_TAINT_NODE_UNDRAINED: Final = "DeviceTaintNodeUndrained"
# Member pods vanished while they ran: their job is held until their grace period passed.
REASON_PODS_VANISHED: Final = "PodsVanished"

# --- Only what is the bridge's (issue 36, section 6) --------------------------------------------------
# Event on a pod that names the bridge's scheduler in a namespace the bridge does not manage: the
# webhook never admitted it, so no PlaceholderJob and no Slurm job is made for it (and the extender
# never binds it). Once per pod.
REASON_NAMESPACE_NOT_MANAGED: Final = "NamespaceNotManaged"
# A job not submitted because every node it requires has SlurmResourcesFit=False (status reason
# SubmitRejected with this in the message; retried as a refusal is).
REASON_NODES_DO_NOT_FIT: Final = "SlurmNodesDoNotFit"
# Slurm allocated the job, but kube-scheduler did not bind its released pods within
# bindTimeoutSeconds: the PlaceholderJob ends Failed, its pods are ended, the job is released.
REASON_ALLOCATION_NOT_BOUND: Final = "AllocationNotBound"


def slurm_job_ended(state: str) -> str:
    """The reason for a job Slurm ended in ``state``: SlurmJob<State>, also for a state Slurm adds."""
    return SLURM_JOB_ENDED.get(state) or "SlurmJob" + state.title().replace("_", "")


# --- A pod and its PlaceholderJob (the membership) --------------------------------------------------
# The API server refused to create a pod's PlaceholderJob (HTTP 422): a Warning Event on the pod.
REASON_PHJ_REFUSED: Final = "PlaceholderJobRefused"
# Warning Events on a pod while it cannot join its PlaceholderJob yet: its options do not make a
# Slurm job request; its PlaceholderJob's name belongs to another group, or to an earlier workload
# of the same name (garbage collection removes it); its gang's or its component's job was submitted
# for other pods, none of which ended.
REASON_INVALID_SLURM_OPTIONS: Final = "InvalidSlurmOptions"
REASON_PHJ_NAME_TAKEN: Final = "PlaceholderJobNameTaken"
REASON_WAITING_FOR_OLD_PHJ: Final = "WaitingForOldPlaceholderJob"
REASON_GANG_FULL: Final = "GangFull"
REASON_COMPOSITE_FULL: Final = "CompositeFull"
# Events on a group's PlaceholderJob: a pod took an ended member's place (and node); a pod starts a
# new run of its group, so the ended PlaceholderJob is deleted and a new one made; the workload's
# settings keep the gang from ever starting (Warning).
REASON_MEMBER_REPLACED: Final = "MemberReplaced"
REASON_REPLACED: Final = "Replaced"
REASON_GANG_WILL_NOT_START: Final = "GangWillNotStart"
# Preempted work comes back at its place (docs/colocation.md, "Preemption"): on a preempted
# PlaceholderJob, whether its workload's replacement gets its place (PlaceKept) or not (PlaceNotKept,
# with why); on the replacement's PlaceholderJob, whose place its new job took (ResumedAtPlace).
REASON_PLACE_KEPT: Final = "PlaceKept"
REASON_PLACE_NOT_KEPT: Final = "PlaceNotKept"
REASON_RESUMED_AT_PLACE: Final = "ResumedAtPlace"

# --- Why a pod's group cannot be known yet (the pod waits gated, with a Warning Event) --------------
# The owner walk (a pod's controllers, up to its workload).
REASON_OWNER_CHAIN_TOO_DEEP: Final = "OwnerChainTooDeep"
REASON_OWNER_CHAIN_LOOP: Final = "OwnerChainLoop"
REASON_OWNER_FORBIDDEN: Final = "OwnerForbidden"
REASON_OWNER_UNREADABLE: Final = "OwnerUnreadable"
REASON_OWNER_NOT_FOUND: Final = "OwnerNotFound"
REASON_OWNER_KIND_NOT_SERVED: Final = "OwnerKindNotServed"
REASON_LWS_GROUP_UNKNOWN: Final = "LeaderWorkerSetGroupUnknown"
# A PodGroup (coscheduling or built-in), Workload or CompositePodGroup the group depends on: missing,
# not readable by the bridge, not readable; a PodGroup the bridge cannot place; a gang
# CompositePodGroup inside another.
REASON_PODGROUP_NOT_FOUND: Final = "PodGroupNotFound"
REASON_PODGROUP_FORBIDDEN: Final = "PodGroupForbidden"
REASON_PODGROUP_UNREADABLE: Final = "PodGroupUnreadable"
REASON_PODGROUP_UNSUPPORTED: Final = "PodGroupUnsupported"
REASON_WORKLOAD_NOT_FOUND: Final = "WorkloadNotFound"
REASON_WORKLOAD_FORBIDDEN: Final = "WorkloadForbidden"
REASON_WORKLOAD_UNREADABLE: Final = "WorkloadUnreadable"
REASON_COMPOSITE_NOT_FOUND: Final = "CompositePodGroupNotFound"
REASON_COMPOSITE_FORBIDDEN: Final = "CompositePodGroupForbidden"
REASON_COMPOSITE_UNREADABLE: Final = "CompositePodGroupUnreadable"
REASON_NESTED_COMPOSITE: Final = "NestedCompositePodGroup"
# The group object's kind -> (missing, forbidden, unreadable).
GROUP_OBJECT_PROBLEMS: Final = {
    "PodGroup": (REASON_PODGROUP_NOT_FOUND, REASON_PODGROUP_FORBIDDEN, REASON_PODGROUP_UNREADABLE),
    "Workload": (REASON_WORKLOAD_NOT_FOUND, REASON_WORKLOAD_FORBIDDEN, REASON_WORKLOAD_UNREADABLE),
    "CompositePodGroup": (REASON_COMPOSITE_NOT_FOUND, REASON_COMPOSITE_FORBIDDEN, REASON_COMPOSITE_UNREADABLE),
}
# The cluster does not serve (or the bridge cannot discover) the Workload or CompositePodGroup API.
REASON_WORKLOAD_API_NOT_SERVED: Final = "WorkloadAPINotServed"
REASON_WORKLOAD_API_UNREADABLE: Final = "WorkloadAPIUnreadable"
REASON_COMPOSITE_API_NOT_SERVED: Final = "CompositePodGroupAPINotServed"
REASON_COMPOSITE_API_UNREADABLE: Final = "CompositePodGroupAPIUnreadable"

# --- DRA devices at release (a Warning Event on the pod and its PlaceholderJob) ---------------------
REASON_SLURM_DEVICES_NOT_FOUND: Final = "SlurmDevicesNotFound"
REASON_SLURM_DEVICES_NOT_BOUND: Final = "SlurmDevicesNotBound"

# --- PodGroup and CompositePodGroup scheduled conditions (kube-scheduler's reasons) -----------------
PODGROUP_REASON_SCHEDULED: Final = "Scheduled"
PODGROUP_REASON_UNSCHEDULABLE: Final = "Unschedulable"

# --- Nodes: Kubernetes cordon <-> Slurm DRAIN (docs/nodes.md), Events on the Node --------------------
REASON_MANAGED_TAINT_ADDED: Final = "ManagedTaintAdded"
REASON_MANAGED_TAINT_REMOVED: Final = "ManagedTaintRemoved"
REASON_SLURM_NODE_OUT_OF_SERVICE: Final = "SlurmNodeOutOfService"
REASON_SLURM_NODE_IN_SERVICE: Final = "SlurmNodeInService"
REASON_CORDONED_FOR_SLURM: Final = "CordonedForSlurm"
REASON_UNCORDONED_FOR_SLURM: Final = "UncordonedForSlurm"
REASON_CORDON_RELEASED: Final = "CordonReleased"
REASON_SLURM_DRAIN_ADOPTED: Final = "SlurmDrainAdopted"
REASON_SLURM_DRAIN_RELEASED: Final = "SlurmDrainReleased"
REASON_SLURM_NODE_DRAINED: Final = "SlurmNodeDrained"
REASON_SLURM_NODE_UNDRAINED: Final = "SlurmNodeUndrained"

# --- Dynamic nodes: Kubernetes nodes registered in Slurm (docs/nodes.md), Events on the Node ---------
REASON_SLURM_NODE_REGISTERED: Final = "SlurmNodeRegistered"
REASON_SLURM_NODE_ADOPTED: Final = "SlurmNodeAdopted"
REASON_SLURM_NODE_LEAVING: Final = "SlurmNodeLeaving"
REASON_SLURM_NODE_DEREGISTERED: Final = "SlurmNodeDeregistered"
REASON_SLURM_NODE_NOT_REGISTERED: Final = "SlurmNodeNotRegistered"
REASON_SLURM_NODE_REGISTRATION_FAILED: Final = "SlurmNodeRegistrationFailed"

# --- The SlurmResourcesFit node condition (docs/colocation.md): its reasons, and the Events of its
# changes on the Node (Warning when Slurm's size no longer fits) ------------------------------------
REASON_SLURM_SIZE_FITS: Final = "SlurmSizeFits"
REASON_SLURM_SIZE_EXCEEDS: Final = "SlurmSizeExceedsAllocatable"

# --- The SlurmDevicesMatch node condition (docs/gpus.md), and the Events of its changes -------------
REASON_SLURM_DEVICES_MATCH: Final = "SlurmDevicesMatch"
REASON_SLURM_DEVICES_DIFFER: Final = "SlurmDevicesDiffer"
# Node Event: a Slurm node's place in a topology (its Topology=) cannot be a node label
# (docs/nodes.md#network-topology).
REASON_TOPOLOGY_NOT_LABELLED: Final = "SlurmTopologyNotLabelled"
