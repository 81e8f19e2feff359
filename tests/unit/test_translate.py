"""Pods and annotations -> JobRequest: every annotation form, quantity rules and precedence."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.config import Config
from slurm_bridge.placement import Placement
from slurm_bridge.slurm.models import JobRequest
from slurm_bridge.translate import (
    ANNOTATION_FIELDS,
    AnnotationError,
    PodResources,
    job_request,
    parse_annotations,
    parse_quantity,
    placement_request_problems,
    pod_resources,
    time_limit_from_deadline,
    validate_annotations,
)

pytestmark = pytest.mark.unit

P = names.SLURMJOB_PREFIX


def _pod(
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, Any] | None = None,
    pod_level: dict[str, Any] | None = None,
    name: str = "p",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_level is not None:
        spec["resources"] = pod_level
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _c(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    *,
    name: str = "c",
    restart: str | None = None,
) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    c: dict[str, Any] = {"name": name, "image": "busybox", "resources": res}
    if restart is not None:
        c["restartPolicy"] = restart
    return c


# --- the annotation table matches names.py --------------------------------------------------


def test_every_slurmjob_annotation_is_handled() -> None:
    assert set(ANNOTATION_FIELDS) == names.SLURMJOB_ANNOTATIONS
    assert set(ANNOTATION_FIELDS.values()) <= set(JobRequest.model_fields)


# --- valid forms --------------------------------------------------------------------------------

VALID: list[tuple[str, str, str, object]] = [
    # (suffix, annotation value, JobRequest field, parsed value)
    ("account", "physics", "account", "physics"),
    ("account", "  proj-1_a.b  ", "account", "proj-1_a.b"),
    ("qos", "high", "qos", "high"),
    ("wckey", "*default", "wckey", "*default"),
    ("reservation", "maint", "reservation", "maint"),
    ("reservation", "resv1,resv2", "reservation", "resv1,resv2"),
    ("partition", "gpu", "partition", "gpu"),
    ("partition", "gpu,cpu", "partition", "gpu,cpu"),
    ("constraints", "a100", "constraints", "a100"),
    ("constraints", "intel&ib", "constraints", "intel&ib"),
    ("constraints", "rack1|rack2", "constraints", "rack1|rack2"),
    ("constraints", "a,b", "constraints", "a,b"),
    ("constraints", "[rack1|rack2|rack3]", "constraints", "[rack1|rack2|rack3]"),
    ("constraints", "[rack1*2&rack2*4]", "constraints", "[rack1*2&rack2*4]"),
    ("constraints", "(a|b)&c", "constraints", "(a|b)&c"),
    ("constraints", "(a|b)&[c|d]", "constraints", "(a|b)&[c|d]"),
    ("constraints", "knl*2", "constraints", "knl*2"),
    ("licenses", "matlab", "licenses", "matlab"),
    ("licenses", "matlab:2,ansys", "licenses", "matlab:2,ansys"),
    ("licenses", "fluent@db:4", "licenses", "fluent@db:4"),
    ("cpu-per-task", "4", "cpus_per_task", 4),
    ("cpu-per-task", "+4", "cpus_per_task", 4),
    ("cpu-per-task", "1500m", "cpus_per_task", 2),
    ("cpu-per-task", "100m", "cpus_per_task", 1),
    ("cpu-per-task", "2.5", "cpus_per_task", 3),
    ("cpu-per-task", "65533", "cpus_per_task", 65533),
    ("min-nodes", "1", "nodes", 1),
    ("min-nodes", "64", "nodes", 64),
    ("max-nodes", "2147483647", "max_nodes", 2147483647),
    ("priority", "1", "priority", 1),
    ("priority", "4294", "priority", 4294),
    ("user-id", "0", "user_id", 0),
    ("user-id", "1000", "user_id", 1000),
    ("group-id", "2000", "group_id", 2000),
    ("mem-per-node", "4096", "memory_per_node_mib", 4096),
    ("mem-per-node", "4096M", "memory_per_node_mib", 4096),
    ("mem-per-node", "4096m", "memory_per_node_mib", 4096),
    ("mem-per-node", "4G", "memory_per_node_mib", 4096),
    ("mem-per-node", "4g", "memory_per_node_mib", 4096),
    ("mem-per-node", "1T", "memory_per_node_mib", 1048576),
    ("mem-per-node", "1P", "memory_per_node_mib", 1024**3),
    ("mem-per-node", "2048K", "memory_per_node_mib", 2),
    ("mem-per-node", "1K", "memory_per_node_mib", 1),
    ("mem-per-node", "1.5G", "memory_per_node_mib", 1536),
    ("mem-per-node", "4Gi", "memory_per_node_mib", 4096),
    ("mem-per-node", "512Mi", "memory_per_node_mib", 512),
    ("mem-per-node", "1Ki", "memory_per_node_mib", 1),
    ("mem-per-node", "1Ti", "memory_per_node_mib", 1048576),
    ("mem-per-node", "0.5Gi", "memory_per_node_mib", 512),
    ("timelimit", "90", "time_limit_minutes", 90),
    ("timelimit", " 90 ", "time_limit_minutes", 90),
    ("timelimit", "1", "time_limit_minutes", 1),
    ("timelimit", "10:00", "time_limit_minutes", 10),  # MM:SS
    ("timelimit", "10:01", "time_limit_minutes", 11),  # seconds round up
    ("timelimit", "0:30", "time_limit_minutes", 1),
    ("timelimit", "90:00", "time_limit_minutes", 90),
    ("timelimit", "01:30:00", "time_limit_minutes", 90),  # HH:MM:SS
    ("timelimit", "48:00:00", "time_limit_minutes", 2880),
    ("timelimit", "1-12", "time_limit_minutes", 2160),  # D-HH
    ("timelimit", "2-02:30", "time_limit_minutes", 3030),  # D-HH:MM
    ("timelimit", "1-00:00:01", "time_limit_minutes", 1441),  # D-HH:MM:SS
    ("timelimit", "0-0:1:0", "time_limit_minutes", 1),
    ("exclusive", "true", "exclusive", True),
    ("exclusive", "TRUE", "exclusive", True),
    ("exclusive", "false", "exclusive", False),
    ("exclusive", " False ", "exclusive", False),
    ("gres", "gpu:2", "gres", "gres/gpu:2"),
    ("gres", "gpu", "gres", "gres/gpu:1"),
    ("gres", "gpu:a100", "gres", "gres/gpu:a100:1"),
    ("gres", "gpu:a100:1", "gres", "gres/gpu:a100:1"),
    ("gres", "gpu:tesla_v100-sxm2:4", "gres", "gres/gpu:tesla_v100-sxm2:4"),
    ("gres", "gpu:1,shard:2", "gres", "gres/gpu:1,gres/shard:2"),
    ("gres", "gres/gpu:2", "gres", "gres/gpu:2"),
    ("gres", "gpu:02", "gres", "gres/gpu:2"),
    ("job-name", "train", "job_name", "train"),
    ("job-name", "my job (v2)", "job_name", "my job (v2)"),
    ("job-name", "entraînement-été", "job_name", "entraînement-été"),
    ("job-name", "x" * 200, "job_name", "x" * 200),
]


@pytest.mark.parametrize(("suffix", "value", "fieldname", "expected"), VALID)
def test_valid_annotation(suffix: str, value: str, fieldname: str, expected: object) -> None:
    ann = {P + suffix: value}
    assert validate_annotations(ann) == []
    assert parse_annotations(ann) == {fieldname: expected}


# --- invalid forms ------------------------------------------------------------------------------

INVALID: list[tuple[str, str, str]] = [
    # (suffix, bad value, a fragment the message must contain)
    ("account", "", "one Slurm name"),
    ("account", "a b", "without whitespace"),
    ("account", "a,b", "commas"),
    ("account", 'a"b', "quotes"),
    ("qos", "hi\tgh", "one Slurm name"),
    ("wckey", "x\\y", "backslashes"),
    ("reservation", "r1,,r2", "comma-separated list"),
    ("reservation", "r1,r1", "more than once"),
    ("partition", "", "partition name"),
    ("partition", "gpu,", "empty items"),
    ("partition", "gpu, cpu", "without whitespace"),
    ("partition", "a,a", "more than once"),
    ("constraints", "", "empty"),
    ("constraints", "   ", "empty"),
    ("constraints", "a & b", "whitespace"),
    ("constraints", "a&(b|c", "unbalanced '('"),
    ("constraints", "a&b)", "unbalanced ')'"),
    ("constraints", "[a|b", "unbalanced '['"),
    ("constraints", "(a]", "unbalanced ']'"),
    ("constraints", "((a|b))", "nested parentheses"),
    ("constraints", "([a|b])", "inside parentheses"),
    ("constraints", "[a|b]&[c|d]", "one set of brackets"),
    ("constraints", "a&&b", "feature is missing before '&'"),
    ("constraints", "|a", "feature is missing before '|'"),
    ("constraints", "a|", "ends with an operator"),
    ("constraints", "()", "feature is missing before ')'"),
    ("constraints", "a(b)", "operator is missing before '('"),
    ("constraints", "(a)b", "operator is missing before 'b'"),
    ("constraints", "a*", "node count >= 1"),
    ("constraints", "a*0", "node count >= 1"),
    ("constraints", "*2", "must follow a feature"),
    ("constraints", "(a|b)*2", "must follow a feature"),
    ("constraints", "a*2*3", "must follow a feature"),
    ("licenses", "", "name[:count]"),
    ("licenses", "matlab:0", "counts >= 1"),
    ("licenses", "matlab:x", "name[:count]"),
    ("licenses", "matlab,,ansys", "name[:count]"),
    ("licenses", "a b", "name[:count]"),
    ("licenses", "matlab,matlab:2", "more than once"),
    ("cpu-per-task", "", "whole number of cpus"),
    ("cpu-per-task", "four", "whole number of cpus"),
    ("cpu-per-task", "0", "out of range"),
    ("cpu-per-task", "-2", "out of range"),
    ("cpu-per-task", "65534", "out of range"),
    ("min-nodes", "0", "out of range"),
    ("min-nodes", "-1", "whole number of nodes"),
    ("min-nodes", "1.5", "whole number of nodes"),
    ("min-nodes", "1e3", "whole number of nodes"),
    ("min-nodes", "1_000", "whole number of nodes"),
    ("min-nodes", "\u0663", "whole number of nodes"),  # Arabic-Indic digit three
    ("max-nodes", "2147483648", "out of range"),
    ("max-nodes", "two", "whole number of nodes"),
    ("priority", "0", "hold the job"),
    ("priority", "000", "hold the job"),
    ("priority", "-5", "whole number"),
    ("priority", "high", "whole number"),
    ("priority", "2147483648", "out of range"),
    ("user-id", "alice", "numeric id"),
    ("user-id", "-1", "numeric id"),
    ("group-id", "4294967295", "out of range"),
    ("mem-per-node", "", "size in MiB"),
    ("mem-per-node", "0", "at least 1 MiB"),
    ("mem-per-node", "0G", "at least 1 MiB"),
    ("mem-per-node", "4GB", "size in MiB"),
    ("mem-per-node", "4 G", "size in MiB"),
    ("mem-per-node", "-4G", "size in MiB"),
    ("mem-per-node", "4gi", "size in MiB"),
    ("mem-per-node", "4X", "size in MiB"),
    ("mem-per-node", "1e9", "size in MiB"),
    ("mem-per-node", "9999999999Ei", "too large"),
    ("timelimit", "ten", "whole number of minutes >= 1"),
    ("timelimit", "", "whole number of minutes >= 1"),
    ("timelimit", "0", 'means "no limit"'),
    ("timelimit", "00:00", 'means "no limit"'),
    ("timelimit", "-5", "whole number of minutes"),
    ("timelimit", "1.5", "whole number of minutes"),
    ("timelimit", "UNLIMITED", "no limit cannot be requested"),
    ("timelimit", "infinite", "no limit cannot be requested"),
    ("timelimit", "10:60", "seconds field (60) must be below 60"),
    ("timelimit", "1:60:00", "minutes field (60) must be below 60"),
    ("timelimit", "1-24", "hours field (24) must be below 24"),
    ("timelimit", "1-2:3:4:5", "Slurm time"),
    ("timelimit", "1:2:3:4", "Slurm time"),
    ("timelimit", "1-", "Slurm time"),
    ("timelimit", "10:123", "Slurm time"),
    ("timelimit", "99999999999", "too long"),
    ("exclusive", "yes", '"true"'),
    ("exclusive", "", '"false"'),
    ("exclusive", "1", '"true"'),
    ("gres", "", "name[:type][:count]"),
    ("gres", "gpu:0", "counts >= 1"),
    ("gres", "gpu:a100:0", "counts >= 1"),
    ("gres", "gpu:a100:x", "name[:type][:count]"),
    ("gres", "gpu::1", "name[:type][:count]"),
    ("gres", "gpu:a:b:1", "name[:type][:count]"),
    ("gres", "2:gpu", "name[:type][:count]"),
    ("gres", "gpu:1,", "name[:type][:count]"),
    ("gres", "gpu 2", "name[:type][:count]"),
    ("gres", "gpu:1,gpu:2", "more than once"),
    ("job-name", "", "non-empty"),
    ("job-name", "   ", "non-empty"),
    ("job-name", "x" * 201, "at most 200"),
    ("job-name", "a\nb", "one line"),
    ("job-name", "a\x07b", "control characters"),
    ("job-name", "a\u2028b", "one line"),
    ("job-name", "a\x85b", "one line"),
]


@pytest.mark.parametrize(("suffix", "value", "fragment"), INVALID)
def test_invalid_annotation(suffix: str, value: str, fragment: str) -> None:
    key = P + suffix
    errors = validate_annotations({key: value})
    assert len(errors) == 1, errors
    err = errors[0]
    assert (err.key, err.value) == (key, value)
    assert fragment in err.message
    text = str(err)
    assert text.startswith(f"{key}: ")
    assert "is not valid: " in text
    with pytest.raises(ValueError, match="invalid Slurm job annotations"):
        parse_annotations({key: value})


def test_error_text_names_key_value_and_expected_form() -> None:
    (err,) = validate_annotations({names.ANN_TIMELIMIT: "ten"})
    assert str(err).startswith(
        'slurmjob.slinky.slurm.net/timelimit: "ten" is not valid: expected a whole number of minutes >= 1, e.g. "90"'
    )


def test_error_text_escapes_newlines_and_shortens_long_values() -> None:
    (err,) = validate_annotations({names.ANN_JOB_NAME: "a\nb"})
    assert '"a\\nb"' in str(err) and "\n" not in str(err)
    (err,) = validate_annotations({names.ANN_ACCOUNT: "x " * 200})
    assert "..." in str(err) and len(str(err)) < 300


def test_annotation_error_is_frozen() -> None:
    err = AnnotationError("k", "v", "m")
    with pytest.raises(AttributeError):
        err.key = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        (P + "timelimt", P + "timelimit"),
        (P + "time-limit", P + "timelimit"),
        (P + "cpus-per-task", P + "cpu-per-task"),
        (P + "mem_per_node", P + "mem-per-node"),
        (P + "partitions", P + "partition"),
        (P + "minnodes", P + "min-nodes"),
        (P + "userid", P + "user-id"),
    ],
)
def test_unknown_key_suggests_the_closest(key: str, suggestion: str) -> None:
    (err,) = validate_annotations({key: "1"})
    assert err.key == key
    assert f'did you mean "{suggestion}"?' in err.message


@pytest.mark.parametrize("key", [P + "frobnicate", P])
def test_unknown_key_without_a_close_match_lists_the_keys(key: str) -> None:
    (err,) = validate_annotations({key: "1"})
    assert "unknown key" in err.message
    assert "timelimit" in err.message and "did you mean" not in err.message


def test_other_annotations_are_ignored() -> None:
    ann = {
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "slinky.slurm.net/slurm-node": "n1",
        "slurmjob.example.com/timelimit": "ten",
        names.ANN_QOS: "high",
    }
    assert validate_annotations(ann) == []
    assert parse_annotations(ann) == {"qos": "high"}


def test_all_errors_are_reported_at_once() -> None:
    ann = {names.ANN_TIMELIMIT: "ten", names.ANN_PRIORITY: "x", P + "acount": "a", names.ANN_QOS: "ok"}
    errors = validate_annotations(ann)
    assert {e.key for e in errors} == {names.ANN_TIMELIMIT, names.ANN_PRIORITY, P + "acount"}
    with pytest.raises(ValueError) as info:
        parse_annotations(ann)
    for e in errors:
        assert str(e) in str(info.value)


@pytest.mark.parametrize(
    ("lo", "hi", "ok"),
    [("2", "4", True), ("4", "4", True), ("5", "4", False)],
)
def test_min_nodes_not_above_max_nodes(lo: str, hi: str, ok: bool) -> None:
    errors = validate_annotations({names.ANN_MIN_NODES: lo, names.ANN_MAX_NODES: hi})
    if ok:
        assert errors == []
    else:
        (err,) = errors
        assert err.key == names.ANN_MAX_NODES and names.ANN_MIN_NODES in err.message


def test_full_set_parses() -> None:
    ann = {
        names.ANN_ACCOUNT: "physics",
        names.ANN_CONSTRAINTS: "a100&ib",
        names.ANN_CPU_PER_TASK: "8",
        names.ANN_EXCLUSIVE: "false",
        names.ANN_GRES: "gpu:a100:2",
        names.ANN_GROUP_ID: "100",
        names.ANN_JOB_NAME: "train",
        names.ANN_LICENSES: "matlab:1",
        names.ANN_MAX_NODES: "4",
        names.ANN_MEM_PER_NODE: "16Gi",
        names.ANN_MIN_NODES: "2",
        names.ANN_PARTITION: "gpu",
        names.ANN_PRIORITY: "10",
        names.ANN_QOS: "high",
        names.ANN_RESERVATION: "resv",
        names.ANN_TIMELIMIT: "2:00:00",
        names.ANN_USER_ID: "1000",
        names.ANN_WCKEY: "ml",
    }
    values = parse_annotations(ann)
    assert set(values) == set(ANNOTATION_FIELDS.values())
    req = JobRequest.model_validate(values)
    assert req.crd_dict() == {
        "account": "physics",
        "constraints": "a100&ib",
        "cpusPerTask": 8,
        "exclusive": False,
        "gres": "gres/gpu:a100:2",
        "groupId": 100,
        "jobName": "train",
        "licenses": "matlab:1",
        "maxNodes": 4,
        "memoryPerNodeMib": 16384,
        "nodes": 2,
        "partition": "gpu",
        "priority": 10,
        "qos": "high",
        "reservation": "resv",
        "timeLimitMinutes": 120,
        "userId": 1000,
        "wckey": "ml",
        "tasksPerNode": 1,
    }


# --- Kubernetes quantities ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", Fraction(1)),
        ("0", Fraction(0)),
        ("500m", Fraction(1, 2)),
        ("1500m", Fraction(3, 2)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+2", Fraction(2)),
        ("-2", Fraction(-2)),
        ("100n", Fraction(1, 10**7)),
        ("100u", Fraction(1, 10**4)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1.5e-3", Fraction(3, 2000)),
        ("2e+2", Fraction(200)),
        ("129e6", Fraction(129 * 10**6)),
        (3, Fraction(3)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parse_quantity(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "1Gb", "1 Gi", "1gi", "1K", "Mi", "1.2.3", "1e", "1e1.5", "0x10", "1e400", "--1"]
)
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


# --- pod resources --------------------------------------------------------------------------

RESOURCE_CASES: list[tuple[str, dict[str, Any], PodResources]] = [
    ("empty pod: 1 cpu, no memory", _pod(_c()), PodResources(1, None, {})),
    ("no resources key", {"spec": {"containers": [{"name": "c"}]}}, PodResources(1, None, {})),
    ("null requests", _pod({"name": "c", "resources": {"requests": None}}), PodResources(1, None, {})),
    ("request only", _pod(_c({"cpu": "2", "memory": "1Gi"})), PodResources(2, 1024, {})),
    ("limit alone is the request", _pod(_c(None, {"cpu": "3", "memory": "2Gi"})), PodResources(3, 2048, {})),
    (
        "max of request and limit",
        _pod(_c({"cpu": "1", "memory": "3Gi"}, {"cpu": "4", "memory": "1Gi"})),
        PodResources(4, 3072, {}),
    ),
    ("millicpu rounds up", _pod(_c({"cpu": "100m"})), PodResources(1, None, {})),
    ("1001m rounds up", _pod(_c({"cpu": "1001m"})), PodResources(2, None, {})),
    ("decimal cpu", _pod(_c({"cpu": "2.5"})), PodResources(3, None, {})),
    ("numeric cpu", _pod(_c({"cpu": 2})), PodResources(2, None, {})),
    ("decimal memory rounds up", _pod(_c({"memory": "1G"})), PodResources(1, 954, {})),
    ("e-notation memory", _pod(_c({"memory": "129e6"})), PodResources(1, 124, {})),
    ("memory in k", _pod(_c({"memory": "1k"})), PodResources(1, 1, {})),
    ("memory in Ki", _pod(_c({"memory": "2048Ki"})), PodResources(1, 2, {})),
    ("zero memory is unset", _pod(_c({"memory": "0"})), PodResources(1, None, {})),
    (
        "app containers add up",
        _pod(_c({"cpu": "500m", "memory": "100Mi"}), _c({"cpu": "700m", "memory": "200Mi"}, name="d")),
        PodResources(2, 300, {}),
    ),
    (
        "larger init container wins",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), init=[_c({"cpu": "4", "memory": "512Mi"}, name="i")]),
        PodResources(4, 1024, {}),
    ),
    (
        "init containers do not add up",
        _pod(_c({"cpu": "1"}), init=[_c({"cpu": "3"}, name="i1"), _c({"cpu": "3"}, name="i2")]),
        PodResources(3, None, {}),
    ),
    (
        "sidecar adds to app containers",
        _pod(
            _c({"cpu": "1", "memory": "1Gi"}),
            init=[_c({"cpu": "1", "memory": "1Gi"}, name="s", restart="Always")],
        ),
        PodResources(2, 2048, {}),
    ),
    (
        "init after a sidecar runs beside it",
        _pod(
            _c({"cpu": "1"}),
            init=[_c({"cpu": "2"}, name="s", restart="Always"), _c({"cpu": "2"}, name="i")],
        ),
        PodResources(4, None, {}),
    ),
    (
        "init before a sidecar runs alone",
        _pod(
            _c({"cpu": "1"}),
            init=[_c({"cpu": "2"}, name="i"), _c({"cpu": "2"}, name="s", restart="Always")],
        ),
        PodResources(3, None, {}),
    ),
    (
        "restartPolicy other than Always is a plain init container",
        _pod(_c({"cpu": "1"}), init=[_c({"cpu": "1"}, name="i", restart="Never")]),
        PodResources(1, None, {}),
    ),
    (
        "overhead comes on top",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), overhead={"cpu": "250m", "memory": "120Mi"}),
        PodResources(2, 1144, {}),
    ),
    (
        "pod-level resources replace the container total",
        _pod(_c({"cpu": "1", "memory": "1Gi"}), pod_level={"limits": {"cpu": "6", "memory": "8Gi"}}),
        PodResources(6, 8192, {}),
    ),
    (
        "pod-level memory only keeps container cpu",
        _pod(_c({"cpu": "3"}), pod_level={"requests": {"memory": "2Gi"}}),
        PodResources(3, 2048, {}),
    ),
    (
        "nvidia gpu limit",
        _pod(_c(None, {"nvidia.com/gpu": "2"})),
        PodResources(1, None, {"nvidia.com/gpu": 2}),
    ),
    ("amd gpu", _pod(_c({"amd.com/gpu": 1}, {"amd.com/gpu": 1})), PodResources(1, None, {"amd.com/gpu": 1})),
    (
        "gpus add across containers",
        _pod(_c(None, {"nvidia.com/gpu": "1"}), _c(None, {"nvidia.com/gpu": "2"}, name="d")),
        PodResources(1, None, {"nvidia.com/gpu": 3}),
    ),
    (
        "gpu init container larger than app",
        _pod(_c(None, {"nvidia.com/gpu": "1"}), init=[_c(None, {"nvidia.com/gpu": "4"}, name="i")]),
        PodResources(1, None, {"nvidia.com/gpu": 4}),
    ),
    ("zero gpus are omitted", _pod(_c(None, {"nvidia.com/gpu": "0"})), PodResources(1, None, {})),
    (
        "other extended resources are ignored",
        _pod(_c(None, {"example.com/foo": "3"})),
        PodResources(1, None, {}),
    ),
]


@pytest.mark.parametrize(("pod", "expected"), [c[1:] for c in RESOURCE_CASES], ids=[c[0] for c in RESOURCE_CASES])
def test_pod_resources(pod: dict[str, Any], expected: PodResources) -> None:
    assert pod_resources(pod) == expected


@pytest.mark.parametrize(
    ("pod", "fragment"),
    [
        (_pod(_c({"cpu": "lots"}, name="app")), "pod ns/p: container 'app': resources.requests.cpu"),
        (_pod(_c(None, {"memory": "1GB"})), "resources.limits.memory"),
        (_pod(_c(), init=[_c({"cpu": "x"}, name="init")]), "init container 'init'"),
        (_pod(_c({"cpu": "-1"})), "negative"),
        (_pod(_c(), overhead={"cpu": "?"}), "spec.overhead"),
        (_pod(_c(), pod_level={"limits": {"memory": "big"}}), "spec.resources"),
    ],
)
def test_pod_resources_bad_quantity(pod: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        pod_resources(pod)
    assert fragment in str(info.value)


# --- deadlines ------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "minutes"), [(1, 1), (59, 1), (60, 1), (61, 2), (3600, 60), (3601, 61)])
def test_time_limit_from_deadline(seconds: int, minutes: int) -> None:
    assert time_limit_from_deadline(seconds) == minutes


@pytest.mark.parametrize("seconds", [0, -5])
def test_time_limit_from_deadline_rejects_non_positive(seconds: int) -> None:
    with pytest.raises(ValueError):
        time_limit_from_deadline(seconds)


# --- job_request ----------------------------------------------------------------------------

CFG = Config()


def test_single_pod_defaults() -> None:
    req = job_request([_pod(_c({"cpu": "2", "memory": "1Gi"}))], config=CFG)
    assert req == JobRequest(
        partition="slurm-bridge", nodes=1, tasks_per_node=1, cpus_per_task=2, memory_per_node_mib=1024
    )
    assert req.mcs_label is None and req.gres is None and req.max_nodes is None


def test_config_partition_and_mcs_label() -> None:
    req = job_request([_pod(_c())], config=Config(partition="k8s", mcsLabel="kube"))
    assert (req.partition, req.mcs_label) == ("k8s", "kube")


def test_group_one_node_per_pod_sized_for_the_largest() -> None:
    pods = [
        _pod(_c({"cpu": "1", "memory": "4Gi"}), name="a"),
        _pod(_c({"cpu": "8", "memory": "1Gi"}, {"nvidia.com/gpu": "1"}), name="b"),
        _pod(_c({"cpu": "2"}, {"amd.com/gpu": "2"}), name="c"),
    ]
    req = job_request(pods, config=CFG)
    assert (req.nodes, req.tasks_per_node, req.cpus_per_task) == (3, 1, 8)
    assert req.memory_per_node_mib == 4096
    assert req.gres == "gres/gpu:2"


def test_gpu_vendors_add_up_within_a_pod() -> None:
    req = job_request([_pod(_c(None, {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}))], config=CFG)
    assert req.gres == "gres/gpu:2"


def test_precedence_defaults_then_derived_then_annotations() -> None:
    pod = _pod(_c({"cpu": "2", "memory": "1Gi"}, {"nvidia.com/gpu": "1"}))
    derived = {"time_limit_minutes": 30, "job_name": "job-from-workload", "partition": "derived"}
    req = job_request([pod], config=CFG, derived=derived)
    assert (req.time_limit_minutes, req.job_name, req.partition) == (30, "job-from-workload", "derived")

    ann = {
        names.ANN_TIMELIMIT: "90",
        names.ANN_PARTITION: "gpu",
        names.ANN_CPU_PER_TASK: "1",
        names.ANN_MEM_PER_NODE: "512Mi",
        names.ANN_GRES: "gpu:a100:4",
    }
    req = job_request([pod], config=CFG, derived=derived, annotations=ann)
    assert req.time_limit_minutes == 90
    assert req.job_name == "job-from-workload"  # not annotated: derived value stays
    assert req.partition == "gpu"
    assert (req.cpus_per_task, req.memory_per_node_mib, req.gres) == (1, 512, "gres/gpu:a100:4")


def test_annotation_overrides_config_mcs_free_fields() -> None:
    ann = {names.ANN_EXCLUSIVE: "false", names.ANN_ACCOUNT: "acct"}
    req = job_request([_pod(_c())], config=Config(mcsLabel="kube"), annotations=ann)
    assert (req.exclusive, req.account, req.mcs_label) == (False, "acct", "kube")


@pytest.mark.parametrize(
    ("pods", "ann", "nodes", "max_nodes"),
    [
        (1, {}, 1, None),
        (3, {}, 3, None),
        (3, {names.ANN_MIN_NODES: "3"}, 3, None),
        (3, {names.ANN_MIN_NODES: "5"}, 5, None),
        (3, {names.ANN_MAX_NODES: "3"}, 3, 3),
        (3, {names.ANN_MAX_NODES: "8"}, 3, 8),
        (2, {names.ANN_MIN_NODES: "2", names.ANN_MAX_NODES: "4"}, 2, 4),
    ],
)
def test_node_counts(pods: int, ann: dict[str, str], nodes: int, max_nodes: int | None) -> None:
    group = [_pod(_c(), name=f"p{i}") for i in range(pods)]
    req = job_request(group, config=CFG, annotations=ann)
    assert (req.nodes, req.max_nodes) == (nodes, max_nodes)


@pytest.mark.parametrize(
    ("pods", "ann", "fragment"),
    [
        (3, {names.ANN_MIN_NODES: "2"}, f"{names.ANN_MIN_NODES} (2) is below the number of pods (3)"),
        (3, {names.ANN_MAX_NODES: "2"}, f"{names.ANN_MAX_NODES} (2) is below the node count (3)"),
        (2, {names.ANN_MIN_NODES: "4", names.ANN_MAX_NODES: "3"}, "invalid Slurm job annotations"),
        (1, {names.ANN_TIMELIMIT: "ten"}, "timelimit"),
    ],
)
def test_node_count_errors(pods: int, ann: dict[str, str], fragment: str) -> None:
    group = [_pod(_c(), name=f"p{i}") for i in range(pods)]
    with pytest.raises(ValueError) as info:
        job_request(group, config=CFG, annotations=ann)
    assert fragment in str(info.value)


def test_derived_node_count_below_pods_is_an_error() -> None:
    with pytest.raises(ValueError, match="derived node count"):
        job_request([_pod(_c()), _pod(_c())], config=CFG, derived={"nodes": 1})


def test_no_pods_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one pod"):
        job_request([], config=CFG)


def test_unknown_derived_field_is_an_error() -> None:
    with pytest.raises(ValueError, match="time_limit"):
        job_request([_pod(_c())], config=CFG, derived={"time_limit": 5})


def test_invalid_derived_value_is_an_error() -> None:
    with pytest.raises(ValueError):
        job_request([_pod(_c())], config=CFG, derived={"time_limit_minutes": 0})


def test_job_deadline_flows_through_derived() -> None:
    derived = {"time_limit_minutes": time_limit_from_deadline(601)}
    assert job_request([_pod(_c())], config=CFG, derived=derived).time_limit_minutes == 11


def test_inputs_are_not_modified() -> None:
    pod = _pod(_c({"cpu": "1"}))
    ann = {names.ANN_TIMELIMIT: "5"}
    derived = {"job_name": "x"}
    before = (repr(pod), repr(ann), repr(derived))
    job_request([pod], config=CFG, derived=derived, annotations=ann)
    assert (repr(pod), repr(ann), repr(derived)) == before


# --- placement: nodeSelector and node affinity ------------------------------------------------

HOST = names.LABEL_HOSTNAME
FEATURE = names.LABEL_NODE_FEATURE_PREFIX
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _placed(
    selector: dict[str, str] | None = None, *terms: list[dict[str, Any]], name: str = "p", **extra: Any
) -> dict[str, Any]:
    """A pod with a nodeSelector and required node affinity terms (each a list of expressions)."""
    pod = _pod(_c(), name=name)
    if selector is not None:
        pod["spec"]["nodeSelector"] = selector
    if terms:
        selector_terms = [{"matchExpressions": t} for t in terms]
        pod["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": selector_terms}}}
    pod["spec"].update(extra)
    return pod


def _in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def _not_in(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "NotIn", "values": list(values)}


def test_no_placement_sends_nothing() -> None:
    req = job_request([_pod(_c())], config=CFG, annotations={names.ANN_CONSTRAINTS: "a|b"})
    assert (req.required_nodes, req.excluded_nodes, req.constraints) == (None, None, "a|b")


def test_hostname_node_selector_is_a_required_node() -> None:
    req = job_request([_placed({HOST: "kwok-node-2"})], config=CFG)
    assert (req.required_nodes, req.excluded_nodes) == (["kwok-node-2"], None)
    assert req.crd_dict()["requiredNodes"] == ["kwok-node-2"]


def test_hostname_not_in_is_excluded_nodes() -> None:
    req = job_request([_placed(None, [_not_in(HOST, "n2", "n1")])], config=CFG)
    assert (req.required_nodes, req.excluded_nodes) == (None, ["n1", "n2"])
    assert req.crd_dict()["excludedNodes"] == ["n1", "n2"]


def test_slurm_nodename_label_is_a_required_node() -> None:
    req = job_request([_placed(None, [_in(names.LABEL_SLURM_NODENAME, "sn-7")])], config=CFG)
    assert req.required_nodes == ["sn-7"]


@pytest.mark.parametrize(
    ("annotation", "constraints"),
    [
        (None, "gpu&ib"),
        ("a100", "a100&gpu&ib"),
        ("a100|h100", "(a100|h100)&gpu&ib"),
        ("[rack1|rack2]", "[rack1|rack2]&gpu&ib"),
    ],
)
def test_feature_labels_are_anded_with_the_constraints_annotation(annotation: str | None, constraints: str) -> None:
    pod = _placed({FEATURE + "gpu": "true"}, [{"key": FEATURE + "ib", "operator": "Exists"}])
    ann = {} if annotation is None else {names.ANN_CONSTRAINTS: annotation}
    assert job_request([pod], config=CFG, annotations=ann).constraints == constraints


def test_features_that_cannot_be_combined_with_the_annotation_are_refused() -> None:
    pod = _placed(None, [_in(FEATURE + "gpu", "true")], [_in(FEATURE + "a100", "true"), _in(FEATURE + "ib", "true")])
    assert job_request([pod], config=CFG).constraints == "gpu|(a100&ib)"
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG, annotations={names.ANN_CONSTRAINTS: "x|y"})
    assert names.ANN_CONSTRAINTS in str(info.value) and "nesting parentheses" in str(info.value)


def test_a_required_node_list_must_name_as_many_nodes_as_the_job_holds() -> None:
    pod = _placed(None, [_in(HOST, "a", "b")])
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG)
    message = str(info.value)
    assert "allow 2 node(s) (a, b)" in message and "holds 1 node(s)" in message
    assert f"{FEATURE}<feature>" in message
    # Two nodes for one pod: Slurm allocates both, and the pod runs on one of them.
    req = job_request([pod], config=CFG, annotations={names.ANN_MAX_NODES: "2"})
    assert (req.nodes, req.max_nodes, req.required_nodes) == (1, 2, ["a", "b"])
    # A gang of two pods that may each use a or b: the job holds exactly a and b.
    pods = [_placed(None, [_in(HOST, "a", "b")], name=f"p{i}") for i in range(2)]
    assert job_request(pods, config=CFG).required_nodes == ["a", "b"]
    # A gang counted before all members exist (derived nodes) holds that many nodes.
    with pytest.raises(ValueError, match="holds 3 node"):
        job_request(pods, config=CFG, derived={"nodes": 3})


def test_a_refused_placement_names_the_pod_and_the_field() -> None:
    pod = _placed(None, topologySpreadConstraints=[{"maxSkew": 1}])
    with pytest.raises(ValueError) as info:
        job_request([pod], config=CFG)
    assert str(info.value).startswith("pod ns/p: spec.topologySpreadConstraints: ")


# --- a gang: one job whose every node suits every pod --------------------------------------------


def test_gang_members_node_lists_intersect() -> None:
    pods = [_placed(None, [_in(HOST, "a", "b", "c")], name="p0"), _placed(None, [_in(HOST, "b", "c")], name="p1")]
    assert job_request(pods, config=CFG).required_nodes == ["b", "c"]


def test_gang_members_excluded_nodes_add_up() -> None:
    pods = [_placed(None, [_not_in(HOST, "x")], name="p0"), _placed(None, [_not_in(HOST, "y")], name="p1")]
    assert job_request(pods, config=CFG).excluded_nodes == ["x", "y"]


def test_gang_members_features_are_anded() -> None:
    pods = [
        _placed({FEATURE + "gpu": "true"}, name="p0"),
        _placed(name="p1"),
        _placed({FEATURE + "ib": "true"}, name="p2"),
    ]
    assert job_request(pods, config=CFG).constraints == "gpu&ib"


def test_gang_members_without_a_common_node_are_refused() -> None:
    pods = [_placed({HOST: "a"}, name="p0"), _placed({HOST: "b"}, name="p1")]
    with pytest.raises(ValueError, match="no node in common"):
        job_request(pods, config=CFG)


def test_gang_with_one_refused_member_is_refused() -> None:
    bad = _placed(None, affinity={"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST}]}}, name="p1")
    with pytest.raises(ValueError) as info:
        job_request([_placed(name="p0"), bad], config=CFG)
    assert str(info.value).startswith("pod ns/p1: spec.affinity.podAntiAffinity: ")


# --- the admission form of the same checks ---------------------------------------------------------


def test_placement_request_problems() -> None:
    two = Placement.of(nodes=["a", "b"])
    assert placement_request_problems([two], {}, pods=1) != []
    assert placement_request_problems([two], {names.ANN_MIN_NODES: "2"}, pods=1) == []
    assert placement_request_problems([two], {}, pods=None) == []  # a gang's size is not known here
    assert placement_request_problems([two, Placement.of(nodes=["c", "d"])], {}, pods=None) != []
    gpu = Placement.of(features=(frozenset({"gpu"}), frozenset({"a100", "ib"})))
    assert placement_request_problems([gpu], {names.ANN_CONSTRAINTS: "x|y"}, pods=1) != []
    # Invalid annotations are validate_annotations' to report.
    assert placement_request_problems([two], {names.ANN_MIN_NODES: "zero"}, pods=1) == []
