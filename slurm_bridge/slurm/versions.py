"""slurmrestd's REST API versions v0.0.43 to v0.0.46: which the bridge speaks, which it prefers,
the Slurm release behind an answer, and one codec per version.

Each version has a codec that turns the version-neutral models into request bodies and Slurm's
answers back into them, so nothing outside this package sees a REST API version. The versions
agree on almost every field the bridge uses (v0.0.43 to v0.0.45 checked against the OpenAPI specs
that Slurm 26.05's data_parser plugins generate); they differ in the node states an update
accepts, in node creation (v0.0.44 on), in ``GET conf`` (slurm.conf as JSON, v0.0.45 on) and in a
partition's OverSubscribe (v0.0.45 shows scontrol's strings and zeroes the older
``maximums.oversubscribe``, which v0.0.46 removes). What they share lives beside this module: the
JSON as models (:mod:`.wire`), Slurm's value formats (:mod:`.formats`), the request bodies
(:mod:`.bodies`) and the decoding of answers (:mod:`.decoding`). Decoding is lenient (unknown
fields ignored, older shapes such as a ``job_state`` string accepted) because a Slurm upgrade adds
fields to answers without changing the version.

Which version is used. ``SUPPORTED_VERSIONS`` are the versions tested against a real slurmrestd
(the integration tier runs each), highest first; ``PROVISIONAL_VERSIONS`` are spoken but never run
against one: v0.0.46 (Slurm 26.11, in release candidates) is decoded from the description of its
data_parser plugin (its field names and types) alone. Discovery tries ``PREFERENCE``, every
supported version before any provisional one, and takes the first the server answers: a Slurm
26.11 that still serves v0.0.45 (its source builds the data parsers v0.0.43 to v0.0.46, and
slurmrestd serves every one it loads) keeps the tested v0.0.45, and v0.0.46 is used only where no
supported version is served (a slurmrestd started with ``-d v0.0.46`` alone, or a later Slurm
without v0.0.45), with a warning in the log.
Once v0.0.46 has run against a real Slurm 26.11, the version bump is moving it from
``PROVISIONAL_VERSIONS`` to the front of ``SUPPORTED_VERSIONS``.

What v0.0.46 changes of the fields the bridge reads or writes (its data_parser's parser
tables, compared with v0.0.45's): a partition's ``maximums.oversubscribe`` (``jobs``, ``flags``)
is gone, its OverSubscribe is only ``partition.oversubscribe`` beside ``partition.exclusive`` (both
as in v0.0.45); a job description's and a job's ``container_type`` became ``runtime`` (the bridge
sends and reads neither). Every other field, the envelope (``meta``, ``errors``, ``warnings``) and
every path the codec builds are unchanged.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from .bodies import RequestBodies
from .decoding import AnswerDecoder
from .errors import SlurmUnsupportedVersion
from .wire import PartitionInfoWire

# Tested against a real slurmrestd, highest first.
SUPPORTED_VERSIONS: Final = ("v0.0.45", "v0.0.44", "v0.0.43")
# Spoken but not yet run against a slurmrestd (decoded from Slurm's OpenAPI description).
PROVISIONAL_VERSIONS: Final = ("v0.0.46",)
# The order discovery tries: the client picks the first one the server offers.
PREFERENCE: Final = SUPPORTED_VERSIONS + PROVISIONAL_VERSIONS
# The oldest Slurm the bridge runs on: external jobs came with 25.05 (its REST API v0.0.43).
MIN_SLURM_RELEASE: Final = (25, 5)


def version_key(version: str) -> tuple[int, ...]:
    """A REST API version ("v0.0.45") as numbers, to order versions."""
    return tuple(int(x) for x in version[1:].split("."))


# Every version spoken, highest first (for messages).
SPOKEN_VERSIONS: Final = tuple(sorted(PREFERENCE, key=version_key, reverse=True))


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
        # scontrol's strings instead (checked on Slurm 26.05.5).
        return _scontrol_oversubscribe(w) or super().oversubscribe(w)


class CodecV0046(CodecV0045):
    """Provisional: decoded from the description of Slurm 26.11's data_parser/v0.0.46, never run
    against a slurmrestd (see the module's docstring)."""

    version = "v0.0.46"

    def oversubscribe(self, w: PartitionInfoWire) -> str:
        # v0.0.46 has no maximums.oversubscribe at all: scontrol's strings are the only form. Both
        # are always in its answer; without them, the partition's default (NO), as any field unsaid.
        return _scontrol_oversubscribe(w) or "NO"


def _scontrol_oversubscribe(w: PartitionInfoWire) -> str | None:
    """A partition's OverSubscribe from ``partition.exclusive`` and ``partition.oversubscribe``
    (v0.0.45 on) in the older versions' form; None when the answer has neither.

    slurm.conf's OverSubscribe=EXCLUSIVE is Exclusive=NODE beside OverSubscribe=NO (its max_share
    is 0, which OverSubscribe shows as NO): read back as EXCLUSIVE, as is any other Exclusive but NO
    (TOPO, USER)."""
    if w.partition.exclusive and w.partition.exclusive.upper() != "NO":
        return "EXCLUSIVE"
    if w.partition.oversubscribe:
        return w.partition.oversubscribe.upper()
    return None


CODECS: Final[dict[str, Codec]] = {c.version: c for c in (CodecV0046(), CodecV0045(), CodecV0044(), CodecV0043())}


def codec_for(version: str) -> Codec:
    try:
        return CODECS[version]
    except KeyError:
        raise ValueError(
            f"unsupported Slurm REST API version {version!r}; the bridge speaks {', '.join(SPOKEN_VERSIONS)}"
        ) from None
