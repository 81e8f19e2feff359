"""The operator's own list+watch of its two hot collections, straight into the controller.

The bridge's pods (a field selector on ``spec.schedulerName``: no other pod is sent at all) and the
PlaceholderJobs carry every per-pod event, about 11 in a pod's life. kopf's per-event machinery (a
worker per object, ``process_resource_event``, field paths resolved per event) cost as much CPU
as the operator's own work on them (docs/design/watches.md), so these two are watched by
:class:`~slurm_bridge.kube.cache.Informer` and their events handed to ``Controller.on_pod_event`` and
``Controller.on_phj_event`` as they are decoded. kopf keeps everything else (start-up and
cleanup, its login, the node watch).

Every replica runs them from start-up (a standby's stores are warm when it leads); the leader's
controller starts once both first lists are in (``wait_synced``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from slurm_bridge.kube.cache import Handler, Informer
from slurm_bridge.kube.client import phj_path, resource_path
from slurm_bridge.kube.seams import KubeListWatch
from slurm_bridge.operator.placeholderjobs.controller import Controller


def pod_selector(scheduler_name: str) -> dict[str, str]:
    """Only the bridge's pods: ``spec.schedulerName`` is immutable, so a pod never enters or leaves
    the selection (bench/log, "Pods the bridge does not manage")."""
    return {"fieldSelector": f"spec.schedulerName={scheduler_name}"}


def both(first: Handler, then: Handler) -> Handler:
    """One watch's events handed to two consumers, in order."""

    def handle(etype: str, obj: dict[str, Any]) -> None:
        first(etype, obj)
        then(etype, obj)

    return handle


class HotWatches:
    """The pod and PlaceholderJob informers of one controller; ``on_pod``: also told of each pod
    event, after the controller (the node guard: a bridge pod bound to a Slurm node)."""

    def __init__(self, kube: KubeListWatch, ctrl: Controller, on_pod: Handler | None = None) -> None:
        self.pods = Informer(
            kube,
            resource_path("v1", "pods", None),
            "pods",
            ctrl.on_pod_event if on_pod is None else both(ctrl.on_pod_event, on_pod),
            ctrl.pods,
            params=pod_selector(ctrl.config.schedulerName),
        )
        self.phjs = Informer(kube, phj_path(None), "PlaceholderJobs", ctrl.on_phj_event, ctrl.phjs)
        self.all = (self.pods, self.phjs)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.all)

    @property
    def problem(self) -> str:
        """Why the first lists are not in yet (for /readyz)."""
        errors = [i.last_error for i in self.all if i.last_error and not i.synced.is_set()]
        return "; ".join(errors) or "in progress"

    def start(self) -> None:
        for i in self.all:
            i.start()

    async def wait_synced(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.all))

    async def stop(self) -> None:
        for i in self.all:
            await i.stop()

    def stats(self) -> dict[str, dict[str, int]]:
        """For /stats: whole lists (1 unless a 410 Gone made it list again) and watch requests."""
        return {i.what: {"lists": i.lists, "watches": i.watches, "events": i.events} for i in self.all}
