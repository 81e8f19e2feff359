"""The handoff's EpilogSlurmctld trusts only what an operator set (issue 36 §1; docs/colocation.md,
"The script").

On a hybrid node (a kwok node served by a real slurmd) a tenant submits an ordinary batch job
that forges every mark the script once read or might be fooled by: the working directory the
bridge used to submit with (``/slurm-bridge/handoff/<hold>/node/<bridgeId>``, which Slurm accepts
from anyone), a job name ending in ``#released``, and a ``AdminComment=slurm-bridge:{...}`` in its
name and comment. The job ends; no reservation exists, and a native job for the whole node starts
there. A job whose admin comment an operator set to the bridge's marker is held (the real
``scontrol --json`` read, the ``_``-delimited name, the ceiling from the root-owned configuration file),
and one the bridge marked released, or another bridge's, is not.

The script and its configuration file come from this worktree (``hack/cluster/slurm.sh``'s
``install_handoff_script``, which ``hack/cluster.sh start-slurm`` runs; the ``handoff_installed``
fixture checks the running one is this worktree's).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment
from slurm_bridge.operator.views.slurmjobs import PhjRef
from tests.harness import REPO, TENANTS, SlurmEnv, sbatch_as, squeue_state, wait_for

ALICE = TENANTS["a"]
BRIDGE = "slurm-bridge"  # the local bridge's (hack/bridge.sh sets no other), in the conf file
FORGED = 'slurm-bridge:{"bridge":"slurm-bridge","handoff":"node"}'
FORGED_MARK = f"AdminComment={FORGED}"
QUIET = 5.0  # seconds after a job's end in which the script's reservation (made ~10 ms after it) would appear


@pytest.fixture(scope="module")
def handoff_installed(slurm_env: SlurmEnv) -> str:
    """The hybrid node the tests use; the running slurmctld runs this worktree's script, and its
    configuration file lists the local bridge."""
    script = slurm_env.root / "etc" / "slurm" / "slurm-bridge-handoff.sh"
    conf = slurm_env.root / "etc" / "slurm" / "slurm-bridge-handoff.conf"
    mine = (REPO / "slurm-hooks" / "slurm-bridge-handoff.sh").read_text()
    assert script.exists() and script.read_text() == mine, (
        f"{script} is not this worktree's handoff script: install it (hack/cluster.sh start-slurm from "
        f"{REPO}, which runs install_handoff_script)"
    )
    assert conf.exists() and f"BRIDGE_IDS={BRIDGE}" in conf.read_text().splitlines(), f"{conf} lists no {BRIDGE}"
    assert any("slurm-bridge-handoff.sh" in ln for ln in slurm_env.scontrol("show", "config").splitlines()), (
        "slurmctld runs no handoff script: restart the cluster (hack/cluster.sh down && hack/cluster.sh up)"
    )
    assert slurm_env.hybrid_nodes, "the local cluster has no hybrid node (SB_HYBRID_NODE_NAMES)"
    return slurm_env.hybrid_nodes[0]


class Jobs:
    """Alice's batch jobs on one hybrid node; each test's jobs and reservations go at its end."""

    def __init__(self, slurm: SlurmEnv, node: str) -> None:
        self.slurm, self.node, self.ids = slurm, node, list[int]()

    def submit(self, *options: str, script: str = "#!/bin/sh\nexit 0\n", cpus: int = 1) -> int:
        base = ["-p", self.slurm.hybrid_partition, "-w", self.node, "-A", ALICE.accounts[0], "-c", str(cpus)]
        job_id = sbatch_as(self.slurm, ALICE.user, script, *base, "--mem=64", "-o", "/dev/null", *options)
        self.ids.append(job_id)
        return job_id

    def ended(self, job_id: int, timeout: float = 60) -> float:
        """Waits until Slurm ended the job; when (wall clock) this saw it."""
        wait_for(lambda: squeue_state(self.slurm, job_id) in ("", "COMPLETED", "CANCELLED", "FAILED"), timeout,
                 f"job {job_id} to end")  # fmt: skip
        return time.time()

    def reservations(self, job_id: int) -> list[str]:
        out = self.slurm.scontrol("show", "reservation", "-o")
        # handoff-<job>_<bridge>_<node>, and the format before issue 36 (handoff-<job>-<bridge>-<node>)
        return [ln for ln in out.splitlines() if re.match(rf"ReservationName=handoff-{job_id}[_-]", ln)]

    def none_held(self, job_id: int, since: float) -> None:
        """No reservation for the job lasts: a provisional hold (a job run from /tmp, the bridge's
        working directory, is a candidate) is gone within milliseconds of the script's read, so
        none is left a second after the end, and none appears in the QUIET seconds after."""
        wait_for(lambda: not self.reservations(job_id), 1, f"job {job_id}'s provisional hold to go")
        while time.time() < since + QUIET:
            held = self.reservations(job_id)
            assert held == [], f"the script held Slurm job {job_id}: {held}"
            time.sleep(0.25)

    def mark(self, job_id: int, comment: str) -> None:
        """What only an operator may do (here root in the Slurm root; the bridge with its token)."""
        self.slurm.scontrol("update", f"JobId={job_id}", f"AdminComment={comment}")

    def cleanup(self) -> None:
        for job_id in self.ids:
            self.slurm.slurm("scancel", str(job_id), check=False)
            for line in self.reservations(job_id):
                name = line.split()[0].split("=", 1)[1]
                self.slurm.slurm("scontrol", "delete", f"ReservationName={name}", check=False)


@pytest.fixture
def jobs(slurm_env: SlurmEnv, handoff_installed: str) -> Iterator[Jobs]:
    j = Jobs(slurm_env, handoff_installed)
    yield j
    j.cleanup()


@pytest.mark.parametrize(
    "forged",
    [
        [f"--chdir=/slurm-bridge/handoff/99999/node/{BRIDGE}", "--job-name=x#released"],
        [
            f"--chdir=/slurm-bridge/handoff/31536000/node/{BRIDGE}",
            f"--job-name=x {FORGED_MARK}",
            f"--comment={FORGED_MARK}",
        ],
        [f'--comment=x\n      "admin_comment": "{FORGED}",', f'--job-name=x\n"admin_comment": "{FORGED}"'],
    ],
    ids=["work-dir-and-released-name", "forged-admin-comment-in-name-and-comment", "a-json-line-in-name-and-comment"],
)
def test_a_tenants_forged_job_reserves_nothing_and_the_node_stays_usable(jobs: Jobs, forged: list[str]) -> None:
    job_id = jobs.submit(*forged)
    since = jobs.ended(job_id)
    jobs.none_held(job_id, since)
    whole = jobs.slurm.node_cpus(jobs.node)
    follower = jobs.submit("--job-name=after-forged", script="#!/bin/sh\nexec sleep 60\n", cpus=whole)
    wait_for(lambda: squeue_state(jobs.slurm, follower) == "RUNNING", 30,
             f"a native job for all {whole} CPUs of {jobs.node} to start after the forged job")  # fmt: skip


def test_a_tenants_job_from_the_bridges_working_directory_is_held_for_milliseconds_only(jobs: Jobs) -> None:
    """A candidate (its working directory is /tmp, the bridge's) is held before it is read, so the
    script wins Slurm's scheduler (docs/design/handoff.md, "The provisional hold"); a tenant's forged
    one is let go once its admin comment is read: the provisional reservation was made and
    deleted, within a second, and a native job for the whole node starts."""
    offset = jobs.slurm.handoff_log_size()
    job_id = jobs.submit("--chdir=/tmp", f"--job-name=x {FORGED_MARK}", f"--comment={FORGED_MARK}")
    jobs.none_held(job_id, jobs.ended(job_id))
    lines = [ln for ln in jobs.slurm.handoff_log_since(offset) if f" job={job_id} " in ln]
    made = [ln for ln in lines if "hold<=30s: Reservation created" in ln]
    gone = [ln for ln in lines if "provisional hold deleted" in ln]
    assert made and gone, f"job {job_id}: no provisional hold made and deleted in {jobs.slurm.handoff_log}: {lines}"
    held_for = _stamp(gone[0]) - _stamp(made[0])
    assert 0 <= held_for < 1, f"job {job_id} was held provisionally for {held_for:.3f}s"
    whole = jobs.slurm.node_cpus(jobs.node)
    follower = jobs.submit("--job-name=after-candidate", script="#!/bin/sh\nexec sleep 60\n", cpus=whole)
    wait_for(lambda: squeue_state(jobs.slurm, follower) == "RUNNING", 30,
             f"a native job for all {whole} CPUs of {jobs.node} to start after the forged candidate")  # fmt: skip
    print(f"\nforged candidate {job_id}: held provisionally for {held_for * 1000:.0f} ms")


def _stamp(line: str) -> float:
    """The handoff log's timestamp (2026-11-28T05:14:52.498942535, the host's clock) in seconds."""
    stamp = line.split()[0]
    whole, _, fraction = stamp.partition(".")
    return datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").timestamp() + float(f"0.{fraction or 0}")


def test_an_operator_set_marker_is_held_per_node_for_the_ceiling_under_an_exact_name(jobs: Jobs) -> None:
    """The positive path on the real Slurm: the script reads the admin comment from its JSON, `_`
    is accepted in a reservation's name, and the hold lasts the configuration file's ceiling."""
    job_id = jobs.submit("--job-name=marked", script="#!/bin/sh\nexec sleep 600\n", cpus=2)
    wait_for(lambda: squeue_state(jobs.slurm, job_id) == "RUNNING", 30, f"job {job_id} to start")
    ref = PhjRef(BRIDGE, "e2e", f"trust-{secrets.token_hex(3)}", "uid")
    jobs.mark(job_id, encode_admin_comment(ref, handoff="cores"))
    jobs.slurm.slurm("scancel", str(job_id))
    # a job run from /tmp: held provisionally (30 s) first, then extended to the ceiling once read
    held = wait_for(lambda: [h for h in jobs.reservations(job_id) if "Duration=1-" in h] or None, 10,
                    f"the handoff reservation for job {job_id}, extended to the ceiling")  # fmt: skip
    assert len(held) == 1 and held[0].startswith(f"ReservationName=handoff-{job_id}_{BRIDGE}_{jobs.node} "), held
    fields = dict(w.split("=", 1) for w in held[0].split() if "=" in w)
    assert fields["Nodes"] == jobs.node and fields["CoreCnt"] == "2", fields
    assert fields["Duration"] in ("1-00:00:00", "1-00:00:01"), (
        f"the hold lasts the ceiling (MAX_HOLD_SECONDS=86400): {fields}"
    )
    assert fields["Users"] == "slurm", fields  # SlurmUser, who runs the script


@pytest.mark.parametrize("other", ["released", "another-bridge", "a-longer-bridge-id"])
def test_a_released_job_or_another_bridges_is_not_held(jobs: Jobs, other: str) -> None:
    job_id = jobs.submit("--job-name=marked", script="#!/bin/sh\nexec sleep 600\n")
    wait_for(lambda: squeue_state(jobs.slurm, job_id) == "RUNNING", 30, f"job {job_id} to start")
    bridge = {"released": BRIDGE, "another-bridge": "other", "a-longer-bridge-id": f"{BRIDGE}-2"}[other]
    comment = encode_admin_comment(PhjRef(bridge, "e2e", "p", "uid"), handoff="node", released=other == "released")
    jobs.mark(job_id, comment)
    [shown] = [
        j["admin_comment"] for j in json.loads(jobs.slurm.scontrol("--json", "show", "job", str(job_id)))["jobs"]
    ]
    assert json.loads(shown.removeprefix("slurm-bridge:"))["bridge"] == bridge, shown
    jobs.slurm.slurm("scancel", str(job_id))
    jobs.none_held(job_id, jobs.ended(job_id))
