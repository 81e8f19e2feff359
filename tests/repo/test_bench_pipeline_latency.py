"""pipeline_latency's probe of the process bridge's webhook: a run without it still measures the
API server's side, and says what it could not measure and why."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import pipeline_latency  # bench/ is not a package


def test_no_webhook_state_is_a_note_naming_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pipeline_latency.local_webhook(tmp_path) is None
    err = capsys.readouterr().err
    assert "not measured" in err and str(tmp_path / "bridge-webhook.port") in err and "hack/bridge.sh up" in err


def test_a_webhook_that_does_not_answer_is_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "bridge-webhook.port").write_text(f"{port}\n")
    (tmp_path / "bridge" / "tls").mkdir(parents=True)
    import trustme

    trustme.CA().cert_pem.write_to_path(str(tmp_path / "bridge" / "tls" / "ca.crt"))
    assert pipeline_latency.local_webhook(tmp_path) is None
    assert "not measured" in capsys.readouterr().err


def test_a_port_file_that_holds_no_port_is_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bridge-webhook.port").write_text("not-a-port\n")
    (tmp_path / "bridge" / "tls").mkdir(parents=True)
    import trustme

    trustme.CA().cert_pem.write_to_path(str(tmp_path / "bridge" / "tls" / "ca.crt"))
    assert pipeline_latency.local_webhook(tmp_path) is None
    assert "not measured" in capsys.readouterr().err


def test_cpu_targets_depend_on_the_mode() -> None:
    """A burst: the CPU a bridge pod adds over a default pod's, less S_ref, <= 8 ms, operator <= 5 ms;
    a steady rate: <= 12 ms and <= 7 ms; kube-apiserver's CPU per bridge pod <= 1.5x a default
    pod's in both. Without S_ref the added CPU is shown, checked against nothing."""
    figures = {
        "added_cpu_ms_per_pod": 20.0, "beyond_slurm_ms_per_pod": 10.0, "operator_cpu_ms_per_pod": 6.0,
        "apiserver_cpu_ratio": 1.6,
    }  # fmt: skip
    assert pipeline_latency.cpu_checks({"mode": "burst", **figures}) == [
        "added CPU less S_ref ms/pod 10.0 > 8", "operator CPU ms/pod 6.0 > 5",
        "kube-apiserver CPU/pod vs default 1.6 > 1.5",
    ]  # fmt: skip
    assert pipeline_latency.cpu_checks({"mode": "20/s", **figures}) == [
        "added CPU less S_ref ms/pod 10.0 <= 12", "operator CPU ms/pod 6.0 <= 7",
        "kube-apiserver CPU/pod vs default 1.6 > 1.5",
    ]  # fmt: skip
    no_ref = {**figures, "beyond_slurm_ms_per_pod": None}
    assert pipeline_latency.cpu_checks({"mode": "burst", **no_ref})[0] == "added machine CPU ms/pod (no S_ref) 20.0"
    assert pipeline_latency.cpu_checks({"mode": "burst"}) == [], "no figure, no check"


def test_the_targets_line_names_the_pass_without_slurmctlds_hooks() -> None:
    row = {"scheduler": "slurm-bridge", "mode": "burst", "bound": 5, "slurm_calls_per_pod": 2.0,
           "api_writes_per_pod": 7.0}  # fmt: skip
    line = pipeline_latency.verdict([{**row, "slurm_hooks": "on"}, {**row, "slurm_hooks": "off"}], 5)
    assert "burst slurm-bridge: " in line and "burst slurm-bridge, slurmctld's hooks off: " in line


def test_the_default_schedulers_pods_name_the_benchs_scheduler_only_when_it_runs() -> None:
    assert "schedulerName" not in pipeline_latency.pod_body("b0000")["spec"]
    body = pipeline_latency.pod_body("b0000", None, "bench-default-scheduler")
    assert body["spec"]["schedulerName"] == "bench-default-scheduler"


def test_every_run_says_which_client_the_default_scheduler_had() -> None:
    settings: dict[str, dict[str, Any]] = {
        "kube-scheduler": {"qps": 50, "burst": 100}, "bench kube-scheduler": {"qps": 200.0, "burst": 400},
    }  # fmt: skip
    assert pipeline_latency.client_label(settings, bench=False) == "stock 50/100"
    assert pipeline_latency.client_label(settings, bench=True) == "bench 200/400"
    assert pipeline_latency.client_label({"kube-scheduler": {"error": "refused"}}, bench=False) == "stock ?"


def test_the_cpu_table_puts_the_machines_figures_after_the_processes(capsys: pytest.CaptureFixture[str]) -> None:
    ms = {"machine": 40.0, "steal": 1.0, "idle baseline": 5.0, "etcd": 3.0, "other": 2.0}
    bridge = {"mode": "burst", "scheduler": "slurm-bridge", "added_cpu_ms_per_pod": 20.0, "cpu_ms_per_pod": ms}
    default = {"mode": "burst", "scheduler": "default-scheduler", "cpu_ms_per_pod": {"machine": 20.0, "etcd": 2.0}}
    pipeline_latency.print_cpu_per_pod([bridge, default])
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert names == ["etcd", "other", "idle", "steal", "machine", "slurm-bridge:"]


def test_a_node_guard_stops_a_baseline_run_saying_what_to_run_instead() -> None:
    """The default scheduler's baseline pods tolerate the bridge's taint, which the node guard
    refuses: the benchmark stops before its first create, naming the policy and the way out."""
    import clusterenv

    clusterenv.refuse_node_guard(["other-policy"])  # no guard: the run goes on
    with pytest.raises(SystemExit) as stopped:
        clusterenv.refuse_node_guard(["other-policy", "slurm-bridge-node-guard"])
    said = str(stopped.value)
    assert "slurm-bridge-node-guard" in said and "SB_NODE_GUARD=false bash hack/bridge.sh up" in said
    assert "other-policy" not in said


def test_a_sigterm_ends_the_run_through_its_with_blocks() -> None:
    """So the second default scheduler a run started is stopped, not left to race the next run's."""
    with pytest.raises(SystemExit) as stopped:
        pipeline_latency.stop_on_sigterm(15, None)
    assert stopped.value.code == 143
