"""The hooks' fronts (slurm-hooks/slurm-bridge-handoff.sh and slurm-bridge-notify.sh, run by
/bin/sh): every job's start and end runs the handoff script (and the notify hook), so a small POSIX
shell decides, with builtins only, whether the job is one the hook has nothing to do for (the
handoff: no guarded node and no NOTIFY to run) and exits without starting bash;
anything else, or anything it does not fully understand, goes to bash, the whole script. Run here
under ``sh -x``, whose trace shows which: ``exit 0`` or ``exec /bin/bash``. What bash then does is
tests/unit/test_handoff_script.py's, test_handoff_prolog.py's and test_slurm_hook.py's."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import notice_comment
from tests.unit.handoffroot import REPO, SCRIPT, HandoffRoot

pytestmark = pytest.mark.unit

SH = "/bin/sh"
NOTIFY_HOOK = "/etc/slurm/slurm-bridge-notify.sh"  # the bridge's notify hook, as installed
COMPILED_HOOK = "/etc/slurm/slurm-bridge-notify"  # its compiled form (slurm-bridge-notify.c)


def decide(root: HandoffRoot, conf: str | None, nodelist: str, **env: str) -> str:
    """What the front did with a job on ``nodelist``: "nothing" (exit 0, no bash) or "bash"."""
    if conf is not None:
        root.write_conf("BRIDGE_IDS=slurm-bridge\n" + conf)
    elif root.conf.exists():
        root.conf.unlink()
    base = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": nodelist, "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    return traced(root.etc / SCRIPT.name, {**base, **env})


def traced(script: Path, env: dict[str, str]) -> str:
    """Run ``script`` under ``sh -x``: "bash" once its front hands over, "direct" where the front ran
    the bridge's notify hook itself and exited 0, else "nothing" (exit 0)."""
    with subprocess.Popen(
        [SH, "-x", str(script)],
        env={"PATH": "/nonexistent", **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as run:
        assert run.stderr is not None
        trace: list[str] = []
        for line in run.stderr:
            if line.startswith("+ exec /bin/bash "):
                run.kill()  # bash's whole script from here (a prolog would wait for Slurm): not the front's
                return "bash"
            if line.startswith("+ "):
                trace.append(line.rstrip("\n"))
        assert run.wait(timeout=30) == 0
    assert trace and trace[-1] == "+ exit 0", trace
    ran = [line for line in trace if re.fullmatch(r"\+ /\S*/slurm-bridge-notify(\.sh)?", line)]
    return "direct" if ran else "nothing"


@pytest.fixture
def root(tmp_path: Path) -> HandoffRoot:
    r = HandoffRoot(tmp_path)
    r.install({})
    return r


@pytest.mark.parametrize(
    ("nodes", "nodelist", "decided"),
    [
        ("n2,n4", "n1", "nothing"),
        ("n2,n4", "n2", "bash"),
        ("n2,n4", "n[1,3]", "nothing"),
        ("n2,n4", "n[1-4]", "bash"),
        ("n[1-3,5]", "n4", "nothing"),
        ("n[1-3,5]", "n5", "bash"),
        ("n[1-3,5]", "n[4,6-9]", "nothing"),
        ("n[1-3,5]", "m1,n[6-7],n3", "bash"),
        ("n[1-3,5]", "n10", "nothing"),  # 1 0 is not 1-3
        ("n[8-12]", "n10", "bash"),  # unpadded: n8 .. n12
        ("n[01-10]", "n1", "nothing"),  # padded to two digits: n01 .. n10
        ("n[01-10]", "n01", "bash"),
        ("n[01-10]", "n[09-11]", "bash"),
        ("n[01-10]", "n[11-20]", "nothing"),
        ("n[1-3]", "n01", "nothing"),  # another host than n1
        ("gpu[01-16],hyb[1-4]", "hyb[5-8],gpu17", "nothing"),
        ("gpu[01-16],hyb[1-4]", "kwok-[1-100]", "nothing"),
        ("gpu[01-16],hyb[1-4]", "kwok-[1-100],hyb4", "bash"),
        ("rack1-n[1-2]", "rack1-n[3-4]", "nothing"),  # a prefix with digits and a dash
        ("rack1-n[1-2]", "rack2-n1", "nothing"),
        ("n[1-2].lan", "n1.lan", "bash"),  # a suffix
        ("n[1-2].lan", "n1", "nothing"),
        ("hybrid-node-1,real-node-1", "kwok-node-7", "nothing"),
        ("hybrid-node-1,real-node-1", "real-node-1", "bash"),
    ],
)
def test_a_job_on_no_guarded_node_starts_no_bash_and_one_on_a_guarded_node_gets_the_whole_script(
    root: HandoffRoot, nodes: str, nodelist: str, decided: str
) -> None:
    """Host lists expanded as Slurm does (ranges, lists in brackets, zero padding to the low end's
    width), on both sides: NODES and the job's SLURM_JOB_NODELIST."""
    assert decide(root, f"NODES={nodes}\n", nodelist) == decided
    prolog = decide(root, f"NODES={nodes}\n", nodelist, SLURM_SCRIPT_CONTEXT="prolog_slurmctld")
    assert prolog == decided


@pytest.mark.parametrize(
    ("conf", "nodelist"),
    [
        (None, "n1"),  # no file: bash says why
        ("", "n1"),  # no NODES: every node is guarded
        ("NODES=\n", "n1"),
        ("NODES=n2\nNODES=n3\n", "n1"),  # twice: refused, by bash
        ("NODES=n2\nHOLD=5\n", "n1"),  # an unknown key
        ("NODES=n2\n$(touch /tmp/x)\n", "n1"),  # not KEY=VALUE
        ("NODES=n2 n3\n", "n1"),  # not a host list
        ("NODES=n[2-3]x[1-2]\n", "n1"),  # two brackets: Slurm's, not the front's
        ("NODES=n[3-2]\n", "n1"),  # a range backwards
        ("NODES=n[2-3\n", "n1"),  # a bracket left open
        ("NODES=n[02-3]\n", "n1"),  # padded ends of different widths
        ("NODES=n[1-9999999999]\n", "n1"),  # more than 9 digits
        ("NODES=n2\r\n", "n1"),  # a line ending bash strips
        ("NODES=n2\n", "n[1-5000]"),  # 4096 nodes or more
        ("NODES=n2\n", "n[1-3"),
        ("NODES=n2\n", "n1 n3"),
    ],
)
def test_a_file_or_host_list_it_does_not_fully_understand_goes_to_bash(
    root: HandoffRoot, conf: str | None, nodelist: str
) -> None:
    """The safe side: bash decides (and refuses a bad file, saying why), never the front's guess."""
    assert decide(root, conf, nodelist) == "bash"


def test_a_job_that_never_ran_or_has_no_id_starts_nothing(root: HandoffRoot) -> None:
    assert decide(root, "NODES=n1\n", "") == "nothing"
    assert decide(root, "NODES=n1\n", "n1", SLURM_JOB_ID="4x") == "nothing"


ENDED = notice_comment(names.NOTIFY_ENDED)
NONE = notice_comment(names.NOTIFY_NONE)


@pytest.mark.parametrize(
    ("notify", "env", "prolog", "epilog"),
    [
        ("", {}, "nothing", "nothing"),
        (NOTIFY_HOOK, {"SLURM_JOB_WORK_DIR": "/home/u"}, "nothing", "nothing"),  # the bridge's hook: not its job
        (COMPILED_HOOK, {"SLURM_JOB_WORK_DIR": "/home/u"}, "nothing", "nothing"),  # its compiled form: the same
        (COMPILED_HOOK, {"SLURM_JOB_WORK_DIR": "/tmp"}, "bash", "bash"),
        (NOTIFY_HOOK, {"SLURM_JOB_WORK_DIR": "/tmp"}, "bash", "bash"),  # perhaps the bridge's: told of
        (NOTIFY_HOOK, {}, "bash", "bash"),  # no working directory: the hook tells
        (NOTIFY_HOOK, {"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": NONE}, "nothing", "nothing"),
        (NOTIFY_HOOK, {"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": ENDED}, "nothing", "bash"),  # its end only
        ("/etc/slurm/site-prolog.sh", {"SLURM_JOB_WORK_DIR": "/home/u"}, "bash", "bash"),  # a site's own: always run
        ("/etc/slurm/site-prolog.sh", {"SLURM_JOB_COMMENT": ENDED}, "nothing", "bash"),
    ],
)
def test_a_job_on_no_guarded_node_hands_to_bash_only_to_run_notify(
    root: HandoffRoot, notify: str, env: dict[str, str], prolog: str, epilog: str
) -> None:
    """The prolog and the epilog alike: NOTIFY is all there is to do, and not for a job whose comment
    says the bridge needs no notice, nor the bridge's hook for a job it would not tell of."""
    conf = "NODES=n2\n" + (f"NOTIFY={notify}\n" if notify else "")
    assert decide(root, conf, "n1", SLURM_SCRIPT_CONTEXT="prolog_slurmctld", **env) == prolog
    assert decide(root, conf, "n1", **env) == epilog


RECORDER = """#!/bin/sh
env > "$0.env"
"""


@pytest.mark.parametrize("context", ["prolog_slurmctld", "epilog_slurmctld", "prolog_slurmd"])
@pytest.mark.parametrize("hook", ["slurm-bridge-notify.sh", "slurm-bridge-notify", "site-notify.sh"])
@pytest.mark.parametrize(
    "env",
    [
        {"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": ENDED},  # a bridge job, allocated at once
        {"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": NONE},  # one the bridge ends itself
        {"SLURM_JOB_WORK_DIR": "/tmp"},
        {},
        {"SLURM_JOB_WORK_DIR": "/home/alice"},  # a native job
        {"SLURM_JOB_WORK_DIR": "/home/alice", "SLURM_JOB_COMMENT": ENDED},
        {"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": 'mine: "notify":"none"'},  # not the bridge's form
    ],
)
def test_the_fronts_decision_is_bashs(root: HandoffRoot, context: str, hook: str, env: dict[str, str]) -> None:
    """The front starts bash for a job on no guarded node exactly when bash, the whole script, would
    run NOTIFY, and then the bridge's notify hook would not exit at its own front either."""
    recorder = root.fake / hook
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    told = root.fake / f"{hook}.env"
    job = {"SLURM_SCRIPT_CONTEXT": context, **env}
    front = decide(root, f"NODES=n2\nNOTIFY={recorder}\n", "n1", **job)
    assert told.exists() == (front == "direct"), f"the front: {front}; it ran NOTIFY: {told.exists()}"
    assert front != "direct" or hook != "site-notify.sh", "a site's own NOTIFY is bash's to run"
    told.unlink(missing_ok=True)
    full = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n1", **job}
    done = subprocess.run(["/bin/bash", "-p", str(root.etc / SCRIPT.name)], env=full, capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done
    assert (front != "nothing") == told.exists(), f"the front: {front}; bash ran NOTIFY: {told.exists()}"
    if told.exists() and hook == NOTIFY_HOOK.rsplit("/", 1)[-1]:
        seen = dict(line.split("=", 1) for line in told.read_text().splitlines() if "=" in line)
        assert traced(REPO / "slurm-hooks" / hook, seen) == "bash", "NOTIFY would have done nothing"


@pytest.mark.parametrize(
    ("env", "decided"),
    [
        ({"SLURM_JOB_WORK_DIR": "/home/alice"}, "nothing"),  # a native job: told of by no one
        ({"SLURM_JOB_WORK_DIR": "/tmp"}, "bash"),  # perhaps the bridge's: signed and sent by bash
        ({}, "bash"),  # no working directory: told of
        ({"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": notice_comment(names.NOTIFY_NONE)}, "nothing"),
        ({"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_ID": "4x"}, "nothing"),
        ({"SLURM_JOB_WORK_DIR": "/tmp", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}, "nothing"),
    ],
)
def test_the_notify_hooks_front_starts_bash_only_for_a_notice(env: dict[str, str], decided: str) -> None:
    base = {"SLURM_JOB_ID": "42", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld"}
    assert traced(REPO / "slurm-hooks" / "slurm-bridge-notify.sh", {**base, **env}) == decided
    ended = {**base, "SLURM_JOB_WORK_DIR": "/tmp", "SLURM_JOB_COMMENT": notice_comment(names.NOTIFY_ENDED)}
    assert traced(REPO / "slurm-hooks" / "slurm-bridge-notify.sh", ended) == "bash"
    started = {**ended, "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}
    assert traced(REPO / "slurm-hooks" / "slurm-bridge-notify.sh", started) == "nothing"


@pytest.mark.parametrize(
    ("change", "decided"),
    [
        ({}, "direct"),
        ({"hook_mode": 0o775}, "bash"),  # group may write the hook: bash refuses it, saying why
        ({"hook_mode": 0o757}, "bash"),
        ({"hook_mode": 0o644}, "bash"),  # not executable
        ({"conf_mode": 0o664}, "bash"),  # group may write the file that names it
        ({"hook_owner": 4242}, "bash"),  # neither root's nor this user's
        ({"conf_owner": 4242}, "bash"),
        ({"link": True}, "bash"),  # NOTIFY names a link
        ({"extra": "SLURM_BIN_DIR=/opt/slurm/bin\n"}, "bash"),  # bash checks that directory
        ({"name": "slurm-bridge-notify.sh"}, "direct"),  # the script form: the same
        ({"name": "site notify"}, "bash"),  # a path bash refuses
    ],
)
def test_the_front_runs_the_bridges_notify_hook_itself_only_where_bash_would(
    root: HandoffRoot, change: dict[str, object], decided: str
) -> None:
    """A job on no guarded node whose one thing to do is the bridge's notify hook: the small shell
    runs it (no bash, one stat) when the hook and the file that names it pass bash's checks, and
    exits 0 whatever the hook does (it always does); anything else goes to bash."""
    name = str(change.get("name", "slurm-bridge-notify"))
    hook = root.fake / name
    hook.write_text(RECORDER + "exit 3\n")  # its status is not the job's
    hook.chmod(int(str(change.get("hook_mode", 0o755))))
    os.chown(hook, int(str(change.get("hook_owner", 0))), -1)
    named = hook
    if change.get("link"):
        hook.rename(root.fake / "real")
        named.symlink_to(root.fake / "real")
    conf = f"BRIDGE_IDS=slurm-bridge\nNODES=n2\nNOTIFY={named}\n{change.get('extra', '')}"
    root.write_conf(conf, int(str(change.get("conf_mode", 0o644))))
    os.chown(root.conf, int(str(change.get("conf_owner", 0))), -1)
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_WORK_DIR": "/tmp"}
    for context in ("prolog_slurmctld", "epilog_slurmctld"):
        assert traced(root.etc / SCRIPT.name, {**env, "SLURM_SCRIPT_CONTEXT": context}) == decided, context
        recorded = root.fake / f"{named.name}.env"
        assert recorded.exists() == (decided == "direct")
        if decided == "direct":
            seen = dict(line.split("=", 1) for line in recorded.read_text().splitlines() if "=" in line)
            assert seen["SLURM_JOB_ID"] == "42" and seen["SLURM_SCRIPT_CONTEXT"] == context, "the job's environment"
            recorded.unlink()
