"""The pods' outcome written with the released mark (issue 38 §6): Slurm records an external job the
bridge ends as CANCELLED whatever its pods did, so the mark says how they ended, and
``sacct -o AdminComment`` shows it (docs/tenancy.md, "What Slurm's accounting says")."""

from __future__ import annotations

import json
from typing import Any

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.pods import highest_exit_code
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import (
    JobOutcome,
    decode_admin_comment,
    encode_admin_comment,
    is_released,
    released_comment,
)
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder, SlurmPolicy
from slurm_bridge.slurm.models import SlurmConf
from tests.builders import slurm_job
from tests.unit.fakes import FakeSlurm
from tests.unit.operator.placeholderjobs import test_lifecycle as lt
from tests.unit.operator.placeholderjobs.test_phjsync import placeholderjob, shell, shell_kube
from tests.unit.situations import decide_in

Obj = dict[str, Any]
REF = PhjRef("slurm-bridge", "ns", "p", "uid-p")


def pod(*codes: int | None, init: int | None = None) -> Obj:
    def state(c: int | None) -> Obj:
        return {"terminated": {"exitCode": c}} if c is not None else {"running": {}}

    statuses: list[Obj] = [{"name": f"c{i}", "state": state(c)} for i, c in enumerate(codes)]
    status: Obj = {"phase": "Failed", "containerStatuses": statuses}
    if init is not None:
        status["initContainerStatuses"] = [{"name": "i", "state": {"terminated": {"exitCode": init}}}]
    return {"metadata": {"name": "p"}, "status": status}


def payload(comment: str) -> Obj:
    data: Obj = json.loads(comment[len(names.ADMIN_COMMENT_PREFIX) :])
    return data


def test_the_highest_exit_code_of_the_members_containers_as_slurm_derives_a_jobs() -> None:
    assert highest_exit_code({"a": pod(0, 3), "b": pod(1), "gone": None}) == 3
    assert highest_exit_code({"a": pod(0, init=9)}) == 0, "an init container's code is not the job's"
    assert highest_exit_code({"a": pod(None), "gone": None}) is None, "nothing terminated: not known"
    assert highest_exit_code({}) is None


def test_the_outcome_rides_with_the_released_mark_every_other_key_kept() -> None:
    mark = encode_admin_comment(REF, handoff="node")
    got = payload(released_comment(mark, outcome=JobOutcome("Failed", 3)))
    assert got == {"bridge": "slurm-bridge", "ns": "ns", "name": "p", "uid": "uid-p", "handoff": "node",
                   "released": True, "outcome": "Failed", "exit_code": 3}  # fmt: skip
    assert decode_admin_comment(released_comment(mark, outcome=JobOutcome("Completed", 0))) == REF
    assert is_released(released_comment(mark, outcome=JobOutcome("Completed", 0)))
    # Not known, or a code the handoff script's digits-only values cannot carry: the phase alone.
    assert "exit_code" not in payload(released_comment(mark, outcome=JobOutcome("Cancelled")))
    assert "exit_code" not in payload(released_comment(mark, outcome=JobOutcome("Failed", -1)))
    # A comment that is not the bridge's: the PlaceholderJob's ref, with the outcome.
    assert payload(released_comment("set by an admin", REF, JobOutcome("Completed", 0)))["outcome"] == "Completed"


async def test_the_cancel_of_a_job_whose_pods_ended_writes_their_outcome_in_the_mark() -> None:
    job = slurm_job(7, "RUNNING", nodes=("n1",), admin_comment=encode_admin_comment(REF, handoff="cores"))
    slurm = FakeSlurm(job)
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [job])
    await jobs.cancel(7, REF, outcome=JobOutcome("Failed", 2))
    assert slurm.calls == ["released 7", "cancel 7"]
    assert payload(slurm.jobs[7].admin_comment)["outcome"] == "Failed"
    assert payload(slurm.jobs[7].admin_comment)["exit_code"] == 2


async def test_without_a_handoff_epilog_the_mark_is_written_only_to_record_an_outcome() -> None:
    """slurm.conf without the handoff's EpilogSlurmctld: nothing reads the released mark, so a
    cancel with nothing to record costs no call; one with the pods' outcome writes it."""
    job = slurm_job(7, "RUNNING", nodes=("n1",), admin_comment=encode_admin_comment(REF, handoff="cores"))
    slurm = FakeSlurm(job)
    jobs = shell(shell_kube({}), slurm, placeholderjob(), None, [job])
    holder = PolicyHolder()
    holder.current = SlurmPolicy(conf=SlurmConf(epilog_slurmctld=()), known=True)
    jobs.handoff.policy = holder
    await jobs.cancel(7, REF)
    assert slurm.calls == ["cancel 7"]
    slurm.calls.clear()
    job8 = slurm_job(8, "RUNNING", nodes=("n1",), admin_comment=encode_admin_comment(REF, handoff="cores"))
    slurm.jobs[8] = job8
    jobs.poller.snapshot.put(job8, REF)  # type: ignore[union-attr]
    await jobs.cancel(8, REF, outcome=JobOutcome("Completed", 0))
    assert slurm.calls == ["released 8", "cancel 8"]


def ended_pod(state: str, code: int | None) -> Obj:
    built = lt.pod(state)
    assert built is not None
    if code is not None:
        built["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": code}}}]
    return built


def cancel_of(members: dict[str, Obj | None]) -> pl.Cancel:
    """The cancel a Running PlaceholderJob's plan ends with once its members ended (confirmed)."""
    obj = PlaceholderJob.parse(lt.phj("Running"))
    gone = lt.gone(members)  # a deleted member left after its kubelet ended it (not vanished)
    first = decide_in(obj, lt.slurm_side("RUNNING"), members, lt.NOW, scheduler="s", departed=gone)
    written = [a.status.dump() for a in first.actions if isinstance(a, pl.WriteStatus)]
    raw = lt.phj("Running")
    raw["status"] = {**raw["status"], **(written[0] if written else {})}
    side = lt.slurm_side("RUNNING")
    again = decide_in(PlaceholderJob.parse(raw), side, members, lt.NOW, dict(members), scheduler="s", departed=gone)
    cancels = [a for a in [*first.actions, *again.actions] if isinstance(a, pl.Cancel)]
    assert len(cancels) == 1, (first.actions, again.actions)
    return cancels[0]


def test_a_placeholderjob_whose_pods_ended_cancels_its_job_with_their_outcome() -> None:
    assert cancel_of({"p": ended_pod("succeeded", 0)}).outcome == JobOutcome("Completed", 0)
    assert cancel_of({"p": ended_pod("failed", 3)}).outcome == JobOutcome("Failed", 3)
    assert cancel_of({"p": None}).outcome == JobOutcome("Cancelled", None), "deleted: no exit code known"
