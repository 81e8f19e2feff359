"""What Slurm holds for a bridge job against what its pods need (slurm_bridge/rules/allocationmatch.py):
a table of requests, job records as Slurm reports them (its owner may have changed them with
``scontrol update``) and placed pods, each with the differences it must name; and how the job
record's fields are decoded from slurmrestd's answer."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge.rules.allocationmatch import compare, compare_components, held_of, parse_tres
from slurm_bridge.slurm.models import JobInfo, JobRequest
from slurm_bridge.slurm.versions import codec_for

pytestmark = pytest.mark.unit

CO_RESIDENT = JobRequest(node_sharing="coResident", cpus_per_task=2, memory_per_node_mib=2048)
TIME_SHARED = JobRequest(node_sharing="timeShared", mcs_label="kubernetes", cpus_per_task=1)
GPUS = JobRequest(node_sharing="exclusive", gres="gres/gpu:a100:2,gres/shard:4")
GANG = JobRequest(nodes=2, tasks_per_node=2, cpus_per_task=1, memory_per_node_mib=1000)


def running(nodes: tuple[str, ...] = ("n1",), **fields: Any) -> JobInfo:
    return JobInfo(job_id=7, states=("RUNNING",), nodes=nodes, **fields)


def pending(**fields: Any) -> JobInfo:
    return JobInfo(job_id=7, states=("PENDING",), **fields)


# (name, request, job, placed pods, the kinds of difference named, words each message holds)
CASES: list[tuple[str, JobRequest, JobInfo, dict[str, str], tuple[str, ...], tuple[str, ...]]] = [
    ("as asked", CO_RESIDENT, running(tres="cpu=2,mem=2G,node=1,billing=2"), {"p": "n1"}, (), ()),
    ("more than asked", CO_RESIDENT, running(tres="cpu=4,mem=4096M,node=1"), {"p": "n1"}, (), ()),
    ("nothing read", CO_RESIDENT, running(), {"p": "n1"}, (), ()),
    (
        "pending, shrunk by its owner",
        CO_RESIDENT,
        pending(tres="cpu=1,mem=100M,node=1,billing=1"),
        {},
        ("cpus", "memory"),
        ("1 CPU(s) per node where the pods need 2", "100 MiB of memory per node where the pods need 2048 MiB"),
    ),
    (
        "allocated short",
        CO_RESIDENT,
        running(tres="cpu=1,mem=100M,node=1"),
        {},
        ("cpus", "memory"),
        ("Slurm job 7 holds less",),
    ),
    (
        "moved under its pod",
        CO_RESIDENT,
        running(("n2",), tres="cpu=2,mem=2G,node=1"),
        {"p": "n1"},
        ("nodes",),
        ("pod p is on node n1, which Slurm no longer holds for it (it holds n2)",),
    ),
    (
        "a gang shrunk by a node",
        GANG,
        running(("n1",), tres="cpu=2,mem=1000M,node=1"),
        {"a": "n1", "b": "n2"},
        ("nodes",),
        ("pod b is on node n2",),
    ),
    ("a gang as asked", GANG, running(("n1", "n2"), tres="cpu=4,mem=2000M,node=2"), {"a": "n1", "b": "n2"}, (), ()),
    (
        "a gang with fewer CPUs per node",
        GANG,
        running(("n1", "n2"), tres="cpu=2,mem=2000M,node=2"),
        {},
        ("cpus",),
        ("1 CPU(s) per node where the pods need 2",),
    ),
    ("no memory asked: any", JobRequest(cpus_per_task=1), running(tres="cpu=1,mem=1M,node=1"), {}, (), ()),
    ("GPUs as asked", GPUS, running(tres="cpu=64,node=1", gres_per_node="gres/gpu:a100:2,gres/shard:4"), {}, (), ()),
    (
        "GPUs taken away",
        GPUS,
        running(tres="cpu=64,node=1", gres_per_node="gres/gpu:a100:1"),
        {},
        ("gres", "gres"),
        ("1 gres/gpu:a100 per node where the pods need 2", "0 gres/shard per node where the pods need 4"),
    ),
    ("labelled", TIME_SHARED, running(mcs_label="kubernetes"), {}, (), ()),
    (
        "label changed",
        TIME_SHARED,
        running(mcs_label="mine"),
        {},
        ("mcs",),
        ("MCS label 'mine' where the bridge set 'kubernetes', so other jobs may share its nodes",),
    ),
    ("no label (a Slurm without mcs/label)", TIME_SHARED, running(mcs_label=""), {}, (), ()),
    ("GPUs in the older form", GPUS, running(gres_per_node="gres:gpu:a100:2,gres:shard:4"), {}, (), ()),
    ("label not read", TIME_SHARED, running(), {}, (), ()),
    ("no label asked (coResident)", CO_RESIDENT, running(mcs_label="other"), {}, (), ()),
]


@pytest.mark.parametrize(
    ("request_", "job", "placed", "kinds", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_every_difference_is_named(
    request_: JobRequest, job: JobInfo, placed: dict[str, str], kinds: tuple[str, ...], words: tuple[str, ...]
) -> None:
    verdict = compare(request_, job, placed)
    assert verdict.kinds == kinds
    assert verdict.matches is (not kinds)
    said = verdict.message() if kinds else ""
    for w in words:
        assert w in said, said


def het_part(job_id: int, nodes: tuple[str, ...], tres: str) -> JobInfo:
    return JobInfo(job_id=job_id, states=("RUNNING",), nodes=nodes, tres=tres, het_job_id=10,
                   het_job_offset=job_id - 10)  # fmt: skip


def test_a_heterogeneous_job_is_compared_component_by_component() -> None:
    """Each component's request against its own record with its own pods: a component may hold
    enough for another's pods and still too little for its own."""
    small, big = JobRequest(cpus_per_task=1), JobRequest(nodes=2, cpus_per_task=4)
    as_asked = [(small, het_part(10, ("na",), "cpu=1,node=1"), {"a0": "na"}),
                (big, het_part(11, ("nb1", "nb2"), "cpu=8,node=2"), {"b0": "nb1", "b1": "nb2"})]  # fmt: skip
    assert compare_components(10, as_asked).matches
    # Component 1 holds what component 0's pod needs, not what its own need; component 0 moved.
    changed = [(small, het_part(10, ("nz",), "cpu=1,node=1"), {"a0": "na"}),
               (big, het_part(11, ("nb1", "nb2"), "cpu=2,node=2"), {"b0": "nb1", "b1": "nb2"})]  # fmt: skip
    verdict = compare_components(10, changed, ["PodGroup a", "PodGroup b"])
    assert not verdict.matches and verdict.short == (0, 1)
    assert [p.kinds for p in verdict.parts] == [("nodes",), ("cpus",)]
    assert verdict.message() == (
        "heterogeneous Slurm job 10 holds less than its pods need: in component 0 (PodGroup a, Slurm job 10), "
        "pod a0 is on node na, which Slurm no longer holds for it (it holds nz); in component 1 (PodGroup b, "
        "Slurm job 11), 1 CPU(s) per node where the pods need 4"
    )
    unnamed = compare_components(10, [as_asked[0], changed[1]])
    assert unnamed.short == (1,) and "in component 1 (Slurm job 11), 1 CPU(s)" in unnamed.message()


@pytest.mark.parametrize(
    ("tres", "expected"),
    [
        ("cpu=2,mem=2G,node=1,billing=2", {"cpu": 2, "mem": 2048, "node": 1, "billing": 2}),
        ("cpu=1,mem=100M,node=1", {"cpu": 1, "mem": 100, "node": 1}),
        ("mem=1.5G,gres/gpu=2", {"mem": 1536, "gres/gpu": 2}),
        ("mem=1T", {"mem": 1024 * 1024}),
        ("", {}),
        ("cpu=,junk,mem=xG", {}),
    ],
)
def test_tres_strings_are_read_with_memory_in_mib(tres: str, expected: dict[str, float]) -> None:
    assert parse_tres(tres) == expected


def test_a_pending_jobs_count_of_nodes_comes_from_its_tres() -> None:
    held = held_of(pending(tres="cpu=4,mem=2000M,node=2"))
    assert (held.cpus, held.memory_mib) == (2, 1000)


def test_the_job_record_carries_what_slurm_holds() -> None:
    """Allocated TRES for a running job, requested TRES for a pending one; GRES per node and the
    MCS label as slurmrestd writes them."""
    codec = codec_for("v0.0.44")
    record = {
        "job_id": 7,
        "job_state": ["RUNNING"],
        "nodes": "n1",
        "tres_alloc_str": "cpu=2,mem=2G,node=1",
        "tres_req_str": "cpu=1,mem=100M,node=1",
        "tres_per_node": "gres/gpu:1",
        "mcs_label": "kubernetes",
    }
    job = codec.decode_job(record)
    assert (job.tres, job.gres_per_node, job.mcs_label) == ("cpu=2,mem=2G,node=1", "gres/gpu:1", "kubernetes")
    waiting = codec.decode_job({**record, "job_state": ["PENDING"], "nodes": ""})
    assert waiting.tres == "cpu=1,mem=100M,node=1"
    bare = codec.decode_job({"job_id": 8, "job_state": ["RUNNING"]})
    assert (bare.tres, bare.gres_per_node, bare.mcs_label) == ("", "", "")
