"""Names the bridge writes into Slurm: the admin_comment that names a job's PlaceholderJob, and the
markers of its node drains, registrations and comments."""

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
# The project's EpilogSlurmctld (slurm-hooks/slurm-bridge-handoff.sh) knows a bridge job only from
# its admin_comment (only an operator can set it): the JSON after ADMIN_COMMENT_PREFIX carries the
# scope to hold the job's nodes in ("handoff": cores|node) and, once the bridge released the job
# itself (its pods stopped), "released": true. Which bridges it holds for, and how long at most,
# come from its root-owned configuration file (HANDOFF_CONF_FILE, next to the script).
ADMIN_COMMENT_HANDOFF: Final = "handoff"
ADMIN_COMMENT_RELEASED: Final = "released"
# With the released mark, what the pods' end was, for `sacct -o AdminComment`: Slurm's own state of
# an external job the bridge ended is always CANCELLED (docs/tenancy.md, "What Slurm's accounting says").
ADMIN_COMMENT_OUTCOME: Final = "outcome"  # the PlaceholderJob's phase: Completed, Failed, Cancelled
ADMIN_COMMENT_EXIT_CODE: Final = "exit_code"  # the highest exit code of the member pods' containers
# The job a resumed workload's job took the place of (`sacct -o AdminComment` links the two).
ADMIN_COMMENT_RESUMES: Final = "resumes"
HANDOFF_SCOPE_CORES: Final = "cores"  # hold the job's CPU count on each node
HANDOFF_SCOPE_NODE: Final = "node"  # hold every free core of each node (exact cores, exclusivity)
HANDOFF_CONF_FILE: Final = "slurm-bridge-handoff.conf"
# The reservation the script makes when Slurm ends a bridge job: handoff-<job id>_<bridgeId>_<node>,
# matched by the exact bridgeId (a DNS label: "_" delimits it), one a node (a reservation's CoreCnt
# list is refused in 26.05; REST shows no reservation comment).
HANDOFF_RESERVATION_PREFIX: Final = "handoff-"
# slurmctld's hook to the operator (slurm-hooks/slurm-bridge-notify.sh, or its compiled form built
# from slurm-bridge-notify.c), also an EpilogSlurmctld: the one the handoff does not need to mark a
# released job for (it reads no job's admin_comment).
NOTIFY_HOOK_SCRIPT: Final = "slurm-bridge-notify.sh"
NOTIFY_HOOK_COMPILED: Final = "slurm-bridge-notify"
NOTIFY_HOOKS: Final = (NOTIFY_HOOK_SCRIPT, NOTIFY_HOOK_COMPILED)
# What that hook tells the operator of a job, in the job's ``comment`` (ADMIN_COMMENT_PREFIX and
# compact JSON, this key among the marker's when the comment carries it: a job allocated as a
# tenant), the one field of a job slurmctld gives its hooks that the bridge sets and no one else
# uses: "ended", only its end (allocated inside the call: the answer said it started); "none",
# nothing (the bridge ends it itself). The job's user may set it too, and then only makes their
# own pods wait for the operator's next poll (a notice is a hint).
COMMENT_NOTIFY: Final = "notify"
NOTIFY_ENDED: Final = "ended"
NOTIFY_NONE: Final = "none"
# The Slurm node reason of a handoff drain (a pod that outlived its hold, or runs with no hold after
# its job ended): slurm-bridge-handoff[<bridgeId>]: pod <ns>/<pod> of Slurm job <id> ..., matched by
# the exact bridgeId. Not SLURM_NODE_REASON_PREFIX: the node sync mirrors it as an outage (a cordon)
# and never lifts it; the handoff loop of that bridge lifts it (UNDRAIN) once the pod it names stopped.
HANDOFF_DRAIN_REASON_PREFIX: Final = "slurm-bridge-handoff["
# The Slurm node reason of the node guard's drain (a pod runs on the node without a Slurm allocation
# there): slurm-bridge-guard[<bridgeId>]: pod <ns>/<pod> ..., matched by the exact bridgeId. Not
# SLURM_NODE_REASON_PREFIX, for the same reason as the handoff's: the node sync mirrors it as an
# outage and never lifts it; the guard of that bridge lifts it once no such pod is left.
NODE_GUARD_DRAIN_REASON_PREFIX: Final = "slurm-bridge-guard["
# The Slurm node reason of a device taint's drain (a GPU the bridge maps to Slurm GRES is tainted
# NoSchedule or NoExecute in Kubernetes: docs/gpus.md, "Device taints"):
# slurm-bridge-device-taint[<bridgeId>]: device <device> taint <key>=<value>:<effect> ..., matched by
# the exact bridgeId. Not SLURM_NODE_REASON_PREFIX, for the same reason as the guard's: the node sync
# mirrors it as an outage and never lifts it; the node controller of that bridge lifts it once no
# such taint is left.
DEVICE_TAINT_DRAIN_REASON_PREFIX: Final = "slurm-bridge-device-taint["
