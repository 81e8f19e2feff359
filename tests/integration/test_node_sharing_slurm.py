"""Node sharing against the real slurmrestd, in every REST API version the client speaks: each
mode's job as Slurm takes it (whole node, MCS label, neither), a pending job updated with each
mode's body, slurm.conf through ``GET conf`` (v0.0.45 only) and a partition's OverSubscribe in
each version's form (docs/colocation.md)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.models import JobRequest, PartitionInfo
from slurm_bridge.slurm.versions import SUPPORTED_VERSIONS
from tests.harness import SlurmEnv
from tests.integration.test_slurm_rest import Jobs, eventually

pytestmark = pytest.mark.integration
RUN = secrets.token_hex(3)


@pytest.fixture(params=SUPPORTED_VERSIONS)
async def client(request: pytest.FixtureRequest, slurm_env: SlurmEnv) -> AsyncIterator[SlurmClient]:
    async with SlurmClient(slurm_env.url, slurm_env.token_file, api_version=request.param) as c:
        yield c


def job_record(slurm: SlurmEnv, job_id: int) -> dict[str, Any]:
    r = httpx.get(f"{slurm.url}/slurm/v0.0.44/job/{job_id}", headers=slurm.headers(), timeout=20)
    r.raise_for_status()
    found: dict[str, Any] = r.json()["jobs"][0]
    return found


@pytest.mark.parametrize(
    ("mode", "cpus", "label", "shared"),
    [("exclusive", 4, "", ["none"]), ("timeShared", 1, "kubernetes", ["mcs"]), ("coResident", 1, "", [])],
)
async def test_each_modes_job_as_slurm_takes_it(
    client: SlurmClient, slurm_env: SlurmEnv, mode: Any, cpus: int, label: str, shared: list[str]
) -> None:
    node = slurm_env.hybrid_nodes[-1]
    jobs = Jobs(client, f"mode-{mode}-{client._pinned}")
    try:
        req = JobRequest(
            partition=slurm_env.hybrid_partition,
            required_nodes=[node],
            memory_per_node_mib=100,
            node_sharing=mode,
            mcs_label="kubernetes" if mode == "timeShared" else None,
        )
        job_id = await jobs.submit(req, name=mode)

        async def running() -> bool:
            j = await client.get_job(job_id)
            return j is not None and j.is_running

        await eventually(running, 30, f"the {mode} job running on {node}")
        record = await asyncio.to_thread(job_record, slurm_env, job_id)
        assert (int(record["cpus"]["number"]), record.get("nodes")) == (cpus, node), record["cpus"]
        assert (record.get("mcs_label") or "") == label
        assert record["shared"] == shared, "v0.0.44 reads back what was sent"
    finally:
        await jobs.cleanup()


@pytest.mark.parametrize("mode", ["exclusive", "timeShared", "coResident"])
async def test_a_pending_jobs_update_keeps_the_sharing_it_was_submitted_with(
    client: SlurmClient, slurm_env: SlurmEnv, mode: Any
) -> None:
    """Slurm 26.05.5 turns an update to shared=mcs into OverSubscribe; the bridge's updates send no
    sharing, so a pending job keeps its mode (a time limit changes, its turns do not)."""
    jobs = Jobs(client, f"update-{mode}-{client._pinned}")
    try:
        label = "kubernetes" if mode == "timeShared" else None
        big = JobRequest(
            partition=slurm_env.hybrid_partition, cpus_per_task=64, time_limit_minutes=5, node_sharing=mode,
            mcs_label=label,
        )  # fmt: skip
        job_id = await jobs.submit(big, name="pending")
        await client.update_job(job_id, big.model_copy(update={"time_limit_minutes": 7}))
        record = await asyncio.to_thread(job_record, slurm_env, job_id)
        assert record["job_state"] == ["PENDING"] and record["time_limit"]["number"] == 7
        assert (record.get("mcs_label") or None) == label
        assert record["shared"] == {"exclusive": ["none"], "timeShared": ["mcs"], "coResident": []}[mode]
    finally:
        await jobs.cleanup()


async def test_slurm_conf_is_read_with_v0045_and_not_before(client: SlurmClient) -> None:
    conf = await client.slurm_conf()
    if client._pinned == "v0.0.45":
        assert conf is not None and conf.mcs_plugin == "mcs/label", conf
        assert set(conf.mcs_parameters) >= {"ondemand", "ondemandselect"}
        assert "CR_CORE_MEMORY" in conf.select_type_parameters
    else:
        assert conf is None


FORMS = {"no": "NO", "excl": "EXCLUSIVE", "yes": "YES:4", "force": "FORCE:4"}


@pytest.fixture(scope="module")
def partitions(slurm_env: SlurmEnv) -> Iterator[dict[str, str]]:
    """Partitions of each OverSubscribe over one external node, made for this module and removed."""
    made = {f"sb-it-{RUN}-{k}": v for k, v in FORMS.items()}
    for name, form in made.items():
        slurm_env.scontrol("create", f"partitionname={name}", f"nodes={slurm_env.nodes[0]}", f"oversubscribe={form}",
                           "state=up")  # fmt: skip
    yield made
    for name in made:
        slurm_env.slurm("scontrol", "delete", f"partitionname={name}", check=False)


async def test_a_partitions_oversubscribe_reads_alike_in_every_version(
    client: SlurmClient, partitions: dict[str, str]
) -> None:
    for name, form in partitions.items():
        assert await client.partition(name) == PartitionInfo(name=name, oversubscribe=form), client._pinned
    assert await client.partition(f"sb-it-{RUN}-nosuch") is None


def test_the_partitions_are_as_scontrol_shows_them(slurm_env: SlurmEnv, partitions: dict[str, str]) -> None:
    """Slurm 26.05 shows slurm.conf's OverSubscribe=EXCLUSIVE as Exclusive=NODE, OverSubscribe=NO."""
    for name, form in partitions.items():
        shown = slurm_env.scontrol("show", "partition", name)
        want = "Exclusive=NODE" if form == "EXCLUSIVE" else f"OverSubscribe={form}"
        assert want in shown, shown
