"""Async client for slurmrestd: the bridge's only way to talk to Slurm.

It finds the REST API version the server speaks, authenticates with a JWT read from a file
(re-read when the file changes, so a rotated token needs no restart), checks every answer's
``errors[]`` (slurmrestd can answer HTTP 200 and still report a failure) and retries what is
safe to retry. Answers come back as the version-neutral models of :mod:`.models`.

:class:`SlurmClient` is the one class callers use. Its parts: :mod:`.session` (connection, JWT
(:mod:`.jwtfile`), version discovery, sending with retries), :mod:`.outcomes` (what an answer
means, without I/O), :mod:`.jobcalls`, :mod:`.nodecalls`, :mod:`.clustercalls` and :mod:`.handoffcalls` (the calls),
:mod:`.versions` (the per-version codecs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .clustercalls import ClusterCalls
from .handoffcalls import HandoffCalls
from .jobcalls import JobCalls
from .nodecalls import NodeCalls

if TYPE_CHECKING:
    from ..core.config import Config


class SlurmClient(JobCalls, NodeCalls, ClusterCalls, HandoffCalls):
    """One slurmrestd endpoint. Use as ``async with SlurmClient(...) as c:`` or call ``aclose()``.

    ``retries`` is how many times a failed request is sent again (connection errors, timeouts,
    HTTP 5xx and Slurm's "controller busy/unreachable" errors; never 4xx). A job submit is only
    sent again when it certainly did not reach Slurm, because a second copy would be a second job.
    ``request_count`` counts every HTTP request sent, retries included.
    """

    @classmethod
    def from_config(cls, cfg: Config) -> SlurmClient:
        return cls(
            cfg.slurmRestApi,
            cfg.slurmJwtFile,
            user=cfg.slurmUser or None,
            timeout=cfg.slurmRequestTimeoutSeconds,
            token_source=cfg.slurmJwtSource,
        )
