"""The operator's readiness: a replica is Ready only when it could do the bridge's work, whether it
leads or stands by, and says why not (the pod's /readyz body and its log)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from slurm_bridge.operator.wiring.health import StandbyProbe, readiness
from slurm_bridge.slurm.errors import SlurmAuthError, SlurmUnavailable
from tests.unit.fakes import FakePing

SECRET_MISSING = (
    "cannot read the Slurm JWT file /var/run/secrets/slurm-bridge/jwt "
    "(it comes from Secret ns/sb-slurm-jwt, key jwt): No such file or directory"
)


def _ctrl(synced: bool, healthy: bool, error: str = "") -> Any:
    event = asyncio.Event()
    if synced:
        event.set()
    return SimpleNamespace(poller=SimpleNamespace(synced=event, healthy=healthy, last_error=error))


def _elector(leader: bool) -> Any:
    event = asyncio.Event()
    if leader:
        event.set()
    return SimpleNamespace(is_leader=event)


@pytest.mark.parametrize(
    ("leader", "synced", "healthy", "standby_ok", "ready", "words"),
    [
        (True, True, True, False, True, "ok"),
        (True, False, False, True, False, "waiting for the first Slurm job list"),
        (True, True, False, True, False, "Slurm unreachable"),
        (False, False, False, True, True, "standby"),
        (False, False, False, False, False, "Secret ns/sb-slurm-jwt"),
    ],
)
def test_readiness(leader: bool, synced: bool, healthy: bool, standby_ok: bool, ready: bool, words: str) -> None:
    standby = SimpleNamespace(ok=standby_ok, problem="" if standby_ok else SECRET_MISSING)
    error = "" if healthy else "cannot reach slurmrestd at http://10.0.0.9:6820: connection refused"
    got, why = readiness(_ctrl(synced, healthy, error), _elector(leader), standby)  # type: ignore[arg-type]
    assert got is ready
    assert words in why


async def test_standby_probe_follows_slurm_and_logs_each_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="slurm_bridge.operator.wiring.health")
    slurm = FakePing(SlurmAuthError(SECRET_MISSING), SlurmAuthError(SECRET_MISSING), None)
    elector = _elector(False)
    probe = StandbyProbe(slurm, elector, period=0.01)
    task = asyncio.create_task(probe.run())
    for _ in range(200):
        if probe.ok:
            break
        await asyncio.sleep(0.01)
    assert probe.ok and probe.problem == ""
    elector.is_leader.set()  # a leader stops probing: its poller takes over
    await asyncio.wait_for(task, 1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"standby: not ready: {SECRET_MISSING}"], "one line per change, naming the Secret"
    assert any("Slurm at http://slurmrestd:6820 answers" in r.getMessage() for r in caplog.records)


async def test_standby_probe_reports_an_unreachable_url() -> None:
    slurm = FakePing(SlurmUnavailable("cannot reach slurmrestd at http://10.0.0.9:6820: connection refused"))
    elector = _elector(False)
    probe = StandbyProbe(slurm, elector, period=10)
    task = asyncio.create_task(probe.run())
    for _ in range(100):
        if slurm.pings:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)
    assert not probe.ok and "http://10.0.0.9:6820" in probe.problem
    elector.is_leader.set()
    await asyncio.wait_for(task, 1)


@pytest.mark.parametrize("leader", [True, False])
def test_neither_leader_nor_standby_is_ready_before_the_first_lists_of_pods_and_placeholderjobs(leader: bool) -> None:
    """Before they are in, the leader's controller has not started (the first reconciles would
    miss objects) and a standby's caches are not warm."""
    standby = SimpleNamespace(ok=True, problem="")
    watches = SimpleNamespace(synced=False, problem="cannot list or watch pods: 403 Forbidden: pods is forbidden")
    got, why = readiness(_ctrl(True, True), _elector(leader), standby, watches)  # type: ignore[arg-type]
    assert not got
    assert why.startswith("leader" if leader else "standby")
    assert "first lists of pods and PlaceholderJobs" in why and "403 Forbidden" in why
    watches.synced = True
    assert readiness(_ctrl(True, True), _elector(leader), standby, watches)[0]  # type: ignore[arg-type]
