"""A tenant's job that the bridge queues with its own token (a heterogeneous job, a group that is not
the user's primary one) is refused in a RootOnly partition, where Slurm would take it from the
bridge's token although its tenant could not submit there (slurm_bridge/rules/partitionaccess.py):
the rule, the Placer that applies it before anything is sent, the cached partition reads, and the
PlaceholderJob that fails naming the partition."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.slurmjobs.partitions import PARTITIONS_TTL_SECONDS, Partitions
from slurm_bridge.operator.placeholderjobs.slurmjobs.submit import PartitionRefusesTenant, Placer
from slurm_bridge.rules.partitionaccess import own_token_refusal
from slurm_bridge.slurm.errors import ESLURM_INVALID_GROUP_ID, SlurmError, SlurmErrorDetail
from slurm_bridge.slurm.models import JobRequest, PartitionLimits
from tests.builders import make_phj
from tests.unit.fakes import FakeSubmits
from tests.unit.operator.placeholderjobs.test_composite_shape import PHJ, add_pod, cluster, join_all

pytestmark = pytest.mark.unit

PARTITIONS = {
    "locked": PartitionLimits(name="locked", root_only=True, default=False),
    "open": PartitionLimits(name="open", root_only=False, default=True),
    "old": PartitionLimits(name="old"),  # a REST API before v0.0.45: flags unknown
}
ALICE = {"user_name": "alice"}
WHY = "it is a heterogeneous job (a CompositePodGroup's)"


@pytest.mark.parametrize(
    ("requests", "partitions", "refused"),
    [
        ([JobRequest(partition="locked", **ALICE)], PARTITIONS, "locked"),
        ([JobRequest(partition="locked", user_id=2001)], PARTITIONS, "locked"),
        ([JobRequest(partition="locked", group_name="team-a")], PARTITIONS, "locked"),
        ([JobRequest(partition="open,locked", **ALICE)], PARTITIONS, "locked"),  # it may go to either
        ([JobRequest(partition="open", **ALICE), JobRequest(partition="locked", **ALICE)], PARTITIONS, "locked"),
        ([JobRequest(partition="locked")], PARTITIONS, None),  # the bridge's own job: its token is right
        ([JobRequest(partition="open", **ALICE)], PARTITIONS, None),
        ([JobRequest(partition="old", **ALICE)], PARTITIONS, None),  # unknown: Slurm's to judge
        ([JobRequest(partition="gone", **ALICE)], PARTITIONS, None),  # no such partition: Slurm refuses it
        ([JobRequest(**ALICE)], PARTITIONS, None),  # Slurm's default partition, "open"
        ([JobRequest(**ALICE)], {**PARTITIONS, "open": PartitionLimits(name="open", default=False),
                                 "locked": PartitionLimits(name="locked", root_only=True, default=True)}, "locked"),
        ([JobRequest(partition="locked", **ALICE)], {}, None),  # nothing read
    ],
)  # fmt: skip
def test_a_tenants_job_with_the_bridges_token_is_refused_in_a_root_only_partition(
    requests: list[JobRequest], partitions: dict[str, PartitionLimits], refused: str | None
) -> None:
    said = own_token_refusal(requests, WHY, partitions)
    if refused is None:
        assert said is None
    else:
        assert said is not None
        assert f"partition {refused} is RootOnly" in said and WHY in said and "SlurmUser" in said, said


class Reads:
    """slurmrestd's partition list, counted."""

    def __init__(self, *partitions: PartitionLimits) -> None:
        self.partitions, self.calls = list(partitions), 0

    async def partition_limits(self) -> list[PartitionLimits]:
        self.calls += 1
        return list(self.partitions)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


async def test_the_partitions_are_read_once_a_while_and_at_once_for_one_not_read_yet(clock: list[float]) -> None:
    reads = Reads(PARTITIONS["open"])
    partitions = Partitions(reads)
    assert set(await partitions.limits()) == {"open"} and reads.calls == 1
    assert set(await partitions.limits(["open"])) == {"open"} and reads.calls == 1, "kept"
    reads.partitions.append(PARTITIONS["locked"])
    assert set(await partitions.limits(["locked"])) == {"open", "locked"} and reads.calls == 2, "new: read at once"
    clock[0] += PARTITIONS_TTL_SECONDS + 1
    await partitions.limits()
    assert reads.calls == 3, "stale: read again"


async def test_a_heterogeneous_tenants_job_is_refused_before_anything_is_sent(clock: list[float]) -> None:
    slurm, reads = FakeSubmits(), Reads(*PARTITIONS.values())
    placer = Placer(slurm, True, partitions=Partitions(reads))
    parts = [JobRequest(partition="open", **ALICE), JobRequest(partition="locked", **ALICE)]
    with pytest.raises(PartitionRefusesTenant, match="partition locked is RootOnly") as refused:
        await placer.place_het(parts, "n", "c")
    assert "heterogeneous job" in str(refused.value) and "user alice's job" in str(refused.value)
    assert slurm.calls == [], "nothing was sent"
    await placer.place_het([JobRequest(partition="open", **ALICE)] * 2, "n", "c")
    await placer.place_het([JobRequest(partition="locked")] * 2, "n", "c")  # the bridge's own: its token
    assert slurm.calls == ["submit het 2 n"] * 2
    assert reads.calls == 1


async def test_a_tenants_job_in_another_group_is_refused_but_its_own_submit_is_slurms_to_judge(
    clock: list[float],
) -> None:
    slurm, reads = FakeSubmits(), Reads(*PARTITIONS.values())
    slurm.as_user_submit_refusal = SlurmError(
        "no", errors=[SlurmErrorDetail("Invalid group id", ESLURM_INVALID_GROUP_ID)]
    )
    placer = Placer(slurm, False, partitions=Partitions(reads))
    req = JobRequest(partition="locked", user_name="alice", group_id=3000)
    with pytest.raises(PartitionRefusesTenant, match="its group 3000 is not alice's primary group"):
        await placer.place(req, "n", "c")
    assert slurm.calls == ["submit as alice"], "the tenant's own submit went; the bridge's did not"
    with pytest.raises(PartitionRefusesTenant):
        await placer.place(req, "n", "c")
    assert slurm.calls == ["submit as alice"], "the group is known now: refused at once"
    slurm.as_user_submit_refusal = None
    assert await placer.place(JobRequest(partition="locked", user_name="bob"), "n", "c") == 101
    assert slurm.calls[-2:] == ["submit as bob locked", "mark 101"], "as the tenant: Slurm judges RootOnly itself"
    assert reads.calls == 1, "read only for a job the bridge's token would send"


async def test_a_refused_composite_fails_naming_the_partition_and_its_pods_are_ended() -> None:
    kube, slurm, m, jobs, pods = cluster()
    for name, group in (("large-0", "large"), ("large-1", "large"), ("small-0", "small")):
        add_pod(kube, pods, name, group)
    await join_all(m, pods, "large-0", "large-1", "small-0")
    stored = kube.objects[PHJ]
    for component in stored["spec"]["components"]:  # a tenant's, as a TenantPolicy's user makes it
        component["slurm"].update(userName="alice", partition="locked")
    stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
    slurm.partitions = [PartitionLimits(name="locked", root_only=True)]
    jobs.phjs.upsert(kube.objects[PHJ])
    assert await jobs.reconcile(("ns", "cpg-c")) is None
    assert slurm.calls == ["partitions"], "nothing submitted"
    status: dict[str, Any] = kube.objects[PHJ]["status"]
    assert (status["phase"], status["reason"]) == ("Failed", names.REASON_PARTITION_REFUSES_TENANT)
    assert "not submitted: partition locked is RootOnly" in status["message"]
    submitted = next(c for c in status["conditions"] if c["type"] == names.COND_SUBMITTED)
    assert (submitted["status"], submitted["reason"]) == ("False", names.REASON_PARTITION_REFUSES_TENANT)
    assert names.REASON_PARTITION_REFUSES_TENANT in kube.reasons
    for name in ("large-0", "large-1", "small-0"):
        assert kube.objects[f"/api/v1/namespaces/ns/pods/{name}"]["status"]["phase"] == "Failed", name


def test_a_final_refusal_is_not_retried() -> None:
    """The lifecycle's row: Failed at once, the live members ended (a Slurm refusal is retried)."""
    phj = make_phj().generation(1).pods("p0").spec(slurm={"nodes": 1}).parsed()
    now = lc.Clock(1000.0, datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
    final = pl.Refused("not submitted: no", False, ("p0",), final=names.REASON_PARTITION_REFUSES_TENANT)
    plan = lc.after_refusal(phj, final, now)
    assert plan.requeue is None
    (write,) = [a for a in plan.actions if isinstance(a, pl.WriteStatus)]
    assert (write.status.phase, write.status.reason) == ("Failed", names.REASON_PARTITION_REFUSES_TENANT)
    assert [a.pods for a in plan.actions if isinstance(a, pl.EndPods)] == [("p0",)]
    retried = lc.after_refusal(phj, pl.Refused("Slurm refused the job: no", False, ("p0",)), now)
    assert retried.requeue is not None and not [a for a in retried.actions if isinstance(a, pl.EndPods)]
