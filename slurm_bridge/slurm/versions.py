"""Wire formats of slurmrestd's REST API versions v0.0.43, v0.0.44 and v0.0.45.

Each version has a codec that turns the version-neutral models into request bodies and Slurm's
answers back into them, so nothing outside this package sees a REST API version. The three
versions agree on every field the bridge uses (checked against the OpenAPI specs that Slurm
26.05's data_parser plugins generate); they differ only in the node states an update accepts.
Decoding is lenient (unknown fields ignored, older shapes such as a ``job_state`` string
accepted) because a Slurm upgrade adds fields to answers without changing the version.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, TypeVar

import hostlist
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import SlurmError, SlurmErrorDetail, SlurmUnsupportedVersion
from .models import JobInfo, JobRequest, JobStates, NodeDevices, NodeInfo

# Highest first: the client picks the first one the server offers.
SUPPORTED_VERSIONS: Final = ("v0.0.45", "v0.0.44", "v0.0.43")
# The oldest Slurm the bridge runs on: external jobs came with 25.05 (its REST API v0.0.43).
MIN_SLURM_RELEASE: Final = (25, 5)


def slurm_release(body: object) -> str | None:
    """The Slurm release an answer's ``meta`` names (e.g. "24.11.5"), in any REST API version."""
    meta = body.get("meta") if isinstance(body, dict) else None
    slurm = meta.get("slurm") if isinstance(meta, dict) else None
    if not isinstance(slurm, dict):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and release:
        return release
    v = slurm.get("version")
    if isinstance(v, dict) and all(k in v for k in ("major", "minor", "micro")):
        return f"{v['major']}.{int(v['minor']):02d}.{v['micro']}"
    return None


def too_old(release: str) -> bool:
    """Whether a Slurm release predates external jobs (None-safe callers parse first)."""
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < MIN_SLURM_RELEASE


# Base job states; Slurm lists flags (COMPLETING, REQUEUED, ...) beside them.
_JOB_BASE_STATES: Final = frozenset(
    {
        "PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
        "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY",
    }
)  # fmt: skip
# (EXTERNAL, new in 26.05, is a flag: scontrol shows IDLE+EXTERNAL.)
_NODE_BASE_STATES: Final = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
# Node states an update may ask for: the REST enum's names for the state verbs of
# `scontrol update node` (NOT_RESPONDING is scontrol's NoResp, POWER_DRAIN its POWER_DOWN_ASAP).
_NODE_UPDATE_STATES_V43: Final = frozenset(
    {
        "DOWN", "DRAIN", "FAIL", "FUTURE", "NOT_RESPONDING", "POWER_DOWN", "POWER_DRAIN",
        "POWER_UP", "RESUME", "UNDRAIN",
    }
)  # fmt: skip


# --- wire models ---------------------------------------------------------------------------


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


_Time = NoVal | int | None


class JobWire(_Wire):
    job_id: int
    name: str = ""
    job_state: list[str] | str = Field(default_factory=list)
    state_reason: str = ""
    nodes: str | None = None
    admin_comment: str | None = None
    partition: str | None = None
    flags: list[str] = Field(default_factory=list)
    submit_time: _Time = None
    start_time: _Time = None
    end_time: _Time = None
    time_limit: _Time = None
    user_name: str | None = None
    account: str | None = None
    het_job_id: NoVal | int | None = None
    het_job_offset: NoVal | int | None = None


_JOB_KEYS = tuple(JobWire.model_fields)
# ``jobs/state`` names a heterogeneous job's component ``<leader>+<offset>``.
_HET_STATE_ID = re.compile(r"^(\d+)\+(\d+)$")  # a heterogeneous component: <its own id>+<offset>


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


# One GRES of a node's detail: name[:type][:count], then "(IDX:0-1,3)" or "(CNT:2)"; a type has a
# non-digit, so that (as in Slurm) "gpu:2" is a count.
_GRES_DETAIL = re.compile(
    r"^(?P<name>[^:(]+)(?::(?P<type>[^:(]*[^:(\d][^:(]*))?(?::(?P<count>\d+))?(?:\((?P<what>IDX|CNT):(?P<list>[^)]*)\))?$"
)


def parse_gres_detail(detail: str) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """({GRES name: indices}, {GRES name: count}) of one node's GRES detail, such as
    ``gpu:2(IDX:0,2)``, ``gpu:a100:1(IDX:3),shard:0(IDX:N/A)`` or ``gpu(CNT:2)`` (no indices:
    the GRES has no device files). Items are split at commas outside parentheses."""
    items, depth, current = [], 0, ""
    for ch in detail:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    indices: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for item in filter(None, (i.strip() for i in items)):
        m = _GRES_DETAIL.match(item)
        if not m:
            continue
        name, what, listed = m["name"], m["what"], m["list"] or ""
        if what == "CNT" and listed.isdigit():
            counts[name] = counts.get(name, 0) + int(listed)
        elif what == "IDX" and listed and listed != "N/A":
            found = _index_list(listed)
            indices.setdefault(name, []).extend(found)
            counts[name] = counts.get(name, 0) + len(found)
        elif m["count"]:
            counts[name] = counts.get(name, 0) + int(m["count"])
    return {k: tuple(sorted(v)) for k, v in indices.items()}, counts


def _index_list(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


class NodeWire(_Wire):
    name: str
    state: list[str] | str = Field(default_factory=list)
    reason: str | None = None
    reason_set_by_user: str | None = None
    cpus: int | None = None
    real_memory: int | None = None
    gres: str | None = None
    features: list[str] | str | None = None
    partitions: list[str] | str | None = None
    comment: str | None = None


class PartitionWire(_Wire):
    name: str


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


class KillWire(WireResponse):
    status: list[KillStatus] = Field(default_factory=list)


class ControllerPing(_Wire):
    hostname: str = ""
    responding: bool = False
    primary: bool = False
    latency: int | None = None  # microseconds


class PingWire(WireResponse):
    pings: list[ControllerPing] = Field(default_factory=list)


# --- helpers ---------------------------------------------------------------------------------


def _time(v: _Time) -> datetime | None:
    n = v.value() if isinstance(v, NoVal) else v
    return datetime.fromtimestamp(n, tz=UTC) if n else None


def _minutes(v: _Time) -> int | None:
    return v.value() if isinstance(v, NoVal) else v


def _number(v: NoVal | int | None) -> int:
    """A count or id that Slurm may leave unset (0 then)."""
    n = v.value() if isinstance(v, NoVal) else v
    return n or 0


def _base_first(states: list[str] | str, base: frozenset[str]) -> tuple[str, ...]:
    """Upper-cased states with the base state first, whatever order the server used."""
    items = [s.upper() for s in ([states] if isinstance(states, str) else states) if s]
    if isinstance(states, str):  # old "RUNNING+COMPLETING" style
        items = [p for s in items for p in s.replace("+", " ").split()]
    bases = [s for s in items if s in base]
    return tuple(bases[:1] + [s for s in items if s not in bases[:1]])


def _csv(v: list[str] | str | None) -> tuple[str, ...]:
    if v is None:
        return ()
    items = v.split(",") if isinstance(v, str) else v
    return tuple(s.strip() for s in items if s.strip())


def expand_nodes(nodes: str | None) -> tuple[str, ...]:
    """``"kwok-node-[1-2,4]"`` -> the node names, in Slurm's order."""
    if not nodes or nodes in ("(null)", "None"):
        return ()
    names: list[str] = hostlist.expand_hostlist(nodes)
    return tuple(names)


def gres_to_tres_per_node(gres: str) -> str:
    """Accept sbatch's ``--gres`` form ("gpu:2") as well as Slurm's TRES form ("gres/gpu:2")."""
    items = [g.strip() for g in gres.split(",") if g.strip()]
    return ",".join(g if "/" in g.split(":", 1)[0] else f"gres/{g}" for g in items)


_WireT = TypeVar("_WireT", bound=BaseModel)


def _validate(model: type[_WireT], body: Any, what: str) -> _WireT:
    try:
        return model.model_validate(body)
    except ValidationError as e:
        raise SlurmError(f"unexpected {what} from slurmrestd: {e.error_count()} field(s) invalid: {e}") from None


# --- codecs ----------------------------------------------------------------------------------


def listed(body: Any, key: str, what: str) -> list[Any]:
    """The answer's ``key`` list, or a SlurmError saying which answer lacked it."""
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise SlurmError(f"unexpected {what} answer from slurmrestd: no '{key}' list")
    return items


class Codec:
    """Encode and decode one REST API version (the v0.0.43 layout; later versions override)."""

    version: ClassVar[str] = "v0.0.43"
    node_update_states: ClassVar[frozenset[str]] = _NODE_UPDATE_STATES_V43

    def path(self, suffix: str) -> str:
        return f"/slurm/{self.version}/{suffix}"

    def db_path(self, suffix: str) -> str:
        """A path of the accounting endpoints (slurmrestd's slurmdbd plugin)."""
        return f"/slurmdb/{self.version}/{suffix}"

    # -- requests

    def job_desc(self, req: JobRequest, *, for_update: bool = False) -> JobDesc:
        """The job description for ``req``.

        Node count: ``minimum_nodes`` is ``req.nodes`` and ``maximum_nodes`` is ``req.max_nodes``,
        or also ``req.nodes`` so that pods get exactly the nodes they were counted for.

        Sharing: ``exclusive=True`` sends ``shared: ["none"]``, which is sbatch's ``--exclusive``
        (whole nodes). ``exclusive=False`` sends nothing, which under select/cons_tres lets other
        jobs use the node's remaining cpus, memory and GRES (partition OverSubscribe=NO, the
        default) -- that is what "shared node" means here. ``["oversubscribe"]`` is deliberately
        not used: it means sbatch's ``--oversubscribe``, sharing the *same* cpus with other jobs
        where the partition allows it, and it cannot undo a partition's OverSubscribe=EXCLUSIVE.
        ``None`` also sends nothing (the partition's default).

        ``user_id``/``group_id`` are strings on the wire, and the API also accepts names there:
        ``user_name``/``group_name`` (a TenantPolicy's user by name) go into the same fields.

        Placement: ``required_nodes`` and ``excluded_nodes`` are arrays of node names (the
        ``csv_string`` of every supported version), sbatch's ``--nodelist`` and ``--exclude``.
        """
        d = JobDesc(
            partition=req.partition,
            account=req.account,
            qos=req.qos,
            reservation=req.reservation,
            wckey=req.wckey,
            constraints=req.constraints,
            required_nodes=list(req.required_nodes) if req.required_nodes else None,
            excluded_nodes=list(req.excluded_nodes) if req.excluded_nodes else None,
            licenses=req.licenses,
            minimum_nodes=req.nodes,
            maximum_nodes=req.max_nodes if req.max_nodes is not None else req.nodes,
            tasks_per_node=req.tasks_per_node,
            cpus_per_task=req.cpus_per_task,
            memory_per_node=None if req.memory_per_node_mib is None else NoVal.of(req.memory_per_node_mib),
            tres_per_node=gres_to_tres_per_node(req.gres) if req.gres else None,
            time_limit=None if req.time_limit_minutes is None else NoVal.of(req.time_limit_minutes),
            shared=["none"] if req.exclusive else None,
            priority=None if req.priority is None else NoVal.of(req.priority),
            mcs_label=req.mcs_label,
        )
        if not for_update:
            d.user_id = req.user_name or (None if req.user_id is None else str(req.user_id))
            d.group_id = req.group_name or (None if req.group_id is None else str(req.group_id))
        return d

    def submit_body(self, req: JobRequest, *, name: str, admin_comment: str) -> dict[str, Any]:
        """An external job: Slurm allocates the nodes and runs nothing on them (the pods do)."""
        d = self.job_desc(req)
        d.name = name
        d.admin_comment = admin_comment
        d.flags = ["EXTERNAL_JOB"]
        d.current_working_directory = "/tmp"
        return {"job": d.body()}

    def het_submit_body(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> dict[str, Any]:
        """One heterogeneous external job, a component per request in offset order (``jobs``, a
        list of job descriptions: Slurm 26.05 makes them one job whose leader is component 0,
        checked). Every component carries the name and the admin comment, so each is found as the
        bridge's in Slurm's lists, where each component is a job of its own."""
        if not reqs:
            raise ValueError("a heterogeneous job needs at least one component")
        return {"jobs": [self.submit_body(r, name=name, admin_comment=admin_comment)["job"] for r in reqs]}

    def allocate_body(self, req: JobRequest, *, name: str, admin_comment: str) -> dict[str, Any]:
        """The external job of :meth:`submit_body`, allocated now or refused (never queued)."""
        body = self.submit_body(req, name=name, admin_comment=admin_comment)
        body["job"]["immediate"] = True
        return body

    def update_body(self, req: JobRequest) -> dict[str, Any]:
        """Fields a pending job may change; name, admin comment and owner are kept as submitted."""
        return self.job_desc(req, for_update=True).body()

    def create_node_body(self, node_conf: str) -> dict[str, Any]:
        """``POST new/node``: one slurm.conf node line (v0.0.44 and later)."""
        raise SlurmUnsupportedVersion(
            f"REST API {self.version} cannot create nodes (POST new/node is v0.0.44 and later): registering "
            "Kubernetes nodes as dynamic Slurm nodes needs Slurm 25.05 or newer"
        )

    def node_update_body(self, state: str | None, reason: str | None, comment: str | None = None) -> dict[str, Any]:
        if state is not None:
            state = state.upper()
            if state not in self.node_update_states:
                raise ValueError(
                    f"node state {state!r} cannot be set through REST API {self.version}; "
                    f"use one of {', '.join(sorted(self.node_update_states))}"
                )
        return UpdateNode(state=None if state is None else [state], reason=reason, comment=comment).body()

    # -- answers

    def envelope(self, body: Any) -> WireResponse:
        return _validate(WireResponse, body if isinstance(body, dict) else {}, "answer")

    def decode_submit(self, body: Any) -> int:
        r = _validate(SubmitWire, body, "job submit answer")
        if not r.job_id:
            raise SlurmError("slurmrestd accepted the job submission but returned no job id")
        return r.job_id

    def decode_update(self, body: Any) -> list[SlurmErrorDetail]:
        """Per-job failures of a job update (the envelope may still be error free)."""
        r = _validate(JobPostWire, body if body is not None else {}, "job update answer")
        return [
            SlurmErrorDetail(x.error or x.why, x.error_code, x.why if x.error else "", "job update")
            for x in r.results
            if x.error_code
        ]

    def decode_kill(self, body: Any) -> list[SlurmErrorDetail]:
        r = _validate(KillWire, body if body is not None else {}, "job cancel answer")
        return [
            SlurmErrorDetail(s.error.string, s.error.code, s.error.message, "job cancel")
            for s in r.status
            if s.error.code
        ]

    def decode_ping(self, body: Any) -> list[ControllerPing]:
        return _validate(PingWire, body, "ping answer").pings

    def decode_job(self, raw: dict[str, Any]) -> JobInfo:
        # Validate only the fields read (a job record has ~150) and build JobInfo from values
        # already checked: a poll decodes every job Slurm knows, so this is the hot path.
        w = _validate(JobWire, {k: raw[k] for k in _JOB_KEYS if k in raw}, "job")
        return JobInfo.model_construct(
            job_id=w.job_id,
            name=w.name,
            states=_base_first(w.job_state, _JOB_BASE_STATES),
            reason="" if w.state_reason in ("None", "none") else w.state_reason,
            nodes=expand_nodes(w.nodes),
            admin_comment=w.admin_comment or "",
            partition=w.partition or "",
            flags=tuple(w.flags),
            submit_time=_time(w.submit_time),
            start_time=_time(w.start_time),
            end_time=_time(w.end_time),
            time_limit_minutes=_minutes(w.time_limit),
            user_name=w.user_name or "",
            account=w.account or "",
            het_job_id=_number(w.het_job_id),
            het_job_offset=_number(w.het_job_offset),
        )

    def decode_jobs(self, body: Any) -> list[JobInfo]:
        return [self.decode_job(j) for j in listed(body, "jobs", "jobs")]

    def decode_job_states(self, body: Any, previous: JobStates | None = None) -> JobStates:
        """``jobs/state``: job id -> state flags (base state first, as in :meth:`decode_job`).

        Ids are strings on the wire; array task ids (``12_3``) are left out: the bridge never
        makes array jobs. A heterogeneous job's component is named ``<id>+<offset>``, its own job id
        first (checked on Slurm 26.05: leader 13's components are ``13+0`` and ``14+1``), and is
        kept by that id (the bridge's CompositePodGroups are heterogeneous jobs).
        ``unchanged``: every job has the same flags as in ``previous`` (in whatever order they
        came). Decoding 10,000 jobs takes about 2.5 ms: each distinct flag list is ordered once.
        """
        items = listed(body, "jobs", "jobs/state")
        states: dict[int, tuple[str, ...]] = {}
        # Thousands of jobs share a handful of flag lists: order each distinct one once.
        ordered: dict[tuple[str, ...] | str, tuple[str, ...]] = {}
        for j in items:
            raw_id = j.get("job_id") if isinstance(j, dict) else None
            if isinstance(raw_id, str):
                if raw_id.isdigit():
                    job_id = int(raw_id)
                elif (m := _HET_STATE_ID.match(raw_id)) is not None:
                    job_id = int(m[1])
                else:
                    continue
            elif isinstance(raw_id, int):
                job_id = raw_id
            else:
                continue
            flags = j.get("state", j.get("job_state", []))
            if not isinstance(flags, list | str):
                flags = []
            key = tuple(flags) if isinstance(flags, list) else flags
            found = ordered.get(key)
            if found is None:
                found = ordered[key] = _base_first(flags, _JOB_BASE_STATES)
            states[job_id] = found
        unchanged = previous is not None and states == previous.by_id
        return JobStates(states, unchanged=unchanged)

    def last_update(self, body: Any) -> int | None:
        """The answer's ``last_update`` (Slurm's clock, seconds): what to pass as ``update_time``
        next time. None when missing, unset or 0 (an "unchanged" jobs answer has 0)."""
        last = body.get("last_update") if isinstance(body, dict) else None
        number = last.get("number") if isinstance(last, dict) and last.get("set", True) else last
        return number if isinstance(number, int) and not isinstance(number, bool) and number > 0 else None

    def unchanged_since(self, status: int, body: Any, key: str) -> bool:
        """Whether an answer to a list with ``update_time`` says nothing changed since then.

        slurmrestd (Slurm 26.05; v0.0.43, v0.0.44 and v0.0.45 alike, checked) answers ``GET nodes``
        with ``304 Not Modified`` and no body, and ``GET jobs`` with 200, an empty list, a
        ``last_update`` of 0 and the warning "No job changes since update_time[...]". Either form
        is accepted for both lists; an empty list with a real ``last_update`` is an empty table.
        """
        if status == 304:
            return True
        items = body.get(key) if isinstance(body, dict) else None
        return isinstance(body, dict) and not items and self.last_update(body) is None

    def decode_node(self, raw: dict[str, Any]) -> NodeInfo:
        w = _validate(NodeWire, raw, "node")
        return NodeInfo(
            name=w.name,
            states=_base_first(w.state, _NODE_BASE_STATES),
            reason=w.reason or "",
            reason_user=w.reason_set_by_user or "",
            cpus=w.cpus or 0,
            real_memory_mib=w.real_memory or 0,
            gres=w.gres or "",
            features=_csv(w.features),
            partitions=_csv(w.partitions),
            comment=w.comment or "",
        )

    def decode_job_devices(self, body: Any, job_id: int) -> dict[str, NodeDevices] | None:
        """Node -> what job ``job_id`` of a job answer holds there (None: not in the answer): GRES
        indices from ``gres_detail`` (aligned with the job's node list) and CPUs from
        ``job_resources`` (cores marked ALLOCATED, numbered socket by socket as Slurm numbers a
        node's cores)."""
        raw = next((j for j in listed(body, "jobs", "job") if isinstance(j, dict) and j.get("job_id") == job_id), None)
        if raw is None:
            return None
        w = _validate(JobDevicesWire, raw, "job devices")
        nodes = expand_nodes(w.nodes)
        cpus: dict[str, tuple[int, ...]] = {}
        for alloc in w.allocation:
            found, base = [], 0
            for socket in sorted(alloc.sockets, key=lambda s: s.index):
                for core in socket.cores:
                    flags = [core.status] if isinstance(core.status, str) else core.status
                    if "ALLOCATED" in flags:
                        found.append(base + core.index)
                base += len(socket.cores)
            cpus[alloc.name] = tuple(sorted(found))
        out: dict[str, NodeDevices] = {}
        for i, node in enumerate(nodes):
            indices, counts = parse_gres_detail(w.gres_detail[i]) if i < len(w.gres_detail) else ({}, {})
            out[node] = NodeDevices(gres=indices, gres_counts=counts, cpus=cpus.get(node, ()))
        return out

    def decode_nodes(self, body: Any) -> list[NodeInfo]:
        return [self.decode_node(n) for n in listed(body, "nodes", "nodes")]

    def decode_db_names(self, body: Any, key: str) -> list[str]:
        """The ``name`` of each entry of an accounting list (``accounts``, ``qos``)."""
        return [_validate(PartitionWire, a, key).name for a in listed(body, key, key)]

    def decode_partition_names(self, body: Any) -> list[str]:
        return [_validate(PartitionWire, p, "partition").name for p in listed(body, "partitions", "partitions")]


class CodecV0043(Codec):
    version = "v0.0.43"


class CodecV0044(CodecV0043):
    version = "v0.0.44"

    def create_node_body(self, node_conf: str) -> dict[str, Any]:
        return {"node_conf": node_conf}


class CodecV0045(CodecV0044):
    version = "v0.0.45"
    # 26.05 adds POWER_DOWN_ASAP and POWER_DOWN_FORCE to the node update states.
    node_update_states = _NODE_UPDATE_STATES_V43 | {"POWER_DOWN_ASAP", "POWER_DOWN_FORCE"}


CODECS: Final[dict[str, Codec]] = {c.version: c for c in (CodecV0045(), CodecV0044(), CodecV0043())}


def codec_for(version: str) -> Codec:
    try:
        return CODECS[version]
    except KeyError:
        raise ValueError(
            f"unsupported Slurm REST API version {version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}"
        ) from None
