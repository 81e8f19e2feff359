"""The scheduling gate, taints and ResourceClaim entry the bridge puts on pods and nodes, and the
field selector of a node's name."""

from typing import Final

from slurm_bridge.names.prefixes import SLINKY_PREFIX

FIELD_NODE_NAME: Final = "metadata.name"
SCHEDULING_GATE: Final = SLINKY_PREFIX + "slurm-allocation"
TAINT_MANAGED_NODE: Final = SLINKY_PREFIX + "managed-node"
# Effect of TAINT_MANAGED_NODE (slurm_bridge/kube/taints.py builds the taint and its matching toleration).
TAINT_MANAGED_NODE_EFFECT: Final = "NoExecute"
# Taint naming the state ("drain", "down" or "fail") in which Slurm or an administrator holds the
# node out of service; it is also the bridge's record that it has mirrored that outage.
TAINT_SLURM_STATE: Final = SLINKY_PREFIX + "slurm-state"
TAINT_SLURM_STATE_EFFECT: Final = "NoSchedule"
# The pod's ResourceClaim entry (spec.resourceClaims[].name) that the webhook adds for them.
POD_CLAIM_ENTRY: Final = "slurm-devices"
