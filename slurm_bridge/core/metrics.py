"""Every Prometheus metric of the bridge, and the small calls the code makes to move them.

Each component has its own registry (the operator's, the webhook's, the extender's), served as
``/metrics`` by :func:`handler`, with the client library's process collectors (RSS, CPU, open
files, GC) in each. What the operator already holds in memory (PlaceholderJobs by phase, queue
depths, leadership) is read at scrape time by :class:`OperatorCollector`, never kept twice.
Labels stay low-cardinality: Slurm endpoints are templates (``/job/{id}``), never raw ids, and no
metric is labelled by pod, namespace or job. docs/metrics.md lists them all.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.objects import Obj

if TYPE_CHECKING:
    from collections.abc import Sized

NS = "slurm_bridge"


@functools.lru_cache(maxsize=4096)
def _child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, looked up once per label set: the client library validates and
    locks on every call (about 32 per pod on the operator's hot path). The label sets are few."""
    return metric.labels(*values)


def _registry() -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=r)
    PlatformCollector(registry=r)
    GCCollector(registry=r)
    return r


OPERATOR = _registry()
WEBHOOK = _registry()
EXTENDER = _registry()

# Seconds; a queued Slurm job may wait hours, an immediate allocation takes well under a second.
_WAIT_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600)
_CALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_BIND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)

# ---- operator: Slurm REST ------------------------------------------------------------------------
SLURM_REQUESTS = Counter(
    f"{NS}_slurm_requests",
    "HTTP requests to slurmrestd (retries included), by endpoint template and outcome",
    ["method", "endpoint", "outcome"],
    registry=OPERATOR,
)
SLURM_REQUEST_SECONDS = Histogram(
    f"{NS}_slurm_request_duration_seconds",
    "Time from sending a request to slurmrestd to its whole answer",
    ["method", "endpoint"],
    buckets=_CALL_BUCKETS,
    registry=OPERATOR,
)


def slurm_request(method: str, endpoint: str, outcome: str, seconds: float) -> None:
    """One HTTP attempt to slurmrestd; ``endpoint`` is a template such as ``/job/{id}``."""
    _child(SLURM_REQUESTS, method, endpoint, outcome).inc()
    _child(SLURM_REQUEST_SECONDS, method, endpoint).observe(seconds)


# ---- operator: Slurm jobs ------------------------------------------------------------------------
JOBS_SUBMITTED = Counter(
    f"{NS}_slurm_jobs_submitted", "Slurm jobs made for PlaceholderJobs (allocated at once or queued)", registry=OPERATOR
)
JOBS_ALLOCATED_IMMEDIATELY = Counter(
    f"{NS}_slurm_jobs_allocated_immediately",
    "Slurm jobs allocated inside the submit call (job/allocate, immediate)",
    registry=OPERATOR,
)
JOBS_QUEUED = Counter(
    f"{NS}_slurm_jobs_queued",
    "Slurm jobs queued with job/submit (Slurm could not start them at once)",
    registry=OPERATOR,
)
JOBS_CANCELLED = Counter(
    f"{NS}_slurm_jobs_cancelled", "Slurm jobs the bridge cancelled (orphans included)", registry=OPERATOR
)
ORPHANS_SWEPT = Counter(
    f"{NS}_slurm_orphan_jobs_cancelled",
    "Live bridge jobs cancelled because their PlaceholderJob is gone",
    registry=OPERATOR,
)


def job_submitted() -> None:
    JOBS_SUBMITTED.inc()


def job_allocated_immediately() -> None:
    JOBS_ALLOCATED_IMMEDIATELY.inc()


def job_queued() -> None:
    JOBS_QUEUED.inc()


def job_cancelled() -> None:
    JOBS_CANCELLED.inc()


def orphan_swept() -> None:
    ORPHANS_SWEPT.inc()


# ---- operator: pods ------------------------------------------------------------------------------
POD_ALLOCATION_SECONDS = Histogram(
    f"{NS}_pod_allocation_seconds",
    "From a managed pod's creation to its release on the nodes Slurm allocated",
    buckets=_WAIT_BUCKETS,
    registry=OPERATOR,
)
POD_BIND_SECONDS = Histogram(
    f"{NS}_pod_bind_seconds",
    "From a pod's release (allocation) to the operator seeing it bound to its node",
    buckets=_BIND_BUCKETS,
    registry=OPERATOR,
)
WATCH_EVENTS = Counter(
    f"{NS}_watch_events", "Watch events the operator received, by resource", ["resource"], registry=OPERATOR
)


def _created(pod: Obj) -> float | None:
    ts = objects.meta(pod).get("creationTimestamp")
    try:
        return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp() if ts else None
    except ValueError:
        return None


class PodTimes:
    """When each managed pod was first seen and released, in memory only (a metric may miss a
    restart's pods; nothing else reads it).

    ``creationTimestamp`` has whole seconds: a pod seen within its creation second is timed from
    when the watch delivered it, an older one (seen at start-up) from the middle of that second.
    """

    LIMIT = 200_000  # pods tracked at once; beyond it new pods are not timed

    def __init__(self) -> None:
        self._first_seen: dict[str, float] = {}  # uid -> wall clock
        self._released: dict[str, float] = {}  # uid -> monotonic

    def event(self, etype: str, pod: Obj, scheduler_name: str) -> None:
        _child(WATCH_EVENTS, "pods").inc()
        if pod.get("spec", {}).get("schedulerName") != scheduler_name:
            return
        uid = objects.uid(pod) or ""
        if etype == "DELETED":
            self._first_seen.pop(uid, None)
            self._released.pop(uid, None)
            return
        if uid not in self._first_seen and len(self._first_seen) < self.LIMIT:
            self._first_seen[uid] = time.time()
        released = self._released.get(uid)
        if released is not None and pod.get("spec", {}).get("nodeName"):
            del self._released[uid]
            POD_BIND_SECONDS.observe(time.monotonic() - released)

    def released(self, pod: Obj) -> None:
        uid = objects.uid(pod) or ""
        if uid in self._released or len(self._released) >= self.LIMIT:
            return
        now, created, seen = time.time(), _created(pod), self._first_seen.get(uid)
        if created is not None:
            start = seen if seen is not None and seen < created + 1 else created + 0.5
            POD_ALLOCATION_SECONDS.observe(max(0.0, now - start))
        if not pod.get("spec", {}).get("nodeName"):
            self._released[uid] = time.monotonic()


PODS = PodTimes()


def pod_event(etype: str, pod: Obj, scheduler_name: str) -> None:
    """Every pod watch event, first thing (counts it; times the bind of released pods)."""
    PODS.event(etype, pod, scheduler_name)


def pod_released(pod: Obj) -> None:
    """A pod was released on its node (its allocation): observes creation -> allocation."""
    PODS.released(pod)


def phj_event() -> None:
    _child(WATCH_EVENTS, "placeholderjobs").inc()


def node_event() -> None:
    _child(WATCH_EVENTS, "nodes").inc()


# ---- operator: work queues and nodes -------------------------------------------------------------
RECONCILES = Counter(f"{NS}_reconciles", "Reconciles run, by kind (pod, phj, node)", ["kind"], registry=OPERATOR)
RECONCILE_ERRORS = Counter(
    f"{NS}_reconcile_errors", "Reconciles that raised (retried with backoff), by kind", ["kind"], registry=OPERATOR
)
NODE_SYNC_ACTIONS = Counter(
    f"{NS}_node_sync_actions",
    "Node state written by the node controller, by direction and action",
    ["direction", "action"],
    registry=OPERATOR,
)

R = TypeVar("R")
ItemT = TypeVar("ItemT", bound=Hashable)  # a work queue's item: it names its ``kind`` (pod, phj, node)


def _kind(item: Hashable) -> str:
    kind = getattr(item, "kind", None)
    return kind if kind in ("pod", "phj") else "node"


def reconciled(func: Callable[[Any, ItemT], Awaitable[R]]) -> Callable[[Any, ItemT], Awaitable[R]]:
    """Decorate a work queue's handler ``(self, item)``: counts reconciles and those that raised."""

    @functools.wraps(func)
    async def wrapper(self: Any, item: ItemT) -> R:
        kind = _kind(item)
        _child(RECONCILES, kind).inc()
        try:
            return await func(self, item)
        except Exception:
            _child(RECONCILE_ERRORS, kind).inc()
            raise

    return wrapper


def node_sync(direction: str, action: str) -> None:
    """``direction``: ``to_slurm`` (drain/undrain a Slurm node), ``to_kubernetes`` (taint, cordon,
    markers on a Node), ``registration`` (dynamic nodes created, drained, deleted), ``guard`` (the
    node guard's drain/undrain where a pod runs without a Slurm allocation) or ``device_taint``
    (drain/undrain of a Slurm node one of whose GPUs is tainted)."""
    _child(NODE_SYNC_ACTIONS, direction, action).inc()


SLURM_SETUP_PROBLEMS = Gauge(
    f"{NS}_slurm_setup_problem",
    "1 while a check of Slurm's side of node sharing finds a problem (the operator's log says what), "
    "0 when it passes or cannot be checked, by check (docs/colocation.md)",
    ["check"],
    registry=OPERATOR,
)


def slurm_setup(check: str, problem: bool) -> None:
    """A check of Slurm's configuration for the configured node sharing (operator/nodes/setupcheck.py)."""
    _child(SLURM_SETUP_PROBLEMS, check).set(1 if problem else 0)


# ---- operator: state read at scrape time ---------------------------------------------------------
class _Leading(Protocol):
    @property
    def is_leader(self) -> Any: ...


class _Store(Protocol):
    def values(self) -> list[Obj]: ...


_PHASES = ("New", names.PHASE_PENDING, names.PHASE_ALLOCATED, names.PHASE_RUNNING, names.PHASE_COMPLETED,
           names.PHASE_FAILED, names.PHASE_CANCELLED)  # fmt: skip


class OperatorCollector(Collector):
    """PlaceholderJobs by phase, queue depths and leadership, read from the operator's own state
    when Prometheus scrapes (every replica keeps warm caches: filter by ``slurm_bridge_leader``)."""

    def __init__(self, phjs: _Store, queues: dict[str, Sized], elector: _Leading) -> None:
        self.phjs, self.queues, self.elector = phjs, queues, elector

    def collect(self) -> Iterator[Metric]:
        phases = GaugeMetricFamily(
            f"{NS}_placeholderjobs",
            "PlaceholderJobs in the operator's cache, by status.phase (New: no phase written yet)",
            labels=["phase"],
        )
        counts = dict.fromkeys(_PHASES, 0)
        for phj in self.phjs.values():
            phase = (phj.get("status") or {}).get("phase") or "New"
            counts[phase] = counts.get(phase, 0) + 1
        for phase, n in counts.items():
            phases.add_metric([phase], n)
        yield phases
        yield from by_account(self.phjs.values())
        depth = GaugeMetricFamily(f"{NS}_workqueue_depth", "Keys waiting in a work queue", labels=["queue"])
        for name, queue in self.queues.items():
            depth.add_metric([name], len(queue))
        yield depth
        yield GaugeMetricFamily(
            f"{NS}_leader",
            "1 while this operator replica holds the leader Lease",
            value=1 if self.elector.is_leader.is_set() else 0,
        )


_LIVE_JOB = frozenset({names.PHASE_PENDING, names.PHASE_ALLOCATED, names.PHASE_RUNNING})
_HOLDING = frozenset({names.PHASE_ALLOCATED, names.PHASE_RUNNING})


def _held_cpus(spec: Mapping[str, Any], status: Mapping[str, Any]) -> int:
    """CPUs a PlaceholderJob's allocation holds: nodes x tasks x cpus per task; a heterogeneous
    job's (spec.components) summed over its components, each with its own size."""
    assignments = status.get("assignments") or []
    parts = spec.get("components") or [spec]
    total = 0
    for offset, part in enumerate(parts):
        slurm = part.get("slurm") or {}
        mine = [a for a in assignments if len(parts) == 1 or a.get("offset") == offset]
        nodes = len(mine) or _int(slurm.get("nodes"), 1)
        total += nodes * _int(slurm.get("tasksPerNode"), 1) * _int(slurm.get("cpusPerTask"), 1)
    return total


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def by_account(phjs: list[Obj]) -> Iterator[Metric]:
    """Live Slurm jobs and the CPUs they hold, by the Slurm account they are charged to
    (status.account, Slurm's record; "" until Slurm has said). One series per account, never per
    pod or namespace."""
    jobs: dict[str, int] = {}
    cpus: dict[str, int] = {}
    for phj in phjs:
        status = phj.get("status") or {}
        phase = status.get("phase")
        if phase not in _LIVE_JOB or status.get("jobId") is None:
            continue
        account = str(status.get("account") or "")
        jobs[account] = jobs.get(account, 0) + 1
        if phase in _HOLDING:
            cpus[account] = cpus.get(account, 0) + _held_cpus(phj.get("spec") or {}, status)
    job_family = GaugeMetricFamily(
        f"{NS}_jobs_by_account",
        "Live Slurm jobs of the bridge (PlaceholderJobs Pending, Allocated or Running with a job id), by Slurm account",
        labels=["account"],
    )
    cpu_family = GaugeMetricFamily(
        f"{NS}_allocated_cpus_by_account",
        "CPUs Slurm allocated to the bridge's running jobs, by Slurm account",
        labels=["account"],
    )
    for account, n in sorted(jobs.items()):
        job_family.add_metric([account], n)
        cpu_family.add_metric([account], cpus.get(account, 0))
    yield job_family
    yield cpu_family


_collector: OperatorCollector | None = None


def register_operator(phjs: _Store, queues: dict[str, Sized], elector: _Leading) -> None:
    """Read the operator's state at scrape time (once per process; a second call replaces it)."""
    global _collector
    if _collector is not None:
        OPERATOR.unregister(_collector)
    _collector = OperatorCollector(phjs, queues, elector)
    OPERATOR.register(_collector)


# ---- webhook ---------------------------------------------------------------------------------------
ADMISSIONS = Counter(
    f"{NS}_webhook_admissions",
    "AdmissionReviews answered, by endpoint (mutate, validate), operation and result (allowed, denied, error)",
    ["endpoint", "operation", "result"],
    registry=WEBHOOK,
)
ADMISSION_SECONDS = Histogram(
    f"{NS}_webhook_admission_duration_seconds",
    "Time to read, decide and answer one AdmissionReview",
    ["endpoint", "operation"],
    buckets=_CALL_BUCKETS,
    registry=WEBHOOK,
)


def admission(endpoint: str, operation: str, result: str, seconds: float) -> None:
    ADMISSIONS.labels(endpoint, operation or "UNKNOWN", result).inc()
    ADMISSION_SECONDS.labels(endpoint, operation or "UNKNOWN").observe(seconds)


# ---- extender ------------------------------------------------------------------------------------
EXTENDER_CALLS = Counter(
    f"{NS}_extender_requests",
    "Scheduler extender calls, by verb (filter, bind) and result",
    ["verb", "result"],
    registry=EXTENDER,
)
EXTENDER_SECONDS = Histogram(
    f"{NS}_extender_request_duration_seconds",
    "Time to answer one scheduler extender call",
    ["verb"],
    buckets=_CALL_BUCKETS,
    registry=EXTENDER,
)


def extender_call(verb: str, result: str, seconds: float) -> None:
    EXTENDER_CALLS.labels(verb, result).inc()
    EXTENDER_SECONDS.labels(verb).observe(seconds)


# ---- serving -------------------------------------------------------------------------------------
def handler(registry: CollectorRegistry) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler serving ``registry`` in Prometheus' text format."""

    async def metrics(_: web.Request) -> web.Response:
        # Rendering is in-memory and small (no I/O): fine on the event loop.
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return metrics
