"""Annotations: those users set on pods and workloads to configure a Slurm job (the Go
slurm-bridge's keys), those only the bridge writes (reserved: users may not set them), and its
markers on nodes."""

from typing import Final

from slurm_bridge.names.prefixes import SCHEDULER_PREFIX, SLINKY_PREFIX, SLURMJOB_PREFIX

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
# How the job shares its nodes with other Slurm jobs (native ones too): one of NODE_SHARING_MODES,
# overriding the config's nodeSharing for this pod or workload (docs/colocation.md).
ANN_NODE_SHARING: Final = SLURMJOB_PREFIX + "node-sharing"
# Its values, which are also the config key nodeSharing's: whole nodes; nodes shared with other
# bridge jobs but taken in turns with native jobs (Slurm's MCS label); core by core with any job.
NODE_SHARING_EXCLUSIVE: Final = "exclusive"
NODE_SHARING_TIME_SHARED: Final = "timeShared"
NODE_SHARING_CO_RESIDENT: Final = "coResident"
NODE_SHARING_MODES: Final = (NODE_SHARING_EXCLUSIVE, NODE_SHARING_TIME_SHARED, NODE_SHARING_CO_RESIDENT)
ANN_PARTITION: Final = SLURMJOB_PREFIX + "partition"
ANN_PRIORITY: Final = SLURMJOB_PREFIX + "priority"
ANN_QOS: Final = SLURMJOB_PREFIX + "qos"
ANN_RESERVATION: Final = SLURMJOB_PREFIX + "reservation"
ANN_TIMELIMIT: Final = SLURMJOB_PREFIX + "timelimit"
# A gang placed within one unit of a Slurm topology: its value is the node label key
# LABEL_TOPOLOGY_PREFIX + <topology> (docs/workloads.md#topology), as in schedulingConstraints.topology.
ANN_TOPOLOGY: Final = SLURMJOB_PREFIX + "topology"
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
        ANN_NODE_SHARING,
        ANN_PARTITION,
        ANN_PRIORITY,
        ANN_QOS,
        ANN_RESERVATION,
        ANN_TIMELIMIT,
        ANN_TOPOLOGY,
        ANN_USER_ID,
        ANN_WCKEY,
    }
)
# The Slurm node allocated to a pod (same key as the Go slurm-bridge).
ANN_SLURM_NODE: Final = SLINKY_PREFIX + "slurm-node"
ANN_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "placeholderjob"
# On a PlaceholderJob: the slurmjob annotations its spec.slurm was last made from (JSON; a
# CompositePodGroup's: by component PodGroup), so a later change of them is found and said once
# (operator/placeholderjobs/reconfigure.py, docs/annotations.md "Changing annotations").
ANN_JOB_OPTIONS: Final = SCHEDULER_PREFIX + "job-options"
# On a PlaceholderJob: its member pods that vanished while they ran (their objects removed before a
# terminal phase), each with the time its containers have stopped at the latest (JSON {pod: RFC
# 3339}); its Slurm job is released only after them (docs/colocation.md, "A pod that vanishes").
ANN_VANISHED_PODS: Final = SCHEDULER_PREFIX + "vanished-pods"
# The Slurm device indices a pod's DRA claim holds, e.g. "gpu:0,2" (slurm_bridge/rules/dra/claims.py).
ANN_SLURM_DEVICES: Final = SLINKY_PREFIX + "slurm-devices"
# A pod of a CompositePodGroup runs in one component of a heterogeneous Slurm job: the job's id (its
# leader's) and the component's offset. The pod's LABEL_SLURM_JOB_ID is the component's own job id.
ANN_SLURM_HET_JOB_ID: Final = SLINKY_PREFIX + "slurm-het-job-id"
ANN_SLURM_HET_OFFSET: Final = SLINKY_PREFIX + "slurm-het-offset"
# On a released pod: its Slurm job's node sharing (one of NODE_SHARING_MODES), so that admission can
# refuse a resize of a pod whose limits are its job's size (coResident; docs/colocation.md).
ANN_JOB_NODE_SHARING: Final = SCHEDULER_PREFIX + "job-node-sharing"
# On a PlaceholderJob whose pods replace a preempted workload's: the place it took (JSON of
# slurm_bridge/rules/resume.py's Place: the preempted job, its priority, when and by whom), which its
# Slurm job gets (docs/colocation.md, "Preemption"). Written by the bridge at the PlaceholderJob's create.
ANN_RESUMES: Final = SCHEDULER_PREFIX + "resumes"
RESERVED_POD_ANNOTATIONS: Final = frozenset(
    {
        ANN_SLURM_NODE,
        ANN_SLURM_DEVICES,
        ANN_PLACEHOLDER_JOB,
        ANN_SLURM_HET_JOB_ID,
        ANN_SLURM_HET_OFFSET,
        ANN_JOB_NODE_SHARING,
    }
)
# Slurm's reason for the state in TAINT_SLURM_STATE, verbatim.
ANN_SLURM_REASON: Final = SLINKY_PREFIX + "slurm-reason"
# Value NODE_SYNC_OWNER: the bridge cordoned this node because Slurm holds it out of service.
ANN_CORDONED_BY: Final = SLINKY_PREFIX + "cordoned-by"
# Value NODE_SYNC_OWNER: the bridge drained the Slurm node because this node is cordoned.
ANN_SLURM_DRAINED_BY: Final = SLINKY_PREFIX + "slurm-drained-by"
# Set by the mutating webhook: the pod's DRA requests ({DeviceClass: count}, JSON), taken out of
# its container resources so that kube-scheduler does not pick the devices itself.
ANN_DEVICE_REQUESTS: Final = SLINKY_PREFIX + "device-requests"
# Kubernetes': on a ResourceClaim its controller generated for a pod from a ResourceClaimTemplate,
# the pod's claim entry; such a claim is that pod's alone (docs/security.md, "Devices").
ANN_K8S_POD_CLAIM_NAME: Final = "resource.kubernetes.io/pod-claim-name"
# Kubernetes': on a mirror pod, the static pod its kubelet runs from a file (a node daemon the
# node guard allows on Slurm's nodes: operator/nodeguard/).
ANN_K8S_CONFIG_MIRROR: Final = "kubernetes.io/config.mirror"
# Kubernetes': on an Indexed Job's pod, its completion index (set by the Job controller): the slot a
# preempted pod's replacement takes back (slurm_bridge/rules/resume.py).
ANN_K8S_JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
# ... in these partitions (a comma list, passed as node features; default: the config's partition)
ANN_EXTERNAL_NODE_PARTITIONS: Final = SCHEDULER_PREFIX + "external-node-partitions"
# ... with this Slurm dynamic topology (the node line's Topology=, e.g. "topo-1:block-2").
ANN_TOPOLOGY_SPEC: Final = "topology.slinky.slurm.net/spec"
# The bridge's record on the Kubernetes node: the Slurm node line it registered (or is about to).
ANN_SLURM_REGISTRATION: Final = SLINKY_PREFIX + "slurm-registration"
