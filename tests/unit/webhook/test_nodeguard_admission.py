"""The node guard at admission (webhook/nodeguard.py): the ValidatingAdmissionPolicy that refuses
every pod but the bridge's, its own and node daemons' that tolerates the managed-node taint. Its CEL
is run here on tables of pods (tests/unit/celsubset.py); tests/e2e/test_other_doors.py runs it in
the API server."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurm_bridge import names
from slurm_bridge.core.config import Config, ConfigError, LabelSelector, parse_config
from slurm_bridge.kube.taints import managed_toleration
from slurm_bridge.webhook import nodeguard
from slurm_bridge.webhook.nodeguard import OwnPods, node_guard_policy, selector_cel
from tests.repo.test_chart import NS, RELEASE, find, find_all, render, rendered_config
from tests.unit.celsubset import CelError, admits, compile_cel

REPO = Path(__file__).resolve().parents[3]
Obj = dict[str, Any]
KEY = names.TAINT_MANAGED_NODE
MANAGED_LABEL = "slurm-bridge.local/managed"
CONFIG = Config(managedNamespaceSelector=LabelSelector(matchLabels={MANAGED_LABEL: "true"}))
OWN = OwnPods("slurm-bridge-system", ("sb-operator", "sb-webhook", "sb-scheduler"))
ALICE = "alice"
DS_CONTROLLER = nodeguard.DAEMON_SET_CONTROLLER
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
EXISTS: Obj = {"operator": "Exists"}


def namespace(name: str, managed: bool = False) -> Obj:
    labels = {"kubernetes.io/metadata.name": name, **({MANAGED_LABEL: "true"} if managed else {})}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod(
    ns: str = "team",
    tolerations: list[Obj] | None = None,
    scheduler: str = "default-scheduler",
    node: str | None = None,
    sa: str | None = None,
    **metadata: Any,
) -> Obj:
    spec: Obj = {"schedulerName": scheduler, "containers": [{"name": "c", "image": "x"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node:
        spec["nodeName"] = node
    if sa:
        spec["serviceAccountName"] = sa
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns, **metadata}, "spec": spec}


def admitted(
    obj: Obj,
    *,
    user: str = ALICE,
    managed: bool = False,
    old: Obj | None = None,
    config: Config = CONFIG,
    own: OwnPods | None = None,
) -> bool:
    policy = node_guard_policy(config, own=own)[0]
    activation = {
        "object": obj,
        "oldObject": old,
        "request": {"operation": "CREATE" if old is None else "UPDATE", "userInfo": {"username": user}},
        "namespaceObject": namespace(obj["metadata"]["namespace"], managed),
    }
    return admits(policy, activation)


# ---- which tolerations tolerate the taint -------------------------------------------------------
@pytest.mark.parametrize(
    ("toleration", "tolerates"),
    [
        (managed_toleration("slurm-bridge"), True),  # the webhook's
        ({"key": KEY, "operator": "Equal", "value": "slurm-bridge", "effect": "NoExecute"}, True),
        ({"key": KEY, "value": "slurm-bridge"}, True),  # operator Equal by default, every effect
        ({"key": KEY, "operator": "Exists"}, True),
        ({"key": KEY, "operator": "Exists", "effect": "NoExecute"}, True),
        ({"key": KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}, True),
        ({"key": KEY, "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": KEY, "operator": "Equal", "value": "other-bridge", "effect": "NoExecute"}, False),
        ({"key": KEY, "operator": "Equal", "effect": "NoExecute"}, False),  # value "" is not the taint's
        ({"key": KEY, "operator": "Gt", "value": "1"}, False),
        (EXISTS, True),
        ({"operator": "Exists", "effect": "NoExecute"}, True),
        ({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "", "operator": "Exists"}, True),
        ({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "slinky.slurm.net/managed-node-x", "operator": "Exists"}, False),
    ],
)
def test_a_toleration_of_the_managed_node_taint_is_refused_outside_the_bridge(toleration: Obj, tolerates: bool) -> None:
    assert admitted(pod(tolerations=[toleration])) is not tolerates
    # among others, and wherever it stands
    others = [{"key": "a", "operator": "Exists"}, {"key": "b", "value": "c", "effect": "NoSchedule"}]
    assert admitted(pod(tolerations=[others[0], toleration, others[1]])) is not tolerates


def test_a_pod_without_tolerations_is_admitted() -> None:
    assert admitted(pod())
    assert admitted(pod(tolerations=[]))


def test_the_value_is_the_configured_scheduler_name() -> None:
    config = Config(schedulerName="hpc-bridge")
    assert not admitted(pod(tolerations=[managed_toleration("hpc-bridge")]), config=config)
    assert admitted(pod(tolerations=[managed_toleration("slurm-bridge")]), config=config)


# ---- who may tolerate it ------------------------------------------------------------------------
DS_OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x", "uid": "u", "controller": True}
RS_OWNER = {**DS_OWNER, "kind": "ReplicaSet"}


@pytest.mark.parametrize(
    ("case", "obj", "kwargs", "ok"),
    [
        # (a) the bridge's: a managed namespace, its scheduler, nobody binds it beforehand
        ("bridge pod", pod(tolerations=[EXISTS], scheduler="slurm-bridge"), {"managed": True}, True),
        ("bridge pod, webhook's toleration", pod(tolerations=[managed_toleration("slurm-bridge")],
                                                 scheduler="slurm-bridge"), {"managed": True}, True),
        ("bridge pod with nodeName", pod(tolerations=[EXISTS], scheduler="slurm-bridge", node="real-node-1"),
         {"managed": True}, False),
        ("managed, schedulerName none", pod(tolerations=[EXISTS], scheduler="none", node="real-node-1"),
         {"managed": True}, False),
        ("managed, another scheduler", pod(tolerations=[EXISTS], scheduler="volcano"), {"managed": True}, False),
        ("managed, default scheduler", pod(tolerations=[EXISTS]), {"managed": True}, False),
        ("unmanaged, the bridge's scheduler", pod(tolerations=[EXISTS], scheduler="slurm-bridge"), {}, False),
        ("unmanaged, nodeName", pod(tolerations=[EXISTS], node="real-node-1"), {}, False),
        # (b) node daemons: the DaemonSet controller in a daemon namespace, a kubelet's mirror pod
        ("daemonset pod", pod("kube-system", [EXISTS]), {"user": DS_CONTROLLER}, True),
        ("daemonset pod elsewhere", pod("monitoring", [EXISTS]), {"user": DS_CONTROLLER}, False),
        ("a user in kube-system", pod("kube-system", [EXISTS]), {}, False),
        ("a user forging the DaemonSet owner", pod("kube-system", [EXISTS], ownerReferences=[DS_OWNER]), {}, False),
        ("controller manager's DaemonSet pod", pod("kube-system", [EXISTS], ownerReferences=[DS_OWNER]),
         {"user": nodeguard.CONTROLLER_MANAGER}, True),
        ("controller manager's ReplicaSet pod", pod("kube-system", [EXISTS], ownerReferences=[RS_OWNER]),
         {"user": nodeguard.CONTROLLER_MANAGER}, False),
        ("another controller", pod("kube-system", [EXISTS], ownerReferences=[DS_OWNER]),
         {"user": REPLICASET_CONTROLLER}, False),
        ("mirror pod", pod("kube-system", [EXISTS], annotations={nodeguard.MIRROR_POD_ANNOTATION: "h"}),
         {"user": "system:node:n1"}, True),
        ("mirror pod, any namespace", pod("site", [EXISTS], annotations={nodeguard.MIRROR_POD_ANNOTATION: "h"}),
         {"user": "system:node:n1"}, True),
        ("a kubelet's pod that is no mirror", pod("kube-system", [EXISTS]), {"user": "system:node:n1"}, False),
        ("a user's mirror annotation", pod("site", [EXISTS], annotations={nodeguard.MIRROR_POD_ANNOTATION: "h"}),
         {}, False),
        # the bridge's own components, where the chart says which they are
        ("own component", pod(OWN.namespace, [EXISTS], sa="sb-webhook"), {"own": OWN}, True),
        ("own namespace, another account", pod(OWN.namespace, [EXISTS], sa="x"), {"own": OWN}, False),
        ("own account name elsewhere", pod("team", [EXISTS], sa="sb-webhook"), {"own": OWN}, False),
        ("no own components", pod(OWN.namespace, [EXISTS], sa="sb-webhook"), {}, False),
    ],
)  # fmt: skip
def test_who_may_tolerate_the_taint(case: str, obj: Obj, kwargs: Obj, ok: bool) -> None:
    assert admitted(obj, **kwargs) is ok, case


def test_a_changed_toleration_is_refused_on_update_and_an_unchanged_one_admitted() -> None:
    """Pods from before the install stay editable; adding the toleration later is refused."""
    before = pod(tolerations=[{"key": "a", "operator": "Exists"}], node="real-node-1")
    after = pod(tolerations=[{"key": "a", "operator": "Exists"}, EXISTS], node="real-node-1")
    assert not admitted(after, old=before)
    assert admitted(after, old=after)  # a label changed, say: the tolerations did not
    assert admitted(before, old=before)
    untolerated = pod(node="real-node-1")
    assert admitted(untolerated, old=untolerated)
    assert not admitted(pod(tolerations=[EXISTS], node="real-node-1"), old=untolerated)
    # The bridge's pod, bound by now, is updated as it goes (annotations, gates).
    bound = pod(tolerations=[EXISTS], scheduler="slurm-bridge", node="n")
    assert admitted(bound, old=pod(tolerations=[], scheduler="slurm-bridge", node="n"), managed=True)
    # A daemon's toleration added by an update: the user who updates is not the DaemonSet controller.
    assert not admitted(pod("kube-system", [EXISTS]), old=pod("kube-system", []))


def test_a_namespace_list_config_manages_by_the_name_label() -> None:
    config = Config(managedNamespaces=["team-a", "team-b"])
    bridge_pod = pod("team-b", [EXISTS], scheduler="slurm-bridge")
    assert admitted(bridge_pod, config=config)
    assert not admitted(pod("team-c", [EXISTS], scheduler="slurm-bridge"), config=config)
    # Nothing managed: the bridge's scheduler alone is not enough.
    assert not admitted(bridge_pod, config=Config())


# ---- the selector in CEL ------------------------------------------------------------------------
SELECTORS = [
    LabelSelector(),
    LabelSelector(matchLabels={"a": "1"}),
    LabelSelector(matchLabels={"b": "2", "a": "1"}),
    LabelSelector.model_validate({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}),
    LabelSelector.model_validate({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}),
    LabelSelector.model_validate({"matchExpressions": [{"key": "b", "operator": "Exists"}]}),
    LabelSelector.model_validate({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}),
    LabelSelector.model_validate(
        {
            "matchLabels": {"a": "1"},
            "matchExpressions": [
                {"key": "b", "operator": "NotIn", "values": ["x"]},
                {"key": "c", "operator": "Exists"},
            ],
        }
    ),
]
LABEL_SETS: list[dict[str, str] | None] = [
    None,
    {},
    *({k: v for k, v in zip("abc", values, strict=True) if v is not None}
      for values in itertools.product([None, "1", "2", "3"], [None, "2", "x"], [None, "y"])),
]  # fmt: skip


@pytest.mark.parametrize("selector", SELECTORS, ids=lambda s: selector_cel(s)[:60])
def test_the_selector_in_cel_matches_as_kubernetes_matches(selector: LabelSelector) -> None:
    expr = compile_cel(selector_cel(selector))
    for labels in LABEL_SETS:
        meta: Obj = {"name": "n"} if labels is None else {"name": "n", "labels": labels}
        assert expr({"namespaceObject": {"metadata": meta}}) is selector.matches(labels or {}), (selector, labels)


def test_the_cel_subset_fails_where_the_api_server_would() -> None:
    """An unguarded field is an error, as in CEL: so a missing has() cannot pass these tests."""
    with pytest.raises(CelError):
        compile_cel("object.spec.nodeName == ''")({"object": {"spec": {}}})
    assert compile_cel("has(object.spec.nodeName) && object.spec.nodeName == ''")({"object": {"spec": {}}}) is False
    # CEL's && and || decide past an error on one side when the other side decides
    assert compile_cel("object.spec.x == 'a' || true")({"object": {"spec": {}}}) is True
    with pytest.raises(SyntaxError):
        compile_cel("object.spec.x + 1")


# ---- the policy's form and message --------------------------------------------------------------
def test_the_policy_matches_every_pod_create_and_update_and_denies() -> None:
    policy, binding = node_guard_policy(CONFIG, name="sb")
    assert (policy["kind"], policy["metadata"]["name"]) == ("ValidatingAdmissionPolicy", "sb-node-guard")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"] == {
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
        ]
    }
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"] == {"policyName": "sb-node-guard", "validationActions": ["Deny"]}
    assert "matchResources" not in binding["spec"], "every namespace"


def test_the_message_names_the_taint_why_and_what_to_do() -> None:
    config = Config(schedulerName="hpc", nodeGuard={"daemonNamespaces": ["kube-system", "slurm"]})
    (validation,) = node_guard_policy(config)[0]["spec"]["validations"]
    message = validation["message"]
    assert f"{KEY}=hpc:NoExecute" in message
    assert "CPUs and memory belong to Slurm allocations" in message
    assert "schedulerName hpc" in message and "a namespace it manages" in message
    assert "DaemonSet in a namespace of nodeGuard.daemonNamespaces (kube-system, slurm)" in message
    assert "reserves in Slurm" in message
    assert validation["reason"] == "Forbidden"


@pytest.mark.parametrize("bad", ["Kube-System", "a_b", "x" * 64, ""])
def test_daemon_namespaces_are_namespace_names(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"nodeGuard\.daemonNamespaces: .*not valid namespace names"):
        parse_config({"nodeGuard": {"daemonNamespaces": ["kube-system", bad]}})
    assert Config().nodeGuard.daemonNamespaces == ["kube-system"]


# ---- the chart renders the same -----------------------------------------------------------------
def _without_labels(obj: Obj) -> Obj:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "labels"}}


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"config": {"managedNamespaces": ["team-a", "team-b"], "schedulerName": "hpc-bridge"}},
        {"config": {"managedNamespaceSelector": {
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["y", "z"]},
                                 {"key": "e", "operator": "Exists"}, {"key": "f", "operator": "DoesNotExist"},
                                 {"key": "g", "operator": "In", "values": ["h"]}]}}},
        {"nodeGuard": {"enabled": True, "daemonNamespaces": ["kube-system", "slurm", "gpu-dra"]}},
        {"nodeGuard": {"enabled": True, "daemonNamespaces": []}},
        {"fullnameOverride": "hpc", "operator": {"serviceAccount": {"name": "custom-sa"}}},
    ],
    ids=["defaults", "list", "selector", "daemons", "no-daemons", "names"],
)  # fmt: skip
def test_the_chart_renders_the_policy_webhook_nodeguard_py_gives(values: Obj) -> None:
    docs = render(values)
    fullname = values.get("fullnameOverride", RELEASE)
    cfg = parse_config(rendered_config(docs, fullname))
    accounts = [f"{fullname}-{c}" for c in ("operator", "webhook", "scheduler")]
    if "operator" in values:
        accounts[0] = values["operator"]["serviceAccount"]["name"]
    expected = node_guard_policy(cfg, name=fullname, own=OwnPods(NS, tuple(accounts)))
    got = [find(docs, "ValidatingAdmissionPolicy"), find(docs, "ValidatingAdmissionPolicyBinding")]
    assert [_without_labels(g) for g in got] == [_without_labels(e) for e in expected]
    assert cfg.nodeGuard.daemonNamespaces == values.get("nodeGuard", {}).get("daemonNamespaces", ["kube-system"])


def test_the_chart_leaves_the_policy_out_when_disabled() -> None:
    docs = render({"nodeGuard": {"enabled": False, "daemonNamespaces": ["kube-system"]}})
    assert not find_all(docs, "ValidatingAdmissionPolicy") and not find_all(docs, "ValidatingAdmissionPolicyBinding")
    assert parse_config(rendered_config(docs)).nodeGuard.daemonNamespaces == ["kube-system"]


def _kind_script_var(script: str, var: str) -> str:
    m = re.search(rf"^{var}=(\S+)$", (REPO / "hack" / "kind" / script).read_text(), re.M)
    assert m, f"hack/kind/{script} sets no {var}"
    return m.group(1)


def test_the_kind_values_admit_every_daemonset_of_the_kind_cluster() -> None:
    """kube-proxy and kindnet (kube-system), slurmd and the test DRA plugin tolerate every taint."""
    values = yaml.safe_load((REPO / "hack" / "kind" / "values.yaml").read_text())
    daemons = set(values["nodeGuard"]["daemonNamespaces"])
    wanted = {"kube-system", _kind_script_var("slurm.sh", "KIND_SLURM_NS"), _kind_script_var("dra.sh", "KIND_DRA_NS")}
    assert wanted <= daemons, f"hack/kind/values.yaml nodeGuard.daemonNamespaces lacks {wanted - daemons}"
    found = 0
    for script in ("slurm.sh", "dra.sh"):
        text = (REPO / "hack" / "kind" / script).read_text()
        for var in re.findall(r"kind: DaemonSet\n(?:.*\n){0,3}?\s*namespace: \$(\w+)", text):
            found += 1
            assert _kind_script_var(script, var) in daemons, f"a DaemonSet of hack/kind/{script} in ${var}"
    assert found == 2, "slurmd's and the DRA plugin's DaemonSets"
    assert values["nodeGuard"]["enabled"] is True


def test_the_local_charts_own_components_are_admitted_on_the_real_node() -> None:
    """hack/local-values.yaml runs the bridge on real-node-1, a Slurm node: its pods tolerate the taint."""
    values = yaml.safe_load((REPO / "hack" / "local-values.yaml").read_text())
    docs = render(values, namespace="slurm-bridge-system")
    policy = find(docs, "ValidatingAdmissionPolicy")
    for component in ("operator", "webhook", "scheduler"):
        spec = find(docs, "Deployment", f"{RELEASE}-{component}")["spec"]["template"]["spec"]
        obj = {"metadata": {"name": "p", "namespace": "slurm-bridge-system"}, "spec": spec}
        activation = {
            "object": obj,
            "oldObject": None,
            "request": {"operation": "CREATE", "userInfo": {"username": REPLICASET_CONTROLLER}},
            "namespaceObject": namespace("slurm-bridge-system"),
        }
        assert any(t.get("key") == KEY for t in spec["tolerations"]), component
        assert admits(policy, activation), component
