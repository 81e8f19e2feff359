"""Pods and workloads -> one Slurm job request, as pure functions.

Annotation keys and their meanings are those of the Go slurm-bridge (Slinky), so manifests move
between the two unchanged; where this bridge accepts more forms (Slurm time and size syntax), or
checks more strictly, docs/annotations.md says so. Nothing here does I/O: callers pass pods and
workloads as the plain dicts the Kubernetes API returns, and get back values or errors that name
the offending key or container, so the webhook can reject a manifest with a useful message and
the operator can build a ``JobRequest`` without a second validation path.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from slurm_bridge import dra, names
from slurm_bridge.config import Config
from slurm_bridge.placement import Placement, combine_constraints, pod_placement
from slurm_bridge.slurm.models import JobRequest

__all__ = [
    "ANNOTATION_FIELDS",
    "GPU_RESOURCES",
    "AnnotationError",
    "PodResources",
    "annotation_values",
    "job_request",
    "parse_annotations",
    "parse_quantity",
    "placement_request_problems",
    "pod_resources",
    "time_limit_from_deadline",
    "validate_annotations",
]

# Slurm and slurmrestd keep these counts in signed 32-bit fields; cpus per task in 16 bits
# (0xfffe and 0xffff are its NO_VAL16 and INFINITE16 markers).
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_CPUS_PER_TASK_MAX: Final = 0xFFFD
_JOB_NAME_MAX: Final = 200
_CONSTRAINTS_MAX: Final = 1024  # the CRD's maxLength of spec.slurm.constraints
_MIB: Final = 2**20

# Device-plugin GPU resources; both become Slurm's generic gres/gpu.
GPU_RESOURCES: Final = ("nvidia.com/gpu", "amd.com/gpu")


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


_CONSTRAINT_HELP: Final = (
    'expected a Slurm constraint such as "a100", "intel&ib", "rack1|rack2", "[rack1|rack2]" or "(a|b)&c"'
)
_CONSTRAINT_TOKEN = re.compile(r"[()\[\]&|,]|\*[0-9]*|[^()\[\]&|,*\s]+|\s+")


def _constraints(value: str) -> str:
    # Mirrors the rules of slurmctld's feature parser that do not depend on the cluster:
    # balanced grouping, no nested parentheses, one bracket set never inside parentheses,
    # an operand on both sides of every operator, counts only after a feature.
    def bad(why: str) -> _Invalid:
        return _Invalid(f"{why}; {_CONSTRAINT_HELP}")

    if not value:
        raise bad("the expression is empty")
    open_groups: list[str] = []
    brackets_seen = False
    need_operand = True
    prev = ""
    for tok in _CONSTRAINT_TOKEN.findall(value):
        if tok.isspace():
            raise bad("features and operators cannot be separated by whitespace")
        if tok in ("(", "["):
            if not need_operand:
                raise bad(f"an operator is missing before {tok!r}")
            if tok == "(" and "(" in open_groups:
                raise bad("Slurm does not allow nested parentheses")
            if tok == "[":
                if open_groups:
                    raise bad("Slurm does not allow brackets inside parentheses")
                if brackets_seen:
                    raise bad("Slurm allows only one set of brackets")
                brackets_seen = True
            open_groups.append(tok)
        elif tok in (")", "]"):
            if need_operand:
                raise bad(f"a feature is missing before {tok!r}")
            if not open_groups or open_groups.pop() != {")": "(", "]": "["}[tok]:
                raise bad(f"unbalanced {tok!r}")
            need_operand = False
        elif tok in ("&", "|", ","):
            if need_operand:
                raise bad(f"a feature is missing before {tok!r}")
            need_operand = True
        elif tok.startswith("*"):
            if need_operand or prev in (")", "]") or prev.startswith("*"):
                raise bad("a '*count' must follow a feature name")
            if tok == "*" or int(tok[1:]) < 1:
                raise bad("a '*' must be followed by a node count >= 1")
        else:
            if not need_operand:
                raise bad(f"an operator is missing before {tok!r}")
            need_operand = False
        prev = tok
    if need_operand:
        raise bad("the expression ends with an operator")
    if open_groups:
        raise bad(f"unbalanced {open_groups[-1]!r}")
    return value


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
    names.ANN_PARTITION: ("partition", _name_list("partition")),
    names.ANN_PRIORITY: ("priority", _priority),
    names.ANN_QOS: ("qos", _slurm_name),
    names.ANN_RESERVATION: ("reservation", _name_list("reservation")),
    names.ANN_TIMELIMIT: ("time_limit_minutes", _timelimit),
    names.ANN_USER_ID: ("user_id", _id),
    names.ANN_WCKEY: ("wckey", _slurm_name),
}

# Annotation key -> the JobRequest field it sets (python name), for callers that explain or diff.
ANNOTATION_FIELDS: Final[Mapping[str, str]] = {k: f for k, (f, _) in _PARSERS.items()}


def _parse_all(annotations: Mapping[str, str]) -> tuple[dict[str, object], list[AnnotationError]]:
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
    return values, errors


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
    return _parse_all(annotations)[1]


def annotation_values(annotations: Mapping[str, str]) -> dict[str, object]:
    """JobRequest field values of the slurmjob annotations that are valid (the invalid ones are
    :func:`validate_annotations`' to report), for checks that look at what was asked for."""
    return _parse_all(annotations)[0]


def parse_annotations(annotations: Mapping[str, str]) -> dict[str, object]:
    """JobRequest field values (python names) set by the slurmjob annotations.

    Raises ValueError listing every bad key when any is invalid, because a half-applied set of
    overrides would submit a job the user did not ask for.
    """
    values, errors = _parse_all(annotations)
    if errors:
        raise ValueError("invalid Slurm job annotations:\n" + "\n".join(f"  {e}" for e in errors))
    return values


# --- Kubernetes quantities and pod resources ------------------------------------------------

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>\d+\.?\d*|\.\d+)"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?\d+)|(?P<dec>[numkMGTPE]))?$",
    re.ASCII,
)
_DECIMAL_SUFFIX: Final[Mapping[str, Fraction]] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_BINARY_SUFFIX: Final[Mapping[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(value: str | int | float) -> Fraction:
    """A Kubernetes resource quantity, exactly (no float rounding before we round up).

    Raises ValueError for anything the apiserver would not accept as a quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return Fraction(str(value))
    m = _QUANTITY.fullmatch(value.strip())
    if m is None or len(value.strip()) > 64:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 4G, 1e3)")
    q = Fraction(m["num"])
    if m["bin"]:
        q *= _BINARY_SUFFIX[m["bin"]]
    elif m["exp"] is not None:
        exp = int(m["exp"])
        if abs(exp) > 30:  # far beyond any resource; keeps Fraction arithmetic bounded
            raise ValueError(f"{value!r}: exponent out of range")
        q *= Fraction(10) ** exp
    elif m["dec"]:
        q *= _DECIMAL_SUFFIX[m["dec"]]
    return -q if m["sign"] == "-" else q


@dataclass(frozen=True)
class PodResources:
    """What one pod needs from its node, in Slurm's units."""

    cpus: int
    memory_mib: int | None  # None: no container states memory, so Slurm applies its default
    # GPUs by where they were asked for (a device-plugin resource, or DRA's GRES), zero omitted;
    # all are Slurm's gres/gpu
    gpus: dict[str, int] = field(default_factory=dict)


_TRACKED: Final = ("cpu", "memory", *GPU_RESOURCES)


def _amounts(resources: Any, where: str) -> dict[str, Fraction]:
    """max(request, limit) per tracked resource: a limit alone is the request (Kubernetes'
    defaulting), and sizing the Slurm allocation to the limit keeps the pod inside it."""
    out: dict[str, Fraction] = {}
    if not isinstance(resources, Mapping):
        return out
    for part in ("requests", "limits"):
        values = resources.get(part)
        if not isinstance(values, Mapping):
            continue
        for name in _TRACKED:
            if values.get(name) is None:
                continue
            try:
                q = parse_quantity(values[name])
            except ValueError as e:
                raise ValueError(f"{where}: resources.{part}.{name}: {e}") from None
            if q < 0:
                raise ValueError(f"{where}: resources.{part}.{name}: {values[name]!r} is negative")
            out[name] = max(out.get(name, Fraction(0)), q)
    return out


def _add(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {k: a.get(k, Fraction(0)) + b.get(k, Fraction(0)) for k in set(a) | set(b)}


def _max(a: Mapping[str, Fraction], b: Mapping[str, Fraction]) -> dict[str, Fraction]:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in set(a) | set(b)}


def _pod_label(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"pod {ns}/{name}" if ns else f"pod {name}"


def _containers(spec: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    items = spec.get(key) or []
    return [c for c in items if isinstance(c, Mapping)]


def pod_resources(pod: Mapping[str, Any]) -> PodResources:
    """The pod's effective need, by the rules kube-scheduler uses to fit a pod on a node.

    App containers add up; each init container runs alone (plus the sidecars started before it),
    so the pod needs the larger of the two; restartable (sidecar) init containers keep running and
    so add to the app containers; pod-level ``spec.resources`` replaces the container total for
    cpu and memory; ``spec.overhead`` (RuntimeClass) comes on top. Raises ValueError naming the
    container for a malformed quantity.
    """
    spec = pod.get("spec") or {}
    label = _pod_label(pod)

    total: dict[str, Fraction] = {}
    for c in _containers(spec, "containers"):
        total = _add(total, _amounts(c.get("resources"), f"{label}: container {c.get('name')!r}"))

    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for c in _containers(spec, "initContainers"):
        need = _amounts(c.get("resources"), f"{label}: init container {c.get('name')!r}")
        if c.get("restartPolicy") == "Always":
            total = _add(total, need)
            sidecars = _add(sidecars, need)
            need = sidecars
        else:
            need = _add(need, sidecars)
        init_peak = _max(init_peak, need)
    total = _max(total, init_peak)

    pod_level = _amounts(spec.get("resources"), f"{label}: spec.resources")
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    overhead = {}
    if isinstance(spec.get("overhead"), Mapping):
        overhead = _amounts({"requests": spec["overhead"]}, f"{label}: spec.overhead")
    total = _add(total, overhead)

    memory = total.get("memory", Fraction(0))
    cpus = max(1, math.ceil(total.get("cpu", Fraction(0))))
    gpus = {g: math.ceil(total[g]) for g in GPU_RESOURCES if total.get(g, 0) > 0}
    # DRA requests, which the webhook took out of the containers (slurm_bridge/dra.py): a GPU
    # DeviceClass is its GRES, dra.cpu the pod's CPUs (native cpu is refused beside it).
    try:
        counts = dra.recorded_requests((pod.get("metadata") or {}).get("annotations") or {})
    except ValueError as e:
        raise ValueError(f"{label}: {e}") from None
    dra_gres, dra_cpus = dra.slurm_needs(counts)
    if dra_cpus is not None:
        cpus = dra_cpus
    for gres, count in dra_gres.items():  # every GRES a DeviceClass maps to is gpu (dra.DEVICE_CLASSES)
        gpus[f"dra/{gres}"] = count
    return PodResources(cpus=cpus, memory_mib=math.ceil(memory / _MIB) if memory > 0 else None, gpus=gpus)


# --- The job request --------------------------------------------------------------------------


def time_limit_from_deadline(seconds: int) -> int:
    """Slurm minutes for a Kubernetes deadline, rounded up so Slurm never ends the job early.

    Kubernetes only accepts positive deadlines; anything else is a caller bug (a Slurm limit of 0
    would mean "forever", the opposite of what a zero deadline says).
    """
    if isinstance(seconds, bool) or seconds < 1:
        raise ValueError(f"a deadline must be a positive number of seconds, got {seconds!r}")
    return max(1, -(-seconds // 60))


def _common_placement(placements: Iterable[Placement]) -> Placement:
    """Where every pod of one job may run: each node of the job must suit each pod (as each node
    is sized for the largest pod), so the pods' placements are intersected."""
    common = Placement()
    for p in dict.fromkeys(placements):
        common &= p
    if common.impossible:
        raise ValueError(
            "the pods' required node names have no node in common, but one Slurm job holds the nodes of all of "
            "them and each of its nodes must suit every pod; give the pods node selections that overlap"
        )
    return common


def _placement_fields(placement: Placement, *, holds: int | None, constraints: str | None) -> dict[str, object]:
    """required_nodes, excluded_nodes and constraints for ``placement``.

    Slurm allocates *every* node of a required node list, so a list means "one of these" exactly
    when it names as many nodes as the job may hold (``holds``, None when not known yet).
    """
    out: dict[str, object] = {}
    if placement.nodes is not None:
        if holds is not None and len(placement.nodes) != holds:
            listed = ", ".join(sorted(placement.nodes))
            raise ValueError(
                f"the pods' required node names allow {len(placement.nodes)} node(s) ({listed}), but Slurm "
                f"allocates every node of a required node list and this job holds {holds} node(s) (one per pod, "
                f"unless {names.ANN_MIN_NODES} or {names.ANN_MAX_NODES} say more); name exactly {holds} node(s), "
                f"or select nodes by a node feature label ({names.LABEL_NODE_FEATURE_PREFIX}<feature>) instead"
            )
        out["required_nodes"] = sorted(placement.nodes)
    elif placement.excluded:
        out["excluded_nodes"] = sorted(placement.excluded)
    combined = combine_constraints(constraints, placement.constraint())
    if combined is not None and combined != constraints:
        try:
            _constraints(combined)
        except _Invalid as e:
            raise ValueError(
                f"the Slurm constraint {combined!r} built from the pods' node features is not valid: {e}"
            ) from None
        if len(combined) > _CONSTRAINTS_MAX:
            raise ValueError(
                f"the Slurm constraint built from the pods' node features is {len(combined)} characters long "
                f"(at most {_CONSTRAINTS_MAX}); select fewer features"
            )
        out["constraints"] = combined
    return out


def placement_request_problems(
    placements: Sequence[Placement], annotations: Mapping[str, str], *, pods: int | None
) -> list[str]:
    """Whether pods with these placements (each one expressible) fit one Slurm job, for admission.

    The placements must intersect, combine with the constraints annotation and, when the group's
    pod count is known (``pods``; None for a gang), name as many nodes as the job holds. Invalid
    annotations are left to :func:`validate_annotations` and give no problem here.
    """
    values, errors = _parse_all(annotations)
    if errors or not placements:
        return []
    holds = None
    if pods is not None:
        nodes, max_nodes = values.get("nodes", pods), values.get("max_nodes")
        holds = max_nodes if isinstance(max_nodes, int) else nodes if isinstance(nodes, int) else None
    constraints = values.get("constraints")
    try:
        common = _common_placement(placements)
        _placement_fields(common, holds=holds, constraints=constraints if isinstance(constraints, str) else None)
    except ValueError as e:
        return [str(e)]
    return []


def job_request(
    pods: Sequence[Mapping[str, Any]],
    *,
    config: Config,
    derived: Mapping[str, object] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JobRequest:
    """One Slurm job that holds a node for each pod of a group (a gang, or a single pod).

    Precedence, lowest first: bridge defaults and the pods' own resources < ``derived`` (values
    the caller took from the workload, e.g. a Job's deadline) < ``annotations`` (the root
    workload's; a bare pod passes its own). Each node is sized for the largest pod because Slurm
    gives every node of a job the same per-node request; likewise every node must suit every
    pod's required placement (nodeSelector, node affinity), which is ANDed with the constraints
    annotation. Raises ValueError for invalid annotations, a node count that cannot hold every pod,
    or a placement Slurm cannot honour.
    """
    if not pods:
        raise ValueError("a Slurm job needs at least one pod")
    need = [pod_resources(p) for p in pods]
    placements: list[Placement] = []
    for p in pods:
        try:
            placements.append(pod_placement(p.get("spec") or {}))
        except ValueError as e:
            raise ValueError(f"{_pod_label(p)}: {e}") from None
    placement = _common_placement(placements)
    count = len(pods)

    fields: dict[str, object] = {
        "partition": config.partition or None,
        "nodes": count,
        "tasks_per_node": 1,
        "cpus_per_task": max(r.cpus for r in need),
    }
    memory = [r.memory_mib for r in need if r.memory_mib is not None]
    if memory:
        fields["memory_per_node_mib"] = max(memory)
    gpus = max(sum(r.gpus.values()) for r in need)
    if gpus:
        fields["gres"] = f"gres/gpu:{gpus}"
    if config.mcsLabel:
        fields["mcs_label"] = config.mcsLabel

    if derived:
        unknown = sorted(set(derived) - set(JobRequest.model_fields))
        if unknown:
            raise ValueError(f"derived values name no JobRequest field: {', '.join(unknown)}")
        fields.update(derived)
    from_annotations = parse_annotations(annotations) if annotations else {}
    fields.update(from_annotations)

    nodes = fields["nodes"]
    if isinstance(nodes, int) and nodes < count:
        source = names.ANN_MIN_NODES if "nodes" in from_annotations else "the derived node count"
        raise ValueError(
            f"{source} ({nodes}) is below the number of pods ({count}): each pod needs a node of its "
            f"own, so a group of {count} pods needs at least {count} nodes"
        )
    max_nodes = fields.get("max_nodes")
    if isinstance(max_nodes, int) and isinstance(nodes, int) and max_nodes < nodes:
        source = names.ANN_MAX_NODES if "max_nodes" in from_annotations else "the derived max_nodes"
        raise ValueError(f"{source} ({max_nodes}) is below the node count ({nodes}) this job needs")
    constraints = fields.get("constraints")
    holds = max_nodes if isinstance(max_nodes, int) else nodes if isinstance(nodes, int) else None
    fields.update(
        _placement_fields(placement, holds=holds, constraints=constraints if isinstance(constraints, str) else None)
    )
    return JobRequest.model_validate(fields)
