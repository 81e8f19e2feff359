"""What the configured node sharing needs of Slurm, and what keeps a job's owner from shrinking a
bridge job, judged from slurm.conf (``GET conf``, REST API v0.0.45) and the default partition: one
finding per check, pure. The operator reads Slurm and
reports the findings (operator/nodes/setupcheck.py; docs/colocation.md says how they surface).

A check is a function of (config, slurm.conf or None, the partition or None, the REST version)
giving one :class:`Finding` or None (not relevant to this configuration). A new check (the handoff's,
say) is one more function in :data:`CHECKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.slurm.models import PartitionInfo, SlurmConf

State = Literal["ok", "problem", "unknown"]


@dataclass(frozen=True)
class Finding:
    check: str  # the metric's label, e.g. "mcs_plugin"
    state: State
    message: str


@dataclass(frozen=True)
class SiteView:
    """What the checks read of Slurm: slurm.conf (None: the REST version has no ``GET conf``), the
    config's partition (None: Slurm has none of that name) and the REST API version."""

    conf: SlurmConf | None
    partition: PartitionInfo | None
    version: str


Check = Callable[[Config, SiteView], Finding | None]
_MCS_SETTING: Final = "MCSPlugin=mcs/label and MCSParameters=ondemand,ondemandselect"


def _no_conf(check: str, what: str, view: SiteView) -> Finding:
    return Finding(
        check,
        "unknown",
        f"{what} not checked: REST API {view.version} has no GET conf (v0.0.45, Slurm 26.05, has); "
        "check slurm.conf by hand (docs/colocation.md)",
    )


def mcs_plugin(config: Config, view: SiteView) -> Finding | None:
    """timeShared keeps native jobs off a pod's node through Slurm's MCS label."""
    if config.nodeSharing != names.NODE_SHARING_TIME_SHARED:
        return None
    check = "mcs_plugin"
    if view.conf is None:
        return _no_conf(check, "MCSPlugin", view)
    plugin, params = view.conf.mcs_plugin, {p.lower() for p in view.conf.mcs_parameters}
    shown = f"MCSPlugin={plugin or '(none)'} MCSParameters={','.join(view.conf.mcs_parameters) or '(none)'}"
    if plugin == "mcs/label" and "ondemand" in params and params & {"ondemandselect", "select"}:
        return Finding(check, "ok", f"nodeSharing timeShared: {shown}")
    if plugin in ("", "mcs/none"):
        why = (
            "Slurm 26.05.5 was seen to keep native jobs off a node a labelled job holds even so, but that is not "
            "documented behaviour"
        )
    elif plugin == "mcs/label":
        why = "without ondemand and ondemandselect (or select) the label does not keep native jobs off a node"
    else:
        why = (
            f"{plugin} gives every job a label of its own (its user, group or account), so native jobs and pods "
            "are not kept apart by the bridge's label"
        )
    return Finding(
        check,
        "problem",
        f"nodeSharing timeShared needs {_MCS_SETTING} in slurm.conf; Slurm has {shown}: {why}. Pods and native "
        "jobs may run on one node at the same time",
    )


def partition_oversubscribe(config: Config, view: SiteView) -> Finding | None:
    """coResident leaves sharing to the partition: with OverSubscribe YES or FORCE Slurm may put a
    pod and a native job on the same cores."""
    if config.nodeSharing != names.NODE_SHARING_CO_RESIDENT:
        return None
    check = "partition_oversubscribe"
    if view.partition is None:
        return Finding(check, "problem", f"the config's partition {config.partition!r} does not exist in Slurm")
    over = view.partition.oversubscribe
    shown = f"partition {view.partition.name} has OverSubscribe={over}"
    if over.split(":")[0] in ("NO", "EXCLUSIVE"):
        return Finding(check, "ok", f"nodeSharing coResident: {shown}")
    return Finding(
        check,
        "problem",
        f"nodeSharing coResident needs OverSubscribe=NO on the bridge's partitions; {shown}, so Slurm may put a pod "
        "and a native job on the same cores",
    )


def consumable_memory(config: Config, view: SiteView) -> Finding | None:
    """coResident shares memory too: Slurm must count it (select/cons_tres with *_Memory)."""
    if config.nodeSharing != names.NODE_SHARING_CO_RESIDENT:
        return None
    check = "consumable_memory"
    if view.conf is None:
        return _no_conf(check, "SelectTypeParameters", view)
    params = [p.upper() for p in view.conf.select_type_parameters]
    shown = f"SelectType={view.conf.select_type} SelectTypeParameters={','.join(params) or '(none)'}"
    if any(p.endswith("_MEMORY") for p in params):
        return Finding(check, "ok", f"nodeSharing coResident: {shown}")
    return Finding(
        check,
        "problem",
        f"nodeSharing coResident needs memory as a consumable resource (SelectType=select/cons_tres, "
        f"SelectTypeParameters=CR_Core_Memory); Slurm has {shown}, so a native job may be given a pod's memory",
    )


JOB_SHRINK_SETTING: Final = "disable_job_shrink"


def job_shrink(config: Config, view: SiteView) -> Finding | None:
    """A bridge job runs as its tenant's user, who may ``scontrol update`` it: shrinking a running
    job (NumNodes, NodeList) would hand Slurm nodes or CPUs its pods still use. Slurm refuses that
    with ``SchedulerParameters=disable_job_shrink``; without it, only the bridge's own check of each
    allocation stands. (No slurm.conf setting stops an owner's changes to a pending job.)"""
    check = "job_shrink"
    if view.conf is None:
        return _no_conf(check, "SchedulerParameters", view)
    params = [p.strip() for p in view.conf.scheduler_parameters]
    shown = f"SchedulerParameters={','.join(params) or '(none)'}"
    if JOB_SHRINK_SETTING in (p.lower() for p in params):
        return Finding(check, "ok", f"Slurm refuses shrinking a running job ({shown})")
    return Finding(
        check,
        "problem",
        f"Slurm has {shown}, without {JOB_SHRINK_SETTING}: a bridge job's owner (the tenant's user) may shrink "
        "the running job with scontrol update (NumNodes, NodeList), giving other jobs nodes or CPUs its pods still "
        "use; the bridge checks each allocation against its pods and drains on a difference. Add "
        f"{JOB_SHRINK_SETTING} to SchedulerParameters so that Slurm refuses it (docs/security.md)",
    )


def rereads_after_move(job_owner: str, bridge_user: str) -> bool:
    """Whether a running bridge job on a node whose allocation moved is read again to compare what
    it holds with its pods (allocationmatch): only where someone but an operator could have shrunk
    it, its owner being a tenant. A job the bridge's own Slurm user owns (a plain pod's) no tenant
    can touch; an operator's change to it is seen at the poller's full list. (Not decided from
    ``disable_job_shrink``: the operator reads slurm.conf once a minute, and a site that drops the
    setting would leave its owners a minute unwatched.)"""
    return not (bridge_user and job_owner == bridge_user)


CHECKS: Final[tuple[Check, ...]] = (mcs_plugin, partition_oversubscribe, consumable_memory, job_shrink)


def findings(config: Config, view: SiteView, checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    """Every relevant check's finding, in the order of ``checks``."""
    return [f for c in checks if (f := c(config, view)) is not None]
