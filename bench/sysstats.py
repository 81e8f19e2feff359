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
  hack/cluster.sh and hack/bridge.sh write), each with its child processes, sampled from /proc in
  a thread: what each process cost during a run, and whether the machine itself was the limit;
  and how long each process's threads waited for a core (``/proc/<pid>/task/*/schedstat``): a
  process that waits about as long as it runs is held back by the machine, not by its own work.

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


def api_requests(api: Any) -> Counter[RequestKey]:
    """One scrape of the API server's request counters (``api``: a kubernetes ApiClient)."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = api.call_api(method, url, headers, body, post)
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET /metrics: HTTP {resp.status}: {data[:200]!r}")
    return parse_requests(data.decode())


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
def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds user+system) of one process, with those of its children that
    ended and were waited for: slurmctld's hooks (PrologSlurmctld, EpilogSlurmctld, each a few
    processes run by its slurmscriptd) and the commands the processes run are theirs."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / CLK_TCK


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) one process has used; 0 when it is gone."""
    stat = _stat(pid)
    return stat[1] if stat is not None else 0.0


def rss_mib(pid: int) -> float:
    return _rss(pid) / 2**20


def _tree(root: int, parents: dict[int, int]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p, pp in parents.items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def runqueue_waits(pid: int) -> dict[int, int]:
    """Nanoseconds each thread of ``pid`` has waited on a run queue (ready, no core free), by
    thread id; empty when the process is gone or the kernel keeps no schedstats."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            out[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def machine_busy() -> tuple[float, float]:
    """(busy CPU seconds, total CPU seconds) of the whole machine since boot."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = f[3] + f[4]
    return (sum(f[:8]) - idle) / CLK_TCK, sum(f[:8]) / CLK_TCK


def local_pids(state_dir: str, names: list[str]) -> dict[str, int]:
    out = {}
    for n in names:
        try:
            out[n] = int(Path(state_dir, "pids", f"{n}.pid").read_text().strip())
        except (OSError, ValueError):
            continue
    return out


BENCH_CLIENT = "bench client"
PROCESSES = ["kube-apiserver", "etcd", "kube-scheduler", "kwok", "kube-controller-manager", "slurmctld", "slurmrestd",
             "bridge-operator", "bridge-webhook", "bridge-extender", "bridge-scheduler"]  # fmt: skip


class ProcSampler:
    """CPU and memory of named processes (with their children) over a ``with`` block.

    ``row()`` gives each one's mean CPU in % of one core, its peak RSS, and the machine's busy
    share (of all cores): near 100 % means the machine, not the bridge, set the pace.
    """

    def __init__(self, pids: dict[str, int], interval: float = 0.5) -> None:
        # The benchmark's own client is on the machine too: named, so that it is not taken for the
        # system's (what the machine's CPU holds besides the named processes is reported as "other").
        mine = {} if os.getpid() in pids.values() else {BENCH_CLIENT: os.getpid()}
        self.pids = {**pids, **mine}
        self.interval = interval
        self.peak_rss: dict[str, int] = dict.fromkeys(self.pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._cpu0: dict[str, float] = {}
        self._cpu1: dict[str, float] = {}
        self._t: tuple[float, float] = (0.0, 0.0)
        self._busy: tuple[tuple[float, float], tuple[float, float]] = ((0.0, 0.0), (0.0, 0.0))
        self._waits0: dict[str, dict[int, int]] = {}
        self._waited: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        parents = {}
        stats: dict[int, float] = {}
        for d in os.listdir("/proc"):
            if d.isdigit() and (s := _stat(int(d))) is not None:
                parents[int(d)], stats[int(d)] = s
        cpu = {}
        for name, pid in self.pids.items():
            tree = _tree(pid, parents) if pid in parents else []
            cpu[name] = sum(stats.get(p, 0.0) for p in tree)
            self.peak_rss[name] = max(self.peak_rss[name], sum(_rss(p) for p in tree))
        return cpu

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> ProcSampler:
        self._cpu0, self._t = self._sample(), (time.monotonic(), 0.0)
        self._busy = (machine_busy(), (0.0, 0.0))
        self._waits0 = {name: runqueue_waits(pid) for name, pid in self.pids.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._cpu1 = self._sample()
        self._t = (self._t[0], time.monotonic())
        self._busy = (self._busy[0], machine_busy())
        # The process's own threads alive at the end (a child's or an ended thread's wait is gone).
        for name, pid in self.pids.items():
            before = self._waits0.get(name, {})
            waits = runqueue_waits(pid)
            if waits:
                self._waited[name] = sum(w - before.get(tid, 0) for tid, w in waits.items()) / 1e9

    @property
    def seconds(self) -> float:
        return self._t[1] - self._t[0]

    def cpu_percent(self, name: str) -> float:
        return 100 * (self._cpu1.get(name, 0.0) - self._cpu0.get(name, 0.0)) / max(self.seconds, 1e-9)

    def cpu_seconds(self, name: str) -> float:
        """CPU seconds ``name`` (with its children) used over the block."""
        return self._cpu1.get(name, 0.0) - self._cpu0.get(name, 0.0)

    def row(self) -> dict[str, Any]:
        (b0, t0), (b1, t1) = self._busy
        return {
            "seconds": round(self.seconds, 1),
            "machine_busy_percent": round(100 * (b1 - b0) / max(t1 - t0, 1e-9)),
            "cpu_percent": {n: round(self.cpu_percent(n)) for n in self.pids},
            "cpu_seconds": {n: round(self.cpu_seconds(n), 3) for n in self.pids},
            "machine_cpu_seconds": round(b1 - b0, 3),
            "peak_rss_mib": {n: round(r / 2**20) for n, r in self.peak_rss.items()},
            # seconds the process's threads were ready to run but waited for a core
            "runqueue_wait_seconds": {n: round(w, 3) for n, w in self._waited.items()},
        }


# ---- CPU per pod (issue 24) -------------------------------------------------------------------
MACHINE = "machine"
OTHER = "other"  # the machine's CPU less the named processes': the kernel's own work, other processes


def cpu_ms_per_pod(row: dict[str, Any], pods: int) -> dict[str, float]:
    """CPU milliseconds per pod of each process and of the whole machine (all cores, busy time),
    from a ``ProcSampler.row()`` over a run of ``pods`` pods."""
    if pods <= 0:
        return {}
    out = {n: round(1000 * s / pods, 2) for n, s in sorted(row.get("cpu_seconds", {}).items())}
    if "machine_cpu_seconds" in row:
        out[MACHINE] = round(1000 * row["machine_cpu_seconds"] / pods, 2)
        named = sum(row.get("cpu_seconds", {}).values())
        out[OTHER] = round(1000 * max(row["machine_cpu_seconds"] - named, 0.0) / pods, 2)
    return out


def cpu_ratio(bridge: dict[str, float], default: dict[str, float], name: str = MACHINE) -> float | None:
    """CPU per bridge pod over CPU per default-scheduler pod (issue 24's target: <= 2 for the
    machine); None when either is missing or the default's is zero."""
    b, d = bridge.get(name), default.get(name)
    if b is None or not d:
        return None
    return round(b / d, 2)
