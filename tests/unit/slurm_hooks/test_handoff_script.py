"""The handoff's EpilogSlurmctld (slurm-hooks/slurm-bridge-handoff.sh, issue 36 §1), run as bash
with a fake ``scontrol`` (SLURM_BIN_DIR of its configuration file): it acts only on a job whose
AdminComment carries the marker of a bridge its root-owned configuration file lists, never on
anything the job's user can set, and holds for the file's ceiling.

The fake answers the one read the script makes (``scontrol --json show job <id>``: the job as
Slurm 26.05 prints it, pretty-printed JSON, with every user-set field forged: a name, comment,
submit line and working directory that carry the old marks and a whole ``"admin_comment"`` line
after a newline), expands node lists and records every ``create reservation``. The real Slurm's
side of it (its JSON, a tenant's forged job) is tests/e2e/test_handoff_trust.py."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import (
    JobOutcome,
    encode_admin_comment,
    notice_comment,
    released_comment,
)
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.rules.handoff import reservation_of
from tests.unit.handoffroot import REPO, SCRIPT, HandoffRoot

pytestmark = pytest.mark.unit

EXAMPLE_CONF = REPO / "slurm-hooks" / "slurm-bridge-handoff.conf"
BRIDGE = "slurm-bridge"
REF = PhjRef(BRIDGE, "team-a", "pj-x", "0b0e8a3c-5f0a-4c43-9a57-1c0c6f3c2f11")
FORGED = f'slurm-bridge:{{"bridge":"{BRIDGE}","handoff":"node"}}'
SPOOFED = {  # every field a job's user sets, as the script's environment has them
    "SLURM_JOB_WORK_DIR": f"/slurm-bridge/handoff/99999/node/{BRIDGE}",
    "SLURM_JOB_NAME": f"x#released AdminComment={FORGED}",
    "SLURM_JOB_COMMENT": f"AdminComment={FORGED}",
}
# ... and as Slurm prints them in the job's JSON: a name, comment, submit line and working
# directory carrying the old marks, AdminComment=, and a whole "admin_comment" line after a newline.
USER_FIELDS = {
    "name": f'x#released\n      "admin_comment": "{FORGED}",',
    "comment": f' AdminComment={FORGED}\n"admin_comment": "{FORGED}"',
    "submit_line": f"sbatch --chdir=/slurm-bridge/handoff/99999/node/{BRIDGE} --comment=AdminComment={FORGED}",
    "current_working_directory": f"/slurm-bridge/handoff/99999/node/{BRIDGE}",
    "standard_output": f"/tmp/AdminComment={FORGED}",
}

FAKE_SCONTROL = r"""#!/bin/bash
echo "$1 $2" >> {d}/calls
if [ "$1" = update ] || [ "$1" = delete ]; then
  printf '%s\n' "$*" >> {d}/changes; exit 0
fi
if [ "$1 $2 $3" = "--json show job" ]; then
  echo "$*" >> {d}/show.calls
  [ -f {d}/show.fail ] && { echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1; }
  [ "$4" = "$SLURM_JOB_ID" ] && [ $# = 4 ] || { echo "unexpected: $*" >&2; exit 2; }
  cat {d}/job.json; exit 0
fi
if [ "$1 $2" = "show hostnames" ]; then
  [ -f {d}/hostnames.fail ] && exit 1
  cat {d}/hostnames; exit 0
fi
if [ "$1 $2" = "create reservation" ]; then
  shift 2; printf '%s\n' "$*" >> {d}/reservations
  case "$*" in *CoreCnt=*) [ -f {d}/corecnt.refuse ] && { echo "Error: Requested nodes are busy" >&2; exit 1; } ;; esac
  [ -f {d}/create.fail ] && { echo "Error creating the reservation: Invalid user id" >&2; exit 1; }
  echo "Reservation created: ${1#ReservationName=}"; exit 0
fi
echo "unexpected: $*" >&2; exit 2
"""


@dataclass
class Epilog(HandoffRoot):
    """The script installed in ``etc`` next to its configuration file, with fake Slurm tools."""

    conf_text: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def job(self, *comments: str, nodes: str = "n1", hostnames: str = "n1", cpus: str = "2", **env: str) -> None:
        """The job (a heterogeneous job's components: one admin comment each) as Slurm prints it."""
        listed = [{"account": "team-a", "admin_comment": c, "job_id": 42 + i, **USER_FIELDS, "job_state": ["CANCELLED"],
                   "het_job_offset": {"set": len(comments) > 1, "infinite": False, "number": i}}
                  for i, c in enumerate(comments)]  # fmt: skip
        (self.fake / "job.json").write_text(json.dumps({"jobs": listed, "errors": [], "warnings": []}, indent=2))
        (self.fake / "hostnames").write_text(hostnames.replace(" ", "\n") + "\n")
        self.env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": nodes, "SLURM_JOB_CPUS_PER_NODE": cpus,
                    "SLURM_JOB_EXCLUSIVE": "NO", "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", **env}  # fmt: skip

    def run(self, **extra_env: str) -> subprocess.CompletedProcess[str]:
        # The fakes on PATH too: the script must not use it (SLURM_BIN_DIR), an older one did.
        env = {"PATH": f"{self.fake}:{os.environ.get('PATH', '/usr/bin:/bin')}", **self.env, **extra_env}
        done = subprocess.run([str(self.etc / SCRIPT.name)], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"the script must always exit 0: {done}"
        return done

    @property
    def reservations(self) -> list[dict[str, str]]:
        path = self.fake / "reservations"
        lines = path.read_text().splitlines() if path.exists() else []
        return [dict(_pair(w) for w in shlex.split(line)) for line in lines]

    @property
    def calls(self) -> list[str]:
        """Every call, in order, by its first two words (``create reservation``, ``--json show``)."""
        path = self.fake / "calls"
        return [c for c in (path.read_text().splitlines() if path.exists() else []) if c != "show hostnames"]

    @property
    def changes(self) -> list[str]:
        """The ``scontrol update`` and ``scontrol delete`` calls, whole."""
        path = self.fake / "changes"
        return path.read_text().splitlines() if path.exists() else []

    @property
    def show_calls(self) -> list[str]:
        path = self.fake / "show.calls"
        return path.read_text().splitlines() if path.exists() else []


def _pair(word: str) -> tuple[str, str]:
    key, _, value = word.partition("=")
    return key, value


@pytest.fixture
def epilog(tmp_path: Path) -> Iterator[Epilog]:
    e = Epilog(tmp_path)
    e.install({"scontrol": FAKE_SCONTROL})
    e.write_conf(f"BRIDGE_IDS={BRIDGE}\nSLURM_BIN_DIR={e.fake}\n")
    e.job()
    yield e


def marker(scope: str | None = "cores", bridge: str = BRIDGE) -> str:
    return encode_admin_comment(PhjRef(bridge, REF.namespace, REF.name, REF.uid), handoff=scope)


ME = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()


# ---- what it holds -------------------------------------------------------------------------------------
def test_a_bridge_job_is_held_per_node_for_the_ceiling_under_a_name_the_bridge_parses_back(epilog: Epilog) -> None:
    epilog.job(marker("cores"), nodes="n[1-4]", hostnames="n1 n2 n3 n4", cpus="4,2(x3)")
    epilog.run()
    got = sorted(epilog.reservations, key=lambda r: r["Nodes"])
    assert [(r["Nodes"], r.get("CoreCnt")) for r in got] == [("n1", "4"), ("n2", "2"), ("n3", "2"), ("n4", "2")]
    assert {(r["EndTime"], r["StartTime"], r["Users"]) for r in got} == {("now+86400seconds", "now", ME)}
    assert [r["ReservationName"] for r in got] == [f"handoff-42_{BRIDGE}_n{i}" for i in range(1, 5)]
    parsed = reservation_of(got[0]["ReservationName"], BRIDGE)
    assert parsed is not None and (parsed.job_id, parsed.node) == (42, "n1")
    assert epilog.show_calls == ["--json show job 42"], "one read"


@pytest.mark.parametrize(
    ("comment", "exclusive", "held"),
    [
        (marker("node"), "NO", "Flags=IGNORE_JOBS"),
        (marker("cores"), "NODE", "Flags=IGNORE_JOBS"),  # Slurm says the job is exclusive
        (marker("cores"), "MCS", "Flags=IGNORE_JOBS"),
        (marker(None), "NO", "Flags=IGNORE_JOBS"),  # a marker without a scope: the safe side
        (marker("elsewhere"), "NO", "Flags=IGNORE_JOBS"),
        (marker("cores"), "NO", "CoreCnt=2"),
    ],
)
def test_the_scope_comes_from_the_admin_comment_and_slurms_exclusivity(
    epilog: Epilog, comment: str, exclusive: str, held: str
) -> None:
    epilog.job(comment, SLURM_JOB_EXCLUSIVE=exclusive)
    epilog.run()
    assert len(epilog.reservations) == 1
    key, value = held.split("=")
    assert epilog.reservations[0].get(key) == value and ("CoreCnt" in epilog.reservations[0]) == (key == "CoreCnt")


def test_the_ceiling_comes_from_the_configuration_file(epilog: Epilog) -> None:
    epilog.write_conf(f"# a comment\n\nBRIDGE_IDS=other,{BRIDGE}\nMAX_HOLD_SECONDS=600\r\nSLURM_BIN_DIR={epilog.fake}")
    epilog.job(marker("cores"))
    epilog.run(SLURM_JOB_WORK_DIR=f"/slurm-bridge/handoff/31536000/node/{BRIDGE}")
    assert [(r["EndTime"], r["CoreCnt"]) for r in epilog.reservations] == [("now+600seconds", "2")]


def test_a_hyperthreaded_node_holds_the_jobs_cpu_count_in_cores_else_the_whole_node(epilog: Epilog) -> None:
    """Slurm's CoreCnt counts cores, the job's CPU count threads: on a node with 2 threads a core,
    CoreCnt=<CPUs> holds up to twice what the job had, never less; where that many cores are
    not free, the whole node is held instead (never a count that falls short)."""
    epilog.job(marker("cores"), cpus="3")
    epilog.run()
    assert [r.get("CoreCnt") for r in epilog.reservations] == ["3"]
    (epilog.fake / "reservations").unlink()
    (epilog.fake / "corecnt.refuse").touch()
    epilog.run()
    assert [("CoreCnt" in r, r.get("Flags")) for r in epilog.reservations] == [(True, None), (False, "IGNORE_JOBS")]
    assert len({r["ReservationName"] for r in epilog.reservations}) == 1


def test_an_unreadable_cpu_list_holds_the_whole_nodes(epilog: Epilog) -> None:
    epilog.job(marker("cores"), nodes="n[1-2]", hostnames="n1 n2", cpus="2(x2;evil)")
    epilog.run()
    assert [r.get("Flags") for r in epilog.reservations] == ["IGNORE_JOBS", "IGNORE_JOBS"]


def test_only_the_guarded_nodes_are_held_and_a_job_on_none_costs_no_call(epilog: Epilog) -> None:
    """NODES (the nodes with a slurmd beside a kubelet) limits the epilog as it does the prolog: a
    job on unguarded nodes only (an external node's) makes no call at all, a candidate's provisional
    hold neither, nor a marker that its handoff is decided (the prolog asks only for guarded nodes'
    jobs); on a job spanning both, each guarded node is held with its own CPU count, and marked."""
    state = epilog.root / "state"
    state.mkdir(mode=0o755)
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}\nSLURM_BIN_DIR={epilog.fake}\nNODES=n2,n4\nSTATE_DIR={state}\n")
    epilog.job(marker("cores"), nodes="n[1,3]", hostnames="n1 n3", cpus="4,2")
    epilog.run(SLURM_JOB_WORK_DIR="/tmp")  # a candidate: held before it is read, were a node guarded
    assert epilog.calls == [] and epilog.reservations == []
    assert not (state / "42.done").exists()
    epilog.job(marker("cores"), nodes="n[1-4]", hostnames="n1 n2 n3 n4", cpus="4,3,2,1")
    epilog.run()
    assert sorted((r["Nodes"], r.get("CoreCnt")) for r in epilog.reservations) == [("n2", "3"), ("n4", "1")]
    assert epilog.show_calls == ["--json show job 42"]
    assert (state / "42.done").exists()


def test_guarded_nodes_named_by_a_range_are_expanded(epilog: Epilog) -> None:
    """NODES as a Slurm range (expanded by ``scontrol show hostnames``, no call to slurmctld)."""
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}\nSLURM_BIN_DIR={epilog.fake}\nNODES=n[3-4]\n")
    epilog.job(marker("node"), nodes="n3", hostnames="n3 n4")  # the fake expands every list alike
    epilog.run()
    assert [r["Nodes"] for r in epilog.reservations] == ["n3"]
    epilog.job(marker("node"), nodes="n1", hostnames="n3 n4")
    (epilog.fake / "reservations").unlink()
    epilog.run()
    assert epilog.reservations == []


def test_guarded_nodes_that_cannot_be_expanded_guard_every_node(epilog: Epilog) -> None:
    """The safe side: when NODES cannot be expanded, every node of the job is held, and the log says why
    (a list of two brackets, which the front leaves to bash: tests/unit/test_handoff_front.py)."""
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}\nSLURM_BIN_DIR={epilog.fake}\nNODES=n[3-4]x[1-2]\n")
    epilog.job(marker("node"), nodes="n1")
    (epilog.fake / "hostnames.fail").touch()
    epilog.run()
    assert [r["Nodes"] for r in epilog.reservations] == ["n1"]


# ---- what it never trusts ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "comment",
    [
        "",  # a native job: no admin comment
        "(null)",
        FORGED + "\n",  # an escape other than a quote is not the bridge's
        'slurm-bridge:{"bridge":"slurm-bridge","handoff":"node","x":"a\\"}',
        "set by an administrator",
        "slurm-bridge:",
        "slurm-bridge:{not json}",
        'slurm-bridge:{"handoff":"node"}',  # no bridge
        'slurm-bridge:{"bridge": "slurm-bridge","handoff":"node"}',  # not the bridge's encoding
        'slurm-bridge:{"bridge":"slurm-bridge","bridge":"x"}',
        'slurm-bridge:{"bridge":"slurm-bridge","n":{"handoff":"node"}}',
        'x slurm-bridge:{"bridge":"slurm-bridge"}',
    ],
)
def test_a_job_without_the_bridges_marker_is_never_held_whatever_its_user_set(epilog: Epilog, comment: str) -> None:
    """The user's fields (working directory, name, comment, submit line, output path, here each
    forged as the old script's or the marker's, in the environment and in the job's JSON) are not
    read: only the AdminComment, which only an operator sets."""
    epilog.job(comment, **SPOOFED)
    done = epilog.run()
    assert epilog.reservations == [], done
    assert len(epilog.show_calls) == 1


@pytest.mark.parametrize("bridge", ["other-bridge", "slurm", "slurm-bridge-2", "slurm-bridge-", "slurm-bridge_x"])
def test_another_bridges_job_and_a_prefix_of_the_id_are_not_held(epilog: Epilog, bridge: str) -> None:
    epilog.job(marker("cores", bridge=bridge))
    epilog.run()
    assert epilog.reservations == []


def test_a_listed_bridge_with_a_longer_id_is_held_under_its_own_id(epilog: Epilog) -> None:
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}-2\nSLURM_BIN_DIR={epilog.fake}\n")
    epilog.job(marker("cores", bridge=f"{BRIDGE}-2"))
    epilog.run()
    assert [r["ReservationName"] for r in epilog.reservations] == [f"handoff-42_{BRIDGE}-2_n1"]
    assert reservation_of(f"handoff-42_{BRIDGE}-2_n1", BRIDGE) is None


def test_released_only_from_the_admin_comment(epilog: Epilog) -> None:
    """The bridge's released marker (``"released":true``, set by its own admin-comment update)
    holds nothing; a job name ending in ``#released`` (the old marker, which the job-name
    annotation or ``scontrol update JobName`` forged) is no marker."""
    epilog.job(released_comment(marker("node")))
    epilog.run()
    assert epilog.reservations == []
    epilog.job(marker("node"), SLURM_JOB_NAME="team-a/pj-x#released")
    epilog.run()
    assert len(epilog.reservations) == 1


@pytest.mark.parametrize("outcome", [JobOutcome("Completed", 0), JobOutcome("Failed", 137), JobOutcome("Cancelled")])
def test_the_released_mark_with_the_pods_outcome_is_still_the_bridges_mark(epilog: Epilog, outcome: JobOutcome) -> None:
    """The pods' outcome rides with the released mark (for ``sacct -o AdminComment``): the script
    still reads it as the bridge's, released, and holds nothing."""
    epilog.job(released_comment(marker("node"), outcome=outcome))
    epilog.run()
    assert epilog.reservations == []


def test_a_heterogeneous_job_is_held_unless_every_component_was_released(epilog: Epilog) -> None:
    released = released_comment(marker("cores"))
    epilog.job(released, released)
    epilog.run()
    assert epilog.reservations == []
    epilog.job(released, marker("cores"))
    epilog.run()
    assert [r.get("CoreCnt") for r in epilog.reservations] == ["2"]


def test_the_environment_cannot_give_it_other_commands_or_code(epilog: Epilog, tmp_path: Path) -> None:
    """A job's SPANK environment (a user's client may fill it) may reach the EpilogSlurmctld's:
    no PATH, BASH_ENV or exported function from it is used (``bash -p``, a fixed PATH,
    SLURM_BIN_DIR only from the file)."""
    evil = tmp_path / "evil"
    evil.mkdir()
    ran = tmp_path / "evil-ran"
    for name in ("scontrol", "id", "stat", "date"):
        (evil / name).write_text(f'#!/bin/bash\ntouch {ran}\necho \'slurm-bridge:{{"bridge":"{BRIDGE}"}}\'\n')
        os.chmod(evil / name, 0o755)
    (evil / "env.sh").write_text(f"touch {ran}\n")
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}\n")  # the fakes are not on the script's PATH now
    epilog.job("")
    epilog.run(PATH=f"{evil}:/usr/bin:/bin", BASH_ENV=str(evil / "env.sh"), ENV=str(evil / "env.sh"),
               **{"BASH_FUNC_scontrol%%": f"() {{ touch {ran}; }}"})  # fmt: skip
    assert not ran.exists() and epilog.reservations == []


# ---- the configuration file -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "mode", "why"),
    [
        (None, 0o644, "no configuration file"),
        ("BRIDGE_IDS=slurm-bridge\n", 0o664, "writable by group or others"),
        ("BRIDGE_IDS=slurm-bridge\n", 0o646, "writable by group or others"),
        ("", 0o644, "no BRIDGE_IDS"),
        ("MAX_HOLD_SECONDS=60\n", 0o644, "no BRIDGE_IDS"),
        ("BRIDGE_IDS=\n", 0o644, "BRIDGE_IDS is empty"),
        ("BRIDGE_IDS=Slurm_Bridge\n", 0o644, "is not a bridgeId"),
        ("BRIDGE_IDS=slurm-bridge,\n", 0o644, "an empty id is not a bridgeId"),
        ("BRIDGE_IDS=slurm-bridge\nMAX_HOLD_SECONDS=0\n", 0o644, "MAX_HOLD_SECONDS=0 is not"),
        ("BRIDGE_IDS=slurm-bridge\nMAX_HOLD_SECONDS=1d\n", 0o644, "MAX_HOLD_SECONDS=1d is not"),
        ("BRIDGE_IDS=slurm-bridge\nMAX_HOLD_SECONDS=-5\n", 0o644, "is not a number"),
        ("BRIDGE_IDS=slurm-bridge\nBRIDGE_IDS=other\n", 0o644, "BRIDGE_IDS twice"),
        ("BRIDGE_IDS=slurm-bridge\nHOLD=5\n", 0o644, "unknown key HOLD"),
        ("BRIDGE_IDS=slurm-bridge\n$(touch /tmp/x)\n", 0o644, "not KEY=VALUE"),
        ("BRIDGE_IDS=slurm-bridge\nSLURM_BIN_DIR=/no/such/dir\n", 0o644, "is not a directory"),
    ],
)
def test_a_missing_open_or_malformed_configuration_file_holds_nothing_and_says_why(
    epilog: Epilog, text: str | None, mode: int, why: str
) -> None:
    if text is None:
        epilog.conf.unlink()
    else:
        epilog.write_conf(text + (f"SLURM_BIN_DIR={epilog.fake}\n" if "SLURM_BIN_DIR" not in text else ""), mode)
    epilog.job(marker("node"))
    done = epilog.run()
    assert why in done.stderr and "nothing held" in done.stderr, done.stderr
    assert epilog.reservations == [] and epilog.show_calls == [], "no call to slurmctld before the file is trusted"


@pytest.mark.parametrize(
    ("nodes", "nodelist", "checked"),
    [
        ("NODES=n2\n", "n1", False),  # one plain node, not guarded: decided on the file's words alone
        ("NODES=n[2-3]\n", "n1", False),  # a range too (expanded by the front, tests/unit/test_handoff_front.py)
        ("NODES=n2\n", "n[1-3]", True),  # a job on a guarded node among others
        ("NODES=n[2-3]x[1-2]\n", "n1", True),  # NODES the front leaves to bash: scontrol, checked first
        ("NODES=n1\n", "n1", True),  # a guarded node: checked before anything is held
        ("", "n1", True),  # no NODES: every node is guarded
    ],
)
def test_the_file_is_checked_before_anything_it_says_is_used(
    epilog: Epilog, nodes: str, nodelist: str, checked: bool
) -> None:
    """The owner and mode check is a process (stat), so a job on no guarded node, the most common
    one where pods and native jobs do not share, is decided without it (by the front, without bash):
    it then does nothing, as a refused file would make it do. Nothing the file names runs before the
    check."""
    epilog.write_conf(f"BRIDGE_IDS={BRIDGE}\nSLURM_BIN_DIR={epilog.fake}\n{nodes}", 0o664)
    epilog.job(marker("node"), nodes=nodelist, hostnames="n1 n2")
    done = epilog.run()
    assert ("writable by group or others" in done.stderr) == checked, done.stderr
    assert not (epilog.fake / "calls").exists(), "no scontrol from SLURM_BIN_DIR before the file is checked"
    assert epilog.reservations == []


def test_a_configuration_file_owned_by_someone_else_or_a_link_holds_nothing(epilog: Epilog, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this test gives the configuration file to another user (chown): run the unit tests as root")
    epilog.job(marker("node"))
    os.chown(epilog.conf, 65534, -1)
    done = epilog.run()
    assert "owned by uid 65534" in done.stderr and epilog.reservations == []
    os.chown(epilog.conf, 0, -1)
    target = tmp_path / "elsewhere.conf"
    epilog.conf.rename(target)
    epilog.conf.symlink_to(target)
    done = epilog.run()
    assert "not a regular file" in done.stderr and epilog.reservations == []


def test_the_shipped_example_configuration_is_accepted(epilog: Epilog) -> None:
    lines = [line for line in EXAMPLE_CONF.read_text().splitlines() if not line.startswith("SLURM_BIN_DIR")]
    epilog.write_conf("\n".join([*lines, f"SLURM_BIN_DIR={epilog.fake}", ""]))
    epilog.job(marker("cores"))
    done = epilog.run()
    assert [r["EndTime"] for r in epilog.reservations] == ["now+86400seconds"], done.stderr


# ---- the provisional hold: ahead of Slurm's scheduler -------------------------------------------------
# Slurm frees an ended job's CPUs and schedules at once; the read of the job takes tens of ms, which a
# waiting native job won (tests/e2e/test_handoff_failsafe.py). A candidate (the bridge's working
# directory, /tmp: anyone can set it) is held first, for seconds, and kept or deleted once read.
CANDIDATE = {"SLURM_JOB_WORK_DIR": "/tmp"}
NAME = f"ReservationName=handoff-42_{BRIDGE}_n1"


def test_a_candidate_is_held_before_its_job_is_read_and_kept_to_the_ceiling_once_it_is_the_bridges(
    epilog: Epilog,
) -> None:
    epilog.job(marker("cores"), **CANDIDATE)
    epilog.run()
    assert epilog.calls == ["create reservation", "--json show", "update ReservationName=handoff-42_slurm-bridge_n1"]
    assert [(r["ReservationName"], r["CoreCnt"], r["EndTime"]) for r in epilog.reservations] == [
        (NAME.split("=")[1], "2", "now+30seconds")
    ]
    assert epilog.changes == [f"update {NAME} EndTime=now+86400seconds"]


@pytest.mark.parametrize("comment", ["", FORGED.replace(BRIDGE, "other"), released_comment(marker("cores"))])
def test_a_candidate_that_is_not_a_held_bridge_job_is_let_go_once_read(epilog: Epilog, comment: str) -> None:
    """A native job with the bridge's working directory, another bridge's job, a job the bridge
    released: held for the script's run (milliseconds), then the reservation is deleted."""
    epilog.job(comment, **CANDIDATE)
    epilog.run()
    assert epilog.calls == ["create reservation", "--json show", "delete ReservationName=handoff-42_slurm-bridge_n1"]
    assert [r["EndTime"] for r in epilog.reservations] == ["now+30seconds"]


def test_a_candidate_held_by_count_where_the_whole_node_is_meant_gets_the_whole_node(epilog: Epilog) -> None:
    epilog.job(marker("node"), **CANDIDATE)
    epilog.run()
    assert [(r.get("CoreCnt"), r.get("Flags"), r["EndTime"]) for r in epilog.reservations] == [
        ("2", None, "now+30seconds"),
        (None, "IGNORE_JOBS", "now+86400seconds"),
    ]
    assert epilog.changes == [f"delete {NAME}"]
    epilog.job(marker("node"), SLURM_JOB_EXCLUSIVE="NODE", **CANDIDATE)  # Slurm says so: the node at once
    (epilog.fake / "reservations").unlink()
    epilog.run()
    assert [r.get("Flags") for r in epilog.reservations] == ["IGNORE_JOBS"]


def test_a_candidate_whose_job_cannot_be_read_keeps_its_provisional_hold(epilog: Epilog) -> None:
    """Fail safe: Slurm not answering the read leaves the seconds-long hold (the bridge's
    fail-safe drain takes over for its own pods), never the ceiling."""
    epilog.job(marker("cores"), **CANDIDATE)
    (epilog.fake / "show.fail").touch()
    epilog.run()
    assert [r["EndTime"] for r in epilog.reservations] == ["now+30seconds"] and epilog.changes == []


def test_a_job_that_is_no_candidate_is_read_before_anything_is_held(epilog: Epilog) -> None:
    epilog.job(marker("cores"), SLURM_JOB_WORK_DIR="/home/alice")
    epilog.run()
    assert epilog.calls == ["--json show", "create reservation"] and epilog.changes == []


# ---- the notify hook (NOTIFY): run last, one EpilogSlurmctld for both --------------------------------------
# The bridge's notify hook, as the handoff runs it: what it was told, and the holds made by then.
NOTIFY_RECORDER = r"""#!/bin/sh
{ echo "$SLURM_SCRIPT_CONTEXT $SLURM_JOB_ID"; cat {d}/reservations 2>/dev/null; } >> {d}/notified
"""
NOTIFY_ENDED_COMMENT = notice_comment(names.NOTIFY_ENDED)


def with_notify(epilog: Epilog, *lines: str) -> Path:
    """The configuration naming the recorder as NOTIFY (the bridge's hook's file name); its record."""
    hook = epilog.fake / names.NOTIFY_HOOK_SCRIPT
    hook.write_text(NOTIFY_RECORDER.replace("{d}", shlex.quote(str(epilog.fake))))
    hook.chmod(0o755)
    epilog.write_conf("\n".join([f"BRIDGE_IDS={BRIDGE}", f"SLURM_BIN_DIR={epilog.fake}", f"NOTIFY={hook}", *lines]))
    return epilog.fake / "notified"


def test_the_epilog_runs_the_notify_hook_last_once_its_holds_are_made(epilog: Epilog) -> None:
    """One EpilogSlurmctld: the handoff runs the bridge's notify hook once its holds are made (a race
    with slurmctld's scheduling, which the notice's start would widen); the bridge, told, finds them."""
    notified = with_notify(epilog)
    epilog.job(marker("cores"), SLURM_JOB_COMMENT=NOTIFY_ENDED_COMMENT, **CANDIDATE)
    epilog.run()
    told = notified.read_text().splitlines()
    assert told[0] == "epilog_slurmctld 42" and len(told) == 2, told
    assert told[1].startswith(NAME) and "EndTime=now+30seconds" in told[1], "the provisional hold is made first"
    assert epilog.changes == [f"update {NAME} EndTime=now+86400seconds"]


@pytest.mark.parametrize("guarded", [True, False])
@pytest.mark.parametrize(
    ("env", "told"),
    [
        ({"SLURM_JOB_COMMENT": NOTIFY_ENDED_COMMENT, **CANDIDATE}, True),  # allocated at once: its end only
        ({"SLURM_JOB_COMMENT": notice_comment(names.NOTIFY_NONE), **CANDIDATE}, False),  # the bridge ends it
        ({"SLURM_JOB_COMMENT": 'mine: "notify":"none"', **CANDIDATE}, True),  # not the bridge's form
        (CANDIDATE, True),
        ({}, True),  # no working directory: the hook tells
        ({"SLURM_JOB_WORK_DIR": "/home/alice"}, False),  # a native job: the hook would exit at its front
    ],
)
def test_every_jobs_end_runs_the_notify_hook_unless_it_would_tell_nothing(
    epilog: Epilog, guarded: bool, env: dict[str, str], told: bool
) -> None:
    """On a guarded node (bash's epilog) or none (the front, then bash for NOTIFY alone): the same."""
    notified = with_notify(epilog, "" if guarded else "NODES=n9")
    epilog.job(marker("cores"), **env)
    epilog.run()
    assert notified.exists() == told
    if told:
        assert notified.read_text().splitlines()[0] == "epilog_slurmctld 42"
    assert bool(epilog.reservations) == bool(epilog.calls) == guarded, "no guarded node: no Slurm call"


@pytest.mark.parametrize("guarded", [True, False])
def test_a_refused_configuration_file_runs_no_notify_hook_at_the_end(epilog: Epilog, guarded: bool) -> None:
    notified = with_notify(epilog, "" if guarded else "NODES=n9")
    os.chmod(epilog.conf, 0o664)
    epilog.job(marker("cores"), **CANDIDATE)
    done = epilog.run()
    assert "writable by group or others" in done.stderr
    assert not notified.exists() and epilog.reservations == []


def test_a_notify_hook_that_others_may_write_is_not_run_and_the_holds_go_on(epilog: Epilog) -> None:
    notified = with_notify(epilog)
    (epilog.fake / names.NOTIFY_HOOK_SCRIPT).chmod(0o777)
    epilog.job(marker("cores"), **CANDIDATE)
    epilog.run()
    assert not notified.exists() and epilog.changes == [f"update {NAME} EndTime=now+86400seconds"]


# ---- failures: always exit 0, never more than asked -------------------------------------------------------
def test_slurm_failing_holds_nothing_and_exits_0(epilog: Epilog) -> None:
    epilog.job(marker("cores"))
    (epilog.fake / "show.fail").touch()
    epilog.run()
    assert epilog.reservations == []
    (epilog.fake / "show.fail").unlink()
    epilog.job(marker("cores"), nodes="n[1-2]", hostnames="n1 n2")  # a list to expand (one name: no call)
    (epilog.fake / "hostnames.fail").touch()
    epilog.run()
    assert epilog.reservations == []
    (epilog.fake / "hostnames.fail").unlink()
    epilog.job(marker("cores"))
    (epilog.fake / "create.fail").touch()
    epilog.run()  # the count, then the whole node, both refused
    assert [("CoreCnt" in r) for r in epilog.reservations] == [True, False]


def test_a_job_that_never_ran_or_has_no_id_makes_no_call(epilog: Epilog) -> None:
    epilog.job(marker("cores"), nodes="")
    epilog.run()
    epilog.job(marker("cores"), SLURM_JOB_ID="42;touch")
    epilog.run()
    assert epilog.show_calls == [] and epilog.reservations == []


def test_the_marker_the_script_reads_is_the_one_the_bridge_writes() -> None:
    comment = encode_admin_comment(REF, handoff="node")
    assert comment.startswith("slurm-bridge:{") and " " not in comment
    assert json.loads(comment.removeprefix("slurm-bridge:"))["handoff"] == "node"
