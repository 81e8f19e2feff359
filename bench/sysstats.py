"""What the benchmarks measure besides latency: API-server writes, per-process CPU and memory.

- ``api_requests``: the API server's own ``apiserver_request_total`` counters from ``/metrics``,
  by verb, resource and subresource. ``write_delta`` subtracts two scrapes and the background
  (leases, kwok heartbeats, controllers) measured at idle for the same length of time.
  The same scrape counts what else a pod costs the API server (``load_delta``): reads (GET, LIST,
  WATCH opened), admission webhook calls by webhook and operation
  (``apiserver_admission_webhook_admission_duration_seconds_count``), the API server's time in
  each webhook's calls (``_sum``: ``admission_ms_per_call``) and watch events sent to watchers by
  resource (``apiserver_watch_events_total``: the fan-out of each change).
- ``webhook_reviews``: the bridge webhook's own time per review, from its /metrics: beside the API
  server's time per call it says whether a slow create waited in the webhook or in the API server.
- ``ProcSampler``: CPU seconds and resident memory of the local cluster's processes (the pid files
  hack/cluster.sh and hack/bridge.sh write, and every other process by its command's name:
  ``PROCESS_NAMES``), each process's own CPU apart from its children's, sampled from /proc in a
  thread: what each process cost during a run, and whether the machine itself was the limit (its
  busy time without steal, and less an idle baseline: ``IdleBaseline``); and how long each
  process's threads waited for a core (``/proc/<pid>/task/*/schedstat``): a process that waits
  about as long as it runs is held back by the machine, not by its own work.
- ``pod_watchers``: the API server's open watches of pods (``apiserver_longrunning_requests``, a
  stable metric), each of which every pod change is sent to.

Only for the local cluster's plain processes (hack/bridge.sh); the chart-installed bridge is
measured through the kubelet (bridge_resources.py).
"""

from __future__ import annotations

import os
import re
import ssl
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"})
# apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",
#   scope="resource",subresource="binding",verb="POST",version="v1"} 200
_METRIC = re.compile(r"^apiserver_request_total\{([^}]*)\}\s+([0-9.e+]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_ADMISSION = re.compile(
    r"^apiserver_admission_webhook_admission_duration_seconds_(count|sum)\{([^}]*)\}\s+([0-9.e+-]+)$"
)
_WATCH_EVENTS = re.compile(r"^apiserver_watch_events_total\{([^}]*)\}\s+([0-9.e+]+)$")
# Pseudo-verbs for the counters that are not requests (RequestKey's first part).
ADMIT, WATCH_EVENT = "ADMIT", "WATCHEVENT"
ADMIT_US = "ADMIT_US"  # microseconds the API server spent in a webhook's calls (a Counter holds ints)
RequestKey = tuple[str, str]  # (verb, "resource[/subresource]")
# What the benchmark's pods cause, as opposed to the cluster's background: leases are heartbeats.
BACKGROUND_RESOURCES = frozenset({"leases"})

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_requests(text: str) -> Counter[RequestKey]:
    """Requests by (verb, resource[/subresource]) summed over codes, scopes and versions."""
    out: Counter[RequestKey] = Counter()
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(1)))
        if labels.get("dry_run"):
            continue
        res = labels.get("resource", "")
        if labels.get("subresource"):
            res += "/" + labels["subresource"]
        out[(labels.get("verb", ""), res)] += int(float(m.group(2)))
    for line in text.splitlines():
        if m := _ADMISSION.match(line):  # one series per rejected=true|false: their sum is the calls
            labels = dict(_LABEL.findall(m.group(2)))
            key = f"{labels.get('name', '')} {labels.get('operation', '')}"
            if m.group(1) == "count":
                out[(ADMIT, key)] += int(float(m.group(3)))
            else:
                out[(ADMIT_US, key)] += round(float(m.group(3)) * 1e6)
        elif m := _WATCH_EVENTS.match(line):
            labels = dict(_LABEL.findall(m.group(1)))
            out[(WATCH_EVENT, labels.get("resource", ""))] += int(float(m.group(2)))
    return out


def metrics_text(api: Any) -> str:
    """The API server's /metrics (``api``: a kubernetes ApiClient)."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = api.call_api(method, url, headers, body, post)
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET /metrics: HTTP {resp.status}: {data[:200]!r}")
    return str(data.decode())


def api_requests(api: Any) -> Counter[RequestKey]:
    """One scrape of the API server's request counters (``api``: a kubernetes ApiClient)."""
    return parse_requests(metrics_text(api))


_LONGRUNNING = re.compile(r"^apiserver_longrunning_requests\{([^}]*)\}\s+([0-9.e+]+)$")


def parse_watchers(text: str) -> dict[str, int]:
    """Open watches by resource ("pods": 9), summed over scopes and versions, from the API
    server's ``apiserver_longrunning_requests`` gauge (stable; ``apiserver_registered_watchers``
    is an alpha metric, deprecated since 1.23): every change of a pod is sent to each pod watch."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if m := _LONGRUNNING.match(line):
            labels = dict(_LABEL.findall(m.group(1)))
            if labels.get("verb") == "WATCH" and not labels.get("subresource"):
                res = labels.get("resource", "")
                out[res] = out.get(res, 0) + int(float(m.group(2)))
    return dict(sorted(out.items()))


def pod_watchers(api: Any) -> int:
    """The API server's open watches of pods now (``parse_watchers``)."""
    return parse_watchers(metrics_text(api)).get("pods", 0)


def writes(c: Counter[RequestKey]) -> Counter[RequestKey]:
    return Counter({k: n for k, n in c.items() if k[0] in WRITE_VERBS})


def load_delta(
    before: Counter[RequestKey], after: Counter[RequestKey], seconds: float, bg: Background
) -> dict[str, dict[str, float]]:
    """Everything but writes between two scrapes, background subtracted: reads ("GET pods"),
    admission webhook calls ("<webhook> CREATE") and watch events sent ("pods")."""
    out: dict[str, dict[str, float]] = {"reads": {}, "admission": {}, "watch_events": {}}
    for k in set(after) | set(before):
        if k[0] in WRITE_VERBS or k[0] == ADMIT_US or k[1].split("/")[0] in BACKGROUND_RESOURCES:
            continue
        n = after[k] - before[k] - bg.rates.get(k, 0.0) * seconds
        if n < 0.5:
            continue
        if k[0] == ADMIT:
            out["admission"][k[1]] = round(n, 1)
        elif k[0] == WATCH_EVENT:
            out["watch_events"][k[1]] = round(n, 1)
        else:
            out["reads"][f"{k[0]} {k[1]}"] = round(n, 1)
    return {part: dict(sorted(d.items())) for part, d in out.items()}


def admission_ms_per_call(before: Counter[RequestKey], after: Counter[RequestKey]) -> dict[str, float]:
    """The API server's mean time per call of each webhook between two scrapes ("<webhook>
    <operation>" -> ms): the call as the API server sees it (the review encoded and sent, the wait
    for the answer, the patch applied), so under load it also holds the API server's own waits."""
    out = {}
    for k in after:
        if k[0] != ADMIT_US:
            continue
        calls = after[(ADMIT, k[1])] - before[(ADMIT, k[1])]
        if calls > 0:
            out[k[1]] = round((after[k] - before[k]) / 1000 / calls, 2)
    return dict(sorted(out.items()))


_BRIDGE_WEBHOOK = re.compile(r"^slurm_bridge_webhook_admission_duration_seconds_(sum|count)\{([^}]*)\}\s+([0-9.e+-]+)$")


def parse_reviews(text: str) -> dict[str, float]:
    """The bridge webhook's own admission histogram: "<endpoint> sum" (seconds) and "<endpoint>
    count", summed over operations."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if m := _BRIDGE_WEBHOOK.match(line):
            endpoint = dict(_LABEL.findall(m[2])).get("endpoint", "?")
            key = f"{endpoint} {m[1]}"
            out[key] = out.get(key, 0.0) + float(m[3])
    return out


def webhook_reviews(port: str, cafile: str) -> dict[str, float]:
    """``parse_reviews`` of the process bridge's webhook (hack/bridge.sh: its port and CA)."""
    ctx = ssl.create_default_context(cafile=cafile)
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as r:
        return parse_reviews(r.read().decode())


def review_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Mean ms per review of each endpoint between two ``webhook_reviews``."""
    out = {}
    for key in after:
        endpoint, _, part = key.rpartition(" ")
        calls = after[key] - before.get(key, 0.0) if part == "count" else 0.0
        if calls > 0:
            seconds = after.get(f"{endpoint} sum", 0.0) - before.get(f"{endpoint} sum", 0.0)
            out[endpoint] = round(1000 * seconds / calls, 2)
    return dict(sorted(out.items()))


@dataclass
class Background:
    """Rate per (verb, resource) with nothing running (writes, reads, watch events), to subtract
    from a run."""

    rates: dict[RequestKey, float] = field(default_factory=dict)

    @classmethod
    def measure(cls, api: Any, seconds: float) -> Background:
        a, t0 = api_requests(api), time.monotonic()
        time.sleep(seconds)  # the idle window itself
        b, t1 = api_requests(api), time.monotonic()
        return cls({k: (b[k] - a[k]) / (t1 - t0) for k in b if b[k] - a[k] > 0})


def write_delta(
    before: Counter[RequestKey], after: Counter[RequestKey], seconds: float, bg: Background
) -> dict[str, float]:
    """Writes between two scrapes minus the background over ``seconds``, as "VERB resource"."""
    out: dict[str, float] = {}
    for k in set(writes(after)) | set(writes(before)):
        if k[1].split("/")[0] in BACKGROUND_RESOURCES:
            continue
        n = after[k] - before[k] - bg.rates.get(k, 0.0) * seconds
        if n >= 0.5:
            out[f"{k[0]} {k[1]}"] = round(n, 1)
    return dict(sorted(out.items()))


# ---- processes -------------------------------------------------------------------------------
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """One process's /proc/<pid>/stat, in CPU seconds."""

    ppid: int
    comm: str  # the command's name, as the kernel keeps it: at most 15 characters
    own: float  # utime + stime: the process's own threads
    waited: float  # cutime + cstime: its children that ended and that it waited for


def parse_stat(raw: str) -> ProcStat | None:
    """``/proc/<pid>/stat``'s fields; None for a line that is not one (a process caught ending)."""
    try:
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        f = raw[raw.rindex(")") + 2 :].split()
        return ProcStat(int(f[1]), comm, (int(f[11]) + int(f[12])) / CLK_TCK, (int(f[13]) + int(f[14])) / CLK_TCK)
    except (ValueError, IndexError):
        return None


def read_procs(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process's stat, by pid (``proc``: /proc, or a test's stand-in)."""
    out = {}
    for d in os.listdir(proc):
        if not d.isdigit():
            continue
        try:
            raw = (proc / d / "stat").read_text()
        except OSError:
            continue
        if (s := parse_stat(raw)) is not None:
            out[int(d)] = s
    return out


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its children that ended and were waited for)."""
    try:
        s = parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None
    return (s.ppid, s.own + s.waited) if s is not None else None


def _rss(pid: int, proc: Path = PROC) -> int:
    try:
        return int((proc / str(pid) / "statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) one process has used, with its waited-for children; 0 when it is gone."""
    stat = _stat(pid)
    return stat[1] if stat is not None else 0.0


def rss_mib(pid: int) -> float:
    return _rss(pid) / 2**20


def runqueue_waits(pid: int, proc: Path = PROC) -> dict[int, int]:
    """Nanoseconds each thread of ``pid`` has waited on a run queue (ready, no core free), by
    thread id; empty when the process is gone or the kernel keeps no schedstats."""
    out = {}
    try:
        tids = os.listdir(proc / str(pid) / "task")
    except OSError:
        return {}
    for tid in tids:
        try:
            out[int(tid)] = int((proc / str(pid) / "task" / tid / "schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


@dataclass(frozen=True)
class MachineCpu:
    """The whole machine's CPU seconds since boot (all cores), from /proc/stat's ``cpu`` line."""

    busy: float  # user, nice, system, irq, softirq: the work this machine's kernel ran
    steal: float  # time the hypervisor gave this machine's cores to others: neither busy nor idle here
    total: float  # everything, idle and steal included


def parse_machine(text: str) -> MachineCpu:
    """/proc/stat's first line: user nice system idle iowait irq softirq steal (guest and guest_nice
    are already in user and nice)."""
    f = [int(x) for x in text.splitlines()[0].split()[1:9]]
    f += [0] * (8 - len(f))
    user, nice, system, _idle, _iowait, irq, softirq, steal = f
    return MachineCpu((user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK, sum(f) / CLK_TCK)


def machine_cpu(proc: Path = PROC) -> MachineCpu:
    return parse_machine((proc / "stat").read_text())


def is_quiet(busy_per_s: float, idle: IdleBaseline, margin: float) -> bool:
    """Whether the machine, busy ``busy_per_s`` CPU seconds a second (steal out), is back within
    ``margin`` cores of its idle baseline."""
    return busy_per_s <= idle.machine + margin


def wait_quiet(
    idle: IdleBaseline,
    margin: float = 0.15,
    window: float = 1.0,
    timeout: float = 60.0,
    *,
    read: Callable[[], MachineCpu] = machine_cpu,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until what the last phase set off has run (a deleted namespace's garbage collection,
    its jobs' cancels and slurmctld's epilogs): the machine busy no more than its idle baseline
    plus ``margin`` cores over one ``window``, so that the next phase's window holds only its own
    pods' work. The seconds waited (``timeout`` when it never got quiet)."""
    began = clock()
    while clock() - began < timeout:
        before, t0 = read(), clock()
        sleep(window)
        after, t1 = read(), clock()
        if is_quiet((after.busy - before.busy) / max(t1 - t0, 1e-6), idle, margin):
            return round(clock() - began, 2)
    return round(clock() - began, 2)


def local_pids(state_dir: str, names: list[str]) -> dict[str, int]:
    out = {}
    for n in names:
        try:
            out[n] = int(Path(state_dir, "pids", f"{n}.pid").read_text().strip())
        except (OSError, ValueError):
            continue
    return out


BENCH_CLIENT = "bench client"
# The pid files of hack/cluster.sh and hack/bridge.sh (`hack/cluster.sh status`), each the root of
# its name's processes: a pid file tells the two kube-schedulers apart. slurmd's (one per node,
# slurmd-<node>) are not listed: PROCESS_NAMES names them.
PROCESSES = ["kube-apiserver", "etcd", "kube-scheduler", "kwok", "kube-controller-manager", "jobset-controller",
             "lws-controller", "munged", "mariadb", "slurmdbd", "slurmctld", "slurmrestd", "containerd", "kubelet",
             "kube-proxy", "bridge-operator", "bridge-webhook", "bridge-extender", "bridge-scheduler"]  # fmt: skip
# Every other process of the local cluster, by its command's name (a full match; the kernel keeps
# 15 characters): those outside the pid files' trees (containerd's shims and slurmd's slurmstepd
# leave their parent; slurmd has no listed pid file) and those of a cluster whose pid files are gone.
PROCESS_NAMES: tuple[tuple[str, str], ...] = (
    ("etcd", "etcd"), ("kube-apiserver", "kube-apiserver"), ("kube-controller", "kube-controller-manager"),
    ("kube-scheduler", "kube-scheduler"), ("kwok", "kwok"), ("jobset-control.*", "jobset-controller"),
    ("lws-controller", "lws-controller"), ("munged", "munged"), ("mariadbd|mysqld", "mariadb"),
    ("slurmdbd", "slurmdbd"), ("slurmctld|slurmscriptd", "slurmctld"), ("slurmrestd", "slurmrestd"),
    ("slurmd|slurmstepd", "slurmd"), ("containerd|containerd-shim.*", "containerd"), ("kubelet", "kubelet"),
    ("kube-proxy", "kube-proxy"), ("slurm-bridge-op.*", "bridge-operator"), ("slurm-bridge-we.*", "bridge-webhook"),
    ("slurm-bridge-ex.*", "bridge-extender"),
)  # fmt: skip
_PROCESS_NAMES = [(re.compile(p), n) for p, n in PROCESS_NAMES]


def process_name(comm: str) -> str | None:
    """The name PROCESS_NAMES gives a command, if any."""
    return next((n for p, n in _PROCESS_NAMES if p.fullmatch(comm)), None)


CONTAINERS = "containers"  # the real node's pods' processes (under containerd's shims), whatever they run
_SHIM = re.compile(r"containerd-shim.*")


def name_processes(procs: dict[int, ProcStat], roots: dict[int, str]) -> dict[int, str]:
    """Each named process's name: that of the nearest of itself and its ancestors that is a root
    (``roots``: pid -> name, the pid files') or whose command PROCESS_NAMES names; a process in a
    container (under a containerd shim) is CONTAINERS, so that a pod's kube-scheduler is not taken
    for the cluster's. A process with none of these is left out: it is "other"."""
    memo: dict[int, tuple[str | None, bool]] = {}  # pid -> (name, in a container)
    for pid in procs:
        path, p = [], pid
        while p in procs and p not in memo:
            path.append(p)
            p = procs[p].ppid
        name, boxed = memo.get(p, (None, False))
        for q in reversed(path):  # from the oldest ancestor not yet named down to ``pid``
            comm = procs[q].comm
            if q in roots:
                name, boxed = roots[q], False
            elif _SHIM.fullmatch(comm):
                name, boxed = process_name(comm), True
            elif boxed:
                name = CONTAINERS
            else:
                name = process_name(comm) or name
            memo[q] = (name, boxed)
    return {p: n for p, (n, _) in memo.items() if n is not None}


def split_cpu(procs: dict[int, ProcStat], names: dict[int, str]) -> dict[int, tuple[str, float, float]]:
    """Each named process's (name, own CPU, children's CPU). A process whose parent has another name
    (or none) carries its name: its threads' time is the name's own, and its waited-for children's
    time the name's children's; a process forked by one of the same name is all children's (slurmctld's
    slurmscriptd and the hooks it runs are slurmctld's children)."""
    out = {}
    for pid, name in names.items():
        s = procs[pid]
        if names.get(s.ppid) == name:
            out[pid] = (name, 0.0, s.own + s.waited)
        else:
            out[pid] = (name, s.own, s.waited)
    return out


def sum_by_name(split: dict[int, tuple[str, float, float]]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for name, own, children in split.values():
        o, c = out.get(name, (0.0, 0.0))
        out[name] = (o + own, c + children)
    return out


@dataclass(frozen=True)
class IdleBaseline:
    """The machine's busy CPU seconds per second (all cores) with nothing submitted, measured
    before the runs: subtracted from each run's machine CPU over the run's length, so that a pod's
    figure holds only what the pods caused."""

    machine: float = 0.0
    seconds: float = 0.0  # the length of the idle window it was measured over


class ProcSampler:
    """CPU and memory of the local cluster's processes, each name with its children, over a
    ``with`` block.

    ``row()`` gives each name's mean CPU in % of one core and its CPU seconds (split into its own
    and its children's), its peak RSS, and the machine's busy share (of all cores, steal apart):
    near 100 % means the machine, not the bridge, set the pace. With ``idle`` (an IdleBaseline) it
    also gives the machine's CPU less the idle machine's over the same time.
    """

    def __init__(
        self,
        pids: dict[str, int],
        interval: float = 0.5,
        idle: IdleBaseline | None = None,
        proc: Path = PROC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The benchmark's own client is on the machine too: named, so that it is not taken for the
        # system's (what the machine's CPU holds besides the named processes is reported as "other").
        mine = {} if os.getpid() in pids.values() else {BENCH_CLIENT: os.getpid()}
        self.pids = {**pids, **mine}
        self.interval, self.idle, self.proc, self.clock = interval, idle, proc, clock
        self.peak_rss: dict[str, int] = dict.fromkeys(self.pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._cpu0: dict[str, tuple[float, float]] = {}
        self._cpu1: dict[str, tuple[float, float]] = {}
        # Each process seen, as last sampled: (name, own, children, ended CPU stays with the name).
        self._seen: dict[int, tuple[str, float, float, bool]] = {}
        self._lock = threading.Lock()
        self._t: tuple[float, float] = (0.0, 0.0)
        self._machine: tuple[MachineCpu, MachineCpu] = (MachineCpu(0, 0, 0), MachineCpu(0, 0, 0))
        self._waits0: dict[str, dict[int, int]] = {}
        self._waited: dict[str, float] = {}

    def sample(self) -> tuple[dict[int, tuple[str, float, float]], dict[str, tuple[float, float]]]:
        """One sample (the thread takes one each ``interval``): each named process's CPU, and each name's."""
        procs = read_procs(self.proc)
        names = name_processes(procs, {pid: name for name, pid in self.pids.items()})
        split = split_cpu(procs, names)
        rss: dict[str, int] = {}
        with self._lock:
            for pid, (name, own, children) in split.items():
                # A process reaped by one of its own name leaves its CPU in that one's children's.
                self._seen[pid] = (name, own, children, names.get(procs[pid].ppid) == name)
                rss[name] = rss.get(name, 0) + _rss(pid, self.proc)
            for name, r in rss.items():
                self.peak_rss[name] = max(self.peak_rss.get(name, 0), r)
        return split, {**dict.fromkeys(self.pids, (0.0, 0.0)), **sum_by_name(split)}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> ProcSampler:
        _, self._cpu0 = self.sample()
        self._t = (self.clock(), 0.0)
        self._machine = (machine_cpu(self.proc), self._machine[1])
        self._waits0 = {name: runqueue_waits(pid, self.proc) for name, pid in self.pids.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        split, cpu = self.sample()
        # A process that ended inside the block and was reaped by one of another name (init reaps
        # containerd's shims and slurmd's slurmstepd) took its CPU out of the name: its CPU up to
        # its last sample stays the name's.
        for pid, (name, own, children, stays) in self._seen.items():
            if pid not in split and not stays:
                o, c = cpu.get(name, (0.0, 0.0))
                cpu[name] = (o + own, c + children)
        self._cpu1 = cpu
        self._t = (self._t[0], self.clock())
        self._machine = (self._machine[0], machine_cpu(self.proc))
        # The process's own threads alive at the end (a child's or an ended thread's wait is gone).
        for name, pid in self.pids.items():
            before = self._waits0.get(name, {})
            waits = runqueue_waits(pid, self.proc)
            if waits:
                self._waited[name] = sum(w - before.get(tid, 0) for tid, w in waits.items()) / 1e9

    @property
    def seconds(self) -> float:
        return self._t[1] - self._t[0]

    @property
    def names(self) -> list[str]:
        """Every name sampled: the pid files' and those PROCESS_NAMES found running."""
        return sorted(set(self._cpu0) | set(self._cpu1))

    def cpu_split(self, name: str) -> tuple[float, float]:
        """(own, children's) CPU seconds ``name`` used over the block."""
        o0, c0 = self._cpu0.get(name, (0.0, 0.0))
        o1, c1 = self._cpu1.get(name, (0.0, 0.0))
        return o1 - o0, c1 - c0

    def cpu_seconds(self, name: str) -> float:
        """CPU seconds ``name`` (with its children) used over the block."""
        return sum(self.cpu_split(name))

    def cpu_percent(self, name: str) -> float:
        return 100 * self.cpu_seconds(name) / max(self.seconds, 1e-9)

    def idle_baseline(self) -> IdleBaseline:
        """This block's machine CPU per second, for a block with nothing submitted."""
        m0, m1 = self._machine
        return IdleBaseline(machine=(m1.busy - m0.busy) / max(self.seconds, 1e-9), seconds=self.seconds)

    def row(self) -> dict[str, Any]:
        m0, m1 = self._machine
        busy, steal, total = m1.busy - m0.busy, m1.steal - m0.steal, max(m1.total - m0.total, 1e-9)
        row = {
            "seconds": round(self.seconds, 1),
            "machine_busy_percent": round(100 * busy / total),
            "machine_steal_percent": round(100 * steal / total, 1),
            "cpu_percent": {n: round(self.cpu_percent(n)) for n in self.names},
            "cpu_seconds": {n: round(self.cpu_seconds(n), 3) for n in self.names},
            # its own threads' (utime + stime), and its children's (those it forked, alive or ended)
            "cpu_seconds_own": {n: round(self.cpu_split(n)[0], 3) for n in self.names},
            "cpu_seconds_children": {n: round(self.cpu_split(n)[1], 3) for n in self.names},
            "machine_cpu_seconds": round(busy, 3),
            "machine_steal_cpu_seconds": round(steal, 3),
            "peak_rss_mib": {n: round(r / 2**20) for n, r in sorted(self.peak_rss.items())},
            # seconds the process's threads were ready to run but waited for a core
            "runqueue_wait_seconds": {n: round(w, 3) for n, w in self._waited.items()},
        }
        if self.idle is not None:
            idle = self.idle.machine * self.seconds
            row["machine_idle_cpu_seconds"] = round(idle, 3)
            row["machine_net_cpu_seconds"] = round(max(busy - idle, 0.0), 3)
        return row


# ---- CPU per pod (issue 24) -------------------------------------------------------------------
MACHINE = "machine"  # the machine's busy CPU (all cores; steal not in it), less the idle baseline's
OTHER = "other"  # the machine's CPU less the named processes': the kernel's own work, other processes
IDLE = "idle baseline"  # what the idle machine uses over the same time (subtracted from MACHINE)
STEAL = "steal"  # the hypervisor's time given to others (in no busy figure)
MACHINE_KEYS = (IDLE, STEAL, MACHINE)  # not processes: printed after them


def cpu_ms_per_pod(row: dict[str, Any], pods: int) -> dict[str, float]:
    """CPU milliseconds per pod of each process and of the whole machine (all cores, busy time,
    less the idle baseline where the row has one), from a ``ProcSampler.row()`` over a run of
    ``pods`` pods."""
    if pods <= 0:
        return {}
    out = {n: round(1000 * s / pods, 2) for n, s in sorted(row.get("cpu_seconds", {}).items())}
    if "machine_cpu_seconds" in row:
        gross = row["machine_cpu_seconds"]
        out[MACHINE] = round(1000 * row.get("machine_net_cpu_seconds", gross) / pods, 2)
        named = sum(row.get("cpu_seconds", {}).values())
        out[OTHER] = round(1000 * max(gross - named, 0.0) / pods, 2)
        for key, field_ in ((IDLE, "machine_idle_cpu_seconds"), (STEAL, "machine_steal_cpu_seconds")):
            if field_ in row:
                out[key] = round(1000 * row[field_] / pods, 2)
    return out


def cpu_split_ms_per_pod(row: dict[str, Any], pods: int) -> dict[str, tuple[float, float]]:
    """(own, children's) CPU ms per pod of each process that ran children over the run."""
    own, children = row.get("cpu_seconds_own", {}), row.get("cpu_seconds_children", {})
    if pods <= 0:
        return {}
    return {
        n: (round(1000 * own.get(n, 0.0) / pods, 2), round(1000 * c / pods, 2))
        for n, c in sorted(children.items())
        if round(1000 * c / pods, 2)
    }


def cpu_ratio(bridge: dict[str, float], default: dict[str, float], name: str = MACHINE) -> float | None:
    """CPU per bridge pod over CPU per default-scheduler pod (issue 24's target: <= 2 for the
    machine); None when either is missing or the default's is zero."""
    b, d = bridge.get(name), default.get(name)
    if b is None or not d:
        return None
    return round(b / d, 2)


def added_ms(bridge: dict[str, float], default: dict[str, float], name: str = MACHINE) -> float | None:
    """What a bridge pod adds over a default scheduler's pod, in CPU ms per pod (the machine's:
    the CPU the bridge costs); None when either is missing."""
    b, d = bridge.get(name), default.get(name)
    if b is None or d is None:
        return None
    return round(b - d, 2)
