"""Typed failures of the Slurm REST client.

Callers branch on the class (retry later, fix the JWT, treat as gone); the message carries Slurm's
own error text so that an operator can act on it without reading slurmrestd's log. No message ever
contains the JWT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Slurm error numbers (slurm/slurm_errno.h) the client acts on.
SLURM_COMMUNICATIONS_CONNECTION_ERROR = 1001
SLURM_COMMUNICATIONS_SEND_ERROR = 1002
SLURM_COMMUNICATIONS_RECEIVE_ERROR = 1003
SLURM_COMMUNICATIONS_SHUTDOWN_ERROR = 1004
SLURM_PROTOCOL_AUTHENTICATION_ERROR = 1007
SLURM_COMMUNICATIONS_CONNECT_TIMEOUT = 1021
SLURM_COMMUNICATIONS_WRITE_TIMEOUT = 1022
SLURM_COMMUNICATIONS_READ_TIMEOUT = 1023
SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR = 1800
SLURMCTLD_COMMUNICATIONS_SEND_ERROR = 1801
SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR = 1802
SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR = 1803
SLURMCTLD_COMMUNICATIONS_BACKOFF = 1804
SLURMCTLD_COMMUNICATIONS_HARD_DROP = 1805
ESLURM_ACCESS_DENIED = 2002
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_REQUESTED_PART_CONFIG_UNAVAILABLE = 2015
ESLURM_INVALID_JOB_ID = 2017
ESLURM_INVALID_NODE_NAME = 2018
ESLURM_ALREADY_DONE = 2021
ESLURM_IN_STANDBY_MODE = 2027
ESLURM_TAKEOVER_NO_HEARTBEAT = 2041
ESLURM_JOB_FINISHED = 2084
ESLURM_IN_STANDBY_USE_BACKUP = 2131
ESLURM_PROTOCOL_INCOMPLETE_PACKET = 5003
SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT = 5004
SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT = 5005
ESLURM_AUTH_CRED_INVALID = 6000
ESLURM_AUTH_EXPIRED = 6001
ESLURM_AUTH_UNABLE_TO_GENERATE_TOKEN = 6009
ESLURM_INVALID_ACCOUNT = 2045
# An update of what only a pending job may change, sent to one that runs (partition, QOS, account).
ESLURM_JOB_NOT_PENDING = 2073
ESLURM_ACCOUNTING_POLICY = 2050
ESLURM_RESERVATION_ACCESS = 2052
ESLURM_INVALID_WCKEY = 2057
ESLURM_INVALID_QOS = 2066
ESLURM_USER_ID_UNKNOWN = 2166
# "Invalid group id": a job submitted as its user names a group other than the user's primary one
# (slurmctld: "Requested GID=... doesn't match user GID"; Slurm 26.05.5, checked).
ESLURM_INVALID_GROUP_ID = 2113
ESLURM_DB_CONNECTION = 7000
# A job queued on a topology/block partition where no block has room now: Slurm 26.05 makes the
# job (pending) and answers its id with this error, HTTP 500 (checked).
ESLURM_REQUESTED_TOPO_CONFIG_UNAVAILABLE = 7203
ESLURM_REST_AUTH_FAIL = 9008
EAGAIN = 11

# slurmrestd could not reach slurmctld at all: the request never arrived, so even a job submit
# may be sent again.
NOT_DELIVERED_ERRORS = frozenset(
    {
        SLURM_COMMUNICATIONS_CONNECTION_ERROR,
        SLURM_COMMUNICATIONS_CONNECT_TIMEOUT,
        SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR,
        SLURMCTLD_COMMUNICATIONS_BACKOFF,
        ESLURM_IN_STANDBY_MODE,
        ESLURM_IN_STANDBY_USE_BACKUP,
    }
)
# Slurm is (briefly) unreachable or busy; the same request may work a moment later.
TRANSIENT_ERRORS = NOT_DELIVERED_ERRORS | frozenset(
    {
        EAGAIN,
        SLURM_COMMUNICATIONS_SEND_ERROR,
        SLURM_COMMUNICATIONS_RECEIVE_ERROR,
        SLURM_COMMUNICATIONS_SHUTDOWN_ERROR,
        SLURM_COMMUNICATIONS_WRITE_TIMEOUT,
        SLURM_COMMUNICATIONS_READ_TIMEOUT,
        SLURMCTLD_COMMUNICATIONS_SEND_ERROR,
        SLURMCTLD_COMMUNICATIONS_RECEIVE_ERROR,
        SLURMCTLD_COMMUNICATIONS_SHUTDOWN_ERROR,
        SLURMCTLD_COMMUNICATIONS_HARD_DROP,
        ESLURM_TAKEOVER_NO_HEARTBEAT,
        ESLURM_PROTOCOL_INCOMPLETE_PACKET,
        SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT,
        SLURM_PROTOCOL_SOCKET_ZERO_BYTES_SENT,
        ESLURM_DB_CONNECTION,
    }
)
AUTH_ERRORS = frozenset(
    {
        SLURM_PROTOCOL_AUTHENTICATION_ERROR,
        ESLURM_AUTH_CRED_INVALID,
        ESLURM_AUTH_EXPIRED,
        ESLURM_AUTH_UNABLE_TO_GENERATE_TOKEN,
        ESLURM_REST_AUTH_FAIL,
        ESLURM_ACCESS_DENIED,
    }
)
NOT_FOUND_ERRORS = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME})
# Slurm refused the job for whom it runs as or is charged to (its association: user x account x
# partition, its QOS or wckey, or an accounting policy limit it can never meet): the same request
# will be refused again until an administrator changes Slurm's accounting, so it is tried once more
# (slurmctld learns of new associations from slurmdbd a moment later) and then given up.
ASSOCIATION_ERRORS = frozenset(
    {
        ESLURM_INVALID_ACCOUNT,
        ESLURM_ACCOUNTING_POLICY,
        ESLURM_RESERVATION_ACCESS,
        ESLURM_INVALID_WCKEY,
        ESLURM_INVALID_QOS,
        ESLURM_USER_ID_UNKNOWN,
    }
)
# The same refusals by Slurm's own words, for an answer without error numbers.
ASSOCIATION_ERROR_TEXTS = (
    "invalid account",
    "invalid qos",
    "invalid wckey",
    "job violates accounting/qos policy",
    "access denied to requested reservation",
    "invalid user id",
)


@dataclass(frozen=True)
class SlurmErrorDetail:
    """One entry of a response's ``errors[]``."""

    error: str = ""  # short form, e.g. "Invalid job id specified"
    error_number: int = 0
    description: str = ""  # long form, often says what Slurm was doing
    source: str = ""

    def __str__(self) -> str:
        parts = [p for p in (self.description, self.error) if p]
        text = ": ".join(dict.fromkeys(parts)) or "unknown error"
        return f"{text} (Slurm error {self.error_number})" if self.error_number else text


class SlurmError(Exception):
    """Slurm or slurmrestd refused or failed a request.

    ``status`` is the HTTP status (``None`` when no response arrived); ``errors`` are Slurm's own
    error entries, so callers can test ``error_numbers`` instead of parsing text.
    """

    def __init__(self, message: str, *, status: int | None = None, errors: Sequence[SlurmErrorDetail] = ()) -> None:
        self.message = message
        self.status = status
        self.errors = tuple(errors)
        super().__init__(self._full_message())

    def _full_message(self) -> str:
        details = "; ".join(str(e) for e in self.errors)
        text = f"{self.message}: {details}" if details else self.message
        return f"{text} [HTTP {self.status}]" if self.status is not None else text

    @property
    def error_numbers(self) -> frozenset[int]:
        return frozenset(e.error_number for e in self.errors if e.error_number)

    @property
    def error_texts(self) -> tuple[str, ...]:
        return tuple(str(e) for e in self.errors)

    @property
    def is_association_refusal(self) -> bool:
        """Slurm refused the job for its association, account, QOS, wckey or accounting policy
        (``ASSOCIATION_ERRORS``): no retry will succeed until Slurm's accounting changes."""
        if self.error_numbers & ASSOCIATION_ERRORS:
            return True
        text = " ".join(self.error_texts).lower()
        return any(t in text for t in ASSOCIATION_ERROR_TEXTS)


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld could not be reached (after retries), or answered 5xx.

    ``maybe_applied`` is True when the request may have reached Slurm before the failure (a job
    submit that timed out while waiting for the answer): the caller must look (list jobs) before
    trying again, or it may create a duplicate.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        errors: Sequence[SlurmErrorDetail] = (),
        maybe_applied: bool = False,
    ) -> None:
        self.maybe_applied = maybe_applied
        super().__init__(message, status=status, errors=errors)


class SlurmAuthError(SlurmError):
    """slurmrestd or slurmctld rejected the JWT or the user it names."""


class SlurmNotFound(SlurmError):
    """The job or node does not exist (any more)."""


class SlurmUnsupportedVersion(SlurmError):
    """The server offers none of the REST API versions this client speaks."""

    def __init__(
        self, message: str, *, offered: Sequence[str] = (), release: str | None = None, status: int | None = None
    ) -> None:
        self.offered = tuple(offered)
        self.release = release  # the Slurm release found, when its answer named one
        super().__init__(message, status=status)


def refusal(message: str, status: int | None, errors: Sequence[SlurmErrorDetail]) -> SlurmError:
    """The error for an answer Slurm refused: SlurmNotFound for an unknown job or node,
    SlurmUnavailable for a busy or unreachable controller, else SlurmError."""
    numbers = {e.error_number for e in errors}
    if status == 404 or numbers & NOT_FOUND_ERRORS:
        return SlurmNotFound(message, status=status, errors=errors)
    if numbers & TRANSIENT_ERRORS:
        return SlurmUnavailable(message, status=status, errors=errors)
    return SlurmError(message, status=status, errors=errors)
