"""The slurmjob annotations -> JobRequest field values (slurm_bridge/rules/jobannotations.py): every form,
valid and invalid, and the error texts."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.rules.jobannotations import (
    ANNOTATION_FIELDS,
    AnnotationError,
    parse_annotations,
    validate_annotations,
)
from slurm_bridge.slurm.models import JobRequest

pytestmark = pytest.mark.unit

P = names.SLURMJOB_PREFIX


# --- the annotation table matches names/annotations.py --------------------------------------------------


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
    ("node-sharing", "exclusive", "node_sharing", "exclusive"),
    ("node-sharing", "timeShared", "node_sharing", "timeShared"),
    ("node-sharing", "coResident", "node_sharing", "coResident"),
    ("node-sharing", " CORESIDENT ", "node_sharing", "coResident"),
    ("node-sharing", "timeshared", "node_sharing", "timeShared"),
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
    ("topology", "topology.slinky.slurm.net/block", "topology", "block"),
    ("topology", " topology.slinky.slurm.net/" + "s" * 63 + " ", "topology", "s" * 63),
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
    ("node-sharing", "shared", '"coResident"'),
    ("node-sharing", "", '"exclusive" (whole nodes)'),
    ("node-sharing", "co-resident", '"timeShared"'),
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
    ("topology", "block", "topology.slinky.slurm.net/<topology>"),
    ("topology", "topology.kubernetes.io/zone", "cannot place a gang by 'topology.kubernetes.io/zone'"),
    ("topology", "topology.slinky.slurm.net/", "use such a key"),
    ("topology", "topology.slinky.slurm.net/" + "s" * 64, "use such a key"),
    ("topology", "topology.slinky.slurm.net/a/b", "use such a key"),
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
        names.ANN_NODE_SHARING: "timeshared",
        names.ANN_PARTITION: "gpu",
        names.ANN_PRIORITY: "10",
        names.ANN_QOS: "high",
        names.ANN_RESERVATION: "resv",
        names.ANN_TIMELIMIT: "2:00:00",
        names.ANN_TOPOLOGY: "topology.slinky.slurm.net/block",
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
        "nodeSharing": "timeShared",
        "partition": "gpu",
        "priority": 10,
        "qos": "high",
        "reservation": "resv",
        "timeLimitMinutes": 120,
        "topology": "block",
        "userId": 1000,
        "wckey": "ml",
        "tasksPerNode": 1,
    }
