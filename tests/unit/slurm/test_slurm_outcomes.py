"""What slurmrestd's answers mean (slurm_bridge/slurm/outcomes.py), shape by shape, without I/O.

One case per answer shape met so far: by the integration tests against the local Slurm 26.05
(tests/integration/test_slurm_rest.py, test_slurm_smoke.py, test_hetjob.py), by the client's
scripted tests (test_slurm_client.py, test_slurm_transport.py) and in the docs
(troubleshooting.md, development.md, workloads.md, nodes.md). Each is read (``read_reply``) and
classified (``classify_reply``) with the codec of every supported REST API version, and of none
(version discovery reads answers before the version is known).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from slurm_bridge.slurm.errors import (
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    ESLURM_JOB_FINISHED,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE,
    SlurmAuthError,
    SlurmError,
    SlurmNotFound,
    SlurmUnavailable,
)
from slurm_bridge.slurm.outcomes import (
    Answer,
    AuthRejected,
    Expect,
    Failed,
    Outcome,
    Reply,
    classify_failure,
    classify_reply,
    failure_metric,
    metric_outcome,
    read_reply,
)
from slurm_bridge.slurm.versions import SPOKEN_VERSIONS, Codec, codec_for

pytestmark = pytest.mark.unit

TOKEN = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.s1gnature-TOKEN-abc123"
WHAT = "POST /slurm/v0.0.45/job/submit"
BASE = "http://slurm.test:6820"
JWT_FILE = Path("/var/run/secrets/slurm-bridge/jwt")
CANCEL_OK = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED})
UPDATE_OK = frozenset({ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE})
SUBMIT = Expect(idempotent=False)
READ_OR_GONE = Expect(not_found_ok=True)
PROBE = Expect(not_found_ok=True, probe=True)


def scrub(text: str) -> str:
    return text.replace(TOKEN, "<redacted>")


def errors(*entries: tuple[int, str] | tuple[int, str, str], **rest: Any) -> dict[str, Any]:
    """An answer whose errors[] holds (error_number, error[, description]) entries."""
    listed = [{"error": e[1], "error_number": e[0], "description": e[2] if len(e) > 2 else "", "source": "x"}
              for e in entries]  # fmt: skip
    return {"errors": listed, "warnings": [], **rest}


def ok(**body: Any) -> dict[str, Any]:
    return {"errors": [], "warnings": [], **body}


class Shape(NamedTuple):
    status: int
    body: dict[str, Any] | bytes | None  # a dict is sent as JSON
    expect: Expect
    outcome: tuple[Any, ...]  # see summary()
    metric: str  # slurm_bridge_slurm_requests_total's outcome
    words: tuple[str, ...] = ()  # in the error the outcome raises (or the reply's text)


def summary(outcome: Outcome) -> tuple[Any, ...]:
    """("answer", status) | ("failed", class, status, numbers[, "maybe applied"]) |
    ("auth", status, numbers) | ("unavailable", status, numbers, "maybe applied" | "not delivered")."""
    if isinstance(outcome, Answer):
        return ("answer", outcome.reply.status)
    if isinstance(outcome, Failed):
        e = outcome.error
        applied = ("maybe applied",) if isinstance(e, SlurmUnavailable) and e.maybe_applied else ()
        return ("failed", type(e), e.status, sorted(e.error_numbers), *applied)
    numbers = sorted({x.error_number for x in outcome.errors if x.error_number})
    if isinstance(outcome, AuthRejected):
        return ("auth", outcome.status, numbers)
    return ("unavailable", outcome.status, numbers, "maybe applied" if outcome.maybe_applied else "not delivered")


def message(outcome: Outcome) -> str:
    """What the caller finally sees: the error raised, or the answer's text."""
    if isinstance(outcome, Answer):
        return outcome.reply.text
    if isinstance(outcome, Failed):
        return str(outcome.error)
    if isinstance(outcome, AuthRejected):
        return str(outcome.error(WHAT, JWT_FILE, "slurm"))
    return str(outcome.gave_up(WHAT, 4))


UNCHANGED_JOBS = ok(jobs=[], last_update={"set": True, "infinite": False, "number": 0},
                    warnings=[{"description": "No job changes since update_time[5]", "source": "x"}])  # fmt: skip
PENDING_WARNING = ok(job_id=12, warnings=[{"description": "Requested partition configuration not available now"}])
KILL_ALREADY_DONE = ok(status=[{"error": {"string": "Job/step already completing or completed", "code": 2021}}])
UPDATE_RESULT_FAILED = ok(results=[{"job_id": 5, "error_code": 2050, "error": "Job violates accounting"}])
ANSWER, NOT_FOUND = ("answer", 200), ("answer", 404)

SHAPES: dict[str, Shape] = {
    # --- results -------------------------------------------------------------------------------
    # Every successful answer (smoke test: errors == [] with HTTP 200).
    "200 empty errors and warnings": Shape(200, ok(jobs=[]), Expect(), ANSWER, "ok"),
    # A submit that made a pending job says why in warnings[]: still a success.
    "200 submit with warnings only": Shape(200, PENDING_WARNING, SUBMIT, ANSWER, "ok"),
    # GET jobs?update_time= with nothing changed (Slurm 26.05, v0.0.43-45): no jobs, last_update 0.
    "200 jobs unchanged since": Shape(200, UNCHANGED_JOBS, Expect(), ANSWER, "ok"),
    # GET nodes?update_time= with nothing changed: 304 and no body (docs/nodes.md).
    "304 nodes unchanged, no body": Shape(304, None, Expect(), ("answer", 304), "ok"),
    # job/allocate's success (v0.0.43-45): job_submit_user_msg empty.
    "200 allocate with user message": Shape(200, ok(job_id=31, job_submit_user_msg=""), SUBMIT, ANSWER, "ok"),
    # slurmrestd writes null for empty lists.
    "200 errors null": Shape(200, {"errors": None, "warnings": None, "jobs": []}, Expect(), ANSWER, "ok"),
    "200 no errors key": Shape(200, {"jobs": []}, Expect(), ANSWER, "ok"),
    "200 empty body": Shape(200, b"", Expect(), ANSWER, "ok"),
    # Not JSON but 200: an answer whose text the call's decoding then refuses.
    # Not slurmrestd's answer (a proxy's page): an outage naming the text, never an empty success.
    "200 not JSON": Shape(200, b"<html>slurmrestd</html>", Expect(), ("unavailable", 200, [], "maybe applied"),
                          "server_error", ("<html>slurmrestd</html>", "not slurmrestd's JSON")),
    "200 not JSON to a submit": Shape(200, b"<html>proxy</html>", SUBMIT,
                                      ("failed", SlurmUnavailable, 200, [], "maybe applied"), "server_error",
                                      ("<html>proxy</html>",)),
    # A cancel's and an update's per-job failures are in the body, not in errors[]: the call reads them.
    "200 cancel status already done": Shape(200, KILL_ALREADY_DONE, Expect(), ANSWER, "ok"),
    "200 update results with error": Shape(200, UPDATE_RESULT_FAILED, Expect(), ANSWER, "ok"),
    # --- errors the call accepts ----------------------------------------------------------------
    # update_job: Slurm applied the change but the job still cannot run (integration test).
    "422 update partition config unavailable": Shape(
        422, errors((2015, "Requested partition configuration not available now")), Expect(ok_errors=UPDATE_OK),
        ("answer", 422), "slurm_error"),
    "422 update node config unavailable": Shape(
        422, errors((2014, "Requested node configuration is not available")), Expect(ok_errors=UPDATE_OK),
        ("answer", 422), "slurm_error"),
    # cancel_job: a finished or unknown job counts as cancelled.
    "500 cancel already completing": Shape(
        500, errors((2021, "Job/step already completing")), Expect(not_found_ok=True, ok_errors=CANCEL_OK),
        ("answer", 500), "server_error"),
    "404 cancel invalid job id": Shape(
        404, errors((2017, "Invalid job id specified")), Expect(not_found_ok=True, ok_errors=CANCEL_OK),
        NOT_FOUND, "not_found"),
    "200 cancel job finished": Shape(
        200, errors((2084, "Job has already finished")), Expect(not_found_ok=True, ok_errors=CANCEL_OK),
        ANSWER, "slurm_error"),
    # --- unknown job or node --------------------------------------------------------------------
    # get_job of a purged job (integration test: job 99999999).
    "404 invalid job id, allowed": Shape(404, errors((2017, "Invalid job id specified")), READ_OR_GONE,
                                         NOT_FOUND, "not_found"),
    "404 invalid job id": Shape(404, errors((2017, "Invalid job id specified")), Expect(),
                                ("failed", SlurmNotFound, 404, [2017]), "not_found", ("Invalid job id specified",)),
    # update_node of an unknown node (integration test): 422 with error 2018.
    "422 invalid node name": Shape(422, errors((2018, "Invalid node name specified")), Expect(),
                                   ("failed", SlurmNotFound, 422, [2018]), "not_found", ("Invalid node name",)),
    "422 invalid node name, allowed": Shape(422, errors((2018, "Invalid node name specified")), READ_OR_GONE,
                                            NOT_FOUND, "not_found"),
    # /slurmdb/ without slurmrestd's slurmdbd plugin, or an API version the server lacks.
    "404 no such endpoint, allowed": Shape(404, b"Unable to find requested URL endpoint.", READ_OR_GONE,
                                           NOT_FOUND, "not_found", ("Unable to find requested URL endpoint.",)),
    "404 no such endpoint": Shape(404, b"Unable to find requested URL endpoint.", Expect(),
                                  ("failed", SlurmNotFound, 404, []), "not_found",
                                  ("Slurm refused the request (Unable to find requested URL endpoint.) [HTTP 404]",)),
    # --- refusals (never sent again) ------------------------------------------------------------
    "422 invalid partition": Shape(
        422, errors((2000, "Invalid partition name specified", "Batch job submission failed")), SUBMIT,
        ("failed", SlurmError, 422, [2000]), "slurm_error",
        (f"{WHAT}: Slurm refused the request: Batch job submission failed: Invalid partition name specified "
         "(Slurm error 2000) [HTTP 422]",)),
    # More CPUs than any node has (integration test; troubleshooting.md).
    "422 node configuration unavailable": Shape(
        422, errors((2014, "Requested node configuration is not available")), SUBMIT,
        ("failed", SlurmError, 422, [2014]), "slurm_error", ("Requested node configuration is not available",)),
    # job/allocate that cannot start now (integration and transport tests): the bridge queues instead.
    "422 allocate nodes busy": Shape(422, errors((2016, "Requested nodes are busy")), SUBMIT,
                                     ("failed", SlurmError, 422, [2016]), "slurm_error", ("busy",)),
    # A heterogeneous immediate allocation, refused even on an idle cluster (workloads.md).
    "422 allocate hetjob immediate": Shape(422, errors((2078, "Job can not start immediately")), SUBMIT,
                                           ("failed", SlurmError, 422, [2078]), "slurm_error", ("immediately",)),
    # update_job of a job that is no longer pending (integration test: "finished").
    "422 update no longer pending": Shape(422, errors((2073, "Job is no longer pending execution")), Expect(),
                                          ("failed", SlurmError, 422, [2073]), "slurm_error", ("no longer pending",)),
    # Accounting refusals (development.md): the association error's words reach the caller.
    "422 invalid account": Shape(
        422, errors((2045, "Invalid account or account/partition combination specified")), SUBMIT,
        ("failed", SlurmError, 422, [2045]), "slurm_error", ("Invalid account",)),
    "422 invalid qos": Shape(422, errors((2066, "Invalid qos specification")), SUBMIT,
                             ("failed", SlurmError, 422, [2066]), "slurm_error", ("Invalid qos",)),
    "422 invalid user id": Shape(422, errors((2010, "Invalid user id")), SUBMIT,
                                 ("failed", SlurmError, 422, [2010]), "slurm_error", ("Invalid user id",)),
    "400 failed to parse": Shape(400, errors((9001, "Failed to parse")), Expect(),
                                 ("failed", SlurmError, 400, [9001]), "slurm_error", ("Failed to parse",)),
    # A 500 that carries a refusal is not an outage.
    "500 with a refusal": Shape(500, errors((2000, "Invalid partition name specified")), Expect(),
                                ("failed", SlurmError, 500, [2000]), "server_error", ("Invalid partition",)),
    # HTTP 200 and still a failure: error number 0 with Slurm's description.
    "200 error without a number": Shape(
        200, errors((0, "No error", "Failure to query nodes")), Expect(),
        ("failed", SlurmError, 200, []), "slurm_error", ("Failure to query nodes: No error [HTTP 200]",)),
    # errors[] that is not a list of objects is still reported, as text.
    "200 malformed errors": Shape(200, {"errors": ["boom"]}, Expect(), ("failed", SlurmError, 200, []),
                                  "slurm_error", ("['boom']",)),
    "422 not JSON": Shape(422, b"cannot parse the request", Expect(), ("failed", SlurmError, 422, []),
                          "slurm_error", ("Slurm refused the request (cannot parse the request) [HTTP 422]",)),
    # The server echoed the token: it never reaches a message.
    "422 echoes the token": Shape(422, errors((9001, f"echo {TOKEN}", f"token={TOKEN}")), Expect(),
                                  ("failed", SlurmError, 422, [9001]), "slurm_error", ("<redacted>",)),
    # --- credentials ----------------------------------------------------------------------------
    # A token slurmctld cannot verify (smoke and integration tests): 511 with error 1007.
    "511 protocol authentication error": Shape(
        511, errors((1007, "Protocol authentication error")), Expect(), ("auth", 511, [1007]), "auth_error",
        (f"{WHAT}: slurmrestd rejected the request's credentials; check the Slurm JWT file {JWT_FILE} (a valid, "
         "unexpired token for user slurm, allowed to do this): Protocol authentication error (Slurm error 1007) "
         "[HTTP 511]",)),
    # No token (troubleshooting.md): 401, text only.
    "401 text authentication failure": Shape(
        401, b"Authentication failure", Expect(), ("auth", 401, []), "auth_error",
        ("allowed to do this) (Authentication failure) [HTTP 401]",)),
    "403 no body": Shape(403, None, Expect(), ("auth", 403, []), "auth_error", ("[HTTP 403]",)),
    "200 access denied": Shape(200, errors((2002, "Access/permission denied", "list")), Expect(),
                               ("auth", 200, [2002]), "auth_error", ("Access/permission denied",)),
    "511 token echoed": Shape(511, errors((1007, f"bad token {TOKEN}")), Expect(), ("auth", 511, [1007]),
                              "auth_error", ("bad token <redacted>",)),
    # Version discovery: a probe does not hide a bad token.
    "401 to a probe": Shape(401, b"Authentication failure", PROBE, ("auth", 401, []), "auth_error"),
    # --- outages: sent again ---------------------------------------------------------------------
    "500 not JSON": Shape(500, b"oops", Expect(), ("unavailable", 500, [], "maybe applied"), "server_error",
                          (f"{WHAT}: Slurm is unavailable (HTTP 500) (oops); gave up after 4 attempts [HTTP 500]",)),
    "503 no body": Shape(503, None, Expect(), ("unavailable", 503, [], "maybe applied"), "server_error",
                         ("Slurm is unavailable (HTTP 503); gave up after 4 attempts",)),
    # An ingress in front of slurmrestd.
    "502 proxy page": Shape(502, b"<html>Bad Gateway</html>", Expect(), ("unavailable", 502, [], "maybe applied"),
                            "server_error", ("(<html>Bad Gateway</html>)",)),
    # slurmrestd could not reach slurmctld: the request never arrived, even a submit is sent again.
    "502 controller connect failure": Shape(
        502, errors((1800, "Unable to contact slurm controller (connect failure)")), SUBMIT,
        ("unavailable", 502, [1800], "not delivered"), "server_error", ("Unable to contact slurm controller",)),
    "502 communication connection failure": Shape(
        502, errors((1001, "Communication connection failure")), SUBMIT,
        ("unavailable", 502, [1001], "not delivered"), "server_error", ("Communication connection failure",)),
    "200 controller in standby": Shape(200, errors((2027, "Controller is in standby mode")), SUBMIT,
                                       ("unavailable", 200, [2027], "not delivered"), "slurm_error"),
    # slurmctld got the request and its answer was lost: maybe applied.
    "200 controller receive failure": Shape(200, errors((1802, "Communication receive failure")), Expect(),
                                            ("unavailable", 200, [1802], "maybe applied"), "slurm_error"),
    "200 resource temporarily unavailable": Shape(200, errors((11, "Resource temporarily unavailable")), Expect(),
                                                  ("unavailable", 200, [11], "maybe applied"), "slurm_error"),
    "500 slurmdbd connection": Shape(500, errors((7000, "Unable to connect to database")), Expect(),
                                     ("unavailable", 500, [7000], "maybe applied"), "server_error"),
    # Not reached, and a refusal beside it: maybe applied after all.
    "502 unreachable and a refusal": Shape(
        502, errors((1800, "Unable to contact slurm controller"), (2000, "Invalid partition name specified")),
        Expect(), ("unavailable", 502, [1800, 2000], "maybe applied"), "server_error"),
    # --- outages of a call that must not be sent twice (a submit) --------------------------------
    "503 to a submit": Shape(503, None, SUBMIT, ("failed", SlurmUnavailable, 503, [], "maybe applied"),
                             "server_error", ("the request may have reached Slurm, so it is not sent again",)),
    "502 controller receive failure to a submit": Shape(
        502, errors((1802, "Communication receive failure")), SUBMIT,
        ("failed", SlurmUnavailable, 502, [1802], "maybe applied"), "server_error", ("not sent again",)),
    "500 not JSON to a submit": Shape(500, b"internal", SUBMIT,
                                      ("failed", SlurmUnavailable, 500, [], "maybe applied"), "server_error",
                                      ("Slurm is unavailable (HTTP 500) (internal)",)),
    # --- version discovery's probes ---------------------------------------------------------------
    "404 to a probe": Shape(404, b"Unable to find requested URL endpoint.", PROBE, NOT_FOUND, "not_found"),
    "500 to a probe": Shape(500, b"oops", PROBE, ("answer", 500), "server_error"),
    "200 ping with meta to a probe": Shape(
        200, ok(meta={"slurm": {"release": "24.11.5"}}, pings=[]), PROBE, ANSWER, "ok"),
}  # fmt: skip


def response(status: int, body: dict[str, Any] | bytes | None) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.Response(status, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return httpx.Response(status, content=body or b"", headers={"Content-Type": "text/plain"})


CODECS: list[Codec | None] = [None, *(codec_for(v) for v in SPOKEN_VERSIONS)]


@pytest.mark.parametrize("codec", CODECS, ids=["unknown-version", *SPOKEN_VERSIONS])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_every_answer_shape_has_its_outcome(shape: Shape, codec: Codec | None) -> None:
    reply = read_reply(response(shape.status, shape.body), codec)
    outcome = classify_reply(WHAT, reply, shape.expect, scrub)
    assert summary(outcome) == shape.outcome
    assert metric_outcome(reply) == shape.metric
    text = message(outcome)
    assert all(w in text for w in shape.words), text
    assert TOKEN not in text and all(TOKEN not in str(e) for e in getattr(outcome, "errors", ()))


def test_the_cases_cover_every_outcome_and_metric() -> None:
    """The table is worth its name only if it reaches every branch of the classifier."""
    kinds = {s.outcome[0] for s in SHAPES.values()}
    failed = {s.outcome[1] for s in SHAPES.values() if s.outcome[0] == "failed"}
    assert kinds == {"answer", "failed", "auth", "unavailable"}
    assert failed == {SlurmError, SlurmNotFound, SlurmUnavailable}
    assert {s.metric for s in SHAPES.values()} == {"ok", "not_found", "auth_error", "server_error", "slurm_error"}


def test_an_accepted_not_found_keeps_the_answer() -> None:
    """get_job/delete_node read ``status == 404``; the errors and text stay for the caller."""
    reply = read_reply(response(422, errors((2018, "Invalid node name specified"))), None)
    outcome = classify_reply(WHAT, reply, READ_OR_GONE, scrub)
    assert isinstance(outcome, Answer)
    assert outcome.reply.status == 404 and outcome.reply.errors == reply.errors and outcome.reply.body == reply.body


def test_an_association_refusal_is_recognised_by_number_and_by_words() -> None:
    for body in (errors((2045, "Invalid account or account/partition combination specified")),
                 errors((2010, "Invalid user id"))):  # fmt: skip
        outcome = classify_reply(WHAT, read_reply(response(422, body), None), SUBMIT, scrub)
        assert isinstance(outcome, Failed) and outcome.error.is_association_refusal, outcome


def test_an_outage_gives_up_with_its_attempts_and_keeps_maybe_applied() -> None:
    reply = read_reply(response(502, errors((1001, "Communication connection failure"))), None)
    outcome = classify_reply(WHAT, reply, Expect(), scrub)
    assert not isinstance(outcome, Answer | Failed | AuthRejected)
    error = outcome.gave_up(WHAT, 3)
    assert type(error) is SlurmUnavailable and not error.maybe_applied
    assert error.status == 502 and error.error_numbers == {1001} and "3 attempts" in str(error)


# --- the answer as read ------------------------------------------------------------------------


def test_decode_takes_only_a_clean_success() -> None:
    """``decode`` turns a success into ``value`` (and drops the JSON); an answer with errors, a
    refusal or a body that is not JSON is left for the classifier."""

    def decode(status: int, body: Any) -> tuple[int, Any]:
        return status, body

    clean = read_reply(response(200, ok(jobs=[1])), None, decode)
    assert clean.value == (200, ok(jobs=[1])) and clean.body is None
    unchanged = read_reply(response(304, None), None, decode)
    assert unchanged.value == (304, None)
    for status, body in ((200, errors((1802, "Communication receive failure"))), (422, ok()), (200, b"nope")):
        reply = read_reply(response(status, body), None, decode)
        assert reply.value is None and (reply.body is not None or reply.text), (status, body)


def test_a_listing_decodes_the_list_item_by_item() -> None:
    reply = read_reply(response(200, ok(jobs=[1, 2, 3], last_update=7)), None, None, ("jobs", lambda x: x * 10))
    assert reply.body["jobs"] == [10, 20, 30] and reply.body["last_update"] == 7
    refused = read_reply(response(422, errors((2000, "Invalid"), jobs=[1])), None, None, ("jobs", lambda x: x * 10))
    assert refused.body["jobs"] == [1], "a refusal's body is read as it is"


def test_a_decode_that_cannot_read_the_answer_raises_slurms_error() -> None:
    def decode(status: int, body: Any) -> None:
        raise SlurmError("unexpected jobs/state answer from slurmrestd: no 'jobs' list")

    with pytest.raises(SlurmError, match="jobs/state"):
        read_reply(response(200, ok()), None, decode)


def test_a_long_text_body_is_shortened() -> None:
    reply = read_reply(response(500, b"x" * 2000), None)
    assert reply.text == "x" * 500 and reply.body is None and reply.errors == ()


def test_error_numbers_leave_out_zero() -> None:
    reply = Reply(200, None, read_reply(response(200, errors((0, "No error"), (1802, "r"))), None).errors, "")
    assert reply.error_numbers == {1802}


# --- no answer ---------------------------------------------------------------------------------

REQUEST = httpx.Request("POST", f"{BASE}/slurm/v0.0.45/job/submit")


@pytest.mark.parametrize(
    ("error", "metric", "read", "submit"),
    [
        (httpx.ConnectError("connection refused"), "connect_error", "not delivered", "not delivered"),
        (httpx.ConnectTimeout("timed out"), "connect_error", "not delivered", "not delivered"),
        (httpx.PoolTimeout("no connection free"), "connect_error", "not delivered", "not delivered"),
        (httpx.ReadTimeout("timed out"), "no_answer", "maybe applied", "not sent again"),
        (httpx.WriteTimeout("timed out"), "no_answer", "maybe applied", "not sent again"),
        (httpx.ReadError("reset"), "no_answer", "maybe applied", "not sent again"),
        (httpx.WriteError("broken pipe"), "no_answer", "maybe applied", "not sent again"),
        (httpx.RemoteProtocolError("closed without answering"), "no_answer", "maybe applied", "not sent again"),
        (httpx.UnsupportedProtocol("ftp"), "error", "error", "error"),
        (httpx.TooManyRedirects("loop"), "error", "error", "error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_a_request_without_an_answer(error: httpx.HTTPError, metric: str, read: str, submit: str) -> None:
    """Not sent (connect): always sent again. Sent but unanswered: sent again unless it is a
    submit. Anything else httpx raises: a SlurmError at once."""
    assert failure_metric(error) == metric
    for expect, want in ((Expect(), read), (SUBMIT, submit)):
        outcome = classify_failure(WHAT, error, expect, BASE, scrub)
        if want == "error":
            assert isinstance(outcome, Failed) and type(outcome.error) is SlurmError
            assert str(outcome.error).startswith(f"{WHAT}: {type(error).__name__}")
        elif want == "not sent again":
            assert isinstance(outcome, Failed) and isinstance(outcome.error, SlurmUnavailable)
            assert outcome.error.maybe_applied and outcome.error.status is None
            assert "no complete answer from slurmrestd at http://slurm.test:6820" in str(outcome.error)
            assert "so it is not sent again" in str(outcome.error)
        else:
            assert not isinstance(outcome, Answer | Failed | AuthRejected), outcome
            assert outcome.maybe_applied is (want == "maybe applied")
            assert outcome.status is None and outcome.errors == ()
            words = "cannot reach" if want == "not delivered" else "no complete answer from"
            assert f"{words} slurmrestd at {BASE}: {type(error).__name__}" in outcome.problem


def test_a_failure_that_echoes_the_token_is_scrubbed() -> None:
    error = httpx.ReadTimeout(f"timeout with {TOKEN}", request=REQUEST)
    outcome = classify_failure(WHAT, error, SUBMIT, BASE, scrub)
    assert isinstance(outcome, Failed) and TOKEN not in str(outcome.error) and "<redacted>" in str(outcome.error)


def test_an_auth_error_names_the_file_and_the_user() -> None:
    reply = read_reply(response(401, b"Authentication failure"), None)
    outcome = classify_reply(WHAT, reply, Expect(), scrub)
    assert isinstance(outcome, AuthRejected)
    anonymous = outcome.error(WHAT, JWT_FILE, None)
    assert type(anonymous) is SlurmAuthError and anonymous.status == 401
    assert f"check the Slurm JWT file {JWT_FILE} (a valid, unexpired token, allowed to do this)" in str(anonymous)
    assert "for user bridge," in str(outcome.error(WHAT, JWT_FILE, "bridge"))
