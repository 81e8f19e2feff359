"""Labels the bridge writes (reserved ones on pods, app.kubernetes.io) and reads (Slurm node names,
node features, PodGroups, LeaderWorkerSet groups, dynamic nodes)."""

from typing import Final

from slurm_bridge.names.prefixes import SCHEDULER_PREFIX, SLINKY_PREFIX

# The Slurm job id of a pod's allocation (label, same key as the Go slurm-bridge).
LABEL_SLURM_JOB_ID: Final = SCHEDULER_PREFIX + "slurm-jobid"
# The PlaceholderJob a pod belongs to: the label holds its name, or for a name longer than a label
# value may be (63) a bounded form of it (kubeformats.label_value); the annotation always the full name.
LABEL_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "placeholderjob"
RESERVED_POD_LABELS: Final = frozenset({LABEL_SLURM_JOB_ID, LABEL_PLACEHOLDER_JOB})
# Kubernetes node <-> Slurm node mapping when the names differ (Go slurm-bridge key).
LABEL_SLURM_NODENAME: Final = SLINKY_PREFIX + "slurm-nodename"
# A Kubernetes node labelled <prefix><feature>="true" has the Slurm node feature <feature>, so a
# pod's nodeSelector or required node affinity on that label becomes a Slurm constraint.
LABEL_NODE_FEATURE_PREFIX: Final = "feature." + SLINKY_PREFIX
# A Kubernetes node's place in each of Slurm's network topologies: <prefix><topology>=<block or
# switch>, from the Slurm node's Topology (``blocks:b1,tree:s1``); written and kept by the node
# controller (docs/nodes.md#network-topology).
LABEL_TOPOLOGY_PREFIX: Final = "topology." + SLINKY_PREFIX
# Kubernetes' node name label and node selector field; their values are read as Slurm node names.
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
# Nodes' operating system (well-known label); "linux" is every Slurm node's.
LABEL_OS: Final = "kubernetes.io/os"
LABEL_APP_NAME: Final = "app.kubernetes.io/name"
LABEL_APP_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_APP_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_APP_INSTANCE: Final = "app.kubernetes.io/instance"
# The Go slurm-bridge's keys: a node with this label (any value) is registered in Slurm ...
LABEL_EXTERNAL_NODE: Final = SCHEDULER_PREFIX + "external-node"
# A pod's coscheduling PodGroup (scheduler-plugins, scheduling.x-k8s.io/v1alpha1).
LABEL_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
# The LeaderWorkerSet and group a pod belongs to (set by the LeaderWorkerSet controller).
LABEL_LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
# The preempted workloads' places (slurm_bridge/rules/resume.py), one ConfigMap a workload in the
# operator's namespace, labelled with this component name (docs/colocation.md, "Preemption").
PLACES_COMPONENT: Final = "preemption-places"
