"""The benchmark's API-write counting: parsing apiserver_request_total and subtracting the
background, which the write-per-pod figures rest on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sysstats  # bench/ is not a package

METRICS = """# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 200
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 150
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 50
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="PATCH",version="v1"} 1.5e+03
apiserver_request_total{code="201",component="apiserver",dry_run="All",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 9
apiserver_request_totalx{verb="POST"} 1
"""  # noqa: E501


def test_parse_sums_codes_and_skips_dry_runs() -> None:
    c = sysstats.parse_requests(METRICS)
    assert c[("POST", "pods")] == 200  # 201s and 409s; the dry run is not a write
    assert c[("POST", "pods/binding")] == 200
    assert c[("PATCH", "pods")] == 1500
    assert sysstats.writes(c) == Counter(
        {("POST", "pods"): 200, ("POST", "pods/binding"): 200, ("PATCH", "pods"): 1500}
    )


def test_write_delta_subtracts_background_and_leases() -> None:
    before = Counter({("POST", "pods"): 10, ("PUT", "leases"): 100, ("POST", "events"): 5})
    after = Counter({("POST", "pods"): 210, ("PUT", "leases"): 300, ("POST", "events"): 407})
    bg = sysstats.Background({("POST", "events"): 2.0})
    assert sysstats.write_delta(before, after, 1.0, bg) == {"POST events": 400.0, "POST pods": 200.0}


LOAD_METRICS = """apiserver_admission_webhook_admission_duration_seconds_count{name="pods.mutate.slinky.slurm.net",operation="CREATE",rejected="false",type="admit"} 190
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.mutate.slinky.slurm.net",operation="CREATE",rejected="true",type="admit"} 10
apiserver_watch_events_total{group="",resource="pods",version="v1"} 1200
apiserver_watch_events_total{group="coordination.k8s.io",resource="leases",version="v1"} 50
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 30
"""  # noqa: E501


def test_load_counts_admission_calls_watch_events_and_reads_without_writes_or_background() -> None:
    after = sysstats.parse_requests(METRICS + LOAD_METRICS)
    assert after[(sysstats.ADMIT, "pods.mutate.slinky.slurm.net CREATE")] == 200  # both series
    before = Counter({(sysstats.WATCH_EVENT, "pods"): 200, ("GET", "pods"): 10})
    bg = sysstats.Background({("GET", "pods"): 5.0})
    load = sysstats.load_delta(before, after, 2.0, bg)
    assert load == {
        "reads": {"GET pods": 10.0, "LIST pods": 9.0},  # 30 - 10 - 5/s x 2 s
        "admission": {"pods.mutate.slinky.slurm.net CREATE": 200.0},
        "watch_events": {"pods": 1000.0},  # leases are background heartbeats
    }


def test_proc_sampler_counts_the_cpu_of_a_process_and_its_children() -> None:
    sampler = sysstats.ProcSampler({"me": os.getpid()}, interval=0.05)
    with sampler:
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
    row = sampler.row()
    assert 20 <= row["cpu_percent"]["me"] <= 105
    assert row["peak_rss_mib"]["me"] > 5


def test_proc_sampler_counts_children_that_ended_and_names_the_benchmarks_own_client() -> None:
    """A child that runs and ends inside the block (slurmctld's hooks are such children of its
    slurmscriptd) is its parent's CPU; the benchmark's own process is named, not left in "other"."""
    sampler = sysstats.ProcSampler({"me": os.getpid()}, interval=0.05)
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    with sampler:
        subprocess.run([sys.executable, "-c", burn], check=True)
    assert sampler.row()["cpu_seconds"]["me"] >= 0.25, "the ended child's CPU is its parent's"
    assert sysstats.BENCH_CLIENT not in sampler.pids, "the caller named this process already"
    other = sysstats.ProcSampler({"init": 1})
    assert other.pids == {"init": 1, sysstats.BENCH_CLIENT: os.getpid()}


def test_api_requests_scrapes_metrics_with_the_kubernetes_client() -> None:
    """Through the same client configuration the benchmarks use (a local stand-in server)."""
    import http.server
    import threading

    from kubernetes import client as k8s

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = METRICS.encode() if self.path == "/metrics" else b"not found"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}"))
        assert sysstats.api_requests(api)[("POST", "pods/binding")] == 200
    finally:
        server.shutdown()


def test_cpu_ms_per_pod_of_each_process_and_the_machine() -> None:
    row = {"cpu_seconds": {"kube-apiserver": 3.0, "bridge-operator": 2.6}, "machine_cpu_seconds": 12.0}
    assert sysstats.cpu_ms_per_pod(row, 200) == {
        "bridge-operator": 13.0, "kube-apiserver": 15.0, "machine": 60.0, "other": 32.0,
    }  # fmt: skip
    assert sysstats.cpu_ms_per_pod(row, 0) == {}
    assert sysstats.cpu_ms_per_pod({"cpu_seconds": {}}, 10) == {}, "no machine figure without its sample"


def test_cpu_ratio_bridge_over_default() -> None:
    bridge, default = {"machine": 60.0, "etcd": 2.0}, {"machine": 25.0, "etcd": 0.0}
    assert sysstats.cpu_ratio(bridge, default) == 2.4
    assert sysstats.cpu_ratio(bridge, default, "etcd") is None, "a zero baseline has no ratio"
    assert sysstats.cpu_ratio(bridge, {}, "machine") is None


def test_proc_sampler_row_has_the_cpu_seconds_per_pod_rests_on() -> None:
    sampler = sysstats.ProcSampler({"me": os.getpid()}, interval=0.05)
    with sampler:
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
    row = sampler.row()
    assert 0.1 <= row["cpu_seconds"]["me"] <= 0.5
    assert row["machine_cpu_seconds"] >= row["cpu_seconds"]["me"] - 0.05
    per_pod = sysstats.cpu_ms_per_pod(row, 10)
    assert per_pod["me"] == round(1000 * row["cpu_seconds"]["me"] / 10, 2)


ADMISSION_TIME = """apiserver_admission_webhook_admission_duration_seconds_count{name="mutate-pods.b.slinky.slurm.net",operation="CREATE",rejected="false",type="admit"} {count}
apiserver_admission_webhook_admission_duration_seconds_sum{name="mutate-pods.b.slinky.slurm.net",operation="CREATE",rejected="false",type="admit"} {seconds}
apiserver_admission_webhook_admission_duration_seconds_sum{name="validate.b.slinky.slurm.net",operation="UPDATE",rejected="false",type="validating"} 9
"""  # noqa: E501


def test_admission_ms_per_call_is_the_api_servers_time_over_its_calls_between_two_scrapes() -> None:
    before = sysstats.parse_requests(ADMISSION_TIME.replace("{count}", "22").replace("{seconds}", "0.5"))
    after = sysstats.parse_requests(ADMISSION_TIME.replace("{count}", "222").replace("{seconds}", "19.9"))
    assert sysstats.admission_ms_per_call(before, after) == {"mutate-pods.b.slinky.slurm.net CREATE": 97.0}
    bg = sysstats.Background()
    assert sysstats.load_delta(before, after, 1.0, bg)["admission"] == {"mutate-pods.b.slinky.slurm.net CREATE": 200.0}
    assert sysstats.load_delta(before, after, 1.0, bg)["reads"] == {}, "the time is not a request"
    assert sysstats.admission_ms_per_call(after, after) == {}, "no call, no mean"


REVIEWS = """# TYPE slurm_bridge_webhook_admission_duration_seconds histogram
slurm_bridge_webhook_admission_duration_seconds_bucket{endpoint="mutate",operation="CREATE",le="0.005"} 200.0
slurm_bridge_webhook_admission_duration_seconds_count{endpoint="mutate",operation="CREATE"} {count}
slurm_bridge_webhook_admission_duration_seconds_sum{endpoint="mutate",operation="CREATE"} {seconds}
slurm_bridge_webhook_admission_duration_seconds_count{endpoint="mutate",operation="UPDATE"} 10.0
slurm_bridge_webhook_admission_duration_seconds_sum{endpoint="mutate",operation="UPDATE"} 0.01
"""


def test_review_ms_is_the_webhooks_own_time_per_review_summed_over_operations() -> None:
    before = sysstats.parse_reviews(REVIEWS.replace("{count}", "0.0").replace("{seconds}", "0.0"))
    after = sysstats.parse_reviews(REVIEWS.replace("{count}", "200.0").replace("{seconds}", "0.26"))
    assert before == {"mutate count": 10.0, "mutate sum": 0.01}
    assert sysstats.review_ms(before, after) == {"mutate": 1.3}
    assert sysstats.review_ms(after, after) == {}


def test_proc_sampler_reports_how_long_a_process_waited_for_a_core() -> None:
    """One busy process more than the machine has cores makes this one wait on the run queue."""
    spin = "import time\nend = time.monotonic() + 0.6\nwhile time.monotonic() < end: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    sampler = sysstats.ProcSampler({"me": os.getpid()}, interval=0.05)
    try:
        with sampler:
            end = time.monotonic() + 0.4
            while time.monotonic() < end:
                pass
    finally:
        for p in procs:
            p.wait()
    waited = sampler.row()["runqueue_wait_seconds"]["me"]
    assert waited > 0.01, f"busy beside {len(procs)} busy processes, this one waited {waited} s"
    assert sysstats.runqueue_waits(os.getpid()), "this process's threads have schedstats"


# ---- what the CPU figures count, on synthetic /proc snapshots ---------------------------------
TICK = sysstats.CLK_TCK
Proc = tuple[int, str, float, float]  # (parent pid, command, own CPU seconds, waited-for children's)


def fake_proc(root: Path, procs: dict[int, Proc], cpu: str = "cpu 0 0 0 0 0 0 0 0 0 0") -> Path:
    """A /proc of these processes (stat, statm) and this /proc/stat ``cpu`` line; the processes
    not given are gone."""
    root.mkdir(exist_ok=True)
    for d in root.iterdir():
        if d.name.isdigit() and int(d.name) not in procs:
            for f in d.iterdir():
                f.unlink()
            d.rmdir()
    for pid, (ppid, comm, own, waited) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        ticks = f"{round(own * TICK)} 0 {round(waited * TICK)} 0"
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} 0 0 0 -1 0 0 0 0 0 {ticks} 20 0 1 0 0 0\n")
        (root / str(pid) / "statm").write_text("1000 256 0 0 0 0 0\n")
    (root / "stat").write_text(f"{cpu}\ncpu0 0 0 0 0\n")
    return root


def ticks(*seconds: float) -> str:
    return "cpu " + " ".join(str(round(s * TICK)) for s in seconds)


def test_steal_is_reported_apart_and_is_not_busy() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice (guest is already in user)
    m = sysstats.parse_machine(ticks(10, 1, 4, 100, 5, 0.5, 0.5, 30, 2, 0) + "\ncpu0 1 2 3\n")
    assert (m.busy, m.steal, m.total) == (16.0, 30.0, 151.0), "steal is neither busy nor idle; guest not twice"
    row = {"cpu_seconds": {}, "machine_cpu_seconds": 16.0, "machine_steal_cpu_seconds": 30.0}
    assert sysstats.cpu_ms_per_pod(row, 100) == {"machine": 160.0, "other": 160.0, "steal": 300.0}


def test_steal_over_a_block_is_left_out_of_the_machines_busy_share(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc", {}, ticks(0, 0, 0, 0, 0, 0, 0, 0))
    sampler = sysstats.ProcSampler({}, interval=60, proc=proc)
    with sampler:
        fake_proc(proc, {}, ticks(3, 0, 1, 4, 0, 0, 0, 2))  # 4 s busy, 4 s idle, 2 s stolen
    row = sampler.row()
    assert (row["machine_cpu_seconds"], row["machine_steal_cpu_seconds"]) == (4.0, 2.0)
    assert (row["machine_busy_percent"], row["machine_steal_percent"]) == (40, 20.0)


def test_the_idle_baseline_is_subtracted_from_the_machines_cpu(tmp_path: Path) -> None:
    """The idle machine's CPU per second, measured with nothing submitted, times the run's length."""
    proc = fake_proc(tmp_path / "proc", {}, ticks(0, 0, 0, 0))
    idle = sysstats.ProcSampler({}, interval=60, proc=proc, clock=iter([0.0, 4.0]).__next__)
    with idle:
        fake_proc(proc, {}, ticks(1, 0, 1, 6))  # 2 s busy over 4 s: 0.5 core
    baseline = idle.idle_baseline()
    assert (baseline.machine, baseline.seconds) == (0.5, 4.0)
    run = sysstats.ProcSampler({}, interval=60, idle=baseline, proc=proc, clock=iter([10.0, 30.0]).__next__)
    with run:
        fake_proc(proc, {}, ticks(20, 0, 6, 30))  # 24 s busy over 20 s, of which the idle machine's 10 s
    row = run.row()
    assert (row["machine_cpu_seconds"], row["machine_idle_cpu_seconds"], row["machine_net_cpu_seconds"]) == (
        24.0, 10.0, 14.0,
    )  # fmt: skip
    per_pod = sysstats.cpu_ms_per_pod(row, 100)
    assert (per_pod["machine"], per_pod["idle baseline"], per_pod["other"]) == (140.0, 100.0, 240.0)
    assert sysstats.cpu_ratio(per_pod, {"machine": 70.0}) == 2.0, "the ratio compares the pods' own CPU"
    assert sysstats.added_ms(per_pod, {"machine": 70.0}) == 70.0


def test_own_cpu_apart_from_the_childrens_and_every_process_named(tmp_path: Path) -> None:
    """slurmctld's own threads apart from slurmscriptd and the hooks it runs; processes without a
    pid file named by their command; a child that ended inside the block counted once."""
    start: dict[int, Proc] = {
        1: (0, "init", 0, 0),
        100: (1, "slurmctld", 10, 0),
        101: (100, "slurmscriptd", 1, 5),
        102: (101, "bash", 0.5, 0),  # a hook
        200: (1, "mariadbd", 3, 0),
        300: (1, "kube-scheduler", 7, 0),  # the default scheduler
        301: (1, "kube-scheduler", 4, 0),  # the bridge's
        400: (1, "slurmstepd", 1, 0),  # slurmd's, reaped by init
        500: (1, "containerd-shim", 1, 0),
        501: (500, "python3", 2, 0),  # a container's process
        502: (501, "kube-scheduler", 1, 0),  # and a kube-scheduler in a pod: not the cluster's
        600: (1, "jobset-controll", 1, 0),
    }
    proc = fake_proc(tmp_path / "proc", start)
    roots = {"slurmctld": 100, "kube-scheduler": 300, "bridge-scheduler": 301}
    sampler = sysstats.ProcSampler(roots, interval=60, proc=proc)
    with sampler:
        middle = {**start, 101: (100, "slurmscriptd", 1.2, 5), 102: (101, "bash", 0.9, 0), 400: (1, "slurmstepd", 3, 0)}
        fake_proc(proc, middle)
        sampler.sample()
        end = {k: v for k, v in middle.items() if k not in (102, 400)}  # the hook and the step ended
        end |= {100: (1, "slurmctld", 12, 0), 101: (100, "slurmscriptd", 1.2, 5.9), 200: (1, "mariadbd", 3.5, 0),
                300: (1, "kube-scheduler", 9, 0), 301: (1, "kube-scheduler", 4.25, 0), 501: (500, "python3", 3, 0),
                600: (1, "jobset-controll", 1.5, 0)}  # fmt: skip
        fake_proc(proc, end)
    row = sampler.row()
    own, children = row["cpu_seconds_own"], row["cpu_seconds_children"]
    assert (own["slurmctld"], children["slurmctld"]) == (2.0, 0.6), "slurmscriptd's 0.2 s, the hook's 0.4 s once"
    assert (own["kube-scheduler"], own["bridge-scheduler"]) == (2.0, 0.25), "the pid files tell them apart"
    assert (own["mariadb"], own["jobset-controller"]) == (0.5, 0.5), "named by their commands"
    assert own["slurmd"] == 2.0, "a step that ended, reaped by init: its CPU up to its last sample"
    assert (own["containerd"], children["containerd"]) == (0.0, 0.0), "the shim's own"
    assert (own["containers"], children["containers"]) == (1.0, 0.0), "a pod's processes are the containers'"
    assert row["cpu_seconds"]["slurmctld"] == 2.6, "the total is both"
    assert "init" not in row["cpu_seconds"], "nothing named: other"
    split = sysstats.cpu_split_ms_per_pod(row, 10)
    assert split["slurmctld"] == (200.0, 60.0) and "kube-scheduler" not in split, "only those that ran children"


@pytest.mark.parametrize(
    ("comm", "name"),
    [("slurmd", "slurmd"), ("slurmdbd", "slurmdbd"), ("slurmstepd", "slurmd"), ("mariadbd", "mariadb"),
     ("munged", "munged"), ("kube-controller", "kube-controller-manager"), ("lws-controller", "lws-controller"),
     ("kwok", "kwok"), ("containerd", "containerd"), ("kubelet", "kubelet"), ("kube-proxy", "kube-proxy"),
     ("slurm-bridge-op", "bridge-operator"), ("bash", None), ("etcdctl", None)],
)  # fmt: skip
def test_process_names_by_command(comm: str, name: str | None) -> None:
    assert sysstats.process_name(comm) == name


def test_pod_watchers_from_the_stable_longrunning_gauge() -> None:
    text = """# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 5
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="WATCH",version="v1"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="WATCH",version="v1"} 1
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="exec",verb="CONNECT",version="v1"} 1
apiserver_longrunning_requests{component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1"} 6
"""  # noqa: E501
    assert sysstats.parse_watchers(text) == {"nodes": 6, "pods": 7}


def test_wait_quiet_waits_until_the_machine_is_back_at_its_idle_rate() -> None:
    """Each window: the machine's busy seconds over it; quiet within the margin of the idle rate."""
    idle = sysstats.IdleBaseline(machine=0.3, seconds=10)
    busy_per_window = iter([1.8, 0.9, 0.42])  # CPU seconds a second in three 1 s windows
    state = {"t": 0.0, "busy": 0.0}

    def read() -> sysstats.MachineCpu:
        return sysstats.MachineCpu(state["busy"], 0.0, state["t"] * 2)

    def sleep(s: float) -> None:
        state["busy"] += next(busy_per_window) * s
        state["t"] += s

    waited = sysstats.wait_quiet(idle, margin=0.15, read=read, clock=lambda: state["t"], sleep=sleep)
    assert waited == 3.0, "quiet in the third window (0.42 <= 0.3 + 0.15)"
    assert sysstats.is_quiet(0.44, idle, 0.15) and not sysstats.is_quiet(0.46, idle, 0.15)


def test_wait_quiet_gives_up_at_its_timeout() -> None:
    idle, state = sysstats.IdleBaseline(machine=0.1), {"t": 0.0, "busy": 0.0}

    def sleep(s: float) -> None:
        state["busy"] += 2.0 * s
        state["t"] += s

    waited = sysstats.wait_quiet(
        idle,
        timeout=5.0,
        read=lambda: sysstats.MachineCpu(state["busy"], 0.0, 0.0),
        clock=lambda: state["t"],
        sleep=sleep,
    )
    assert waited == 5.0
