"""The job calls of the Slurm REST client: submit (queued, immediate, heterogeneous), read (states,
lists, one job, its devices), update and cancel. A part of :class:`.client.SlurmClient`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .errors import (
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    ESLURM_JOB_FINISHED,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE,
    ESLURM_REQUESTED_TOPO_CONFIG_UNAVAILABLE,
    SlurmError,
    refusal,
)
from .models import JobInfo, JobRequest, JobSettings, JobStates, NodeDevices
from .session import SlurmSession
from .wire import listed

# The client logs under one name, whichever of its modules writes the line.
log = logging.getLogger("slurm_bridge.slurm.client")

# SHOW_ALL without slurmrestd's default SHOW_DETAIL: the same jobs and fields minus the per-node
# job_resources core bitmaps, which made up about 70% of a jobs answer on the local cluster.
_JOB_QUERY = {"flags": "ALL"}
# A list of every job grows with Slurm's job count (about 8 KB a job: 80 MB and several seconds of
# slurmrestd's time with 10,000 jobs, longer on a busy machine), so it gets at least this long.
FULL_LIST_TIMEOUT_SECONDS = 120.0
_CANCEL_OK = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED})
# A queued submit answered with a job id and this error made the job: resending it would make a second.
_SUBMIT_OK = frozenset({ESLURM_REQUESTED_TOPO_CONFIG_UNAVAILABLE})
_UPDATE_OK = frozenset({ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE})


class JobCalls(SlurmSession):
    """Submit, read, update and cancel Slurm jobs."""

    async def submit_external_job(
        self, req: JobRequest, *, name: str, admin_comment: str, as_user: str | None = None
    ) -> int:
        """Submit ``req`` as an external job and return its id.

        On a timeout after the request was sent this raises SlurmUnavailable with
        ``maybe_applied=True`` instead of sending it again: the caller finds out by listing jobs
        (``admin_comment`` identifies the job) whether Slurm made it.

        ``as_user``: submit as this user (``X-SLURM-USER-NAME``), a tenant's job: Slurm then checks
        it as that user's own submission. Submitted by the bridge's token with ``user_id`` set, it
        is the operator's (SlurmUser's) submission: Slurm keeps a ``priority`` only from an operator,
        and a RootOnly partition or a job_submit plugin sees SlurmUser (docs/security.md). The user
        may not set ``admin_comment``: the marker goes into ``comment`` (:meth:`mark_job` after).
        Slurm refuses a ``group_id`` other than the user's primary group from the user (2113
        "Invalid group id"), and silently drops a ``priority`` the user may not set (both checked on
        Slurm 26.05.5). Slurm 26.05 queues a job on a topology/block partition where no block has
        room now and answers its id with error 7203 ("No suitable topology unit found", HTTP 500,
        checked): that answer is the job made, not a refusal.
        """
        codec = await self._get_codec()
        body = codec.submit_body(req, name=name, admin_comment=admin_comment, as_user=as_user is not None)
        reply = await self._request(
            "POST", codec.path("job/submit"), json_body=body, idempotent=False, as_user=as_user, ok_errors=_SUBMIT_OK
        )
        return codec.decode_submit(reply.body)

    async def submit_het_job(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> int:
        """Submit one heterogeneous external job, a component per request (in offset order), and
        return its leader's id (component 0's; component ``i`` has its own id, and cancelling the
        leader cancels every component).

        Always queued: Slurm 26.05 refuses a heterogeneous immediate allocation (``job/allocate``
        with ``hetjob`` and ``immediate``: error 2078, even on an idle cluster) and starts such a
        job only in a backfill pass (``SchedulerParameters=bf_interval``, 30 s by default). Never
        sent twice, as :meth:`submit_external_job`.
        """
        codec = await self._get_codec()
        body = codec.het_submit_body(reqs, name=name, admin_comment=admin_comment)
        reply = await self._request(
            "POST", codec.path("job/submit"), json_body=body, idempotent=False, ok_errors=_SUBMIT_OK
        )
        return codec.decode_submit(reply.body)

    async def allocate_external_job(
        self,
        req: JobRequest,
        *,
        name: str,
        admin_comment: str,
        as_user: str | None = None,
        comment: str | None = None,
    ) -> int:
        """Allocate ``req`` as an external job only if Slurm can start it this instant.

        Slurm decides inside the call (the same checks as its scheduler, queue priority included),
        so an allocated job is RUNNING with its nodes when this returns -- no wait for the next
        scheduling pass (``batch_sched_delay``, 3 s by default). When it cannot start now Slurm
        refuses (SlurmError, e.g. "Requested nodes are busy") and the caller queues the job with
        :meth:`submit_external_job`. Always ``immediate``: a *queued* allocation would be killed
        by slurmctld when it starts later, because nothing listens for its "allocated" message.
        Like a submit, it is never sent twice (SlurmUnavailable with ``maybe_applied``).

        ``as_user``: allocate as this user (a name, or a uid as a string), for a job that must run
        as a tenant: ``job/allocate`` ignores the body's ``user_id``/``group_id`` and allocates as
        the caller, and a SlurmUser token may call as anyone (``X-SLURM-USER-NAME``; checked on
        Slurm 26.05: the job runs as the named user, in that user's primary group, with Slurm's
        checks for that user). A token that may not do so answers with an authentication error.

        ``comment``: the job's comment (:meth:`.bodies.RequestBodies.submit_body`).
        """
        codec = await self._get_codec()
        body = codec.allocate_body(
            req, name=name, admin_comment=admin_comment, as_user=as_user is not None, comment=comment
        )
        reply = await self._request(
            "POST", codec.path("job/allocate"), json_body=body, idempotent=False, as_user=as_user
        )
        return codec.decode_submit(reply.body)

    async def mark_job(self, job_id: int, admin_comment: str) -> None:
        """Set a job's ``admin_comment`` (as the bridge: a job allocated as another user carries
        its marker in ``comment`` until then, since that user may not set it)."""
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        reply = await self._request("POST", path, json_body=codec.mark_body(admin_comment))
        failed = codec.decode_update(reply.body)
        if failed:
            raise refusal(f"POST {path}: Slurm refused to mark the job as the bridge's", reply.status, failed)

    async def set_priority(self, job_id: int, priority: int) -> None:
        """Set a pending job's ``priority`` as the bridge (an operator): a priority a TenantPolicy
        delegates to its tenant (``allowedOperatorFields``), whose own update Slurm would refuse."""
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        reply = await self._request("POST", path, json_body=codec.priority_body(priority), ok_errors=_UPDATE_OK)
        failed = codec.decode_update(reply.body)
        if failed:
            raise refusal(f"POST {path}: Slurm refused the job's priority", reply.status, failed)

    async def job_states(self, previous: JobStates | None = None) -> JobStates:
        """Every job's id and state flags, in one small request (no names, nodes or reasons).

        About 80 bytes per job against about 8 KB in a full list: cheap enough to ask every poll.
        With ``previous`` (the last answer) an identical answer comes back ``unchanged`` and is
        not decoded again.
        """
        codec = await self._get_codec()
        reply = await self._request(
            "GET", codec.path("jobs/state/"), decode=lambda _, body: codec.decode_job_states(body, previous)
        )
        states: JobStates = reply.value
        return states

    async def update_job(
        self,
        job_id: int,
        req: JobRequest,
        *,
        name: str | None = None,
        unlimited_time: bool = False,
        as_user: str | None = None,
    ) -> None:
        """Change a pending job to match ``req`` (see :meth:`.versions.Codec.update_body`); all or
        nothing: a refused update changes nothing (Slurm 26.05, checked).

        ``as_user``: send it as this user (``X-SLURM-USER-NAME``), the job's owner, so that Slurm
        checks it as that user's own update (QOS access, MaxWall, MaxTRESPerJob, priority): sent with
        the bridge's token alone, Slurm applies it with an operator's rights, skips those checks and
        marks the limits administrator-set (docs/security.md).

        Slurm applies the change and still answers "Requested partition/node configuration not
        available now" when the job cannot run even after it; that is not a failure here (the job
        stays pending with that reason). A job that is no longer pending raises SlurmError, and so
        does an answer saying slurmrestd ignored a field (a body this client got wrong: a change
        it dropped must not pass for applied).
        """
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        body = codec.update_body(req, name=name, unlimited_time=unlimited_time)
        reply = await self._request("POST", path, json_body=body, ok_errors=_UPDATE_OK, as_user=as_user)
        if reply.errors:
            log.info("job %d updated but still cannot run: %s", job_id, "; ".join(map(str, reply.errors)))
        failed = codec.decode_update(reply.body)
        if failed:
            raise refusal(f"POST {path}: Slurm refused the job update", reply.status, failed)
        ignored = [w.description for w in codec.envelope(reply.body).warnings if "unknown field" in w.description]
        if ignored:
            raise SlurmError(f"POST {path}: slurmrestd ignored part of the job update: {'; '.join(ignored)}")

    async def job_settings(self, job_id: int) -> JobSettings | None:
        """What the job asks for of the fields an update may change; None when Slurm does not know it."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params=_JOB_QUERY, not_found_ok=True)
        if reply.status == 404:
            return None
        return codec.decode_job_settings(reply.body, job_id)

    async def list_jobs(self) -> list[JobInfo]:
        """Every job slurmctld still knows (hidden partitions included), in one request."""
        return (await self.list_jobs_since(None))[0] or []

    async def list_jobs_since(
        self, since: int | None, *, admin_comment_prefix: str | None = None
    ) -> tuple[list[JobInfo] | None, int | None]:
        """Every job, or None when no job changed after ``since`` (a ``last_update`` this method
        returned; Slurm's clock), and the ``last_update`` to pass next time. One request; an
        unchanged table costs a few bytes, a changed one the whole list (slurmctld sends every job
        or none). With ``admin_comment_prefix`` only those jobs are decoded (a shared Slurm holds
        many jobs that are none of the caller's business)."""
        codec = await self._get_codec()
        params = dict(_JOB_QUERY)
        if since is not None:
            params["update_time"] = str(int(since))

        def keep(raw: Any) -> JobInfo | None:
            """Each job as it is parsed: only the caller's are decoded and kept."""
            prefix = admin_comment_prefix
            if (
                prefix is not None
                and isinstance(raw, dict)
                and not str(raw.get("admin_comment") or "").startswith(prefix)
                and not str(raw.get("comment") or "").startswith(prefix)  # allocated as a tenant
            ):
                return None
            return codec.decode_job(raw)

        def decode(status: int, body: Any) -> tuple[list[JobInfo] | None, int | None]:
            if since is not None and codec.unchanged_since(status, body, "jobs"):
                return None, since
            return listed(body, "jobs", "jobs"), codec.last_update(body)

        reply = await self._request(
            "GET",
            codec.path("jobs"),
            params=params,
            time_limit=max(self.timeout, FULL_LIST_TIMEOUT_SECONDS),
            decode=decode,
            listing=("jobs", keep),
        )
        jobs: tuple[list[JobInfo] | None, int | None] = reply.value
        return jobs

    async def get_job(self, job_id: int) -> JobInfo | None:
        """The job, or None when Slurm does not know it (never existed, or purged after MinJobAge)."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params=_JOB_QUERY, not_found_ok=True)
        if reply.status == 404:
            return None
        jobs = codec.decode_jobs(reply.body)
        return next((j for j in jobs if j.job_id == job_id), jobs[0] if jobs else None)

    async def get_jobs(self, job_id: int) -> list[JobInfo]:
        """Every job record the answer for ``job_id`` holds: the job, or a heterogeneous job's
        every component when ``job_id`` is its leader; [] when Slurm does not know it."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path(f"job/{int(job_id)}"), params=_JOB_QUERY, not_found_ok=True)
        if reply.status == 404:
            return []
        return codec.decode_jobs(reply.body)

    async def job_devices(self, job_id: int) -> dict[str, NodeDevices] | None:
        """Node -> the devices (GRES indices, CPUs) the job holds there; None when Slurm does not
        know the job. Read fresh: the allocation is only complete once the job runs."""
        codec = await self._get_codec()
        # flags=DETAIL: with flags=ALL (which _JOB_QUERY uses) slurmrestd leaves gres_detail and
        # job_resources empty (Slurm 26.05, checked).
        reply = await self._request(
            "GET", codec.path(f"job/{int(job_id)}"), params={"flags": "DETAIL"}, not_found_ok=True
        )
        if reply.status == 404:
            return None
        return codec.decode_job_devices(reply.body, job_id)

    async def cancel_jobs(self, job_ids: Sequence[int]) -> dict[int, SlurmError]:
        """Cancel several jobs in one call (``DELETE jobs/``, slurmctld's kill-jobs request: one
        RPC and one lock for all). Returns the jobs Slurm could not cancel, each with its error; a
        job unknown or already finished counts as cancelled, as in :meth:`cancel_job`."""
        codec = await self._get_codec()
        path = codec.path("jobs/")
        body = {"jobs": [str(int(j)) for j in job_ids]}
        reply = await self._request("DELETE", path, json_body=body, ok_errors=_CANCEL_OK)
        out: dict[int, SlurmError] = {}
        for job_id, errors in codec.decode_kill_jobs(reply.body).items():
            failed = [e for e in errors if e.error_number not in _CANCEL_OK]
            if failed:
                out[job_id] = refusal(f"DELETE {path}: Slurm could not cancel job {job_id}", reply.status, failed)
        return out

    async def cancel_job(self, job_id: int) -> None:
        """Cancel the job; a job that is unknown or already finished counts as cancelled."""
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        reply = await self._request("DELETE", path, not_found_ok=True, ok_errors=_CANCEL_OK)
        if reply.status == 404:
            return
        failed = [e for e in codec.decode_kill(reply.body) if e.error_number not in _CANCEL_OK]
        if failed:
            raise refusal(f"DELETE {path}: Slurm could not cancel job {job_id}", reply.status, failed)
