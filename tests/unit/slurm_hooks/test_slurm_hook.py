"""slurmctld's hook to the bridge: the site script (slurm-hooks/slurm-bridge-notify.sh), its compiled
form (slurm-bridge-notify.c), and the operator's endpoint they post to (operator/wiring/slurmhook.py).
Both hooks run as slurmctld runs them, against a local HTTP listener, through the same tests (the
``hook`` fixture); the endpoint through aiohttp's test server, with the hints it feeds recorded."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment, notice_comment
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import JobOwner, SignedStart
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.operator.wiring.slurmhook import MAX_SKEW_SECONDS, SIGNATURE_HEADER, HookToken, slurm_hook
from tests.harness import wait_for

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "slurm-hooks" / "slurm-bridge-notify.sh"
SOURCE = REPO / "slurm-hooks" / "slurm-bridge-notify.c"


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled hook, built as the docs say (cc -O2), warnings as errors."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler (cc) is needed to build slurm-hooks/slurm-bridge-notify.c: apt-get install gcc libc6-dev"
    out = tmp_path_factory.mktemp("compiled") / "slurm-bridge-notify"
    built = subprocess.run(
        [cc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(SOURCE)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(params=["script", "compiled"])
def hook(request: pytest.FixtureRequest) -> Path:
    """Each behaviour test runs against both forms of the hook."""
    return SCRIPT if request.param == "script" else Path(request.getfixturevalue("compiled"))


SLURM_CONF_SH = REPO / "hack" / "cluster" / "slurm-conf.sh"


def _authenticated(headers: Any, raw: bytes, secret: bytes = b"s3cret") -> str:
    """How a notice proved it holds the secret: "signed" (an HMAC-SHA256 of its body, checked
    here with Python's hmac), or its Authorization header."""
    signature = headers.get("X-Slurm-Bridge-Signature")
    if signature is None:
        return str(headers.get("Authorization", ""))
    want = "sha256=" + hmac.new(secret, raw, hashlib.sha256).hexdigest()
    return "signed" if signature == want else f"bad signature {signature}"


class Listener:
    """A local HTTP server that records each POST (how it was authenticated, and its body less its
    time, which must be now) and answers with the next of ``answers``."""

    def __init__(self, answers: list[int]) -> None:
        self.answers, self.got = answers, list[tuple[str, Any]]()
        self.secret, self.headers = b"s3cret", list[dict[str, str]]()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                body = json.loads(raw)
                assert abs(body.pop("time") - time.time()) < 5, body
                outer.headers.append(dict(self.headers))
                outer.got.append((_authenticated(self.headers, raw, outer.secret), body))
                self.send_response(outer.answers.pop(0) if outer.answers else 202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/slurm/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener([])
    yield served
    served.server.shutdown()


def run_hook(hook: Path, tmp: Path, url: str, path: str = "/usr/bin:/bin", **env: str) -> float:
    """Run the script as slurmctld would (its first line: /bin/sh's front, then bash); returns how
    long it took (it must not wait)."""
    if not (tmp / "token").exists():  # not rewritten: an earlier run's child may be reading it
        (tmp / "token").write_text("s3cret\n")
    (tmp / "notify.conf").write_text(f"URL={url}\nTOKEN_FILE={tmp / 'token'}  # the secret\nTRIES=3\n")
    full = {"PATH": path, "SLURM_BRIDGE_NOTIFY_CONF": str(tmp / "notify.conf"), "SLURM_JOB_ID": "42", **env}
    began = time.monotonic()
    proc = subprocess.run([str(hook)], env=full, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    return time.monotonic() - began


def test_the_hook_tells_the_bridge_of_a_start_and_an_end_and_never_waits(
    hook: Path, tmp_path: Path, listener: Listener
) -> None:
    assert run_hook(hook, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="prolog_slurmctld") < 1.0
    run_hook(hook, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    wait_for(lambda: len(listener.got) == 2, 5, "both notices")
    assert sorted(listener.got, key=str) == [
        ("signed", {"event": "ended", "jobId": 42}),
        ("signed", {"event": "started", "jobId": 42}),
    ]


def test_a_start_says_where_and_when_in_its_signed_body(hook: Path, tmp_path: Path, listener: Listener) -> None:
    """What slurmctld gives the script; names a hostlist cannot hold are left out (the operator
    then reads the job), and a start time that is not a number is the notice's own."""
    where = {
        "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
        "SLURM_JOB_NODELIST": "kwok-node-[1-2,4]",
        "SLURM_JOB_PARTITION": "topo-block",
    }
    run_hook(hook, tmp_path, listener.url, SLURM_JOB_START_TIME="1790000000", **where)
    wait_for(lambda: len(listener.got) == 1, 5, "the start")
    said = {"nodes": "kwok-node-[1-2,4]", "partition": "topo-block", "startTime": 1790000000}
    assert listener.got.pop() == ("signed", {"event": "started", "jobId": 42, **said})
    whose = {
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "2001",
        "SLURM_JOB_GROUP": "team-a",
        "SLURM_JOB_GID": "0",
        "SLURM_JOB_ACCOUNT": "a.b_c-d",
        "SLURM_JOB_QOS": "normal",
    }
    run_hook(
        hook,
        tmp_path,
        listener.url,
        SLURM_JOB_START_TIME="1790000000",
        SLURM_JOB_END_TIME="1790000600",
        **where,
        **whose,
    )
    wait_for(lambda: len(listener.got) == 1, 5, "the start that says whose")
    owner = {"user": "alice", "uid": 2001, "group": "team-a", "gid": 0, "account": "a.b_c-d", "qos": "normal"}
    assert listener.got.pop() == ("signed", {"event": "started", "jobId": 42, **said, "endTime": 1790000600, **owner})
    for odd in ({"SLURM_JOB_UID": "007"}, {"SLURM_JOB_USER": 'a"b'}, {"SLURM_JOB_QOS": ""}):
        run_hook(hook, tmp_path, listener.url, SLURM_JOB_START_TIME="1790000000", **where, **{**whose, **odd})
        wait_for(lambda: len(listener.got) == 1, 5, f"the start with {odd}")
        assert listener.got.pop() == ("signed", {"event": "started", "jobId": 42, **said}), "whose: all or none"
    run_hook(hook, tmp_path, listener.url, SLURM_JOB_START_TIME="soon", **where)
    wait_for(lambda: len(listener.got) == 1, 5, "the start without a start time")
    auth, body = listener.got.pop()
    assert auth == "signed" and abs(body.pop("startTime") - time.time()) < 5 and body["nodes"] == "kwok-node-[1-2,4]"
    for bad in ({"SLURM_JOB_NODELIST": 'n1","jobId":1'}, {"SLURM_JOB_PARTITION": "a b"}, {"SLURM_JOB_NODELIST": ""}):
        run_hook(hook, tmp_path, listener.url, **{**where, **bad})
        wait_for(lambda: len(listener.got) == 1, 5, f"the start with {bad}")
        assert listener.got.pop() == ("signed", {"event": "started", "jobId": 42}), bad
    run_hook(hook, tmp_path, listener.url, **{**where, "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"})
    wait_for(lambda: len(listener.got) == 1, 5, "the end")
    assert listener.got.pop() == ("signed", {"event": "ended", "jobId": 42}), "an end says no nodes"


@pytest.mark.parametrize("sender", ["curl", "bash+sha256sum", "bash+openssl", "compiled"])
@pytest.mark.parametrize("secret", ["666\\6%s", "x" * 64, "y" * 65 + "6\\", "  spaced  "])
def test_the_signature_is_rfc_2104_for_any_secret(
    tmp_path: Path, listener: Listener, secret: str, sender: str, request: pytest.FixtureRequest
) -> None:
    """Bytes that become NUL once padded ('6' ^ 0x36, '\\' ^ 0x5c), printf's own '%', a secret of
    a whole block and one longer (hashed first), spaces around it (left out, as the operator does);
    sent by curl, and by bash alone (the local cluster's Slurm root has no curl) hashing with
    sha256sum, or with openssl where coreutils' sha256sum is missing; and by the compiled hook, which
    hashes itself."""
    (tmp_path / "token").write_text(secret + "\nsecond line, not read\n")
    (tmp_path / "notify.conf").write_text(f"URL={listener.url}\nTOKEN_FILE={tmp_path / 'token'}\n")
    bash_only = sender.startswith("bash+")
    path = str(_bash_only_bin(tmp_path, hasher=sender.removeprefix("bash+"))) if bash_only else "/usr/bin:/bin"
    env = {
        "PATH": path,
        "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"),
        "SLURM_JOB_ID": "7",
        "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
    }
    listener.secret = secret.strip().encode()
    argv = [str(request.getfixturevalue("compiled"))] if sender == "compiled" else ["bash", str(SCRIPT)]
    subprocess.run(argv, env=env, check=True, timeout=10)
    wait_for(lambda: listener.got, 5, "the notice")
    assert listener.got == [("signed", {"event": "ended", "jobId": 7})]
    assert "Authorization" not in listener.headers[0], "the secret never travels"


def test_a_standby_answer_is_tried_again_and_a_refusal_is_not(hook: Path, tmp_path: Path, listener: Listener) -> None:
    listener.answers += [503, 503]
    run_hook(hook, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="prolog_slurmctld")
    wait_for(lambda: len(listener.got) == 3, 5, "two retries after 503")
    listener.got.clear()
    listener.answers += [401]
    run_hook(hook, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="prolog_slurmctld")
    wait_for(lambda: len(listener.got) == 1, 5, "the refused notice")
    time.sleep(0.5)
    assert len(listener.got) == 1, "a wrong token is not tried again"


def test_without_curl_bash_alone_sends_the_notice(hook: Path, tmp_path: Path, listener: Listener) -> None:
    run_hook(hook, tmp_path, listener.url, path=str(_bash_only_bin(tmp_path)), SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    wait_for(lambda: len(listener.got) == 1, 5, "the notice over /dev/tcp")
    assert listener.got == [("signed", {"event": "ended", "jobId": 42})]


@pytest.mark.parametrize("with_curl", [True, False])
def test_a_host_that_cannot_sign_sends_nothing_and_says_why(
    tmp_path: Path, listener: Listener, with_curl: bool
) -> None:
    """Neither sha256sum nor openssl: no notice at all (never the secret itself, which the operator
    refuses anyway), the reason on stderr and in LOG; still exit 0 at once (a failing
    PrologSlurmctld would cancel the job)."""
    bin_dir = _bash_only_bin(tmp_path, *(("curl",) if with_curl else ()), hasher=None)
    (tmp_path / "token").write_text("s3cret\n")
    log = tmp_path / "logs" / "notify.log"
    log.parent.mkdir()
    conf = f"URL={listener.url}\nTOKEN_FILE={tmp_path / 'token'}\nLOG={log}\n"
    (tmp_path / "notify.conf").write_text(conf)
    env = {"PATH": str(bin_dir), "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"), "SLURM_JOB_ID": "42",
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}  # fmt: skip
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and proc.stdout == ""
    assert "job 42 started: not sent: neither sha256sum nor openssl" in proc.stderr, proc.stderr
    assert "not sent: neither sha256sum nor openssl" in log.read_text()
    assert "s3cret" not in proc.stderr + log.read_text()
    time.sleep(0.5)
    assert listener.got == [], "nothing is sent that is not signed"
    (tmp_path / "notify.conf").write_text(conf.replace(f"LOG={log}", f"LOG={tmp_path / 'absent' / 'x.log'}"))
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and "not sent" in proc.stderr, "a log directory that is not there: stderr alone"


def test_the_compiled_hook_starts_no_program_for_an_http_url(
    tmp_path: Path, listener: Listener, compiled: Path
) -> None:
    """Its PATH holds nothing at all: it hashes and speaks HTTP itself."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    run_hook(compiled, tmp_path, listener.url, path=str(empty), SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    wait_for(lambda: len(listener.got) == 1, 5, "the notice without any program")
    assert listener.got == [("signed", {"event": "ended", "jobId": 42})]


def test_the_compiled_hooks_sha_256_at_every_block_boundary(tmp_path: Path, listener: Listener, compiled: Path) -> None:
    """Its own SHA-256 (no hasher to lean on): bodies of every length across the padding's edges
    (the inner hash covers the 64-byte pad and the body: a body of 119, 120, 127 or 128 bytes ends
    its last block at 55, 56, 63 or 64), each signature checked with Python's hmac."""
    lengths = set()
    for extra in range(0, 80):
        nodes = "n" + "1" * extra
        run_hook(compiled, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="prolog_slurmctld",
                 SLURM_JOB_NODELIST=nodes, SLURM_JOB_PARTITION="p", SLURM_JOB_START_TIME="1790000000")  # fmt: skip
        wait_for(lambda: len(listener.got) == 1, 5, f"the notice with {nodes}")
        auth, body = listener.got.pop()
        assert auth == "signed" and body["nodes"] == nodes, (auth, body)
        lengths.add(int(listener.headers.pop()["Content-Length"]))
    assert {119, 120, 127, 128} <= lengths, sorted(lengths)


def test_the_compiled_hook_hands_https_to_curl_with_the_signature_on_its_stdin(tmp_path: Path, compiled: Path) -> None:
    """An https:// URL goes to curl (TLS is curl's), the signature header on curl's stdin, never on
    its command line; without curl nothing is sent, and it says why on stderr and in LOG."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    said = tmp_path / "curl-said"
    (fake / "curl").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {said}.args\ncat > {said}.stdin\n')
    (fake / "curl").chmod(0o755)
    (tmp_path / "token").write_text("s3cret\n")
    log = tmp_path / "logs" / "notify.log"
    log.parent.mkdir()
    url = "https://bridge.example.internal/slurm/hook"
    (tmp_path / "notify.conf").write_text(f"URL={url}\nTOKEN_FILE={tmp_path / 'token'}\nTRIES=2\nLOG={log}\n")
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"),
           "SLURM_JOB_ID": "9", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}  # fmt: skip
    proc = subprocess.run([str(compiled)], env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""
    wait_for(lambda: Path(f"{said}.stdin").exists() and Path(f"{said}.stdin").read_text(), 5, "curl's run")
    args = Path(f"{said}.args").read_text().splitlines()
    body = args[args.index("--data") + 1]
    assert args[-1] == url and args[args.index("--retry") + 1] == "1" and "-H" in args and "@-" in args
    assert json.loads(body)["jobId"] == 9 and not [a for a in args if "s3cret" in a or "Signature" in a]
    want = hmac.new(b"s3cret", body.encode(), hashlib.sha256).hexdigest()
    assert Path(f"{said}.stdin").read_text() == f"X-Slurm-Bridge-Signature: sha256={want}\n"
    env["PATH"] = str(tmp_path / "empty-bin")
    proc = subprocess.run([str(compiled)], env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and "job 9 ended: not sent: the URL is https:// and curl is not on PATH" in proc.stderr
    assert "curl is not on PATH" in log.read_text() and "s3cret" not in proc.stderr + log.read_text()


def _bash_only_bin(tmp: Path, *more: str, hasher: str | None = "sha256sum") -> Path:
    """A PATH of bash alone (it sends the notice itself over /dev/tcp), with the ``hasher`` that
    signs it and ``more`` programs."""
    bin_dir = tmp / f"bin-bash-{hasher}-{'-'.join(more)}"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("bash", *((hasher,) if hasher else ()), *more):
        found = shutil.which(tool)
        assert found, f"{tool} is not installed"
        if not (bin_dir / tool).exists():
            os.symlink(found, bin_dir / tool)
    return bin_dir


@pytest.mark.parametrize("sender", ["curl", "bash", "compiled"])
def test_the_notice_outlives_slurmctld_killing_the_scripts_process_group(
    tmp_path: Path, listener: Listener, sender: str, request: pytest.FixtureRequest
) -> None:
    """slurmctld kills a PrologSlurmctld's process group as soon as the script exits: the child that
    sends the notice must have left it by then (before, most notices on Slurm 26.05.5 were lost)."""
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "notify.conf").write_text(f"URL={listener.url}\nTOKEN_FILE={tmp_path / 'token'}\n")
    path = str(_bash_only_bin(tmp_path)) if sender == "bash" else "/usr/bin:/bin"
    argv = [str(request.getfixturevalue("compiled"))] if sender == "compiled" else ["bash", str(SCRIPT)]
    rounds = 10
    for job in range(rounds):
        env = {"PATH": path, "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"), "SLURM_JOB_ID": str(job),
               "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}  # fmt: skip
        proc = subprocess.Popen(argv, env=env, start_new_session=True)
        proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # nothing was left in it
            os.killpg(proc.pid, 9)  # what slurmctld does once the script exited
    wait_for(lambda: len(listener.got) == rounds, 10, f"all {rounds} notices")
    assert sorted(b["jobId"] for _, b in listener.got) == list(range(rounds))


def _senders(script: Path) -> list[int]:
    """The processes still running the hook (its background sender is a fork of it)."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and str(script).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


@pytest.mark.parametrize("form", ["script", "compiled"])
def test_a_connect_that_hangs_is_given_up_within_5_seconds_without_curl(
    tmp_path: Path, form: str, request: pytest.FixtureRequest
) -> None:
    """Without curl bash connects itself, as the compiled hook always does for http://, and a
    connect can hang (here: a listener whose queue is full drops the SYN); a watchdog ends the
    sender after 5 s, so no hook process lingers."""
    source = SCRIPT if form == "script" else Path(request.getfixturevalue("compiled"))
    script = tmp_path / ("notify.sh" if form == "script" else "notify")
    script.write_bytes(source.read_bytes())  # its own path: no other test's sender is counted
    script.chmod(0o755)
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    port = full.getsockname()[1]
    queued = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(1)]  # the queue is full now
    try:
        (tmp_path / "token").write_text("s3cret\n")
        (tmp_path / "notify.conf").write_text(
            f"URL=http://127.0.0.1:{port}/slurm/hook\nTOKEN_FILE={tmp_path / 'token'}\n"
        )
        env = {"PATH": str(_bash_only_bin(tmp_path)), "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"),
               "SLURM_JOB_ID": "7", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}  # fmt: skip
        began = time.monotonic()
        subprocess.run(["bash", str(script)] if form == "script" else [str(script)], env=env, timeout=10, check=True)
        assert _senders(script), "the sender runs on after the script exited"
        wait_for(lambda: not _senders(script), 8, "the hanging sender to be ended")
        assert 4 <= time.monotonic() - began < 8
    finally:
        for c in queued:
            c.close()
        full.close()


@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_SCRIPT_CONTEXT": "prolog_slurmd"},  # not slurmctld's
        {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_JOB_ID": "42; rm -rf /"},
        {"SLURM_SCRIPT_CONTEXT": "prolog_slurmctld", "SLURM_BRIDGE_NOTIFY_CONF": "/nonexistent"},
    ],
)
def test_anything_else_exits_0_and_sends_nothing(
    hook: Path, tmp_path: Path, listener: Listener, env: dict[str, str]
) -> None:
    run_hook(hook, tmp_path, listener.url, **env)
    time.sleep(0.5)
    assert listener.got == []


def test_the_partition_filter(hook: Path, tmp_path: Path, listener: Listener) -> None:
    run_hook(hook, tmp_path, listener.url, SLURM_SCRIPT_CONTEXT="prolog_slurmctld", SLURM_JOB_PARTITION="batch")
    conf = (tmp_path / "notify.conf").read_text()
    (tmp_path / "notify.conf").write_text(conf + "PARTITIONS=pods,gpu\n")
    subprocess.run(
        [str(hook)],
        env={
            "PATH": "/usr/bin:/bin",
            "SLURM_BRIDGE_NOTIFY_CONF": str(tmp_path / "notify.conf"),
            "SLURM_JOB_ID": "43",
            "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld",
            "SLURM_JOB_PARTITION": "batch",
        },
        check=True,
    )
    wait_for(lambda: len(listener.got) >= 1, 5, "the unfiltered notice")
    time.sleep(0.5)
    assert [b["jobId"] for _, b in listener.got] == [42], "job 43 is in a partition not listed"


def test_slurm_conf_names_the_handoff_as_slurmctlds_one_hook_and_it_runs_the_notify_hook() -> None:
    """The handoff script (hack/slurm-policy.conf, installed by both clusters) is the one
    PrologSlurmctld (Slurm 26.05 ends a job's configuration when the first of several ends, which
    would cut the handoff's wait short) and the one EpilogSlurmctld: each script run costs
    slurmctld's host milliseconds, so the notify hook has no line of its own and the handoff runs it
    at every job's start and end (NOTIFY in the handoff's configuration file)."""
    out = subprocess.run(["bash", str(SLURM_CONF_SH), "slurm.conf"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    conf = out.stdout.splitlines()
    handoff = "/etc/slurm/slurm-bridge-handoff.sh"
    assert [ln for ln in conf if ln.startswith(("PrologSlurmctld=", "EpilogSlurmctld="))] == [
        f"EpilogSlurmctld={handoff}",
        f"PrologSlurmctld={handoff}",
    ]
    assert not [ln for ln in conf if "notify" in ln], "a path the controller lacks would fail every job's end"
    refused = subprocess.run(
        ["bash", str(SLURM_CONF_SH), "slurm.conf", "notify_hook=/etc/slurm/slurm-bridge-notify.sh"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "unknown setting 'notify_hook'" in refused.stderr
    installer = (REPO / "hack" / "cluster" / "slurm.sh").read_text()
    assert "notify_hook" not in installer
    assert "notify=/etc/slurm/slurm-bridge-notify " in installer  # the compiled form


# ---- the operator's endpoint -----------------------------------------------------------------------
class Hints:
    def __init__(self) -> None:
        self.got: list[tuple[int, str]] = []
        self.starts: list[SignedStart | None] = []

    def hint(self, job_id: int, event: str, start: SignedStart | None = None) -> bool:
        self.got.append((job_id, event))
        self.starts.append(start)
        return job_id == 7


async def _client(
    token: HookToken | None, leader: bool, hints: Hints, *, accept_bearer: bool = False
) -> TestClient[Any, Any]:
    elector = SimpleNamespace(is_leader=asyncio.Event())
    if leader:
        elector.is_leader.set()
    app = web.Application()
    app.router.add_post("/slurm/hook", slurm_hook(hints, elector, token, accept_bearer=accept_bearer))  # type: ignore[arg-type]
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_a_bearer_notice_is_refused_unless_the_config_allows_it(tmp_path: Path) -> None:
    """The secret in clear (an older script) is refused, right or wrong, saying that notices must be
    signed and where to read why; nothing is taken. slurmHookAcceptBearer lets it in (a migration)."""
    (tmp_path / "token").write_text("s3cret\n")
    hints, token = Hints(), HookToken(tmp_path / "token")
    client = await _client(token, True, hints)
    try:
        for header in ({"Authorization": "Bearer s3cret"}, {"Authorization": "Bearer wrong"}, {}):
            r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7}, headers=header)
            text = await r.text()
            assert r.status == 401 and "notices must be signed" in text and "slurmHookAcceptBearer" in text, text
            assert "docs/configuration.md#slurm-hooks" in text
        assert hints.got == []
        now = int(time.time())
        raw, headers = _signed({"event": "started", "jobId": 7, "time": now})
        assert (await client.post("/slurm/hook", data=raw, headers=headers)).status == 202, "signed: taken"
        assert hints.got == [(7, "started")]
    finally:
        await client.close()
    assert Config().slurmHookAcceptBearer is False, "refused unless a site says otherwise"


async def test_the_endpoint_acts_only_on_the_leader_with_the_token(tmp_path: Path) -> None:
    """With slurmHookAcceptBearer (a migration from scripts that did not sign), a bearer notice
    with the right secret is a hint."""
    (tmp_path / "token").write_text("s3cret\n")
    hints, token = Hints(), HookToken(tmp_path / "token")
    ok = {"Authorization": "Bearer s3cret"}
    client = await _client(token, True, hints, accept_bearer=True)
    try:
        r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7}, headers=ok)
        assert r.status == 202 and await r.json() == {"read": True}
        r = await client.post("/slurm/hook", json={"event": "ended", "jobId": 8}, headers=ok)
        assert r.status == 200 and await r.json() == {"read": False}, "no news: taken, nothing read"
        bads: list[object] = [
            {"event": "started"},
            {"event": "begun", "jobId": 7},
            {"event": "started", "jobId": "7"},
            [],
        ]
        for bad in bads:
            assert (await client.post("/slurm/hook", json=bad, headers=ok)).status == 400
        start = {"event": "started", "jobId": 7}
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            assert (await client.post("/slurm/hook", json=start, headers=header)).status == 401
        assert hints.got == [(7, "started"), (8, "ended")]
        (tmp_path / "token").write_text("rotated-token\n")  # a rotated Secret: read again
        headers = {"Authorization": "Bearer rotated-token"}
        assert (await client.post("/slurm/hook", json={"event": "started", "jobId": 7}, headers=headers)).status == 202
    finally:
        await client.close()
    client = await _client(token, False, hints, accept_bearer=True)
    try:
        r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7}, headers=headers)
        assert r.status == 503 and "standby" in await r.text()
    finally:
        await client.close()
    client = await _client(None, True, hints)
    try:
        r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7}, headers=headers)
        assert r.status == 404 and "slurmHookTokenFile" in await r.text()
    finally:
        await client.close()


def _signed(body: dict[str, Any], secret: bytes = b"s3cret") -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    signature = "sha256=" + hmac.new(secret, raw, hashlib.sha256).hexdigest()
    return raw, {SIGNATURE_HEADER: signature, "Content-Type": "application/json"}


async def test_a_signed_start_says_where_and_when_and_nothing_else_is_taken(tmp_path: Path) -> None:
    """A signed notice needs no Authorization; its signature, its time and what a start says are
    checked before the leader takes it; an end's nodes, or an unsigned start's, are never passed on."""
    (tmp_path / "token").write_text("s3cret\n")
    hints, token = Hints(), HookToken(tmp_path / "token")
    now = int(time.time())
    client = await _client(token, True, hints)
    try:
        where = {"nodes": "kwok-node-[1-2]", "partition": "pods", "startTime": now - 1}
        raw, headers = _signed({"event": "started", "jobId": 7, "time": now, **where})
        r = await client.post("/slurm/hook", data=raw, headers=headers)
        assert r.status == 202 and await r.json() == {"read": True}
        assert hints.starts.pop() == SignedStart(
            nodes=("kwok-node-1", "kwok-node-2"), partition="pods", start_time=datetime.fromtimestamp(now - 1, UTC)
        )
        owner = {"user": "alice", "uid": 2001, "group": "team-a", "gid": 2001, "account": "a", "qos": "normal"}
        raw, headers = _signed({"event": "started", "jobId": 7, "time": now, **where, "endTime": now + 60, **owner})
        assert (await client.post("/slurm/hook", data=raw, headers=headers)).status == 202
        assert hints.starts.pop() == SignedStart(
            nodes=("kwok-node-1", "kwok-node-2"),
            partition="pods",
            start_time=datetime.fromtimestamp(now - 1, UTC),
            end_time=datetime.fromtimestamp(now + 60, UTC),
            owner=JobOwner("alice", 2001, "team-a", 2001, "a", "normal"),
        )
        raw, headers = _signed({"event": "started", "jobId": 7, "time": now})
        assert (await client.post("/slurm/hook", data=raw, headers=headers)).status == 202
        assert hints.starts.pop() is None, "a start that says no nodes is read"
        raw, headers = _signed({"event": "ended", "jobId": 7, "time": now, **where})
        assert (await client.post("/slurm/hook", data=raw, headers=headers)).status == 202
        assert hints.starts.pop() is None, "an end's nodes are not taken"
        bearer = {"Authorization": "Bearer s3cret"}
        r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7, **where}, headers=bearer)
        assert r.status == 401 and hints.starts == [], "an unsigned start is refused"
        taken = len(hints.got)
        refused: list[tuple[int, dict[str, Any], bytes]] = [
            (401, {"event": "started", "jobId": 7, "time": now - MAX_SKEW_SECONDS - 5}, b"s3cret"),  # replayed
            (401, {"event": "started", "jobId": 7, "time": now + MAX_SKEW_SECONDS + 5}, b"s3cret"),
            (401, {"event": "started", "jobId": 7}, b"s3cret"),  # no time
            (401, {"event": "started", "jobId": 7, "time": now}, b"wrong"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, "nodes": "kwok-node-[2-"}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, "nodes": "n1"}, b"s3cret"),  # no partition
            (400, {"event": "started", "jobId": 7, "time": now, **where, "startTime": "now"}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, "nodes": ""}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, "nodes": "n[1-20000]"}, b"s3cret"),  # > 10,000
            (413, {"event": "started", "jobId": 7, "time": now, **where, "nodes": "n1," * 30000}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, "user": "alice"}, b"s3cret"),  # not all six
            (400, {"event": "started", "jobId": 7, "time": now, **where, **owner, "uid": "2001"}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, **owner, "qos": ""}, b"s3cret"),
            (400, {"event": "started", "jobId": 7, "time": now, **where, "endTime": True}, b"s3cret"),
        ]
        for status, body, secret in refused:
            raw, headers = _signed(body, secret)
            r = await client.post("/slurm/hook", data=raw, headers=headers)
            assert r.status == status, (body, await r.text())
        raw, headers = _signed({"event": "started", "jobId": 7, "time": now})
        r = await client.post("/slurm/hook", data=raw.replace(b"7", b"8"), headers=headers)
        assert r.status == 401 and SIGNATURE_HEADER in await r.text(), "a body changed after signing"
        r = await client.post("/slurm/hook", data=raw, headers={**headers, SIGNATURE_HEADER: "sha1=00"})
        assert r.status == 401
        assert len(hints.got) == taken, "nothing refused was taken"
    finally:
        await client.close()
    client = await _client(token, True, hints, accept_bearer=True)
    try:
        r = await client.post("/slurm/hook", json={"event": "started", "jobId": 7, **where}, headers=bearer)
        assert r.status == 202 and hints.starts.pop() is None, "an unsigned start, when allowed, is only a hint"
    finally:
        await client.close()


def test_a_job_outside_the_bridges_working_directory_is_not_told_of(
    hook: Path, tmp_path: Path, listener: Listener
) -> None:
    """The bridge's jobs run in /tmp (slurm_bridge/slurm/bodies.py): a native job elsewhere sends
    nothing; one in /tmp, and one whose Slurm gives no working directory, are told of."""
    for job, work_dir in (("43", "/home/alice/run"), ("44", "/tmp"), ("45", None)):
        env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": job}
        run_hook(hook, tmp_path, listener.url, **env, **({"SLURM_JOB_WORK_DIR": work_dir} if work_dir else {}))
    wait_for(lambda: len(listener.got) >= 2, 5, "the notices of jobs 44 and 45")
    time.sleep(0.5)
    assert sorted(b["jobId"] for _, b in listener.got) == [44, 45], "job 43 runs outside /tmp"


def test_a_notice_the_bridge_asked_not_to_be_sent_is_not_sent(hook: Path, tmp_path: Path, listener: Listener) -> None:
    """The job's comment (jobref.notice_comment, set by the bridge) says what the bridge needs to be
    told of: an allocated job's start is in the allocation's answer, a job the bridge ends itself
    needs no end notice. Any other comment is told of as before (a user's own comment costs only
    their own pods a poll's wait). Those not told of leave no sender behind, so the ones told of,
    run after them, are all that can ever arrive."""
    marker = encode_admin_comment(PhjRef("slurm-bridge", "ns", "pod", "uid"), handoff="cores")
    start, end = "prolog_slurmctld", "epilog_slurmctld"
    cases = [
        ("51", start, notice_comment(names.NOTIFY_ENDED), False),
        ("52", start, notice_comment(names.NOTIFY_ENDED, marker), False),  # a tenant's: the marker too
        ("53", end, notice_comment(names.NOTIFY_NONE), False),
        ("54", start, notice_comment(names.NOTIFY_NONE), False),
        ("55", end, notice_comment(names.NOTIFY_ENDED, marker), True),  # Slurm ended it: told
        ("56", start, '"notify":"ended"', True),  # not the bridge's form
        ("57", start, "", True),
    ]
    for told in (False, True):  # those not told of first: each exits before it starts a sender
        for job, context, comment, tell in cases:
            if tell == told:
                run_hook(
                    hook,
                    tmp_path,
                    listener.url,
                    SLURM_SCRIPT_CONTEXT=context,
                    SLURM_JOB_ID=job,
                    SLURM_JOB_COMMENT=comment,
                )
    wait_for(lambda: len(listener.got) >= 3, 5, "the notices of jobs 55, 56 and 57")
    assert sorted((b["jobId"], b["event"]) for _, b in listener.got) == [
        (55, "ended"),
        (56, "started"),
        (57, "started"),
    ]
