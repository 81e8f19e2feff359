"""The operator process: builds the controllers, connects them to their watches (the operator's own
informers for pods and PlaceholderJobs, kopf for nodes: :mod:`.kopfsetup`), to leader election and
to the health endpoints (:mod:`.health`), leads when elected, and hands over on SIGTERM: the
process's stop (slurm_bridge/core/shutdown.py) cancels :func:`run` wherever it is, and its ``finally``
blocks stop what had started, the Lease's release last (docs/design/processes.md, "Stopping")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from slurm_bridge.core import metrics
from slurm_bridge.core.config import Config
from slurm_bridge.core.shutdown import Stop
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube import kubeconfig as kubeconfig_loader
from slurm_bridge.kube.cache import TenantCache
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.operator.handoff.controller import HandoffController
from slurm_bridge.operator.handoff.preemptor import PreemptorFinder
from slurm_bridge.operator.nodeguard.controller import NodeGuard
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.placeholderjobs.controller import Controller
from slurm_bridge.operator.runtime import heap
from slurm_bridge.operator.runtime.leader import LeaderElector
from slurm_bridge.operator.slurmsettings.reader import SlurmSettings
from slurm_bridge.operator.tenantpolicies.controller import TenantStatusController
from slurm_bridge.operator.views.slurmjobs import JobSnapshot
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder
from slurm_bridge.operator.wiring.health import StandbyProbe, health_server
from slurm_bridge.operator.wiring.kopfsetup import build_registry, run_kopf
from slurm_bridge.operator.wiring.watches import HotWatches
from slurm_bridge.slurm.client import SlurmClient

log = logging.getLogger(__name__)


@dataclass
class Operator:
    """Every part of one operator replica, built before any runs."""

    kube: KubeClient
    lease_kube: KubeClient
    slurm: SlurmClient
    tenants: TenantCache
    ctrl: Controller
    tenant_status: TenantStatusController
    nodes: NodeController
    handoff: HandoffController
    guard: NodeGuard
    settings: SlurmSettings
    elector: LeaderElector
    standby: StandbyProbe
    watches: HotWatches
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def lead(self) -> None:
        """Once elected: the node controller, the Slurm job poller, and the PlaceholderJob and
        TenantPolicy controllers once the watches' first lists are in."""
        await self.elector.is_leader.wait()
        self.settings.start()  # the first submits decide with Slurm's settings read
        self.nodes.start()
        self.ctrl.start_polling()  # the first Slurm job list, beside the watches' first lists
        # The first reconciles see every pod and PlaceholderJob: none is created twice, none
        # judged missing, because a list was still coming in.
        await self.watches.wait_synced()
        self.ctrl.start()
        self.handoff.start()  # reads the pods' store: its first list is in
        self.guard.start()  # and the PlaceholderJobs': a bridge pod's membership is known
        self.tenant_status.start()

    def start(self) -> None:
        """Every replica's work from start-up: the caches, leader election and the standby probe."""
        self.tenants.start()
        self.watches.start()
        self.tasks = [
            asyncio.create_task(self.elector.run(), name="leader"),
            asyncio.create_task(self.lead(), name="lead"),
            asyncio.create_task(self.standby.run(), name="standby-probe"),
            asyncio.create_task(heap.release_periodically(), name="heap-trim"),
        ]

    async def stop(self) -> None:
        """Stop working, then give the Lease up: a rollout's new leader takes over at once. Each
        part stops even if one before it fails, and the Lease is released last, once no part can
        write any more."""
        await _each(
            ("election", lambda: cancel_and_wait(self.tasks)),
            ("TenantPolicy status", self.tenant_status.stop),
            ("handoff", self.handoff.stop),
            ("node guard", self.guard.stop),
            ("Slurm settings", self.settings.stop),
            ("nodes", self.nodes.stop),
            ("PlaceholderJobs", self.ctrl.stop),
            ("watches", self.watches.stop),
            ("tenant cache", self.tenants.stop),
            ("lease", self.elector.release),
        )

    async def close(self) -> None:
        await _each(("Slurm client", self.slurm.aclose), ("Kubernetes clients", self._close_kube))

    async def _close_kube(self) -> None:
        await self.kube.aclose()
        await self.lease_kube.aclose()


def used_qos(snapshot: JobSnapshot | None) -> set[str]:
    """The QOS the bridge's jobs run in, as the job poller last saw them."""
    return {j.qos for j in snapshot.by_id.values()} if snapshot is not None else set()


async def _each(*steps: tuple[str, Callable[[], Awaitable[None]]]) -> None:
    """Run every step of a stop in order; one that fails is logged and the next still runs."""
    for what, step in steps:
        try:
            await step()
        except Exception:
            log.exception("stopping: %s failed", what)


def build(
    cfg: Config, creds: kubeconfig_loader.Credentials, lease_namespace: str, own_namespace: str | None = None
) -> Operator:
    kube = KubeClient.from_credentials(creds, component="slurm-bridge-operator")
    slurm = SlurmClient.from_config(cfg)
    # TenantPolicies and namespaces, read by every replica (a standby's cache is warm when it leads).
    tenant_status: TenantStatusController | None = None
    tenants = TenantCache(kube, on_change=lambda *_: tenant_status.wake() if tenant_status else None)
    # Slurm's preemption and time-limit settings: read in one place (operator/slurmsettings/),
    # decided with by the PlaceholderJob controller and the handoff loop (docs/colocation.md).
    policy = PolicyHolder()
    # The node controller: the one reader of Slurm's node table and writer of node states. A job
    # starts and ends only on nodes, and every allocation moves Slurm's node table, which it reads
    # each period anyway: the job poller reads job states only then (``ctrl`` is built next).
    nodes = NodeController(cfg, kube, slurm, on_slurm_change=lambda moved: ctrl.poller.nodes_changed(moved))
    # The PlaceholderJob controller reads Slurm's nodes through it (views/slurmnodes.py NodeView): an
    # exclusive job's CPUs under a TenantPolicy's maxCPUs (docs/tenancy.md), a vanished pod's hold
    # where native work runs (docs/colocation.md), each submit without the unfit nodes, whole GPUs
    # never from MIG nodes, MIG slices never where Slurm and the DRA driver disagree (docs/gpus.md),
    # a topology gang only where one unit holds it (docs/workloads.md#topology), and the drains of a
    # job whose owner took from it what its pods use (docs/security.md).
    # Preempted workloads' places are kept beside the Lease, in the operator's own namespace.
    ctrl = Controller(
        cfg,
        kube,
        slurm,
        tenants,
        nodes=nodes,
        own_user=slurm.jwt_user,
        policy=policy,
        describe_preemptor=PreemptorFinder(slurm, policy),
        places_namespace=lease_namespace,
    )
    ctrl.poller.watch_nodes(lambda: nodes.healthy)
    tenant_status = TenantStatusController(cfg, kube, slurm, tenants, ctrl.phjs)
    # The handoff's drains are written by the node controller, the one writer of node states.
    handoff = HandoffController(cfg, kube, slurm, ctrl.pods, ctrl.poller, policy, nodes, departures=ctrl.departures)
    settings = SlurmSettings(cfg, slurm, policy, lambda: used_qos(ctrl.poller.snapshot), slurm.jwt_user)
    # Nothing but the bridge's pods with an allocation, and allowed node daemons, on Slurm's nodes
    # (docs/nodes.md); its drains are the node controller's writes. own_namespace: see operator/main.py.
    guard = NodeGuard(cfg, kube, nodes.nodes, nodes, ctrl.pods, ctrl.phjs, own_namespace=own_namespace)
    # The Lease has its own connections: a renewal must not queue behind the workers' requests
    # (at 10,000 PlaceholderJobs a restarted leader missed its renew deadline that way).
    lease_kube = KubeClient.from_credentials(creds, component="slurm-bridge-operator", max_connections=2)
    elector = LeaderElector(lease_kube, lease_namespace, f"{cfg.bridgeId}-operator")
    # Pods and PlaceholderJobs, listed and watched by every replica from start-up.
    watches = HotWatches(kube, ctrl, on_pod=guard.on_bridge_pod)
    probe = StandbyProbe(slurm, elector)
    return Operator(
        kube, lease_kube, slurm, tenants, ctrl, tenant_status, nodes, handoff, guard, settings, elector, probe, watches
    )


async def run(
    cfg: Config, kubeconfig: str | None, lease_namespace: str, stop: Stop, own_namespace: str | None = None
) -> None:
    """The operator until ``stop`` cancels it (slurm_bridge/core/shutdown.py), at whatever step: every
    part started so far is stopped in order on the way out, the Lease released last."""
    creds = await asyncio.to_thread(kubeconfig_loader.load, kubeconfig)  # file reads, off the event loop
    op = build(cfg, creds, lease_namespace, own_namespace)
    try:
        metrics.register_operator(op.ctrl.phjs, {"controller": op.ctrl.queue, "nodes": op.nodes.queue}, op.elector)
        runner = await health_server(cfg, op.ctrl, op.elector, op.standby, op.nodes, op.watches, op.handoff)
        try:
            op.start()
            try:
                await run_kopf(build_registry(op.nodes, creds), stop.install)
            finally:
                await op.stop()
        finally:
            await runner.cleanup()
    finally:
        await op.close()
