"""pipeline_latency's probe of the process bridge's webhook: a run without it still measures the
API server's side, and says what it could not measure and why."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

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
