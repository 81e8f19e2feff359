"""Heterogeneous Slurm jobs (a CompositePodGroup's) in the Slurm layer: the submit body, the
decoded component fields, job states named ``<leader>+<offset>``, and the poller's and the orphan
sweep's view, where a job's components are one job (scripted slurmrestd and fakes only)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs.orphans import candidates
from slurm_bridge.operator.views.slurmjobs import JobSnapshot, PhjRef
from slurm_bridge.slurm.models import JobInfo, JobRequest, JobStates
from slurm_bridge.slurm.versions import SPOKEN_VERSIONS, codec_for
from tests.builders import slurm_job
from tests.unit.fakes import FakeJobReads
from tests.unit.operator.placeholderjobs.test_store_and_poller import _poller
from tests.unit.slurm.test_slurm_client import TOKEN, FakeSlurmrestd, client, err, job_json, ok

pytestmark = pytest.mark.unit

LEADER = 20
REF = PhjRef("bridge", "ns", "cpg-c", "c")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    p = tmp_path / "jwt"
    p.write_text(TOKEN + "\n")
    return p


def component(job_id: int, offset: int, state: str = "PENDING", nodes: tuple[str, ...] = ()) -> JobInfo:
    return slurm_job(job_id, state, nodes=nodes, ref=REF, het=(LEADER, offset))


# --- the REST client ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_a_heterogeneous_job_is_one_submit_with_a_component_per_request(token_file: Path, version: str) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", f"/slurm/{version}/job/submit", lambda r: ok({"job_id": LEADER}))
    small = JobRequest(partition="debug", nodes=1, cpus_per_task=1, memory_per_node_mib=100)
    large = JobRequest(partition="debug", nodes=2, cpus_per_task=2, gres="gpu:1")
    async with client(fake, token_file, api_version=version) as c:
        assert await c.submit_het_job([small, large], name="ns/c", admin_comment="bridge=x") == LEADER
        assert c.request_count == 1
    body = json.loads(fake.requests[-1].content)
    assert set(body) == {"jobs"}, "no 'job' beside 'jobs': Slurm would take it for one job"
    first, second = body["jobs"]
    for part in (first, second):
        assert part["flags"] == ["EXTERNAL_JOB"] and "immediate" not in part
        assert (part["name"], part["admin_comment"], part["current_working_directory"]) == ("ns/c", "bridge=x", "/tmp")
    assert (first["minimum_nodes"], first["maximum_nodes"], first["cpus_per_task"]) == (1, 1, 1)
    assert (second["minimum_nodes"], second["maximum_nodes"], second["cpus_per_task"]) == (2, 2, 2)
    assert first["memory_per_node"]["number"] == 100 and "tres_per_node" not in first
    assert second["tres_per_node"] == "gres/gpu:1" and "memory_per_node" not in second


def test_a_heterogeneous_job_needs_a_component() -> None:
    with pytest.raises(ValueError, match="at least one component"):
        codec_for("v0.0.44").het_submit_body([], name="n", admin_comment="c")


async def test_a_heterogeneous_submit_is_not_resent_when_slurm_may_have_made_it(token_file: Path) -> None:
    from slurm_bridge.slurm.errors import SlurmUnavailable

    fake = FakeSlurmrestd()
    fake.on("POST", "/slurm/v0.0.45/job/submit", lambda r: err(502, 1802, "Communication receive failure"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmUnavailable) as e:
            await c.submit_het_job([JobRequest()], name="n", admin_comment="c")
        assert c.request_count == 1
    assert e.value.maybe_applied


async def test_a_leaders_record_holds_every_component(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    no_val = {"set": False, "infinite": False, "number": 0}
    records = [
        job_json(LEADER, nodes="n1", het_job_id={"set": True, "infinite": False, "number": LEADER},
                 het_job_offset={"set": True, "infinite": False, "number": 0}),
        job_json(LEADER + 1, nodes="n[2-3]", het_job_id=LEADER, het_job_offset=1),  # plain numbers decode too
    ]  # fmt: skip
    fake.on("GET", f"/slurm/v0.0.45/job/{LEADER}", lambda r: ok({"jobs": records}))
    fake.on("GET", "/slurm/v0.0.45/job/5", lambda r: ok({"jobs": [job_json(5, het_job_id=no_val, het_job_offset=0)]}))
    fake.on("GET", "/slurm/v0.0.45/job/6", lambda r: err(404, 2017, "Invalid job id specified"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        leader, other = await c.get_jobs(LEADER)
        assert (leader.job_id, leader.het_job_id, leader.het_job_offset, leader.nodes) == (LEADER, LEADER, 0, ("n1",))
        assert (other.het_job_id, other.het_job_offset, other.nodes) == (LEADER, 1, ("n2", "n3"))
        assert leader.het_leader == other.het_leader == LEADER
        assert not leader.is_het_component and other.is_het_component
        (plain,) = await c.get_jobs(5)
        assert (plain.het_job_id, plain.het_job_offset, plain.het_leader, plain.is_het_component) == (0, 0, 5, False)
        assert await c.get_jobs(6) == []
        assert (await c.get_job(LEADER)) == leader, "get_job still answers with the job asked for"


async def test_job_states_name_components_by_their_own_id_and_offset(token_file: Path) -> None:
    # As Slurm 26.05 answers (checked): leader 13's components are "13+0" and "14+1".
    fake = FakeSlurmrestd()
    jobs = [{"job_id": "7", "state": ["RUNNING"]}, {"job_id": f"{LEADER}+0", "state": ["PENDING"]},
            {"job_id": f"{LEADER + 1}+1", "state": ["PENDING"]}, {"job_id": "9_2", "state": ["PENDING"]}]  # fmt: skip
    later = [
        *jobs[:1],
        {"job_id": f"{LEADER}+0", "state": ["RUNNING"]},
        {"job_id": f"{LEADER + 1}+1", "state": ["RUNNING"]},
    ]
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", *(lambda r, j=j: ok({"jobs": j}) for j in (jobs, jobs, later)))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        states = await c.job_states()
        assert states.by_id == {7: ("RUNNING",), LEADER: ("PENDING",), LEADER + 1: ("PENDING",)}
        assert states.of(component(LEADER + 1, 1)) == ("PENDING",)
        assert states.knows(LEADER) and states.knows(7)
        again = await c.job_states(states)
        assert again.unchanged
        assert not (await c.job_states(again)).unchanged, "a component's state moved"


def test_states_by_own_id_are_found_too() -> None:
    states = JobStates({LEADER: ("RUNNING",), LEADER + 1: ("RUNNING",)})
    assert states.of(component(LEADER + 1, 1)) == ("RUNNING",)


# --- the poller's view -------------------------------------------------------------------------


def test_the_snapshot_stands_a_heterogeneous_job_for_its_leader() -> None:
    leader, other = component(LEADER, 0), component(LEADER + 1, 1)
    snap = JobSnapshot({j.job_id: j for j in (other, leader)}, {j.job_id: REF for j in (other, leader)}, 0.0)
    assert snap.job_for_uid("c") == leader, "adoption finds the leader, never a component"
    assert snap.by_uid["c"] == [leader]
    assert snap.components(LEADER) == (leader, other) and snap.components(LEADER + 1) == ()
    assert snap.pending == {LEADER}, "the leader's reason is read again; it stands for every component"
    snap.drop(LEADER + 1)
    assert snap.components(LEADER) == (leader,)
    snap.put(other, REF)
    snap.drop(LEADER)
    assert snap.components(LEADER) == (other,) and "c" not in snap.by_uid


async def test_a_leaders_refresh_reads_every_component_and_cancel_covers_them() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    await poller.poll_once()
    leader, other = component(LEADER, 0, "RUNNING", ("n1",)), component(LEADER + 1, 1, "RUNNING", ("n2",))
    slurm.set(leader)
    slurm.set(other)
    got = await poller.refresh(LEADER, REF, het=True)
    snap = poller.snapshot
    assert got == leader and snap is not None and snap.components(LEADER) == (leader, other)
    assert slurm.calls[-1] == f"get all {LEADER}"

    poller.assume_cancelled(LEADER)
    assert [c.state for c in snap.components(LEADER)] == ["CANCELLED", "CANCELLED"]


async def test_the_poller_follows_components_by_their_own_ids() -> None:
    slurm, changed = FakeJobReads(), list[str]()
    poller = _poller(slurm, changed)
    leader, other = component(LEADER, 0), component(LEADER + 1, 1)
    slurm.set(leader)
    slurm.set(other)
    await poller.poll_once()
    assert changed == ["cpg-c", "cpg-c"]

    def states(_: JobStates | None = None) -> JobStates:
        slurm.calls.append("states")
        return JobStates({j.job_id: j.states for j in slurm.jobs.values()})

    async def job_states(previous: JobStates | None = None) -> JobStates:
        return states(previous)

    slurm.job_states = job_states  # type: ignore[method-assign]
    slurm.calls.clear()
    changed.clear()
    await poller.poll_once()
    assert slurm.calls == ["states"], "an unchanged component is not read again"
    slurm.set(component(LEADER + 1, 1, "CANCELLED"))
    slurm.calls.clear()
    await poller.poll_once()
    assert slurm.calls == ["states", f"get {LEADER + 1}"] and changed == ["cpg-c"]
    assert poller.snapshot is not None and poller.snapshot.components(LEADER)[1].state == "CANCELLED"


# --- the orphan sweep ----------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def aged(job: JobInfo) -> JobInfo:
    return job.model_copy(update={"submit_time": datetime.fromtimestamp(NOW - 600, UTC)})


@pytest.mark.parametrize(
    ("leader_state", "other_state", "swept"),
    [("RUNNING", "RUNNING", [LEADER]),  # the leader's cancel ends both
     ("CANCELLED", "RUNNING", [LEADER + 1]),  # a component outliving its leader is swept on its own
     ("CANCELLED", "CANCELLED", [])],
)  # fmt: skip
def test_an_orphaned_heterogeneous_job_is_swept_by_its_leader(leader_state: str, other_state: str,
                                                              swept: list[int]) -> None:  # fmt: skip
    jobs = [aged(component(LEADER, 0, leader_state)), aged(component(LEADER + 1, 1, other_state))]
    snap = JobSnapshot({j.job_id: j for j in jobs}, {j.job_id: REF for j in jobs}, 0.0)
    found = candidates(snap, set(), lambda uid: False, NOW, grace=60)
    assert [j for j, _ in found] == swept
