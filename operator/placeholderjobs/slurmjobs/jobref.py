"""How a Slurm job names its PlaceholderJob, so the bridge can find its jobs after a restart.

The admin_comment carries ``slurm-bridge:{"bridge": ..., "handoff": ..., "name": ..., "ns": ...,
"uid": ...}`` (and ``"released": true`` once the bridge released the job itself, with the pods'
``"outcome"`` and ``"exit_code"``); the job name is ``<namespace>/<name>`` unless the user chose one.

The admin_comment is the one field of a job only an operator (the bridge's SlurmUser token) can
set, so it is also what the handoff's EpilogSlurmctld (slurm-hooks/slurm-bridge-handoff.sh) trusts:
``handoff`` is the scope it holds a job's node in, ``released`` tells it to hold nothing
(docs/colocation.md, "The handoff"). Decoders ignore keys they do not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from slurm_bridge import names
from slurm_bridge.core.kubeformats import bounded
from slurm_bridge.operator.views.slurmjobs import PhjRef


def encode_admin_comment(
    ref: PhjRef, *, handoff: str | None = None, released: bool = False, resumes: int | None = None
) -> str:
    """The bridge's mark on a job: ``handoff``, the scope the EpilogSlurmctld holds the job's nodes
    in should Slurm end it under its pods (``cores``, ``node``); ``released``, the bridge released
    the job itself (its pods stopped): nothing to hold; ``resumes``, the preempted job whose place
    it took (slurm_bridge/rules/resume.py). Compact JSON without spaces: the script reads it with
    bash, field by field."""
    payload = _ref_payload(ref)
    if handoff is not None:
        payload[names.ADMIN_COMMENT_HANDOFF] = handoff
    if resumes is not None:
        payload[names.ADMIN_COMMENT_RESUMES] = resumes
    if released:
        payload[names.ADMIN_COMMENT_RELEASED] = True
    return names.ADMIN_COMMENT_PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)


def _ref_payload(ref: PhjRef) -> dict[str, object]:
    return {"bridge": ref.bridge, "ns": ref.namespace, "name": ref.name, "uid": ref.uid}


@dataclass(frozen=True)
class JobOutcome:
    """How the pods of a job the bridge ends ended, written with its released mark: Slurm records
    the job as CANCELLED whatever they did, and ``sacct -o AdminComment`` shows this beside it."""

    phase: str  # the PlaceholderJob's terminal phase
    exit_code: int | None = None  # the highest of the member pods' containers' (None: not known)

    def keys(self) -> dict[str, object]:
        out: dict[str, object] = {names.ADMIN_COMMENT_OUTCOME: self.phase}
        if self.exit_code is not None and self.exit_code >= 0:  # the handoff script reads digits only
            out[names.ADMIN_COMMENT_EXIT_CODE] = self.exit_code
        return out


def released_comment(comment: str, ref: PhjRef | None = None, outcome: JobOutcome | None = None) -> str:
    """``comment`` (a job's admin_comment) with the released mark (and ``outcome``), every other
    key kept; a comment that is not the bridge's mark is replaced by ``ref``'s (a ValueError
    without one)."""
    data = _payload(comment)
    if data is None:
        if ref is None:
            raise ValueError(f"not the bridge's admin_comment: {comment!r}")
        data = _ref_payload(ref)
    data[names.ADMIN_COMMENT_RELEASED] = True
    if outcome is not None:
        data.update(outcome.keys())
    return names.ADMIN_COMMENT_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=True)


def notice_comment(tell: str, marker: str = "") -> str:
    """A job's ``comment`` that says what slurmctld's notify hook tells the operator of it
    (``tell``: names.NOTIFY_ENDED, only its end, for a job allocated inside the call, whose start
    the answer gave; names.NOTIFY_NONE, nothing, for a job the bridge ends itself), with every key of
    ``marker`` (the bridge's mark, which a job allocated as a tenant carries in ``comment`` until
    its admin_comment is set). Compact, sorted JSON: the script finds ``"notify":"<tell>"`` in it."""
    data = _payload(marker) or {}
    data[names.COMMENT_NOTIFY] = tell
    return names.ADMIN_COMMENT_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=True)


def told_of(comment: str, event: str) -> bool:
    """Whether slurmctld's notify hook tells the operator of ``event`` ("started" or "ended") of a
    job with this ``comment``: the script's own test (slurm-hooks/slurm-bridge-notify.sh), for the
    stand-ins that play it (bench/replay.py)."""
    if not comment.startswith(names.ADMIN_COMMENT_PREFIX):
        return True
    if f'"{names.COMMENT_NOTIFY}":"{names.NOTIFY_NONE}"' in comment:
        return False
    return event == "ended" or f'"{names.COMMENT_NOTIFY}":"{names.NOTIFY_ENDED}"' not in comment


def is_released(comment: str) -> bool:
    """Whether the bridge released the job itself (its admin_comment's released mark)."""
    data = _payload(comment)
    return data is not None and data.get(names.ADMIN_COMMENT_RELEASED) is True


def _payload(comment: str) -> dict[str, object] | None:
    if not comment.startswith(names.ADMIN_COMMENT_PREFIX):
        return None
    try:
        data = json.loads(comment[len(names.ADMIN_COMMENT_PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def decode_admin_comment(comment: str) -> PhjRef | None:
    """The PlaceholderJob a job belongs to, or None for jobs the bridge did not make."""
    data = _payload(comment)
    if data is None:
        return None
    try:
        return PhjRef(str(data["bridge"]), str(data["ns"]), str(data["name"]), str(data["uid"]))
    except KeyError:
        return None


# Slurm keeps longer job names, but its accounting database cuts them at 255 bytes, and the
# PlaceholderJob's spec.slurm.jobName allows 200 characters.
MAX_JOB_NAME: Final = 200


def default_job_name(namespace: str, name: str) -> str:
    """``<namespace>/<name>``; a longer one keeps its head and a hash of the whole, so two long
    names never share a job name (the admin_comment names the PlaceholderJob in full)."""
    return bounded(f"{namespace}/{name}", MAX_JOB_NAME)
