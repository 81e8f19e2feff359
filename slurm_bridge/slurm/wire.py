"""slurmrestd's JSON as pydantic models: the request bodies the bridge sends and the parts of the
answers it reads, shared by every supported REST API version (see :mod:`.versions`).

Lenient on answers (unknown fields ignored, nulls taken as unset) because a Slurm upgrade adds
fields without changing the version; strict on requests (``extra="forbid"``), so a typo is a bug
found in tests and not a field slurmrestd silently drops.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import SlurmError, SlurmErrorDetail


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # slurmrestd writes null for empty lists ("results": null); defaults cover them.
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class NoVal(_Wire):
    """Slurm's "number with flags": ``set`` False means unset, ``infinite`` means no limit."""

    set: bool = False
    infinite: bool = False
    number: int | None = None

    @classmethod
    def of(cls, number: int) -> NoVal:
        return cls(set=True, infinite=False, number=number)

    def value(self) -> int | None:
        """The number, or None when unset or infinite."""
        if self.infinite or not self.set:
            return None
        return self.number


class WireError(_Wire):
    error: str = ""
    error_number: int = 0
    description: str = ""
    source: str = ""

    def detail(self) -> SlurmErrorDetail:
        return SlurmErrorDetail(self.error, self.error_number, self.description, self.source)


class WireWarning(_Wire):
    description: str = ""
    source: str = ""


class WireResponse(_Wire):
    """The envelope of every answer: Slurm reports failures here, even with HTTP 200."""

    errors: list[WireError] = Field(default_factory=list)
    warnings: list[WireWarning] = Field(default_factory=list)


class JobDesc(BaseModel):
    """``job_desc_msg``: only the fields the bridge sets; unset fields are left out of the JSON."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    flags: list[str] | None = None
    current_working_directory: str | None = None
    admin_comment: str | None = None
    comment: str | None = None  # a user may set it (admin_comment is for operators)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    wckey: str | None = None
    constraints: str | None = None
    required_nodes: list[str] | None = None
    excluded_nodes: list[str] | None = None
    licenses: str | None = None
    minimum_nodes: int | None = None
    maximum_nodes: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    memory_per_node: NoVal | None = None
    tres_per_node: str | None = None
    time_limit: NoVal | None = None
    shared: list[str] | None = None
    segment_size: NoVal | None = None  # topology/block: nodes per segment, each within one block
    required_switches: NoVal | None = None  # topology/tree: at most this many leaf switches
    priority: NoVal | None = None
    user_id: str | None = None
    group_id: str | None = None
    mcs_label: str | None = None

    def body(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class UpdateNode(BaseModel):
    """``update_node_msg``: the node state change and its reason, or its comment."""

    model_config = ConfigDict(extra="forbid")

    state: list[str] | None = None
    reason: str | None = None
    comment: str | None = None

    def body(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


WireTime = NoVal | int | None


class JobWire(_Wire):
    job_id: int
    name: str = ""
    job_state: list[str] | str = Field(default_factory=list)
    state_reason: str = ""
    nodes: str | None = None
    admin_comment: str | None = None
    partition: str | None = None
    flags: list[str] = Field(default_factory=list)
    submit_time: WireTime = None
    start_time: WireTime = None
    end_time: WireTime = None
    time_limit: WireTime = None
    comment: str | None = None
    user_name: str | None = None
    user_id: int | None = None
    group_id: int | None = None
    group_name: str | None = None
    account: str | None = None
    het_job_id: NoVal | int | None = None
    het_job_offset: NoVal | int | None = None
    # The handoff (docs/colocation.md): the QOS (preemption), when Slurm chose the job as a
    # preemption victim (0 until then), and where a pending job is planned to start.
    qos: str | None = None
    preempt_time: WireTime = None
    scheduled_nodes: str | None = None
    # What the job holds (running) or asks for (pending), which its owner may change with
    # ``scontrol update``: the bridge compares it with what it submitted (rules/allocationmatch.py).
    tres_alloc_str: str | None = None
    tres_req_str: str | None = None
    tres_per_node: str | None = None
    mcs_label: str | None = None


class CoreWire(_Wire):
    index: int
    status: list[str] | str = Field(default_factory=list)


class SocketWire(_Wire):
    index: int
    cores: list[CoreWire] = Field(default_factory=list)


class NodeAllocationWire(_Wire):
    name: str
    sockets: list[SocketWire] = Field(default_factory=list)


class JobDevicesWire(_Wire):
    """The parts of a job record that say which devices it holds where."""

    nodes: str | None = None
    gres_detail: list[str] = Field(default_factory=list)  # one entry per node, in ``nodes`` order
    allocation: list[NodeAllocationWire] = Field(default_factory=list)  # from job_resources.nodes

    @model_validator(mode="before")
    @classmethod
    def _lift_allocation(cls, data: Any) -> Any:
        if isinstance(data, dict):
            resources = data.get("job_resources") or {}
            nodes = resources.get("nodes") if isinstance(resources, dict) else None
            data = {k: data[k] for k in ("nodes", "gres_detail") if k in data}
            if isinstance(nodes, dict) and isinstance(nodes.get("allocation"), list):
                data["allocation"] = nodes["allocation"]
        return data


class NodeWire(_Wire):
    name: str
    state: list[str] | str = Field(default_factory=list)
    reason: str | None = None
    reason_set_by_user: str | None = None
    cpus: int | None = None
    real_memory: int | None = None
    effective_cpus: int | None = None
    specialized_memory: int | None = None
    gres: str | None = None
    features: list[str] | str | None = None
    partitions: list[str] | str | None = None
    comment: str | None = None
    topology: str | None = None
    alloc_cpus: int | None = None
    alloc_memory: int | None = None


class PartitionWire(_Wire):
    name: str
    maximums: dict[str, Any] | None = None  # over_time_limit (minutes; NoVal) is read (handoff)


class OverSubscribeWire(_Wire):
    """v0.0.43 and v0.0.44 (deprecated and zeroed in v0.0.45, gone in v0.0.46): Slurm's max_share
    without its FORCE bit (0: EXCLUSIVE, 1: NO, n: up to n jobs per resource) and that bit as a flag."""

    jobs: int = 1
    flags: list[str] = Field(default_factory=list)


class PartitionMaximumsWire(_Wire):
    oversubscribe: OverSubscribeWire = Field(default_factory=OverSubscribeWire)


class PartitionStateWire(_Wire):
    """``partition`` of a partition in v0.0.45 and later: scontrol's OverSubscribe (NO, YES:<n>,
    FORCE:<n>) and (new in 26.05) Exclusive (NO, NODE, USER, TOPO)."""

    oversubscribe: str | None = None
    exclusive: str | None = None


class PartitionInfoWire(_Wire):
    name: str
    maximums: PartitionMaximumsWire = Field(default_factory=PartitionMaximumsWire)
    partition: PartitionStateWire = Field(default_factory=PartitionStateWire)
    topology: str | None = None  # its Topology= (v0.0.43 and later; "" or absent: the cluster's default)


class SlurmConfWire(_Wire):
    """The slurm.conf keys the bridge reads of ``GET conf``'s ``slurm_conf`` (v0.0.45 and later)."""

    MCSPlugin: str = ""
    MCSParameters: list[str] | str = Field(default_factory=list)
    SelectType: str = ""
    SelectTypeParameters: list[str] | str = Field(default_factory=list)
    EpilogSlurmctld: list[str] | str = Field(default_factory=list)
    PreemptType: str = ""
    PreemptMode: list[str] | str = Field(default_factory=list)
    SchedulerParameters: list[str] | str = Field(default_factory=list)
    # Minutes: a number (INFINITE16, 65535, for UNLIMITED) or a NoVal.
    OverTimeLimit: NoVal | int | None = None


class JobSettingsWire(_Wire):
    """The parts of a job record a pending job's update may change (:class:`.models.JobSettings`)."""

    job_id: int
    name: str = ""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    priority: NoVal | int | None = None
    features: str | None = None
    time_limit: NoVal | int | None = None
    node_count: NoVal | int | None = None
    max_nodes: NoVal | int | None = None


class AllowDeny(_Wire):
    """A partition's AllowX/DenyX lists, comma-separated; "" allows every one."""

    allowed: str = ""
    deny: str = ""


class PartitionTimes(_Wire):
    time: NoVal | int | None = None


class PartitionLimitsWire(_Wire):
    """A partition's limits (:class:`.models.PartitionLimits`); the same layout in v0.0.43 to v0.0.46."""

    name: str
    accounts: AllowDeny = Field(default_factory=AllowDeny)
    qos: AllowDeny = Field(default_factory=AllowDeny)
    maximums: PartitionTimes = Field(default_factory=PartitionTimes)
    defaults: PartitionTimes = Field(default_factory=PartitionTimes)
    # Its flags (DEFAULT, HIDDEN, ROOT_ONLY, ...): v0.0.45 and later only; absent before.
    flags: list[str] | None = None


class SubmitWire(WireResponse):
    job_id: int | None = None
    job_submit_user_msg: str | None = None


class UpdateResult(_Wire):
    job_id: int | None = None
    error_code: int = 0
    error: str = ""
    why: str = ""


class JobPostWire(WireResponse):
    results: list[UpdateResult] = Field(default_factory=list)


class KillError(_Wire):
    string: str = ""
    code: int = 0
    message: str = ""


class KillStatus(_Wire):
    error: KillError = Field(default_factory=KillError)
    job_id: NoVal | int | None = None
    step_id: str = ""  # "123", "123.batch", "123_4": which job a kill-jobs failure is of


class KillWire(WireResponse):
    status: list[KillStatus] = Field(default_factory=list)


class ControllerPing(_Wire):
    hostname: str = ""
    responding: bool = False
    primary: bool = False
    latency: int | None = None  # microseconds


class PingWire(WireResponse):
    pings: list[ControllerPing] = Field(default_factory=list)


_WireT = TypeVar("_WireT", bound=BaseModel)


def validate(model: type[_WireT], body: Any, what: str) -> _WireT:
    """``body`` as ``model``, or a SlurmError naming the answer (``what``) and its invalid fields."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise SlurmError(f"unexpected {what} from slurmrestd: {e.error_count()} field(s) invalid: {e}") from None


def listed(body: Any, key: str, what: str) -> list[Any]:
    """The answer's ``key`` list, or a SlurmError saying which answer lacked it."""
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise SlurmError(f"unexpected {what} answer from slurmrestd: no '{key}' list")
    return items
