"""The tenancy rules (slurm_bridge/rules/tenancy.py) as decision tables: policy x request -> verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from slurm_bridge import names
from slurm_bridge.rules.tenancy import (
    Match,
    TenantIndex,
    TenantPolicy,
    apply_defaults,
    check,
    gpus_per_node,
    policy_for,
    verdict,
)
from slurm_bridge.slurm.models import JobRequest

REPO = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]

TEAM_A: Obj = {
    "namespaces": ["team-a"],
    "user": {"name": "alice"},
    "group": {"id": 2001},
    "accounts": {"default": "team-a", "allowed": ["team-a", "team-a-dev"]},
    "qos": {"default": "team-a-qos", "allowed": ["team-a-qos", "normal"]},
    "partitions": ["slurm-bridge", "gpu"],
    "reservations": ["maint"],
    "wckeys": ["sim"],
    "limits": {"maxNodes": 4, "maxCPUs": 16, "maxGPUs": 2, "maxTimeLimitMinutes": 120},
}
BY_ID: Obj = {"namespaces": ["team-b"], "user": {"id": 2002}, "group": {"id": 2002}, "accounts": {"default": "team-b"}}
OPEN_ENDED: Obj = {"namespaces": ["free"], "user": {"name": "carol"}, "group": {"name": "carol"}}


def policy(spec: Obj, name: str = "team-a") -> TenantPolicy:
    return TenantPolicy.from_object({"metadata": {"name": name, "generation": 3}, "spec": spec})


# (policy spec, request fields, expected fragments of the violations; [] = allowed)
CHECK_TABLE: list[tuple[str, Obj, Obj, list[str]]] = [
    ("nothing asked", TEAM_A, {}, []),
    ("the default account", TEAM_A, {"account": "team-a"}, []),
    ("another allowed account", TEAM_A, {"account": "team-a-dev"}, []),
    ("another team's account", TEAM_A, {"account": "team-b"},
     [f"{names.ANN_ACCOUNT}: 'team-b' is not allowed by TenantPolicy team-a: allowed: team-a, team-a-dev"]),
    ("an allowed QOS", TEAM_A, {"qos": "normal"}, []),
    ("a QOS outside", TEAM_A, {"qos": "high"}, [f"{names.ANN_QOS}: 'high'", "allowed: normal, team-a-qos"]),
    ("the tenant's user by name", TEAM_A, {"user_name": "alice"}, []),
    ("root by id", TEAM_A, {"user_id": 0}, [f"{names.ANN_USER_ID}: '0'", "names the user 'alice'"]),
    ("another user by name", TEAM_A, {"user_name": "bob"},
     [f"{names.ANN_USER_ID}: 'bob'", "only the tenant's user alice"]),
    ("the tenant's group by id", TEAM_A, {"group_id": 2001}, []),
    ("another group", TEAM_A, {"group_id": 0}, [f"{names.ANN_GROUP_ID}: '0'", "only the tenant's group 2001"]),
    ("a group by name when the policy has an id", TEAM_A, {"group_name": "team-a"},
     [f"{names.ANN_GROUP_ID}: 'team-a'"]),
    ("the tenant's uid", BY_ID, {"user_id": 2002}, []),
    ("another uid", BY_ID, {"user_id": 2001}, [f"{names.ANN_USER_ID}: '2001'", "only the tenant's user 2002"]),
    ("a name when the policy has a uid", BY_ID, {"user_name": "bob"}, [f"{names.ANN_USER_ID}: 'bob'"]),
    ("a group when the policy sets none", {"namespaces": ["x"]}, {"group_id": 2002}, ["the policy sets no group"]),
    ("a user when the policy sets none", {"namespaces": ["x"]}, {"user_id": 5}, ["the policy sets no user"]),
    ("only the default account allowed", BY_ID, {"account": "team-b"}, []),
    ("not the only account", BY_ID, {"account": "team-a"}, ["allowed: team-b"]),
    ("any account without accounts", OPEN_ENDED, {"account": "anything"}, []),
    ("any QOS without qos", OPEN_ENDED, {"qos": "anything"}, []),
    ("an allowed partition", TEAM_A, {"partition": "gpu"}, []),
    ("a partition list, all allowed", TEAM_A, {"partition": "gpu,slurm-bridge"}, []),
    ("a partition list, one outside", TEAM_A, {"partition": "gpu,debug"},
     [f"{names.ANN_PARTITION}: 'gpu,debug'", "allowed: gpu, slurm-bridge"]),
    ("any partition without partitions", OPEN_ENDED, {"partition": "debug"}, []),
    ("an allowed reservation", TEAM_A, {"reservation": "maint"}, []),
    ("a reservation outside", TEAM_A, {"reservation": "other"}, [f"{names.ANN_RESERVATION}: 'other'"]),
    ("an allowed wckey", TEAM_A, {"wckey": "sim"}, []),
    ("a wckey outside", TEAM_A, {"wckey": "x"}, [f"{names.ANN_WCKEY}: 'x'", "allowed: sim"]),
    ("nodes at the cap", TEAM_A, {"nodes": 4}, []),
    ("min-nodes over the cap", TEAM_A, {"nodes": 5}, [f"{names.ANN_MIN_NODES}: '5'", "at most 4"]),
    ("max-nodes over the cap", TEAM_A, {"nodes": 2, "max_nodes": 8}, [f"{names.ANN_MAX_NODES}: '8'"]),
    ("time limit at the cap", TEAM_A, {"time_limit_minutes": 120}, []),
    ("time limit over the cap", TEAM_A, {"time_limit_minutes": 121},
     [f"{names.ANN_TIMELIMIT}: '121 minutes'", "at most 120 minutes"]),
    ("CPUs at the cap", TEAM_A, {"nodes": 4, "cpus_per_task": 4}, []),
    ("CPUs over the cap", TEAM_A, {"nodes": 3, "cpus_per_task": 6}, ["cpus: '18 CPUs'", "at most 16"]),
    ("CPUs over with tasks", TEAM_A, {"nodes": 1, "tasks_per_node": 4, "cpus_per_task": 5}, ["cpus: '20 CPUs'"]),
    ("GPUs at the cap", TEAM_A, {"nodes": 2, "gres": "gres/gpu:1"}, []),
    ("GPUs over the cap", TEAM_A, {"nodes": 2, "gres": "gres/gpu:2"}, ["gpus: '4 GPUs'", "at most 2"]),
    ("typed GPUs over the cap", TEAM_A, {"nodes": 1, "gres": "gres/gpu:a100:3"}, ["gpus: '3 GPUs'"]),
    ("shards are not GPUs", TEAM_A, {"nodes": 1, "gres": "gres/shard:8"}, []),
    ("everything wrong at once", TEAM_A, {"account": "team-b", "qos": "high", "user_id": 0},
     [names.ANN_ACCOUNT, names.ANN_QOS, names.ANN_USER_ID]),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "values", "expected"), [r[1:] for r in CHECK_TABLE], ids=[r[0] for r in CHECK_TABLE])
def test_check_decision_table(spec: Obj, values: Obj, expected: list[str]) -> None:
    found = [str(v) for v in check(values, policy(spec))]
    if not expected:
        assert found == []
        return
    text = "\n".join(found)
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in {text!r}"


def test_caps_on_totals_wait_for_the_whole_request() -> None:
    """At admission of a workload only the annotations are known: CPU and GPU totals are the operator's."""
    values = {"nodes": 3, "cpus_per_task": 6, "gres": "gres/gpu:2"}
    assert check(values, policy(TEAM_A), derived=False) == []
    assert {v.key for v in check(values, policy(TEAM_A))} == {"cpus", "gpus"}


def test_an_invalid_policy_refuses_everything_and_says_why() -> None:
    broken = TenantPolicy.from_object({"metadata": {"name": "bad"}, "spec": {"namespaces": ["x"], "user": {}}})
    assert broken.spec is None and "exactly one of name and id" in broken.problem
    (v,) = check({}, broken)
    assert "the policy is invalid" in str(v)
    # It still claims the namespaces it names, so they are refused rather than open.
    assert policy_for("x", {}, [broken]).policy is broken


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"user": {"name": "a", "id": 1}}, "exactly one"),
        ({"accounts": {"default": "x", "allowed": ["y"]}}, "not in allowed"),
        ({"user": {"name": "has space"}}, "pattern"),
        ({"limits": {"maxNodes": 0}}, "greater than or equal to 1"),
        ({"user": {"id": -1}}, "greater than or equal to 0"),
        ({"user": {"name": "alice"}}, "set group too when user is set"),
    ],
)
def test_malformed_policies_do_not_parse(spec: Obj, problem: str) -> None:
    p = policy({"namespaces": ["x"], **spec})
    assert p.spec is None and problem in p.problem


# ---- which policy ------------------------------------------------------------------------------
SELECTOR_TABLE: list[tuple[str, Obj, str, dict[str, str], bool]] = [
    ("by name", {"namespaces": ["a", "b"]}, "b", {}, True),
    ("not named", {"namespaces": ["a"]}, "b", {}, False),
    ("matchLabels", {"namespaceSelector": {"matchLabels": {"team": "a"}}}, "x", {"team": "a"}, True),
    ("matchLabels, other value", {"namespaceSelector": {"matchLabels": {"team": "a"}}}, "x", {"team": "b"}, False),
    ("In", {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "c"]}]}},
     "x", {"team": "c"}, True),
    ("NotIn, absent key", {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn",
                                                                       "values": ["a"]}]}}, "x", {}, True),
    ("NotIn, listed", {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn",
                                                                   "values": ["a"]}]}}, "x", {"team": "a"}, False),
    ("Exists", {"namespaceSelector": {"matchExpressions": [{"key": "hpc", "operator": "Exists"}]}}, "x",
     {"hpc": ""}, True),
    ("DoesNotExist", {"namespaceSelector": {"matchExpressions": [{"key": "hpc", "operator": "DoesNotExist"}]}},
     "x", {"hpc": "1"}, False),
    ("the empty selector selects everything", {"namespaceSelector": {}}, "anything", {}, True),
    ("name or label", {"namespaces": ["a"], "namespaceSelector": {"matchLabels": {"t": "1"}}}, "z", {"t": "1"}, True),
    ("a 63-character name", {"namespaces": ["n" * 63]}, "n" * 63, {}, True),
    ("a 63-character label value", {"namespaceSelector": {"matchLabels": {"k": "v" * 63}}}, "x", {"k": "v" * 63}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "ns", "labels", "selected"), [r[1:] for r in SELECTOR_TABLE], ids=[r[0] for r in SELECTOR_TABLE]
)
def test_policy_for_decision_table(spec: Obj, ns: str, labels: dict[str, str], selected: bool) -> None:
    p = policy(spec)
    assert p.spec is not None, p.problem
    assert (policy_for(ns, labels, [p]).policy is p) is selected


def test_a_namespace_selected_twice_names_both_policies() -> None:
    a = policy({"namespaces": ["shared"]}, "alpha")
    b = policy({"namespaceSelector": {"matchLabels": {"team": "x"}}}, "beta")
    match = policy_for("shared", {"team": "x"}, [b, a])
    assert match.policy is None and match.conflict == ("alpha", "beta")
    v = verdict(match, "shared", JobRequest(), "open")
    assert v.reason == names.REASON_TENANT_POLICY_CONFLICT and "alpha, beta" in v.message and "shared" in v.message
    index = TenantIndex([a, b], {"shared": {"team": "x"}, "other": {"team": "x"}})
    assert index.conflicts(a) == {"shared": ["beta"]}
    assert index.conflicts(b) == {"shared": ["alpha"]}


# ---- defaults and the whole verdict ------------------------------------------------------------
def test_defaults_fill_only_what_the_request_leaves_unset() -> None:
    p = policy(TEAM_A)
    full = apply_defaults(JobRequest(), p)
    assert (full.user_name, full.user_id, full.group_id, full.account, full.qos, full.time_limit_minutes) == (
        "alice", None, 2001, "team-a", "team-a-qos", 120,
    )  # fmt: skip
    asked = apply_defaults(JobRequest(account="team-a-dev", qos="normal", time_limit_minutes=5, group_id=7), p)
    assert (asked.account, asked.qos, asked.time_limit_minutes, asked.group_id) == ("team-a-dev", "normal", 5, 7)
    assert apply_defaults(JobRequest(), policy(BY_ID)).user_id == 2002


VERDICT_TABLE: list[tuple[str, Match, str, JobRequest, str, str]] = [
    ("open, no policy: as before", Match(), "open", JobRequest(user_id=0, account="x"), "", ""),
    ("strict, no policy: refused", Match(), "strict", JobRequest(), names.REASON_NO_TENANT_POLICY,
     "selected by no TenantPolicy"),
    ("defaults applied", Match(policy(TEAM_A)), "strict", JobRequest(), "", ""),
    ("another team's account", Match(policy(TEAM_A)), "open", JobRequest(account="team-b"),
     names.REASON_TENANT_POLICY_VIOLATION, names.ANN_ACCOUNT),
    ("a trusted user's root job", Match(policy(TEAM_A)), "open", JobRequest(user_id=0),
     names.REASON_TENANT_POLICY_VIOLATION, names.ANN_USER_ID),
    ("a partition the policy does not list", Match(policy(TEAM_A)), "open", JobRequest(partition="debug"),
     names.REASON_TENANT_POLICY_VIOLATION, names.ANN_PARTITION),
]  # fmt: skip


@pytest.mark.parametrize(
    ("match", "mode", "request_", "reason", "fragment"),
    [r[1:] for r in VERDICT_TABLE],
    ids=[r[0] for r in VERDICT_TABLE],
)
def test_verdict_decision_table(match: Match, mode: Any, request_: JobRequest, reason: str, fragment: str) -> None:
    v = verdict(match, "team-a", request_, mode)
    assert v.reason == reason
    assert fragment in v.message
    assert v.allowed is (not reason)
    if match.policy is not None and not reason:
        assert v.request.user_name == "alice" and v.request.account == "team-a" and v.policy == "team-a"


def test_a_long_list_of_violations_is_cut() -> None:
    v = verdict(Match(policy({"namespaces": ["x"]})), "x", JobRequest(user_id=1, group_id=2), "open")
    assert len(v.problems) == 2 and "; " in v.message


def test_gpus_per_node() -> None:
    assert gpus_per_node("gres/gpu:2,gres/shard:4") == 2
    assert gpus_per_node("gres/gpu") == 1
    assert gpus_per_node("gres/gpu:a100:1,gres/gpu:t4:2") == 3
    assert gpus_per_node(None) == 0


# ---- the CRD --------------------------------------------------------------------------------------
def _schema() -> Obj:
    crd = yaml.safe_load((REPO / "crds" / "tenantpolicies.slinky.slurm.net.yaml").read_text())
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["tp"]
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    schema: Obj = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_the_crd_schema_accepts_every_field_of_the_model() -> None:
    jsonschema.validate(TEAM_A, _schema())
    jsonschema.validate({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}, _schema())


@pytest.mark.parametrize(
    "bad",
    [
        {"namespaces": ["Team_A"]},
        {"namespaces": ["x"], "user": {"name": "al ice"}},
        {"namespaces": ["x"], "user": {"id": -1}},
        {"namespaces": ["x"], "accounts": {"allowed": ["a,b"]}},
        {"namespaces": ["x"], "limits": {"maxCPUs": 0}},
        {"namespaces": ["x"], "partitions": ["p"] * 257},
        {"namespaces": ["x"], "extra": 1} | {"limits": {"maxNodes": "2"}},
    ],
)
def test_the_crd_schema_refuses_malformed_fields(bad: Obj) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _schema())


def test_the_crd_says_the_cross_field_rules_in_cel() -> None:
    """name/id exclusive, default in allowed, a selection at all: the API server checks them (CEL)."""
    spec = _schema()
    rules = {r["rule"] for r in spec.get("x-kubernetes-validations", [])}
    assert any("namespaceSelector" in r for r in rules)
    for ident in ("user", "group"):
        assert {r["rule"] for r in spec["properties"][ident]["x-kubernetes-validations"]} == {
            "has(self.name) != has(self.id)"
        }
    for choice in ("accounts", "qos"):
        (rule,) = spec["properties"][choice]["x-kubernetes-validations"]
        assert "self.default in self.allowed" in rule["rule"]


def _doc_policies() -> list[Obj]:
    """Every TenantPolicy the docs show (YAML blocks of docs/tenancy.md and docs/migrating.md)."""
    found: list[Obj] = []
    for doc in ("tenancy.md", "migrating.md"):
        text = (REPO / "docs" / doc).read_text()
        for block in text.split("```yaml")[1:]:
            obj = yaml.safe_load(block.split("```")[0])
            if isinstance(obj, dict) and obj.get("kind") == names.TP_KIND:
                found.append(obj)
    return found


def test_every_policy_the_docs_show_is_valid() -> None:
    policies = _doc_policies()
    assert len(policies) >= 3
    for obj in policies:
        jsonschema.validate(obj["spec"], _schema())
        parsed = TenantPolicy.from_object(obj)
        assert parsed.spec is not None, (obj["metadata"]["name"], parsed.problem)
