"""The shared Slurm fakes (tests/unit/fakes.py) are the protocols their consumers take (mypy checks
the assignments below), and behave as the tests that use them rely on."""

from __future__ import annotations

import pytest

from slurm_bridge.operator.handoff.controller import SlurmHandoff
from slurm_bridge.operator.nodes.slurmnodes import SlurmNodes
from slurm_bridge.operator.placeholderjobs.slurmjobs.poller import SlurmJobReads
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import SlurmSubmits
from slurm_bridge.operator.placeholderjobs.sync.devices import SlurmJobDevices
from slurm_bridge.operator.placeholderjobs.sync.jobupdates import SlurmJobWrites
from slurm_bridge.operator.placeholderjobs.sync.phjsync import ShellSlurm
from slurm_bridge.operator.tenantpolicies.controller import SlurmAccounting
from slurm_bridge.operator.wiring.health import SlurmPing
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import JobInfo, JobRequest
from tests.unit.fakes import (
    FakeAccounting,
    FakeHandoff,
    FakeJobDevices,
    FakeJobReads,
    FakeJobWrites,
    FakeNodes,
    FakePing,
    FakeSlurm,
    FakeSubmits,
)

pytestmark = pytest.mark.unit


def test_each_fake_is_its_protocol() -> None:
    reads: SlurmJobReads = FakeJobReads()
    submits: SlurmSubmits = FakeSubmits()
    writes: SlurmJobWrites = FakeJobWrites()
    devices: SlurmJobDevices = FakeJobDevices()
    shell: ShellSlurm = FakeSlurm()
    nodes: SlurmNodes = FakeNodes([])
    ping: SlurmPing = FakePing()
    accounting: SlurmAccounting = FakeAccounting()
    handoff: SlurmHandoff = FakeHandoff()
    assert all((reads, submits, writes, devices, shell, nodes, ping, accounting, handoff))


async def test_a_heterogeneous_submit_is_read_back_with_its_components() -> None:
    slurm = FakeSlurm(next_id=9, allocates=False)
    leader = await slurm.submit_het_job([JobRequest(), JobRequest()], name="c", admin_comment="x")
    assert leader == 10
    assert [(j.job_id, j.het_job_offset) for j in await slurm.get_jobs(leader)] == [(10, 0), (11, 1)]
    assert await slurm.get_jobs(99) == []
    with pytest.raises(AssertionError):
        await slurm.allocate_external_job(JobRequest(), name="c", admin_comment="x")
    assert slurm.calls == ["submit het 2 c", "get all 10", "get all 99"]


async def test_placements_take_the_next_id_or_are_refused() -> None:
    slurm = FakeSubmits(JobInfo(job_id=7, states=("PENDING",)), next_id=6)
    assert await slurm.allocate_external_job(JobRequest(), name="n", admin_comment="c") == 7
    slurm.submit_refusal = SlurmError("no")
    with pytest.raises(SlurmError):
        await slurm.submit_external_job(JobRequest(partition="p"), name="n", admin_comment="c")
    assert slurm.calls == ["allocate", "submit p"] and slurm.jobs[7].state == "PENDING"
