"""Version-neutral Slurm data the rest of the bridge works with.

``JobRequest`` is what a PlaceholderJob asks Slurm for; its camelCase aliases are exactly the
fields of the CRD's ``spec.slurm``. ``JobInfo`` and ``NodeInfo`` are Slurm's answers, already
normalised across REST API versions by the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from slurm_bridge import names


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# How a job shares its nodes with other Slurm jobs (docs/colocation.md; the config key nodeSharing).
NodeSharing = Literal["exclusive", "timeShared", "coResident"]


class JobRequest(_Camel):
    """One Slurm allocation: ``nodes`` nodes, ``tasks_per_node`` tasks of ``cpus_per_task`` cpus."""

    job_name: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    constraints: str | None = None
    # Slurm node names: the job gets every one of required_nodes and none of excluded_nodes.
    required_nodes: list[str] | None = None
    excluded_nodes: list[str] | None = None
    licenses: str | None = None
    nodes: int = Field(default=1, ge=1)
    max_nodes: int | None = Field(default=None, ge=1)
    tasks_per_node: int = Field(default=1, ge=1)
    cpus_per_task: int = Field(default=1, ge=1)
    memory_per_node_mib: int | None = Field(default=None, ge=1)
    # Slurm TRES per node, for example "gres/gpu:2" or "gres/gpu:a100:1,gres/shard:2".
    gres: str | None = None
    time_limit_minutes: int | None = Field(default=None, ge=1)
    # The Slurm topology (topology.yaml's name) within one block or leaf switch of which the job's
    # nodes must lie: sent as segment_size (the job's node count) and required_switches 1, of which
    # Slurm honours the one its partition's topology plugin knows (docs/workloads.md#topology).
    topology: str | None = Field(default=None, min_length=1, max_length=63)
    # How the job shares its nodes: whole nodes, nodes time-shared with native jobs through the MCS
    # label ``mcs_label``, or core by core beside native jobs. None: a request written before the
    # bridge knew the modes (a PlaceholderJob of an older version), sent as ``exclusive`` and
    # ``mcs_label`` say.
    node_sharing: NodeSharing | None = None
    # Only for such older requests: None leaves Slurm's default; False asks for shared nodes, True
    # for whole nodes. ``node_sharing`` replaces it.
    exclusive: bool | None = None
    priority: int | None = Field(default=None, ge=0)
    user_id: int | None = Field(default=None, ge=0)
    group_id: int | None = Field(default=None, ge=0)
    # The same by name (a TenantPolicy may name its user): Slurm resolves it at submit. A name wins
    # over an id; the bridge never sets both.
    user_name: str | None = None
    group_name: str | None = None
    mcs_label: str | None = None

    @property
    def names_identity(self) -> bool:
        """Whether the job is for a user or group other than the token's (user-id, group-id, a
        TenantPolicy's user): only ``job/submit`` honours that (see operator/placeholderjobs/slurmjobs/submit.py)."""
        return any(v is not None for v in (self.user_id, self.group_id, self.user_name, self.group_name))

    def crd_dict(self) -> dict[str, Any]:
        """The CRD ``spec.slurm`` form (camelCase, unset fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class JobInfo(BaseModel):
    """A Slurm job as one list/get call reports it: only the fields the bridge reads. (The poller
    keeps one per bridge job; the whole wire record, about 150 fields, was about 14 KB of Python
    objects a job: 140 MB with 10,000 jobs.)"""

    model_config = ConfigDict(frozen=True)

    job_id: int
    name: str = ""
    # Every state flag Slurm reports, upper case; ``state`` is the base state (first one).
    states: tuple[str, ...] = ()
    reason: str = ""  # Slurm's state_reason, "None" normalised to ""
    nodes: tuple[str, ...] = ()  # allocated nodes, hostlist expanded, in Slurm's order
    admin_comment: str = ""
    # The marker of a job allocated as a tenant, until its admin_comment is set (submit.Placer).
    comment: str = ""
    partition: str = ""
    flags: tuple[str, ...] = ()
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_minutes: int | None = None
    # Whom Slurm runs and charges the job as (shown in the PlaceholderJob's status).
    user_name: str = ""
    account: str = ""
    # Whose ids it runs with (checked after an allocation made as a tenant: submit.Placer.verify).
    user_id: int | None = None
    group_id: int | None = None
    group_name: str = ""
    # A heterogeneous job's component: the leader's id (component 0's) and this one's offset; 0
    # and 0 for any other job. Each component is a job of its own in Slurm's lists.
    het_job_id: int = 0
    het_job_offset: int = 0
    # The handoff (docs/colocation.md): the job's QOS; when Slurm chose it as a preemption victim
    # (None: never; with the QOS's GraceTime it stays RUNNING and ``end_time`` moves to the grace's
    # end); the nodes a pending job is planned on (a preemptor's victims are on them).
    qos: str = ""
    preempt_time: datetime | None = None
    scheduled_nodes: tuple[str, ...] = ()
    # What Slurm holds for a running job (its TRES allocated, e.g. "cpu=2,mem=2G,node=1") or what a
    # pending one asks for (its TRES requested); its GRES per node as Slurm keeps the request
    # ("gres/gpu:2"); its MCS label. None: not read (rules/allocationmatch.py compares nothing then).
    tres: str | None = None
    gres_per_node: str | None = None
    mcs_label: str | None = None
    # Taken from slurmctld's signed start notice, not read yet: what it holds is not known.
    signed: bool = False

    @property
    def state(self) -> str:
        return self.states[0] if self.states else "UNKNOWN"

    @property
    def het_leader(self) -> int:
        """The id that stands for the whole job: the leader's for a heterogeneous job's component
        (cancelling it cancels every component), else the job's own."""
        return self.het_job_id or self.job_id

    @property
    def is_het_component(self) -> bool:
        """A heterogeneous job's component other than its leader."""
        return self.het_job_id != 0 and self.het_job_id != self.job_id

    @property
    def is_pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def is_running(self) -> bool:
        return self.state == "RUNNING"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES


class JobSettings(BaseModel):
    """What a job asks Slurm for, of the fields a pending job's update may change: read on demand
    (one GET) to tell whether a change reached a job that Slurm allocated meanwhile."""

    model_config = ConfigDict(frozen=True)

    job_id: int
    name: str = ""
    partition: str = ""  # a pending job's list ("a,b"); the one it runs in once running
    account: str = ""
    qos: str = ""
    priority: int | None = None
    features: str = ""  # the job's constraints, as Slurm keeps them
    time_limit_minutes: int | None = None  # None: unlimited or unset
    node_count: int | None = None
    max_nodes: int | None = None


class PartitionLimits(BaseModel):
    """A partition's limits that Slurm does not apply to a job update sent with an operator's
    token (SlurmUser's: docs/annotations.md), so the bridge checks them before it sends one, and its
    default time limit (what a job that names none gets); whether it is RootOnly, which Slurm does
    not apply to a tenant's job the bridge submits with that token (docs/tenancy.md)."""

    model_config = ConfigDict(frozen=True)

    name: str
    max_time_minutes: int | None = None  # None: unlimited
    default_time_minutes: int | None = None  # None: not set (the job gets MaxTime)
    # None: every account (QOS) may use the partition; else the ones listed.
    allow_accounts: tuple[str, ...] | None = None
    deny_accounts: tuple[str, ...] = ()
    allow_qos: tuple[str, ...] | None = None
    deny_qos: tuple[str, ...] = ()
    # RootOnly=YES (only root and SlurmUser may submit there), and whether it is Slurm's default
    # partition; None: the REST API version does not show a partition's flags (before v0.0.45).
    root_only: bool | None = None
    default: bool | None = None


class JobStates:
    """Every job's state flags from one ``jobs/state`` answer: ``by_id`` maps a job id to its
    flags, base state first (as ``JobInfo.states``).

    ``unchanged`` says every job has the same flags as in the one passed to ``job_states`` as
    ``previous``: a poll that already looked at that one has nothing new to compare. (With
    thousands of jobs, comparing each job every poll period was most of an idle poller's CPU.)
    A heterogeneous job's components are there by their own ids too (the answer names them
    ``<id>+<offset>``, decoded by the codec).
    """

    __slots__ = ("by_id", "unchanged")

    def __init__(self, by_id: dict[int, tuple[str, ...]], *, unchanged: bool = False) -> None:
        self.by_id = by_id
        self.unchanged = unchanged

    def __repr__(self) -> str:
        return f"JobStates({len(self)} jobs, unchanged={self.unchanged})"

    def __len__(self) -> int:
        return len(self.by_id)

    def of(self, job: JobInfo) -> tuple[str, ...] | None:
        """The state flags the answer gives ``job`` (a plain job or a heterogeneous component)."""
        return self.by_id.get(job.job_id)

    def knows(self, job_id: int) -> bool:
        """Whether the answer lists ``job_id`` (a plain job, or a heterogeneous job's leader)."""
        return job_id in self.by_id


FINISHED_JOB_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


class NodeDevices(BaseModel):
    """What a job holds on one of its nodes, by Slurm index (for exact DRA devices)."""

    model_config = ConfigDict(frozen=True)

    # GRES name -> device indices; a GRES that Slurm counts without indices (no device files in
    # gres.conf) is missing here and present in ``gres_counts`` only.
    gres: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    gres_counts: dict[str, int] = Field(default_factory=dict)
    # a shared GRES (``shard``) -> the job's count on each of the node's records of it (its GPUs)
    shares: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    cpus: tuple[int, ...] = ()  # allocated CPUs, numbered in Slurm's core order on the node


@dataclass(frozen=True)
class QosInfo:
    """One QOS as preemption sees it: which QOS it preempts, how it is preempted, its GraceTime."""

    name: str
    preempts: tuple[str, ...] = ()
    mode: tuple[str, ...] = ()  # CANCEL, REQUEUE, SUSPEND, GANG, DISABLED (= the cluster's)
    grace_seconds: int = 0


@dataclass(frozen=True)
class ReservationRecord:
    """A Slurm reservation as the client lists it (plain data: which ones are the handoff's, and
    whose, is the bridge's rule, slurm_bridge/rules/handoff.py)."""

    name: str
    start_time: datetime | None = None
    end_time: datetime | None = None


class NodeInfo(BaseModel):
    """A Slurm node as one node list call reports it."""

    model_config = ConfigDict(frozen=True)

    name: str
    states: tuple[str, ...] = ()  # base state first, then flags such as DRAIN, NOT_RESPONDING
    reason: str = ""
    reason_user: str = ""
    cpus: int = 0
    real_memory_mib: int = 0
    # What jobs may use: the CPUs without the specialized ones (CoreSpecCount, CpuSpecList; Slurm's
    # CPUEfctv, None when not reported) and the memory slurmd keeps (MemSpecLimit).
    effective_cpus: int | None = None
    specialized_memory_mib: int = 0
    gres: str = ""
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    comment: str = ""
    topology: str = ""  # its place in each topology: "blocks:b1,tree:s1" (v0.0.44 and later)
    # What jobs hold of it now: a change says a job started, ended, moved or shrank there.
    alloc_cpus: int = 0
    alloc_memory_mib: int = 0

    @property
    def state(self) -> str:
        return self.states[0] if self.states else "UNKNOWN"

    @property
    def dynamic(self) -> bool:
        """Made with ``scontrol create`` or ``POST new/node`` (not in slurm.conf)."""
        return "DYNAMIC_NORM" in self.states

    @property
    def gpus(self) -> int:
        """The node's ``gpu`` GRES count (all types), e.g. 2 for ``gpu:2`` or ``gpu:a100:1,gpu:t4:1``."""
        total = 0
        for item in filter(None, self.gres.split(",")):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) > 1 and parts[-1].isdigit():
                total += int(parts[-1])
        return total


class SlurmConf(BaseModel):
    """The slurm.conf settings the bridge reads (``GET /slurm/v0.0.45/conf``; older REST versions
    have no such call): node sharing's, checked at start-up (docs/colocation.md), and the handoff's
    and preemption's, kept current by the handoff loop. Lists as Slurm gives them, e.g.
    ``("ondemand", "ondemandselect")``."""

    model_config = ConfigDict(frozen=True)

    mcs_plugin: str = ""
    mcs_parameters: tuple[str, ...] = ()
    select_type: str = ""
    select_type_parameters: tuple[str, ...] = ()
    epilog_slurmctld: tuple[str, ...] = ()
    preempt_type: str = ""
    preempt_mode: tuple[str, ...] = ()  # upper case
    over_time_limit_minutes: int | None = 0  # None: UNLIMITED
    scheduler_parameters: tuple[str, ...] = ()  # e.g. ("batch_sched_delay=0", "disable_job_shrink")

    @property
    def handoff_epilogs(self) -> tuple[str, ...]:
        """The EpilogSlurmctld scripts but slurmctld's hook to the operator, which reads no job's
        admin_comment: the released mark matters only to the others (the handoff's script, a site's own)."""
        return tuple(e for e in self.epilog_slurmctld if e.rsplit("/", 1)[-1] not in names.NOTIFY_HOOKS)


class PartitionInfo(BaseModel):
    """A partition as the bridge's checks read it."""

    model_config = ConfigDict(frozen=True)

    name: str
    # scontrol's form: "NO", "EXCLUSIVE", "YES:<n>" or "FORCE:<n>".
    oversubscribe: str = "NO"
    # The topology (topology.yaml's name) Slurm places its jobs by: its Topology=; "" for the
    # cluster's default.
    topology: str = ""
