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
