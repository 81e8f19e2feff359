"""Wires the controllers to their watches (the operator's own informers for pods and
PlaceholderJobs, kopf for the rest), leader election, and the health endpoints."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
from aiohttp import web

from slurm_bridge import kubeconfig as kubeconfig_loader
from slurm_bridge import metrics
from slurm_bridge.config import Config, split_listen
from slurm_bridge.kube import KubeClient
from slurm_bridge.kubecache import LIST_PAGE, TenantCache
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.placeholderjobs.controller import Controller
from slurm_bridge.operator.runtime import heap
from slurm_bridge.operator.runtime.leader import LeaderElector
from slurm_bridge.operator.runtime.login import login as kopf_login
from slurm_bridge.operator.tenantpolicies.controller import TenantStatusController
from slurm_bridge.operator.wiring.watches import HotWatches
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError

log = logging.getLogger(__name__)

# Objects per page of kopf's initial lists (the informers' pages are as big).
LIST_CHUNK_SIZE = LIST_PAGE
# How long kopf keeps an idle object's worker (and the object's last event) alive.
KOPF_WORKER_IDLE_SECONDS = 0.5


class _NoDiffBase(kopf.DiffBaseStorage):
    """Skip kopf's per-event diff base.

    The operator registers only a watch-event handler, never change handlers, so the essence kopf
    deep-copies out of every event (and stores nowhere) is pure overhead: a third of the
    operator's CPU under load.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """kopf's settings for the operator (also applied by bench/replay.py, so that the replay's
    kopf mode works as kopf would)."""
    settings.posting.enabled = False  # the controller records its own Events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.peering.standalone = True  # leader election is the Lease's job
    settings.persistence.diffbase_storage = _NoDiffBase()
    # The initial lists in pages: kopf keeps one page, not the whole decoded list (with 10,000
    # pods and PlaceholderJobs, when kopf watched them, that was about 320 MB of the restarted
    # operator's memory: docs/performance.md, run 8).
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    # kopf's worker for an object keeps its last event while it waits for the next one. With
    # the default of 5 s, an initial list held every object listed in the last 5 s whole
    # (16,000 at once at 10,000 PlaceholderJobs: docs/performance.md, run 11).
    settings.queueing.idle_timeout = KOPF_WORKER_IDLE_SECONDS


def build_registry(
    ctrl: Controller,
    elector: LeaderElector,
    nodes: NodeController | None = None,
    hand_over: Callable[[], Awaitable[None]] | None = None,
    creds: kubeconfig_loader.Credentials | None = None,
) -> kopf.OperatorRegistry:
    """The kopf handlers; ``creds`` (the operator's own client's) log kopf in. Pods and
    PlaceholderJobs are not kopf's: ``HotWatches`` (operator/wiring/watches.py) watches them."""
    registry = kopf.OperatorRegistry()

    if hand_over is not None:

        @kopf.on.cleanup(registry=registry)
        async def stop_and_release(**_: Any) -> None:
            # kopf runs this as soon as its watches stop (SIGTERM), then waits up to 5 s for tasks
            # it did not start: the bridge's must be done by then, and the Lease handed over.
            await hand_over()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure_kopf(settings)

    if creds is not None:

        @kopf.on.login(registry=registry)
        async def login(**_: Any) -> kopf.ConnectionInfo:
            return await kopf_login(creds)  # operator/runtime/login.py: exec plugins, in-cluster

    if nodes is not None:

        @kopf.on.event("v1", "nodes", registry=registry)
        async def node_event(event: kopf.RawEvent, **_: Any) -> None:
            if event.get("object"):
                nodes.on_node_event(event.get("type") or "ADDED", dict(event["object"]))

    return registry


class StandbyProbe:
    """Whether a standby replica could lead now: its token is readable and Slurm answers.

    The leader's poller is its own probe. A standby pings slurmrestd every ``period`` seconds, so
    a missing JWT Secret or a wrong ``slurmRestApi`` shows on every replica before any takeover.
    """

    def __init__(self, slurm: SlurmClient, elector: LeaderElector, period: float = 10.0) -> None:
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
                await asyncio.wait_for(self.elector.is_leader.wait(), timeout=self.period)


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
) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ready, why = readiness(ctrl, elector, standby, watches)
        return web.Response(status=200 if ready else 503, text=why)

    async def stats(_: web.Request) -> web.Response:
        node_lists = (
            {"slurm_node_lists": nodes.polls, "slurm_node_lists_unchanged": nodes.unchanged_lists} if nodes else {}
        )
        lists = {"watches": watches.stats()} if watches else {}
        return web.json_response(
            {"leader": elector.is_leader.is_set(), **dataclasses.asdict(ctrl.stats()), **node_lists, **lists}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/stats", stats)
    app.router.add_get("/metrics", metrics.handler(metrics.OPERATOR))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, port = split_listen(cfg.operatorHealthListen)
    await web.TCPSite(runner, host, port).start()
    return runner


async def run(cfg: Config, kubeconfig: str | None, lease_namespace: str) -> None:
    creds = await asyncio.to_thread(kubeconfig_loader.load, kubeconfig)  # file reads, off the event loop
    kube = KubeClient.from_credentials(creds, component="slurm-bridge-operator")
    slurm = SlurmClient.from_config(cfg)
    # TenantPolicies and namespaces, read by every replica (a standby's cache is warm when it leads).
    tenant_status: TenantStatusController | None = None
    tenants = TenantCache(kube, on_change=lambda *_: tenant_status.wake() if tenant_status else None)
    ctrl = Controller(cfg, kube, slurm, tenants)
    tenant_status = TenantStatusController(cfg, kube, slurm, tenants, ctrl.phjs)
    node_ctrl = NodeController(cfg, kube, slurm)
    # The Lease has its own connections: a renewal must not queue behind the workers' requests
    # (at 10,000 PlaceholderJobs a restarted leader missed its renew deadline that way).
    lease_kube = KubeClient.from_credentials(creds, component="slurm-bridge-operator", max_connections=2)
    elector = LeaderElector(lease_kube, lease_namespace, f"{cfg.bridgeId}-operator")
    standby = StandbyProbe(slurm, elector)
    # Pods and PlaceholderJobs, listed and watched by every replica from start-up.
    watches = HotWatches(kube, ctrl)
    metrics.register_operator(ctrl.phjs, {"controller": ctrl.queue, "nodes": node_ctrl.queue}, elector)
    runner = await health_server(cfg, ctrl, elector, standby, node_ctrl, watches)
    stop = asyncio.Event()

    async def lead() -> None:
        await elector.is_leader.wait()
        node_ctrl.start()
        ctrl.start_polling()  # the first Slurm job list, beside the watches' first lists
        # The first reconciles see every pod and PlaceholderJob: none is created twice, none
        # judged missing, because a list was still coming in.
        await watches.wait_synced()
        ctrl.start()
        tenant_status.start()

    tenants.start()
    watches.start()
    tasks = [
        asyncio.create_task(elector.run(), name="leader"),
        asyncio.create_task(lead(), name="lead"),
        asyncio.create_task(standby.run(), name="standby-probe"),
        asyncio.create_task(heap.release_periodically(), name="heap-trim"),
    ]

    async def hand_over() -> None:
        """Stop working, then give the Lease up: a rollout's new leader takes over at once."""
        for t in tasks:
            t.cancel()
        await tenant_status.stop()
        await node_ctrl.stop()
        await ctrl.stop()
        await watches.stop()
        await tenants.stop()
        await elector.release()

    registry = build_registry(ctrl, elector, node_ctrl, hand_over, creds)
    try:
        await kopf.operator(registry=registry, clusterwide=True, standalone=True, stop_flag=stop)
    finally:
        await hand_over()
        await runner.cleanup()
        await slurm.aclose()
        await kube.aclose()
        await lease_kube.aclose()
