"""Finalizers the bridge sets."""

from typing import Final

from slurm_bridge.names.prefixes import SCHEDULER_PREFIX

FINALIZER_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "slurm-job"
# Kubernetes' finalizer on an allocated ResourceClaim (kube-controller-manager lifts it once no
# pod uses the claim any more); the bridge sets it on the claims it allocates, as kube-scheduler does.
RESOURCE_CLAIM_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
