"""Benchmark: pod-created-to-bound latency through the bridge, beside the default scheduler.

Creates N pods in a managed namespace (bridge: webhook -> PlaceholderJob -> Slurm external job ->
extender bind) and N pods in an unmanaged namespace (default-scheduler), in the same run on the
local cluster, and prints p50/p99 latency, pods bound per second (and the bridge's ratio to the
default scheduler), Slurm REST calls per pod and per poll period, API-server writes per pod by
verb and resource (the API server's own counters, background subtracted), and the CPU and peak
memory of every local process during each run (sysstats.py): CPU % of a core, and CPU
milliseconds per pod of each process and of the whole machine, bridge beside default, with the
ratio of the machine's CPU per bridge pod to its CPU per default pod (issue 24: <= 2), and how long
each process waited for a core. For the process bridge it also prints where a create through the
webhook waited: the API server's time per webhook call against the webhook's own per review.

    .venv/bin/python bench/pipeline_latency.py [--pods 200] [--rates 20,0] [--concurrency 16]
        [--default-client stock|bridge|QPS/BURST]

The CPU figures (sysstats.py): the machine's busy time without steal (steal reported apart), less
an idle baseline (the machine's CPU per second with nothing submitted, measured before the runs,
over the same window as the API server's background), and each process's own CPU apart from its
children's; the machine's CPU a bridge pod adds over a default pod's, and kube-apiserver's ratio.
Every run records the default scheduler's API client (qps and burst, read from each scheduler's
/configz) and the API server's open pod watches. The cluster's default kube-scheduler runs with
the stock client settings (50/100), the bridge's at 200/400; ``--default-client bridge`` (or
QPS/BURST) places the default scheduler's pods with a second default kube-scheduler at those
settings that the bench starts and stops (schedclient.py): the fair CPU comparison, without
restarting the cluster's own scheduler.

Each rate is one run of both schedulers. A rate R > 0 creates pods at R per second (open-loop
arrivals): its latencies are those of a bridge keeping up with R new pods per second, and its
pods/s shows whether it keeps up. Rate 0 creates all pods at once: the burst shows the
pipeline's peak throughput, and its latencies are mostly queueing behind the burst. The default
runs 20/s (the throughput target as arrival rate) and then a burst. It ends with docs/performance.md's
tables for the run, in the page's shape (bench/pagetables.py; on standard error with --json), and
the targets in force (issues 15, 24, 31 and 39; ``verdict``).

Issue 31's profiles, each beside the same default-scheduler run:

- ``--tenant``: the bridge's pods run again in a namespace under a TenantPolicy (every pod names a
  user), a row of their own beside the plain bridge pods;
- ``--busy N``: the bridge's partition holds N waiting jobs of higher priority (profiles.py), so
  Slurm refuses every immediate allocation and each bridge pod goes through its queue;
- the idle-queued profile: the bridge started with ``SB_IMMEDIATE_ALLOCATION=false`` (every job
  queued).

For the process bridge each bridge row also gets its breakdown (starts.py): for each pod the
submit call, Slurm's start (slurmctld's log), when the operator read the job running (and
whether after slurmctld's hook told it), its release, the gate's removal, the bind and the
Running status, as p50 / p99 of each step.

Needs the local cluster and bridge (`hack/cluster.sh up && hack/bridge.sh up`). With --deployed it
measures the chart-installed bridge instead (`hack/deploy.sh install`): the leader's /stats on its
pod address, and every component's CPU and memory from the real node's kubelet, idle and during
each bridge run (bridge_resources.py).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import signal
import statistics
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pagetables  # bench/ is not a package
import profiles
import schedclient
import slurm_ref
import starts
import sysstats
from clusterenv import cluster_env, deploy_env, refuse_node_guard
from sysstats import RequestKey

from slurm_bridge.operator.slurmsettings.reader import POLICY_SECONDS

MANAGED_LABEL = "slurm-bridge.local/managed"
JOB_ID_LABEL = "scheduler.slinky.slurm.net/slurm-jobid"
TIME_LIMIT = "slurmjob.slinky.slurm.net/timelimit"


@dataclass
class Run:
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    # when the watch first saw the pod without scheduling gates (bridge: Slurm allocated and the
    # operator released it); splits the latency into bridge operator and scheduler parts
    released: dict[str, float] = field(default_factory=dict)
    job_of: dict[str, int] = field(default_factory=dict)  # pod -> its Slurm job (the release's label)
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)


def operator_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as r:
        stats: dict[str, Any] = json.load(r)
        return stats


def leader_url(api: k8s.ApiClient, namespace: str, port: int = 8080) -> str:
    """The deployed operator leader's health address: its pod IP, from the Lease's holder."""
    lease = k8s.CoordinationV1Api(api).read_namespaced_lease("slurm-bridge-operator", namespace)
    pod = k8s.CoreV1Api(api).read_namespaced_pod(lease.spec.holder_identity.rsplit("_", 1)[0], namespace)
    return f"http://{pod.status.pod_ip}:{port}"


def pod_body(name: str, annotations: dict[str, str] | None = None, scheduler: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {
            # --default-client QPS/BURST: the bench's own default scheduler (schedclient.py)
            **({"schedulerName": scheduler} if scheduler else {}),
            # The default-scheduler baseline may use the bridge's nodes too (same capacity).
            "tolerations": [{"key": "slinky.slurm.net/managed-node", "operator": "Exists", "effect": "NoExecute"}],
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
            ],
        },
    }


def watch_bindings(core: k8s.CoreV1Api, ns: str, run: Run, n: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            _watch_once(core, ns, run, n, stop)
        except (KeyError, k8s.exceptions.ApiException, urllib3.exceptions.HTTPError) as e:
            # An ERROR event (the client's plain-JSON path fails on it with KeyError 'raw_object')
            # or a dropped connection: watch again from now; its initial ADDED events re-deliver
            # every pod, so no bind is missed (only its time is taken later).
            print(f"note: pod watch of {ns} restarted ({type(e).__name__}: {e})", file=sys.stderr)


def _watch_once(core: k8s.CoreV1Api, ns: str, run: Run, n: int, stop: threading.Event) -> None:
    w = watch.Watch()
    while not stop.is_set():
        # Plain JSON events: building V1Pod models would make this client a large share of the
        # 2-core machine's CPU, measured against the system it measures.
        for ev in w.stream(core.list_namespaced_pod, ns, timeout_seconds=5, deserialize=False):
            pod = ev["object"]
            name, spec = pod["metadata"]["name"], pod.get("spec") or {}
            if not spec.get("schedulingGates"):
                job = (pod["metadata"].get("labels") or {}).get(JOB_ID_LABEL, "")
                with run.lock:
                    run.released.setdefault(name, time.monotonic())
                    if job.isdigit():
                        run.job_of.setdefault(name, int(job))
            if spec.get("nodeName"):
                with run.lock:
                    run.bound.setdefault(name, time.monotonic())
                    if len(run.bound) >= n:
                        run.done.set()
                        stop.set()
            if stop.is_set():
                w.stop()
                break


def measure(
    core: k8s.CoreV1Api,
    ns: str,
    n: int,
    concurrency: int,
    timeout: float,
    rate: float,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> Run:
    run = Run()
    stop = threading.Event()
    watcher = threading.Thread(target=watch_bindings, args=(core, ns, run, n, stop), daemon=True)
    watcher.start()
    time.sleep(0.5)  # let the watch establish before the first create (not a condition wait)

    start = time.monotonic()

    def create(i: int) -> None:
        if rate > 0:  # open-loop arrivals: pod i is created at i/rate seconds
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        name = f"b{i:04d}"
        body = pod_body(name, annotations, scheduler)
        resp = core.create_namespaced_pod(ns, body, _preload_content=False)  # no V1Pod
        resp.read()  # the connection goes back to the pool only once the answer is read
        resp.release_conn()
        with run.lock:
            run.created[name] = time.monotonic()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, range(n)))
    if not run.done.wait(timeout):
        print(f"warning: only {len(run.bound)}/{n} pods bound in {ns} within {timeout:.0f}s", file=sys.stderr)
    stop.set()
    return run


@dataclass
class Extra:
    """What a run cost besides latency: API writes, processes' CPU and memory, Slurm polls."""

    writes: dict[str, float] = field(default_factory=dict)
    load: dict[str, dict[str, float]] = field(default_factory=dict)  # sysstats.load_delta
    procs: dict[str, Any] = field(default_factory=dict)
    at_bound: Any = None  # what ``at_bound`` returned right after the last bind
    admission_ms: dict[str, float] = field(default_factory=dict)  # sysstats.admission_ms_per_call
    review_ms: dict[str, float] = field(default_factory=dict)  # the webhook's own: sysstats.review_ms
    pod_watchers: int | None = None  # the API server's open pod watches before the run (sysstats.pod_watchers)
    quiet_wait_s: float = 0.0  # how long the machine took to be quiet before the window (sysstats.wait_quiet)


def settle(api: k8s.ApiClient, quiet: float = 1.5, limit: float = 15.0) -> Counter[RequestKey]:
    """Scrape the write counters until they stop moving (leases aside): the Events and status
    writes that follow the last bind belong to the run."""
    last, still, deadline = sysstats.api_requests(api), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(0.5)
        cur = sysstats.api_requests(api)
        moved = any(
            cur[k] != last[k] for k in sysstats.writes(cur) if k[1].split("/")[0] not in sysstats.BACKGROUND_RESOURCES
        )
        last = cur
        if moved:
            still = time.monotonic()
        elif time.monotonic() - still >= quiet:
            break
    return last


def measured(
    api: k8s.ApiClient,
    ns: str,
    args: argparse.Namespace,
    rate: float,
    bg: sysstats.Background,
    at_bound: Callable[[], Any] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> tuple[Run, Extra]:
    """``measure`` with the API server's write counters and the processes sampled around it."""
    core = k8s.CoreV1Api(api)
    extra = Extra()
    # What the phase before set off (the last namespace's deletion: its jobs' cancels, slurmctld's
    # epilogs, garbage collection) is not this window's.
    extra.quiet_wait_s = sysstats.wait_quiet(args.idle)
    reviews = sysstats.webhook_reviews(*args.webhook) if args.webhook else {}
    text = sysstats.metrics_text(api)
    before, t0 = sysstats.parse_requests(text), time.monotonic()
    extra.pod_watchers = sysstats.parse_watchers(text).get("pods", 0)
    # The processes over the pods' creates and binds only: the settling below is nearly idle.
    with sysstats.ProcSampler(args.pids, idle=args.idle) as procs:
        run = measure(core, ns, args.pods, args.concurrency, args.timeout, rate, annotations, scheduler)
    extra.at_bound = at_bound() if at_bound else None
    if args.webhook:
        extra.review_ms = sysstats.review_ms(reviews, sysstats.webhook_reviews(*args.webhook))
    after = settle(api)
    extra.writes = sysstats.write_delta(before, after, time.monotonic() - t0, bg)
    extra.load = sysstats.load_delta(before, after, time.monotonic() - t0, bg)
    extra.admission_ms = sysstats.admission_ms_per_call(before, after)
    extra.procs = procs.row()
    return run, extra


def summarize(label: str, run: Run, slurm_calls: int | None) -> dict[str, Any]:
    lat = sorted(run.bound[p] - run.created[p] for p in run.bound if p in run.created)
    if not lat:
        return {"scheduler": label, "bound": 0}
    span = max(run.bound.values()) - min(run.created.values())
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else [lat[0]] * 99
    rel = sorted(run.released[p] - run.created[p] for p in run.bound if p in run.created and p in run.released)
    rq = statistics.quantiles(rel, n=100) if len(rel) >= 2 else None
    return {
        "scheduler": label,
        "pods": len(run.created),
        "bound": len(lat),
        "p50_s": round(q[49], 3),
        "p99_s": round(q[98], 3),
        "max_s": round(lat[-1], 3),
        # the creates themselves (the client makes --concurrency at a time; admission is in them)
        "create_span_s": round(max(run.created.values()) - min(run.created.values()), 3),
        # created -> released by the operator (Slurm allocated); the rest is the scheduler's bind
        "released_p50_s": round(max(rq[49], 0.0), 3) if rq else None,
        "released_p99_s": round(max(rq[98], 0.0), 3) if rq else None,
        "pods_per_s": round(len(lat) / span, 1) if span > 0 else None,
        "slurm_calls_per_pod": round(slurm_calls / len(lat), 2) if slurm_calls is not None else None,
    }


def make_namespace(core: k8s.CoreV1Api, name: str, managed: bool) -> None:
    labels = {MANAGED_LABEL: "true"} if managed else {}
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name, labels=labels)))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except k8s.exceptions.ApiException:
            time.sleep(0.2)
    raise SystemExit(f"namespace {name}: default ServiceAccount did not appear within 30s")


def stop_on_sigterm(*_: object) -> None:
    """A SIGTERM (``timeout``, ``kill``) ends the run as Ctrl-C would: through the ``with`` blocks,
    so the second default scheduler it started is stopped and slurm.conf's hooks are put back.
    (Python's default leaves the scheduler running, to place the next runs' pods beside theirs.)"""
    raise SystemExit(143)


def main() -> None:
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16, help="parallel pod creates")
    ap.add_argument(
        "--rates",
        default="20,0",
        help="comma-separated arrival rates in pods per second, one run each (0: a burst, all pods at once)",
    )
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--operator-port", type=int, default=28080, help="the process bridge's operator port")
    ap.add_argument("--deployed", action="store_true", help="measure the chart-installed bridge (hack/deploy.sh)")
    ap.add_argument("--idle-seconds", type=float, default=30, help="with --deployed: the idle sample before the runs")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--tenant", action="store_true", help="also run the bridge's pods under a TenantPolicy")
    ap.add_argument(
        "--busy", type=int, default=0, metavar="N", help="N waiting jobs of higher priority in the bridge's partition"
    )
    ap.add_argument(
        "--background-seconds",
        type=float,
        default=10,
        help="idle window for the API server's background write rate and the machine's idle CPU",
    )
    ap.add_argument(
        "--default-client",
        default=schedclient.STOCK,
        metavar="stock|bridge|QPS/BURST",
        help="the default scheduler's API client: the cluster's as it runs (stock), or a second default "
        "kube-scheduler at the bridge kube-scheduler's qps/burst (bridge) or at QPS/BURST: the fair CPU comparison",
    )
    ap.add_argument(
        "--calibrate-jobs",
        type=int,
        default=None,
        metavar="N",
        help="S_ref, Slurm's own CPU per job, measured in this run before the pods (bench/slurm_ref.py): N "
        "allocations read and cancelled (default: --pods; 0 leaves it out)",
    )
    ap.add_argument(
        "--slurm-hooks",
        choices=("on", "off", "both"),
        default="on",
        help="slurmctld's hooks as the cluster configures them (on), left out of slurm.conf for the run (off: a "
        "site without hybrid nodes), or each in turn (both), each with its own S_ref",
    )
    args = ap.parse_args()
    try:
        client = schedclient.parse_client(args.default_client)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        raise SystemExit(f"--rates {args.rates!r}: expected numbers separated by commas, e.g. 20,0") from None
    if not rates or any(r < 0 for r in rates):
        raise SystemExit(f"--rates {args.rates!r}: expected one or more rates >= 0")

    env = args.env = cluster_env()
    api = k8s_config.new_client_from_config(config_file=env["KUBECONFIG"])
    api.configuration.connection_pool_maxsize = args.concurrency + 4
    sampler: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    if args.deployed:
        from bridge_resources import Sampler, print_rows

        namespace, node = deploy_env()["RELEASE_NAMESPACE"], env["SB_REAL_NODE"]
        args.operator_url = leader_url(api, namespace)

        def sampler() -> contextlib.AbstractContextManager[Any]:
            return Sampler(api, node, namespace)
    else:
        args.operator_url = f"http://127.0.0.1:{args.operator_port}"
    try:
        operator_stats(args.operator_url)
    except OSError as e:
        hint = "hack/deploy.sh install" if args.deployed else "hack/bridge.sh up (or --deployed)"
        raise SystemExit(f"the bridge operator is not reachable at {args.operator_url} ({e}); run {hint}") from None
    if args.deployed:
        with sampler() as idle:
            time.sleep(args.idle_seconds)  # the idle measurement window
        print_rows(f"bridge pods, idle {args.idle_seconds:g} s:", idle.rows())
    policies = k8s.AdmissionregistrationV1Api(api).list_validating_admission_policy().items
    refuse_node_guard([p.metadata.name for p in policies])
    args.pids = sysstats.local_pids(env["SB_STATE_DIR"], sysstats.PROCESSES) if not args.deployed else {}
    args.webhook = None if args.deployed else local_webhook(Path(env["SB_STATE_DIR"]))
    calibrate = args.pods if args.calibrate_jobs is None else args.calibrate_jobs
    states = ("on", "off") if args.slurm_hooks == "both" else (args.slurm_hooks,)
    rows = []
    with contextlib.ExitStack() as stack:
        schedulers = default_scheduler(stack, args, api, client)
        for hooks in states:
            with slurm_ref.HooksOff(env, HOOKS_WAIT_S) if hooks == "off" else contextlib.nullcontext():
                # The machine's CPU with nothing submitted over the same window as the API server's background.
                with sysstats.ProcSampler(args.pids) as quiet:
                    bg = sysstats.Background.measure(api, args.background_seconds)
                args.idle = quiet.idle_baseline()
                args.s_ref = None
                if calibrate:  # Slurm's own CPU per job, with the hooks as this pass has them
                    args.s_ref = slurm_ref.calibrate(env, args.pids, args.idle, calibrate, args.concurrency)
                for row in runs(api, args, rates, bg, sampler, schedulers):
                    s_ref = (args.s_ref or {}).get("s_ref_ms_per_job")
                    rows.append({**row, "slurm_hooks": hooks, "s_ref": args.s_ref, "s_ref_ms_per_job": s_ref})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows)
    # docs/performance.md's tables for this run (bench/summarize.py: the same over several runs)
    print("\n" + "\n".join(pagetables.pipeline_tables([rows])), file=sys.stderr if args.json else sys.stdout)
    print(verdict(rows, args.pods), file=sys.stderr)


# How long the operator may take to see slurm.conf's hooks change: its settings reader's period.
HOOKS_WAIT_S = POLICY_SECONDS + 5

BENCH_SCHEDULER_PROCESS = "bench kube-scheduler"  # ProcSampler's name for schedclient.DefaultScheduler


def default_scheduler(
    stack: contextlib.ExitStack, args: argparse.Namespace, api: k8s.ApiClient, client: tuple[float, int] | str
) -> dict[str, dict[str, Any]]:
    """Which kube-scheduler places the default scheduler's pods (``args.default_scheduler``: None, the
    cluster's own; else the profile of a second default scheduler at ``client``'s qps and burst,
    started on ``stack``), and every scheduler's client settings, read from their /configz."""
    state = args.env["SB_STATE_DIR"]
    pids = sysstats.local_pids(state, ["kube-scheduler", "bridge-scheduler"])
    cert = (api.configuration.cert_file, api.configuration.key_file)
    args.default_scheduler = None
    if client == schedclient.BRIDGE:
        bridge = schedclient.read_settings({k: v for k, v in pids.items() if k == "bridge-scheduler"}, *cert)
        found = bridge.get("bridge-scheduler", {"error": "no pid file (the process bridge's: hack/bridge.sh up)"})
        if not isinstance(found.get("qps"), int | float) or not isinstance(found.get("burst"), int):
            raise SystemExit(f"--default-client bridge: the bridge's kube-scheduler's client settings: {found}; "
                             "give them as QPS/BURST")  # fmt: skip
        client = (float(found["qps"]), int(found["burst"]))
    if isinstance(client, tuple):
        if "kube-scheduler" not in pids:
            raise SystemExit(f"--default-client {args.default_client}: no kube-scheduler pid file in {state}/pids")
        log = Path(state, "logs", "bench-kube-scheduler.log")
        bench = stack.enter_context(schedclient.DefaultScheduler(pids["kube-scheduler"], args.env["KUBECONFIG"],
                                                                 client[0], client[1], log))  # fmt: skip
        args.pids = {**args.pids, BENCH_SCHEDULER_PROCESS: bench.pid}
        pids[BENCH_SCHEDULER_PROCESS] = bench.pid
        args.default_scheduler = schedclient.BENCH_SCHEDULER
    return schedclient.read_settings(pids, *cert)


def client_label(settings: dict[str, dict[str, Any]], bench: bool) -> str:
    """The default scheduler's pods' scheduler and its client's qps/burst ("stock 50/100")."""
    s = settings.get(BENCH_SCHEDULER_PROCESS if bench else "kube-scheduler") or {}
    qps, burst = s.get("qps"), s.get("burst")
    rate = f"{qps:g}/{burst}" if isinstance(qps, int | float) else "?"
    return f"{'bench' if bench else 'stock'} {rate}"


def runs(
    api: k8s.ApiClient,
    args: argparse.Namespace,
    rates: list[float],
    bg: sysstats.Background,
    sampler: Callable[[], contextlib.AbstractContextManager[Any]],
    schedulers: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """One run of both schedulers per rate: their rows."""
    rows: list[dict[str, Any]] = []
    recorded = {  # the page's labels (the profile, date and commit) and what the default scheduler was
        "busy": args.busy,
        **pagetables.stamp(),
        "default_client": client_label(schedulers, args.default_scheduler is not None),
        "scheduler_clients": schedulers,
        "idle_machine_cpu_per_s": round(args.idle.machine, 3),
    }
    for rate in rates:
        mode = f"{rate:g}/s" if rate > 0 else "burst"
        with sampler() as sampled:
            *bridges, default = one_run(api, args, rate, bg)
        if args.deployed:
            from bridge_resources import print_rows

            print_rows(f"bridge pods during the {mode} run (bridge and default-scheduler pods):", sampled.rows())
        for bridge in bridges:
            if bridge.get("pods_per_s") and default.get("pods_per_s"):
                bridge["ratio_to_default"] = round(bridge["pods_per_s"] / default["pods_per_s"], 2)
        rows += [{"mode": mode, **recorded, **r} for r in (*bridges, default)]
    return rows


def local_webhook(state: Path) -> tuple[str, str] | None:
    """The process bridge's webhook (its port, its CA file: hack/bridge.sh), whose /metrics has its
    own time per review; None (and a note) when it is not running."""
    try:
        webhook = (state / "bridge-webhook.port").read_text().strip(), str(state / "bridge" / "tls" / "ca.crt")
        sysstats.webhook_reviews(*webhook)
    except (OSError, http.client.HTTPException) as e:  # URLError and ssl's errors are OSErrors; a bad port InvalidURL
        print(f"note: the webhook's own time per review is not measured: {e} (its port in "
              f"{state / 'bridge-webhook.port'}, its CA {state / 'bridge/tls/ca.crt'}: hack/bridge.sh up)",
              file=sys.stderr)  # fmt: skip
        return None
    return webhook


COLUMNS = {  # row key -> heading
    "mode": "mode", "scheduler": "scheduler", "bound": "bound", "p50_s": "p50_s", "p99_s": "p99_s",
    "max_s": "max_s", "create_span_s": "creates_s", "released_p50_s": "p50_released", "pods_per_s": "pods/s",
    "ratio_to_default": "ratio",
    "api_writes_per_pod": "API writes/pod", "slurm_calls_per_pod": "Slurm calls/pod",
    "slurm_calls_per_pod_lifecycle": "calls/lifecycle", "operator_cpu_percent": "operator CPU %",
    "operator_peak_rss_mib": "operator RSS MiB", "machine_cpu_ms_per_pod": "machine CPU ms/pod",
    "machine_cpu_ratio": "CPU ratio", "operator_cpu_ms_per_pod": "operator ms/pod",
    "added_cpu_ms_per_pod": "added CPU ms/pod", "apiserver_cpu_ratio": "apiserver ratio",
    "pod_watchers": "pod watchers", "default_client": "default client",
}  # fmt: skip


def print_table(rows: list[dict[str, Any]]) -> None:
    if rows:
        print(f"the default scheduler's pods: {rows[0].get('default_client')}; the schedulers' API clients "
              f"(/configz): {rows[0].get('scheduler_clients')}; the idle machine: "
              f"{rows[0].get('idle_machine_cpu_per_s')} CPU s/s")  # fmt: skip
    print("  ".join(f"{h:>16}" for h in COLUMNS.values()))
    for r in rows:
        print("  ".join(f"{r.get(c, '-')!s:>16}" for c in COLUMNS))
    for r in rows:
        who = f"{r['mode']} {r['scheduler']}"
        print(f"{who}: API writes per pod by verb and resource: {r.get('api_writes_per_pod_by_kind')}")
        for part in ("reads", "admission", "watch_events"):
            print(f"{who}: API {part.replace('_', ' ')} per pod {r.get(f'api_{part}_per_pod')}: "
                  f"{r.get(f'api_{part}_per_pod_by_kind')}")  # fmt: skip
        if r.get("api_server_ms_per_webhook_call"):
            print(f"{who}: ms per webhook call, the API server's: {r['api_server_ms_per_webhook_call']}; "
                  f"the webhook's own per review: {r.get('webhook_ms_per_review')}")  # fmt: skip
        if "slurm_calls_lifecycle_by_kind" in r:
            print(f"{who}: Slurm calls over the pods' life: {r['slurm_calls_lifecycle_by_kind']}")
            print(
                f"{who}: Slurm list calls per poll period ({r['slurm_polls']} polls): {r['slurm_list_calls_per_poll']}"
            )
        if r.get("slurm_hints") or r.get("slurm_state_polls_skipped"):
            print(f"{who}: slurmctld's hints {r.get('slurm_hints')}; state polls skipped "
                  f"(Slurm's node table unchanged): {r.get('slurm_state_polls_skipped')}")  # fmt: skip
        if r.get("breakdown"):
            starts.print_breakdown(r["mode"], r["breakdown"])
        procs = r.get("processes")
        if procs:
            print(f"{who}: CPU % of a core over {procs['seconds']} s (machine {procs['machine_busy_percent']} % busy "
                  f"of all cores, {procs.get('machine_steal_percent')} % stolen): {procs['cpu_percent']}; "
                  f"peak RSS MiB: {procs['peak_rss_mib']}")  # fmt: skip
            print(f"{who}: seconds each process was ready to run and waited for a core: "
                  f"{procs.get('runqueue_wait_seconds')}")  # fmt: skip
        if r.get("cpu_ms_per_pod"):
            print(f"{who}: CPU ms per pod (each process with its children; machine: all cores' busy time, steal "
                  f"apart, less the idle baseline): {r['cpu_ms_per_pod']}")  # fmt: skip
        if r.get("cpu_ms_per_pod_own_children"):
            print(f"{who}: CPU ms per pod, own / its children's: {r['cpu_ms_per_pod_own_children']}")
    print_cpu_per_pod(rows)


def print_cpu_per_pod(rows: list[dict[str, Any]]) -> None:
    """CPU ms per pod of every process, bridge beside default, per run (issue 24)."""
    for mode in dict.fromkeys(r["mode"] for r in rows):
        pair = {r["scheduler"]: r for r in rows if r["mode"] == mode}
        bridge, default = pair.get("slurm-bridge", {}), pair.get("default-scheduler", {})
        b, d = bridge.get("cpu_ms_per_pod") or {}, default.get("cpu_ms_per_pod") or {}
        if not b and not d:
            continue
        print(f"{mode}: CPU ms per pod, bridge / default (ratio):")
        last = sysstats.MACHINE_KEYS  # the machine's figures after the processes'
        order = sorted(set(b) | set(d), key=lambda n: (last.index(n) if n in last else -1, -b.get(n, 0.0)))
        for name in order:
            ratio = sysstats.cpu_ratio(b, d, name)
            print(f"  {name:26} {b.get(name, '-')!s:>9} / {d.get(name, '-')!s:<9} ({ratio if ratio else '-'})")
        for who, r in pair.items():
            if r.get("added_cpu_ms_per_pod") is not None:
                print(f"  {who}: adds {r['added_cpu_ms_per_pod']} ms of machine CPU per pod")


def delete_and_wait(core: k8s.CoreV1Api, ns: str, timeout: float) -> None:
    """Delete a namespace and wait until it is gone (PlaceholderJob finalizers cancel the Slurm
    jobs), so that what follows does not measure this tear-down."""
    with contextlib.suppress(k8s.exceptions.ApiException):
        core.delete_namespace(ns)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(n.metadata.name == ns for n in core.list_namespace().items):
        time.sleep(0.5)


def one_run(api: k8s.ApiClient, args: argparse.Namespace, rate: float, bg: sysstats.Background) -> list[dict[str, Any]]:
    """The bridge's pods (and, with --tenant, its pods under a TenantPolicy), then the default
    scheduler's, each in a namespace of its own; their rows, the default scheduler's last."""
    core = k8s.CoreV1Api(api)
    suffix = f"{int(time.time() * 10) % 1000000}"
    bridges = [bridge_run(api, args, rate, bg, f"bench-bridge-{suffix}", tenant=False)]
    if args.tenant:
        bridges.append(bridge_run(api, args, rate, bg, f"bench-tenant-{suffix}", tenant=True))
    default_ns = f"bench-default-{suffix}"
    make_namespace(core, default_ns, managed=False)
    try:
        default_run, dx = measured(api, default_ns, args, rate, bg, scheduler=args.default_scheduler)
    finally:
        delete_and_wait(core, default_ns, args.timeout)
    default = summarize("default-scheduler", default_run, None)
    per_pod(default, dx, args.pods)
    for bridge in bridges:
        b, d = bridge["cpu_ms_per_pod"], default["cpu_ms_per_pod"]
        bridge["machine_cpu_ratio"] = sysstats.cpu_ratio(b, d)
        # what a bridge pod adds to the machine's CPU over a default scheduler's pod, and the API server's ratio
        bridge["added_cpu_ms_per_pod"] = sysstats.added_ms(b, d)
        bridge["apiserver_cpu_ratio"] = sysstats.cpu_ratio(b, d, "kube-apiserver")
        # ... and beyond Slurm's own work for its job (S_ref, measured in this run): the bridge's cost
        s_ref = (args.s_ref or {}).get("s_ref_ms_per_job")
        bridge["beyond_slurm_ms_per_pod"] = slurm_ref.beyond_slurm(bridge["added_cpu_ms_per_pod"], s_ref)
    return [*bridges, default]


def bridge_run(
    api: k8s.ApiClient, args: argparse.Namespace, rate: float, bg: sysstats.Background, ns: str, *, tenant: bool
) -> dict[str, Any]:
    """One run of bridge pods in ``ns`` (under a TenantPolicy with ``tenant``): the row, with its
    Slurm calls by kind over the pods' whole life and, for the process bridge, the breakdown."""
    core = k8s.CoreV1Api(api)
    make_namespace(core, ns, managed=True)
    policy = profiles.tenant_policy(api, ns) if tenant else None
    annotations = {TIME_LIMIT: profiles.BUSY_POD_TIME_LIMIT} if args.busy else None
    busy = (
        profiles.BusyPartition(
            args.env["SLURM_REST_URL"], args.env["SLURM_JWT_FILE"], args.env["SB_PARTITION"], args.busy
        )
        if args.busy
        else contextlib.nullcontext()
    )
    log = starts.SlurmctldLog(Path(args.env["SB_STATE_DIR"]) / "logs" / "slurmctld.log") if not args.deployed else None
    try:
        with busy:
            wall0, mono0 = time.time(), time.monotonic()
            stats0 = operator_stats(args.operator_url)
            run, bx = measured(api, ns, args, rate, bg, lambda: operator_stats(args.operator_url), annotations)
            stats_b = cast(dict[str, Any], bx.at_bound)
            found = log.starts() if log is not None else {}
            missing = [j for j in run.job_of.values() if j not in found]
            if log is not None and missing:  # read before the cancels: Slurm's start_time, whole seconds
                found |= starts.slurm_start_times(args.env["SLURM_REST_URL"], args.env["SLURM_JWT_FILE"], missing)
    finally:
        delete_and_wait(core, ns, args.timeout)
        if policy is not None:
            profiles.delete_tenant_policy(api, policy)
    stats1 = operator_stats(args.operator_url)  # over the pods' whole life: the cancels and the polls
    label = "slurm-bridge tenant" if tenant else "slurm-bridge"
    row = summarize(label, run, stats_b["slurm_requests"] - stats0["slurm_requests"])
    slurm_calls(row, stats0, stats_b, stats1, args.pods)
    per_pod(row, bx, args.pods)
    if log is not None:
        wall = {k: {p: t - mono0 + wall0 for p, t in d.items()} for k, d in
                (("created", run.created), ("ungated", run.released), ("bound", run.bound))}  # fmt: skip
        steps = starts.operator_starts(args.operator_url, wall0 - 1.0)
        parts = starts.breakdown(wall["created"], wall["ungated"], wall["bound"], run.job_of, steps, found)
        row["breakdown"] = parts.summary()
    return row


def slurm_calls(
    row: dict[str, Any], stats0: dict[str, Any], stats_b: dict[str, Any], stats1: dict[str, Any], pods: int
) -> None:
    """Slurm calls per pod over the pods' whole life, by kind, and the list calls per poll period
    while the pods were created and bound (the job poller's and the node controller's)."""
    row["slurm_calls_per_pod_lifecycle"] = round((stats1["slurm_requests"] - stats0["slurm_requests"]) / pods, 2)
    kinds0, kinds_b = stats0.get("slurm_requests_by_kind", {}), stats_b.get("slurm_requests_by_kind", {})
    kinds1 = stats1.get("slurm_requests_by_kind", {})
    row["slurm_calls_lifecycle_by_kind"] = {
        k: n - kinds0.get(k, 0) for k, n in sorted(kinds1.items()) if n - kinds0.get(k, 0)
    }
    polls = stats_b.get("slurm_polls", 0) - stats0.get("slurm_polls", 0)
    lists = {k: kinds_b.get(k, 0) - kinds0.get(k, 0) for k in LIST_KINDS}
    row["slurm_polls"] = polls
    row["slurm_list_calls_per_poll"] = {k: round(n / polls, 2) for k, n in lists.items() if n} if polls else {}
    skipped0 = stats0.get("slurm_state_polls_skipped", 0)
    row["slurm_state_polls_skipped"] = stats_b.get("slurm_state_polls_skipped", 0) - skipped0
    hints0, hints_b = stats0.get("slurm_hints", {}), stats_b.get("slurm_hints", {})
    row["slurm_hints"] = {k: n - hints0.get(k, 0) for k, n in hints_b.items()}


def per_pod(row: dict[str, Any], extra: Extra, pods: int) -> None:
    """API writes and the rest of the API server's load per pod; CPU and memory per process."""
    row["api_writes_per_pod"] = round(sum(extra.writes.values()) / pods, 2)
    row["api_writes_per_pod_by_kind"] = {k: round(n / pods, 2) for k, n in extra.writes.items()}
    for part, counts in extra.load.items():  # what else the API server did per pod
        row[f"api_{part}_per_pod"] = round(sum(counts.values()) / pods, 2)
        row[f"api_{part}_per_pod_by_kind"] = {k: round(n / pods, 2) for k, n in counts.items()}
    # Where a create through the webhook waited: the API server's time per call against the
    # webhook's own per review (the rest: the API server's side, and the TLS connection between).
    row["api_server_ms_per_webhook_call"] = extra.admission_ms
    row["webhook_ms_per_review"] = extra.review_ms
    row["processes"] = extra.procs
    row["pod_watchers"] = extra.pod_watchers
    row["quiet_wait_s"] = extra.quiet_wait_s
    row["cpu_ms_per_pod_own_children"] = sysstats.cpu_split_ms_per_pod(extra.procs, pods)
    row["operator_cpu_percent"] = extra.procs["cpu_percent"].get("bridge-operator")
    row["operator_peak_rss_mib"] = extra.procs["peak_rss_mib"].get("bridge-operator")
    row["cpu_ms_per_pod"] = sysstats.cpu_ms_per_pod(extra.procs, pods)
    row["machine_cpu_ms_per_pod"] = row["cpu_ms_per_pod"].get(sysstats.MACHINE)
    row["operator_cpu_ms_per_pod"] = row["cpu_ms_per_pod"].get("bridge-operator")


# The Slurm calls that list (as opposed to per-job calls): what a poll period costs.
LIST_KINDS = ("GET /jobs/state/", "GET /jobs", "GET /nodes")


def cmp(value: float, limit: float, at_most: bool) -> str:
    """``value <= limit`` (or ``>=``), written with the sign that holds."""
    ok = value <= limit if at_most else value >= limit
    return f"{value} {('<=' if ok else '>') if at_most else ('>=' if ok else '<')} {limit:g}"


# The targets in force (issues 15, 24, 31 and 39): bench/pagetables.py, whose tables say the same.
TARGETS = pagetables.TARGETS


# CPU per pod, the bridge's pods against the default scheduler's of the same run, (in a burst, at a
# steady rate): the machine's CPU a bridge pod adds over a default pod's, and the operator's CPU;
# and kube-apiserver's CPU per bridge pod over its CPU per default pod.
ADDED_CPU_MS = (8.0, 12.0)
OPERATOR_CPU_MS = (5.0, 7.0)
APISERVER_CPU_RATIO = 1.5


def cpu_checks(r: dict[str, Any]) -> list[str]:
    """A bridge row's CPU per pod against the CPU targets (those the row has figures for)."""
    steady = int(r.get("mode") != "burst")
    out = []
    if r.get("beyond_slurm_ms_per_pod") is not None:  # the target's measure: less S_ref
        out.append(f"added CPU less S_ref ms/pod {cmp(r['beyond_slurm_ms_per_pod'], ADDED_CPU_MS[steady], True)}")
    elif r.get("added_cpu_ms_per_pod") is not None:
        out.append(f"added machine CPU ms/pod (no S_ref) {r['added_cpu_ms_per_pod']}")
    if r.get("operator_cpu_ms_per_pod") is not None:
        out.append(f"operator CPU ms/pod {cmp(r['operator_cpu_ms_per_pod'], OPERATOR_CPU_MS[steady], True)}")
    if r.get("apiserver_cpu_ratio") is not None:
        out.append(f"kube-apiserver CPU/pod vs default {cmp(r['apiserver_cpu_ratio'], APISERVER_CPU_RATIO, True)}")
    return out


def verdict(rows: list[dict[str, Any]], pods: int) -> str:
    """The targets in force (TARGETS, and the CPU targets of ``cpu_checks``) against the bridge rows."""
    t, lines = TARGETS, []
    plain = {(r["mode"], r.get("slurm_hooks")): r for r in rows if r["scheduler"] == "slurm-bridge"}
    for r in (r for r in rows if r["scheduler"].startswith("slurm-bridge")):
        who = r["scheduler"] + (", slurmctld's hooks off" if r.get("slurm_hooks") == "off" else "")
        if r.get("bound") != pods:
            lines.append(f"{r['mode']} {who}: only {r.get('bound')}/{pods} pods bound")
            continue
        checks = [
            f"calls/pod {cmp(r['slurm_calls_per_pod'], t['slurm_calls'], True)}",
            f"API writes/pod {cmp(r['api_writes_per_pod'], t['api_writes'], True)}",
        ]
        checks += cpu_checks(r)
        if r.get("machine_cpu_ratio") is not None:
            checks.append(f"machine CPU/pod vs default {cmp(r['machine_cpu_ratio'], t['machine_cpu_ratio'], True)}")
        if r["mode"] == "burst":
            if r.get("pods_per_s") is not None:
                want = t["burst_pods_per_s_1000"] if pods >= 1000 else t["burst_pods_per_s"]
                checks.insert(0, f"pods/s {cmp(r['pods_per_s'], want, False)}")
        else:
            checks += [f"p50 {cmp(r['p50_s'], t['p50_s'], True)} s", f"p99 {cmp(r['p99_s'], t['p99_s'], True)} s"]
        gap = (r.get("breakdown") or {}).get("Slurm's start -> pod released")
        if gap and (r["breakdown"]["paths"].get("queue") or 0):
            checks.append(f"queued: start->released p50 {cmp(gap['p50'], t['start_to_release_p50'], True)} s")
            checks.append(f"p99 {cmp(gap['p99'], t['start_to_release_p99'], True)} s")
        base = plain.get((r["mode"], r.get("slurm_hooks")))
        if r["scheduler"] != "slurm-bridge" and base is not None and r["mode"] != "burst":
            checks.append(f"p50 vs plain bridge {cmp(round(r['p50_s'] / max(base['p50_s'], 1e-3), 2), 2, True)}x")
            checks.append(f"p99 {cmp(r['p99_s'], t['tenant_p99_s'], True)} s")
        lines.append(f"{r['mode']} {who}: " + ", ".join(checks))
    return "targets: " + "; ".join(lines)


if __name__ == "__main__":
    main()
