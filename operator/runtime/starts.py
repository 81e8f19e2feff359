"""When each Slurm job passed the steps of its start, for the benchmark's breakdown (issue 31).

The steps: ``submit_sent`` and ``submitted`` (the submit call, with ``path``: ``allocate`` or
``queue``), ``hint_started`` (slurmctld's hook said it started), ``signed_start`` (that notice was
signed and said where: taken as the read), ``running_read`` (the operator's view had it RUNNING
with its nodes), ``released`` (its pods' release written) and ``status_running``
(the PlaceholderJob's Running status written); and ``hint_ended``, the hook said it ended (a
job the bridge ends itself is not told of: tests/e2e/test_costs.py checks both notices per job).
Wall-clock seconds (``time.time()``), so that
``bench/pipeline_latency.py`` can line them up with slurmctld's log and its own pod watch. Only
the first time of each step is kept, for the last MAX_JOBS jobs: a dict write per step, always on.
Served by the operator at ``/stats/starts``.
"""

from __future__ import annotations

import time
from collections import OrderedDict

MAX_JOBS = 20_000
_jobs: OrderedDict[int, dict[str, float | str]] = OrderedDict()


def mark(job_id: int, step: str, at: float | None = None) -> None:
    """Record ``step`` of ``job_id`` now (or ``at``), unless it was recorded before."""
    steps = _jobs.get(job_id)
    if steps is None:
        steps = _jobs[job_id] = {}
        if len(_jobs) > MAX_JOBS:
            _jobs.popitem(last=False)
    steps.setdefault(step, time.time() if at is None else at)


def note(job_id: int, key: str, value: str) -> None:
    """Record a fact about the job's start (how it was placed), unless recorded before."""
    steps = _jobs.get(job_id)
    if steps is not None:
        steps.setdefault(key, value)


def since(t: float) -> dict[int, dict[str, float | str]]:
    """Every job recorded whose first step came at ``t`` or later (wall clock)."""
    out: dict[int, dict[str, float | str]] = {}
    for job_id, steps in _jobs.items():
        first = min((v for v in steps.values() if isinstance(v, float)), default=0.0)
        if first >= t:
            out[job_id] = dict(steps)
    return out
