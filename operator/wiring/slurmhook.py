"""``POST /slurm/hook``: slurmctld's notices that a job started or ended, from a site's
``PrologSlurmctld`` / ``EpilogSlurmctld`` (``slurm-hooks/slurm-bridge-notify.sh``), served
beside the health endpoints when ``slurmHookTokenFile`` is set (docs/configuration.md#slurm-hooks).

The caller presents the shared secret as ``Authorization: Bearer <token>``; the body is
``{"event": "started"|"ended", "jobId": N}``. Only the leader acts (a standby answers 503 and the
notice is lost: polling finds the same a period later). A notice is a hint, read back from Slurm
before anything changes (:mod:`...placeholderjobs.slurmjobs.hints`), so a forged one costs at most
a read of a job of the bridge's; the secret keeps anyone else from costing even that.
"""

from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path
from typing import Any, cast

from aiohttp import web

from slurm_bridge.operator.placeholderjobs.slurmjobs.hints import SlurmHints
from slurm_bridge.operator.placeholderjobs.slurmjobs.viewreads import HintEvent
from slurm_bridge.operator.runtime.leader import LeaderElector

log = logging.getLogger(__name__)
EVENTS: frozenset[str] = frozenset({"started", "ended"})
_MAX_BODY = 4096


class HookToken:
    """The shared secret in a file, read again when the file changes (a rotated Secret)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._token = b""

    def matches(self, header: str) -> bool:
        """Whether ``header`` is ``Bearer <the token>`` (compared in constant time)."""
        try:
            st = os.stat(self.path)
            if self._stamp != (st.st_mtime, st.st_size):
                self._token = self.path.read_bytes().strip()
                self._stamp = (st.st_mtime, st.st_size)
        except OSError as e:
            log.warning("cannot read the Slurm hook token %s: %s", self.path, e.strerror)
            return False
        scheme, _, given = header.partition(" ")
        return bool(self._token) and scheme == "Bearer" and hmac.compare_digest(given.strip().encode(), self._token)


def slurm_hook(hints: SlurmHints, elector: LeaderElector, token: HookToken | None) -> Any:
    """The request handler (aiohttp)."""

    async def handle(request: web.Request) -> web.Response:
        if token is None:
            return web.Response(status=404, text="Slurm hooks are off: set slurmHookTokenFile (docs/configuration.md)")
        if not token.matches(request.headers.get("Authorization", "")):
            return web.Response(status=401, text="a valid 'Authorization: Bearer <token>' is required")
        if not elector.is_leader.is_set():
            return web.Response(status=503, text="standby: only the leader acts on Slurm's notices")
        if (request.content_length or 0) > _MAX_BODY:
            return web.Response(status=413, text="too large")
        try:
            body = await request.json()
            event, job_id = body["event"], body["jobId"]
        except (ValueError, KeyError, TypeError):
            return web.Response(status=400, text='expected {"event": "started"|"ended", "jobId": N}')
        if event not in EVENTS or not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
            return web.Response(status=400, text='expected {"event": "started"|"ended", "jobId": N}')
        news = hints.hint(job_id, cast(HintEvent, event))
        return web.json_response({"read": news}, status=202 if news else 200)

    return handle
