"""The handoff's PrologSlurmctld (slurm-hooks/slurm-bridge-handoff.sh with SLURM_SCRIPT_CONTEXT
prolog_slurmctld, issue 36 §3): slurmctld may give a stopping pod's CPUs to a waiting job before the
epilog has held them, so a starting job on a guarded node waits (the prolog does not return) while
a job that ended there has no epilog's done marker yet, or while the node is overbooked by a handoff
hold; an external job never waits; the wait is bounded, and then the prolog fails. The epilog's side:
its done marker in STATE_DIR.

Fakes answer the prolog's reads (``squeue`` of the ended jobs on its nodes, ``scontrol show res``,
``show node``, ``--json show job``, ``show hostnames``) from files a test changes while the script
runs, so that a wait ends when the fake Slurm changes. The real Slurm's side (a job allocated
before the hold, held in CONFIGURING until the pod's container exited) is tests/e2e/test_handoff.py."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import notice_comment
from slurm_bridge.rules.handoff import changed_drain_reason, drain_prefix, drain_reason, unheld_drain_reason
from tests.unit.handoffroot import SCRIPT, HandoffRoot

pytestmark = pytest.mark.unit

BRIDGE = "slurm-bridge"
JOB = 50  # the starting job

FAKE_SCONTROL = r"""#!/bin/bash
d={d}
echo "scontrol $*" >> $d/calls
case "$1 $2" in
  "show res")
    [ -f $d/res.fail ] && { echo "slurm_load_reservations error: Unable to contact slurm controller" >&2; exit 1; }
    [ -f $d/res ] && cat $d/res; exit 0 ;;
  "show node") cat "$d/node.$3"; exit 0 ;;
  "show hostnames") f="$d/hostnames.$(printf %s "$3" | tr '/[],' '____')"; [ -f "$f" ] && cat "$f"; exit 0 ;;
esac
if [ "$1 $2 $3" = "--json show job" ]; then cat $d/job.json; exit 0; fi
echo "unexpected: $*" >&2; exit 2
"""
FAKE_SQUEUE = r"""#!/bin/bash
d={d}
echo "squeue $*" >> $d/calls
[ -f $d/squeue.fail ] && { echo "squeue: error: Unable to contact slurm controller" >&2; exit 1; }
case "$*" in
  "--only-job-state -h -t all -j "*" -o %A %T")   # the noted jobs' states: of the ids asked only
    for id in ${6//,/ }; do [ -f $d/state.$id ] && echo "$id $(cat $d/state.$id)"; done; exit 0 ;;
  "-h -t all -j "*" -o %e") cat $d/end.$5; exit 0 ;;   # one job's end time
esac
[ -f $d/ended ] && cat $d/ended; exit 0   # the whole table's ended jobs (without STATE_DIR)
"""
EPILOG_SCONTROL = """#!/bin/bash
[ "$1 $2" = '--json show' ] && echo '{"jobs": []}'
exit 0
"""
FAKE_NOTIFY = r"""#!/bin/bash
echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID" >> {d}/notified
"""


def stamp(ago: float) -> str:
    """An end time as squeue prints it (local time, seconds)."""
    return (datetime.now() - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%S")


def res_line(name: str, node: str, *, cpus: int = 1, flags: str = "SPEC_NODES", state: str = "ACTIVE") -> str:
    return (f"ReservationName={name} StartTime=2026-11-28T15:30:13 EndTime=2026-11-29T15:30:13 Duration=1-00:00:00 "
            f"Nodes={node} NodeCnt=1 CoreCnt={cpus} Features=(null) PartitionName=(null) Flags={flags} "
            f"TRES=cpu={cpus} Users=slurm Groups=(null) Accounts=(null) Licenses=(null) State={state} "
            "BurstBuffer=(null) MaxStartDelay=(null)")  # fmt: skip


# the epilog's hold of all of n1's 2 CPUs for job 41's stopping pod
WHOLE_NODE_HOLD = res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=2, flags="IGNORE_JOBS,SPEC_NODES")


def job_json(*flags: str, name: str = "native") -> str:
    job = {"account": "team-a", "name": name, "comment": '"EXTERNAL_JOB"', "flags": list(flags), "job_id": JOB}
    return json.dumps({"jobs": [job], "errors": [], "warnings": []}, indent=2)


@dataclass
class Prolog(HandoffRoot):
    @property
    def state(self) -> Path:
        return self.root / "state"

    def configure(self, *lines: str, state_dir: Path | None = None, bridges: str = BRIDGE) -> None:
        state = f"STATE_DIR={state_dir or self.state}"
        self.write_conf("\n".join([f"BRIDGE_IDS={bridges}", f"SLURM_BIN_DIR={self.fake}", state, *lines]) + "\n")

    def write(self, name: str, text: str) -> None:
        (self.fake / name).write_text(text + ("\n" if text else ""))

    def node(self, name: str, alloc: int, tot: int, state: str = "MIXED", reason: str = "x") -> None:
        """The node as ``scontrol show node -o`` prints it (a later ``State=`` is not the node's)."""
        self.write(f"node.{name}", f"NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc={alloc} CPUEfctv={tot} "
                                   f"CPUTot={tot} CPULoad=0.10 AvailableFeatures=real State={state} "
                                   f"ThreadsPerCore=1 NextState=RESUME Reason={reason} [slurm@2026-12-03T16:17:59] "
                                   "State=IDLE")  # fmt: skip

    def noted(self, job: int, node: str = "n1", state: str = "RUNNING", ended_ago: float | None = None) -> None:
        """A job whose prolog noted it on ``node`` (STATE_DIR/<node>@<id>.run), as Slurm has it now."""
        (self.state / f"{node}@{job}.run").touch()
        self.write(f"state.{job}", state)
        self.write(f"end.{job}", stamp(ended_ago) if ended_ago is not None else "N/A")

    def hostnames(self, hostlist: str, *names: str) -> None:
        self.write("hostnames." + hostlist.translate(str.maketrans("/[],", "____")), "\n".join(names))

    def run(
        self, nodes: str = "n1", context: str = "prolog_slurmctld", comment: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(JOB), "SLURM_JOB_NODELIST": nodes,
               "SLURM_JOB_CPUS_PER_NODE": "2", "SLURM_JOB_EXCLUSIVE": "NO", "SLURM_SCRIPT_CONTEXT": context,
               "SLURM_JOB_WORK_DIR": "/home/alice"}  # fmt: skip
        if comment is not None:
            env["SLURM_JOB_COMMENT"] = comment
        return subprocess.run([str(self.etc / SCRIPT.name)], env=env, capture_output=True, text=True, timeout=30)

    def timed(self, **kw: str) -> tuple[subprocess.CompletedProcess[str], float]:
        t0 = time.monotonic()
        done = self.run(**kw)
        return done, time.monotonic() - t0

    @property
    def calls(self) -> list[str]:
        path = self.fake / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def reads(self) -> list[str]:
        """The calls that reach slurmctld (``show hostnames`` is the client's own)."""
        return [c for c in self.calls if "show hostnames" not in c]

    def later(self, seconds: float, action: object) -> threading.Timer:
        timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
        timer.start()
        return timer


@pytest.fixture
def prolog(tmp_path: Path) -> Iterator[Prolog]:
    p = Prolog(tmp_path)
    p.install({"scontrol": FAKE_SCONTROL, "squeue": FAKE_SQUEUE, "notify": FAKE_NOTIFY})
    p.state.mkdir()
    os.chmod(p.state, 0o755)
    p.configure()
    p.write("job.json", job_json())
    p.node("n1", alloc=2, tot=2)
    yield p


# ---- when a job starts at once ------------------------------------------------------------------------
def test_a_job_on_a_quiet_node_starts_at_once_after_one_read(prolog: Prolog) -> None:
    """No job noted on its node: the reservations only. Its own note is written for the next start."""
    done, took = prolog.timed()
    assert done.returncode == 0, done
    assert took < 2, f"the prolog took {took:.2f}s"
    assert prolog.reads() == ["scontrol show res -o"], prolog.calls
    assert (prolog.state / f"n1@{JOB}.run").exists()


def test_the_jobs_noted_on_its_nodes_are_read_by_id_never_the_whole_job_table(prolog: Prolog) -> None:
    """The jobs running beside it (their notes): one read of their states, by id, whatever else is
    in Slurm; a note its epilog answered since (<id>.done, newer) is not read."""
    for job in (41, 42, 43):
        prolog.noted(job)
    prolog.noted(44, node="n2")  # another node's
    (prolog.state / "43.done").touch()
    os.utime(prolog.state / "n1@43.run", (time.time() - 5, time.time() - 5))
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 2, f"{done} after {took:.2f}s"
    squeues = [c for c in prolog.reads() if c.startswith("squeue")]
    assert squeues == ["squeue --only-job-state -h -t all -j 41,42 -o %A %T"], prolog.calls


def test_an_epilog_removes_its_jobs_notes(prolog: Prolog) -> None:
    (prolog.fake / "scontrol").write_text(EPILOG_SCONTROL)
    prolog.noted(JOB)
    prolog.noted(JOB, node="n2")
    prolog.noted(41)
    assert prolog.run("n1", context="epilog_slurmctld").returncode == 0
    assert sorted(p.name for p in prolog.state.iterdir()) == [f"{JOB}.done", "n1@41.run"]


def test_a_job_on_no_guarded_node_reads_nothing(prolog: Prolog) -> None:
    prolog.configure("NODES=h[1-2]")
    prolog.hostnames("h[1-2]", "h1", "h2")
    prolog.write("res", WHOLE_NODE_HOLD)
    done = prolog.run("n1")
    assert done.returncode == 0 and prolog.reads() == [], prolog.calls


def test_only_the_guarded_nodes_of_a_job_are_read(prolog: Prolog) -> None:
    prolog.configure("NODES=h[1-2]")
    prolog.hostnames("h[1-2]", "h1", "h2")
    prolog.hostnames("n1,h2", "n1", "h2")
    prolog.noted(41, node="n1")
    prolog.noted(42, node="h2")
    assert prolog.run("n1,h2").returncode == 0
    assert "-j 42 " in prolog.reads()[0], prolog.calls
    assert (prolog.state / f"h2@{JOB}.run").exists() and not (prolog.state / f"n1@{JOB}.run").exists()


def test_without_a_state_directory_the_ended_jobs_of_its_nodes_are_read_from_the_job_table(prolog: Prolog) -> None:
    prolog.configure(state_dir=prolog.root / "missing")
    assert prolog.run().returncode == 0
    squeue = prolog.reads()[0]
    assert "-w n1" in squeue and "-o %A %e" in squeue and "CANCELLED" in squeue, squeue


@pytest.mark.parametrize(
    ("job", "state", "ago", "decided", "why"),
    [
        (41, "COMPLETED", 2, True, "its epilog is done"),
        (41, "RUNNING", None, False, "it runs"),
        (41, "PENDING", None, False, "requeued"),
        (41, "", None, False, "Slurm no longer knows it"),
        (41, "CANCELLED", 90, False, "it ended long ago (its epilog never ran)"),
        (JOB, "COMPLETED", 1, False, "the job itself (a requeued one)"),
    ],
)
def test_noted_jobs_that_need_no_wait(
    prolog: Prolog, job: int, state: str, ago: float | None, decided: bool, why: str
) -> None:
    prolog.noted(job, state=state, ended_ago=ago)
    if not state:
        (prolog.fake / f"state.{job}").unlink()
    if decided:
        (prolog.state / f"{job}.done").touch()
        os.utime(prolog.state / f"n1@{job}.run", (time.time() - 5, time.time() - 5))
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 2, f"{why}: {done} after {took:.2f}s"
    stale = not state or (ago or 0) > 30 or decided
    assert (prolog.state / f"n1@{job}.run").exists() == (not stale or job == JOB), f"{why}: a stale note is removed"


@pytest.mark.parametrize(
    ("ended", "why"),
    [
        (f"41 {stamp(2)}", "its epilog is done"),  # the marker below
        (f"41 {stamp(90)}", "it ended long ago"),
        (f"41 {stamp(-120)}", "an end time to come is no job that ended"),
        (f"{JOB} {stamp(1)}", "the job itself (a requeued one)"),
        ("41+0 2026-11-28T15:00:00\nUnknown N/A", "lines that are not an id and a time"),
    ],
)
def test_ended_jobs_that_need_no_wait_without_notes(prolog: Prolog, ended: str, why: str) -> None:
    """A node name unfit for a file name: the whole job table's ended jobs, as without STATE_DIR."""
    (prolog.state / "41.done").touch()
    prolog.write("ended", ended)
    done, took = prolog.timed(nodes="n+1")
    assert done.returncode == 0 and took < 2, f"{why}: {done} after {took:.2f}s"
    assert any("-w n+1 " in c for c in prolog.calls), prolog.calls


# ---- when it waits ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED", "COMPLETING"])
def test_a_job_waits_for_the_epilog_of_a_job_that_just_ended_on_its_node(prolog: Prolog, state: str) -> None:
    """slurmctld gave the CPUs of job 41 away before 41's epilog ran: the start waits until the
    epilog has noted its decision (STATE_DIR/41.done), then looks again. COMPLETING too: slurmctld
    keeps a job so while its EpilogSlurmctld (this script's epilog) runs."""
    prolog.noted(41, state=state, ended_ago=1)
    prolog.later(1.6, lambda: (prolog.state / "41.done").touch())
    done, took = prolog.timed()
    assert done.returncode == 0, done
    assert took >= 1.5, f"it went on after {took:.2f}s, before the epilog was done"
    assert sum(c.startswith("squeue --only-job-state") for c in prolog.calls) >= 3, prolog.calls
    assert "squeue -h -t all -j 41 -o %e" in prolog.calls, prolog.calls


def test_without_a_state_directory_a_job_waits_until_the_ended_job_is_old_enough(prolog: Prolog) -> None:
    prolog.configure(state_dir=prolog.root / "missing")
    prolog.write("ended", f"41 {stamp(29)}")
    done, took = prolog.timed()
    assert done.returncode == 0 and 0.5 <= took < 10, f"{done} after {took:.2f}s"


@pytest.mark.parametrize(
    ("flags", "cpus", "alloc", "tot"),
    [
        ("IGNORE_JOBS,SPEC_NODES", 2, 1, 2),  # a whole-node hold: anything starting there came after it
        ("SPEC_NODES", 1, 2, 2),  # a count hold: 2 allocated (this job's) + 1 held > 2
    ],
)
def test_a_job_waits_while_a_handoff_hold_overbooks_its_node(
    prolog: Prolog, flags: str, cpus: int, alloc: int, tot: int
) -> None:
    prolog.write("res", res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=cpus, flags=flags))
    prolog.node("n1", alloc=alloc, tot=tot)
    prolog.later(1.6, lambda: prolog.write("res", ""))  # the bridge deletes the hold: the pod stopped
    done, took = prolog.timed()
    assert done.returncode == 0 and took >= 1.5, f"{done} after {took:.2f}s"
    assert any(c.startswith("scontrol show node n1") for c in prolog.calls), prolog.calls
    log = done.stderr
    assert "held in CONFIGURING" not in log  # the log goes to its file, not stderr


@pytest.mark.parametrize(
    "line",
    [
        res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=1),  # 1 allocated + 1 held fits 2 CPUs
        res_line("handoff-41_other-bridge_n1", "n1", flags="IGNORE_JOBS"),  # not a listed bridge's
        res_line(f"handoff-41_{BRIDGE}-x_n1", "n1", flags="IGNORE_JOBS"),  # a longer id: no prefix match
        res_line(f"handoff-41_{BRIDGE}_n2", "n2", flags="IGNORE_JOBS"),  # another node
        res_line("maintenance", "n1", flags="MAINT,IGNORE_JOBS"),  # an administrator's
        res_line(f"handoff-41_{BRIDGE}_n1", "n1", flags="IGNORE_JOBS", state="INACTIVE"),
    ],
)
def test_holds_that_do_not_overbook_the_node_let_it_start(prolog: Prolog, line: str) -> None:
    prolog.write("res", line)
    prolog.node("n1", alloc=1, tot=2)
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 2, f"{done} after {took:.2f}s"


def test_a_job_that_waited_starts_only_once_its_node_answers_slurmctld(prolog: Prolog) -> None:
    """The bridge lifts a hold and its drain together; Slurm 26.05 marks a node whose drain is lifted
    NOT_RESPONDING until it answers a ping (checked on real-node-1). A held job whose configuration
    ended then would be requeued as lost (tests/e2e/test_handoff_prolog.py): it waits for the answer."""
    prolog.write("res", WHOLE_NODE_HOLD)
    prolog.node("n1", alloc=2, tot=2, state="MIXED+DRAIN")

    def lifted() -> None:
        prolog.write("res", "")
        prolog.node("n1", alloc=2, tot=2, state="MIXED+NOT_RESPONDING")

    prolog.later(1.0, lifted)
    prolog.later(2.2, lambda: prolog.node("n1", alloc=2, tot=2))  # the ping's answer
    done, took = prolog.timed()
    assert done.returncode == 0 and took >= 2.1, (
        f"it went on {took:.2f}s after the start; the hold was lifted at 1.0s, the node answered at 2.2s: {done}"
    )


# the handoff loop's drain reasons, as it writes them (the script matches their common prefix)
HANDOFF_DRAIN = drain_reason(BRIDGE, "ns", "p", 41, grace=30, margin=10)


@pytest.mark.parametrize(
    "reason",
    [
        pytest.param(HANDOFF_DRAIN, id="a-pod-outlived-its-hold"),
        pytest.param(unheld_drain_reason(BRIDGE, "ns", "p", 41), id="nothing-held-its-cpus"),
        pytest.param(changed_drain_reason(BRIDGE, "ns", "p", 41), id="its-job-was-shrunk-under-it"),
    ],
)
def test_a_job_that_waited_goes_on_waiting_while_a_bridges_handoff_drain_stays_on_its_node(
    prolog: Prolog, reason: str
) -> None:
    """The handoff loop deletes a hold and then lifts its drain (and a hold can end by its EndTime while
    the pod still runs): the drain says a pod still runs there, so a job that waited for the hold
    waits for the drain too. Before, a read between the two found no reason; the job's configuration
    ended as the node stopped answering, and slurmctld requeued it as lost (CI, 2026-12-03)."""
    prolog.write("res", WHOLE_NODE_HOLD)
    prolog.node("n1", alloc=2, tot=2, state="MIXED+DRAIN", reason=reason)
    prolog.later(0.6, lambda: prolog.write("res", ""))  # the hold goes; the drain stays
    prolog.later(1.8, lambda: prolog.node("n1", alloc=2, tot=2, state="MIXED+NOT_RESPONDING"))  # the drain lifted
    prolog.later(2.6, lambda: prolog.node("n1", alloc=2, tot=2))  # the ping's answer
    done, took = prolog.timed()
    assert done.returncode == 0 and took >= 2.5, (
        f"it went on {took:.2f}s after the start; the hold went at 0.6s, the drain at 1.8s, the answer came "
        f"at 2.6s: {done}"
    )


def test_the_drain_of_a_listed_bridge_at_the_limits_holds_a_job_that_waited(prolog: Prolog) -> None:
    """The second of two listed bridges, its id a 63-character DNS label, drains for a pod with a
    253-character name in a 63-character namespace: its drain holds the job like the first's."""
    longest = "b" * 62 + "1"
    prolog.configure(bridges=f"{BRIDGE},{longest}")
    prolog.write("res", res_line(f"handoff-41_{longest}_n1", "n1", cpus=2, flags="IGNORE_JOBS,SPEC_NODES"))
    reason = drain_reason(longest, "n" * 63, "p" * 253, 41, grace=30, margin=10)
    prolog.node("n1", alloc=2, tot=2, state="MIXED+DRAIN", reason=reason)
    prolog.later(0.6, lambda: prolog.write("res", ""))  # the hold goes; the drain stays
    prolog.later(1.8, lambda: prolog.node("n1", alloc=2, tot=2))  # the drain lifted, the node answering
    done, took = prolog.timed()
    assert done.returncode == 0 and took >= 1.7, (
        f"it went on {took:.2f}s after the start; the hold went at 0.6s, the drain at 1.8s: {done}"
    )


@pytest.mark.parametrize(
    "state,reason",
    [
        pytest.param("MIXED+DRAIN", "maintenance [admin]", id="an-administrators-drain"),
        pytest.param(
            "MIXED+DRAIN",
            drain_reason("other-bridge", "ns", "p", 41, grace=30, margin=10),
            id="an-unlisted-bridges-drain",
        ),
        pytest.param("MIXED", HANDOFF_DRAIN, id="a-reason-left-without-the-drain"),
        pytest.param("MIXED+DRAIN", f"e2e {drain_prefix(BRIDGE)} x", id="the-prefix-not-at-the-start"),
    ],
)
def test_a_job_that_waited_is_not_held_by_a_drain_that_is_not_a_listed_bridges_handoff(
    prolog: Prolog, state: str, reason: str
) -> None:
    """A node an administrator drained stays allocated to the job (Slurm launches on it): waiting for
    such a drain would hold the job until the prolog's bound and then requeue it."""
    prolog.write("res", WHOLE_NODE_HOLD)
    prolog.node("n1", alloc=2, tot=2, state=state, reason=reason)
    prolog.later(0.6, lambda: prolog.write("res", ""))
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 2.0, f"it went on {took:.2f}s after the start; the hold went at 0.6s: {done}"


def test_a_job_that_did_not_wait_starts_on_a_node_not_answering_yet(prolog: Prolog) -> None:
    """Only a held job is at risk (given its node long ago): any other start reads no node."""
    prolog.node("n1", alloc=2, tot=2, state="IDLE+NOT_RESPONDING")
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 2, f"{done} after {took:.2f}s"
    assert not any(c.startswith("scontrol show node") for c in prolog.calls), prolog.calls


def test_a_failed_read_is_a_reason_to_wait(prolog: Prolog) -> None:
    prolog.noted(41)
    (prolog.fake / "squeue.fail").touch()
    prolog.later(1.2, lambda: (prolog.fake / "squeue.fail").unlink())
    done, took = prolog.timed()
    assert done.returncode == 0 and took >= 1, f"{done} after {took:.2f}s"


def test_the_wait_is_bounded_and_then_the_prolog_fails_naming_why(prolog: Prolog) -> None:
    prolog.configure("PROLOG_WAIT_SECONDS=1")
    prolog.write("res", WHOLE_NODE_HOLD)
    done, took = prolog.timed()
    assert done.returncode == 1, done
    assert 1 <= took < 5, f"{took:.2f}s"
    assert f"job {JOB} waited 1s" in done.stderr and "node n1: 2 CPUs allocated and 2 held" in done.stderr, done.stderr


# ---- who never waits ---------------------------------------------------------------------------------
def test_an_external_job_never_waits(prolog: Prolog) -> None:
    """A bridge's job launches nothing on the node (and Kubernetes keeps its pod off the stopping
    pod's resources); waiting, or failing, would only end it."""
    prolog.configure("PROLOG_WAIT_SECONDS=1")
    prolog.write("job.json", job_json("JOB_WAS_RUNNING", "EXTERNAL_JOB"))
    prolog.write("res", res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=2, flags="IGNORE_JOBS"))
    done, took = prolog.timed()
    assert done.returncode == 0 and took < 1, f"{done} after {took:.2f}s"
    assert any("--json show job 50" in c for c in prolog.calls), prolog.calls


def test_external_in_a_users_strings_is_not_external(prolog: Prolog) -> None:
    """The job's name and comment are its user's: "EXTERNAL_JOB" there is not the job's flag."""
    prolog.configure("PROLOG_WAIT_SECONDS=1")
    prolog.write("job.json", job_json("JOB_WAS_RUNNING", name='x",\n        "EXTERNAL_JOB'))
    prolog.write("res", res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=2, flags="IGNORE_JOBS"))
    assert prolog.run().returncode == 1


def test_a_refused_configuration_lets_every_job_start(prolog: Prolog) -> None:
    """Then no epilog holds anything either: waiting would only stop native work."""
    prolog.write_conf("BRIDGE_IDS=\n")
    prolog.write("res", res_line(f"handoff-41_{BRIDGE}_n1", "n1", cpus=2, flags="IGNORE_JOBS"))
    done = prolog.run()
    assert done.returncode == 0 and "BRIDGE_IDS is empty" in done.stderr and prolog.reads() == [], done


# ---- the notify hook -------------------------------------------------------------------------------------
def test_the_notify_hook_runs_first_with_the_jobs_environment(prolog: Prolog) -> None:
    prolog.configure(f"NOTIFY={prolog.fake}/notify")
    prolog.noted(41, state="COMPLETED", ended_ago=1)
    prolog.later(1.2, lambda: (prolog.state / "41.done").touch())
    assert prolog.run().returncode == 0
    assert (prolog.fake / "notified").read_text().splitlines() == [f"prolog_slurmctld {JOB}"]


def test_on_no_guarded_node_the_notify_hook_is_all_that_runs(prolog: Prolog) -> None:
    """The front found no guarded node: bash runs NOTIFY (after checking the file) and nothing else,
    not even the expansion of the job's node list."""
    prolog.configure(f"NOTIFY={prolog.fake}/notify", "NODES=h[1-2]")
    done = prolog.run("n[1-2]")
    assert done.returncode == 0, done
    assert (prolog.fake / "notified").read_text().splitlines() == [f"prolog_slurmctld {JOB}"]
    assert prolog.calls == [], "no Slurm call, no hostnames"
    assert list(prolog.state.iterdir()) == [], "no note"


@pytest.mark.parametrize(
    ("comment", "told"),
    [
        (notice_comment(names.NOTIFY_ENDED), False),  # allocated inside the bridge's call
        (notice_comment(names.NOTIFY_NONE), False),
        ('a user\'s own "notify":"ended"', True),  # not the bridge's form: the hook decides
        ("", True),
    ],
)
def test_a_start_the_bridge_asked_not_to_be_told_of_runs_no_notify_hook(
    prolog: Prolog, comment: str, told: bool
) -> None:
    """The job's comment says the bridge needs no start notice: the prolog does not run the hook
    (two processes fewer a job) and still does its checks."""
    prolog.configure(f"NOTIFY={prolog.fake}/notify")
    assert prolog.run(comment=comment).returncode == 0
    assert (prolog.fake / "notified").exists() == told
    assert prolog.reads(), "the prolog still did its checks"


def test_the_notify_hook_is_run_only_from_a_configuration_file_that_passed_its_check(prolog: Prolog) -> None:
    """NOTIFY comes from the file: a file others may write names no program that runs."""
    prolog.configure(f"NOTIFY={prolog.fake}/notify")
    os.chmod(prolog.conf, 0o664)
    done = prolog.run()
    assert done.returncode == 0 and "writable by group or others" in done.stderr
    assert not (prolog.fake / "notified").exists() and prolog.reads() == []


def test_a_notify_hook_that_others_may_write_is_not_run_and_holds_go_on(prolog: Prolog) -> None:
    os.chmod(prolog.fake / "notify", 0o777)
    prolog.configure(f"NOTIFY={prolog.fake}/notify")
    assert prolog.run().returncode == 0
    assert not (prolog.fake / "notified").exists()
    assert prolog.reads(), "the prolog still did its checks"


# ---- the epilog's done marker ----------------------------------------------------------------------------
def test_the_epilog_notes_each_job_done_once_it_decided(prolog: Prolog) -> None:
    (prolog.fake / "scontrol").write_text(EPILOG_SCONTROL)
    done = prolog.run(context="epilog_slurmctld")
    assert done.returncode == 0 and (prolog.state / f"{JOB}.done").exists(), done


def test_a_state_directory_others_may_write_is_not_used(prolog: Prolog) -> None:
    os.chmod(prolog.state, 0o777)
    (prolog.fake / "scontrol").write_text(EPILOG_SCONTROL)
    assert prolog.run(context="epilog_slurmctld").returncode == 0
    assert not (prolog.state / f"{JOB}.done").exists()
