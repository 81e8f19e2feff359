"""The ``slurmjob.slinky.slurm.net/*`` annotations -> JobRequest field values, with an error
worded for the user for each bad one.

Annotation keys and their meanings are those of the Go slurm-bridge (Slinky), so manifests move
between the two unchanged; where this bridge accepts more forms (Slurm time and size syntax), or
checks more strictly, docs/annotations.md says so. The webhook reports every error at admission;
the job request (:mod:`slurm_bridge.rules.translate`) applies the values. Pure: no I/O.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from slurm_bridge import names
from slurm_bridge.rules.resources import parse_quantity
from slurm_bridge.rules.slurmconstraints import check_constraint
from slurm_bridge.rules.topology import topology_of_key

__all__ = [
    "ANNOTATION_FIELDS",
    "AnnotationError",
    "annotation_values",
    "parse_annotations",
    "read_annotations",
    "validate_annotations",
]

# Slurm and slurmrestd keep these counts in signed 32-bit fields; cpus per task in 16 bits
# (0xfffe and 0xffff are its NO_VAL16 and INFINITE16 markers).
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_CPUS_PER_TASK_MAX: Final = 0xFFFD
_JOB_NAME_MAX: Final = 200


# --- Errors -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnnotationError:
    """One bad ``slurmjob.slinky.slurm.net/*`` annotation, worded for the user who wrote it."""

    key: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {_quote(self.value)} is not valid: {self.message}"


class _Invalid(Exception):
    """A value failed its check; the argument is the user-facing message."""


def _quote(value: str, limit: int = 80) -> str:
    # JSON quoting shows newlines and quotes visibly instead of breaking the message.
    if len(value) > limit:
        value = value[:limit] + "..."
    return json.dumps(value, ensure_ascii=False)


# --- Value parsers (one per annotation type) --------------------------------------------------

_INT = re.compile(r"^\+?[0-9]+$")


def _int(value: str, *, lo: int, hi: int, expected: str) -> int:
    if not _INT.fullmatch(value):
        raise _Invalid(expected)
    n = int(value)
    if not lo <= n <= hi:
        raise _Invalid(f"{n} is out of range; {expected}")
    return n


def _node_count(value: str) -> int:
    return _int(
        value,
        lo=1,
        hi=_INT32_MAX,
        expected=f'expected a whole number of nodes from 1 to {_INT32_MAX}, e.g. "2"',
    )


def _id(value: str) -> int:
    # Numeric only: JobRequest carries ids as integers, and a name would need a passwd lookup.
    return _int(value, lo=0, hi=_INT32_MAX, expected=f'expected a numeric id from 0 to {_INT32_MAX}, e.g. "1000"')


def _priority(value: str) -> int:
    expected = f'expected a whole number from 1 to {_INT32_MAX}, e.g. "100"'
    if _INT.fullmatch(value) and int(value) == 0:
        # Slurm holds a job with priority 0, and no annotation could release it again.
        raise _Invalid(f"0 would hold the job in Slurm indefinitely; {expected}")
    return _int(value, lo=1, hi=_INT32_MAX, expected=expected)


_TIME_HELP: Final = (
    'expected a whole number of minutes >= 1, e.g. "90", '
    'or a Slurm time (MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) such as "1-12:00:00"'
)
# Slurm's --time forms; a bare number is minutes (as in both Slurm and the Go slurm-bridge).
_TIME_FORMS: Final = tuple(
    re.compile(p, re.ASCII)
    for p in (
        r"^(?P<m>\d+)$",
        r"^(?P<m>\d+):(?P<s>\d\d?)$",
        r"^(?P<h>\d+):(?P<m>\d\d?):(?P<s>\d\d?)$",
        r"^(?P<d>\d+)-(?P<h>\d\d?)$",
        r"^(?P<d>\d+)-(?P<h>\d\d?):(?P<m>\d\d?)$",
        r"^(?P<d>\d+)-(?P<h>\d\d?):(?P<m>\d\d?):(?P<s>\d\d?)$",
    )
)


def _timelimit(value: str) -> int:
    if value.upper() in ("UNLIMITED", "INFINITE"):
        raise _Invalid(f"no limit cannot be requested here (leave the key out for the partition's); {_TIME_HELP}")
    for form in _TIME_FORMS:
        m = form.fullmatch(value)
        if m is None:
            continue
        parts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
        # Only the leading field may exceed its unit, so "90:00" is 90 minutes but "1:75:00" is
        # rejected rather than silently read as 2:15:00.
        leading = next(iter(parts))
        for unit, bound in (("h", 24), ("m", 60), ("s", 60)):
            if unit in parts and unit != leading and parts[unit] >= bound:
                word = {"h": "hours", "m": "minutes", "s": "seconds"}[unit]
                raise _Invalid(f"the {word} field ({parts[unit]}) must be below {bound}; {_TIME_HELP}")
        seconds = ((parts.get("d", 0) * 24 + parts.get("h", 0)) * 60 + parts.get("m", 0)) * 60 + parts.get("s", 0)
        minutes = -(-seconds // 60)  # Slurm rounds seconds up to the next minute
        if minutes < 1:
            raise _Invalid(f'0 means "no limit" to Slurm and is not accepted; {_TIME_HELP}')
        if minutes > _INT32_MAX:
            raise _Invalid(f"{minutes} minutes is too long; {_TIME_HELP}")
        return minutes
    raise _Invalid(_TIME_HELP)


_MEM_HELP: Final = (
    'expected a size in MiB such as "4096", a Slurm size such as "4096M", "4G" or "1T", '
    'or a Kubernetes binary quantity such as "512Mi" or "4Gi"'
)
_MEM = re.compile(r"^(?P<num>\d+(?:\.\d+)?|\.\d+)(?P<unit>[KkMmGgTtPp]|[KMGTPE]i)?$", re.ASCII)
# MiB per unit. Single letters follow Slurm (binary, case-insensitive); "Xi" follows Kubernetes.
_MEM_UNITS: Final[Mapping[str, Fraction]] = {
    "": Fraction(1),
    "K": Fraction(1, 1024),
    "M": Fraction(1),
    "G": Fraction(1024),
    "T": Fraction(1024**2),
    "P": Fraction(1024**3),
    "Ki": Fraction(1, 1024),
    "Mi": Fraction(1),
    "Gi": Fraction(1024),
    "Ti": Fraction(1024**2),
    "Pi": Fraction(1024**3),
    "Ei": Fraction(1024**4),
}


def _mem(value: str) -> int:
    m = _MEM.fullmatch(value)
    if m is None:
        raise _Invalid(_MEM_HELP)
    unit = m["unit"] or ""
    if len(unit) == 1:
        unit = unit.upper()
    mib = math.ceil(Fraction(m["num"]) * _MEM_UNITS[unit])
    if mib < 1:
        # Slurm reads --mem=0 as "all of each node's memory", which is not what "0" looks like.
        raise _Invalid(f"the size must be at least 1 MiB; {_MEM_HELP}")
    if mib > _INT64_MAX:
        raise _Invalid(f"the size is too large; {_MEM_HELP}")
    return mib


def _cpus(value: str) -> int:
    # The Go slurm-bridge reads this key as a Kubernetes quantity, rounded up to whole cpus.
    expected = (
        f'expected a whole number of cpus from 1 to {_CPUS_PER_TASK_MAX}, e.g. "4" '
        '(or a cpu quantity such as "1500m", rounded up)'
    )
    try:
        q = parse_quantity(value)
    except ValueError:
        raise _Invalid(expected) from None
    n = math.ceil(q)
    if not 1 <= n <= _CPUS_PER_TASK_MAX:
        raise _Invalid(f"{value} is out of range; {expected}")
    return n


def _bool(value: str) -> bool:
    v = value.lower()
    if v == "true":
        return True
    if v == "false":
        return False
    raise _Invalid('expected "true" (whole nodes) or "false" (nodes may be shared)')


_MODE_HELP: Final = (
    'expected "exclusive" (whole nodes), "timeShared" (nodes shared with other pods, in turns with native '
    'Slurm jobs) or "coResident" (core by core beside native Slurm jobs)'
)


def _node_sharing(value: str) -> str:
    for mode in names.NODE_SHARING_MODES:
        if value.lower() == mode.lower():
            return mode
    raise _Invalid(_MODE_HELP)


def _job_name(value: str) -> str:
    if not value:
        raise _Invalid("expected a non-empty job name")
    if len(value) > _JOB_NAME_MAX:
        raise _Invalid(f"the name is {len(value)} characters long; expected at most {_JOB_NAME_MAX}")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
        raise _Invalid("expected a name on one line, without newlines or other control characters")
    return value


# A Slurm entity name: Slurm splits lists on commas and its tools quote and parse on whitespace,
# quotes and backslashes, so none of those can be part of one name.
_NAME = re.compile(r"""^[^\s,'"\\\x00-\x1f\x7f]+$""")


def _slurm_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise _Invalid("expected one Slurm name, without whitespace, commas, quotes or backslashes")
    return value


def _name_list(kind: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        items = value.split(",")
        if not all(_NAME.fullmatch(i) for i in items):
            raise _Invalid(
                f'expected a {kind} name or a comma-separated list of them, e.g. "a,b", '
                "without whitespace, quotes, backslashes or empty items"
            )
        dupes = sorted({i for i in items if items.count(i) > 1})
        if dupes:
            raise _Invalid(f"{', '.join(dupes)} listed more than once; expected each {kind} once")
        return value

    return parse


def _constraints(value: str) -> str:
    try:
        return check_constraint(value)
    except ValueError as e:
        raise _Invalid(str(e)) from None


_LICENSE = re.compile(r"^(?P<name>[A-Za-z0-9_.@\-]+)(?::(?P<count>[0-9]+))?$")


def _licenses(value: str) -> str:
    expected = 'expected name[:count][,name[:count]...] with counts >= 1, e.g. "matlab:2,ansys"'
    seen: set[str] = set()
    for item in value.split(","):
        m = _LICENSE.fullmatch(item)
        if m is None or (m["count"] is not None and int(m["count"]) < 1):
            raise _Invalid(expected)
        if m["name"] in seen:
            raise _Invalid(f"{m['name']} listed more than once; {expected}")
        seen.add(m["name"])
    return value


_GRES_ITEM = re.compile(
    r"(?:gres/)?(?P<name>[A-Za-z][A-Za-z0-9_\-]*)"
    r"(?::(?P<type>[A-Za-z0-9_.\-]*[A-Za-z_.\-][A-Za-z0-9_.\-]*))?"
    r"(?::(?P<count>[0-9]+))?"
)


def _gres(value: str) -> str:
    """Normalise to Slurm's TRES-per-node form, which is what slurmrestd's job field takes."""
    expected = 'expected name[:type][:count][,...] with counts >= 1, e.g. "gpu:2", "gpu:a100:1" or "gpu:1,shard:2"'
    out: list[str] = []
    seen: set[str] = set()
    for item in value.split(","):
        # A type must contain a non-digit, so that (as in Slurm) "gpu:2" is a count, not a type.
        m = _GRES_ITEM.fullmatch(item)
        if m is None or (m["count"] is not None and int(m["count"]) < 1):
            raise _Invalid(expected)
        name = m["name"] + (f":{m['type']}" if m["type"] else "")
        if name in seen:
            raise _Invalid(f"{name} listed more than once; {expected}")
        seen.add(name)
        out.append(f"gres/{name}:{int(m['count'] or 1)}")
    return ",".join(out)


def _topology(value: str) -> str:
    try:
        return topology_of_key(value)
    except ValueError as e:
        raise _Invalid(str(e)) from None


# --- Annotation table ---------------------------------------------------------------------------

_Parser = Callable[[str], object]

_PARSERS: Final[Mapping[str, tuple[str, _Parser]]] = {
    names.ANN_ACCOUNT: ("account", _slurm_name),
    names.ANN_CONSTRAINTS: ("constraints", _constraints),
    names.ANN_CPU_PER_TASK: ("cpus_per_task", _cpus),
    names.ANN_EXCLUSIVE: ("exclusive", _bool),
    names.ANN_GRES: ("gres", _gres),
    names.ANN_GROUP_ID: ("group_id", _id),
    names.ANN_JOB_NAME: ("job_name", _job_name),
    names.ANN_LICENSES: ("licenses", _licenses),
    names.ANN_MAX_NODES: ("max_nodes", _node_count),
    names.ANN_MEM_PER_NODE: ("memory_per_node_mib", _mem),
    names.ANN_MIN_NODES: ("nodes", _node_count),
    names.ANN_NODE_SHARING: ("node_sharing", _node_sharing),
    names.ANN_PARTITION: ("partition", _name_list("partition")),
    names.ANN_PRIORITY: ("priority", _priority),
    names.ANN_QOS: ("qos", _slurm_name),
    names.ANN_RESERVATION: ("reservation", _name_list("reservation")),
    names.ANN_TIMELIMIT: ("time_limit_minutes", _timelimit),
    names.ANN_TOPOLOGY: ("topology", _topology),
    names.ANN_USER_ID: ("user_id", _id),
    names.ANN_WCKEY: ("wckey", _slurm_name),
}

# Annotation key -> the JobRequest field it sets (python name), for callers that explain or diff.
ANNOTATION_FIELDS: Final[Mapping[str, str]] = {k: f for k, (f, _) in _PARSERS.items()}


def read_annotations(annotations: Mapping[str, str]) -> tuple[dict[str, object], list[AnnotationError]]:
    """The JobRequest field values of the valid slurmjob annotations and an error for each invalid
    one, for callers that need both from one pass."""
    values: dict[str, object] = {}
    errors: list[AnnotationError] = []
    for key in sorted(annotations):
        if not key.startswith(names.SLURMJOB_PREFIX):
            continue
        raw = annotations[key]
        if not isinstance(raw, str):  # a hand-built dict, not one from the API
            raw = str(raw)
        entry = _PARSERS.get(key)
        if entry is None:
            errors.append(AnnotationError(key, raw, _unknown_key_message(key)))
            continue
        fieldname, parse = entry
        try:
            values[fieldname] = parse(raw.strip())
        except _Invalid as e:
            errors.append(AnnotationError(key, raw, str(e)))
    lo, hi = values.get("nodes"), values.get("max_nodes")
    if isinstance(lo, int) and isinstance(hi, int) and hi < lo:
        errors.append(
            AnnotationError(
                names.ANN_MAX_NODES,
                str(annotations[names.ANN_MAX_NODES]),
                f"expected a node count >= {names.ANN_MIN_NODES} ({lo})",
            )
        )
    errors += _sharing_conflict(values, annotations)
    return values, errors


def _sharing_conflict(values: Mapping[str, object], annotations: Mapping[str, str]) -> list[AnnotationError]:
    """The Go bridge's ``exclusive`` beside ``node-sharing``: they must say the same thing."""
    mode, exclusive = values.get("node_sharing"), values.get("exclusive")
    if mode is None or exclusive is None or (exclusive is True) == (mode == names.NODE_SHARING_EXCLUSIVE):
        return []
    meaning = "whole nodes" if exclusive else "not whole nodes"
    return [
        AnnotationError(
            names.ANN_NODE_SHARING,
            str(annotations[names.ANN_NODE_SHARING]),
            f"{names.ANN_EXCLUSIVE} says {str(annotations[names.ANN_EXCLUSIVE]).strip()!r} ({meaning}); "
            "keep one of the two",
        )
    ]


def _unknown_key_message(key: str) -> str:
    suffix = key.removeprefix(names.SLURMJOB_PREFIX)
    known = sorted(k.removeprefix(names.SLURMJOB_PREFIX) for k in _PARSERS)
    close = difflib.get_close_matches(suffix, known, n=1, cutoff=0.6)
    if close:
        return f'unknown key; did you mean "{names.SLURMJOB_PREFIX}{close[0]}"?'
    return f"unknown key; the {names.SLURMJOB_PREFIX} keys are: {', '.join(known)}"


def validate_annotations(annotations: Mapping[str, str]) -> list[AnnotationError]:
    """Every problem with the ``slurmjob.slinky.slurm.net/*`` keys, so a user fixes them all at once.

    Other annotations are not ours to judge and are ignored.
    """
    return read_annotations(annotations)[1]


def annotation_values(annotations: Mapping[str, str]) -> dict[str, object]:
    """JobRequest field values of the slurmjob annotations that are valid (the invalid ones are
    :func:`validate_annotations`' to report), for checks that look at what was asked for."""
    return read_annotations(annotations)[0]


def parse_annotations(annotations: Mapping[str, str]) -> dict[str, object]:
    """JobRequest field values (python names) set by the slurmjob annotations.

    Raises ValueError listing every bad key when any is invalid, because a half-applied set of
    overrides would submit a job the user did not ask for.
    """
    values, errors = read_annotations(annotations)
    if errors:
        raise ValueError("invalid Slurm job annotations:\n" + "\n".join(f"  {e}" for e in errors))
    return values
