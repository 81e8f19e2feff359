"""slurmrestd's answers, read and classified without I/O.

The session (:mod:`.session`) sends a request and acts on what comes back; this module decides
what came back. An answer is read into a :class:`Reply` (its JSON and Slurm's ``errors[]``), and
:func:`classify_reply` turns it, with what the call accepts (:class:`Expect`), into one outcome:

- :class:`Answer`: a result (a success, an accepted error, a 404 the caller asked for, a probe);
- :class:`Failed`: a typed error to raise at once: Slurm refused, or Slurm was unavailable and
  the request (a job submit) may have reached it, so it must not be sent twice;
- :class:`AuthRejected`: the credentials were refused (tried once more only if the JWT rotated);
- :class:`Unavailable`: Slurm could not be reached or was busy: sent again after a backoff.

A request that got no answer at all becomes an outcome too (:func:`classify_failure`). slurmrestd
can answer HTTP 200 and still report a failure in ``errors[]``, so the status alone never decides.
Every shape of answer met so far is a case of tests/unit/slurm/test_slurm_outcomes.py.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pydantic_core

from .errors import (
    AUTH_ERRORS,
    NOT_DELIVERED_ERRORS,
    NOT_FOUND_ERRORS,
    TRANSIENT_ERRORS,
    SlurmAuthError,
    SlurmError,
    SlurmErrorDetail,
    SlurmUnavailable,
    refusal,
)
from .jsonlist import ListStream, parse_with_list
from .versions import SUPPORTED_VERSIONS, Codec, codec_for

# The request never left this process or never reached slurmrestd: always safe to send again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# The request may have reached slurmrestd (and Slurm) before the failure.
_MAYBE_SENT = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
GATEWAY_STATUSES = frozenset({502, 503, 504})
AUTH_STATUSES = frozenset({401, 403, 511})

# Removes the JWT from a text (the session's, which knows the token).
Scrub = Callable[[str], str]
# (key, keep): a successful answer's ``key`` list is decoded item by item through ``keep``
# (slurm_bridge/slurm/jsonlist.py).
Listing = tuple[str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # parsed JSON (normally a dict), or None (also once ``decode`` took it)
    errors: tuple[SlurmErrorDetail, ...]
    text: str  # the body when it was not JSON, shortened
    value: Any = None  # what ``decode`` made of a successful answer

    @property
    def error_numbers(self) -> set[int]:
        """Slurm's error numbers in the answer (0, "no number", left out)."""
        return {e.error_number for e in self.errors if e.error_number}


# The pause of the garbage collector while an answer is decoded (see gc_paused); answers may be
# decoded in several threads at once.
_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection while an answer is parsed and decoded.

    A Slurm answer decodes into tens of thousands of short-lived objects (jobs/state for 10,000
    jobs: about 30,000; a full job list: millions), freed by reference counting once decoded. A
    collection in the middle moved them to the oldest generation, and Python then ran a full
    collection over all of the operator's objects every few polls: 10 a minute, 0.4 s each, at
    1,000 nodes and 10,000 PlaceholderJobs (bench/log, run 8).
    """
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


class StreamedList(ListStream):
    """A listing's answer decoded as the transport reads it (``feed``); an answer that is not JSON
    stops the decoding and is reported by ``result`` (as an unreadable answer, not a lost one)."""

    def __init__(self, key: str, keep: Callable[[Any], Any]) -> None:
        super().__init__(key, keep)
        self.error: ValueError | None = None

    def feed(self, data: bytes) -> None:
        if self.error is None:
            try:
                super().feed(data)
            except ValueError as e:
                self.error = e

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.close()


def read_reply(
    resp: httpx.Response,
    codec: Codec | None,
    decode: Callable[[int, Any], Any] | None = None,
    listing: Listing | None = None,
    streamed: StreamedList | None = None,
) -> Reply:
    """The answer's JSON and Slurm's errors; with ``decode`` a successful answer is decoded at once
    (``value``) and its JSON dropped, all with the garbage collector paused. ``codec`` reads the
    errors (the newest version's when the version is not known yet). ``streamed``: the answer's
    body went to it as it was read (``listing``'s decoding, done)."""
    body: Any = None
    text = ""
    with gc_paused():
        if streamed is not None:
            try:
                body = streamed.result()
            except ValueError as e:
                text = f"an answer that is not JSON ({e})"
        elif resp.content:
            try:
                if listing is not None and resp.status_code < 400:
                    body = parse_with_list(resp.content, *listing)
                else:
                    # pydantic's Rust parser: job states run to megabytes and are read every period.
                    body = pydantic_core.from_json(resp.content)
            except ValueError:
                text = resp.text.strip()[:500]
        errors: tuple[SlurmErrorDetail, ...] = ()
        if isinstance(body, dict) and isinstance(body.get("errors"), list):
            try:
                env = (codec or codec_for(SUPPORTED_VERSIONS[0])).envelope(body)
                errors = tuple(e.detail() for e in env.errors)
            except SlurmError:
                errors = (SlurmErrorDetail(error=str(body.get("errors"))[:500]),)
        if decode is not None and resp.status_code < 400 and not errors and not text:
            return Reply(resp.status_code, None, errors, text, decode(resp.status_code, body))
    return Reply(resp.status_code, body, errors, text)


def metric_outcome(reply: Reply) -> str:
    """The metric's outcome of one answer: ok, not_found, auth_error, server_error or slurm_error
    (a 4xx, or Slurm's errors[] in any answer)."""
    numbers = reply.error_numbers
    if reply.status in AUTH_STATUSES or numbers & AUTH_ERRORS:
        return "auth_error"
    if reply.status == 404 or numbers & NOT_FOUND_ERRORS:
        return "not_found"
    if reply.status >= 500:
        return "server_error"
    if reply.status >= 400 or reply.errors:
        return "slurm_error"
    return "server_error" if _not_json(reply) else "ok"


# --- outcomes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What a call accepts besides a plain success (see ``SlurmSession._request``)."""

    idempotent: bool = True  # may be sent again when it may have reached Slurm
    not_found_ok: bool = False  # an unknown job or node is an answer (status 404), not an error
    ok_errors: frozenset[int] = frozenset()  # an answer with only these errors is a success
    probe: bool = False  # every answer but an auth failure is an answer (version discovery)


@dataclass(frozen=True)
class Answer:
    """The call's result."""

    reply: Reply


@dataclass(frozen=True)
class Failed:
    """The call failed for good: raise ``error``."""

    error: SlurmError


@dataclass(frozen=True)
class AuthRejected:
    """slurmrestd or slurmctld refused the JWT (or its user)."""

    status: int
    errors: tuple[SlurmErrorDetail, ...]  # scrubbed
    detail: str  # " (<the body>)" when it had no errors[], scrubbed; else ""

    def error(self, what: str, token_path: Path, user: str | None) -> SlurmAuthError:
        return SlurmAuthError(
            f"{what}: slurmrestd rejected the request's credentials; check the Slurm JWT file "
            f"{token_path} (a valid, unexpired token{f' for user {user}' if user else ''}, allowed to do this)"
            + self.detail,
            status=self.status,
            errors=self.errors,
        )


@dataclass(frozen=True)
class Unavailable:
    """Slurm could not be reached, did not answer completely, or was busy: worth another try.

    ``maybe_applied``: the request may have reached Slurm (a call that is not idempotent gets
    :meth:`not_resent` as a :class:`Failed` instead). ``status`` and ``errors`` are None and ()
    when no answer came.
    """

    problem: str
    maybe_applied: bool
    status: int | None = None
    errors: tuple[SlurmErrorDetail, ...] = ()  # scrubbed

    def not_resent(self, what: str) -> SlurmUnavailable:
        return SlurmUnavailable(
            f"{what}: {self.problem}; the request may have reached Slurm, so it is not sent again",
            status=self.status,
            errors=self.errors,
            maybe_applied=True,
        )

    def gave_up(self, what: str, attempts: int) -> SlurmUnavailable:
        return SlurmUnavailable(
            f"{what}: {self.problem}; gave up after {attempts} attempts",
            status=self.status,
            errors=self.errors,
            maybe_applied=self.maybe_applied,
        )


Outcome = Answer | Failed | AuthRejected | Unavailable


def classify_reply(what: str, reply: Reply, expect: Expect, scrub: Scrub) -> Outcome:
    """The outcome of the answer ``reply`` to the call ``what`` ("GET /slurm/.../jobs").

    In this order: errors all in ``ok_errors`` are a success; 401/403/511 or an auth error number
    is an auth failure; a probe takes anything else; Slurm's busy/unreachable numbers, a gateway
    status (502/503/504) or a 5xx without errors[] is an outage (final for a call that must not
    be sent twice, unless the request certainly never reached slurmctld); a 404 or an unknown
    job/node is an answer when the call allows it; any other 4xx/5xx or errors[] is a refusal.
    """
    numbers = reply.error_numbers
    if reply.errors and all(e.error_number in expect.ok_errors for e in reply.errors):
        return Answer(reply)
    errors = tuple(
        SlurmErrorDetail(scrub(e.error), e.error_number, scrub(e.description), e.source) for e in reply.errors
    )
    detail = f" ({scrub(reply.text)})" if reply.text and not reply.errors else ""
    if reply.status in AUTH_STATUSES or numbers & AUTH_ERRORS:
        return AuthRejected(reply.status, errors, detail)
    if expect.probe:
        return Answer(reply)
    if (numbers & TRANSIENT_ERRORS) or (reply.status >= 500 and (reply.status in GATEWAY_STATUSES or not reply.errors)):
        # slurmrestd could not reach slurmctld at all: the request never arrived.
        not_delivered = bool(numbers) and numbers <= NOT_DELIVERED_ERRORS
        problem = f"Slurm is unavailable (HTTP {reply.status})" + detail
        return _unless_resent(what, Unavailable(problem, not not_delivered, reply.status, errors), expect)
    if expect.not_found_ok and (reply.status == 404 or numbers & NOT_FOUND_ERRORS):
        return Answer(Reply(404, reply.body, reply.errors, reply.text))
    if reply.status >= 400 or reply.errors:
        return Failed(refusal(f"{what}: Slurm refused the request" + detail, reply.status, errors))
    if _not_json(reply):
        # Something other than slurmrestd answered (a proxy's page, a wrong URL): nothing in it can
        # be read as Slurm's answer, and a submit may still have reached Slurm behind it.
        problem = f"the answer (HTTP {reply.status}) is not slurmrestd's JSON{detail}; check slurmrestUrl"
        return _unless_resent(what, Unavailable(problem, True, reply.status), expect)
    return Answer(reply)


def _not_json(reply: Reply) -> bool:
    """A successful status with a body that is not JSON (``text`` holds it then)."""
    return bool(reply.text) and reply.body is None and reply.value is None


def classify_failure(what: str, error: httpx.HTTPError, expect: Expect, base_url: str, scrub: Scrub) -> Outcome:
    """The outcome of a request that got no (complete) answer."""
    if isinstance(error, _NOT_SENT):
        problem = f"cannot reach slurmrestd at {base_url}: {scrub(_describe(error))}"
        return Unavailable(problem, maybe_applied=False)
    if isinstance(error, _MAYBE_SENT):
        problem = f"no complete answer from slurmrestd at {base_url}: {scrub(_describe(error))}"
        return _unless_resent(what, Unavailable(problem, maybe_applied=True), expect)
    return Failed(SlurmError(f"{what}: {scrub(_describe(error))}"))


def failure_metric(error: httpx.HTTPError) -> str:
    """The metric's outcome of a request that got no answer: connect_error (not sent), no_answer
    (sent, no complete answer) or error."""
    if isinstance(error, _NOT_SENT):
        return "connect_error"
    return "no_answer" if isinstance(error, _MAYBE_SENT) else "error"


def _unless_resent(what: str, outage: Unavailable, expect: Expect) -> Outcome:
    """An outage, or the final error of a call that must not be sent twice (a job submit) when
    the request may have reached Slurm: the caller looks (lists jobs) before trying again."""
    if outage.maybe_applied and not expect.idempotent:
        return Failed(outage.not_resent(what))
    return outage


def _describe(e: Exception) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
