"""The REST API versions the bridge speaks and the one it picks (slurm_bridge/slurm/versions.py),
and v0.0.46 (Slurm 26.11), spoken provisionally: every path its codec builds, a submit body, and the
answers it decodes, shaped as the description of Slurm's data_parser/v0.0.46 has them (its parser
tables: field names and types), since no Slurm 26.11 runs here."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from slurm_bridge.slurm.models import JobRequest, PartitionInfo, SlurmConf
from slurm_bridge.slurm.versions import (
    CODECS,
    PREFERENCE,
    PROVISIONAL_VERSIONS,
    SPOKEN_VERSIONS,
    SUPPORTED_VERSIONS,
    CodecV0045,
    CodecV0046,
    codec_for,
)
from slurm_bridge.slurm.wire import JobDesc
from tests.unit.slurm.test_slurm_client import FakeSlurmrestd, client, ok, token_file

pytestmark = pytest.mark.unit
__all__ = ["token_file"]  # the JWT file fixture, shared with test_slurm_client.py
Obj = dict[str, Any]
V46 = "v0.0.46"


def no_val(number: int | None = None, *, infinite: bool = False) -> Obj:
    """A "number with flags" as slurmrestd writes it (UINT32_NO_VAL and the like)."""
    return {"set": number is not None, "infinite": infinite, "number": number or 0}


# --- the versions and the choice among them ------------------------------------------------------


def test_tested_versions_come_first_and_every_version_has_a_codec() -> None:
    assert SUPPORTED_VERSIONS == ("v0.0.45", "v0.0.44", "v0.0.43")
    assert PROVISIONAL_VERSIONS == (V46,)
    assert PREFERENCE == ("v0.0.45", "v0.0.44", "v0.0.43", V46), "a tested version before a provisional one"
    assert SPOKEN_VERSIONS == (V46, "v0.0.45", "v0.0.44", "v0.0.43")
    assert set(CODECS) == set(PREFERENCE) and len(PREFERENCE) == len(set(PREFERENCE))
    assert all(codec_for(v).version == v for v in PREFERENCE)
    assert isinstance(codec_for(V46), CodecV0046) and isinstance(codec_for(V46), CodecV0045)
    with pytest.raises(ValueError, match=r"v0\.0\.47.*the bridge speaks v0\.0\.46, v0\.0\.45"):
        codec_for("v0.0.47")


@pytest.mark.parametrize(
    ("served", "picked", "probes"),
    [
        # Slurm 26.11 loads its last three data parsers: the tested v0.0.45 is kept.
        (("v0.0.46", "v0.0.45", "v0.0.44"), "v0.0.45", ["v0.0.45"]),
        # A tested version, however old, before the provisional one.
        (("v0.0.46", "v0.0.44"), "v0.0.44", ["v0.0.45", "v0.0.44"]),
        # Only v0.0.46 and versions the bridge does not speak.
        (("v0.0.47", "v0.0.46", "v0.0.42"), V46, ["v0.0.45", "v0.0.44", "v0.0.43", V46]),
        ((V46,), V46, ["v0.0.45", "v0.0.44", "v0.0.43", V46]),
    ],
)
async def test_discovery_prefers_a_tested_version_to_v0046(
    token_file: Path, served: tuple[str, ...], picked: str, probes: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeSlurmrestd(versions=served)
    with caplog.at_level(logging.INFO, logger="slurm_bridge.slurm.client"):
        async with client(fake, token_file) as c:
            assert await c.api_version() == picked
            assert await c.api_version() == picked
    assert fake.paths() == [f"GET /slurm/{v}/ping" for v in probes]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    if picked in PROVISIONAL_VERSIONS:
        assert len(warned) == 1 and "not yet tested" in warned[0].getMessage(), caplog.text
    else:
        assert not warned, caplog.text


# --- v0.0.46: the request side ---------------------------------------------------------------------

# The fields of v0.0.46's job_desc_msg the bridge may send (a subset of its description's).
V46_JOB_DESC = frozenset(
    {
        "account", "admin_comment", "comment", "constraints", "cpus_per_task", "current_working_directory",
        "excluded_nodes", "flags", "group_id", "immediate", "licenses", "maximum_nodes", "mcs_label",
        "memory_per_node", "minimum_nodes", "name", "partition", "priority", "qos", "required_nodes",
        "required_switches", "reservation", "segment_size", "shared", "tasks_per_node", "time_limit",
        "tres_per_node", "user_id", "wckey",
    }
)  # fmt: skip


def test_every_field_the_bridge_sends_is_in_v0046s_job_description() -> None:
    assert set(JobDesc.model_fields) | {"immediate"} <= V46_JOB_DESC
    # v0.0.46 renamed container_type to runtime: the bridge sends neither.
    assert not {"container_type", "runtime"} & set(JobDesc.model_fields)


async def test_a_submit_in_v0046(token_file: Path) -> None:
    fake = FakeSlurmrestd(versions=(V46,))
    # OPENAPI_JOB_SUBMIT_RESPONSE: job_id, step_id, job_submit_user_msg beside the envelope
    submitted = {"job_id": 42, "step_id": "batch", "job_submit_user_msg": ""}
    fake.on("POST", f"/slurm/{V46}/job/submit", lambda r: ok(submitted))
    req = JobRequest(
        partition="debug",
        nodes=2,
        gres="gpu:1",
        memory_per_node_mib=512,
        time_limit_minutes=30,
        node_sharing="timeShared",
        mcs_label="kubernetes",
        topology="block",
        user_name="alice",
    )
    async with client(fake, token_file, api_version=V46) as c:
        assert await c.submit_external_job(req, name="ns/p", admin_comment="bridge=x") == 42
    body = json.loads(fake.requests[-1].content)
    assert body == {
        "job": {
            "name": "ns/p",
            "admin_comment": "bridge=x",
            "flags": ["EXTERNAL_JOB"],
            "current_working_directory": "/tmp",
            "partition": "debug",
            "minimum_nodes": 2,
            "maximum_nodes": 2,
            "tasks_per_node": 1,
            "cpus_per_task": 1,
            "memory_per_node": no_val(512),
            "tres_per_node": "gres/gpu:1",
            "time_limit": no_val(30),
            "shared": ["mcs"],
            "segment_size": no_val(2),
            "required_switches": no_val(1),
            "user_id": "alice",
            "mcs_label": "kubernetes",
        }
    }
    assert set(body["job"]) <= V46_JOB_DESC


def test_v0046_takes_the_node_states_of_v0045() -> None:
    states = codec_for(V46).node_update_states
    assert states == codec_for("v0.0.45").node_update_states and {"POWER_DOWN_ASAP", "UNDRAIN"} <= states
    assert codec_for(V46).create_node_body("NodeName=k1 State=EXTERNAL") == {"node_conf": "NodeName=k1 State=EXTERNAL"}


# --- v0.0.46: every path the client builds, and the answers it decodes -----------------------------

JOB: Obj = {  # JOB_INFO, the fields the bridge reads, and runtime (container_type until v0.0.45)
    "job_id": 7, "name": "ns/p", "job_state": ["RUNNING"], "state_reason": "None", "nodes": "k[1-2]",
    "admin_comment": "bridge=x", "comment": "", "partition": "debug", "flags": ["EXTERNAL_JOB"],
    "submit_time": no_val(1_700_000_000), "start_time": no_val(1_700_000_005), "end_time": no_val(1_700_003_605),
    "time_limit": no_val(60), "user_name": "alice", "user_id": 1000, "group_id": 1000, "group_name": "alice",
    "account": "team", "het_job_id": no_val(0), "het_job_offset": no_val(), "qos": "normal",
    "preempt_time": no_val(0), "scheduled_nodes": "", "runtime": "", "required_switches": 0, "segment_size": 0,
    "gres_detail": ["gpu:1(IDX:0)", "gpu:1(IDX:1)"],
    "job_resources": {"nodes": {"count": 2, "list": "k[1-2]", "allocation": [
        {"index": 0, "name": "k1", "sockets": [{"index": 0, "cores": [
            {"index": 0, "status": ["ALLOCATED"]}, {"index": 1, "status": ["UNALLOCATED"]}]}]},
        {"index": 1, "name": "k2", "sockets": [{"index": 0, "cores": [
            {"index": 0, "status": ["UNALLOCATED"]}, {"index": 1, "status": ["ALLOCATED", "IN_USE"]}]}]},
    ]}},
    "features": "", "node_count": no_val(2), "max_nodes": no_val(2), "priority": no_val(1000),
}  # fmt: skip
NODE: Obj = {  # NODE
    "name": "k1", "state": ["IDLE", "EXTERNAL"], "reason": "", "reason_set_by_user": "", "cpus": 8,
    "effective_cpus": 6, "real_memory": 16384, "specialized_memory": 1024, "gres": "gpu:2",
    "features": ["gpu"], "active_features": ["gpu"], "partitions": ["debug"], "comment": "",
    "topology": "blocks:b1,tree:s1",
}  # fmt: skip
PARTITION: Obj = {  # PARTITION_INFO: no maximums.oversubscribe in v0.0.46
    "name": "debug", "topology": "blocks",
    "partition": {"state": ["UP"], "oversubscribe": "FORCE:4", "exclusive": "NO"},
    "accounts": {"allowed": "", "deny": ""}, "qos": {"allowed": "", "deny": "low", "assigned": ""},
    "maximums": {"time": no_val(120), "over_time_limit": no_val(5), "nodes": no_val(infinite=True)},
    "defaults": {"time": no_val()},
}  # fmt: skip
CONF: Obj = {  # SLURM_CONF: OverTimeLimit a plain UINT16, the lists as lists
    "MCSPlugin": "mcs/label", "MCSParameters": ["ondemand", "ondemandselect"], "SelectType": "select/cons_tres",
    "SelectTypeParameters": ["CR_CORE_MEMORY"], "EpilogSlurmctld": ["/etc/slurm/epilog.sh"],
    "PreemptType": "preempt/qos", "PreemptMode": ["CANCEL"], "OverTimeLimit": 2, "DefRuntimePlugin": "",
}  # fmt: skip


def answer(request: httpx.Request) -> httpx.Response:
    """slurmrestd v0.0.46 as its description has it, by the path asked (after /slurm[db]/v0.0.46/)."""
    path = request.url.path.split(f"/{V46}/", 1)[1]
    method = request.method
    last = no_val(1_800_000_000)
    if path == "ping":
        return ok({"pings": [{"hostname": "ctl", "responding": True, "latency": 9, "primary": True, "status": "ok"}]})
    if path in ("job/submit", "job/allocate"):
        return ok({"job_id": 42, "job_submit_user_msg": ""})
    if path == "jobs/state/":
        return ok({"jobs": [{"job_id": "7", "state": ["RUNNING"]}, {"job_id": "13+1", "state": ["PENDING"]}]})
    if path == "jobs":
        return ok({"jobs": [JOB], "last_backfill": last, "last_update": last})
    if path.startswith("job/") and method == "GET":
        return ok({"jobs": [JOB], "last_backfill": last, "last_update": last})
    if path.startswith("job/") and method == "POST":
        return ok({"results": [{"job_id": 7, "step_id": "7", "error": "No error", "error_code": 0, "why": ""}]})
    if path.startswith("job/") and method == "DELETE":
        error = {"string": "No error", "code": 0, "message": ""}
        return ok({"status": [{"error": error, "step_id": "7", "job_id": no_val(7), "federation": {"sibling": ""}}]})
    if path == "nodes":
        return ok({"nodes": [NODE], "last_update": last})
    if path.startswith(("node/", "new/node/")):
        return ok()
    if path in ("partitions/", "partition/debug"):
        return ok({"partitions": [PARTITION], "last_update": last})
    if path == "conf":
        return ok({"slurm_conf": CONF, "slurm_conf_meta": {"SLURM_VERSION": "26.11.0"}})
    if path == "reservations/":
        resv = {"name": "handoff-7_x_k1", "start_time": no_val(1_700_000_000), "end_time": no_val(1_700_000_600)}
        return ok({"reservations": [resv], "last_update": last})
    if path.startswith("reservation/"):
        return ok()
    if path == "accounts/":
        return ok({"accounts": [{"name": "team", "description": "t", "organization": "o"}]})
    if path == "qos/":
        preempt = {"list": ["low"], "mode": ["CANCEL"], "exempt_time": no_val()}
        return ok({"qos": [{"name": "high", "limits": {"grace_time": 30}, "preempt": preempt}]})
    if path == "associations/":
        assoc = {"account": "team", "user": "bridge", "is_default": True, "default": {"qos": "normal"}}
        return ok({"associations": [assoc]})
    return httpx.Response(404, text="Unable to find requested URL endpoint.")


class Slurmrestd46(FakeSlurmrestd):
    """A slurmrestd that serves v0.0.46 alone, every answer from :func:`answer`."""

    def __init__(self) -> None:
        super().__init__(versions=(V46,))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return answer(request)


async def test_every_call_of_the_client_in_v0046(token_file: Path) -> None:
    """Every path the codec builds exists in Slurm 26.11's slurmrestd (its path bindings are the
    same for every data parser), and each answer decodes as v0.0.45's did."""
    fake = Slurmrestd46()
    req = JobRequest(partition="debug", nodes=2)
    async with client(fake, token_file, api_version=V46) as c:
        assert await c.submit_external_job(req, name="n", admin_comment="c") == 42
        assert await c.submit_het_job([req, req], name="n", admin_comment="c") == 42
        assert await c.allocate_external_job(req, name="n", admin_comment="c") == 42
        await c.mark_job(7, "bridge=x")
        await c.set_priority(7, 100)
        states = await c.job_states()
        await c.update_job(7, req)
        settings = await c.job_settings(7)
        (listed,) = await c.list_jobs()
        job = await c.get_job(7)
        devices = await c.job_devices(7)
        await c.cancel_job(7)
        (node,) = await c.list_nodes()
        await c.update_node("k1", state="DRAIN", reason="r")
        await c.create_node("NodeName=k3 State=EXTERNAL")
        assert await c.delete_node("k3") is True
        assert (await c.ping())[0].hostname == "ctl"
        assert await c.list_accounts() == ["team"]
        assert await c.list_qos() == ["high"]
        assert await c.list_partitions() == ["debug"]
        conf = await c.slurm_conf()
        partition = await c.partition("debug")
        (limits,) = await c.partition_limits()
        (resv,) = await c.list_reservations()
        assert await c.delete_reservation("handoff-7_x_k1") is True
        await c.mark_released(7, "bridge=released")
        (qos,) = await c.qos_preemption() or []
        assert await c.default_qos("bridge") == {"team": "normal", "": "normal"}
        assert await c.partition_over_time() == {"debug": 5}
    assert fake.paths() == [
        f"POST /slurm/{V46}/job/submit",
        f"POST /slurm/{V46}/job/submit",
        f"POST /slurm/{V46}/job/allocate",
        f"POST /slurm/{V46}/job/7",
        f"POST /slurm/{V46}/job/7",
        f"GET /slurm/{V46}/jobs/state/",
        f"POST /slurm/{V46}/job/7",
        f"GET /slurm/{V46}/job/7",
        f"GET /slurm/{V46}/jobs",
        f"GET /slurm/{V46}/job/7",
        f"GET /slurm/{V46}/job/7",
        f"DELETE /slurm/{V46}/job/7",
        f"GET /slurm/{V46}/nodes",
        f"POST /slurm/{V46}/node/k1",
        f"POST /slurm/{V46}/new/node/",
        f"DELETE /slurm/{V46}/node/k3",
        f"GET /slurm/{V46}/ping",
        f"GET /slurmdb/{V46}/accounts/",
        f"GET /slurmdb/{V46}/qos/",
        f"GET /slurm/{V46}/partitions/",
        f"GET /slurm/{V46}/conf",
        f"GET /slurm/{V46}/partition/debug",
        f"GET /slurm/{V46}/partitions/",
        f"GET /slurm/{V46}/reservations/",
        f"DELETE /slurm/{V46}/reservation/handoff-7_x_k1",
        f"POST /slurm/{V46}/job/7",
        f"GET /slurmdb/{V46}/qos/",
        f"GET /slurmdb/{V46}/associations/",
        f"GET /slurm/{V46}/partitions/",
    ]
    # The answers, decoded.
    assert states.by_id == {7: ("RUNNING",), 13: ("PENDING",)}
    assert job is not None and listed == job
    assert (job.job_id, job.states, job.reason, job.nodes) == (7, ("RUNNING",), "", ("k1", "k2"))
    assert (job.flags, job.time_limit_minutes, job.het_job_id, job.qos) == (("EXTERNAL_JOB",), 60, 0, "normal")
    assert job.start_time == datetime.fromtimestamp(1_700_000_005, tz=UTC) and job.preempt_time is None
    assert settings is not None and (settings.node_count, settings.max_nodes, settings.priority) == (2, 2, 1000)
    assert devices is not None and set(devices) == {"k1", "k2"}
    assert (devices["k1"].gres, devices["k1"].cpus) == ({"gpu": (0,)}, (0,))
    assert (devices["k2"].gres, devices["k2"].cpus) == ({"gpu": (1,)}, (1,))
    assert (node.name, node.states, node.cpus, node.effective_cpus) == ("k1", ("IDLE", "EXTERNAL"), 8, 6)
    assert (node.features, node.partitions, node.topology) == (("gpu",), ("debug",), "blocks:b1,tree:s1")
    assert conf == SlurmConf(
        mcs_plugin="mcs/label",
        mcs_parameters=("ondemand", "ondemandselect"),
        select_type="select/cons_tres",
        select_type_parameters=("CR_CORE_MEMORY",),
        epilog_slurmctld=("/etc/slurm/epilog.sh",),
        preempt_type="preempt/qos",
        preempt_mode=("CANCEL",),
        over_time_limit_minutes=2,
    )
    assert partition == PartitionInfo(name="debug", oversubscribe="FORCE:4", topology="blocks")
    assert (limits.max_time_minutes, limits.default_time_minutes, limits.deny_qos) == (120, None, ("low",))
    assert resv.name == "handoff-7_x_k1" and resv.end_time == datetime.fromtimestamp(1_700_000_600, tz=UTC)
    assert (qos.name, qos.preempts, qos.mode, qos.grace_seconds) == ("high", ("low",), ("CANCEL",), 30)


# --- v0.0.46: a partition's OverSubscribe ----------------------------------------------------------


def partition(strings: Obj | None, maximums: Obj | None = None) -> Obj:
    p: Obj = {"name": "hybrid"}
    if strings is not None:
        p["partition"] = strings
    if maximums is not None:
        p["maximums"] = {"oversubscribe": maximums}
    return {"partitions": [p], "errors": []}


@pytest.mark.parametrize(
    ("strings", "shown"),
    [
        ({"oversubscribe": "NO", "exclusive": "NO"}, "NO"),
        ({"oversubscribe": "YES:4", "exclusive": "NO"}, "YES:4"),
        ({"oversubscribe": "FORCE:2", "exclusive": "NO"}, "FORCE:2"),
        ({"oversubscribe": "NO", "exclusive": "NODE"}, "EXCLUSIVE"),  # slurm.conf's OverSubscribe=EXCLUSIVE
        ({"oversubscribe": "NO", "exclusive": "TOPO"}, "EXCLUSIVE"),
        ({"oversubscribe": "force:4"}, "FORCE:4"),
    ],
)
def test_v0046_reads_oversubscribe_from_scontrols_strings(strings: Obj, shown: str) -> None:
    assert codec_for(V46).decode_partition(partition(strings)) == PartitionInfo(name="hybrid", oversubscribe=shown)


def test_v0046_never_reads_the_maximums_v0045_fell_back_to() -> None:
    """v0.0.46 removed maximums.oversubscribe: whatever is found there is not its OverSubscribe."""
    forced = {"jobs": 4, "flags": ["force"]}
    assert codec_for("v0.0.45").decode_partition(partition(None, forced)) == PartitionInfo(
        name="hybrid", oversubscribe="FORCE:4"
    )
    assert codec_for(V46).decode_partition(partition(None, forced)) == PartitionInfo(name="hybrid", oversubscribe="NO")
    assert codec_for(V46).decode_partition(partition({"oversubscribe": "YES:2"}, forced)) == PartitionInfo(
        name="hybrid", oversubscribe="YES:2"
    )
    assert codec_for(V46).decode_partition({"partitions": None, "errors": []}) is None


def test_v0046_reads_over_time_limit_as_a_plain_number_and_unlimited() -> None:
    codec = codec_for(V46)
    assert codec.decode_conf({"slurm_conf": {"OverTimeLimit": 0}}).over_time_limit_minutes == 0
    assert codec.decode_conf({"slurm_conf": {"OverTimeLimit": 0xFFFF}}).over_time_limit_minutes is None
    assert codec.conf_path() == f"/slurm/{V46}/conf"
