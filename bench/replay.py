"""Replay microbenchmark of the operator's hot path: CPU per pod with no API server and no Slurm.

Drives the real operator (its watches of pods and PlaceholderJobs, ``Controller``: the stores'
projections, the work queue, the resolver and ``Membership`` creating the PlaceholderJob,
``lifecycle.decide`` and the shell in ``operator/placeholderjobs/sync/phjsync.py``, the release patch,
the status write, the finalizer) through N bare pods' lives, from the watch stream's bytes to the
requests the operator sends:

- a stand-in API server (``ApiServer``) answers every Kubernetes request the operator makes at
  once, as the real one would (uid, resourceVersion, a PlaceholderJob's generation, JSON patch and
  merge patch applied), and sends each change back as a watch event, JSON-encoded as on the wire.
  It also plays the other writers of a bridge pod's life, so the operator sees what it sees on the
  cluster: the user's create and delete, the extender's bind with the kube-scheduler's
  ``Scheduled`` Event, the kubelet's (kwok's) status, the garbage collector's delete of the
  PlaceholderJob;
- the real ``SlurmClient`` (codec, retries, JSON) over an ``httpx.MockTransport`` answers, as
  slurmrestd v0.0.45 does, the allocation or the submit, the read (a job record of about 2 KB),
  the handoff's released mark (``POST job/{id}`` setting the job's ``admin_comment`` and
  ``comment``, made before each of the bridge's own cancels: ``sync/handoffwrites.py``; applied to
  the job) and the cancel. It also plays slurmctld's hook (``slurm-hooks/slurm-bridge-notify.sh``,
  a PrologSlurmctld and an EpilogSlurmctld on the local cluster), with the hook's own test of the
  job's comment: a notice that the job started (as a queued job starts; an allocated job's comment
  asks for none) and one that it ended (a few loop turns after its cancel, unless the comment says
  the bridge ends it itself), each handed to the operator's own handler of ``POST /slurm/hook``
  (``operator/wiring/slurmhook.py``: the signature checked with the secret in its file, the leader, the
  JSON body, then ``SlurmHints.hint``), which reads the job back (one ``GET job/{id}``) only when
  the notice is news.

Slurm's settings are the local cluster's (``LOCAL_POLICY``: the handoff's EpilogSlurmctld alone, the notify
hook run by it, ``preempt/qos``, the bridge's jobs in a QOS that preempts nothing), as the operator's
settings reader would have read them. The spec-update check runs as on the cluster: each pod event
of a member asks whether the pod's slurmjob annotations still are those its PlaceholderJob
recorded (``members.own_options_changed``), and each PlaceholderJob reconcile whether its spec's
generation is past the one its status observed (``sync/jobupdates.JobUpdates.inputs``); the
replay counts both and asserts that neither finds a change (nothing is read for an update).

Modes (``--mode``): ``watch`` (the default) is the operator's path: the two informers (``Informer``) of
``operator/wiring/watches.py`` list (empty) and watch through the operator's ``KubeClient``,
whose watch stream (``KubeClient._stream``) carries the stand-in's JSON lines, decoded as on the
cluster. ``direct`` hands the decoded events to the controller's handlers with nothing between
(the lower bound: ``watch - direct`` is the watch loop's share). ``kopf`` runs them through kopf's
per-event machinery instead (``queueing.watcher``, ``processing.process_resource_event``, with
the operator's kopf settings and the two event handlers the operator had until issue 24), fed
by a stand-in of kopf's watch stream: what going around kopf saves.

Paths (``--path``), each a pod's whole life (created, running, deleted, its job released and
cancelled, its PlaceholderJob finalized), with slurmctld's notices where its hook sends them:
``placed`` (the default) is a pod whose job Slurm allocates inside the call (``job/allocate``), read
back at once, whose comment tells the hook to send no start notice; ``queued`` is one whose job is
queued (``job/submit``: the pod names a group, which only a submit sets), then started by Slurm a
few loop turns later and announced by the start notice, which the operator confirms with one read
before it releases the pod. Neither's end is told of: the bridge's released mark sets the comment
that tells the hook the bridge ends the job itself. A pod on a hybrid
node (a slurmd beside the kubelet) takes the same path: the released mark is made for every job
the bridge releases, whatever its nodes, and what differs there (a vanished pod's hold, the
handoff loop's reservations) is not a properly ended pod's.

Not included: the HTTP exchanges themselves (aiohttp's and httpx's transports, TLS, sockets,
aiohttp's parsing of the hook's request: the answers are handed to the clients' decoding as bytes),
the Slurm polls and the handoff loop's passes (they cost per second, not per pod), the 10 s
re-check timer of each released pod (a no-op reconcile later), the workloads' annotation watches
(a bare pod has no workload), leader election, metrics scrapes and the webhook, extender and
scheduler processes.

    nice -n 19 .venv/bin/python bench/replay.py [--pods 200] [--reps 5] [--mode watch|direct|kopf|all]
    nice -n 19 .venv/bin/python bench/replay.py --profile          # cProfile top 20 (one run, watch)
    nice -n 19 .venv/bin/python bench/replay.py --json
    nice -n 19 .venv/bin/python bench/replay.py --path queued      # submitted, started, the notice
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import cProfile
import functools
import hashlib
import hmac
import io
import itertools
import json
import logging
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import httpx

from slurm_bridge import names
from slurm_bridge.core import logs
from slurm_bridge.core.config import Config
from slurm_bridge.kube.client import KubeClient
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle
from slurm_bridge.operator.placeholderjobs import members as membership
from slurm_bridge.operator.placeholderjobs.controller import Controller
from slurm_bridge.operator.placeholderjobs.decisions.plan import Held
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import is_released, told_of
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobview import SlurmSide
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import user_not_known
from slurm_bridge.operator.runtime.leader import LeaderElector
from slurm_bridge.operator.views.slurmjobs import JobSnapshot
from slurm_bridge.operator.views.slurmnodes import NodesNotRead
from slurm_bridge.operator.views.slurmpolicy import SlurmPolicy
from slurm_bridge.operator.wiring.slurmhook import SIGNATURE_HEADER, HookToken, slurm_hook
from slurm_bridge.operator.wiring.watches import HotWatches
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.models import JobSettings, PartitionLimits, QosInfo, SlurmConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_memory import admitted_pod_spec  # bench/ is not a package

Obj = dict[str, Any]
P = ParamSpec("P")
T = TypeVar("T")
NAMESPACE = "bench-bridge-000001"
NODES = [f"kwok-node-{i}" for i in range(1, 5)]
# The pods' annotations per path: a group makes the job a submit (only job/submit sets one).
PATHS: Final = {"placed": {}, "queued": {names.ANN_GROUP_ID: "64030"}}
PHJ_PREFIX = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{NAMESPACE}/{names.PLURAL}"
POD_PREFIX = f"/api/v1/namespaces/{NAMESPACE}/pods"
# The collections the operator lists and watches across namespaces, by path.
COLLECTIONS: Final = {"/api/v1/pods": "pods", f"/apis/{names.GROUP}/{names.VERSION}/{names.PLURAL}": names.PLURAL}
MODES: Final = ("watch", "direct", "kopf")
# Who makes each write in the cluster; the operator's own are those it sent through its client.
OPERATOR = "operator"
SLURM_API = "v0.0.45"
# The other writers' steps are run after this many loop turns: enough for the operator to see
# its own write's watch event first, as it usually does on the cluster.
ACTOR_DELAY_TURNS = 3
# Slurm's settings as the operator's reader (operator/slurmsettings/) finds the local cluster's
# (hack/slurm-policy.conf, hack/cluster/slurm-conf.sh, hack/accounting.env): the handoff's
# EpilogSlurmctld (it runs slurmctld's notify hook, which has no line of its own), preemption by
# QOS, the bridge's jobs in QOS normal (which preempts nothing: they are allocated at once), the
# pods' QOS preemptable.
LOCAL_POLICY: Final = SlurmPolicy(
    known=True,
    conf=SlurmConf(
        mcs_plugin="mcs/label",
        mcs_parameters=("ondemand", "ondemandselect"),
        epilog_slurmctld=("/etc/slurm/slurm-bridge-handoff.sh",),
        preempt_type="preempt/qos",
        preempt_mode=("REQUEUE",),
        over_time_limit_minutes=0,
    ),
    qos={
        q.name: q
        for q in (
            QosInfo("normal"),
            QosInfo("high"),
            QosInfo("native"),
            QosInfo("pods", (), ("CANCEL",), 90),
            QosInfo("pods-urgent", ("native",), ("CANCEL",), 90),
            QosInfo("native-urgent", ("pods",)),
        )
    },
    default_qos={"": "normal"},
)
# The secret slurmctld's hook signs its notices with (the operator reads its copy from slurmHookTokenFile).
HOOK_TOKEN = "replay-hook-token"


class StandIn:
    """CPU seconds spent in the stand-ins (API server, other writers, slurmrestd), subtracted from
    the replay's: what they do (copying objects, encoding watch events, parsing request bodies)
    is the cluster's work, not the operator's."""

    seconds = 0.0
    _depth = 0

    @classmethod
    def timed(cls, fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            if cls._depth:
                return fn(*args, **kwargs)
            cls._depth += 1
            t0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cls.seconds += time.process_time() - t0
                cls._depth -= 1

        return wrapper


class Later:
    """The steps of the cluster's other writers (and of Slurm), each run a few loop turns from now,
    as stand-in time; ``pending``: how many are not run yet."""

    def __init__(self) -> None:
        self.pending = 0

    def __call__(self, step: Callable[[], None], turns: int = ACTOR_DELAY_TURNS) -> None:
        self.pending += 1
        loop = asyncio.get_running_loop()

        def run(n: int) -> None:
            if n > 0:
                loop.call_soon(run, n - 1)
                return
            self.pending -= 1
            StandIn.timed(step)()

        loop.call_soon(run, turns)


# ---- objects as the API server returns them ----------------------------------------------------
def managed_fields(manager: str, keys: list[str]) -> list[Obj]:
    return [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-23T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {f"f:{k}": {} for k in keys}}}]  # fmt: skip


def new_pod(name: str, uid: str, annotations: dict[str, str] | None = None) -> Obj:
    """The benchmark's pod (bench/pipeline_latency.py) as the webhook admitted it."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "creationTimestamp": "2026-11-23T00:00:00Z",
                     **({"annotations": annotations} if annotations else {}),
                     "managedFields": managed_fields("python-requests",
                                                     ["containers", "restartPolicy", "tolerations"])},
        "spec": admitted_pod_spec(schedulingGates=[{"name": names.SCHEDULING_GATE}]),
        "status": {"phase": "Pending", "qosClass": "Burstable",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                   "message": "Scheduling is blocked due to non-empty scheduling gates",
                                   "lastProbeTime": None, "lastTransitionTime": "2026-11-23T00:00:00Z"}]},
    }  # fmt: skip


def running_status(node: str) -> Obj:
    return {
        "phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}],
        "podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}], "startTime": "2026-11-23T00:00:01Z",
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                        "lastTransitionTime": "2026-11-23T00:00:01Z"}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
        "containerStatuses": [{"name": "c", "state": {"running": {"startedAt": "2026-11-23T00:00:01Z"}},
                               "lastState": {}, "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
                               "started": True}],
    }  # fmt: skip


def slurm_job(job_id: int, name: str, admin_comment: str, node: str, comment: str = "") -> Obj:
    """A RUNNING external job as slurmrestd v0.0.45 answers ``GET job/{id}`` (trimmed of the
    fields that are empty for these jobs; about 2 KB)."""
    number = {"set": True, "infinite": False, "number": 0}  # fmt: skip
    return {
        "job_id": job_id, "name": name, "job_state": ["RUNNING"], "state_reason": "None", "state_description": "",
        "nodes": node, "admin_comment": admin_comment, "partition": "slurm-bridge", "flags": ["EXTERNAL_JOB"],
        "account": "bench", "user_name": "slurm", "user_id": 64030, "group_id": 64030, "group_name": "slurm",
        "qos": "normal", "priority": number | {"number": 4294901759}, "cpus": number | {"number": 1},
        "node_count": number | {"number": 1}, "tasks": number | {"number": 1},
        "memory_per_node": number | {"number": 64}, "minimum_cpus_per_node": number | {"number": 1},
        "submit_time": number | {"number": 1_763_856_000}, "start_time": number | {"number": 1_763_856_000},
        # Its 30-minute time limit ends in the future (the handoff ends pods ahead of a time limit).
        "end_time": number | {"number": int(time.time()) + 1800}, "eligible_time": number | {"number": 1_763_856_000},
        "time_limit": number | {"number": 30}, "accrue_time": number, "preempt_time": number,
        "suspend_time": number, "last_sched_evaluation": number | {"number": 1_763_856_000},
        "exit_code": {"status": ["SUCCESS"], "return_code": number, "signal": {"id": number, "name": ""}},
        "derived_exit_code": {"status": ["SUCCESS"], "return_code": number, "signal": {"id": number, "name": ""}},
        "job_resources": {"select_type": ["CORE"], "nodes": {"count": 1, "select_type": ["ONE_ROW"], "list": node,
                          "allocation": [{"index": 0, "name": node, "cpus": {"count": 1, "used": 1},
                                          "memory": {"used": 64, "allocated": 64},
                                          "sockets": [{"index": 0,
                                                       "cores": [{"index": 0, "status": ["ALLOCATED"]}]}]}]},
                          "cpus": 1, "threads_per_core": number | {"number": 1}},
        "batch_flag": False, "cluster": "linux", "command": "", "comment": comment, "container": "",
        "contiguous": False,
        "cores_per_socket": number, "cpus_per_task": number | {"number": 1}, "current_working_directory": "/tmp",
        "dependency": "", "excluded_nodes": "", "features": "", "gres_detail": [], "het_job_id": number,
        "het_job_offset": number, "licenses": "", "mcs_label": "", "nice": 0, "required_nodes": "",
        "restart_cnt": 0, "shared": [], "tres_req_str": "cpu=1,mem=64M,node=1,billing=1",
        "tres_alloc_str": "cpu=1,mem=64M,node=1,billing=1", "wckey": "", "array_job_id": number,
        "array_task_id": number, "array_max_tasks": number, "array_task_string": "", "association_id": 2,
        "batch_host": "", "billable_tres": {"set": True, "infinite": False, "number": 1.0},
    }  # fmt: skip


# ---- JSON patches as the API server applies them ---------------------------------------------------
def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def json_patch(obj: Obj, ops: list[Obj]) -> Obj | None:
    """``obj`` with the ops applied; None when a ``test`` fails (the API server's 422)."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [_unescape(t) for t in op["path"].split("/")[1:]]
        target: Any = out
        for t in parents:
            target = target[int(t)] if isinstance(target, list) else target[t]
        key: Any = int(last) if isinstance(target, list) and last != "-" else last
        if op["op"] == "test":
            if (target[key] if not isinstance(target, dict) else target.get(key)) != op["value"]:
                return None
        elif op["op"] == "remove":
            del target[key]
        elif op["op"] == "add" and isinstance(target, list):
            target.append(op["value"]) if key == "-" else target.insert(key, op["value"])
        else:  # add to an object, replace
            target[key] = op["value"]
    return out


def merge_patch(obj: Obj, patch: Obj) -> Obj:
    out = dict(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        else:
            out[k] = v
    return out


def pending_job(running: Obj) -> Obj:
    """The same job waiting in Slurm's queue: PENDING, no nodes yet."""
    job = copy.deepcopy(running)
    job.update(job_state=["PENDING"], state_reason="Priority", nodes="", job_resources={})
    job["start_time"] = job["start_time"] | {"number": 0}
    return job


# ---- the stand-in API server -----------------------------------------------------------------------
@dataclass
class ApiServer:
    """Answers the operator's requests and plays the cluster's other writers; every change goes
    to the watch feeds as a JSON line, as the API server sends it."""

    feeds: dict[str, asyncio.Queue[bytes]] = field(default_factory=dict)
    lists_and_watches: Counter[str] = field(default_factory=Counter)  # the operator's, apart from ``requests``
    last_rv: int = 0
    objects: dict[str, Obj] = field(default_factory=dict)
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (who, verb, resource)
    unknown: list[str] = field(default_factory=list)
    events_sent: Counter[str] = field(default_factory=Counter)  # watch events by resource
    releases: Counter[str] = field(default_factory=Counter)  # pod name -> release patches
    later: Later = field(default_factory=Later)  # the other writers' steps
    options_recorded: int = 0  # PlaceholderJobs made with the options their spec was made from
    pod_annotations: dict[str, str] = field(default_factory=dict)  # on every pod the user creates
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _uid: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.feeds = {"pods": asyncio.Queue(), names.PLURAL: asyncio.Queue()}

    def _stamp(self, obj: Obj) -> Obj:
        self.last_rv = next(self._rv)
        obj["metadata"]["resourceVersion"] = str(self.last_rv)
        return obj

    def _emit(self, resource: str, etype: str, obj: Obj) -> None:
        self.events_sent[resource] += 1
        self.feeds[resource].put_nowait(json.dumps({"type": etype, "object": obj}).encode())

    # -- the other writers --
    @StandIn.timed
    def create_pod(self, name: str) -> None:
        self.requests[("user", "POST", "pods")] += 1
        pod = self._stamp(new_pod(name, f"pod-{next(self._uid):08d}", self.pod_annotations))
        self.objects[f"{POD_PREFIX}/{name}"] = pod
        self._emit("pods", "ADDED", pod)

    def _bind(self, path: str) -> None:
        pod = self.objects[path]
        node = pod["metadata"].get("annotations", {}).get(names.ANN_SLURM_NODE, NODES[0])
        self.requests[("extender", "POST", "pods/binding")] += 1
        self.requests[("kube-scheduler", "POST", "events")] += 1  # Scheduled
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                        "lastTransitionTime": "2026-11-23T00:00:01Z"}]  # fmt: skip
        self.objects[path] = self._stamp(pod)
        self._emit("pods", "MODIFIED", pod)
        self.later(lambda: self._kubelet_runs(path))

    def _kubelet_runs(self, path: str) -> None:
        self.requests[("kubelet", "PATCH", "pods/status")] += 1
        pod = copy.deepcopy(self.objects[path])
        pod["status"] = running_status(pod["spec"]["nodeName"])
        self.objects[path] = self._stamp(pod)
        self._emit("pods", "MODIFIED", pod)

    @StandIn.timed
    def delete_pod(self, name: str) -> None:
        """A user's delete: graceful (deletionTimestamp), then the kubelet's terminal phase and final
        delete; then the garbage collector deletes the pod's PlaceholderJob (its finalizer holds it)."""
        path = f"{POD_PREFIX}/{name}"
        self.requests[("user", "DELETE", "pods")] += 1
        pod = copy.deepcopy(self.objects[path])
        pod["metadata"]["deletionTimestamp"] = "2026-11-23T00:01:00Z"
        pod["metadata"]["deletionGracePeriodSeconds"] = 30
        self.objects[path] = self._stamp(pod)
        self._emit("pods", "MODIFIED", pod)

        def gone() -> None:
            # As a kubelet (>= 1.27) ends a deleted pod: the terminal phase first, then the delete.
            self.requests[("kubelet", "PATCH", "pods/status")] += 1
            ended = copy.deepcopy(self.objects[path])
            ended["status"] = {**ended.get("status", {}), "phase": "Failed"}
            self.objects[path] = self._stamp(ended)
            self._emit("pods", "MODIFIED", ended)
            self.requests[("kubelet", "DELETE", "pods")] += 1
            dead = self._stamp(copy.deepcopy(self.objects.pop(path)))
            self._emit("pods", "DELETED", dead)
            self.later(lambda: self._collect(name))

        self.later(gone)

    def _collect(self, owner: str) -> None:
        path = f"{PHJ_PREFIX}/{owner}"
        phj = self.objects.get(path)
        if phj is None:
            return
        self.requests[("garbage-collector", "DELETE", names.PLURAL)] += 1
        phj = copy.deepcopy(phj)
        # As the API server marks an object with finalizers and no graceful deletion (a custom
        # resource) deleted: the deletion timestamp, a zero grace period, the generation bumped.
        meta = phj["metadata"]
        meta |= {"deletionTimestamp": "2026-11-23T00:01:01Z", "deletionGracePeriodSeconds": 0}
        meta["generation"] = meta.get("generation", 0) + 1
        self.objects[path] = self._stamp(phj)
        self._emit(names.PLURAL, "MODIFIED", phj)

    # -- the operator's requests --
    @StandIn.timed
    def handle(self, method: str, path: str, data: bytes | None, content_type: str | None) -> tuple[int, bytes]:
        path = path.split("?", 1)[0]
        if method == "GET" and path in COLLECTIONS:
            return self._list(COLLECTIONS[path])
        body = json.loads(data) if data else None
        base = path.removesuffix("/status")
        resource = "pods" if base.startswith(POD_PREFIX) else names.PLURAL if base.startswith(PHJ_PREFIX) else ""
        if path.startswith(f"/api/v1/namespaces/{NAMESPACE}/events"):
            resource = "events"
        self.requests[(OPERATOR, method, resource + ("/status" if path.endswith("/status") else ""))] += 1
        if resource == "events" and method == "POST":
            return 201, json.dumps(body).encode()
        if method == "POST" and base == PHJ_PREFIX:
            return self._create_phj(body or {})
        if method == "GET":
            obj = self.objects.get(base)
            return (200, json.dumps(obj).encode()) if obj is not None else (404, b'{"reason":"NotFound"}')
        if method == "PATCH" and base in self.objects:
            return self._patch(base, resource, body, content_type or "", bool(path.endswith("/status")))
        if method == "PATCH" and resource:
            return 404, b'{"reason":"NotFound"}'  # gone meanwhile (e.g. a finalizer removed twice)
        self.unknown.append(f"{method} {path}")
        return 404, b'{"reason":"NotFound","message":"not in the replay"}'

    def _list(self, resource: str) -> tuple[int, bytes]:
        """A LIST across namespaces, in one page (the replay's objects are made after it)."""
        self.lists_and_watches[f"LIST {resource}"] += 1
        prefix = POD_PREFIX if resource == "pods" else PHJ_PREFIX
        kind, api_version = ("PodList", "v1") if resource == "pods" else (f"{names.KIND}List", names.API_VERSION)
        items = [o for p, o in self.objects.items() if p.startswith(prefix + "/")]
        return 200, json.dumps({"kind": kind, "apiVersion": api_version, "items": items,
                                "metadata": {"resourceVersion": str(self.last_rv)}}).encode()  # fmt: skip

    def _create_phj(self, body: Obj) -> tuple[int, bytes]:
        meta = body["metadata"]
        path = f"{PHJ_PREFIX}/{meta['name']}"
        if path in self.objects:
            return 409, b'{"reason":"AlreadyExists"}'
        obj = copy.deepcopy(body)
        self.options_recorded += names.ANN_JOB_OPTIONS in (meta.get("annotations") or {})
        obj["metadata"] |= {"uid": f"phj-{next(self._uid):08d}", "generation": 1,
                            "creationTimestamp": "2026-11-23T00:00:00Z",
                            "managedFields": managed_fields("slurm-bridge-operator", ["pods", "slurm"])}  # fmt: skip
        self.objects[path] = self._stamp(obj)
        self._emit(names.PLURAL, "ADDED", obj)
        return 201, json.dumps(obj).encode()

    def _patch(self, path: str, resource: str, body: Any, content_type: str, status: bool) -> tuple[int, bytes]:
        cur = self.objects[path]
        if "json-patch" in content_type:
            new = json_patch(cur, body)
            if new is None:
                return 422, b'{"reason":"Invalid","message":"test failed"}'
        elif status:
            new = dict(cur) | {"status": merge_patch(cur.get("status") or {}, body.get("status") or {})}
        else:
            new = merge_patch(cur, body)
        if resource == names.PLURAL and not status and new.get("spec") != cur.get("spec"):
            # A custom resource's generation counts its spec's changes (the spec-update check reads it).
            new["metadata"] = {**new["metadata"], "generation": new["metadata"].get("generation", 0) + 1}
        if resource == "pods" and cur["spec"].get("schedulingGates") and not new["spec"].get("schedulingGates"):
            self.releases[cur["metadata"]["name"]] += 1
            self.later(lambda: self._bind(path))
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self.objects[path]
            self._emit(resource, "DELETED", self._stamp(new))
            return 200, json.dumps(new).encode()
        self.objects[path] = self._stamp(new)
        self._emit(resource, "MODIFIED", new)
        return 200, json.dumps(new).encode()


class ReplayKube(KubeClient):
    """The operator's Kubernetes client with the stand-in server behind it: the request bodies are
    encoded and the answers decoded as on the cluster, only the HTTP exchange is skipped."""

    def __init__(self, server: ApiServer) -> None:
        super().__init__("https://replay.invalid", component="slurm-bridge-operator")
        self.api = server

    async def _send(
        self, method: str, path: str, data: bytes | None, params: dict[str, str] | None, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        return self.api.handle(method, path, data, headers.get("Content-Type"))

    async def _stream(
        self, path: str, params: dict[str, str], read_timeout: float, accept: str | None = None
    ) -> AsyncGenerator[bytes, None]:
        """The watch's body: the stand-in's JSON lines, as many as are waiting per chunk (what one
        read of the socket returns when the reader is behind)."""
        resource = COLLECTIONS[path]
        self.api.lists_and_watches[f"WATCH {resource}"] += 1
        feed = self.api.feeds[resource]
        while True:
            lines = [await feed.get()]
            while not feed.empty():
                lines.append(feed.get_nowait())
            yield b"\n".join(lines) + b"\n"


class ReplaySlurm:
    """slurmrestd's answers to the operator's per-pod calls, recorded by kind, and slurmctld's
    notices of each job's start and end (its PrologSlurmctld and EpilogSlurmctld hook)."""

    def __init__(self) -> None:
        self.next_id = itertools.count(1)
        self.jobs: dict[int, Obj] = {}
        self.calls: Counter[str] = Counter()
        self.unknown: list[str] = []
        self.later = Later()  # Slurm's steps: a queued job's start, the hook's notices
        # Slurm's hook sends a notice of each start and end (``slurm-bridge-notify.sh``): the
        # replay sets this to the operator's handler of ``POST /slurm/hook``.
        self.notify: Callable[[int, str], object] | None = None
        self.notices: Counter[str] = Counter()  # sent, by event
        # Cancels of a job that carried the released mark (its admin_comment) by then, and of one
        # that did not (the handoff's EpilogSlurmctld would hold its nodes).
        self.cancels: Counter[str] = Counter()

    @StandIn.timed
    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix(f"/slurm/{SLURM_API}/")
        kind = f"{request.method} {path.rstrip('0123456789')}{'{id}' if path[-1:].isdigit() else ''}"
        self.calls[kind] += 1
        meta = {"meta": {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld"},
                         "slurm": {"version": {"major": "25", "minor": "11", "micro": "0"}, "release": "25.11.0"}},
                "errors": [], "warnings": []}  # fmt: skip
        if request.method == "POST" and path == "job/allocate":
            job = json.loads(request.content)["job"]
            job_id = next(self.next_id)
            self.jobs[job_id] = slurm_job(job_id, job.get("name", ""), job.get("admin_comment", ""),
                                          NODES[job_id % len(NODES)], job.get("comment", ""))  # fmt: skip
            self.later(lambda: self._notice(job_id, "started"))  # its PrologSlurmctld, after the answer
            return httpx.Response(200, json=meta | {"job_id": job_id, "job_submit_user_msg": ""})
        if request.method == "POST" and path == "job/submit":
            job = json.loads(request.content)["job"]
            job_id = next(self.next_id)
            running = slurm_job(job_id, job.get("name", ""), job.get("admin_comment", ""), NODES[job_id % len(NODES)],
                                job.get("comment", ""))  # fmt: skip
            self.jobs[job_id] = pending_job(running)
            self.later(lambda: self._start(job_id, running), turns=2)  # Slurm's scheduler, a little later
            return httpx.Response(200, json=meta | {"job_id": job_id, "step_id": "batch", "job_submit_user_msg": ""})
        if request.method == "GET" and path == "partitions/":
            # The partitions' flags, read before a job goes with the bridge's token (a group-only
            # job, this replay's queued path: rules/partitionaccess.py); kept 30 s by the operator.
            partition = {"name": "slurm-bridge", "flags": ["DEFAULT"]}
            return httpx.Response(200, json=meta | {"partitions": [partition], "last_update": {}})
        if request.method == "DELETE" and path == "jobs/":  # cancels that came together (slurmjobs/cancels.py)
            for job_id in (int(j) for j in json.loads(request.content)["jobs"]):
                self._cancel(job_id)
            return httpx.Response(200, json=meta | {"status": []})
        if path.startswith("job/") and path[4:].isdigit():
            job_id = int(path[4:])
            found = self.jobs.get(job_id)
            if request.method == "GET" and found is not None:
                return httpx.Response(200, json=meta | {"jobs": [found], "last_backfill": {}, "last_update": {}})
            if request.method == "DELETE":
                self._cancel(job_id)
                return httpx.Response(200, json=meta | {"status": []})
            if request.method == "POST" and found is not None:
                # A job update: the released mark before the bridge's own cancel (a bare
                # job_desc_msg setting admin_comment and comment, slurm/bodies.py). Slurm applies it;
                # slurmrestd answers no per-job results for a job that is not an array ("results": null).
                update = json.loads(request.content)
                if set(update) != {"admin_comment", "comment"}:
                    self.unknown.append(f"{kind} {sorted(update)}")
                self.jobs[job_id] = found | update
                return httpx.Response(200, json=meta | {"results": None})
        self.unknown.append(kind)
        return httpx.Response(404, text="Unable to find requested URL endpoint.")

    def _cancel(self, job_id: int) -> None:
        found = self.jobs.get(job_id)
        if found is not None:  # forgotten at once: nothing reads an ended job, and Slurm's records
            # kept would be garbage the operator's collections walk through
            self.cancels["marked" if is_released(found["admin_comment"]) else "unmarked"] += 1
            del self.jobs[job_id]
            self.later(lambda: self._notice(job_id, "ended", found))  # its EpilogSlurmctld

    def _start(self, job_id: int, running: Obj) -> None:
        found = self.jobs.get(job_id)
        if found is not None and found["job_state"] == ["PENDING"]:
            self.jobs[job_id] = running | {"admin_comment": found["admin_comment"], "comment": found["comment"]}
            self._notice(job_id, "started")

    def _notice(self, job_id: int, event: str, job: Obj | None = None) -> None:
        """The hook's notice, unless the job's comment says the bridge needs none (its test)."""
        if not told_of(str((job or self.jobs.get(job_id) or {}).get("comment", "")), event):
            return
        self.notices[event] += 1
        if self.notify is not None:
            self.notify(job_id, event)


@dataclass
class HookRequest:
    """slurmctld's notice as the operator's handler of ``POST /slurm/hook`` reads it: the headers
    ``slurm-bridge-notify.sh`` sends and its JSON body (aiohttp's own parsing of the request is
    the HTTP exchange, not replayed; ``json`` decodes the body as ``aiohttp.web.Request.json`` does)."""

    headers: dict[str, str]
    body: bytes

    @property
    def content_length(self) -> int:
        return len(self.body)

    async def read(self) -> bytes:
        return self.body

    async def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


# ---- feeding the watch events ------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def operator_watches(server: ApiServer, ctrl: Controller, kube: ReplayKube) -> AsyncIterator[None]:
    """The operator's own watches (operator/wiring/watches.py), up once their first lists are in."""
    watches = HotWatches(kube, ctrl)
    watches.start()
    try:
        await asyncio.wait_for(watches.wait_synced(), 10)
        yield
    finally:
        await watches.stop()


async def feed_direct(server: ApiServer, ctrl: Controller, resource: str) -> None:
    """The events straight to the controller's handlers, each line decoded with ``json``."""
    handler = ctrl.on_pod_event if resource == "pods" else ctrl.on_phj_event
    feed = server.feeds[resource]
    while True:
        event = json.loads((await feed.get()).decode("utf-8"))
        if event.get("object"):
            handler(event.get("type") or "ADDED", dict(event["object"]))


@contextlib.asynccontextmanager
async def kopf_watchers(server: ApiServer, ctrl: Controller) -> AsyncIterator[None]:
    """kopf's per-event machinery, as ``kopf.operator`` runs it for each watched resource, with
    the watch stream replaced by the feeds (kopf's JSON decoding of each line kept), and the two
    event handlers the operator registered with kopf until issue 24."""
    import kopf
    from kopf._cogs.clients import watching
    from kopf._cogs.structs import ephemera, references
    from kopf._core.actions import lifecycles
    from kopf._core.engines import indexing
    from kopf._core.reactor import inventory, processing, queueing

    from slurm_bridge.operator.wiring.kopfsetup import configure_kopf

    registry = kopf.OperatorRegistry()

    @kopf.on.event("v1", "pods", registry=registry)
    async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("object"):
            ctrl.on_pod_event(event.get("type") or "ADDED", dict(event["object"]))

    @kopf.on.event(names.GROUP, names.VERSION, names.PLURAL, registry=registry)
    async def phj_event(event: kopf.RawEvent, **_: Any) -> None:
        if event.get("object"):
            ctrl.on_phj_event(event.get("type") or "ADDED", dict(event["object"]))

    settings = kopf.OperatorSettings()
    configure_kopf(settings)
    # kopf's worker for an object kept its last event 0.5 s after it, not 5 s, while kopf watched
    # pods and PlaceholderJobs (bench/log, run 11): the replay's kopf mode as it ran then.
    settings.queueing.idle_timeout = 0.5
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    common: dict[str, Any] = dict(lifecycle=lifecycles.get_default_lifecycle(), registry=registry,
                                  settings=settings, indexers=indexers, memories=inventory.ResourceMemories(),
                                  memobase=ephemera.AnyMemo(ephemera.Memo()), event_queue=asyncio.Queue())  # fmt: skip
    resources = {
        "pods": references.Resource("", "v1", "pods", kind="Pod", singular="pod", namespaced=True,
                                    verbs=frozenset({"list", "watch", "patch"})),
        names.PLURAL: references.Resource(names.GROUP, names.VERSION, names.PLURAL, kind=names.KIND,
                                          singular=names.KIND.lower(), namespaced=True,
                                          verbs=frozenset({"list", "watch", "patch"})),
    }  # fmt: skip
    by_resource = {r: name for name, r in resources.items()}

    async def stream(*, resource: references.Resource, **_: Any) -> AsyncIterator[Any]:
        feed = server.feeds[by_resource[resource]]
        while True:
            yield json.loads((await feed.get()).decode("utf-8"))  # as kopf's api.stream does

    original = watching.infinite_watch
    watching.infinite_watch = stream
    tasks = [
        asyncio.create_task(queueing.watcher(
            namespace=None, settings=settings, resource=r,
            processor=functools.partial(processing.process_resource_event, resource=r, **common)))
        for r in resources.values()
    ]  # fmt: skip
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await t
        watching.infinite_watch = original


# ---- one replay ----------------------------------------------------------------------------------------
@dataclass
class Result:
    pods: int
    mode: str
    path: str
    cpu_ms: dict[str, float]  # phase -> the operator's CPU milliseconds (process time) for all pods
    standin_ms: dict[str, float]  # phase -> the stand-ins' CPU milliseconds (subtracted from cpu_ms)
    events: dict[str, int]  # watch events delivered, by resource
    placed_events: dict[str, int]  # the same until every pod runs
    reconciles: Counter[str]
    requests: dict[str, int]  # "who VERB resource" -> count (Kubernetes), over both phases
    placed_requests: dict[str, int]  # the same until every pod runs
    slurm: dict[str, int]
    released: Counter[str]
    unknown: list[str]
    phases: Counter[str]  # the PlaceholderJobs' phases once every pod runs
    notices: dict[str, int]  # slurmctld's hook's notices sent, by event (started, ended)
    hook_answers: dict[int, int]  # the operator's answers to them, by HTTP status (202: read, 200: no news)
    hints_read: int  # notices that were news and had their job read (a queued job's start)
    cancels: dict[str, int]  # the bridge's cancels of live jobs: "marked" released first, or "unmarked"
    spec_checks: dict[str, int]  # the spec-update checks: "pod"/"phj", and "... changed" when one found a change
    options_recorded: int  # PlaceholderJobs made with the options their spec was made from
    left: list[str]  # objects left after every pod's end (none expected)


async def _quiet(
    server: ApiServer,
    slurm: ReplaySlurm,
    ctrl: Controller,
    kube: ReplayKube,
    delivered: Counter[str],
    notices: set[asyncio.Task[None]],
    deadline: float,
) -> None:
    """Until every watch event was handled and nothing is queued, in flight or scheduled: the
    other writers' steps, Slurm's (a start, a notice), the notices' handling and their reads
    (``kube``: the controller's, whose Events may still be in flight)."""
    still = 0
    while still < 3:
        await asyncio.sleep(0.001)
        done = (
            server.later.pending == 0
            and slurm.later.pending == 0
            and not notices
            and ctrl.hints.in_flight == 0
            and sum(delivered.values()) == sum(server.events_sent.values())
            and ctrl.queue.idle
            and not kube._event_tasks
        )
        still = still + 1 if done else 0
        if time.monotonic() > deadline:
            raise TimeoutError(f"the replay did not settle: sent {dict(server.events_sent)}, "
                               f"handled {dict(delivered)}, queue {len(ctrl.queue)}, "
                               f"other writers' steps {server.later.pending}, Slurm's {slurm.later.pending}, "
                               f"notices {len(notices)}, hinted reads {ctrl.hints.in_flight}")  # fmt: skip


@contextlib.contextmanager
def counted_spec_checks(ctrl: Controller, checks: Counter[str]) -> Iterator[None]:
    """Count the spec-update checks as they run: a member's pod event asks whether its slurmjob
    annotations changed (``members.own_options_changed``), a PlaceholderJob reconcile whether its
    spec's generation is past the observed one and reads what an update is decided on if so
    (``JobUpdates.inputs``)."""
    own_options_changed, inputs = membership.own_options_changed, ctrl.jobs.updates.inputs

    def pod_check(pod: Obj, phj: PlaceholderJob) -> bool:
        changed = own_options_changed(pod, phj)
        checks["pod changed" if changed else "pod"] += 1
        return changed

    async def phj_check(
        phj: PlaceholderJob, slurm: SlurmSide, held: Held | None = None
    ) -> tuple[JobSettings | None, dict[str, PartitionLimits] | None]:
        settings, partitions = await inputs(phj, slurm, held)
        checks["phj changed" if settings is not None or partitions is not None else "phj"] += 1
        return settings, partitions

    membership.own_options_changed = pod_check
    ctrl.jobs.updates.inputs = phj_check  # type: ignore[method-assign]
    try:
        yield
    finally:
        membership.own_options_changed = own_options_changed


async def replay(
    pods: int, mode: str, profile: cProfile.Profile | None = None, settle_seconds: float = 120, path: str = "placed"
) -> Result:
    server = ApiServer(pod_annotations=PATHS[path])
    slurm_api = ReplaySlurm()
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp, "jwt")
        await asyncio.to_thread(token.write_text, "replay.jwt.token\n")
        slurm = SlurmClient("http://slurmrestd.invalid:6820", token, api_version=SLURM_API,
                            transport=httpx.MockTransport(slurm_api))  # fmt: skip
        kube = ReplayKube(server)
        hook_token = Path(tmp, "slurm-hook-token")
        await asyncio.to_thread(hook_token.write_text, HOOK_TOKEN + "\n")
        config = Config(managedNamespaces=[NAMESPACE], slurmHookTokenFile=hook_token)
        # No node controller here: Slurm's nodes are not known (a topology gang or an exclusive job
        # under a CPU cap waits); nor is the bridge's Slurm user (a signed start waits for its read).
        ctrl = Controller(config, kube, slurm, nodes=NodesNotRead(), own_user=user_not_known)
        # The poller's first full list is done (an empty Slurm); it is not started: polls cost
        # per second, not per pod. Slurm's settings are read (the local cluster's).
        ctrl.poller.snapshot = JobSnapshot({}, {}, time.monotonic())
        ctrl.poller.synced.set()
        ctrl.policy.current = LOCAL_POLICY
        # slurmctld's hook reaches the leader's handler of POST /slurm/hook (operator/wiring/health.py).
        elector = LeaderElector(kube, NAMESPACE, f"{config.bridgeId}-operator")
        elector.is_leader.set()
        hook = slurm_hook(ctrl.hints, elector, HookToken(hook_token))
        hook_answers: Counter[int] = Counter()
        notices: set[asyncio.Task[None]] = set()

        async def answer(request: HookRequest) -> None:
            hook_answers[(await hook(request)).status] += 1

        def notify(job_id: int, event: str) -> None:
            # As slurm-bridge-notify.sh sends it: signed, and a start says where, when and whose.
            now = int(time.time())
            said: Obj = {"event": event, "jobId": job_id, "time": now}
            job = slurm_api.jobs.get(job_id)
            if event == "started" and job is not None:
                said |= {"nodes": job["nodes"], "partition": job["partition"], "startTime": now}
                said |= {"user": job["user_name"], "uid": job["user_id"], "group": job["group_name"]}
                said |= {"gid": job["group_id"], "account": job["account"], "qos": job["qos"]}
            body = json.dumps(said, separators=(",", ":")).encode()
            signature = hmac.new(HOOK_TOKEN.encode(), body, hashlib.sha256).hexdigest()
            headers = {SIGNATURE_HEADER: f"sha256={signature}", "Content-Type": "application/json"}
            task = asyncio.create_task(answer(HookRequest(headers, body)))
            notices.add(task)
            task.add_done_callback(notices.discard)

        slurm_api.notify = notify
        spec_checks: Counter[str] = Counter()
        delivered: Counter[str] = Counter()
        reconciles: Counter[str] = Counter()
        on_pod, on_phj, handle = ctrl.on_pod_event, ctrl.on_phj_event, ctrl.queue._handler

        def pod_event(etype: str, pod: Obj) -> None:
            delivered["pods"] += 1
            on_pod(etype, pod)

        def phj_event(etype: str, phj: Obj) -> None:
            delivered[names.PLURAL] += 1
            on_phj(etype, phj)

        async def counted(item: Any) -> float | None:
            reconciles[item.kind] += 1
            return await handle(item)

        ctrl.on_pod_event, ctrl.on_phj_event = pod_event, phj_event  # type: ignore[method-assign]
        ctrl.queue._handler = counted
        ctrl.queue.start()
        cpu: dict[str, float] = {}
        standin: dict[str, float] = {}
        async with contextlib.AsyncExitStack() as stack:
            stack.enter_context(counted_spec_checks(ctrl, spec_checks))
            if mode == "watch":
                await stack.enter_async_context(operator_watches(server, ctrl, kube))
            elif mode == "kopf":
                await stack.enter_async_context(kopf_watchers(server, ctrl))
            else:
                feeders = [asyncio.create_task(feed_direct(server, ctrl, r)) for r in server.feeds]
                stack.callback(lambda: [t.cancel() for t in feeders])
            await asyncio.sleep(0.01)  # the watchers are up
            deadline = time.monotonic() + settle_seconds
            if profile is not None:
                profile.enable()

            async def phase(name: str, act: Callable[[str], object]) -> None:
                """Act on every pod, wait until all is quiet; the operator's CPU, stand-ins' apart."""
                t0, s0 = time.process_time(), StandIn.seconds
                for i in range(pods):
                    act(f"b{i:04d}")
                await _quiet(server, slurm_api, ctrl, kube, delivered, notices, deadline)
                cpu[name] = (time.process_time() - t0 - (StandIn.seconds - s0)) * 1000
                standin[name] = (StandIn.seconds - s0) * 1000

            await phase("place", server.create_pod)
            placed, placed_events = dict(server.requests), dict(delivered)
            phases = Counter(o.get("status", {}).get("phase", "-") for p, o in server.objects.items()
                             if p.startswith(PHJ_PREFIX))  # fmt: skip
            await phase("end", server.delete_pod)
            if profile is not None:
                profile.disable()
        await ctrl.queue.stop()
        await ctrl.hints.stop()
        await kube.aclose()
        await slurm.aclose()
    return Result(
        pods=pods, mode=mode, path=path, cpu_ms=cpu, standin_ms=standin, events=dict(delivered),
        placed_events=placed_events,
        reconciles=reconciles, left=sorted(server.objects),
        requests={" ".join(k): n for k, n in sorted(server.requests.items())},
        placed_requests={" ".join(k): n for k, n in sorted(placed.items())},
        slurm=dict(slurm_api.calls), released=server.releases, unknown=server.unknown + slurm_api.unknown,
        phases=phases, notices=dict(slurm_api.notices), hook_answers=dict(hook_answers), hints_read=ctrl.hints.read,
        cancels=dict(slurm_api.cancels), spec_checks=dict(spec_checks), options_recorded=server.options_recorded,
    )  # fmt: skip


def quiet_logs() -> None:
    """The operator's logging as it runs (JSON at INFO), written nowhere."""
    logs.setup_logging("INFO", "json")
    logging.getLogger().handlers[0].stream = io.StringIO()  # type: ignore[attr-defined]


def per_pod(counts: dict[str, int], pods: int) -> dict[str, float]:
    return {k: round(n / pods, 2) for k, n in counts.items()}


def summary(runs: list[Result]) -> dict[str, Any]:
    r, n = runs[-1], runs[-1].pods
    per = {phase: sorted(x.cpu_ms[phase] / n for x in runs) for phase in ("place", "end")}
    total = sorted((x.cpu_ms["place"] + x.cpu_ms["end"]) / n for x in runs)
    placed_writes = {k: v for k, v in r.placed_requests.items() if k.split()[1] not in ("GET", "LIST", "WATCH")}
    return {
        "mode": r.mode, "path": r.path, "pods": n, "runs": len(runs),
        "cpu_ms_per_pod": {ph: {"min": round(v[0], 3), "median": round(statistics.median(v), 3),
                                "max": round(v[-1], 3)} for ph, v in (*per.items(), ("total", total))},
        "standin_cpu_ms_per_pod_subtracted": {ph: round(statistics.median(x.standin_ms[ph] for x in runs) / n, 3)
                                              for ph in ("place", "end")},
        "watch_events_per_pod_placed": per_pod(r.placed_events, n),
        "watch_events_per_pod": per_pod(r.events, n) | {"total": round(sum(r.events.values()) / n, 2)},
        "reconciles_per_pod": per_pod(dict(r.reconciles), n),
        "api_writes_per_pod_placed": round(sum(placed_writes.values()) / n, 2),
        "api_requests_per_pod_placed": per_pod(r.placed_requests, n),
        "api_requests_per_pod_whole_life": per_pod(r.requests, n),
        "slurm_calls_per_pod": per_pod(r.slurm, n),
        "slurm_notices_per_pod": per_pod(r.notices, n) | {"read": round(r.hints_read / n, 2)},
        "spec_update_checks_per_pod": per_pod(r.spec_checks, n),
    }  # fmt: skip


def print_summary(s: dict[str, Any]) -> None:
    c = s["cpu_ms_per_pod"]
    print(f"== {s['mode']}, {s['path']}: {s['pods']} pods, {s['runs']} runs ==")
    for ph, label in (("place", "create -> running"), ("end", "delete -> finalized"), ("total", "whole life")):
        print(f"  CPU ms per pod, {label:20} min {c[ph]['min']:7.3f}  median {c[ph]['median']:7.3f}  "
              f"max {c[ph]['max']:7.3f}")  # fmt: skip
    print(f"  (the stand-ins' own CPU, subtracted: {s['standin_cpu_ms_per_pod_subtracted']} ms per pod)")
    print(
        f"  watch events per pod until it runs: {s['watch_events_per_pod_placed']}; "
        f"whole life: {s['watch_events_per_pod']}"
    )
    print(f"  reconciles per pod (work items): {s['reconciles_per_pod']}")
    print(f"  API writes per pod until it runs: {s['api_writes_per_pod_placed']} (who, verb, resource):")
    for k, v in s["api_requests_per_pod_placed"].items():
        print(f"    {k:45} {v}")
    print("  API requests per pod, whole life (the operator's own: 'operator ...'):")
    for k, v in s["api_requests_per_pod_whole_life"].items():
        print(f"    {k:45} {v}")
    print(f"  Slurm calls per pod: {s['slurm_calls_per_pod']}")
    print(f"  slurmctld's notices per pod (through the operator's hook handler): {s['slurm_notices_per_pod']}")
    print(f"  spec-update checks per pod (none found a change): {s['spec_update_checks_per_pod']}")


def check(r: Result) -> list[str]:
    """What must hold for the replay to measure the operator's usual path."""
    problems = []
    if r.unknown:
        problems.append(f"requests the replay does not answer: {sorted(set(r.unknown))}")
    if r.phases != Counter({names.PHASE_RUNNING: r.pods}):
        problems.append(f"PlaceholderJob phases once the pods run: {dict(r.phases)}")
    if sorted(r.released.values()) != [1] * r.pods:
        problems.append(f"pods not released exactly once: {r.pods - len(r.released)} never, "
                        f"{sum(1 for v in r.released.values() if v > 1)} more than once")  # fmt: skip
    if r.left:
        problems.append(f"objects left after the pods ended: {r.left[:5]}")
    made = "POST job/submit" if r.path == "queued" else "POST job/allocate"
    if r.slurm.get(made) != r.pods:
        problems.append(f"{made}: {r.slurm.get(made)} for {r.pods} pods")
    # One read per pod: the allocation's read back, or the read that confirms a queued job's start
    # notice; a read for a spec update, or of a notice that was no news, would be more.
    if r.slurm.get("GET job/{id}") != r.pods:
        problems.append(f"GET job/{{id}}: {r.slurm.get('GET job/{id}')} for {r.pods} pods")
    if r.slurm.get("POST job/{id}") != r.pods:  # the released mark: one per job
        problems.append(f"POST job/{{id}}: {r.slurm.get('POST job/{id}')} for {r.pods} pods")
    # The cancels: one call per job at most (those that come together go in one, DELETE jobs/); that
    # each job was cancelled once, marked released first, is the cancels' check below.
    cancel_calls = r.slurm.get("DELETE job/{id}", 0) + r.slurm.get("DELETE jobs/", 0)
    if not 0 < cancel_calls <= r.pods:
        problems.append(f"cancel calls: {cancel_calls} for {r.pods} pods")
    if r.cancels != {"marked": r.pods}:
        problems.append(f"jobs cancelled with and without the released mark first: {r.cancels} for {r.pods} pods")
    # The hook tells only of a queued job's start: an allocated job's start is in the allocation's
    # answer, and the bridge ends each job itself (its comment says so, slurm-bridge-notify.sh).
    news = r.pods if r.path == "queued" else 0
    if r.notices != ({"started": news} if news else {}):
        problems.append(f"slurmctld's notices: {r.notices} for {r.pods} pods")
    if r.hook_answers != ({202: news} if news else {}):
        problems.append(f"the hook's answers to the notices: {r.hook_answers} (202: news, read; 200: no news)")
    if r.hints_read != news:
        problems.append(f"jobs read after the hook's notice: {r.hints_read} for {r.pods} pods")
    if r.options_recorded != r.pods:
        problems.append(f"PlaceholderJobs made with their options recorded: {r.options_recorded} of {r.pods}")
    if set(r.spec_checks) != {"pod", "phj"} or r.spec_checks["pod"] < r.pods:
        problems.append(f"spec-update checks: {r.spec_checks} (each pod's events after it joined, each reconcile)")
    if r.reconciles.get("options"):
        problems.append(f"options reconciles: {r.reconciles['options']} (no annotation changed)")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5, help="replays per mode (min and median are printed)")
    ap.add_argument("--mode", choices=(*MODES, "all"), default="watch",
                    help="watch: the operator's watches (its path); direct: decoded events to the handlers; "
                         "kopf: through kopf's per-event processing (the path until issue 24)")  # fmt: skip
    ap.add_argument("--path", choices=tuple(PATHS), default="placed",
                    help="placed: allocated in the call, read back; queued: submitted, started, read on the hook's "
                         "start notice (both: the released mark, the cancel, the start and end notices)")  # fmt: skip
    ap.add_argument("--profile", action="store_true", help="cProfile one replay (the first mode) and print the top 20")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    quiet_logs()
    lifecycle_unwritten = lifecycle.UNWRITTEN_SECONDS  # the 10 s re-check stays outside the replay
    assert lifecycle_unwritten > 5
    modes = list(MODES) if args.mode == "all" else [args.mode]
    if args.profile:
        prof = cProfile.Profile()
        r = asyncio.run(replay(args.pods, modes[0], prof, path=args.path))
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
        print(f"cProfile of one replay ({r.mode}, {r.pods} pods; CPU under the profiler is inflated), by own time:")
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
        print("by cumulative time:")
        print(out.getvalue())
        return
    results = {}
    for mode in modes:
        asyncio.run(replay(min(args.pods, 20), mode, path=args.path))  # warm-up: imports, caches
        runs = [asyncio.run(replay(args.pods, mode, path=args.path)) for _ in range(args.reps)]
        for i, run in enumerate(runs, 1):
            problems = check(run)
            if problems:
                raise SystemExit(f"{mode}, replay {i}: the replay went off the usual path: " + "; ".join(problems))
        results[mode] = summary(runs)
    for mode, base in (("watch", "direct"), ("kopf", "direct")):
        if mode in results and base in results:
            k, d = results[mode]["cpu_ms_per_pod"], results[base]["cpu_ms_per_pod"]
            results[f"{mode}_share_ms_per_pod"] = {ph: round(k[ph]["median"] - d[ph]["median"], 3) for ph in k}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for mode in modes:
        print_summary(results[mode])
    if "watch_share_ms_per_pod" in results:
        print(f"watch - direct, median ms per pod: {results['watch_share_ms_per_pod']} (the operator's watch loop)")
    if "kopf_share_ms_per_pod" in results:
        print(
            f"kopf - direct, median ms per pod: {results['kopf_share_ms_per_pod']} (kopf's per-event machinery, "
            "and the reconciles its later delivery does not merge; until the pods run both take the same path)"
        )
    print(
        "Not included: HTTP transports (aiohttp, httpx's), Slurm polls and the handoff loop's passes, the 10 s "
        "re-check of a released pod, leader election, the webhook/extender/scheduler processes.",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
