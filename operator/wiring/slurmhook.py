"""``POST /slurm/hook``: slurmctld's notices that a job started or ended, from a site's
``PrologSlurmctld`` / ``EpilogSlurmctld`` (``slurm-hooks/slurm-bridge-notify.sh``), served
beside the health endpoints when ``slurmHookTokenFile`` is set (docs/configuration.md#slurm-hooks).

The body is ``{"event": "started"|"ended", "jobId": N, "time": T}``, and a start's may add where
and when it started (``nodes``: a hostlist, ``partition``, ``startTime``, ``endTime``) and whose it
is (``user``, ``uid``, ``group``, ``gid``, ``account``, ``qos``), as slurmctld gave them to its script.
The caller proves it holds the shared secret by signing: ``X-Slurm-Bridge-Signature:
sha256=<hex>``, an HMAC-SHA256 of the body with the secret, whose ``time`` is within
MAX_SKEW_SECONDS of the operator's clock. The secret never travels, and a captured notice cannot be
changed or replayed later. A signed start is applied at once (the pods are released on it) and
still read back from Slurm (:mod:`...placeholderjobs.slurmjobs.hints`).

``Authorization: Bearer <secret>`` (a script older than signing) carries the secret itself, in
clear over plain HTTP, replayable for ever by anyone who saw one request: refused (401) unless
``slurmHookAcceptBearer`` allows it while the scripts are replaced; then a hint only, read back from
Slurm before anything changes.

Only the leader acts (a standby answers 503 and the notice is lost: polling finds the same a
period later).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard, cast

import hostlist
from aiohttp import web

from slurm_bridge.operator.placeholderjobs.slurmjobs.hints import SlurmHints
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import HintEvent, JobOwner, SignedStart
from slurm_bridge.operator.runtime.leader import LeaderElector
from slurm_bridge.slurm.formats import expand_nodes

log = logging.getLogger(__name__)
EVENTS: frozenset[str] = frozenset({"started", "ended"})
SIGNATURE_HEADER = "X-Slurm-Bridge-Signature"
# A signed notice whose time is further than this from the operator's clock is refused: the
# slurmctld host's clock and the cluster's must agree this well (NTP does far better).
MAX_SKEW_SECONDS = 60
# A start's node list may name this many nodes (hostlist-expanded) at most.
_MAX_NODES = 10_000
_MAX_BODY = 65536
_USAGE = 'expected {"event": "started"|"ended", "jobId": N, "time": T}'
_UNSIGNED = (
    f"notices must be signed ({SIGNATURE_HEADER}: sha256=<HMAC-SHA256 of the body with the secret>): install the "
    "current slurm-hooks/slurm-bridge-notify.sh on the slurmctld host(s); a bearer token is refused unless "
    "slurmHookAcceptBearer is set (docs/configuration.md#slurm-hooks)"
)
# A refused bearer notice is logged at most this often: anyone who reaches the port can send one.
_BEARER_LOG_SECONDS = 600.0


class HookToken:
    """The shared secret in a file, read again when the file changes (a rotated Secret)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._token = b""

    def _secret(self) -> bytes:
        """The file's first line, spaces around it left out (as the script reads it); b"" when
        it cannot be read."""
        try:
            st = os.stat(self.path)
            if self._stamp != (st.st_mtime, st.st_size):
                lines = self.path.read_bytes().splitlines()
                self._token = lines[0].strip() if lines else b""
                self._stamp = (st.st_mtime, st.st_size)
        except OSError as e:
            log.warning("cannot read the Slurm hook token %s: %s", self.path, e.strerror)
            return b""
        return self._token

    def matches(self, header: str) -> bool:
        """Whether ``header`` is ``Bearer <the token>`` (compared in constant time)."""
        token = self._secret()
        scheme, _, given = header.partition(" ")
        return bool(token) and scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), token)

    def signs(self, body: bytes, header: str) -> bool:
        """Whether ``header`` is ``sha256=<HMAC-SHA256 of body with the token>`` (constant time)."""
        token = self._secret()
        scheme, _, given = header.partition("=")
        if not token or scheme.strip() != "sha256":
            return False
        want = hmac.new(token, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(given.strip().lower().encode(), want.encode())


def _signed_start(body: dict[str, Any]) -> SignedStart | str | None:
    """Where and when a signed start says the job started; None when it does not say; a string
    saying what is wrong when it says so badly."""
    nodes, partition, start = body.get("nodes"), body.get("partition"), body.get("startTime")
    if nodes is None and partition is None and start is None:
        return None
    if not (isinstance(nodes, str) and isinstance(partition, str) and partition and _is_time(start)):
        return "a start's nodes and partition are strings and its startTime a Unix time, all three or none"
    try:
        names = expand_nodes(nodes)
    except hostlist.BadHostlist as e:
        return f"nodes {nodes[:100]!r} is not a Slurm hostlist: {e}"
    if not names or len(names) > _MAX_NODES:
        return f"nodes {nodes[:100]!r} names no node, or more than {_MAX_NODES}"
    end = body.get("endTime")
    if end is not None and not _is_time(end):
        return "a start's endTime is a Unix time"
    owner = _owner(body)
    if isinstance(owner, str):
        return owner
    return SignedStart(
        nodes=names,
        partition=partition,
        start_time=datetime.fromtimestamp(start, UTC),
        end_time=datetime.fromtimestamp(end, UTC) if end is not None else None,
        owner=owner,
    )


_OWNER_NAMES = ("user", "group", "account", "qos")
_OWNER_IDS = ("uid", "gid")


def _owner(body: dict[str, Any]) -> JobOwner | str | None:
    """Whose a start's job is, when it says: all six fields or none."""
    said = [k for k in (*_OWNER_NAMES, *_OWNER_IDS) if k in body]
    if not said:
        return None
    if len(said) < len(_OWNER_NAMES) + len(_OWNER_IDS):
        return "a start's user, uid, group, gid, account and qos come all six or none"
    if not all(isinstance(body[k], str) and body[k] for k in _OWNER_NAMES) or not all(
        isinstance(body[k], int) and not isinstance(body[k], bool) and 0 <= body[k] < 2**32 for k in _OWNER_IDS
    ):
        return "a start's user, group, account and qos are names, its uid and gid numbers"
    return JobOwner(
        user_name=body["user"],
        user_id=body["uid"],
        group_name=body["group"],
        group_id=body["gid"],
        account=body["account"],
        qos=body["qos"],
    )


def _is_time(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**40


def slurm_hook(
    hints: SlurmHints, elector: LeaderElector, token: HookToken | None, *, accept_bearer: bool = False
) -> Any:
    """The request handler (aiohttp). ``accept_bearer``: take ``Authorization: Bearer <secret>``
    notices as hints too (``slurmHookAcceptBearer``); otherwise only signed ones."""
    logged = [-_BEARER_LOG_SECONDS]  # when a refused bearer notice was last logged (monotonic)

    async def handle(request: web.Request) -> web.Response:
        if token is None:
            return web.Response(status=404, text="Slurm hooks are off: set slurmHookTokenFile (docs/configuration.md)")
        if (request.content_length or 0) > _MAX_BODY:
            return web.Response(status=413, text="too large")
        raw = await request.read()
        signature = request.headers.get(SIGNATURE_HEADER)
        signed = signature is not None
        if signed and not token.signs(raw, signature or ""):
            return web.Response(
                status=401, text=f"{SIGNATURE_HEADER} is not the HMAC-SHA256 of the body with the secret"
            )
        if not signed and not accept_bearer:
            if "Authorization" in request.headers and time.monotonic() - logged[0] >= _BEARER_LOG_SECONDS:
                logged[0] = time.monotonic()
                log.warning(
                    "a Slurm hook notice from %s carried a bearer token, refused: %s", request.remote, _UNSIGNED
                )
            return web.Response(status=401, text=_UNSIGNED)
        if not signed and not token.matches(request.headers.get("Authorization", "")):
            return web.Response(
                status=401, text=f"a valid {SIGNATURE_HEADER} or 'Authorization: Bearer <token>' is required"
            )
        if not elector.is_leader.is_set():
            return web.Response(status=503, text="standby: only the leader acts on Slurm's notices")
        try:
            body = json.loads(raw)
            event, job_id = body["event"], body["jobId"]
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400, text=_USAGE)
        if event not in EVENTS or not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
            return web.Response(status=400, text=_USAGE)
        start: SignedStart | None = None
        if signed:
            sent = body.get("time")
            if not _is_time(sent) or abs(time.time() - sent) > MAX_SKEW_SECONDS:
                return web.Response(
                    status=401,
                    text=f"a signed notice's time must be within {MAX_SKEW_SECONDS} s of the operator's clock"
                    " (is the slurmctld host's clock right?)",
                )
            said = _signed_start(body) if event == "started" else None
            if isinstance(said, str):
                return web.Response(status=400, text=said)
            start = said
        news = hints.hint(job_id, cast(HintEvent, event), start)
        return web.json_response({"read": news}, status=202 if news else 200)

    return handle
