"""A job's release waits for the containers of its vanished member pods (pure; docs/design/handoff.md,
"A pod that vanishes").

A member whose object is gone stopped only if it was seen in a terminal phase first (a kubelet,
and the local cluster's kwok stages, report Succeeded or Failed before they remove the object).
One removed while it was not terminal -- ``kubectl delete --force --grace-period=0``, PodGC, a
deleted Node -- *vanished*: its kubelet may still give its containers their grace period. So a
plan that would cancel a job holding cores (running, not pending) while a member vanished is held
back: the job keeps exactly its cores, with no Slurm call, until the time the member was noticed
gone plus its grace period and the handoff's margin; then the same plan cancels it (marked
released: the script holds nothing). A member gone that the shell knows nothing of (it went while
the operator was away) is taken to run until now plus ``handoff.maxGracePeriodSeconds`` and the
margin: fail safe. The times are recorded on the PlaceholderJob (``ANN_VANISHED_PODS``), so a
restart keeps them.

The hold applies where native work may run: a node with a slurmd (not Slurm state EXTERNAL), or
one whose state is not known. On an EXTERNAL node nothing native starts, and Kubernetes' own
scheduler frees a force-deleted pod's requests at once whatever the bridge holds; the shell passes
such a member as stopped (``sync.phjsync.departed_of``), so a forced delete there releases as
before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.decisions.inputs import Clock, Handoff, Members
from slurm_bridge.operator.placeholderjobs.decisions.plan import Cancel, Event, Finalize, Plan, RecordVanished
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide

# What the shell knows of a member that is gone: member name -> the time its containers have
# stopped at the latest (from the pod's departure: noticed + grace + margin), None when they had
# stopped (it was seen Succeeded or Failed, or never bound). A member not in it is unknown.
Departed = Mapping[str, datetime | None]


def recorded(phj: PlaceholderJob) -> dict[str, datetime]:
    """The vanished members the PlaceholderJob records (an unreadable record counts as none: its
    members are then unknown, and held as such)."""
    raw = (phj.metadata.annotations or {}).get(names.ANN_VANISHED_PODS)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): datetime.fromisoformat(str(v)) for k, v in data.items()} if isinstance(data, dict) else {}
    except ValueError:
        return {}


def record_value(until: Mapping[str, datetime]) -> str:
    """The annotation's value for these members' times."""
    return json.dumps({k: v.isoformat() for k, v in sorted(until.items())}, separators=(",", ":"))


def holds_cores(slurm: SlurmSide) -> bool:
    """Whether the job (or a component) holds an allocation: started and not finished."""
    parts = [j for j in (slurm.found, slurm.job, *slurm.components) if j is not None]
    return any(not j.is_pending and not j.is_finished for j in parts)


def hold_release(
    plan: Plan,
    phj: PlaceholderJob,
    slurm: SlurmSide,
    seen: Members,
    departed: Departed,
    handoff: Handoff,
    now: Clock,
) -> Plan:
    """``plan``, or, when it cancels a job that holds cores while a member that vanished may still
    run, the plan without the cancel (and without the finalize and its Event), the members'
    times recorded, and a re-queue at the latest of them. ``seen``: the members as last read."""
    if not any(isinstance(a, Cancel) for a in plan.actions) or not holds_cores(slurm):
        return plan
    missing = [n for n, p in seen.items() if p is None]
    if not missing:
        return plan
    known = recorded(phj)
    until = dict(known)
    for name in missing:
        if name in known:
            continue
        # not seen going (it went while the operator was away): the longest grace from now
        unseen = now.wall + timedelta(seconds=handoff.max_grace + handoff.margin)
        at = departed.get(name, unseen)
        if at is not None and at > now.wall:
            until[name] = at
    latest = max((until[n] for n in missing if n in until), default=None)
    if latest is None or latest <= now.wall:
        return plan
    kept = tuple(
        a
        for a in plan.actions
        if not isinstance(a, Cancel | Finalize) and not (isinstance(a, Event) and a.reason == names.REASON_CANCELLED)
    )
    fresh = sorted(n for n in until if n not in known)
    record: tuple[RecordVanished, ...] = ()
    if fresh:
        job = f"Slurm job {slurm.job_id}" if slurm.job_id is not None else "its Slurm job"
        record = (RecordVanished(tuple(sorted(until.items())), _message(fresh, until, job)),)
    wait = (latest - now.wall).total_seconds()
    requeue = wait if plan.requeue is None else min(plan.requeue, wait)
    return Plan((*record, *kept), requeue, plan.held)


def _message(fresh: list[str], until: Mapping[str, datetime], job: str) -> str:
    times = ", ".join(f"{n} until {until[n].isoformat(timespec='seconds')}" for n in fresh)
    return (
        f"member pods vanished before their containers were seen to stop (a forced delete, PodGC or a "
        f"deleted Node): {job} keeps its CPUs while they may still run ({times}; their grace period "
        "and the handoff margin)"
    )
