"""kopf's share of the operator: start-up and cleanup (the Lease's hand-over runs in its cleanup
handler), its login from the bridge's own credentials, and the one watch kopf still runs, the
nodes'. Pods and PlaceholderJobs, which carry every per-pod event, are the operator's own
informers (:mod:`.watches`; docs/architecture.md, "The hot watches go around kopf")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import kopf

from slurm_bridge import kubeconfig as kubeconfig_loader
from slurm_bridge.kubecache import LIST_PAGE
from slurm_bridge.operator.nodes.controller import NodeController
from slurm_bridge.operator.runtime.login import login as kopf_login

# Objects per page of kopf's node list (the informers' pages are as big).
LIST_CHUNK_SIZE = LIST_PAGE


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
    # about 320 MB of a restarted operator's memory: docs/performance.md, run 8).
    settings.watching.chunk_size = LIST_CHUNK_SIZE


def build_registry(
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
