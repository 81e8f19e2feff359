"""Names the bridge writes into Slurm: the admin_comment that names a job's PlaceholderJob, and the
markers of its node drains, registrations and comments."""

from __future__ import annotations

from typing import Final

from slurm_bridge.names.prefixes import APP_NAME

# Marker at the start of every Slurm admin_comment the bridge writes; the rest is JSON naming
# the PlaceholderJob, so a restarted bridge finds its jobs instead of submitting again.
ADMIN_COMMENT_PREFIX: Final = "slurm-bridge:"
NODE_SYNC_OWNER: Final = APP_NAME
# Every Slurm node reason the bridge writes starts with this: a DRAIN is the bridge's own only then.
SLURM_NODE_REASON_PREFIX: Final = "slurm-bridge:"
# The Slurm node's comment that marks it as registered by the bridge with this bridgeId.
SLURM_NODE_COMMENT_PREFIX: Final = "slurm-bridge:"
# Reasons of the drains that take a registered node out of Slurm. Not SLURM_NODE_REASON_PREFIX:
# the node sync mirrors them as an outage (cordon), and must not lift them as its own.
SLURM_REGISTRATION_REASON_PREFIX: Final = "slurm-bridge-registration:"

# ---- the handoff (docs/colocation.md, "The handoff") ------------------------------------------------
# The working directory of every bridge job names it for the project's EpilogSlurmctld
# (hack/slurm-hooks/slurm-bridge-handoff.sh): <HANDOFF_WORK_DIR>/<hold seconds>/<cores|node>. Slurm
# does not check it for an external job (nothing runs there), and the script reads it as
# SLURM_JOB_WORK_DIR: it needs no call to know a job is a bridge's, which bridge's, and how long to
# hold (<HANDOFF_WORK_DIR>/<hold seconds>/<cores|node>/<bridgeId>).
HANDOFF_WORK_DIR: Final = "/slurm-bridge/handoff"
HANDOFF_SCOPE_CORES: Final = "cores"  # hold the job's CPU count on each node
HANDOFF_SCOPE_NODE: Final = "node"  # hold every free core of each node (exact cores, exclusivity)
# The reservation the script makes when Slurm ends a bridge job: handoff-<job id>_<bridgeId>_<node>,
# matched by the exact bridgeId (a DNS label: "_" delimits it), one a node (a reservation's CoreCnt
# list is refused in 26.05; REST shows no reservation comment).
HANDOFF_RESERVATION_PREFIX: Final = "handoff-"
# slurmctld's hook to the operator (slurm-hooks/slurm-bridge-notify.sh), also an EpilogSlurmctld:
# the one the handoff does not need to rename a job for (it reads no job's name).
NOTIFY_HOOK_SCRIPT: Final = "slurm-bridge-notify.sh"
# The bridge renames a job it releases itself (its pods' containers stopped) to <name><suffix> just
# before its DELETE: the script then holds nothing for it (checked on Slurm 26.05: the epilog sees
# the new name; a running job's working directory cannot be changed).
RELEASED_JOB_NAME_SUFFIX: Final = "#released"
# The Slurm node reason of a handoff drain (a pod that outlived its hold, or runs with no hold after
# its job ended): slurm-bridge-handoff[<bridgeId>]: pod <ns>/<pod> of Slurm job <id> ..., matched by
# the exact bridgeId. Not SLURM_NODE_REASON_PREFIX: the node sync mirrors it as an outage (a cordon)
# and never lifts it; the handoff loop of that bridge lifts it (UNDRAIN) once the pod it names stopped.
HANDOFF_DRAIN_REASON_PREFIX: Final = "slurm-bridge-handoff["
