"""Slurm's pending reasons in words (slurm_bridge/slurm/reasons.py): what a waiting pod's
SlurmJobPending Event says."""

from __future__ import annotations

import pytest

from slurm_bridge.slurm.reasons import explain

# Each code the issue names, and a sample of the association and QOS limits read by their parts.
TABLE = [
    ("Resources", "the nodes it needs are busy"),
    ("Priority", "jobs of higher priority are ahead of it in the queue"),
    ("PartitionDown", "its partition is down"),
    ("ReqNodeNotAvail", "a node it needs is not available (down, drained or reserved)"),
    ("Dependency", "it waits for a job it depends on to finish"),
    ("BeginTime", "its start is deferred to a later time (begin time)"),
    ("JobHeldAdmin", "an administrator holds it (scontrol release lets it run)"),
    ("PartitionConfig", "it asks for more than its partition's nodes offer (CPUs, memory, GPUs or features)"),
    ("PartitionTimeLimit", "its time limit exceeds its partition's maximum time"),
    ("Reservation", "it waits for its advanced reservation to start"),
    ("InvalidAccount", "its Slurm account is invalid; it will not start until the account is fixed"),
    ("InvalidQOS", "its QOS is invalid; it will not start until the QOS is fixed"),
    ("AssocMaxJobsLimit", "its association (user and account) already runs as many jobs as it allows"),
    ("QOSMaxJobsPerUserLimit", "its user already runs as many jobs as the QOS allows per user"),
    # read by their parts
    ("AssocGrpCpuLimit", "its association (user and account) has reached its limit on CPUs (all its jobs together)"),
    ("AssocGrpNodeLimit", "its association (user and account) has reached its limit on nodes (all its jobs together)"),
    ("QOSGrpCpuLimit", "its QOS has reached its limit on CPUs (all its jobs together)"),
    ("QOSMaxCpuPerUserLimit", "its user's jobs already use the most CPUs its QOS allows per user"),
    ("QOSGrpGRES", "its QOS has reached its limit on generic resources (GPUs and others) (all its jobs together)"),
    ("AssocGrpCPURunMinutesLimit",
     "its association (user and account) has reached its limit on CPU-minutes of running jobs (all its jobs together)"),
    ("QOSGrpBillingMinutes", "its QOS has reached its limit on billing-minutes (all its jobs together)"),
    ("AssocMaxWallDurationPerJobLimit",
     "it asks for more run time than its association (user and account) allows per job"),
    ("QOSMaxNodePerJobLimit", "it asks for more nodes than its QOS allows per job"),
    ("QOSMaxMemPerAccount", "its account's jobs already use the most memory its QOS allows per account"),
    ("QOSMinCpuNotSatisfied", "it asks for less than the minimum CPUs its QOS requires per job"),
    ("AssocGrpSomethingNewLimit",
     "its association (user and account) has reached its limit on SomethingNew (all its jobs together)"),
    # anything else is named as it is
    ("NotAReasonSlurmHas", "Slurm's reason code; squeue(1) explains it under JOB REASON CODES"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "words"), TABLE)
def test_explain(code: str, words: str) -> None:
    assert explain(code) == words


def test_every_sentence_is_a_lower_case_clause_without_a_full_stop() -> None:
    """It is put in parentheses after the code: "Resources (the nodes it needs are busy)"."""
    for code, _ in TABLE:
        words = explain(code)
        assert words and not words.endswith(".") and (words[0].islower() or words.startswith("Slurm")), code
