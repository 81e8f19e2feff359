"""The handoff's PrologSlurmctld on the real Slurm: a native batch job it held starts when the hold
and a drain of its node are lifted together (docs/design/handoff.md, "The prolog").

Slurm 26.05 marks a node whose drain is lifted NOT_RESPONDING and pings it again (its answer comes
at slurmctld's next whole second). A batch job whose configuration ends meanwhile is not launched
until the node answers, and that answer, listing no such job on a node given to it more than
BatchStartTimeout + MessageTimeout (10 s + 10 s here) ago, makes slurmctld requeue it as lost:
"missing from batch node", then ``BeginTime`` for minutes (seen in CI, 2026-11-30: the operator
away test of tests/e2e/test_handoff_failsafe.py). The handoff loop lifts its drain as it deletes the
reservation, so the prolog lets a job it held go only once its nodes answer.

The test holds a tenant's job the way the handoff does, on a hybrid node (a real slurmd): a job
that ended there a moment ago has no epilog's done marker yet (removed, its prolog's note put
back), so the next job, for the whole node, waits in CONFIGURING; then the "epilog" holds the
node (a whole-node ``handoff-*`` reservation, made as the script makes it) and notes its
decision, and the node is drained. Once the held job's allocation is older than Slurm's limit,
the reservation and the drain go at the same moment, just after a whole second (the longest time
before slurmctld's ping), as the handoff loop lifts them. The job must run, never requeued.
"""

from __future__ import annotations

import time

from tests.e2e.test_handoff_trust import BRIDGE, Jobs, handoff_installed, jobs
from tests.e2e.util import job_fields
from tests.harness import squeue_state, wait_for

__all__ = ["handoff_installed", "jobs"]  # the fixtures, used by name
LOST_AFTER = 10 + 10 + 2  # BatchStartTimeout + MessageTimeout of the local slurm.conf, and a margin


def test_a_held_job_runs_when_its_hold_and_its_nodes_drain_are_lifted_together(jobs: Jobs) -> None:
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
    try:
        slurm.scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=e2e: the handoff's drain")
        wait_for(lambda: time.time() - given > LOST_AFTER and time.time() % 1 < 0.2, LOST_AFTER + 5,
                 f"job {held}'s allocation older than {LOST_AFTER}s, just after a whole second",
                 interval=0.02)  # fmt: skip
        assert squeue_state(slurm, held) == "CONFIGURING", f"job {held} was not held until now"
    finally:  # the handoff loop's end of a hold: the reservation and the drain go together
        slurm.scontrol("delete", f"ReservationName={hold}")
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
