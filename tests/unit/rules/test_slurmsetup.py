"""The check of Slurm's side of node sharing: slurm.conf from ``GET conf`` (v0.0.45 only) and a
partition's OverSubscribe in every REST version (the codecs), the findings per mode
(slurm_bridge/rules/slurmsetup.py), and how the operator reports them (operator/nodes/setupcheck.py)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from slurm_bridge.core import metrics
from slurm_bridge.core.config import Config
from slurm_bridge.operator.nodes import setupcheck
from slurm_bridge.operator.nodes.setupcheck import SetupCheck
from slurm_bridge.rules.slurmsetup import SiteView, findings, rereads_after_move
from slurm_bridge.slurm.errors import SlurmUnavailable
from slurm_bridge.slurm.models import PartitionInfo, SlurmConf
from slurm_bridge.slurm.versions import CODECS
from tests.unit.fakes import FakeNodes

pytestmark = pytest.mark.unit
Obj = dict[str, Any]
TS, CO, EX = (Config(nodeSharing=m) for m in ("timeShared", "coResident", "exclusive"))
GOOD_CONF = SlurmConf(
    mcs_plugin="mcs/label",
    mcs_parameters=("ondemand", "ondemandselect"),
    select_type="select/cons_tres",
    select_type_parameters=("CR_CORE_MEMORY",),
    scheduler_parameters=("batch_sched_delay=0", "disable_job_shrink"),
)
NO = PartitionInfo(name="slurm-bridge", oversubscribe="NO")


# ---- the codecs: what Slurm 26.05.5 answers (recorded from the local cluster) ------------------------


def test_conf_is_read_with_v0045_only() -> None:
    assert CODECS["v0.0.45"].conf_path() == "/slurm/v0.0.45/conf"
    assert CODECS["v0.0.44"].conf_path() is None and CODECS["v0.0.43"].conf_path() is None
    body = {
        "slurm_conf": {"MCSPlugin": "mcs/label", "MCSParameters": ["ondemand", "ondemandselect"],
                       "SelectType": "select/cons_tres", "SelectTypeParameters": ["CR_CORE_MEMORY"], "KillWait": 30,
                       "SchedulerParameters": "batch_sched_delay=0,disable_job_shrink"},
        "slurm_conf_meta": {}, "errors": [], "warnings": [],
    }  # fmt: skip
    assert CODECS["v0.0.45"].decode_conf(body) == GOOD_CONF
    empty = CODECS["v0.0.45"].decode_conf({"slurm_conf": {"MCSPlugin": "", "MCSParameters": ""}})
    assert (empty.mcs_plugin, empty.mcs_parameters) == ("", ())


def partition_body(maximums: Obj, partition: Obj | None = None) -> Obj:
    p: Obj = {"name": "hybrid", "maximums": {"oversubscribe": maximums}}
    if partition is not None:
        p["partition"] = partition
    return {"partitions": [p], "errors": []}


@pytest.mark.parametrize(
    ("maximums", "shown"),
    [
        ({"jobs": 1, "flags": []}, "NO"),  # as Slurm 26.05.5's v0.0.44 answers OverSubscribe=NO
        ({"jobs": 0, "flags": []}, "EXCLUSIVE"),
        ({"jobs": 4, "flags": []}, "YES:4"),
        ({"jobs": 4, "flags": ["force"]}, "FORCE:4"),
    ],
)
def test_older_versions_read_oversubscribe_from_the_maximums(maximums: Obj, shown: str) -> None:
    for version in ("v0.0.43", "v0.0.44"):
        assert CODECS[version].decode_partition(partition_body(maximums)) == PartitionInfo(
            name="hybrid", oversubscribe=shown
        )


def test_v0045_reads_the_string_because_it_zeroes_the_maximums() -> None:
    # Slurm 26.05.5's v0.0.45 answer for OverSubscribe=NO: jobs 0 in the deprecated field
    body = partition_body({"jobs": 0, "flags": []}, {"exclusive": "NO", "oversubscribe": "NO", "state": ["UP"]})
    assert CODECS["v0.0.45"].decode_partition(body) == PartitionInfo(name="hybrid", oversubscribe="NO")
    body = partition_body({"jobs": 0, "flags": []}, {"oversubscribe": "force:4"})
    assert CODECS["v0.0.45"].decode_partition(body) == PartitionInfo(name="hybrid", oversubscribe="FORCE:4")
    # slurm.conf's OverSubscribe=EXCLUSIVE, as 26.05.5 shows it in v0.0.45
    body = partition_body({"jobs": 0, "flags": []}, {"exclusive": "NODE", "oversubscribe": "NO"})
    assert CODECS["v0.0.45"].decode_partition(body) == PartitionInfo(name="hybrid", oversubscribe="EXCLUSIVE")


def test_an_unknown_partition_is_none_as_slurm_answers_it() -> None:
    assert CODECS["v0.0.45"].decode_partition({"partitions": None, "errors": []}) is None


# ---- the findings -----------------------------------------------------------------------------------


def one(config: Config, conf: SlurmConf | None, partition: PartitionInfo | None = NO, version: str = "v0.0.45") -> Any:
    return {f.check: f for f in findings(config, SiteView(conf, partition, version))}


def test_time_shared_passes_with_the_documented_mcs_setting() -> None:
    found = one(TS, GOOD_CONF)
    assert list(found) == ["mcs_plugin", "job_shrink"] and found["mcs_plugin"].state == "ok"
    select = GOOD_CONF.model_copy(update={"mcs_parameters": ("ondemand", "select")})
    assert one(TS, select)["mcs_plugin"].state == "ok"


@pytest.mark.parametrize(
    ("plugin", "params", "words"),
    [
        ("", (), "not documented behaviour"),
        ("mcs/none", (), "not documented behaviour"),
        ("mcs/label", ("noselect",), "without ondemand and ondemandselect"),
        ("mcs/user", ("ondemand", "select"), "mcs/user gives every job a label of its own"),
        ("mcs/account", (), "mcs/account gives every job a label"),
    ],
)
def test_time_shared_names_what_slurm_has_and_what_it_needs(plugin: str, params: tuple[str, ...], words: str) -> None:
    f = one(TS, GOOD_CONF.model_copy(update={"mcs_plugin": plugin, "mcs_parameters": params}))["mcs_plugin"]
    assert f.state == "problem" and words in f.message
    assert "MCSPlugin=mcs/label and MCSParameters=ondemand,ondemandselect" in f.message
    assert f"MCSPlugin={plugin or '(none)'}" in f.message


def test_without_get_conf_the_mcs_check_is_unknown_not_a_problem() -> None:
    f = one(TS, None, version="v0.0.44")["mcs_plugin"]
    assert f.state == "unknown" and "REST API v0.0.44 has no GET conf" in f.message


@pytest.mark.parametrize(
    ("over", "state"), [("NO", "ok"), ("EXCLUSIVE", "ok"), ("YES:4", "problem"), ("FORCE:4", "problem")]
)
def test_co_resident_needs_a_partition_without_oversubscription(over: str, state: str) -> None:
    f = one(CO, GOOD_CONF, PartitionInfo(name="slurm-bridge", oversubscribe=over))["partition_oversubscribe"]
    assert f.state == state and f"OverSubscribe={over}" in f.message
    if state == "problem":
        assert "same cores" in f.message


def test_co_resident_checks_the_partition_exists_and_memory_is_counted() -> None:
    assert one(CO, GOOD_CONF, None)["partition_oversubscribe"].state == "problem"
    no_mem = GOOD_CONF.model_copy(update={"select_type_parameters": ("CR_CORE",)})
    f = one(CO, no_mem)["consumable_memory"]
    assert (
        f.state == "problem"
        and "CR_Core_Memory" in f.message
        and "a native job may be given a pod's memory" in f.message
    )
    assert one(CO, GOOD_CONF)["consumable_memory"].state == "ok"
    assert one(CO, None, version="v0.0.44")["consumable_memory"].state == "unknown"
    assert "mcs_plugin" not in one(CO, GOOD_CONF), "no MCS is needed without time sharing"


def test_exclusive_needs_nothing_for_sharing() -> None:
    assert list(one(EX, None, None)) == ["job_shrink"]


@pytest.mark.parametrize(
    ("params", "state"),
    [
        (("batch_sched_delay=0", "disable_job_shrink"), "ok"),
        (("DISABLE_JOB_SHRINK",), "ok"),
        (("bf_interval=1",), "problem"),
        ((), "problem"),
    ],
)
@pytest.mark.parametrize("config", [TS, CO, EX], ids=["timeShared", "coResident", "exclusive"])
def test_every_mode_needs_slurm_to_refuse_an_owners_shrink_of_a_running_job(
    config: Config, params: tuple[str, ...], state: str
) -> None:
    f = one(config, GOOD_CONF.model_copy(update={"scheduler_parameters": params}))["job_shrink"]
    assert f.state == state and f"SchedulerParameters={','.join(params) or '(none)'}" in f.message
    if state == "problem":
        assert "the bridge checks each allocation against its pods and drains on a difference" in f.message
        assert "Add disable_job_shrink to SchedulerParameters" in f.message
    assert one(config, None, version="v0.0.44")["job_shrink"].state == "unknown"


# ---- the operator's report ---------------------------------------------------------------------------


async def test_the_check_logs_changes_sets_the_gauge_and_runs_again_later(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm = FakeNodes([])
    slurm.conf = GOOD_CONF.model_copy(update={"mcs_plugin": ""})
    check = SetupCheck(TS, slurm)
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.INFO, logger=setupcheck.__name__):
        await check.maybe_run()
        await check.maybe_run()  # not due yet
    problems = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(problems) == 1 and "mcs_plugin" in problems[0].getMessage()
    gauge = metrics.SLURM_SETUP_PROBLEMS.labels("mcs_plugin")
    assert gauge._value.get() == 1
    assert check.stats()[0]["state"] == "problem"
    caplog.clear()
    slurm.conf = GOOD_CONF
    clock[0] += setupcheck.CHECK_SECONDS
    with caplog.at_level(logging.INFO, logger=setupcheck.__name__):
        await check.maybe_run()
    assert gauge._value.get() == 0 and check.stats()[0]["state"] == "ok"
    assert [r.levelno for r in caplog.records] == [logging.INFO]


async def test_a_failed_read_is_logged_and_tried_again_sooner(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm = FakeNodes([])

    async def down() -> None:
        raise SlurmUnavailable("slurmrestd does not answer")

    monkeypatch.setattr(slurm, "slurm_conf", down)
    check = SetupCheck(TS, slurm)
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger=setupcheck.__name__):
        await check.maybe_run()
    assert "slurmrestd does not answer" in caplog.text and check.findings == []
    assert check._due == setupcheck.RETRY_SECONDS


@pytest.mark.parametrize(
    ("owner", "bridge_user", "reread"),
    [
        ("slurm-bridge", "slurm-bridge", False),  # a plain pod's job: no tenant owns it
        ("alice", "slurm-bridge", True),  # a tenant's job: its owner may have shrunk it
        ("", "slurm-bridge", True),  # the owner not read: read it
        ("slurm-bridge", "", True),  # the bridge's user not known: read it
    ],
)
def test_which_running_jobs_are_read_again_after_their_node_moved(owner: str, bridge_user: str, reread: bool) -> None:
    assert rereads_after_move(owner, bridge_user) is reread
