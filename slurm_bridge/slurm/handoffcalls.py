"""The handoff's calls of the Slurm REST client (docs/colocation.md, "The handoff"): Slurm's
reservations (listed as plain records; which are the handoff's is the bridge's rule,
slurm_bridge/rules/handoff.py; deleted), a job's admin_comment marked released before the bridge's own
cancel (so the script holds nothing for it), and what Slurm's
configuration says about preemption and time limits (QOS preempt lists, modes and GraceTime; the
bridge user's default QOS; partitions' OverTimeLimit; slurm.conf's EpilogSlurmctld and
PreemptType). A part of :class:`.client.SlurmClient`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .errors import ESLURM_ALREADY_DONE, ESLURM_INVALID_JOB_ID, ESLURM_JOB_FINISHED, SlurmError
from .formats import time_of
from .jwtfile import token_user
from .models import QosInfo, ReservationRecord
from .session import SlurmSession
from .wire import NoVal, PartitionWire, _Wire, listed, validate

# Deleting a reservation that is gone: "Requested reservation is invalid".
ESLURM_RESERVATION_INVALID = 2053


class _ResvWire(_Wire):
    name: str
    end_time: NoVal | int | None = None
    start_time: NoVal | int | None = None


class _QosPreemptWire(_Wire):
    preempted: list[str] = Field(default_factory=list, alias="list")
    mode: list[str] = Field(default_factory=list)


class _QosWire(_Wire):
    name: str
    preempt: _QosPreemptWire = _QosPreemptWire()
    limits: dict[str, Any] = {}


class _AssocDefaultWire(_Wire):
    qos: str = ""


class _AssocWire(_Wire):
    account: str = ""
    user: str = ""
    is_default: bool = False
    default: _AssocDefaultWire = _AssocDefaultWire()


def _minutes(raw: Any) -> int | None:
    """A NoVal of minutes: its number (0 when unset), None when infinite."""
    v = validate(NoVal, raw if isinstance(raw, dict) else {}, "over_time_limit")
    if v.infinite:
        return None
    return v.number if v.set and v.number is not None else 0


class HandoffCalls(SlurmSession):
    """Reservations, a job's released mark, and the preemption and time-limit settings."""

    def jwt_user(self) -> str:
        """The Slurm user the bridge's JWT names (whose default QOS its own jobs get)."""
        try:
            return self.user or token_user(self._token.get())
        except SlurmError:
            return ""

    async def list_reservations(self) -> list[ReservationRecord]:
        """Every reservation: its name, start and end (one small request)."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("reservations/"))
        out: list[ReservationRecord] = []
        for raw in listed(reply.body, "reservations", "reservations"):
            w = validate(_ResvWire, raw, "reservation")
            out.append(ReservationRecord(w.name, time_of(w.start_time), time_of(w.end_time)))
        return out

    async def delete_reservation(self, name: str) -> bool:
        """Delete a reservation; False when Slurm has no such reservation (deleted or expired)."""
        codec = await self._get_codec()
        reply = await self._request(
            "DELETE",
            codec.path(f"reservation/{name}"),
            not_found_ok=True,
            ok_errors=frozenset({ESLURM_RESERVATION_INVALID}),
        )
        if reply.status == 404:
            return False
        return not any(e.error_number == ESLURM_RESERVATION_INVALID for e in reply.errors)

    async def mark_released(self, job_id: int, admin_comment: str, comment: str | None = None) -> None:
        """Set a job's admin_comment to ``admin_comment`` (its mark with ``"released": true``):
        the bridge releases the job itself, and the EpilogSlurmctld, which reads only that field
        (only an operator can set it), holds nothing. ``comment``: its comment too, in the same
        update (what slurmctld's notify hook tells of it). A job Slurm no longer knows is fine."""
        codec = await self._get_codec()
        path = codec.path(f"job/{int(job_id)}")
        body = codec.mark_body(admin_comment, comment)
        await self._request("POST", path, json_body=body, not_found_ok=True, ok_errors=_GONE)

    async def qos_preemption(self) -> list[QosInfo] | None:
        """Every QOS's preemption settings; None without accounting endpoints."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.db_path("qos/"), not_found_ok=True)
        if reply.status == 404:
            return None
        out = []
        for raw in listed(reply.body, "qos", "qos"):
            w = validate(_QosWire, raw, "qos")
            grace = w.limits.get("grace_time") if isinstance(w.limits, dict) else 0
            out.append(
                QosInfo(w.name, tuple(w.preempt.preempted), tuple(m.upper() for m in w.preempt.mode), int(grace or 0))
            )
        return out

    async def default_qos(self, user: str) -> dict[str, str] | None:
        """``user``'s default QOS per account ("" for the user's default account); None without
        accounting endpoints."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.db_path("associations/"), params={"user": user}, not_found_ok=True)
        if reply.status == 404:
            return None
        out: dict[str, str] = {}
        for raw in listed(reply.body, "associations", "associations"):
            w = validate(_AssocWire, raw, "association")
            if w.user != user:
                continue
            out[w.account] = w.default.qos
            if w.is_default:
                out[""] = w.default.qos
        return out

    async def partition_over_time(self) -> dict[str, int | None]:
        """Each partition's OverTimeLimit in minutes (None: UNLIMITED; absent: the cluster's)."""
        codec = await self._get_codec()
        reply = await self._request("GET", codec.path("partitions/"))
        out: dict[str, int | None] = {}
        for raw in listed(reply.body, "partitions", "partitions"):
            w = validate(PartitionWire, raw, "partition")
            limit = (w.maximums or {}).get("over_time_limit")
            if isinstance(limit, dict) and (limit.get("set") or limit.get("infinite")):
                out[w.name] = _minutes(limit)
        return out


# A mark of a job Slurm no longer knows, or that already ended: nothing to mark.
_GONE = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE, ESLURM_JOB_FINISHED})
