"""Pods that left: how each bridge pod was last seen before its object was deleted, and when the
bridge noticed (docs/design/handoff.md, "A pod that vanishes").

A pod whose object is deleted after it reached Succeeded or Failed ended properly: a kubelet (1.27
and later, and the local cluster's kwok stages) stops the containers, reports the terminal phase,
and only then removes the object. A pod removed while it was not terminal -- ``kubectl delete
--force --grace-period=0``, PodGC, a deleted Node -- *vanished*: its kubelet may still give its
containers their whole grace period, so its cores are not free before the time it was noticed
plus its ``terminationGracePeriodSeconds`` (plus the handoff's margin, added by the readers).

In memory only, on purpose: what must survive a restart is recorded where it is used (the
PlaceholderJob's hold annotation); a restarted operator that finds a member gone without a
departure takes the longest grace instead (fail safe).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj
from slurm_bridge.rules.handoff import pod_grace_seconds
from slurm_bridge.rules.podphase import pod_ended

# A vanished pod's departure is kept this long after it was noticed: longer than the longest grace
# period the webhook admits by default (300 s) and the margin. A reader that misses one fails safe
# (it takes the longest grace from then).
KEEP_SECONDS = 900.0
# An ended pod's departure only needs to outlive the decisions right after its delete (a reconcile,
# a pass of the handoff loop, their retries).
KEEP_ENDED_SECONDS = 120.0


@dataclass(frozen=True)
class Departure:
    """A bridge pod's last state before its object went, and when the bridge noticed (wall)."""

    pod: Obj
    noticed: datetime

    @property
    def node(self) -> str:
        return str((self.pod.get("spec") or {}).get("nodeName") or "")

    @property
    def ended(self) -> bool:
        """It reached a terminal phase first: its containers had stopped."""
        return pod_ended(self.pod)

    @property
    def job_id(self) -> int | None:
        return slurm_job_of(self.pod)

    def runs_until(self, margin: int) -> datetime | None:
        """When its containers have stopped at the latest (None: they had already: it ended, or it
        was never bound to a node)."""
        if self.ended or not self.node:
            return None
        return self.noticed + timedelta(seconds=pod_grace_seconds(self.pod) + margin)


def slurm_job_of(pod: Obj) -> int | None:
    """The Slurm job a released pod runs in (the ``slurm-jobid`` label the release gives it)."""
    label = objects.labels(pod).get(names.LABEL_SLURM_JOB_ID)
    return int(label) if isinstance(label, str) and label.isdigit() else None


def by_job(job_id: int) -> Hashable:
    """The pod store's index value of a Slurm job's released pods."""
    return ("job", job_id)


def running_in(job_id: int) -> Hashable:
    """The pod store's index value of a Slurm job's pods that are bound and have not ended."""
    return ("running", job_id)


def on_node(node: str) -> Hashable:
    """The pod store's index value of the pods bound to ``node`` that have not ended (released or
    not: the node guard checks each, operator/nodeguard/)."""
    return ("node", node)


def pod_job_index(pod: Obj) -> list[Hashable]:
    """The pod store's index: a released pod by its Slurm job's id, and again while it is bound
    and has not ended (the handoff loop asks for the pods of a few jobs each pass, and for the
    jobs with pods that run); any pod bound to a node that has not ended, by its node."""
    node = (pod.get("spec") or {}).get("nodeName")
    running = bool(node) and not pod_ended(pod)
    keys: list[Hashable] = [on_node(str(node))] if running else []
    job_id = slurm_job_of(pod)
    if job_id is None:
        return keys
    return [*keys, by_job(job_id), running_in(job_id)] if running else [by_job(job_id)]


def _slim(pod: Obj) -> Obj:
    """What a departure's readers need of the pod: who it was (membership: uid, owners), its job,
    node and grace period, and its last phase."""
    meta, spec = objects.meta(pod), pod.get("spec") or {}
    kept = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences")
    return {
        "metadata": {k: meta[k] for k in kept if k in meta},
        "spec": {k: spec[k] for k in ("nodeName", "terminationGracePeriodSeconds") if k in spec},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


class Departures:
    """The departures of the pod watch (its DELETED events), by (namespace, name) and by job id."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._clock = clock
        # Ordered by time each (re-inserted last): ended pods', kept briefly; the others'.
        self._ended: dict[tuple[str, str], tuple[Departure, float]] = {}
        self._vanished: dict[tuple[str, str], tuple[Departure, float]] = {}

    def note(self, pod: Obj) -> Departure:
        """A DELETED event's pod (its last state)."""
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta.get("name", ""))
        d = Departure(_slim(pod), self._clock())
        self._ended.pop(key, None)
        self._vanished.pop(key, None)
        (self._ended if d.runs_until(0) is None else self._vanished)[key] = (d, time.monotonic())
        self._expire()
        return d

    def of(self, namespace: str, name: str) -> Departure | None:
        found = self._ended.get((namespace, name)) or self._vanished.get((namespace, name))
        return found[0] if found is not None else None

    def by_job(self, job_ids: Collection[int]) -> dict[int, list[Departure]]:
        """The departed pods of these Slurm jobs (the ``slurm-jobid`` label the release gave them)."""
        out: dict[int, list[Departure]] = {}
        if job_ids:
            for d in self.values():
                if d.job_id is not None and d.job_id in job_ids:
                    out.setdefault(d.job_id, []).append(d)
        return out

    def _expire(self) -> None:
        now = time.monotonic()
        for kept, keep in ((self._ended, KEEP_ENDED_SECONDS), (self._vanished, KEEP_SECONDS)):
            while kept:
                key, (_, at) = next(iter(kept.items()))
                if now - at <= keep:
                    break
                del kept[key]

    def values(self) -> list[Departure]:
        return [d for d, _ in (*self._ended.values(), *self._vanished.values())]

    def __len__(self) -> int:
        return len(self._ended) + len(self._vanished)
