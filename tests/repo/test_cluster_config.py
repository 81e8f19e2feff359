"""hack/cluster.sh's parts: the one writer of the Slurm configuration (hack/cluster/slurm-conf.sh),
the hybrid nodes' two sides, and the reusable, idempotent accounting setup. No servers: the scripts'
functions are run and their output read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from slurm_bridge.core.config import Config
from tests.harness import REPO, TENANTS

HACK = REPO / "hack"
SLURM_CONF_SH = HACK / "cluster" / "slurm-conf.sh"


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``script`` after hack/lib.sh and every part of hack/cluster.sh are sourced (as cluster.sh does)."""
    parts = " ".join(f". {p};" for p in sorted((HACK / "cluster").glob("*.sh")))
    return subprocess.run(
        ["bash", "-c", f". {HACK / 'lib.sh'}; {parts} {script}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def slurm_conf(*settings: str) -> str:
    proc = subprocess.run(
        ["bash", str(SLURM_CONF_SH), "slurm.conf", *settings], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def lines(conf: str, key: str) -> dict[str, dict[str, str]]:
    """The conf's KEY=NAME lines (NodeName, PartitionName), as NAME -> their other KEY=VALUE words."""
    out = {}
    for line in conf.splitlines():
        if line.startswith(f"{key}="):
            words = dict(w.split("=", 1) for w in line.split())
            out[words.pop(key)] = words
    return out


def globals_of(conf: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in conf.splitlines() if ln and not ln.startswith("#") and " " not in ln)


def env() -> dict[str, str]:
    out = subprocess.run(["bash", str(HACK / "cluster.sh"), "env"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return dict(re.findall(r'^export (\w+)="?([^"\n]*)"?$', out.stdout, re.M))


def test_every_slurm_conf_comes_from_the_one_writer() -> None:
    """slurm.conf's preamble used to be written twice (cluster.sh and old-slurm.sh)."""
    writers = [p.relative_to(REPO) for p in HACK.rglob("*.sh") if re.search(r"^\s*ClusterName=", p.read_text(), re.M)]
    assert writers == [SLURM_CONF_SH.relative_to(REPO)], writers
    assert "slurm_conf_common slurm-bridge-old" in (HACK / "old-slurm.sh").read_text()


def test_cluster_sh_sources_each_part_and_no_function_is_defined_twice() -> None:
    script = (HACK / "cluster.sh").read_text()
    [listed] = re.findall(r"^for part in ([\w -]+); do", script, re.M)
    assert sorted(listed.split()) == sorted(p.stem for p in (HACK / "cluster").glob("*.sh"))
    seen: dict[str, str] = {}
    for path in [HACK / "lib.sh", HACK / "cluster.sh", *sorted((HACK / "cluster").glob("*.sh"))]:
        for name in re.findall(r"^([a-z_][a-z0-9_]*)\(\) \{", path.read_text(), re.M):
            assert name not in seen, f"{name}() is defined in {seen[name]} and {path.name}"
            seen[name] = path.name


def test_cluster_sh_keeps_its_commands() -> None:
    proc = subprocess.run(["bash", str(HACK / "cluster.sh"), "nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    for command in (
        "up",
        "down",
        "status",
        "env",
        "nodes",
        "stop COMPONENT",
        "start-slurm",
        "start-workloads",
        "scontrol ARGS",
        "slurm [--as USER] COMMAND ARGS",
    ):
        assert f"|{command}|" in f"|{proc.stderr.strip().removeprefix('error: usage: hack/cluster.sh ')}|", (
            command,
            proc.stderr,
        )


def test_the_slurm_command_runs_only_slurm_programs() -> None:
    proc = subprocess.run(
        ["bash", str(HACK / "cluster.sh"), "slurm", "--as", "alice", "rm", "-rf", "/"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "usage: hack/cluster.sh slurm [--as USER] sbatch|salloc|srun|squeue|scontrol|sinfo" in proc.stderr


def test_hybrid_nodes_have_slurmd_a_port_each_and_their_own_partitions() -> None:
    conf, e = slurm_conf(), env()
    nodes, parts, g = lines(conf, "NodeName"), lines(conf, "PartitionName"), globals_of(conf)
    hybrid, real, missized = e["SB_HYBRID_NODE_NAMES"].split(), e["SB_REAL_NODE"], e["SB_MISSIZED_NODE"]
    assert len(hybrid) >= 2 and missized
    served = [*hybrid, real, missized]
    ports = [nodes[n]["Port"] for n in served]
    assert len(set(ports)) == len(ports), ports
    assert not set(ports) & {g["SlurmctldPort"], g["SlurmdPort"], g["AccountingStoragePort"]}
    for name in served:
        assert nodes[name]["NodeHostname"] == "localhost" and "State" not in nodes[name], nodes[name]
    assert parts[e["SB_HYBRID_PARTITION"]]["Nodes"].split(",") == hybrid
    assert parts[e["SB_REAL_NODE_PARTITION"]]["Nodes"] == real
    assert parts[e["SB_MISSIZED_PARTITION"]]["Nodes"] == missized
    default = parts[e["SB_PARTITION"]]
    assert default["Default"] == "YES" and not set(served) & set(default["Nodes"].split(","))
    # Every other node is external, as before.
    assert all(v.get("State") == "EXTERNAL" for k, v in nodes.items() if k not in served), nodes
    # The real node: what its kubelet reports (every core, MemTotal; hack/node.sh reserves nothing).
    mem_kib = int(re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M).group(1))  # type: ignore[union-attr]
    assert (nodes[real]["CPUs"], nodes[real]["RealMemory"]) == (
        str(os.sysconf("SC_NPROCESSORS_ONLN")),
        str(mem_kib // 1024),
    )
    static = len(e["SB_NODE_NAMES"].split()) + len(served)
    assert int(g["MaxNodeCount"]) - static == int(bash('echo "$SB_DYN_NODE_MAX"').stdout), "room for dynamic nodes kept"


def test_two_partitions_place_the_kwok_nodes_by_the_block_and_the_tree_topology() -> None:
    """Gangs with a topology constraint go there (docs/workloads.md#topology-a-gang-within-one-block-or-leaf-switch)."""
    parts, e = lines(slurm_conf(), "PartitionName"), env()
    block, switch = parts[e["SB_BLOCK_PARTITION"]], parts[e["SB_SWITCH_PARTITION"]]
    assert (block["Topology"], switch["Topology"]) == ("block", "switch")
    assert block["Nodes"] == switch["Nodes"] == parts[e["SB_PARTITION"]]["Nodes"].split(",")[0], (block, switch)
    assert "Topology" not in parts[e["SB_PARTITION"]], "the main partition places by the flat default"


def test_hybrid_kwok_nodes_match_their_slurm_lines_and_carry_the_kwok_nodes_labels() -> None:
    proc = bash("nodes_yaml")
    assert proc.returncode == 0, proc.stderr
    kube = {d["metadata"]["name"]: d for d in yaml.safe_load_all(proc.stdout) if d}
    nodes, e = lines(slurm_conf(), "NodeName"), env()
    external = kube[e["SB_NODE_NAMES"].split()[0]]["metadata"]["labels"]
    for name in e["SB_HYBRID_NODE_NAMES"].split():
        meta, status = kube[name]["metadata"], kube[name]["status"]
        assert status["capacity"] == status["allocatable"]
        assert status["capacity"]["cpu"] == nodes[name]["CPUs"]
        assert status["capacity"]["memory"] == f"{nodes[name]['RealMemory']}Mi"
        assert (
            set(external) <= set(meta["labels"])
            and meta["annotations"] == kube[e["SB_NODE_NAMES"].split()[0]]["metadata"]["annotations"]
        )
        features = {k.removeprefix("feature.slinky.slurm.net/") for k in meta["labels"] if k.startswith("feature.")}
        assert features == set(nodes[name]["Features"].split(",")), (features, nodes[name])


def test_the_missized_node_offers_half_its_slurm_size_on_purpose() -> None:
    proc = bash("nodes_yaml")
    assert proc.returncode == 0, proc.stderr
    kube = {d["metadata"]["name"]: d for d in yaml.safe_load_all(proc.stdout) if d}
    nodes, e = lines(slurm_conf(), "NodeName"), env()
    line, status = nodes[e["SB_MISSIZED_NODE"]], kube[e["SB_MISSIZED_NODE"]]["status"]
    assert line["Port"] and line["NodeHostname"] == "localhost" and "State" not in line, "served by a slurmd"
    assert status["allocatable"]["cpu"] == str(int(line["CPUs"]) // 2)
    assert status["allocatable"]["memory"] == f"{int(line['RealMemory']) // 2}Mi"


def test_the_writer_serves_other_hosts_and_ports_with_the_same_body() -> None:
    here = slurm_conf()
    there = slurm_conf(
        "ctld_host=slurmctld-0",
        "ctld_port=6817",
        "dbd_host=slurmdbd",
        "dbd_port=6819",
        "node_host=",
        "state_dir=/var/spool/slurm",
        "cluster=kind",
    )
    g = globals_of(there)
    assert (g["SlurmctldHost"], g["SlurmctldPort"], g["SlurmdPort"]) == ("slurmctld-0", "6817", "6818")
    assert (g["AccountingStorageHost"], g["AccountingStoragePort"], g["ClusterName"]) == ("slurmdbd", "6819", "kind")
    assert g["StateSaveLocation"] == "/var/spool/slurm/state"
    served = [n for n, v in lines(there, "NodeName").items() if "Port" in v]
    assert served and all("NodeHostname" not in lines(there, "NodeName")[n] for n in served)

    def body(conf: str) -> list[str]:
        words = (
            "ClusterName",
            "SlurmctldHost",
            "SlurmctldPort",
            "SlurmdPort",
            "AccountingStorageHost",
            "AccountingStoragePort",
            "AuthAltParameters",
            "StateSaveLocation",
            "SlurmctldPidFile",
            "SlurmdSpoolDir",
            "SlurmdPidFile",
        )
        return [
            re.sub(r" NodeHostname=localhost(?= Port=)", "", ln) for ln in conf.splitlines() if not ln.startswith(words)
        ]

    assert body(here) == body(there)


def test_kind_workers_are_each_a_block_and_a_leaf_switch_of_the_same_two_topologies() -> None:
    workers = "w1=10.0.0.2 w2=10.0.0.3"
    nodes = lines(slurm_conf(f"workers={workers}"), "NodeName")
    assert (nodes["w1"]["Topology"], nodes["w2"]["Topology"]) == ("block:b1,switch:s1", "block:b2,switch:s2")
    cmd = ["bash", str(SLURM_CONF_SH), "topology.yaml", f"workers={workers}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    topologies = {t["topology"]: t for t in yaml.safe_load(proc.stdout)}
    assert topologies["flat"]["cluster_default"] is True
    assert [(b["block"], b["nodes"]) for b in topologies["block"]["block"]["blocks"]] == [("b1", "w1"), ("b2", "w2")]
    switches = {s["switch"]: s for s in topologies["switch"]["tree"]["switches"]}
    assert switches["s0"]["children"] == "s1,s2" and (switches["s1"]["nodes"], switches["s2"]["nodes"]) == ("w1", "w2")


def test_an_unknown_setting_is_refused_by_name() -> None:
    proc = subprocess.run(["bash", str(SLURM_CONF_SH), "slurm.conf", "ctld_hots=x"], capture_output=True, text=True)
    assert proc.returncode == 1 and "unknown setting 'ctld_hots'" in proc.stderr and "ctld_host" in proc.stderr


def test_the_policy_file_is_in_slurm_conf_verbatim() -> None:
    policy = [ln for ln in (HACK / "slurm-policy.conf").read_text().splitlines() if ln.strip()]
    conf = slurm_conf().splitlines()
    start = conf.index(policy[0])
    assert conf[start : start + len(policy)] == policy
    assert any(ln.startswith("SchedulerType=") for ln in policy), "the scheduling settings live in the policy file"


def test_cgroup_conf_turns_the_cgroup_plugin_off() -> None:
    proc = subprocess.run(["bash", str(SLURM_CONF_SH), "cgroup.conf"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "CgroupPlugin=disabled" in proc.stdout.splitlines()


# ---- accounting: the same steps against any Slurm, idempotent -----------------------------------------
FAKE_SACCTMGR = """\
import json, sys
state_file = sys.argv[1]
state = json.load(open(state_file))
args = sys.argv[2:]
assert args[0] == "sacctmgr", args
if args[1:4] == ["-n", "-P", "list"]:
    kind, rest = args[4], args[5:]
    if kind == "assoc":
        user = next(a.split("=", 1)[1] for a in rest if a.startswith("user="))
        print("\\n".join(state["assoc"].get(user, [])))
    else:
        print("\\n".join(state[kind]))
elif args[1:3] == ["-i", "modify"]:
    state["log"].append(args[3:])
    json.dump(state, open(state_file, "w"))
elif args[1:3] == ["-i", "add"]:
    kind, names = args[3], args[4].split(",")
    state["log"].append(args[3:])
    if kind == "user":
        accounts = next(a.split("=", 1)[1] for a in args[5:] if a.startswith("Account=")).split(",")
        state["assoc"].setdefault(names[0], []).extend(accounts)
    else:
        state[kind].extend(names)
    json.dump(state, open(state_file, "w"))
else:
    sys.exit(f"unexpected: {args}")
"""


def run_associations(tmp_path: Path, state: dict[str, Any]) -> list[list[str]]:
    """`hack/cluster/accounting.sh associations CMD` with CMD a fake sacctmgr keeping its state in a file."""
    (tmp_path / "state.json").write_text(json.dumps({**state, "log": []}))
    (tmp_path / "fake.py").write_text(FAKE_SACCTMGR)
    proc = subprocess.run(
        [
            "bash",
            str(HACK / "cluster" / "accounting.sh"),
            "associations",
            sys.executable,
            str(tmp_path / "fake.py"),
            str(tmp_path / "state.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    log: list[list[str]] = json.loads((tmp_path / "state.json").read_text())["log"]
    return log


def test_associations_are_created_once_and_only_what_is_missing_is_added(tmp_path: Path) -> None:
    empty: dict[str, Any] = {"cluster": [], "qos": ["normal"], "account": ["root"], "assoc": {}}
    first = run_associations(tmp_path, empty)
    assert ["cluster", "slurm-bridge-local"] in first
    alice = TENANTS["a"]
    [user_add] = [a for a in first if a[:2] == ["user", alice.user]]
    assert f"Account={','.join(alice.accounts)}" in user_add and f"DefaultAccount={alice.accounts[0]}" in user_add
    full = json.loads((tmp_path / "state.json").read_text())

    def added(log: list[list[str]]) -> list[list[str]]:  # the preemption settings are set on every run
        return [a for a in log if "set" not in a]

    assert added(run_associations(tmp_path, full)) == [], "a second run adds nothing"
    full["assoc"][alice.user] = [alice.accounts[0]]  # one association lost: only it comes back
    again = added(run_associations(tmp_path, full))
    assert [a[:3] for a in again] == [["user", alice.user, f"Account={','.join(alice.accounts[1:])}"]], again


def test_qos_preemption_is_set_on_every_run_creating_missing_qos(tmp_path: Path) -> None:
    """QOS_PREEMPT of hack/accounting.env: which QOS preempts which."""
    (tmp_path / "state.json").write_text(json.dumps({"qos": ["normal"], "log": []}))
    (tmp_path / "fake.py").write_text(FAKE_SACCTMGR)
    fake = f"{sys.executable} {tmp_path / 'fake.py'} {tmp_path / 'state.json'}"
    proc = bash(f'_ACCT_RUN=({fake}); QOS_PREEMPT="urgent:normal,scavenger"; set_qos_preemption')
    assert proc.returncode == 0, proc.stderr
    log = json.loads((tmp_path / "state.json").read_text())["log"]
    assert log == [["qos", "urgent,scavenger"], ["qos", "urgent", "set", "Preempt=normal,scavenger"]]


def test_qos_modes_set_each_qos_preempt_mode_and_grace_time(tmp_path: Path) -> None:
    """QOS_MODES of hack/accounting.env: how the pods' QOS are preempted (CANCEL with a GraceTime,
    docs/colocation.md), a missing QOS created first."""
    (tmp_path / "state.json").write_text(json.dumps({"qos": ["normal"], "log": []}))
    (tmp_path / "fake.py").write_text(FAKE_SACCTMGR)
    fake = f"{sys.executable} {tmp_path / 'fake.py'} {tmp_path / 'state.json'}"
    proc = bash(f'_ACCT_RUN=({fake}); QOS_PREEMPT=""; QOS_MODES="pods:cancel:90 normal:requeue"; set_qos_preemption')
    assert proc.returncode == 0, proc.stderr
    log = json.loads((tmp_path / "state.json").read_text())["log"]
    assert log == [
        ["qos", "pods"],
        ["qos", "pods", "set", "PreemptMode=cancel", "GraceTime=90"],
        ["qos", "normal", "set", "PreemptMode=requeue", "GraceTime=0"],
    ]


def test_the_local_preemption_settings_cover_the_bridges_handoff() -> None:
    """The pods' QOS GraceTime (hack/accounting.env) covers the local bridge's
    handoff.maxGracePeriodSeconds + marginSeconds (hack/bridge.sh), so a preempted pod ends gracefully."""
    env = (HACK / "accounting.env").read_text()
    modes = dict((w.split(":")[0], w.split(":")[1:]) for w in env.split('QOS_MODES="')[1].split('"')[0].split())
    preempted = {p for w in env.split('QOS_PREEMPT="')[1].split('"')[0].split() for p in w.split(":")[1].split(",")}
    bridge = (HACK / "bridge.sh").read_text()
    grace = int(bridge.split("maxGracePeriodSeconds: ")[1].split(",")[0])
    margin = int(bridge.split("marginSeconds: ")[1].split("}")[0])
    assert "pods" in preempted and modes["pods"][0] == "cancel"
    assert int(modes["pods"][1]) >= grace + margin
    policy = (HACK / "slurm-policy.conf").read_text()
    assert "PreemptType=preempt/qos" in policy and "EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh" in policy


def test_the_handoff_conf_names_the_local_bridge_and_is_installed_roots_and_closed() -> None:
    """The handoff script does nothing without its root-owned, closed configuration file naming the
    bridges it holds for (issue 36): the one writer gives the local bridge's id (the default of
    Config and the chart; hack/bridge.sh sets none) and the ceiling, and each cluster installs it."""
    proc = subprocess.run(
        ["bash", str(SLURM_CONF_SH), "slurm-bridge-handoff.conf"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert globals_of(proc.stdout) == {
        "BRIDGE_IDS": Config().bridgeId, "MAX_HOLD_SECONDS": "86400", "STATE_DIR": "/var/spool/slurm-bridge",
        "PROLOG_WAIT_SECONDS": "900",
    }  # fmt: skip
    assert (
        "bridgeId" not in (HACK / "bridge.sh").read_text()
        and "bridgeId" not in (HACK / "kind" / "values.yaml").read_text()
    )
    installer = (HACK / "cluster" / "slurm.sh").read_text()
    # the local cluster's: the nodes with a slurmd guarded, the notify hook run by slurmctld's one hook
    assert (
        'handoff_conf nodes="$shared" notify=/etc/slurm/slurm-bridge-notify > "$etc/slurm-bridge-handoff.conf.new"'
        in installer
    )
    assert 'chown root:root "$etc/slurm-bridge-handoff.conf.new"; chmod 0644' in installer
    assert "in_root chown slurm:slurm /var/log/slurm-bridge /var/spool/slurm-bridge" in installer  # STATE_DIR


def test_the_kind_clusters_slurm_gets_the_handoff_script_and_the_preemption_settings(tmp_path: Path) -> None:
    """hack/kind/slurm.sh's ConfigMap carries the handoff's EpilogSlurmctld and its configuration
    file (sb-slurm installs them, root's, at the path slurm.conf names) and accounting.env's
    preemption settings (sb-slurm applies them)."""
    script = (
        f". {HACK / 'lib.sh'}; . {HACK / 'cluster' / 'slurm-conf.sh'}; . {HACK / 'kind' / 'common.sh'}; "
        f'. {HACK / "kind" / "slurm.sh"}; KIND_STATE={tmp_path}; kubectl_kind() {{ kubectl "$@"; }}; '
        "kind_slurm_config_map 'w1=10.0.0.2'"
    )
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(proc.stdout)["data"]
    assert data["slurm-bridge-handoff.sh"] == (HACK.parent / "slurm-hooks" / "slurm-bridge-handoff.sh").read_text()
    assert "EpilogSlurmctld=/etc/slurm/slurm-bridge-handoff.sh" in data["slurm.conf"]
    assert "PreemptType=preempt/qos" in data["slurm.conf"]
    assert 'QOS_MODES="pods:cancel:90' in data["accounting.env"]
    sb_slurm = (HACK / "kind" / "slurm-image" / "sb-slurm").read_text()
    assert (
        'install -o root -g root -m 0755 "$CONFIG/slurm-bridge-handoff.sh" /etc/slurm/slurm-bridge-handoff.sh'
        in sb_slurm
    )
    conf = "/etc/slurm/slurm-bridge-handoff.conf"
    assert f'install -o root -g root -m 0644 "$CONFIG/slurm-bridge-handoff.conf" {conf}' in sb_slurm
    # its STATE_DIR: the directory sb-slurm makes SlurmUser's for the log; every worker guarded
    assert globals_of(data["slurm-bridge-handoff.conf"]) == {
        "BRIDGE_IDS": "slurm-bridge", "MAX_HOLD_SECONDS": "86400", "STATE_DIR": "/var/log/slurm-bridge",
        "PROLOG_WAIT_SECONDS": "900",
    }  # fmt: skip
    assert "install -d -o slurm -g slurm /var/log/slurm-bridge" in sb_slurm
    prologs = [ln for ln in data["slurm.conf"].splitlines() if ln.startswith("PrologSlurmctld=")]
    assert prologs == ["PrologSlurmctld=/etc/slurm/slurm-bridge-handoff.sh"], prologs
