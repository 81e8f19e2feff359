"""One fake per Slurm protocol, shared by the unit tests (pure logic only; the integration and e2e
tests use the real Slurm).

Each consumer of Slurm takes a narrow Protocol of the calls it makes, as the Go bridge's
``SlurmControlInterface`` does, and each has one fake here: ``FakeJobReads`` (the poller's
``SlurmJobReads``), ``FakeSubmits`` (the placer's ``SlurmSubmits``), ``FakeJobWrites`` (the shell's
``SlurmJobWrites``), ``FakeJobDevices`` (the DRA binder's ``SlurmJobDevices``), ``FakeNodes`` (the
node controller's ``SlurmNodes``), ``FakePing`` (a standby's ``SlurmPing``), ``FakeAccounting``
(the TenantPolicy status's ``SlurmAccounting``), ``FakeHandoff`` (the handoff loop's ``SlurmHandoff``).
A consumer of several (the PlaceholderJob shell and
its poller) gets ``FakeSlurm``, which is all of the job ones over one job table. Beside them,
``FakeNodeView``: Slurm's nodes as the node controller shows them to the PlaceholderJob shell
(``views.slurmnodes.NodeView``).

Every call is written to ``calls`` ("list", "list since 3", "states", "get 7", "get all 10",
"allocate p", "submit p", "submit het 2 c", "cancel 7", "update 7", "released 7", "settings 7",
"partitions", "devices 7"), so a test says which calls a step makes, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_bridge.operator.nodes.nodesync import SlurmAction, after_slurm_action
from slurm_bridge.rules.handoff import HandoffReservation
from slurm_bridge.slurm.errors import SlurmError, SlurmUnavailable
from slurm_bridge.slurm.models import (
    JobInfo,
    JobRequest,
    JobSettings,
    JobStates,
    NodeDevices,
    NodeInfo,
    PartitionInfo,
    PartitionLimits,
    QosInfo,
    ReservationRecord,
    SlurmConf,
)
from slurm_bridge.slurm.wire import ControllerPing


class _Jobs:
    """The job table and call log the job fakes share."""

    def __init__(self, *jobs: JobInfo) -> None:
        self.jobs: dict[int, JobInfo] = {j.job_id: j for j in jobs}
        self.calls: list[str] = []

    def set(self, job: JobInfo) -> None:
        self.jobs[job.job_id] = job


class FakeJobReads(_Jobs):
    """Slurm's job table as the poller reads it. A list with ``since`` (an earlier list's
    ``last_update``) is None when the table is the same as then; a state answer equal to
    ``previous`` comes back ``unchanged``, as the real client's. ``fail_gets``: every GET is refused
    as an outage."""

    def __init__(self, *jobs: JobInfo, **more: Any) -> None:
        super().__init__(*jobs, **more)
        self.fail_gets = False
        self.tables: list[dict[int, JobInfo]] = []  # last_update n: the table list n showed

    def add_strangers(self, count: int = 12) -> None:
        """Other users' running jobs (ids 1001...): with them, reading one job is cheaper than
        listing them all."""
        for i in range(1, count + 1):
            self.set(JobInfo(job_id=1000 + i, states=("RUNNING",), admin_comment="not ours"))

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]:
        self.calls.append("list" if since is None else f"list since {since}")
        if since is not None and self.tables[since] == self.jobs:
            return None, since
        self.tables.append(dict(self.jobs))
        prefix = admin_comment_prefix or ""
        listed = [j for j in self.jobs.values() if j.admin_comment.startswith(prefix) or j.comment.startswith(prefix)]
        return listed, len(self.tables) - 1

    async def job_states(self, previous: JobStates | None = None) -> JobStates:
        self.calls.append("states")
        states = {j.job_id: j.states for j in self.jobs.values()}
        return JobStates(states, unchanged=previous is not None and previous.by_id == states)

    async def get_job(self, job_id: int) -> JobInfo | None:
        self.calls.append(f"get {job_id}")
        if self.fail_gets:
            raise SlurmUnavailable("slurmrestd down")
        return self.jobs.get(job_id)

    async def get_jobs(self, job_id: int) -> list[JobInfo]:
        """A heterogeneous job's leader answers with every component."""
        self.calls.append(f"get all {job_id}")
        return [j for j in self.jobs.values() if j.job_id == job_id or (j.het_job_id and j.het_job_id == job_id)]


class FakeSubmits(_Jobs):
    """Where jobs are placed: each allocation or submit gets the next id (``next_id`` + 1);
    ``allocate_refusal`` / ``submit_refusal`` refuse them instead. ``allocates=False``: an
    immediate allocation fails the test (a heterogeneous job is never one). A heterogeneous
    submit puts its components, pending, into the table (under the admin_comment given)."""

    def __init__(self, *jobs: JobInfo, next_id: int = 100, allocates: bool = True, **more: Any) -> None:
        super().__init__(*jobs, **more)
        self.next_id = next_id
        self.allocates = allocates
        self.allocate_refusal: SlurmError | None = None
        self.submit_refusal: SlurmError | None = None
        # An allocation as another user refused (a token that may not call as anyone else).
        self.as_user_refusal: SlurmError | None = None
        self.mark_refusal: SlurmError | None = None  # the admin_comment of a job allocated as a tenant
        self.as_users: list[str | None] = []
        self.submit_users: list[str | None] = []  # each queued submit's as_user (None: the bridge's)
        self.as_user_submit_refusal: SlurmError | None = None  # a queued submit as a tenant refused
        self.requests: list[JobRequest] = []
        self.comments: list[str] = []  # each placement's admin_comment (the handoff reads its scope)
        self.job_comments: list[str | None] = []  # each allocation's comment (the notify hook reads it)

    def _placed(self, what: str, req: JobRequest, refusal: SlurmError | None) -> int:
        self.calls.append(what + (f" {req.partition}" if req.partition else ""))
        if refusal is not None:
            raise refusal
        self.requests.append(req)
        self.next_id += 1
        return self.next_id

    async def allocate_external_job(
        self,
        req: JobRequest,
        *,
        name: str,
        admin_comment: str,
        as_user: str | None = None,
        comment: str | None = None,
    ) -> int:
        if not self.allocates:
            raise AssertionError("an immediate allocation where none may be asked for")
        self.comments.append(admin_comment)
        self.job_comments.append(comment)
        self.as_users.append(as_user)
        if as_user is not None and self.as_user_refusal is not None:
            self.calls.append(f"allocate as {as_user}")
            raise self.as_user_refusal
        return self._placed("allocate" + (f" as {as_user}" if as_user else ""), req, self.allocate_refusal)

    async def submit_external_job(
        self, req: JobRequest, *, name: str, admin_comment: str, as_user: str | None = None
    ) -> int:
        self.comments.append(admin_comment)
        self.submit_users.append(as_user)
        if as_user is not None and self.as_user_submit_refusal is not None:
            self.calls.append(f"submit as {as_user}")
            raise self.as_user_submit_refusal
        return self._placed("submit" + (f" as {as_user}" if as_user else ""), req, self.submit_refusal)

    async def set_priority(self, job_id: int, priority: int) -> None:
        self.calls.append(f"priority {job_id} {priority}")

    async def mark_job(self, job_id: int, admin_comment: str) -> None:
        self.calls.append(f"mark {job_id}")
        if self.mark_refusal is not None:
            raise self.mark_refusal

    async def cancel_job(self, job_id: int) -> None:
        self.calls.append(f"cancel {job_id}")

    async def cancel_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmError]:
        self.calls.append(f"cancel {' '.join(str(j) for j in job_ids)}")
        return {}

    async def submit_het_job(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> int:
        self.comments.append(admin_comment)
        self.calls.append(f"submit het {len(reqs)} {name}")
        if self.submit_refusal is not None:
            raise self.submit_refusal
        self.requests = list(reqs)
        leader = self.next_id = self.next_id + 1
        for offset in range(len(reqs)):
            self.set(JobInfo(job_id=leader + offset, states=("PENDING",), admin_comment=admin_comment,
                             het_job_id=leader, het_job_offset=offset))  # fmt: skip
        self.next_id += len(reqs) - 1
        return leader


class FakeJobWrites(_Jobs):
    """A job's update, released mark and cancel, recorded (a cancel does not change the table: the
    poller's view assumes it, and Slurm's answer comes with the next read; a mark does), and what
    an update is decided on: each job's ``settings`` (as Slurm would answer: made from the table's
    job when not given) and the ``partitions``' limits. ``update_refusal``: every update is refused
    with it."""

    def __init__(self, *jobs: JobInfo, **more: Any) -> None:
        super().__init__(*jobs, **more)
        self.updates: list[tuple[int, JobRequest, str | None, bool]] = []
        self.update_users: list[str | None] = []  # each update's as_user (None: the bridge's token)
        self.update_refusal: SlurmError | None = None
        self.settings: dict[int, JobSettings] = {}
        self.partitions: list[PartitionLimits] = []

    async def update_job(
        self,
        job_id: int,
        req: JobRequest,
        *,
        name: str | None = None,
        unlimited_time: bool = False,
        as_user: str | None = None,
    ) -> None:
        self.calls.append(f"update {job_id}" + (f" as {as_user}" if as_user else ""))
        if self.update_refusal is not None:
            raise self.update_refusal
        self.updates.append((job_id, req, name, unlimited_time))
        self.update_users.append(as_user)

    async def job_settings(self, job_id: int) -> JobSettings | None:
        self.calls.append(f"settings {job_id}")
        if job_id in self.settings:
            return self.settings[job_id]
        job = self.jobs.get(job_id)
        if job is None:
            return None
        return JobSettings(
            job_id=job_id,
            name=job.name,
            partition=job.partition,
            account=job.account,
            time_limit_minutes=job.time_limit_minutes,
            node_count=max(len(job.nodes), 1),
        )

    async def set_priority(self, job_id: int, priority: int) -> None:
        self.calls.append(f"priority {job_id} {priority}")

    async def partition_limits(self) -> list[PartitionLimits]:
        self.calls.append("partitions")
        return list(self.partitions)

    async def cancel_job(self, job_id: int) -> None:
        self.calls.append(f"cancel {job_id}")

    async def cancel_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmError]:
        self.calls.append(f"cancel {' '.join(str(j) for j in job_ids)}")
        return {}

    async def mark_released(self, job_id: int, admin_comment: str, comment: str | None = None) -> None:
        self.calls.append(f"released {job_id}")
        if job_id in self.jobs:
            update = {"admin_comment": admin_comment} | ({} if comment is None else {"comment": comment})
            self.jobs[job_id] = self.jobs[job_id].model_copy(update=update)


class FakeJobDevices(_Jobs):
    """The devices a job holds on each node (``devices``; None: Slurm no longer knows the job)."""

    def __init__(self, *jobs: JobInfo, devices: dict[str, NodeDevices] | None = None, **more: Any) -> None:
        super().__init__(*jobs, **more)
        self.devices = devices

    async def job_devices(self, job_id: int) -> dict[str, NodeDevices] | None:
        self.calls.append(f"devices {job_id}")
        return self.devices


class FakeSlurm(FakeJobReads, FakeSubmits, FakeJobWrites, FakeJobDevices):
    """Every job protocol over one table: the PlaceholderJob shell's Slurm and its poller's
    (keywords: ``next_id``, ``allocates``, ``devices``)."""


class FakeNodes:
    """Slurm's node table. A list with ``since`` (the ``last_update`` of an earlier answer) is
    None when the table is the same as that answer's, as slurmrestd's 304. ``gate`` set: a list
    answers what it saw when called, once the gate opens."""

    def __init__(self, nodes: list[NodeInfo], partitions: tuple[str, ...] = ()) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.partitions = list(partitions)
        self.lists = 0
        self.unchanged = 0
        self.sinces: list[int | None] = []
        self.answers: list[dict[str, NodeInfo]] = []  # last_update n: the table answer n showed
        self.updates: list[tuple[str, str | None, str | None]] = []
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.gate: asyncio.Event | None = None

    async def list_nodes_since(self, since: int | None) -> tuple[list[NodeInfo] | None, int | None]:
        self.lists += 1
        self.sinces.append(since)
        seen = dict(self.nodes)
        if self.gate is not None:
            await self.gate.wait()
        if since is not None and self.answers[since] == seen:
            self.unchanged += 1
            return None, since
        self.answers.append(seen)
        return list(seen.values()), len(self.answers) - 1

    async def update_node(
        self, name: str, *, state: str | None = None, reason: str | None = None, comment: str | None = None
    ) -> None:
        self.updates.append((name, state, reason))
        if state is not None:
            self.nodes[name] = after_slurm_action(self.nodes[name], SlurmAction(state), reason)
        if comment is not None:
            self.nodes[name] = self.nodes[name].model_copy(update={"comment": comment})

    async def create_node(self, node_conf: str) -> None:
        self.created.append(node_conf)

    async def delete_node(self, name: str) -> bool:
        self.deleted.append(name)
        return self.nodes.pop(name, None) is not None

    async def list_partitions(self) -> list[str]:
        return list(self.partitions)

    # The setup check's reads (operator/nodes/setupcheck.py): set ``conf`` and ``partition_info``.
    conf: SlurmConf | None = None
    partition_info: PartitionInfo | None = None
    version = "v0.0.45"

    async def slurm_conf(self) -> SlurmConf | None:
        return self.conf

    async def partition(self, name: str) -> PartitionInfo | None:
        return self.partition_info if self.partition_info and self.partition_info.name == name else None

    async def api_version(self) -> str:
        return self.version


class FakePing:
    """slurmrestd's ping, answering each call with the next outcome (an error raised; None: it
    answers), then answering."""

    base_url = "http://slurmrestd:6820"

    def __init__(self, *outcomes: Exception | None) -> None:
        self.outcomes = list(outcomes)
        self.pings = 0

    async def ping(self) -> list[ControllerPing]:
        self.pings += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome
        return []


class FakeHandoff:
    """The handoff loop's Slurm, the settings reader's and the node table's drains: ``handoff-*``
    reservations (a deleted one is gone), node updates
    (recorded), and the preemption and time-limit settings it reads (``conf``, ``qos``,
    ``defaults``, ``over_time``). Every call is in ``calls`` ("reservations", "delete NAME",
    "node NAME STATE", "conf", "qos", "defaults USER", "partitions")."""

    def __init__(
        self,
        reservations: list[HandoffReservation] | None = None,
        *,
        conf: SlurmConf | None = None,
        qos: list[QosInfo] | None = None,
        defaults: dict[str, str] | None = None,
        over_time: dict[str, int | None] | None = None,
    ) -> None:
        self.reservations = {r.name: r for r in reservations or []}
        self.conf, self.qos, self.defaults = conf, qos, defaults
        self.over_time = over_time or {}
        self.calls: list[str] = []

    async def list_reservations(self) -> list[ReservationRecord]:
        self.calls.append("reservations")
        return [ReservationRecord(r.name, r.start_time, r.end_time) for r in self.reservations.values()]

    async def delete_reservation(self, name: str) -> bool:
        self.calls.append(f"delete {name}")
        return self.reservations.pop(name, None) is not None

    async def update_node(
        self, name: str, *, state: str | None = None, reason: str | None = None, comment: str | None = None
    ) -> None:
        self.calls.append(f"node {name} {state}")

    async def slurm_conf(self) -> SlurmConf | None:
        self.calls.append("conf")
        return self.conf

    async def qos_preemption(self) -> list[QosInfo] | None:
        self.calls.append("qos")
        return self.qos

    async def default_qos(self, user: str) -> dict[str, str] | None:
        self.calls.append(f"defaults {user}")
        return self.defaults

    async def partition_over_time(self) -> dict[str, int | None]:
        self.calls.append("partitions")
        return dict(self.over_time)


class FakeAccounting:
    """Slurm's accounting: its accounts and QOS (None: it cannot be read)."""

    def __init__(self, accounts: list[str] | None = None, qos: list[str] | None = None) -> None:
        self.accounts, self.qos = accounts, qos

    async def list_accounts(self) -> list[str] | None:
        return self.accounts

    async def list_qos(self) -> list[str] | None:
        return self.qos


class FakeNodeView:
    """Slurm's nodes as the node controller shows them to the PlaceholderJob shell: ``listed`` (None:
    not listed yet), the nodes a submit leaves out (``unfit``, ``mig``, ``mismatched``), ``native``
    (node -> whether it runs native work; absent: not known), ``cpus`` (the largest node's CPUs;
    None: not known), ``topologies`` (partition -> its Topology=, or the error its read raises;
    absent: no such partition), and the drains asked, in order (``drained``)."""

    def __init__(
        self,
        listed: Mapping[str, NodeInfo] | None = None,
        *,
        unfit: frozenset[str] = frozenset(),
        mig: frozenset[str] = frozenset(),
        mismatched: frozenset[str] = frozenset(),
        native: Mapping[str, bool] | None = None,
        cpus: int | None = None,
        topologies: Mapping[str, str | Exception] | None = None,
    ) -> None:
        self.listed = listed
        self.unfit, self.mig, self.mismatched = unfit, mig, mismatched
        self.native = dict(native or {})
        self.cpus = cpus
        self.topologies = dict(topologies or {})
        self.topology_reads: list[str] = []
        self.drained: list[tuple[str, str | None]] = []

    def listed_nodes(self) -> Mapping[str, NodeInfo] | None:
        return self.listed

    def slurm_nodes_now(self) -> dict[str, NodeInfo] | None:
        return None if self.listed is None else dict(self.listed)

    def excluded_unfit_nodes(self) -> frozenset[str]:
        return self.unfit

    def mig_slurm_nodes(self) -> frozenset[str]:
        return self.mig

    def device_mismatch_slurm_nodes(self) -> frozenset[str]:
        return self.mismatched

    def runs_native(self, name: str) -> bool | None:
        return self.native.get(name)

    def largest_cpus(self, partitions: str | None) -> int | None:
        return self.cpus

    async def partition_topology(self, partition: str) -> str | None:
        self.topology_reads.append(partition)
        found = self.topologies.get(partition)
        if isinstance(found, Exception):
            raise found
        return found

    async def set_drain(self, slurm_name: str, reason: str | None) -> None:
        self.drained.append((slurm_name, reason))
