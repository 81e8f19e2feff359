"""Decoding slurmrestd's answers into the version-neutral models of :mod:`.models` (jobs, job
states, nodes, a job's devices, pings, names) and the per-job failures of updates and cancels.

A mixin of :class:`.versions.Codec`. Validation reads only the fields the bridge uses, and a
decoded record keeps no reference to the wire record (a poll decodes every job Slurm knows).
"""

from __future__ import annotations

import re
from typing import Any, Final

from .errors import SlurmError, SlurmErrorDetail
from .formats import (
    base_first,
    csv_items,
    expand_nodes,
    minutes_of,
    number_of,
    parse_gres_detail,
    parse_gres_shares,
    time_of,
)
from .models import JobInfo, JobSettings, JobStates, NodeDevices, NodeInfo, PartitionInfo, PartitionLimits, SlurmConf
from .wire import (
    ControllerPing,
    JobDevicesWire,
    JobPostWire,
    JobSettingsWire,
    JobWire,
    KillWire,
    NodeWire,
    NoVal,
    PartitionInfoWire,
    PartitionLimitsWire,
    PartitionWire,
    PingWire,
    SlurmConfWire,
    SubmitWire,
    WireResponse,
    listed,
    validate,
)

# Base job states; Slurm lists flags (COMPLETING, REQUEUED, ...) beside them.
_JOB_BASE_STATES: Final = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# (EXTERNAL, new in 26.05, is a flag: scontrol shows IDLE+EXTERNAL.)
_NODE_BASE_STATES: Final = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})

_JOB_KEYS = tuple(JobWire.model_fields)
_number = minutes_of  # a "number with flags": None when unset or infinite
# ``jobs/state`` names a heterogeneous job's component ``<leader>+<offset>``.
_HET_STATE_ID = re.compile(r"^(\d+)\+(\d+)$")  # a heterogeneous component: <its own id>+<offset>


class AnswerDecoder:
    """Decode answers (the layout every supported version shares)."""

    def envelope(self, body: Any) -> WireResponse:
        return validate(WireResponse, body if isinstance(body, dict) else {}, "answer")

    def decode_submit(self, body: Any) -> int:
        r = validate(SubmitWire, body, "job submit answer")
        if not r.job_id:
            raise SlurmError("slurmrestd accepted the job submission but returned no job id")
        return r.job_id

    def decode_update(self, body: Any) -> list[SlurmErrorDetail]:
        """Per-job failures of a job update (the envelope may still be error free)."""
        r = validate(JobPostWire, body if body is not None else {}, "job update answer")
        return [
            SlurmErrorDetail(x.error or x.why, x.error_code, x.why if x.error else "", "job update")
            for x in r.results
            if x.error_code
        ]

    def decode_kill(self, body: Any) -> list[SlurmErrorDetail]:
        r = validate(KillWire, body if body is not None else {}, "job cancel answer")
        return [
            SlurmErrorDetail(s.error.string, s.error.code, s.error.message, "job cancel")
            for s in r.status
            if s.error.code
        ]

    def decode_kill_jobs(self, body: Any) -> dict[int, list[SlurmErrorDetail]]:
        """A kill-jobs answer (``DELETE jobs/``): the jobs it failed for, each with its errors. A
        failure names its job in ``step_id`` ("123", "123.batch", "123_4"), ``job_id`` unset for an
        unknown one."""
        r = validate(KillWire, body if body is not None else {}, "jobs cancel answer")
        failed: dict[int, list[SlurmErrorDetail]] = {}
        for s in r.status:
            if not s.error.code:
                continue
            head = s.step_id.split(".", 1)[0].split("_", 1)[0]
            job = int(head) if head.isdigit() else number_of(s.job_id)
            if not job:
                continue
            failed.setdefault(job, []).append(
                SlurmErrorDetail(s.error.string, s.error.code, s.error.message, "jobs cancel")
            )
        return failed

    def decode_ping(self, body: Any) -> list[ControllerPing]:
        return validate(PingWire, body, "ping answer").pings

    def decode_job(self, raw: dict[str, Any]) -> JobInfo:
        # Validate only the fields read (a job record has ~150) and build JobInfo from values
        # already checked: a poll decodes every job Slurm knows, so this is the hot path.
        w = validate(JobWire, {k: raw[k] for k in _JOB_KEYS if k in raw}, "job")
        states = base_first(w.job_state, _JOB_BASE_STATES)
        return JobInfo.model_construct(
            job_id=w.job_id,
            name=w.name,
            states=states,
            reason="" if w.state_reason in ("None", "none") else w.state_reason,
            nodes=expand_nodes(w.nodes),
            admin_comment=w.admin_comment or "",
            comment=w.comment or "",
            partition=w.partition or "",
            flags=tuple(w.flags),
            submit_time=time_of(w.submit_time),
            start_time=time_of(w.start_time),
            end_time=time_of(w.end_time),
            time_limit_minutes=minutes_of(w.time_limit),
            user_name=w.user_name or "",
            account=w.account or "",
            user_id=w.user_id,
            group_id=w.group_id,
            group_name=w.group_name or "",
            het_job_id=number_of(w.het_job_id),
            het_job_offset=number_of(w.het_job_offset),
            qos=w.qos or "",
            preempt_time=time_of(w.preempt_time),
            scheduled_nodes=expand_nodes(w.scheduled_nodes),
            tres=(w.tres_req_str if states[:1] == ("PENDING",) else w.tres_alloc_str or w.tres_req_str) or "",
            gres_per_node=w.tres_per_node or "",
            mcs_label=w.mcs_label or "",
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
                found = ordered[key] = base_first(flags, _JOB_BASE_STATES)
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
        w = validate(NodeWire, raw, "node")
        return NodeInfo(
            name=w.name,
            states=base_first(w.state, _NODE_BASE_STATES),
            reason=w.reason or "",
            reason_user=w.reason_set_by_user or "",
            cpus=w.cpus or 0,
            real_memory_mib=w.real_memory or 0,
            effective_cpus=w.effective_cpus,
            specialized_memory_mib=w.specialized_memory or 0,
            gres=w.gres or "",
            features=csv_items(w.features),
            partitions=csv_items(w.partitions),
            comment=w.comment or "",
            topology=w.topology or "",
            alloc_cpus=w.alloc_cpus or 0,
            alloc_memory_mib=w.alloc_memory or 0,
        )

    def decode_job_devices(self, body: Any, job_id: int) -> dict[str, NodeDevices] | None:
        """Node -> what job ``job_id`` of a job answer holds there (None: not in the answer): GRES
        indices from ``gres_detail`` (aligned with the job's node list) and CPUs from
        ``job_resources`` (cores marked ALLOCATED, numbered socket by socket as Slurm numbers a
        node's cores)."""
        raw = next((j for j in listed(body, "jobs", "job") if isinstance(j, dict) and j.get("job_id") == job_id), None)
        if raw is None:
            return None
        w = validate(JobDevicesWire, raw, "job devices")
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
            detail = w.gres_detail[i] if i < len(w.gres_detail) else ""
            indices, counts = parse_gres_detail(detail)
            shares = parse_gres_shares(detail)
            out[node] = NodeDevices(gres=indices, gres_counts=counts, shares=shares, cpus=cpus.get(node, ()))
        return out

    def decode_nodes(self, body: Any) -> list[NodeInfo]:
        return [self.decode_node(n) for n in listed(body, "nodes", "nodes")]

    def decode_db_names(self, body: Any, key: str) -> list[str]:
        """The ``name`` of each entry of an accounting list (``accounts``, ``qos``)."""
        return [validate(PartitionWire, a, key).name for a in listed(body, key, key)]

    def decode_partition_names(self, body: Any) -> list[str]:
        return [validate(PartitionWire, p, "partition").name for p in listed(body, "partitions", "partitions")]

    def decode_partition(self, body: Any) -> PartitionInfo | None:
        """The one partition of a ``partition/{name}`` answer (None: the answer lists none, as Slurm
        26.05 answers for an unknown name: HTTP 200, ``partitions: null``)."""
        if isinstance(body, dict) and body.get("partitions") is None:
            return None
        items = listed(body, "partitions", "partition")
        if not items:
            return None
        w = validate(PartitionInfoWire, items[0], "partition")
        return PartitionInfo(name=w.name, oversubscribe=self.oversubscribe(w), topology=w.topology or "")

    def oversubscribe(self, w: PartitionInfoWire) -> str:
        """The partition's OverSubscribe as scontrol shows it, from ``maximums.oversubscribe``."""
        jobs, force = w.maximums.oversubscribe.jobs, "force" in [f.lower() for f in w.maximums.oversubscribe.flags]
        if jobs == 0:
            return "EXCLUSIVE"
        if force:
            return f"FORCE:{jobs}"
        return "NO" if jobs == 1 else f"YES:{jobs}"

    def decode_conf(self, body: Any) -> SlurmConf:
        """``GET conf``'s ``slurm_conf`` (v0.0.45 and later)."""
        raw = body.get("slurm_conf") if isinstance(body, dict) else None
        if not isinstance(raw, dict):
            raise SlurmError("unexpected conf answer from slurmrestd: no 'slurm_conf' object")
        w = validate(SlurmConfWire, raw, "slurm_conf")
        return SlurmConf(
            mcs_plugin=w.MCSPlugin,
            mcs_parameters=csv_items(w.MCSParameters),
            select_type=w.SelectType,
            select_type_parameters=csv_items(w.SelectTypeParameters),
            epilog_slurmctld=csv_items(w.EpilogSlurmctld),
            preempt_type=w.PreemptType,
            preempt_mode=tuple(m.upper() for m in csv_items(w.PreemptMode)),
            over_time_limit_minutes=_over_time(w.OverTimeLimit),
            scheduler_parameters=csv_items(w.SchedulerParameters),
        )

    def decode_partition_limits(self, body: Any) -> list[PartitionLimits]:
        """Each partition's time limits, account and QOS lists (``""``: all allowed) and, where
        the version shows them, its RootOnly and Default flags."""
        out = []
        for raw in listed(body, "partitions", "partitions"):
            w = validate(PartitionLimitsWire, raw, "partition")
            out.append(
                PartitionLimits(
                    name=w.name,
                    max_time_minutes=minutes_of(w.maximums.time),
                    default_time_minutes=minutes_of(w.defaults.time),
                    allow_accounts=csv_items(w.accounts.allowed) or None,
                    deny_accounts=csv_items(w.accounts.deny),
                    allow_qos=csv_items(w.qos.allowed) or None,
                    deny_qos=csv_items(w.qos.deny),
                    root_only=None if w.flags is None else "ROOT_ONLY" in w.flags,
                    default=None if w.flags is None else "DEFAULT" in w.flags,
                )
            )
        return out

    def decode_job_settings(self, body: Any, job_id: int) -> JobSettings | None:
        """What job ``job_id`` of a job answer asks for (None: not in the answer)."""
        raw = next((j for j in listed(body, "jobs", "job") if isinstance(j, dict) and j.get("job_id") == job_id), None)
        if raw is None:
            return None
        w = validate(JobSettingsWire, raw, "job")
        return JobSettings(
            job_id=w.job_id,
            name=w.name,
            partition=w.partition or "",
            account=w.account or "",
            qos=w.qos or "",
            priority=_number(w.priority),
            features=w.features or "",
            time_limit_minutes=minutes_of(w.time_limit),
            node_count=_number(w.node_count),
            max_nodes=_number(w.max_nodes),
        )


def _over_time(v: NoVal | int | None) -> int | None:
    """slurm.conf's OverTimeLimit in minutes (0 when unset); None for UNLIMITED (INFINITE16 or an
    infinite NoVal)."""
    if isinstance(v, NoVal):
        return None if v.infinite else (v.number or 0) if v.set else 0
    if v is None:
        return 0
    return None if v >= 0xFFFF else v
