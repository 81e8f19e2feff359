"""The CPU that slurmctld's hooks (slurm-hooks/) cost its host per job, counted by a cgroup.

Each case runs one hook many times as slurmctld runs it (its environment, no arguments, an absolute
path), every run started straight into a fresh ``cpuacct`` cgroup (v1, as this machine has), so
every process a run starts is counted, a detached notice sender too; ``cpuacct.usage`` is read
once every run and sender is done. The hooks are copied with their configuration files into a
scratch directory (``--rev``: as a git revision had them, to compare before and after), and the
compiled notify hook (slurm-bridge-notify.c) is built there with ``cc -O2``, as the docs say, and
with ``-static``; the handoff script runs once with the script as its NOTIFY and once with the
compiled hook. ``/bin/true`` run the same way is the floor: any program slurmctld starts costs that
on this machine.

    sudo .venv/bin/python bench/hook_cost.py [--runs 300] [--rev HEAD~1]

Root (the cgroup). The notify hook's notices go to a listener of this process on loopback that
answers 200 (not counted), with only bash and sha256sum (or what ``--hashers`` names) on PATH, as
the local cluster's Slurm root.
"""

from __future__ import annotations

import argparse
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import notice_comment

REPO = Path(__file__).resolve().parents[1]
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
HOOKS = ("slurm-bridge-handoff.sh", "slurm-bridge-notify.sh")
COMPILED = ("slurm-bridge-notify", "slurm-bridge-notify-static")
KWOK = "kwok-node-[1-2]"  # the local cluster's nodes without a slurmd: not guarded
GUARDED = "kwok-hybrid-1,kwok-hybrid-2,kwok-missized-1,real-node-1"


@dataclass(frozen=True)
class Case:
    name: str
    hook: str  # a file of HOOKS or COMPILED, or an absolute path
    env: dict[str, str]
    etc: str = "etc"  # the handoff's directory: "etc-compiled" names the compiled hook its NOTIFY

    def path(self, scratch_dir: Path) -> Path:
        """The program slurmctld would start, in the scratch directory ``scratch``() filled."""
        return Path(self.hook) if self.hook.startswith("/") else scratch_dir / self.etc / self.hook


def job_env(context: str, work_dir: str, nodes: str = KWOK, **extra: str) -> dict[str, str]:
    """What slurmctld gives a hook for a two-node job (Slurm 26.05's names)."""
    return {
        "SLURM_SCRIPT_CONTEXT": f"{context}_slurmctld",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_JOB_CPUS_PER_NODE": "1(x2)",
        "SLURM_JOB_EXCLUSIVE": "NO",
        "SLURM_JOB_WORK_DIR": work_dir,
        "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1000",
        "SLURM_JOB_GROUP": "alice",
        "SLURM_JOB_GID": "1000",
        "SLURM_JOB_ACCOUNT": "team-a",
        "SLURM_JOB_QOS": "normal",
        "SLURM_JOB_START_TIME": "1790000000",
        "SLURM_JOB_END_TIME": "1790003600",
        **extra,
    }


def cases() -> list[Case]:
    return [
        Case("/bin/true (the floor)", "/bin/true", job_env("epilog", "/home/alice")),
        Case("handoff, epilog: a native job on one unguarded node", HOOKS[0], job_env("epilog", "/home/alice", "n1")),
        Case("handoff, epilog: a native job on unguarded nodes", HOOKS[0], job_env("epilog", "/home/alice")),
        Case("handoff, prolog: a native job on unguarded nodes", HOOKS[0], job_env("prolog", "/home/alice")),
        Case("handoff, prolog: a bridge job on unguarded nodes (NOTIFY)", HOOKS[0], job_env("prolog", "/tmp")),
        Case(
            "handoff, epilog: a bridge job on unguarded nodes, comment ended (NOTIFY)",
            HOOKS[0],
            job_env("epilog", "/tmp", SLURM_JOB_COMMENT=notice_comment(names.NOTIFY_ENDED)),
        ),
        Case("notify, epilog: a native job", HOOKS[1], job_env("epilog", "/home/alice")),
        Case("notify, prolog: a signed start notice", HOOKS[1], job_env("prolog", "/tmp")),
        Case(
            "handoff, prolog: a bridge job on unguarded nodes (NOTIFY compiled)",
            HOOKS[0],
            job_env("prolog", "/tmp"),
            "etc-compiled",
        ),
        Case("notify compiled, epilog: a native job", COMPILED[0], job_env("epilog", "/home/alice")),
        Case("notify compiled, prolog: a signed start notice", COMPILED[0], job_env("prolog", "/tmp")),
        Case("notify compiled -static, prolog: a signed start notice", COMPILED[1], job_env("prolog", "/tmp")),
    ]


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def listener() -> str:
    """A URL that answers every notice 200, served by a thread of this process."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/slurm/hook"


def scratch(rev: str | None, into: Path, hashers: list[str], url: str) -> dict[str, str]:
    """The hooks (of ``rev``, else the working tree) and their files in ``into``; the env they read."""
    etc = into / "etc"
    etc.mkdir()
    for name in HOOKS:
        path = etc / name
        if rev:
            text = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{rev}:slurm-hooks/{name}"], check=True, capture_output=True
            ).stdout
            path.write_bytes(text)
        else:
            shutil.copy(REPO / "slurm-hooks" / name, path)
        path.chmod(0o755)
    conf = etc / "slurm-bridge-handoff.conf"
    conf.write_text(f"BRIDGE_IDS=slurm-bridge\nNODES={GUARDED}\nNOTIFY={etc / HOOKS[1]}\n")
    conf.chmod(0o644)
    source = REPO / "slurm-hooks" / "slurm-bridge-notify.c"
    if rev:  # a revision before the compiled hook has none: its cases print "-"
        source = into / "slurm-bridge-notify.c"
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{rev}:slurm-hooks/{source.name}"], capture_output=True
        )
        source.write_bytes(shown.stdout if shown.returncode == 0 else b"")
    for out, flags in zip(COMPILED, ([], ["-static"]), strict=True) if source.stat().st_size else ():
        subprocess.run(["cc", "-O2", *flags, "-o", str(etc / out), str(source)], check=True, capture_output=True)
    compiled = into / "etc-compiled"
    compiled.mkdir()
    shutil.copy(etc / HOOKS[0], compiled / HOOKS[0])
    (compiled / conf.name).write_text(f"BRIDGE_IDS=slurm-bridge\nNODES={GUARDED}\nNOTIFY={etc / COMPILED[0]}\n")
    (compiled / conf.name).chmod(0o644)
    token = etc / "hook.token"
    token.write_text("a-shared-secret-of-32-characters\n")
    token.chmod(0o600)
    (etc / "notify.conf").write_text(f"URL={url}\nTOKEN_FILE={token}\nLOG=\n")
    bin_dir = into / "bin"
    bin_dir.mkdir()
    for name in ["bash", *hashers]:
        found = shutil.which(name)
        if found:
            (bin_dir / name).symlink_to(found)
    return {"PATH": str(bin_dir), "SLURM_BRIDGE_NOTIFY_CONF": str(etc / "notify.conf")}


# The loop that starts the runs, in the cgroup from its start: a small shell's fork and exec, as
# slurmctld's script daemon forks and execs each hook (counted too, in the floor).
LOOP = 'echo $$ > "$1"; n=$2; shift 2; i=0; while [ $i -lt $n ]; do "$@"; i=$((i + 1)); done'


def measure(case: Case, etc: Path, base_env: dict[str, str], runs: int) -> float:
    """µs of CPU per run of the case, every process it started counted."""
    group = CPUACCT / f"sb-hook-cost-{os.getpid()}"
    group.mkdir()
    try:
        hook = str(case.path(etc.parent))
        subprocess.run(
            ["/bin/sh", "-c", LOOP, "sh", str(group / "cgroup.procs"), str(runs), hook],
            env={**base_env, **case.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        deadline = time.monotonic() + 30
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)  # detached senders
        return int((group / "cpuacct.usage").read_text()) / 1000 / runs
    finally:
        group.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rev", help="the hooks as this git revision had them (default: the working tree)")
    ap.add_argument("--hashers", default="sha256sum", help="programs on the hooks' PATH besides bash")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sb-hook-cost-") as tmp:
        base_env = scratch(args.rev, Path(tmp), args.hashers.split(","), listener())
        print(f"| per run (µs of CPU, {args.runs} runs) | {args.rev or 'working tree'} |")
        print("| --- | --- |")
        for case in cases():
            if not case.path(Path(tmp)).exists():  # a revision before the compiled hook
                print(f"| {case.name} | - |", flush=True)
                continue
            print(f"| {case.name} | {measure(case, Path(tmp) / 'etc', base_env, args.runs):,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
