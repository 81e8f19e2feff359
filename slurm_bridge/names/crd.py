"""The bridge's CRDs: the PlaceholderJob's and TenantPolicy's identity, and the PlaceholderJob's
phases (its status vocabulary)."""

from typing import Final

GROUP: Final = "slinky.slurm.net"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PlaceholderJob"
PLURAL: Final = "placeholderjobs"
SHORT_NAME: Final = "phj"
TP_KIND: Final = "TenantPolicy"
TP_PLURAL: Final = "tenantpolicies"
TP_SHORT_NAME: Final = "tp"
PHASE_PENDING: Final = "Pending"
PHASE_ALLOCATED: Final = "Allocated"
PHASE_RUNNING: Final = "Running"
PHASE_COMPLETED: Final = "Completed"
PHASE_FAILED: Final = "Failed"
PHASE_CANCELLED: Final = "Cancelled"
TERMINAL_PHASES: Final = frozenset({PHASE_COMPLETED, PHASE_FAILED, PHASE_CANCELLED})
