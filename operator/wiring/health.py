"""The operator's health endpoints: /healthz, /readyz (a replica is ready only when it could do the
bridge's work now, leader or standby, and says why not), /stats (and /stats/starts) and /metrics;
and slurmctld's notices of job starts and ends (:mod:`.slurmhook`), on the same listener."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Protocol

from aiohttp import web

from slurm_bridge.core import metrics
from slurm_bridge.core.config import Config, split_listen
from slurm_bridge.core.shutdown import HTTP_SHUTDOWN_SECONDS
from slurm_bridge.operator.handoff.controller import HandoffController
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.placeholderjobs.controller import Controller
from slurm_bridge.operator.runtime import starts
from slurm_bridge.operator.runtime.leader import LeaderElector
from slurm_bridge.operator.wiring.slurmhook import HookToken, slurm_hook
from slurm_bridge.operator.wiring.watches import HotWatches
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.wire import ControllerPing

log = logging.getLogger(__name__)


class SlurmPing(Protocol):
    """What a standby asks Slurm: whether it answers (with the bridge's token)."""

    base_url: str

    async def ping(self) -> list[ControllerPing]: ...


class StandbyProbe:
    """Whether a standby replica could lead now: its token is readable and Slurm answers.

    The leader's poller is its own probe. A standby pings slurmrestd every ``period`` seconds, so
    a missing JWT Secret or a wrong ``slurmRestApi`` shows on every replica before any takeover.
    """

    def __init__(self, slurm: SlurmPing, elector: LeaderElector, period: float = 10.0) -> None:
        self.slurm, self.elector, self.period = slurm, elector, period
        self.ok = False
        self.problem = "Slurm not checked yet"

    async def run(self) -> None:
        while not self.elector.is_leader.is_set():
            try:
                await self.slurm.ping()
                ok, problem = True, ""
            except SlurmError as e:
                ok, problem = False, str(e)
            if (ok, problem) != (self.ok, self.problem):
                if ok:
                    log.info("standby: Slurm at %s answers", self.slurm.base_url)
                else:
                    log.warning("standby: not ready: %s", problem)
            self.ok, self.problem = ok, problem
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period):
                    await self.elector.is_leader.wait()


def readiness(
    ctrl: Controller, elector: LeaderElector, standby: StandbyProbe, watches: HotWatches | None = None
) -> tuple[bool, str]:
    """Ready means this replica can do the bridge's work now (the reason otherwise)."""
    if watches is not None and not watches.synced:
        role = "leader" if elector.is_leader.is_set() else "standby"
        return False, f"{role}, waiting for the first lists of pods and PlaceholderJobs: {watches.problem}"
    if elector.is_leader.is_set():
        if not ctrl.poller.synced.is_set():
            return False, f"leader, waiting for the first Slurm job list: {ctrl.poller.last_error or 'in progress'}"
        if not ctrl.poller.healthy:
            return False, f"leader, Slurm unreachable: {ctrl.poller.last_error}"
        return True, "ok"
    if not standby.ok:
        return False, f"standby, {standby.problem}"
    return True, "ok (standby)"


async def health_server(
    cfg: Config,
    ctrl: Controller,
    elector: LeaderElector,
    standby: StandbyProbe,
    nodes: NodeController | None = None,
    watches: HotWatches | None = None,
    handoff: HandoffController | None = None,
) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ready, why = readiness(ctrl, elector, standby, watches)
        return web.Response(status=200 if ready else 503, text=why)

    async def stats(_: web.Request) -> web.Response:
        node_lists = (
            {
                "slurm_node_lists": nodes.polls,
                "slurm_node_lists_unchanged": nodes.unchanged_lists,
                "node_pod_lists": nodes.fit.lists,
                "slurmSetup": nodes.setup.stats(),
            }
            if nodes
            else {}
        )
        lists = {"watches": watches.stats()} if watches else {}
        reads = {"slurm_preemption_reads": handoff.preemption_reads} if handoff else {}
        return web.json_response(
            {"leader": elector.is_leader.is_set(), **dataclasses.asdict(ctrl.stats()), **node_lists, **lists, **reads}
        )

    async def started_jobs(request: web.Request) -> web.Response:
        """Each recent job's steps to its start (runtime/starts.py), for the benchmark."""
        try:
            since = float(request.query.get("since", "0"))
        except ValueError:
            return web.Response(status=400, text="since: seconds since the epoch")
        return web.json_response({str(k): v for k, v in starts.since(since).items()})

    token = HookToken(cfg.slurmHookTokenFile) if cfg.slurmHookTokenFile else None
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/stats", stats)
    app.router.add_get("/stats/starts", started_jobs)
    app.router.add_post("/slurm/hook", slurm_hook(ctrl.hints, elector, token, accept_bearer=cfg.slurmHookAcceptBearer))
    app.router.add_get("/metrics", metrics.handler(metrics.OPERATOR))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=HTTP_SHUTDOWN_SECONDS)
    await runner.setup()
    host, port = split_listen(cfg.operatorHealthListen)
    await web.TCPSite(runner, host, port).start()
    return runner
