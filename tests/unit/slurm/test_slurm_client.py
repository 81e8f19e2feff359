"""SlurmClient against a scripted slurmrestd (httpx.MockTransport): versions, errors, retries, JWT."""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

import httpx
import pytest

from slurm_bridge.core.config import Config
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import (
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmUnavailable,
    SlurmUnsupportedVersion,
)
from slurm_bridge.slurm.formats import expand_nodes, gres_to_tres_per_node
from slurm_bridge.slurm.models import JobRequest, JobSettings, PartitionLimits
from slurm_bridge.slurm.versions import SPOKEN_VERSIONS, codec_for, version_key

pytestmark = pytest.mark.unit

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.s1gnature-TOKEN-abc123"
Handler = Callable[[httpx.Request], httpx.Response]


def ok(body: dict[str, Any] | None = None, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json={"errors": [], "warnings": [], **(body or {})})


def err(status: int, number: int, error: str, description: str = "") -> httpx.Response:
    return httpx.Response(
        status,
        json={"errors": [{"error": error, "error_number": number, "description": description, "source": "t"}]},
    )


class FakeSlurmrestd:
    """Routes ``(method, path)`` to handlers; a list of handlers is consumed one per request."""

    def __init__(self, versions: tuple[str, ...] = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42")) -> None:
        self.versions = versions
        self.routes: dict[tuple[str, str], Handler | list[Handler]] = {}
        self.requests: list[httpx.Request] = []

    def on(self, method: str, path: str, *handlers: Handler) -> None:
        self.routes[(method, path)] = handlers[0] if len(handlers) == 1 else list(handlers)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        key = (request.method, request.url.path)
        route = self.routes.get(key)
        if isinstance(route, list):
            return route.pop(0)(request) if len(route) > 1 else route[0](request)
        if route is not None:
            return route(request)
        if request.url.path.endswith("/ping") and request.url.path.split("/")[2] in self.versions:
            return ok({"pings": [{"hostname": "ctl", "responding": True, "primary": True, "latency": 9}]})
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {f"/slurm/{v}/jobs/": {} for v in self.versions}})
        return httpx.Response(404, text="Unable to find requested URL endpoint.")

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    p = tmp_path / "jwt"
    p.write_text(TOKEN + "\n")
    return p


def rewrite(path: Path, text: str, *, bump_mtime: bool = False) -> None:
    path.write_text(text)
    if bump_mtime:  # a coarse filesystem clock may not move between two quick writes
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def client(fake: FakeSlurmrestd, token_file: Path, **kw: Any) -> SlurmClient:
    kw.setdefault("backoff_base", 0.0)
    return SlurmClient("http://slurm.test:6820/", token_file, transport=httpx.MockTransport(fake), **kw)


def job_json(job_id: int = 7, **kw: Any) -> dict[str, Any]:
    j: dict[str, Any] = {
        "job_id": job_id,
        "name": "pj-a",
        "job_state": ["RUNNING"],
        "state_reason": "None",
        "nodes": "kwok-node-[1-2,4]",
        "admin_comment": "bridge=x",
        "partition": "debug",
        "flags": ["EXTERNAL_JOB"],
        "submit_time": {"set": True, "infinite": False, "number": 1_700_000_000},
        "start_time": {"set": True, "infinite": False, "number": 1_700_000_005},
        "end_time": {"set": True, "infinite": False, "number": 0},
        "time_limit": {"set": True, "infinite": False, "number": 30},
    }
    j.update(kw)
    return j


# --- version discovery ---------------------------------------------------------------------


async def test_picks_highest_version_the_server_offers_and_caches_it(token_file: Path) -> None:
    fake = FakeSlurmrestd(versions=("v0.0.44", "v0.0.43", "v0.0.42"))
    async with client(fake, token_file) as c:
        assert await c.api_version() == "v0.0.44"
        assert await c.api_version() == "v0.0.44"
        assert fake.paths() == ["GET /slurm/v0.0.45/ping", "GET /slurm/v0.0.44/ping"]
        assert c.request_count == 2
        fake.on("GET", "/slurm/v0.0.44/jobs", lambda r: ok({"jobs": []}))
        assert await c.list_jobs() == []
        assert fake.paths()[-1] == "GET /slurm/v0.0.44/jobs"


async def test_a_cookie_slurmrestd_sets_is_neither_kept_nor_sent_back(token_file: Path) -> None:
    """The client keeps no cookies (it skips httpx's per-answer parse): what a proxy in front of
    slurmrestd sets is not sent with the next request; the JWT header is all it sends."""
    fake = FakeSlurmrestd()

    def jobs(_: httpx.Request) -> httpx.Response:
        answer = ok({"jobs": []})
        answer.headers["Set-Cookie"] = "session=abc; Path=/"
        return answer

    fake.on("GET", "/slurm/v0.0.45/jobs", jobs)
    async with client(fake, token_file) as c:
        assert await c.list_jobs() == [] and await c.list_jobs() == []
    assert [r for r in fake.requests if "cookie" in r.headers] == []
    assert all(r.headers["X-SLURM-USER-TOKEN"] == TOKEN for r in fake.requests)


async def test_concurrent_callers_discover_the_version_once(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    async with client(fake, token_file) as c:
        versions = await asyncio.gather(*(c.api_version() for _ in range(10)))
        assert set(versions) == {"v0.0.45"}
        assert fake.paths() == ["GET /slurm/v0.0.45/ping"]


async def test_server_without_a_supported_version_is_named(token_file: Path) -> None:
    fake = FakeSlurmrestd(versions=("v0.0.42", "v0.0.41"))
    async with client(fake, token_file) as c:
        with pytest.raises(SlurmUnsupportedVersion) as e:
            await c.list_jobs()
    assert e.value.offered == ("v0.0.42", "v0.0.41")
    assert "v0.0.42, v0.0.41" in str(e.value) and "v0.0.45" in str(e.value)
    assert "offers none of v0.0.46, v0.0.45, v0.0.44, v0.0.43" in str(e.value), str(e.value)


@pytest.mark.parametrize(
    ("meta", "words"),
    [
        ({"slurm": {"release": "24.11.5", "version": {"major": "24", "minor": "11", "micro": "5"}}},
         ["is Slurm 24.11.5", "needs Slurm 25.05 or newer", "upgrade Slurm"]),
        ({"slurm": {"version": {"major": "24", "minor": "5", "micro": "1"}}},
         ["is Slurm 24.05.1", "needs Slurm 25.05"]),
        ({"slurm": {"release": "25.11.2"}}, ["Slurm 25.11.2", "load a matching data_parser plugin"]),
        ({}, ["offers none of", "load a matching data_parser plugin"]),
    ],
)  # fmt: skip
async def test_a_too_old_slurm_is_named_with_the_release_it_needs(
    token_file: Path, meta: dict[str, Any], words: list[str]
) -> None:
    fake = FakeSlurmrestd(versions=("v0.0.42", "v0.0.41"))
    fake.on("GET", "/slurm/v0.0.42/ping", lambda r: ok({"meta": meta, "pings": []}))
    async with client(fake, token_file) as c:
        with pytest.raises(SlurmUnsupportedVersion) as e:
            await c.api_version()
    assert all(w in str(e.value) for w in words), str(e.value)


async def test_pinned_version_skips_discovery(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.43/jobs", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.43") as c:
        assert await c.api_version() == "v0.0.43"
        await c.list_jobs()
    assert fake.paths() == ["GET /slurm/v0.0.43/jobs"]
    with pytest.raises(ValueError, match=r"v0\.0\.42"):
        SlurmClient("http://x", token_file, api_version="v0.0.42")


# --- errors and retries ----------------------------------------------------------------------


async def test_errors_in_a_200_answer_raise_with_slurms_text(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: err(200, 2002, "Access/permission denied", "list"))
    fake.on("GET", "/slurm/v0.0.45/nodes", lambda r: err(200, 0, "No error", "Failure to query nodes"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmAuthError) as e:
            await c.list_jobs()
        assert e.value.error_numbers == {2002}
        with pytest.raises(SlurmError) as e2:
            await c.list_nodes()
        assert "Failure to query nodes" in str(e2.value)
        assert type(e2.value) is SlurmError
        assert c.request_count == 2


@pytest.mark.parametrize(
    "failure",
    [
        lambda r: httpx.Response(500, text="oops"),
        lambda r: httpx.Response(503),
        lambda r: err(502, 1800, "Unable to contact slurm controller (connect failure)"),
        lambda r: err(200, 1802, "Communication receive failure"),
    ],
    ids=["500-no-body", "503", "502-ctld-connect", "200-ctld-receive"],
)
async def test_5xx_and_unreachable_controller_are_retried(token_file: Path, failure: Handler) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", failure, failure, lambda r: ok({"jobs": [job_json()]}))
    async with client(fake, token_file, api_version="v0.0.45", retries=3) as c:
        jobs = await c.list_jobs()
        assert [j.job_id for j in jobs] == [7]
        assert c.request_count == 3


async def test_connection_errors_and_read_timeouts_are_retried_for_reads(token_file: Path) -> None:
    def refuse(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=r)

    def slow(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=r)

    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/nodes", refuse, slow, lambda r: ok({"nodes": []}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.list_nodes() == []
        assert c.request_count == 3


async def test_retries_give_up_with_slurm_unavailable(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: err(502, 1001, "Communication connection failure"))
    async with client(fake, token_file, api_version="v0.0.45", retries=2) as c:
        with pytest.raises(SlurmUnavailable) as e:
            await c.list_jobs()
        assert c.request_count == 3
    assert "Communication connection failure" in str(e.value) and "3 attempts" in str(e.value)
    assert e.value.status == 502 and e.value.error_numbers == {1001}


@pytest.mark.parametrize(
    ("response", "exc"),
    [
        (err(422, 2000, "Invalid partition name specified", "Batch job submission failed"), SlurmError),
        (err(400, 9001, "Failed to parse"), SlurmError),
        (err(404, 2017, "Invalid job id specified"), SlurmNotFound),
        (err(500, 2000, "Invalid partition name specified"), SlurmError),  # a refusal, not an outage
    ],
)
async def test_refusals_are_not_retried(token_file: Path, response: httpx.Response, exc: type[Exception]) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: response)
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(exc) as e:
            await c.list_jobs()
        assert c.request_count == 1
    assert type(e.value) is exc
    assert "Invalid" in str(e.value) or "parse" in str(e.value)


@pytest.mark.parametrize("endpoint", ["submit", "allocate"])
async def test_submit_is_not_resent_after_a_read_timeout(token_file: Path, endpoint: str) -> None:
    def slow(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=r)

    fake = FakeSlurmrestd()
    fake.on("POST", f"/slurm/v0.0.45/job/{endpoint}", slow, lambda r: ok({"job_id": 99}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        send = c.submit_external_job if endpoint == "submit" else c.allocate_external_job
        with pytest.raises(SlurmUnavailable) as e:
            await send(JobRequest(), name="n", admin_comment="c")
        assert c.request_count == 1
    assert e.value.maybe_applied
    assert "not sent again" in str(e.value)


@pytest.mark.parametrize(
    "failure",
    [
        lambda r: httpx.Response(503),
        lambda r: err(502, 1802, "Communication receive failure"),
        lambda r: httpx.Response(500, text="internal"),
    ],
    ids=["503", "ctld-receive", "500"],
)
async def test_submit_is_not_resent_when_slurm_may_have_made_the_job(token_file: Path, failure: Handler) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", "/slurm/v0.0.45/job/submit", failure, lambda r: ok({"job_id": 99}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmUnavailable) as e:
            await c.submit_external_job(JobRequest(), name="n", admin_comment="c")
        assert c.request_count == 1
    assert e.value.maybe_applied


async def test_submit_is_resent_when_it_certainly_did_not_arrive(token_file: Path) -> None:
    def refuse(r: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=r)

    fake = FakeSlurmrestd()
    fake.on(
        "POST",
        "/slurm/v0.0.45/job/submit",
        refuse,
        lambda r: err(502, 1800, "Unable to contact slurm controller (connect failure)"),
        lambda r: ok({"job_id": 99}),
    )
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.submit_external_job(JobRequest(), name="n", admin_comment="c") == 99
        assert c.request_count == 3


async def test_submit_that_made_a_pending_job_with_warnings_returns_its_id(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    warning = {"description": "Requested partition configuration not available now", "source": "x"}
    fake.on("POST", "/slurm/v0.0.45/job/submit", lambda r: ok({"job_id": 12, "warnings": [warning]}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.submit_external_job(JobRequest(), name="n", admin_comment="c") == 12


async def test_a_queued_job_no_block_has_room_for_is_made_though_slurm_answers_an_error(token_file: Path) -> None:
    """Slurm 26.05 queues such a job on a topology/block partition and answers its id with error
    7203, HTTP 500 (checked): the job exists, so the id is returned and nothing is sent again."""
    topo = {"error": "No suitable topology unit found", "error_number": 7203, "description": "", "source": "x"}
    answer = httpx.Response(500, json={"job_id": 37, "step_id": "batch", "errors": [topo], "warnings": []})
    fake = FakeSlurmrestd()
    fake.on("POST", "/slurm/v0.0.45/job/submit", lambda r: answer)
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.submit_external_job(JobRequest(nodes=2, topology="b"), name="n", admin_comment="c") == 37
        assert await c.submit_het_job([JobRequest(), JobRequest()], name="n", admin_comment="c") == 37
        assert c.request_count == 2


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_allocate_asks_for_an_immediate_external_job(token_file: Path, version: str) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", f"/slurm/{version}/job/allocate", lambda r: ok({"job_id": 31, "job_submit_user_msg": ""}))
    async with client(fake, token_file, api_version=version) as c:
        job_id = await c.allocate_external_job(JobRequest(partition="p", nodes=1), name="n", admin_comment="c")
    assert job_id == 31
    body = json.loads(fake.requests[-1].content)["job"]
    assert body["immediate"] is True, "a queued allocation would be killed when it starts later"
    assert body["flags"] == ["EXTERNAL_JOB"] and body["admin_comment"] == "c" and body["name"] == "n"


async def test_allocate_refused_now_raises_slurms_reason_and_is_not_resent(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", "/slurm/v0.0.45/job/allocate", lambda r: err(422, 2016, "Requested nodes are busy"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmError) as e:
            await c.allocate_external_job(JobRequest(), name="n", admin_comment="c")
        assert c.request_count == 1
    assert not isinstance(e.value, SlurmUnavailable)
    assert e.value.errors[0].error_number == 2016 and "busy" in str(e.value)


async def test_job_states_parses_string_ids_and_skips_array_jobs(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    jobs = [
        {"job_id": "7", "state": ["RUNNING"]},
        {"job_id": "8", "state": ["COMPLETING", "CANCELLED"]},
        {"job_id": "9_2", "state": ["PENDING"]},
        {"job_id": 10, "state": ["PENDING"]},
    ]
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", lambda r: ok({"jobs": jobs}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        states = await c.job_states()
    assert states.by_id == {7: ("RUNNING",), 8: ("CANCELLED", "COMPLETING"), 10: ("PENDING",)}


async def test_job_states_equal_to_the_previous_answer_come_back_unchanged(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    first = [{"job_id": "7", "state": ["RUNNING"]}, {"job_id": "8", "state": ["PENDING"]}]
    second = [{"job_id": "7", "state": ["COMPLETING", "RUNNING"]}, {"job_id": "8", "state": ["PENDING"]}]
    answers = [first, first, second, second, list(reversed(second))]
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", *(lambda r, j=j: ok({"jobs": j}) for j in answers))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        a = await c.job_states()
        b = await c.job_states(a)
        assert not a.unchanged and b.unchanged and b.by_id == a.by_id
        d = await c.job_states(b)
        assert not d.unchanged, "one job's flags differ"
        assert d.by_id == {7: ("RUNNING", "COMPLETING"), 8: ("PENDING",)}
        e = await c.job_states(d)
        assert e.unchanged
        assert (await c.job_states(e)).unchanged, "the same states in another order"
        assert not (await c.job_states()).unchanged, "without a previous answer nothing is unchanged"


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_an_unchanged_node_table_is_none_and_costs_no_decoding(token_file: Path, version: str) -> None:
    """slurmrestd answers ``GET nodes?update_time=<last_update>`` with 304 and no body when no
    node changed (Slurm 26.05, every supported version); the caller keeps its list."""
    fake = FakeSlurmrestd()
    last = {"set": True, "infinite": False, "number": 1795405136}
    fake.on(
        "GET",
        f"/slurm/{version}/nodes",
        lambda r: ok({"nodes": [{"name": "n1", "state": ["IDLE"]}], "last_update": last}),
        lambda r: httpx.Response(304),
        lambda r: ok({"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"]}], "last_update": dict(last, number=9)}),
    )
    async with client(fake, token_file, api_version=version) as c:
        nodes, since = await c.list_nodes_since(None)
        assert [n.name for n in nodes or []] == ["n1"] and since == 1795405136
        assert await c.list_nodes_since(since) == (None, since)
        nodes, since2 = await c.list_nodes_since(since)
        assert nodes is not None and nodes[0].states == ("IDLE", "DRAIN") and since2 == 9
    assert "update_time" not in str(fake.requests[0].url)
    assert fake.requests[1].url.params["update_time"] == "1795405136"


async def test_an_unchanged_job_table_is_none_but_an_empty_one_is_a_list(token_file: Path) -> None:
    """``GET jobs?update_time=`` with no change: 200, no jobs and ``last_update`` 0 (and a warning);
    a table that really is empty has a ``last_update``."""
    fake = FakeSlurmrestd()
    unchanged = {"jobs": [], "last_update": {"set": True, "infinite": False, "number": 0},
                 "warnings": [{"description": "No job changes since update_time[5]", "source": "x"}]}  # fmt: skip
    empty = {"jobs": [], "last_update": {"set": True, "infinite": False, "number": 12}}
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok(unchanged), lambda r: ok(empty), lambda r: httpx.Response(304))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.list_jobs_since(5) == (None, 5)
        assert await c.list_jobs_since(5) == ([], 12)
        assert await c.list_jobs_since(12) == (None, 12), "a 304 means unchanged too"


async def test_a_list_of_every_job_gets_a_longer_timeout_than_other_calls(token_file: Path) -> None:
    """80 MB for 10,000 jobs took longer than the 10 s request timeout on a busy machine, so the
    operator could not start (its first full list never arrived: bench/log, run 8)."""
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok({"jobs": []}))
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45", timeout=10) as c:
        await c.list_jobs_since(None)
        await c.job_states()
    listed, states = fake.requests
    assert listed.extensions["timeout"]["read"] >= 120 and states.extensions["timeout"]["read"] == 10


async def test_a_list_without_update_time_is_never_unchanged(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/nodes", lambda r: ok({"nodes": []}))
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.list_nodes_since(None) == ([], None)
        assert await c.list_jobs_since(None) == ([], None)


async def test_polling_a_big_state_answer_forces_no_full_garbage_collection(token_file: Path) -> None:
    """Decoding jobs/state for 10,000 jobs every period moved its short-lived objects into the
    oldest generation when a collection ran in the middle, and Python then ran a full collection
    over every object of the operator every few polls (10 a minute, 0.4 s each, at the scale
    profile: bench/log, run 8). Answers are decoded with the collector paused."""
    heap = [{"k": [i]} for i in range(100_000)]  # long-lived, like the operator's stores
    jobs = [{"job_id": str(i), "state": ["RUNNING"]} for i in range(10_000)]
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", lambda r: ok({"jobs": jobs}))
    full = list[int]()

    def count_full(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            full.append(1)

    threshold = gc.get_threshold()
    async with client(fake, token_file, api_version="v0.0.45") as c:
        states = await c.job_states()
        try:
            gc.set_threshold(700, 10, 10)  # Python's defaults
            gc.collect()
            gc.callbacks.append(count_full)
            for _ in range(30):
                states = await c.job_states(states)
        finally:
            gc.callbacks.remove(count_full)
            gc.set_threshold(*threshold)
    assert states.unchanged and len(states.by_id) == 10_000
    assert full == [], f"{len(full)} full collections in 30 polls"
    assert gc.isenabled() and len(heap) == 100_000


async def test_the_collector_comes_back_after_overlapping_and_failed_decodes(token_file: Path) -> None:
    from slurm_bridge.slurm import outcomes

    with outcomes.gc_paused():
        with outcomes.gc_paused():  # another thread's decode
            assert not gc.isenabled()
        assert not gc.isenabled(), "still paused for the first one"
    assert gc.isenabled()
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", lambda r: ok({"no_jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmError, match="jobs/state"):
            await c.job_states()
    assert gc.isenabled(), "a decode that failed does not leave the collector off"


async def test_job_states_rejects_an_answer_without_jobs(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs/state/", lambda r: ok({}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmError, match="jobs/state"):
            await c.job_states()


async def test_each_url_is_built_once_while_it_is_among_the_last_used(token_file: Path) -> None:
    """A request's URL under the base URL is kept per path: a job's read, released mark and cancel
    name it again. Only the paths used last are kept, and every request goes to the base URL's
    path with its query."""
    fake = FakeSlurmrestd()
    for job_id in (7, 8, 9):
        fake.on("GET", f"/slurm/v0.0.45/job/{job_id}", lambda r: ok({"jobs": [job_json()]}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with patch("slurm_bridge.slurm.session._KEPT_URLS", 2):
            for job_id in (7, 7, 8, 7, 9):
                await c.get_job(job_id)
            built = list(c._urls.values())
            # 7 and 8 kept; 9 pushed out 8 (7 was used after it)
            assert list(c._urls) == [f"/slurm/v0.0.45/job/{i}" for i in (7, 9)]
            await c.get_job(7)
            assert c._urls["/slurm/v0.0.45/job/7"] is built[0], "kept, not built again"
    sent = [str(r.url) for r in fake.requests]
    assert sent == [f"http://slurm.test:6820/slurm/v0.0.45/job/{i}?flags=ALL" for i in (7, 7, 8, 7, 9, 7)]


async def test_each_request_names_the_bridge_and_asks_for_json(token_file: Path) -> None:
    """The headers every request carries: JSON asked for, the bridge named (slurmrestd logs it), no
    compression asked for (slurmrestd answers plain) and no cookie."""
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        await c.list_jobs()
    (sent,) = fake.requests
    assert sent.headers["Accept"] == "application/json" and sent.headers["User-Agent"] == "slurm-bridge"
    assert "accept-encoding" not in sent.headers and "cookie" not in sent.headers
    assert sent.headers["Host"] == "slurm.test:6820"


# --- JWT -------------------------------------------------------------------------------------


async def test_headers_carry_the_token_and_user(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45", user="slurm") as c:
        await c.list_jobs()
    async with client(fake, token_file, api_version="v0.0.45") as c:
        await c.list_jobs()
    with_user, without = fake.requests
    assert with_user.headers["X-SLURM-USER-TOKEN"] == TOKEN
    assert with_user.headers["X-SLURM-USER-NAME"] == "slurm"
    assert "X-SLURM-USER-NAME" not in without.headers


@pytest.mark.parametrize(
    "content", [f"SLURM_JWT={TOKEN}\n", f"  {TOKEN}  ", f"export SLURM_JWT='{TOKEN}'\n", f"# t\n\n{TOKEN}\n"]
)
async def test_token_file_forms(tmp_path: Path, content: str) -> None:
    p = tmp_path / "jwt"
    p.write_text(content)
    fake = FakeSlurmrestd()
    async with client(fake, p) as c:
        await c.api_version()
    assert fake.requests[0].headers["X-SLURM-USER-TOKEN"] == TOKEN


async def test_token_is_reread_when_the_file_changes(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: ok({"jobs": []}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        await c.list_jobs()
        rewrite(token_file, "SLURM_JWT=second-token-longer-than-before\n")  # new size
        await c.list_jobs()
        rewrite(token_file, "SLURM_JWT=third--token-longer-than-before\n", bump_mtime=True)  # same size
        await c.list_jobs()
        await c.list_jobs()
    seen = [r.headers["X-SLURM-USER-TOKEN"] for r in fake.requests]
    assert seen == [TOKEN, "second-token-longer-than-before", *["third--token-longer-than-before"] * 2]


async def test_auth_failure_says_to_check_the_jwt_file_and_is_not_retried(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: err(511, 1007, "Protocol authentication error"))
    fake.on("GET", "/slurm/v0.0.45/nodes", lambda r: httpx.Response(401, text="Authentication failure"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmAuthError) as e:
            await c.list_jobs()
        assert str(token_file) in str(e.value) and "Protocol authentication error" in str(e.value)
        assert e.value.status == 511
        with pytest.raises(SlurmAuthError, match="Authentication failure"):
            await c.list_nodes()
        assert c.request_count == 2


async def test_auth_failure_after_token_rotation_is_tried_once_with_the_new_token(token_file: Path) -> None:
    fake = FakeSlurmrestd()

    def jobs(r: httpx.Request) -> httpx.Response:
        if r.headers["X-SLURM-USER-TOKEN"] == TOKEN:
            rewrite(token_file, "rotated-token")  # rotated while the request was in flight
            return err(511, 1007, "Protocol authentication error")
        return ok({"jobs": []})

    fake.on("GET", "/slurm/v0.0.45/jobs", jobs)
    async with client(fake, token_file, api_version="v0.0.45") as c:
        assert await c.list_jobs() == []
        assert c.request_count == 2


async def test_missing_or_empty_token_file(tmp_path: Path) -> None:
    fake = FakeSlurmrestd()
    async with client(fake, tmp_path / "absent", api_version="v0.0.45") as c:
        with pytest.raises(SlurmAuthError, match="cannot read the Slurm JWT file"):
            await c.list_jobs()
    (tmp_path / "empty").write_text("\n")
    async with client(fake, tmp_path / "empty", api_version="v0.0.45") as c:
        with pytest.raises(SlurmAuthError, match="is empty"):
            await c.list_jobs()
    assert fake.requests == []


@pytest.mark.parametrize("go_key", ["SLURM_JWT", "auth-token"])
async def test_a_go_bridge_secret_key_beside_the_missing_file_is_used(tmp_path: Path, go_key: str) -> None:
    """The chart mounts every key of the JWT Secret: one made for the Go slurm-bridge works."""
    fake = FakeSlurmrestd()
    seen: list[str] = []

    def jobs(r: httpx.Request) -> httpx.Response:
        seen.append(r.headers["X-SLURM-USER-TOKEN"])
        return httpx.Response(200, json={"jobs": []})

    fake.on("GET", "/slurm/v0.0.45/jobs", jobs)
    (tmp_path / go_key).write_text("SLURM_JWT=go-token\n")
    async with client(fake, tmp_path / "jwt", api_version="v0.0.45") as c:
        await c.list_jobs()
    assert seen == ["go-token"]
    (tmp_path / go_key).unlink()
    async with client(fake, tmp_path / "jwt", api_version="v0.0.45") as c:
        with pytest.raises(SlurmAuthError, match="nor SLURM_JWT, auth-token beside it"):
            await c.list_jobs()


async def test_token_never_appears_in_exceptions_or_repr(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/jobs", lambda r: err(511, 1007, f"bad token {TOKEN}", f"token={TOKEN}"))
    fake.on("GET", "/slurm/v0.0.45/nodes", lambda r: httpx.Response(422, text=f"cannot parse {TOKEN}"))
    fake.on("GET", "/slurm/v0.0.45/ping", lambda r: err(422, 9001, f"echo {TOKEN}"))

    def boom(r: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout(f"timeout with {r.headers['X-SLURM-USER-TOKEN']}", request=r)

    fake.on("POST", "/slurm/v0.0.45/job/submit", boom)
    async with client(fake, token_file, api_version="v0.0.45", retries=0) as c:
        texts = [repr(c)]
        for call in (c.list_jobs, c.list_nodes, c.ping):
            with pytest.raises(SlurmError) as e:
                await call()
            texts += [str(e.value), repr(e.value), *e.value.error_texts]
        with pytest.raises(SlurmUnavailable) as e2:
            await c.submit_external_job(JobRequest(), name="n", admin_comment="c")
        texts += [str(e2.value), repr(e2.value)]
    assert all(TOKEN not in t for t in texts), [t for t in texts if TOKEN in t]
    assert any("<redacted>" in t for t in texts)


# --- decoding --------------------------------------------------------------------------------


def test_hostlist_expansion() -> None:
    assert expand_nodes("kwok-node-[1-2,4]") == ("kwok-node-1", "kwok-node-2", "kwok-node-4")
    assert expand_nodes("a[09-11],b") == ("a09", "a10", "a11", "b")
    assert expand_nodes("") == () and expand_nodes(None) == ()


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_list_jobs_decodes_every_field(token_file: Path, version: str) -> None:
    fake = FakeSlurmrestd()
    pending = job_json(
        8,
        job_state="PENDING",  # older servers send a string
        state_reason="Resources",
        nodes="",
        time_limit={"set": False, "infinite": True, "number": 0},
        start_time=1_700_000_100,
    )
    completing = job_json(9, job_state=["COMPLETING", "CANCELLED"], flags=None, admin_comment=None)
    fake.on("GET", f"/slurm/{version}/jobs", lambda r: ok({"jobs": [job_json(), pending, completing]}))
    async with client(fake, token_file, api_version=version) as c:
        running, pend, compl = await c.list_jobs()
        assert c.request_count == 1
        assert fake.requests[0].url.params["flags"] == "ALL"  # not DETAIL: no job_resources bitmaps
    assert running.job_id == 7 and running.name == "pj-a" and running.state == "RUNNING" and running.is_running
    assert running.nodes == ("kwok-node-1", "kwok-node-2", "kwok-node-4")
    assert running.reason == "" and running.admin_comment == "bridge=x" and running.partition == "debug"
    assert running.flags == ("EXTERNAL_JOB",)
    assert running.submit_time == datetime.fromtimestamp(1_700_000_000, tz=UTC)
    assert running.start_time == datetime.fromtimestamp(1_700_000_005, tz=UTC)
    assert running.end_time is None and running.time_limit_minutes == 30
    assert pend.states == ("PENDING",) and pend.reason == "Resources" and pend.nodes == ()
    assert pend.time_limit_minutes is None and pend.start_time == datetime.fromtimestamp(1_700_000_100, tz=UTC)
    assert compl.states == ("CANCELLED", "COMPLETING") and compl.is_finished
    assert compl.flags == () and compl.admin_comment == ""


async def test_get_job_returns_none_for_an_unknown_job(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/job/7", lambda r: ok({"jobs": [job_json()]}))
    fake.on("GET", "/slurm/v0.0.45/job/8", lambda r: err(404, 2017, "Invalid job id specified"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        job = await c.get_job(7)
        assert job is not None and job.job_id == 7
        assert await c.get_job(8) is None


@pytest.mark.parametrize("kind", ["job", "node"])
def test_a_decoded_record_keeps_nothing_of_the_wire_record(kind: str) -> None:
    """The poller's view keeps a JobInfo per bridge job (and the node controller a NodeInfo per
    node): keeping the wire record (about 150 fields, 14 KB of Python objects a job) was 140 MB
    with 10,000 jobs. Nothing decoded may refer to it."""
    codec = codec_for("v0.0.45")
    wire: dict[str, Any] = job_json() if kind == "job" else {"name": "n1", "state": ["IDLE"], "cpus": 4}
    wire["unused_field"] = {"big": "x" * 100_000}
    decoded = codec.decode_job(wire) if kind == "job" else codec.decode_node(wire)
    referrers = gc.get_referrers(wire) + gc.get_referrers(wire["unused_field"])
    assert not any(r is decoded.__dict__ for r in referrers)
    assert all(not isinstance(v, dict) or "unused_field" not in v for v in decoded.__dict__.values())


async def test_list_nodes_decodes_states_reason_and_resources(token_file: Path) -> None:
    node = {
        "name": "kwok-node-3",
        "state": ["DRAIN", "IDLE", "EXTERNAL"],
        "reason": "maintenance",
        "reason_set_by_user": "slurm",
        "cpus": 64,
        "real_memory": 262144,
        "gres": "gpu:4",
        "features": ["kwok", "gpu"],
        "partitions": "a,b",
    }
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.44/nodes", lambda r: ok({"nodes": [node, {"name": "n2", "state": "DOWN"}]}))
    async with client(fake, token_file, api_version="v0.0.44") as c:
        n, n2 = await c.list_nodes()
    assert n.name == "kwok-node-3" and n.state == "IDLE" and n.states == ("IDLE", "DRAIN", "EXTERNAL")
    assert n.reason == "maintenance" and n.reason_user == "slurm"
    assert (n.cpus, n.real_memory_mib, n.gres) == (64, 262144, "gpu:4")
    assert n.features == ("kwok", "gpu") and n.partitions == ("a", "b")
    assert n2.states == ("DOWN",) and n2.reason == ""


async def test_ping_raises_when_no_controller_responds(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("GET", "/slurm/v0.0.45/ping", lambda r: ok({"pings": [{"hostname": "ctl", "responding": False}]}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmUnavailable, match="ctl"):
            await c.ping()


# --- encoding --------------------------------------------------------------------------------

FULL = JobRequest(
    job_name="ignored",
    partition="debug",
    account="acct",
    qos="high",
    reservation="resv",
    wckey="wk",
    constraints="gpu&kwok",
    required_nodes=["kwok-node-1", "kwok-node-2"],
    excluded_nodes=["kwok-node-4"],
    licenses="lic:1",
    nodes=2,
    max_nodes=3,
    tasks_per_node=4,
    cpus_per_task=2,
    memory_per_node_mib=1024,
    gres="gpu:2",
    time_limit_minutes=45,
    exclusive=True,
    priority=100,
    user_id=1000,
    group_id=1001,
    mcs_label="team",
)


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_submit_maps_every_job_request_field(token_file: Path, version: str) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", f"/slurm/{version}/job/submit", lambda r: ok({"job_id": 42, "step_id": "batch"}))
    async with client(fake, token_file, api_version=version) as c:
        assert await c.submit_external_job(FULL, name="ns.pj-a", admin_comment="bridge=x") == 42
    body = json.loads(fake.requests[0].content)
    assert body == {
        "job": {
            "name": "ns.pj-a",
            "admin_comment": "bridge=x",
            "flags": ["EXTERNAL_JOB"],
            "current_working_directory": "/tmp",
            "partition": "debug",
            "account": "acct",
            "qos": "high",
            "reservation": "resv",
            "wckey": "wk",
            "constraints": "gpu&kwok",
            "required_nodes": ["kwok-node-1", "kwok-node-2"],
            "excluded_nodes": ["kwok-node-4"],
            "licenses": "lic:1",
            "minimum_nodes": 2,
            "maximum_nodes": 3,
            "tasks_per_node": 4,
            "cpus_per_task": 2,
            "memory_per_node": {"set": True, "infinite": False, "number": 1024},
            "tres_per_node": "gres/gpu:2",
            "time_limit": {"set": True, "infinite": False, "number": 45},
            "shared": ["none"],
            "priority": {"set": True, "infinite": False, "number": 100},
            "user_id": "1000",
            "group_id": "1001",
            "mcs_label": "team",
        }
    }


@pytest.mark.parametrize("exclusive", [False, None])
def test_minimal_request_leaves_slurm_defaults(exclusive: bool | None) -> None:
    body = codec_for("v0.0.45").submit_body(JobRequest(exclusive=exclusive), name="n", admin_comment="c")
    assert body == {
        "job": {
            "name": "n",
            "admin_comment": "c",
            "flags": ["EXTERNAL_JOB"],
            "current_working_directory": "/tmp",
            "minimum_nodes": 1,
            "maximum_nodes": 1,
            "tasks_per_node": 1,
            "cpus_per_task": 1,
        }
    }


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
def test_placement_is_sent_as_node_name_arrays(version: str) -> None:
    codec = codec_for(version)
    pinned = JobRequest(nodes=2, required_nodes=["n1", "n2"], constraints="gpu")
    body = codec.allocate_body(pinned, name="n", admin_comment="c")["job"]
    assert (body["required_nodes"], body["constraints"], body["immediate"]) == (["n1", "n2"], "gpu", True)
    assert "excluded_nodes" not in body
    avoiding = JobRequest(excluded_nodes=["bad-1"])
    body = codec.submit_body(avoiding, name="n", admin_comment="c")["job"]
    assert body["excluded_nodes"] == ["bad-1"] and "required_nodes" not in body
    # A pending job keeps its placement through an update.
    assert codec.update_body(pinned)["required_nodes"] == ["n1", "n2"]
    # Read back from a PlaceholderJob's spec.slurm (camelCase), the request is the same.
    assert JobRequest.model_validate(pinned.crd_dict()) == pinned
    assert pinned.crd_dict()["requiredNodes"] == ["n1", "n2"]


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
def test_a_topology_is_sent_as_one_segment_and_one_switch(version: str) -> None:
    """Slurm honours segment_size on a topology/block partition and required_switches on a
    topology/tree one, each ignored on the other kind (checked on Slurm 26.05), so both go."""
    codec = codec_for(version)
    placed = JobRequest(nodes=3, topology="block")
    body = codec.submit_body(placed, name="n", admin_comment="c")["job"]
    assert body["segment_size"] == {"set": True, "infinite": False, "number": 3}
    assert body["required_switches"] == {"set": True, "infinite": False, "number": 1}
    plain = codec.submit_body(JobRequest(nodes=3), name="n", admin_comment="c")["job"]
    assert not {"segment_size", "required_switches"} & set(plain)
    # Slurm keeps a waiting job's segment whatever an update says: never sent there.
    assert not {"segment_size", "required_switches"} & set(codec.update_body(placed))
    assert JobRequest.model_validate(placed.crd_dict()) == placed and placed.crd_dict()["topology"] == "block"


def test_gres_is_sent_in_tres_form() -> None:
    assert gres_to_tres_per_node("gpu:2") == "gres/gpu:2"
    assert gres_to_tres_per_node("gres/gpu:a100:1, shard:2") == "gres/gpu:a100:1,gres/shard:2"


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_update_job_sends_only_changeable_fields(token_file: Path, version: str) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", f"/slurm/{version}/job/5", lambda r: ok({"results": None}))
    async with client(fake, token_file, api_version=version) as c:
        await c.update_job(5, FULL)
    body = json.loads(fake.requests[0].content)
    assert not {"name", "admin_comment", "flags", "user_id", "group_id", "current_working_directory"} & set(body)
    assert body["time_limit"] == {"set": True, "infinite": False, "number": 45}
    assert body["partition"] == "debug" and body["tres_per_node"] == "gres/gpu:2"


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
def test_the_update_body_is_a_bare_job_description(version: str) -> None:
    """slurmrestd answers a body wrapped in {"job": ...} with 200, "Ignoring unknown field" warnings
    and no change (Slurm 26.05, every supported version): the update is the bare job_desc_msg."""
    codec = codec_for(version)
    body = codec.update_body(JobRequest(partition="p", time_limit_minutes=7, nodes=2, max_nodes=3), name="ns/pod")
    assert "job" not in body and "jobs" not in body
    assert body["time_limit"] == {"set": True, "infinite": False, "number": 7}
    assert (body["partition"], body["name"], body["minimum_nodes"], body["maximum_nodes"]) == ("p", "ns/pod", 2, 3)
    # Unset fields put back what they mean, where Slurm has a value for it (checked on Slurm 26.05):
    # no constraints, the association's default QOS.
    assert (body["constraints"], body["qos"]) == ("", "")
    assert "account" not in body and "priority" not in body and "time_limit" in body
    full = codec.update_body(FULL, name="n")
    assert (full["constraints"], full["qos"], full["account"], full["priority"]) == (
        "gpu&kwok", "high", "acct", {"set": True, "infinite": False, "number": FULL.priority},
    )  # fmt: skip
    assert codec.update_body(JobRequest(), unlimited_time=True)["time_limit"] == {"set": True, "infinite": True}
    assert "name" not in codec.update_body(JobRequest())


async def test_an_update_slurmrestd_ignored_part_of_is_an_error(token_file: Path) -> None:
    """A change dropped by slurmrestd ("Ignoring unknown field") must not pass for applied."""
    fake = FakeSlurmrestd()
    warning = {"description": 'Ignoring unknown field "set" of type integer', "source": "parse"}
    fake.on("POST", "/slurm/v0.0.45/job/5", lambda r: ok({"results": None, "warnings": [warning]}))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        with pytest.raises(SlurmError, match="ignored part of the job update"):
            await c.update_job(5, JobRequest(time_limit_minutes=5))


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_job_settings_and_partition_limits_are_read(token_file: Path, version: str) -> None:
    """The answers' layout of Slurm 26.05 (v0.0.43 to v0.0.45 alike; v0.0.46's description too)."""
    fake = FakeSlurmrestd()
    no = {"set": False, "infinite": False, "number": 0}
    job = {"job_id": 5, "name": "ns/p", "partition": "a,b", "account": "team-a", "qos": "high",
           "priority": {"set": True, "infinite": False, "number": 1000}, "features": "fast&big",
           "time_limit": {"set": True, "infinite": False, "number": 7}, "node_count": {"set": True, "number": 2},
           "max_nodes": {"set": True, "number": 3}}  # fmt: skip
    fake.on("GET", f"/slurm/{version}/job/5", lambda r: ok({"jobs": [job]}))
    fake.on("GET", f"/slurm/{version}/job/6", lambda r: err(404, 2017, "Invalid job id specified"))
    parts = [
        {"name": "main", "accounts": {"allowed": "", "deny": ""}, "qos": {"allowed": "", "deny": "", "assigned": ""},
         "maximums": {"time": {"set": False, "infinite": True, "number": 0}}, "defaults": {"time": no}},
        {"name": "pend", "accounts": {"allowed": "team-a,team-b", "deny": ""}, "qos": {"allowed": "", "deny": "low"},
         "maximums": {"time": {"set": True, "infinite": False, "number": 30}},
         "defaults": {"time": {"set": True, "infinite": False, "number": 10}}},
    ]  # fmt: skip
    fake.on("GET", f"/slurm/{version}/partitions/", lambda r: ok({"partitions": parts}))
    async with client(fake, token_file, api_version=version) as c:
        settings = await c.job_settings(5)
        assert await c.job_settings(6) is None
        limits = {p.name: p for p in await c.partition_limits()}
    assert settings == JobSettings(job_id=5, name="ns/p", partition="a,b", account="team-a", qos="high",
                                   priority=1000, features="fast&big", time_limit_minutes=7, node_count=2,
                                   max_nodes=3)  # fmt: skip
    assert limits["main"] == PartitionLimits(name="main")
    assert limits["pend"] == PartitionLimits(
        name="pend", max_time_minutes=30, default_time_minutes=10, allow_accounts=("team-a", "team-b"),
        deny_qos=("low",),
    )  # fmt: skip


@pytest.mark.parametrize("version", SPOKEN_VERSIONS)
async def test_a_partitions_root_only_and_default_flags_are_read_where_the_version_shows_them(
    token_file: Path, version: str
) -> None:
    """v0.0.45 on shows a partition's ``flags`` (checked on Slurm 26.05: ``RootOnly=YES`` is
    ``["ROOT_ONLY"]``); v0.0.43 and v0.0.44 do not: unknown (None), not False."""
    fake = FakeSlurmrestd()
    shown = version_key(version) >= version_key("v0.0.45")
    parts = [
        {"name": "root", **({"flags": ["ROOT_ONLY"]} if shown else {})},
        {"name": "main", **({"flags": ["DEFAULT"]} if shown else {})},
        {"name": "plain", **({"flags": []} if shown else {})},
    ]
    fake.on("GET", f"/slurm/{version}/partitions/", lambda r: ok({"partitions": parts}))
    async with client(fake, token_file, api_version=version) as c:
        limits = {p.name: p for p in await c.partition_limits()}
    if shown:
        assert (limits["root"].root_only, limits["root"].default) == (True, False)
        assert (limits["main"].root_only, limits["main"].default) == (False, True)
        assert (limits["plain"].root_only, limits["plain"].default) == (False, False)
    else:
        assert all(p.root_only is None and p.default is None for p in limits.values())


async def test_update_job_results(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on(
        "POST",
        "/slurm/v0.0.45/job/5",
        # Slurm applied the update but the job still cannot run: not a failure.
        lambda r: err(422, 2015, "Requested partition configuration not available now"),
        lambda r: err(422, 2073, "Job is no longer pending execution"),
        lambda r: ok({"results": [{"job_id": 5, "error_code": 2050, "error": "Job violates accounting"}]}),
    )
    fake.on("POST", "/slurm/v0.0.45/job/6", lambda r: err(404, 2017, "Invalid job id specified"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        await c.update_job(5, JobRequest(time_limit_minutes=5))
        with pytest.raises(SlurmError, match="no longer pending"):
            await c.update_job(5, JobRequest(time_limit_minutes=5))
        with pytest.raises(SlurmError, match="accounting"):
            await c.update_job(5, JobRequest(time_limit_minutes=5))
        with pytest.raises(SlurmNotFound):
            await c.update_job(6, JobRequest())


async def test_cancel_is_idempotent(token_file: Path) -> None:
    def kill_status(code: int, text: str) -> Handler:
        return lambda r: ok({"status": [{"error": {"string": text, "code": code, "message": text}}]})

    fake = FakeSlurmrestd()
    fake.on("DELETE", "/slurm/v0.0.45/job/1", lambda r: ok({"status": []}))
    fake.on("DELETE", "/slurm/v0.0.45/job/2", kill_status(2021, "Job/step already completing or completed"))
    fake.on("DELETE", "/slurm/v0.0.45/job/3", kill_status(2017, "Invalid job id specified"))
    fake.on("DELETE", "/slurm/v0.0.45/job/4", lambda r: err(404, 2017, "Invalid job id specified"))
    fake.on("DELETE", "/slurm/v0.0.45/job/5", lambda r: err(500, 2021, "Job/step already completing"))
    fake.on("DELETE", "/slurm/v0.0.45/job/6", kill_status(2002, "Access/permission denied"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        for job_id in (1, 2, 3, 4, 5):
            await c.cancel_job(job_id)
        with pytest.raises(SlurmError, match="permission denied"):
            await c.cancel_job(6)
        assert c.request_count == 6


async def test_several_jobs_are_cancelled_in_one_call_each_failure_named(token_file: Path) -> None:
    """``DELETE jobs/`` (kill-jobs): one call for a list; Slurm lists only the jobs it failed for, by
    ``step_id``; an unknown or finished job counts as cancelled, as for one job."""
    bodies: list[object] = []

    def answer(r: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(r.content))
        failed = [
            {"error": {"string": "Invalid job id specified", "code": 2017, "message": "x"}, "step_id": "3",
             "job_id": {"set": False, "number": 0}},
            {"error": {"string": "Job/step already completing or completed", "code": 2021, "message": "x"},
             "step_id": "4.batch"},
            {"error": {"string": "Access/permission denied", "code": 2002, "message": "x"}, "step_id": "5"},
        ]  # fmt: skip
        return ok({"status": failed})

    fake = FakeSlurmrestd()
    fake.on("DELETE", "/slurm/v0.0.45/jobs/", answer)
    async with client(fake, token_file, api_version="v0.0.45") as c:
        failed = await c.cancel_jobs([2, 3, 4, 5])
    assert bodies == [{"jobs": ["2", "3", "4", "5"]}]
    assert list(failed) == [5] and "permission denied" in str(failed[5])


async def test_update_node_body_and_state_check(token_file: Path) -> None:
    fake = FakeSlurmrestd()
    fake.on("POST", "/slurm/v0.0.45/node/kwok-node-1", lambda r: ok())
    fake.on("POST", "/slurm/v0.0.43/node/kwok-node-1", lambda r: ok())
    fake.on("POST", "/slurm/v0.0.45/node/nope", lambda r: err(422, 2018, "Invalid node name specified"))
    async with client(fake, token_file, api_version="v0.0.45") as c:
        await c.update_node("kwok-node-1", state="drain", reason="maintenance")
        await c.update_node("kwok-node-1", state="RESUME")
        await c.update_node("kwok-node-1", state="POWER_DOWN_ASAP")
        with pytest.raises(ValueError, match="IDLE"):
            await c.update_node("kwok-node-1", state="IDLE")
        with pytest.raises(ValueError):
            await c.update_node("kwok-node-1")
        with pytest.raises(SlurmNotFound, match="Invalid node name"):
            await c.update_node("nope", state="DRAIN", reason="x")
    async with client(fake, token_file, api_version="v0.0.43") as c:
        with pytest.raises(ValueError, match=r"v0\.0\.43"):
            await c.update_node("kwok-node-1", state="POWER_DOWN_ASAP")
        await c.update_node("kwok-node-1", reason="just a note")
    bodies = [json.loads(r.content) for r in fake.requests]
    assert bodies == [
        {"state": ["DRAIN"], "reason": "maintenance"},
        {"state": ["RESUME"]},
        {"state": ["POWER_DOWN_ASAP"]},
        {"state": ["DRAIN"], "reason": "x"},
        {"reason": "just a note"},
    ]


def test_from_config(token_file: Path) -> None:
    cfg = Config(
        slurmRestApi="http://slurmrestd:6820",
        slurmJwtFile=token_file,
        slurmUser="bridge",
        slurmRequestTimeoutSeconds=3.5,
    )
    c = SlurmClient.from_config(cfg)
    assert c.base_url == "http://slurmrestd:6820" and c.user == "bridge"
    assert c._timeouts["read"] == 3.5
    assert TOKEN not in repr(c)
    asyncio.run(c.aclose())
