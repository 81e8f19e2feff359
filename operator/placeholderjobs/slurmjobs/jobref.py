"""How a Slurm job names its PlaceholderJob, so the bridge can find its jobs after a restart.

The admin_comment carries ``slurm-bridge:{"bridge": ..., "ns": ..., "name": ..., "uid": ...}``;
the job name is ``<namespace>/<name>`` unless the user chose one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from slurm_bridge import names
from slurm_bridge.kube import bounded


@dataclass(frozen=True)
class PhjRef:
    bridge: str
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def encode_admin_comment(ref: PhjRef) -> str:
    payload = {"bridge": ref.bridge, "ns": ref.namespace, "name": ref.name, "uid": ref.uid}
    return names.ADMIN_COMMENT_PREFIX + json.dumps(payload, separators=(",", ":"), sort_keys=True)


def decode_admin_comment(comment: str) -> PhjRef | None:
    """The PlaceholderJob a job belongs to, or None for jobs the bridge did not make."""
    if not comment.startswith(names.ADMIN_COMMENT_PREFIX):
        return None
    try:
        data = json.loads(comment[len(names.ADMIN_COMMENT_PREFIX) :])
        return PhjRef(str(data["bridge"]), str(data["ns"]), str(data["name"]), str(data["uid"]))
    except (ValueError, KeyError, TypeError):
        return None


# Slurm keeps longer job names, but its accounting database cuts them at 255 bytes, and the
# PlaceholderJob's spec.slurm.jobName allows 200 characters.
MAX_JOB_NAME: Final = 200


def default_job_name(namespace: str, name: str) -> str:
    """``<namespace>/<name>``; a longer one keeps its head and a hash of the whole, so two long
    names never share a job name (the admin_comment names the PlaceholderJob in full)."""
    return bounded(f"{namespace}/{name}", MAX_JOB_NAME)
