"""The handoff's PrologSlurmctld on the real Slurm: a native batch job it held starts when the hold
and the bridge's drain of its node are lifted (docs/design/handoff.md, "The prolog").

Slurm 26.05 marks a node whose drain is lifted NOT_RESPONDING and pings it again (its answer comes
at slurmctld's next whole second). A batch job whose configuration ends meanwhile is not launched
until the node answers, and that answer, listing no such job on a node given to it more than
BatchStartTimeout + MessageTimeout (10 s + 10 s here) ago, makes slurmctld requeue it as lost:
"missing from batch node", then ``BeginTime`` for minutes (seen in CI, 2026-11-30: the operator
away test of tests/e2e/test_handoff_failsafe.py). The handoff loop lifts its drain as it deletes the
reservation, so the prolog lets a job it held go only once no bridge's drain is on its nodes and
they answer.

The test holds a tenant's job the way the handoff does, on a hybrid node (a real slurmd): a job
that ended there a moment ago has no epilog's done marker yet (removed, its prolog's note put
back), so the next job, for the whole node, waits in CONFIGURING; then the "epilog" holds the
node (a whole-node ``handoff-*`` reservation, made as the script makes it) and notes its
decision, and the node gets the handoff loop's drain (its reason names the bridge: a pod outlived
its hold). Once the held job's allocation is older than Slurm's limit, the loop's end of the hold
follows: the reservation is deleted, and the drain is lifted just after a whole second (the longest
time before slurmctld's ping), at once or a second later. While that drain stays, the job stays
held (a read between the two found no reason before, and the job was requeued: CI, 2026-12-03).
The job must run, never requeued.
"""

from __future__ import annotations

import time

import pytest

from slurm_bridge.rules.handoff import drain_reason
from tests.e2e.test_handoff_trust import BRIDGE, Jobs, handoff_installed, jobs
from tests.e2e.util import job_fields
from tests.harness import squeue_state, wait_for

__all__ = ["handoff_installed", "jobs"]  # the fixtures, used by name
LOST_AFTER = 10 + 10 + 2  # BatchStartTimeout + MessageTimeout of the local slurm.conf, and a margin


@pytest.mark.parametrize("apart", [0.0, 1.0], ids=["together", "the-drain-a-second-later"])
def test_a_held_job_runs_when_its_hold_and_its_nodes_drain_are_lifted(jobs: Jobs, apart: float) -> None:
    slurm, node = jobs.slurm, jobs.node
    ended = jobs.submit("--job-name=ended-first")
    jobs.ended(ended)
    marker = slurm.root / "var" / "spool" / "slurm-bridge" / f"{ended}.done"
    wait_for(marker.exists, 10, f"job {ended}'s epilog to note its handoff decided ({marker})")
    # as when the epilog has not run yet: the prolog's note that the job ran on the node is there
    # (the epilog removes it) and no done marker: a job starting on the node waits for it
    (marker.parent / f"{node}@{ended}.run").touch()
    marker.unlink()
    held = jobs.submit("--job-name=held", script="#!/bin/sh\nexec sleep 300\n", cpus=slurm.node_cpus(node))
    wait_for(lambda: squeue_state(slurm, held) == "CONFIGURING", 20, f"job {held} held in CONFIGURING by the prolog")
    given = time.time()
    hold = f"handoff-{ended}_{BRIDGE}_{node}"  # what the epilog makes for a bridge job's end
    slurm.scontrol("create", "reservation", f"ReservationName={hold}", f"Nodes={node}", "Flags=IGNORE_JOBS",
                   "StartTime=now", "EndTime=now+600seconds", "Users=slurm")  # fmt: skip
    marker.touch()  # the epilog decided: the job now waits for the hold
    # the handoff loop's drain of a node whose pod outlived its hold (its reason, as the loop writes it)
    reason = drain_reason(BRIDGE, "e2e", "handoff-pod", ended, grace=20, margin=10)
    slurm.scontrol("update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
    try:
        # the drain goes just after a whole second (the longest time before slurmctld's ping)
        wait_for(lambda: time.time() - given > LOST_AFTER and (time.time() - apart) % 1 < 0.2, LOST_AFTER + 5,
                 f"job {held}'s allocation older than {LOST_AFTER}s, {apart}s before a whole second",
                 interval=0.02)  # fmt: skip
        assert squeue_state(slurm, held) == "CONFIGURING", f"job {held} was not held until now"
        slurm.scontrol("delete", f"ReservationName={hold}")  # the handoff loop's end of a hold
        until = time.time() + apart  # the job stays held while the drain stays (the prolog polls every 0.5 s)
        while time.time() < until:
            assert squeue_state(slurm, held) == "CONFIGURING", (
                f"job {held} went on when its hold went while the bridge's drain of {node} stayed (a pod still runs)"
            )
            time.sleep(0.1)
    finally:  # the hold, if still there, goes with the test's jobs (Jobs.cleanup)
        slurm.scontrol("update", f"NodeName={node}", "State=UNDRAIN")
    lifted = time.time()
    wait_for(lambda: squeue_state(slurm, held) != "CONFIGURING", 30, f"job {held}'s configuration to end")
    wait_for(lambda: time.time() - lifted > 3, 5, "slurmctld's ping of the node and its answer")
    fields = job_fields(slurm, held)
    state, restarts = fields.get("JobState"), fields.get("Restarts")
    assert (state, restarts) == ("RUNNING", "0"), (
        f"job {held} is {state} after {restarts} restart(s), reason {fields.get('Reason')}: "
        f"slurmctld requeued it as lost (its log: 'Batch JobId={held} missing from batch node {node}')"
    )
