"""kopf's share of the operator: its settings, its login from the bridge's own credentials, and
the one watch kopf still runs, the nodes'; and how kopf runs inside the operator's process, whose
start and stop are the bridge's own (:func:`run_kopf`). Pods and PlaceholderJobs, which carry
every per-pod event, are the operator's own informers (:mod:`.watches`; docs/design/watches.md,
"The hot watches go around kopf")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import kopf

from slurm_bridge.kube import kubeconfig as kubeconfig_loader
from slurm_bridge.kube.cache import LIST_PAGE
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.runtime.login import login as kopf_login

log = logging.getLogger(__name__)
# Objects per page of kopf's node list (the informers' pages are as big).
LIST_CHUNK_SIZE = LIST_PAGE
# How long a stop waits for kopf's cancelled tasks to end.
KOPF_STOP_SECONDS = 2.0


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
    """kopf's settings for the operator, whose one watch kopf runs is the nodes' (also applied by
    bench/replay.py, so that the replay's kopf mode works as kopf would)."""
    settings.posting.enabled = False  # the controller records its own Events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
    settings.peering.standalone = True  # leader election is the Lease's job
    settings.persistence.diffbase_storage = _NoDiffBase()
    # The node list in pages: kopf keeps one page, not the whole decoded list (a Node carries its
    # images and addresses; when kopf also listed 10,000 pods and PlaceholderJobs whole, that was
    # about 320 MB of a restarted operator's memory: bench/log, run 8).
    settings.watching.chunk_size = LIST_CHUNK_SIZE


def build_registry(
    nodes: NodeController | None = None,
    creds: kubeconfig_loader.Credentials | None = None,
) -> kopf.OperatorRegistry:
    """The kopf handlers; ``creds`` (the operator's own client's) log kopf in. Pods and
    PlaceholderJobs are not kopf's: ``HotWatches`` (operator/wiring/watches.py) watches them."""
    registry = kopf.OperatorRegistry()

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


async def run_kopf(registry: kopf.OperatorRegistry, take_signals: Callable[[], None]) -> None:
    """kopf's tasks, until kopf ends by itself (an error) or this is cancelled (the process stops).

    kopf is not let to stop the process its own way. It takes SIGTERM for itself (``take_signals``
    takes it back: the process's stop cancels the operator's whole start-up or run, not kopf
    alone), and its own stop waits 5 s for every task it did not start (the bridge's loops among
    them) and runs cleanup handlers that a SIGTERM during its start-up skips. Cancelled, kopf
    cancels its tasks at once; waited for at most KOPF_STOP_SECONDS.
    """
    ignored = asyncio.all_tasks()
    flag = asyncio.Event()  # set before the cancel: kopf then arms no SIGKILL of its own
    tasks = await kopf.spawn_tasks(registry=registry, clusterwide=True, standalone=True, stop_flag=flag)
    take_signals()
    runner = asyncio.create_task(kopf.run_tasks(tasks, ignored=ignored), name="kopf")
    try:
        await asyncio.wait([runner])
    except asyncio.CancelledError:
        flag.set()
        runner.cancel()
        _, pending = await asyncio.wait([runner], timeout=KOPF_STOP_SECONDS)
        if pending:
            log.warning("kopf has not stopped within %.0f s; stopping the rest anyway", KOPF_STOP_SECONDS)
        raise
    runner.result()  # kopf's own error ends the operator
    log.error("kopf stopped by itself; the operator stops too")
