"""Where each bridge pod's start goes (issue 31): its steps, lined up on one wall clock.

For each pod of a run: created (the benchmark's create call returned), ``submit_sent`` and
``submitted`` (the operator's submit call, and whether Slurm allocated at once or queued it),
Slurm's start (slurmctld's log, to the millisecond), ``hint_started`` (slurmctld's hook told the
operator), ``signed_start`` (the hook's notice was signed and said the job's nodes: the operator
took it as the read), ``running_read`` (the operator's view had the job RUNNING with its nodes: by
a signed notice, the hint's read, a poll, or the read after the submit), ``released`` (the
operator's release of the pod was written), the gate's removal and the bind as the benchmark's
pod watch saw them, and ``status_running`` (the PlaceholderJob's Running status written). The operator's steps come from
its ``/stats/starts`` (operator/runtime/starts.py).

Slurm's start, from slurmctld's log (its times are milliseconds, local time): ``sched: Allocate
JobId=N`` (the main scheduler) and ``_slurm_rpc_allocate_resources JobId=N`` (an immediate
allocation); the backfill scheduler logs no start with its job id (Slurm 26.05, even with
``DebugFlags=Backfill``), so for those the end of the PrologSlurmctld (``Configuration for JobId=N
is complete``: the hook of docs/configuration.md runs 3 - 5 ms), and failing that Slurm's own
``start_time`` (whole seconds: marked "start_time (s)", and up to a second early).
"""

from __future__ import annotations

import json
import re
import statistics
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

_TIME = r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] "
_STARTED = re.compile(_TIME + r"sched: (?:Allocate|_slurm_rpc_allocate_resources) JobId=(\d+)")
_PROLOG_DONE = re.compile(_TIME + r"prolog_running_decr: Configuration for JobId=(\d+) is complete")


def _wall(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").timestamp()  # slurmctld logs local time


class SlurmctldLog:
    """The part of slurmctld's log written since this was made: when each job started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def starts(self) -> dict[int, tuple[float, str]]:
        """Job id -> (wall-clock start, how it is known)."""
        found: dict[int, tuple[float, str]] = {}
        with self.path.open(errors="replace") as f:
            f.seek(self.offset)
            for line in f:
                if m := _STARTED.match(line):
                    found.setdefault(int(m[2]), (_wall(m[1]), "log"))
                elif m := _PROLOG_DONE.match(line):
                    found.setdefault(int(m[2]), (_wall(m[1]), "prolog end"))
        return found


def slurm_start_times(url: str, token_file: str, job_ids: list[int]) -> dict[int, tuple[float, str]]:
    """Slurm's ``start_time`` of each job (whole seconds), read after the run (by the benchmark,
    not the bridge: not in its Slurm calls). Jobs Slurm no longer has are left out."""
    token = Path(token_file).read_text().strip().removeprefix("SLURM_JWT=")
    out: dict[int, tuple[float, str]] = {}
    for job_id in job_ids:
        req = urllib.request.Request(f"{url}/slurm/v0.0.44/job/{job_id}", headers={"X-SLURM-USER-TOKEN": token})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                jobs = json.load(r).get("jobs") or []
        except OSError:
            continue
        start = (jobs[0].get("start_time") or {}).get("number") if jobs else None
        if isinstance(start, int) and start > 0:
            out[job_id] = (float(start), "start_time (s)")
    return out


def operator_starts(url: str, since: float) -> dict[int, dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/stats/starts?since={since:.3f}", timeout=10) as r:
        return {int(k): v for k, v in json.load(r).items()}


# (name, from, to): each segment of a pod's start, in order.
SEGMENTS = (
    ("admission + PlaceholderJob", "created", "submit_sent"),
    ("submit call", "submit_sent", "submitted"),
    ("in Slurm's queue", "submitted", "slurm_start"),
    ("start -> operator reads it", "slurm_start", "running_read"),
    ("read -> pod released", "running_read", "released"),
    ("release -> watch sees the gate gone", "released", "ungated"),
    ("gate gone -> bound", "ungated", "bound"),
    ("bound -> Running status written", "bound", "status_running"),
)  # fmt: skip


# Beside the chain: the target (issue 31), and how slurmctld's hook did.
EXTRA = (
    ("Slurm's start -> pod released", "slurm_start", "released"),
    ("Slurm's start -> the hook's notice", "slurm_start", "hint_started"),
    ("the hook's notice -> read (if first)", "hint_started", "running_read"),
)  # fmt: skip


@dataclass
class Breakdown:
    """Each pod's steps (wall clock), and the summaries the benchmark prints."""

    pods: dict[str, dict[str, float]] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)  # pod -> "allocate" | "queue"
    how: dict[str, str] = field(default_factory=dict)  # pod -> how Slurm's start is known
    hinted: int = 0  # pods whose job's start the operator read after slurmctld's hint
    signed: int = 0  # ... of them, whose start the operator took from the hint, signed, before its read

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pods": len(self.pods), "paths": _count(self.paths.values())}
        out["slurm_start_from"] = _count(self.how.values())
        out["read_after_hint"] = self.hinted
        out["taken_from_signed_hint"] = self.signed
        for name, a, b in (*SEGMENTS, *EXTRA):
            values = sorted(
                s[b] - s[a] for s in self.pods.values() if a in s and b in s and (a != "hint_started" or s[a] <= s[b])
            )
            if values:
                out[name] = _quantiles(values)
        # The start → released time by how Slurm's start is known: only "log" is the start itself;
        # "prolog end" comes after slurmctld's hook ran (a signed notice may release the pod before it).
        for how in sorted(set(self.how.values())):
            values = sorted(
                s["released"] - s["slurm_start"]
                for pod, s in self.pods.items()
                if self.how.get(pod) == how and "released" in s and "slurm_start" in s
            )
            if values:
                out[f"Slurm's start ({how}) -> pod released"] = _quantiles(values)
        return out


def _quantiles(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=100) if len(values) > 1 else [values[0]] * 99
    return {"p50": round(q[49], 3), "p99": round(q[98], 3), "n": len(values)}


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def breakdown(
    created: dict[str, float],
    ungated: dict[str, float],
    bound: dict[str, float],
    jobs: dict[str, int],
    operator: dict[int, dict[str, Any]],
    slurm: dict[int, tuple[float, str]],
) -> Breakdown:
    """Line up each pod's steps: the benchmark's (wall clock), the operator's and slurmctld's."""
    out = Breakdown()
    for pod, job_id in jobs.items():
        steps = dict(operator.get(job_id, {}))
        path = steps.pop("path", None)
        s: dict[str, float] = {k: float(v) for k, v in steps.items() if isinstance(v, int | float)}
        s.update({k: t[pod] for k, t in (("created", created), ("ungated", ungated), ("bound", bound)) if pod in t})
        if job_id in slurm:
            s["slurm_start"], out.how[pod] = slurm[job_id]
        if "hint_started" in s and "running_read" in s and s["hint_started"] <= s["running_read"]:
            out.hinted += 1
            out.signed += "signed_start" in s
        out.pods[pod] = s
        if isinstance(path, str):
            out.paths[pod] = path
    return out


def print_breakdown(mode: str, summary: dict[str, Any]) -> None:
    print(f"{mode} slurm-bridge: where a pod's start goes ({summary['pods']} pods; placed: {summary['paths']}; "
          f"Slurm's start from: {summary['slurm_start_from']}; read after slurmctld's hint: "
          f"{summary['read_after_hint']}, taken from it signed: {summary.get('taken_from_signed_hint', 0)}), "
          "seconds p50 / p99:")  # fmt: skip
    split = [k for k in summary if k.startswith("Slurm's start (")]
    for name in (*(n for n, *_ in (*SEGMENTS, *EXTRA)), *split):
        if name in summary:
            v = summary[name]
            print(f"  {name:38} {v['p50']:>7} / {v['p99']:<7} (n={v['n']})")
