"""A heterogeneous external job against the real slurmrestd: what a CompositePodGroup becomes.

It checks what the bridge builds on (docs/workloads.md, "CompositePodGroups"): one ``job/submit``
with a component per request makes one job whose leader is the answer's id; every component
keeps its own nodes, sizes and the bridge's admin comment (so it is found as the bridge's in the
full list); the leader's record holds every component; ``jobs/state`` reports every component;
all start together (in a backfill pass); cancelling the leader cancels every component; and a
component cancelled on its own ends (the bridge then cancels the rest).

Assumes the local cluster (hack/cluster.sh): at least 3 idle nodes in the partition, and
``SchedulerParameters=bf_interval=`` small, or the default 30 s backfill interval (the waits
allow BACKFILL_WAIT seconds).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.models import JobInfo, JobRequest
from slurm_bridge.slurm.versions import SUPPORTED_VERSIONS
from tests.harness import SlurmEnv
from tests.integration.test_slurm_rest import RUN, Jobs, eventually

pytestmark = pytest.mark.integration

# A heterogeneous job starts only in a backfill pass (bf_interval, 30 s by default).
BACKFILL_WAIT = 90.0


@pytest.fixture
async def het(slurm_env: SlurmEnv, request: pytest.FixtureRequest) -> AsyncIterator[tuple[SlurmClient, Jobs]]:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, timeout=10) as client:
        jobs = Jobs(client, request.node.name)
        try:
            yield client, jobs
        finally:
            await jobs.cleanup()


def requests(slurm_env: SlurmEnv) -> list[JobRequest]:
    """Component 0: one node, 1 cpu; component 1: two nodes, 2 cpus each (as two child PodGroups)."""
    common = {"partition": slurm_env.partition, "tasks_per_node": 1, "memory_per_node_mib": 100,
              "time_limit_minutes": 10}  # fmt: skip
    return [JobRequest(nodes=1, cpus_per_task=1, **common), JobRequest(nodes=2, cpus_per_task=2, **common)]


async def submit(client: SlurmClient, jobs: Jobs, reqs: list[JobRequest], name: str) -> int:
    leader = await client.submit_het_job(reqs, name=f"it-{RUN}-{name}", admin_comment=jobs.marker)
    jobs.ids.append(leader)
    return leader


async def all_running(client: SlurmClient, leader: int, count: int) -> list[JobInfo] | None:
    parts = sorted(await client.get_jobs(leader), key=lambda j: j.het_job_offset)
    return parts if len(parts) == count and all(p.is_running and p.nodes for p in parts) else None


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_a_heterogeneous_external_job_runs_as_one_and_cancels_as_one(slurm_env: SlurmEnv, version: str) -> None:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=version) as client:
        jobs = Jobs(client, f"het-{version}")
        try:
            leader = await submit(client, jobs, requests(slurm_env), "het")
            parts = await client.get_jobs(leader)
            assert len(parts) == 2, f"the leader's record holds every component: {parts}"
            assert all(p.het_job_id == leader for p in parts), parts
            assert sorted(p.het_job_offset for p in parts) == [0, 1]
            assert next(p for p in parts if p.het_job_offset == 0).job_id == leader
            # Every component is the bridge's in Slurm's lists: the full list keeps only jobs whose
            # admin_comment has the bridge's marker (here the test's own).
            assert all(p.admin_comment == jobs.marker and p.name == f"it-{RUN}-het" for p in parts), parts
            assert all("EXTERNAL_JOB" in p.flags for p in parts), parts

            running = await eventually(lambda: all_running(client, leader, 2), BACKFILL_WAIT,
                                       f"every component of heterogeneous job {leader} RUNNING")  # fmt: skip
            first, second = running
            assert len(first.nodes) == 1 and len(second.nodes) == 2 and len(set(second.nodes)) == 2, running
            assert set(first.nodes) | set(second.nodes) <= set(slurm_env.nodes)
            assert first.start_time and second.start_time
            assert abs((first.start_time - second.start_time).total_seconds()) <= 1, "the components start together"

            listed = [j for j in await client.list_jobs() if j.admin_comment == jobs.marker]
            assert sorted((j.het_job_id, j.het_job_offset) for j in listed) == [(leader, 0), (leader, 1)]
            states = await client.job_states()
            # RUNNING, with CONFIGURING beside it while the handoff's PrologSlurmctld runs (it reads
            # the node's jobs and holds on a loaded machine: seen once in the local tier).
            got = {p.job_id: states.of(p) for p in running}
            assert all(s in (("RUNNING",), ("RUNNING", "CONFIGURING")) for s in got.values()), got
            assert states.knows(leader)
            for part in running:  # a component's own id reads that component
                own = await client.get_job(part.job_id)
                assert own is not None and own.het_job_offset == part.het_job_offset

            await client.cancel_job(leader)

            async def every_part_cancelled() -> bool:
                parts = await client.get_jobs(leader)
                return not parts or all(p.state == "CANCELLED" for p in parts)

            await eventually(every_part_cancelled, 30, f"every component of {leader} CANCELLED by the leader's cancel")
        finally:
            await jobs.cleanup()


async def test_a_component_cancelled_on_its_own_ends(het: tuple[SlurmClient, Jobs], slurm_env: SlurmEnv) -> None:
    """``scancel`` of one component (its own job id): that component ends, whatever Slurm does
    with the others; the bridge ends the rest itself (operator/placeholderjobs/shapes/hetjob.py)."""
    client, jobs = het
    leader = await submit(client, jobs, requests(slurm_env), "one-part")
    running = await eventually(lambda: all_running(client, leader, 2), BACKFILL_WAIT,
                               f"every component of heterogeneous job {leader} RUNNING")  # fmt: skip
    other = running[1]
    await client.cancel_job(other.job_id)

    async def ended() -> JobInfo | None:
        job = await client.get_job(other.job_id)
        return job if job is None or job.is_finished else None

    await eventually(ended, 30, f"component {other.job_id} of {leader} ended")


async def test_a_component_larger_than_the_partition_keeps_the_whole_job_pending(
    het: tuple[SlurmClient, Jobs], slurm_env: SlurmEnv
) -> None:
    """All or nothing on Slurm's side: a component Slurm cannot place holds back the others,
    even one that would fit alone (what the e2e test's unplaceable composite relies on)."""
    client, jobs = het
    small, large = requests(slurm_env)
    too_big = large.model_copy(update={"nodes": len(slurm_env.nodes) + 1})
    leader = await submit(client, jobs, [small, too_big], "too-big")

    async def pending_with_reason() -> list[JobInfo] | None:
        parts = await client.get_jobs(leader)
        return parts if len(parts) == 2 and all(p.is_pending for p in parts) and any(p.reason for p in parts) else None

    parts = await eventually(pending_with_reason, 30, f"heterogeneous job {leader} PENDING with a reason")
    assert all(not p.nodes for p in parts), parts
