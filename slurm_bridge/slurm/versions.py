"""slurmrestd's REST API versions v0.0.43, v0.0.44 and v0.0.45: which the bridge speaks, the Slurm
release behind an answer, and one codec per version.

Each version has a codec that turns the version-neutral models into request bodies and Slurm's
answers back into them, so nothing outside this package sees a REST API version. The three
versions agree on almost every field the bridge uses (checked against the OpenAPI specs that
Slurm 26.05's data_parser plugins generate); they differ in the node states an update accepts,
in node creation (v0.0.44 on), in ``GET conf`` (slurm.conf as JSON, v0.0.45 on) and in a
partition's OverSubscribe (v0.0.45 shows scontrol's string and zeroes the older
``maximums.oversubscribe``). What they share lives beside this module: the JSON as models
(:mod:`.wire`), Slurm's value formats (:mod:`.formats`), the request bodies (:mod:`.bodies`) and
the decoding of answers (:mod:`.decoding`). Decoding is lenient (unknown fields ignored, older
shapes such as a ``job_state`` string accepted) because a Slurm upgrade adds fields to answers
without changing the version.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from .bodies import RequestBodies
from .decoding import AnswerDecoder
from .errors import SlurmUnsupportedVersion
from .wire import PartitionInfoWire

# Highest first: the client picks the first one the server offers.
SUPPORTED_VERSIONS: Final = ("v0.0.45", "v0.0.44", "v0.0.43")
# The oldest Slurm the bridge runs on: external jobs came with 25.05 (its REST API v0.0.43).
MIN_SLURM_RELEASE: Final = (25, 5)


def slurm_release(body: object) -> str | None:
    """The Slurm release an answer's ``meta`` names (e.g. "24.11.5"), in any REST API version."""
    meta = body.get("meta") if isinstance(body, dict) else None
    slurm = meta.get("slurm") if isinstance(meta, dict) else None
    if not isinstance(slurm, dict):
        return None
    release = slurm.get("release")
    if isinstance(release, str) and release:
        return release
    v = slurm.get("version")
    if isinstance(v, dict) and all(k in v for k in ("major", "minor", "micro")):
        return f"{v['major']}.{int(v['minor']):02d}.{v['micro']}"
    return None


def too_old(release: str) -> bool:
    """Whether a Slurm release predates external jobs (None-safe callers parse first)."""
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) < MIN_SLURM_RELEASE


# Node states an update may ask for: the REST enum's names for the state verbs of
# `scontrol update node` (NOT_RESPONDING is scontrol's NoResp, POWER_DRAIN its POWER_DOWN_ASAP).
_NODE_UPDATE_STATES_V43: Final = frozenset(
    {
        "DOWN",
        "DRAIN",
        "FAIL",
        "FUTURE",
        "NOT_RESPONDING",
        "POWER_DOWN",
        "POWER_DRAIN",
        "POWER_UP",
        "RESUME",
        "UNDRAIN",
    }
)


class Codec(RequestBodies, AnswerDecoder):
    """Encode and decode one REST API version (the v0.0.43 layout; later versions override)."""

    version: ClassVar[str] = "v0.0.43"
    node_update_states: ClassVar[frozenset[str]] = _NODE_UPDATE_STATES_V43

    def path(self, suffix: str) -> str:
        return f"/slurm/{self.version}/{suffix}"

    def db_path(self, suffix: str) -> str:
        """A path of the accounting endpoints (slurmrestd's slurmdbd plugin)."""
        return f"/slurmdb/{self.version}/{suffix}"

    def conf_path(self) -> str | None:
        """``GET conf``: slurm.conf as JSON (v0.0.45 and later; None before)."""
        return None

    def create_node_body(self, node_conf: str) -> dict[str, Any]:
        """``POST new/node``: one slurm.conf node line (v0.0.44 and later)."""
        raise SlurmUnsupportedVersion(
            f"REST API {self.version} cannot create nodes (POST new/node is v0.0.44 and later): registering "
            "Kubernetes nodes as dynamic Slurm nodes needs Slurm 25.05 or newer"
        )


class CodecV0043(Codec):
    version = "v0.0.43"


class CodecV0044(CodecV0043):
    version = "v0.0.44"

    def create_node_body(self, node_conf: str) -> dict[str, Any]:
        return {"node_conf": node_conf}


class CodecV0045(CodecV0044):
    version = "v0.0.45"
    # 26.05 adds POWER_DOWN_ASAP and POWER_DOWN_FORCE to the node update states.
    node_update_states = _NODE_UPDATE_STATES_V43 | {"POWER_DOWN_ASAP", "POWER_DOWN_FORCE"}

    def conf_path(self) -> str | None:
        return self.path("conf")

    def oversubscribe(self, w: PartitionInfoWire) -> str:
        # v0.0.45 zeroes the deprecated maximums.oversubscribe (jobs 0 for OverSubscribe=NO) and shows
        # scontrol's strings instead, where slurm.conf's OverSubscribe=EXCLUSIVE is Exclusive=NODE
        # beside OverSubscribe=NO (checked on Slurm 26.05.5): read back as the older versions' form.
        if w.partition.exclusive and w.partition.exclusive.upper() != "NO":
            return "EXCLUSIVE"
        if w.partition.oversubscribe:
            return w.partition.oversubscribe.upper()
        return super().oversubscribe(w)


CODECS: Final[dict[str, Codec]] = {c.version: c for c in (CodecV0045(), CodecV0044(), CodecV0043())}


def codec_for(version: str) -> Codec:
    try:
        return CODECS[version]
    except KeyError:
        raise ValueError(
            f"unsupported Slurm REST API version {version!r}; supported: {', '.join(SUPPORTED_VERSIONS)}"
        ) from None
