"""The client's calls as a tenant against the real slurmrestd and slurmctld (issue 36 §4,
docs/security.md "Job fields"): a job queued and updated *as the tenant* gets the checks Slurm
makes for that user (what Slurm keeps from the bridge's own token instead is security.md's table).
Jobs wait in a DOWN partition this module makes for itself.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest

from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import ESLURM_INVALID_GROUP_ID, ESLURM_INVALID_QOS, SlurmError
from slurm_bridge.slurm.models import JobRequest
from tests.harness import TENANTS, SlurmEnv

pytestmark = pytest.mark.integration
A, B = TENANTS["a"], TENANTS["b"]
NOT_ALICES_QOS = "pods-urgent"  # hack/accounting.env: not among alice's QOS


@pytest.fixture
async def down(slurm_env: SlurmEnv) -> AsyncIterator[tuple[SlurmClient, str]]:
    name = f"it-tenant-{secrets.token_hex(3)}"
    await asyncio.to_thread(
        slurm_env.scontrol, "create", f"PartitionName={name}", f"Nodes={','.join(slurm_env.nodes)}", "State=DOWN"
    )
    async with SlurmClient(slurm_env.url, slurm_env.token_file, timeout=10) as client:
        try:
            yield client, name
        finally:
            await asyncio.to_thread(slurm_env.slurm, "scancel", "--partition", name, check=False)
            await asyncio.sleep(1)
            await asyncio.to_thread(slurm_env.slurm, "scontrol", "delete", f"PartitionName={name}", check=False)


async def test_a_job_queued_and_updated_as_the_tenant_gets_the_tenants_checks(down: tuple[SlurmClient, str]) -> None:
    client, partition = down
    req = JobRequest(partition=partition, user_name=A.user, group_id=A.gid, time_limit_minutes=5)
    marker = f"slurm-bridge-it-tenant {secrets.token_hex(3)}"
    job_id = await client.submit_external_job(req, name="it-tenant", admin_comment=marker, as_user=A.user)
    job = await client.get_job(job_id)
    assert job is not None and (job.user_name, job.group_id, job.comment, job.admin_comment) == (
        A.user, A.gid, marker, ""), job  # fmt: skip
    await client.mark_job(job_id, marker)
    assert (await client.get_job(job_id)).admin_comment == marker  # type: ignore[union-attr]
    # The user submits only in their primary group.
    with pytest.raises(SlurmError) as other_group:
        await client.submit_external_job(
            req.model_copy(update={"group_id": B.gid}), name="it-tenant", admin_comment=marker, as_user=A.user
        )
    assert ESLURM_INVALID_GROUP_ID in other_group.value.error_numbers, other_group.value
    # An update as the tenant is checked as the tenant's own: a QOS not hers is refused ...
    with pytest.raises(SlurmError) as qos:
        await client.update_job(job_id, req.model_copy(update={"qos": NOT_ALICES_QOS}), as_user=A.user)
    assert ESLURM_INVALID_QOS in qos.value.error_numbers, qos.value
    assert (await client.job_settings(job_id)).qos != NOT_ALICES_QOS  # type: ignore[union-attr]
    # ... and so is a priority; the bridge alone sets one a policy delegates.
    with pytest.raises(SlurmError):
        await client.update_job(job_id, req.model_copy(update={"priority": 5}), as_user=A.user)
    await client.set_priority(job_id, 777)
    assert (await client.job_settings(job_id)).priority == 777  # type: ignore[union-attr]
