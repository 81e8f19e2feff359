"""SlurmClient against the real slurmrestd of the local cluster: every call the bridge makes."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmAuthError, SlurmError, SlurmNotFound
from slurm_bridge.slurm.models import JobInfo, JobRequest, JobStates
from slurm_bridge.slurm.versions import SUPPORTED_VERSIONS
from tests.harness import TENANTS, SlurmEnv

pytestmark = pytest.mark.integration

T = TypeVar("T")
RUN = secrets.token_hex(3)  # tells this session's jobs apart from anyone else's


async def eventually(check: Callable[[], Awaitable[T | None]], within: float, what: str) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(0.2)


class Jobs:
    """Submits this test's jobs with one admin comment and cancels all of them afterwards."""

    def __init__(self, client: SlurmClient, test_name: str) -> None:
        self.client = client
        self.marker = f"slurm-bridge-it {RUN} {test_name}"
        self.ids: list[int] = []

    async def submit(self, req: JobRequest, name: str = "it") -> int:
        job_id = await self.client.submit_external_job(req, name=f"it-{RUN}-{name}", admin_comment=self.marker)
        self.ids.append(job_id)
        return job_id

    async def allocate(self, req: JobRequest, name: str = "it", as_user: str | None = None) -> int:
        job_id = await self.client.allocate_external_job(
            req, name=f"it-{RUN}-{name}", admin_comment=self.marker, as_user=as_user
        )
        self.ids.append(job_id)
        return job_id

    async def cleanup(self) -> None:
        mine = {j.job_id for j in await self.client.list_jobs() if j.admin_comment == self.marker}
        for job_id in sorted(mine | set(self.ids)):
            await self.client.cancel_job(job_id)

        async def all_finished() -> bool:
            return not any(j.admin_comment == self.marker and not j.is_finished for j in await self.client.list_jobs())

        await eventually(all_finished, 30, f"jobs of {self.marker!r} to finish")


@pytest.fixture
async def slurm(slurm_env: SlurmEnv) -> AsyncIterator[SlurmClient]:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, timeout=10) as c:
        yield c


@pytest.fixture
async def jobs(slurm: SlurmClient, request: pytest.FixtureRequest) -> AsyncIterator[Jobs]:
    tracker = Jobs(slurm, request.node.name)
    yield tracker
    await tracker.cleanup()


async def _job(client: SlurmClient, job_id: int) -> JobInfo:
    job = await client.get_job(job_id)
    assert job is not None, f"job {job_id} unknown to Slurm"
    return job


async def test_version_discovery_and_ping(slurm: SlurmClient) -> None:
    # Slurm 26.05 offers v0.0.42..v0.0.45: the client must pick the highest it speaks.
    assert await slurm.api_version() == SUPPORTED_VERSIONS[0]
    pings = await slurm.ping()
    assert any(p.responding and p.primary for p in pings)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_external_job_runs_on_two_nodes_and_cancels(slurm_env: SlurmEnv, version: str) -> None:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"two-nodes-{version}")
        try:
            req = JobRequest(
                partition=slurm_env.partition,
                nodes=2,
                tasks_per_node=1,
                cpus_per_task=1,
                memory_per_node_mib=100,
                time_limit_minutes=10,
            )
            job_id = await jobs.submit(req, name="two")

            async def running() -> JobInfo | None:
                job = await _job(client, job_id)
                return job if job.is_running else None

            job = await eventually(running, 30, f"job {job_id} RUNNING")
            assert len(job.nodes) == 2 and set(job.nodes) <= set(slurm_env.nodes), job.nodes
            assert "EXTERNAL_JOB" in job.flags
            assert job.admin_comment == jobs.marker and job.name == f"it-{RUN}-two"
            assert job.partition == slurm_env.partition and job.time_limit_minutes == 10
            assert job.start_time is not None and job.submit_time is not None and job.reason == ""

            before = client.request_count
            listed = {j.job_id: j for j in await client.list_jobs()}
            assert client.request_count == before + 1  # one REST call for every job
            assert listed[job_id].nodes == job.nodes and listed[job_id].admin_comment == jobs.marker

            await client.cancel_job(job_id)

            async def gone_or_cancelled() -> bool:
                j = await client.get_job(job_id)
                return j is None or j.state == "CANCELLED"

            await eventually(gone_or_cancelled, 30, f"job {job_id} CANCELLED")
            await client.cancel_job(job_id)  # idempotent
        finally:
            await jobs.cleanup()


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_immediate_allocation_is_running_when_the_call_returns(slurm_env: SlurmEnv, version: str) -> None:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"immediate-{version}")
        try:
            req = JobRequest(partition=slurm_env.partition, nodes=1, cpus_per_task=1, memory_per_node_mib=100)
            job_id = await jobs.allocate(req, name="now")
            job = await _job(client, job_id)  # no waiting: Slurm allocated inside the call
            assert job.is_running and len(job.nodes) == 1 and job.nodes[0] in slurm_env.nodes, job
            assert "EXTERNAL_JOB" in job.flags and job.admin_comment == jobs.marker
            states = await client.job_states()
            # RUNNING, with CONFIGURING beside it while a PrologSlurmctld runs (the local cluster's
            # notify hook: a few milliseconds).
            assert states.by_id[job_id] in (("RUNNING",), ("RUNNING", "CONFIGURING")), states.by_id[job_id]
            await client.cancel_job(job_id)

            async def cancelled() -> tuple[str, ...] | None:
                state = (await client.job_states()).by_id.get(job_id)
                return state if state is None or "CANCELLED" in state else None

            await eventually(cancelled, 30, f"jobs/state to show job {job_id} CANCELLED")
        finally:
            await jobs.cleanup()


async def test_immediate_allocation_that_cannot_start_is_refused_and_queues_instead(
    slurm: SlurmClient, slurm_env: SlurmEnv, jobs: Jobs
) -> None:
    all_cpus = sum(n.cpus for n in await slurm.list_nodes() if n.name in slurm_env.nodes)
    req = JobRequest(partition=slurm_env.partition, cpus_per_task=all_cpus + 1, time_limit_minutes=5)
    before = {j.job_id for j in await slurm.list_jobs() if j.admin_comment == jobs.marker}
    with pytest.raises(SlurmError) as e:
        await jobs.allocate(req, name="too-big-now")
    assert e.value.errors and e.value.errors[0].error_number, e.value
    # The refusal leaves no live job: at most a FAILED record without nodes.
    left = [j for j in await slurm.list_jobs() if j.admin_comment == jobs.marker and j.job_id not in before]
    assert all(j.is_finished and not j.nodes for j in left), left
    # The bridge then queues it: Slurm accepts the job and keeps it pending.
    job_id = await jobs.submit(req, name="queued")
    assert (await _job(slurm, job_id)).is_pending


async def test_exclusive_gres_job_gets_a_whole_gpu_node(slurm: SlurmClient, slurm_env: SlurmEnv, jobs: Jobs) -> None:
    req = JobRequest(partition=slurm_env.partition, gres="gpu:1", exclusive=True, memory_per_node_mib=100)
    job_id = await jobs.submit(req, name="gpu")

    async def running() -> JobInfo | None:
        job = await _job(slurm, job_id)
        return job if job.is_running else None

    job = await eventually(running, 30, f"job {job_id} RUNNING")
    assert len(job.nodes) == 1 and job.nodes[0] in slurm_env.gpu_nodes
    node_cpus = {n.name: n.cpus for n in await slurm.list_nodes()}[job.nodes[0]]
    shown = await asyncio.to_thread(slurm_env.scontrol, "show", "job", str(job_id))
    assert f"NumCPUs={node_cpus} " in shown and "Exclusive=NODE" in shown, shown  # shared=["none"]
    assert "TresPerNode=gres/gpu:1" in shown, shown


async def test_pending_job_reason_and_update(slurm: SlurmClient, slurm_env: SlurmEnv, jobs: Jobs) -> None:
    # More cpus than the whole partition has: Slurm keeps the job pending (PartitionConfig), as
    # limits may change. (More than one node has, but fewer than the partition, is refused.)
    all_cpus = sum(n.cpus for n in await slurm.list_nodes() if n.name in slurm_env.nodes)
    req = JobRequest(partition=slurm_env.partition, cpus_per_task=all_cpus + 1, time_limit_minutes=5)
    job_id = await jobs.submit(req, name="pending")

    async def pending_with_reason() -> JobInfo | None:
        job = await _job(slurm, job_id)
        return job if job.is_pending and job.reason else None

    job = await eventually(pending_with_reason, 30, f"job {job_id} PENDING with a reason")
    assert job.nodes == () and job.time_limit_minutes == 5

    # Slurm applies the change, then says the job still cannot run: update_job must not fail.
    await slurm.update_job(job_id, req.model_copy(update={"time_limit_minutes": 42}))
    job = await _job(slurm, job_id)
    assert job.time_limit_minutes == 42 and job.is_pending
    shown = await asyncio.to_thread(slurm_env.scontrol, "show", "job", str(job_id))
    assert "TimeLimit=00:42:00" in shown, shown

    await slurm.cancel_job(job_id)

    async def finished() -> bool:
        j = await slurm.get_job(job_id)
        return j is None or j.is_finished

    await eventually(finished, 30, f"job {job_id} finished")
    with pytest.raises(SlurmError, match="finished"):
        await slurm.update_job(job_id, req)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_a_pending_jobs_update_reaches_it_in_every_rest_version(
    slurm_env: SlurmEnv, jobs: Jobs, version: str
) -> None:
    """The body update_job sends (a bare job_desc_msg, with the name, the cleared constraints and an
    unlimited time limit) changes a pending job in each REST API version; the wrapped body that looks
    right is answered 200 and changes nothing; a refused update changes nothing at all (issue 32)."""
    down = f"it-down-{RUN}-{version.replace('.', '')}"
    nodes = ",".join(slurm_env.nodes)
    slurm_env.scontrol(
        "create", f"PartitionName={down}", f"Nodes={nodes}", "State=DOWN", "MaxTime=30", "DefaultTime=10"
    )
    try:
        async with SlurmClient(slurm_env.url, slurm_env.token_file, timeout=10, api_version=version) as c:
            req = JobRequest(partition=down, time_limit_minutes=5, constraints="kwok")
            job_id = await jobs.submit(req, name="update")
            name = f"it-{RUN}-renamed"
            await c.update_job(job_id, req.model_copy(update={"time_limit_minutes": 7, "constraints": None}), name=name)
            got = await c.job_settings(job_id)
            assert got is not None
            assert (got.time_limit_minutes, got.features, got.name, got.partition) == (7, "", name, down), got
            limits = {p.name: p for p in await c.partition_limits()}
            assert (limits[down].max_time_minutes, limits[down].default_time_minutes) == (30, 10)
            # The trap: the wrapped form is answered 200 with warnings, and changes nothing.
            wrapped = {"job": {"time_limit": {"set": True, "infinite": False, "number": 9}}}
            async with httpx.AsyncClient(timeout=10) as http:
                r = await http.post(f"{slurm_env.url}/slurm/{version}/job/{job_id}", json=wrapped,
                                    headers=slurm_env.headers())  # fmt: skip
            assert r.status_code == 200 and r.json().get("warnings"), r.text
            assert (await c.job_settings(job_id)).time_limit_minutes == 7  # type: ignore[union-attr]
            # All or nothing: a refused partition keeps the time limit sent with it too.
            with pytest.raises(SlurmError, match="Invalid partition name"):
                await c.update_job(
                    job_id, req.model_copy(update={"partition": "no-such-partition", "time_limit_minutes": 3})
                )
            assert (await c.job_settings(job_id)).time_limit_minutes == 7  # type: ignore[union-attr]
            await c.update_job(job_id, req.model_copy(update={"time_limit_minutes": None}), unlimited_time=True)
            assert (await c.job_settings(job_id)).time_limit_minutes is None  # type: ignore[union-attr]
            await c.cancel_job(job_id)
    finally:
        await jobs.cleanup()
        slurm_env.scontrol("delete", f"PartitionName={down}")


async def test_list_nodes_returns_every_node(slurm: SlurmClient, slurm_env: SlurmEnv) -> None:
    nodes = {n.name: n for n in await slurm.list_nodes()}
    assert set(slurm_env.nodes) <= set(nodes), sorted(nodes)
    for name in slurm_env.nodes:
        n = nodes[name]
        assert n.cpus > 0 and n.real_memory_mib > 0 and n.state != "UNKNOWN", n
        assert slurm_env.partition in n.partitions
    for name in slurm_env.gpu_nodes:
        assert "gpu" in nodes[name].gres, nodes[name]


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_a_node_list_since_its_last_update_is_none_until_a_node_changes(
    slurm_env: SlurmEnv, version: str
) -> None:
    """The node controller's idle poll: slurmrestd says "unchanged" (no body) for a table that did
    not change since a list's last_update, and reports a change made right after that list."""
    name = slurm_env.nodes[-1]
    comment = f"slurm-bridge-it {RUN} since {version}"
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:

        async def quiet() -> int | None:
            nodes, last = await client.list_nodes_since(None)
            assert nodes and last is not None, (nodes, last)
            again, same = await client.list_nodes_since(last)
            return last if again is None and same == last else None

        last = await eventually(quiet, 30, "an unchanged node table to be answered as unchanged")
        try:
            await client.update_node(name, comment=comment)
            nodes, newer = await client.list_nodes_since(last)
            assert nodes is not None, "a change made after the list is reported"
            assert {n.name: n for n in nodes}[name].comment == comment
            assert newer is not None and newer >= last
        finally:
            await client.update_node(name, comment="")


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_job_lists_and_states_since_the_last_answer_are_unchanged_until_a_job_changes(
    slurm_env: SlurmEnv, version: str
) -> None:
    """The job poller's idle poll: the same jobs/state answer comes back ``unchanged``, and the
    periodic full list with update_time is None, until a job is submitted."""
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"since-{version}")
        try:

            async def quiet() -> tuple[int, JobStates] | None:
                listed, last = await client.list_jobs_since(None)
                assert listed is not None and last is not None, last
                states = await client.job_states()
                again, same = await client.list_jobs_since(last)
                states_again = await client.job_states(states)
                if again is None and same == last and states_again.unchanged:
                    return last, states_again
                return None

            last, states = await eventually(quiet, 60, "an unchanged job table to be answered as unchanged")
            req = JobRequest(partition=slurm_env.partition, nodes=1, cpus_per_task=1, memory_per_node_mib=100)
            job_id = await jobs.submit(req, name="since")
            listed, newer = await client.list_jobs_since(last)
            assert listed is not None and job_id in {j.job_id for j in listed}
            assert newer is not None and newer >= last
            changed = await client.job_states(states)
            assert not changed.unchanged and job_id in changed.by_id
        finally:
            await jobs.cleanup()


async def test_drain_and_resume_node(slurm: SlurmClient, slurm_env: SlurmEnv) -> None:
    name = slurm_env.nodes[-1]
    reason = f"slurm-bridge-it {RUN} drain test"

    async def node_states() -> tuple[tuple[str, ...], str]:
        node = {n.name: n for n in await slurm.list_nodes()}[name]
        return node.states, node.reason

    try:
        await slurm.update_node(name, state="DRAIN", reason=reason)
        states, got_reason = await node_states()
        assert "DRAIN" in states and got_reason == reason, (states, got_reason)
        shown = await asyncio.to_thread(slurm_env.scontrol, "show", "node", name)
        assert "DRAIN" in shown and f"Reason={reason}" in shown, shown
    finally:
        await slurm.update_node(name, state="RESUME")
    states, got_reason = await node_states()
    assert "DRAIN" not in states and got_reason == "", (states, got_reason)


@pytest.fixture
def bad_token_file(tmp_path: Path) -> Path:
    bad = tmp_path / "jwt"
    bad.write_text("SLURM_JWT=not-a-valid-token\n")
    return bad


async def test_bad_token_is_an_auth_error(slurm_env: SlurmEnv, bad_token_file: Path) -> None:
    bad = bad_token_file
    async with SlurmClient(slurm_env.url, bad) as client:
        with pytest.raises(SlurmAuthError) as e:
            await client.list_jobs()
    assert str(bad) in str(e.value) and "not-a-valid-token" not in str(e.value)


async def test_impossible_job_is_refused_with_slurms_reason(
    slurm: SlurmClient, slurm_env: SlurmEnv, jobs: Jobs
) -> None:
    most_cpus = max(n.cpus for n in await slurm.list_nodes() if n.name in slurm_env.nodes)
    with pytest.raises(SlurmError) as e:
        await jobs.submit(JobRequest(partition=slurm_env.partition, cpus_per_task=most_cpus + 1))
    assert type(e.value) is SlurmError and "Requested node configuration is not available" in str(e.value)
    with pytest.raises(SlurmError, match="Invalid partition name"):
        await jobs.submit(JobRequest(partition=f"no-such-partition-{RUN}"))


async def test_unknown_job_and_node(slurm: SlurmClient) -> None:
    assert await slurm.get_job(99_999_999) is None
    await slurm.cancel_job(99_999_999)
    with pytest.raises(SlurmNotFound):
        await slurm.update_node("no-such-node", state="DRAIN", reason="test")


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_an_allocation_runs_as_the_caller_and_the_bridge_calls_as_the_tenant(
    slurm_env: SlurmEnv, version: str
) -> None:
    """Why operator/placeholderjobs/slurmjobs/submit.py allocates a tenant's job *as* the tenant
    (issue 31, docs/tenancy.md): slurmrestd's job/allocate ignores user_id and group_id (the job
    runs as the caller, SlurmUser), but SlurmUser's token may call as the tenant
    (X-SLURM-USER-NAME), by name or uid; the job then runs as the tenant in their primary group
    and account. job/submit honours user_id and group_id."""
    tenant = TENANTS["a"]
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"as-tenant-{version}")
        try:
            base = JobRequest(partition=slurm_env.partition, nodes=1, cpus_per_task=1, time_limit_minutes=5)
            mine = base.model_copy(update={"account": tenant.accounts[0], "qos": "normal"})
            for who in (tenant.user, str(tenant.uid)):
                started = time.monotonic()
                job = await _job(client, await jobs.allocate(mine, name=f"as-{who}", as_user=who))
                assert job.is_running and job.nodes, f"allocated inside the call ({time.monotonic() - started:.3f} s)"
                assert (job.user_name, job.user_id, job.group_id, job.account) == (
                    tenant.user, tenant.uid, tenant.gid, tenant.accounts[0]), job  # fmt: skip
            with pytest.raises(SlurmError) as refused:  # Slurm's checks are the tenant's own
                await jobs.allocate(base.model_copy(update={"account": TENANTS["b"].accounts[0]}), as_user=tenant.user)
            assert 2045 in {e.error_number for e in refused.value.errors}, refused.value
        finally:
            await jobs.cleanup()


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_only_a_queued_submit_runs_a_job_as_the_user_it_names(slurm_env: SlurmEnv, version: str) -> None:
    """Why the bridge calls job/allocate *as* the tenant (above) rather than naming them in the body:
    slurmrestd's job/allocate ignores user_id and group_id (the job runs as the token's user,
    SlurmUser), job/submit honours them. If a Slurm release changes this, this test says so."""
    tenant = TENANTS["a"]
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"identity-{version}")
        try:
            base = JobRequest(partition=slurm_env.partition, nodes=1, cpus_per_task=1, time_limit_minutes=5)
            as_tenant = base.model_copy(update={"user_id": tenant.uid, "group_id": tenant.gid})
            # The bridge's own account, which SlurmUser has: Slurm allocates, but as the token's user.
            allocated = await _job(client, await jobs.allocate(as_tenant, name="allocated"))
            assert allocated.user_name != tenant.user, allocated
            queued = await _job(client, await jobs.submit(
                as_tenant.model_copy(update={"account": tenant.accounts[0]}), name="queued"))  # fmt: skip
            assert (queued.user_name, queued.account) == (tenant.user, tenant.accounts[0]), queued
        finally:
            await jobs.cleanup()
