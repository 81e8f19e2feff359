"""Where a tenant's job may not go when the bridge queues it with its own token.

A tenant's job is submitted as the tenant (docs/tenancy.md), so Slurm judges it as the tenant's
own, except in two cases, queued with the bridge's token (SlurmUser's) and ``user_id``/``group_id``:
a job whose group is not its user's primary group, and a heterogeneous job. Slurm then judges the
partition's access by the submitter for ``RootOnly`` (only root and SlurmUser may submit there), so
such a job would get into a partition its tenant could not submit to: the bridge refuses it itself.
``AllowGroups``, ``AllowAccounts`` and ``AllowQos`` (and the ``Deny`` lists) Slurm judges by the
job's own user, account and QOS, whoever submits: on Slurm 26.05 (``EnforcePartLimits`` unset) the
tenant's own submit and the bridge's are both taken and wait with the partition's reason (checked).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_bridge.slurm.models import JobRequest, PartitionLimits


def _owner(request: JobRequest) -> str:
    """Whose job it is, as the request names them."""
    if request.user_name or request.user_id is not None:
        return f"user {request.user_name or request.user_id}'s"
    return f"group {request.group_name or request.group_id}'s"


def _targets(request: JobRequest, partitions: Mapping[str, PartitionLimits]) -> list[str]:
    """The partitions the job may go to: those it lists, else Slurm's default one (when known)."""
    listed = [p for p in (request.partition or "").split(",") if p]
    return listed or [p.name for p in partitions.values() if p.default]


def own_token_refusal(
    requests: Sequence[JobRequest], why: str, partitions: Mapping[str, PartitionLimits]
) -> str | None:
    """Why the job of ``requests`` (one, or a heterogeneous job's components), queued with the
    bridge's token because ``why``, must not be sent: a tenant's component names a ``RootOnly``
    partition. None: nothing refuses it (a partition not read, or whose flags the REST API version
    does not show, is Slurm's to judge)."""
    for request in requests:
        if not request.names_identity:
            continue  # the bridge's own job: its token is the submitter Slurm should see
        for name in _targets(request, partitions):
            found = partitions.get(name)
            if found is not None and found.root_only:
                return (
                    f"partition {name} is RootOnly (only root and SlurmUser may submit jobs there), and this "
                    f"{_owner(request)} job would be queued with the bridge's token (SlurmUser's) because {why}: "
                    f"Slurm would take it there although its owner could not submit it; name another partition "
                    f"(docs/tenancy.md)"
                )
    return None
