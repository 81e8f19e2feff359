"""The Helm chart, rendered with the real helm binary (no cluster): CRDs, config, webhook
configurations, TLS, RBAC, pod security, schema. tests/e2e/test_helm.py installs it for real.

The helpers at the top are shared with the e2e chart tests."""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from pydantic import BaseModel

from slurm_bridge.core.cli import LOG_LEVELS
from slurm_bridge.core.config import Config, parse_config
from slurm_bridge.webhook.podpolicy import pod_policy, webhook_skip_condition
from slurm_bridge.webhook.render import ServiceRef, webhook_configurations

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "slurm-bridge"
NS = "slurm-bridge"
RELEASE = "slurm-bridge"
# The Deployments, each with the full set of per-component values. The extender is a container of
# the scheduler's pods, with values of its own (extender.port, .resources, .extraEnv).
COMPONENTS = ("operator", "webhook", "scheduler")
Obj = dict[str, Any]


# ---- helpers (also used by tests/e2e/test_helm.py and test_rbac.py) -----------------------------
@functools.cache
def helm_binary() -> Path:
    """hack/lib.sh's $HELM_BIN (Helm 3, or Helm 4 with SB_HELM=4), built by `hack/build-binaries.sh`
    when missing."""
    proc = subprocess.run(
        ["bash", "-c", '. hack/lib.sh && echo "$HELM_BIN $HELM_TARGET"'], cwd=REPO, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    if proc.returncode != 0 or len(proc.stdout.split()) != 2:
        pytest.fail(f"cannot read HELM_BIN from hack/lib.sh: {proc.stderr[-1000:]}")
    path, target = proc.stdout.split()
    helm = Path(path)
    if not os.access(helm, os.X_OK):
        build = subprocess.run(
            ["bash", "hack/build-binaries.sh", target], cwd=REPO, capture_output=True, text=True, timeout=1800
        )
        if build.returncode != 0 or not os.access(helm, os.X_OK):
            pytest.fail(
                f"helm is missing at {helm} and `bash hack/build-binaries.sh helm` could not build it "
                f"(it needs Go >= 1.24 and the Go module proxy):\n{build.stderr[-2000:]}"
            )
    return helm


@functools.cache
def pinned_kube_version() -> str:
    """KUBERNETES_VERSION of hack/versions.env (the local cluster's version)."""
    text = (REPO / "hack" / "versions.env").read_text()
    m = re.search(r"^KUBERNETES_VERSION=(\S+)$", text, re.M)
    assert m, "hack/versions.env has no KUBERNETES_VERSION"
    return m.group(1)


def helm(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def render_text(
    values: Obj | None = None,
    *extra: str,
    release: str = RELEASE,
    namespace: str = NS,
    kube_version: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart; ``values`` are passed as a values file."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump(values or {}, f)
        path = f.name
    try:
        return helm(
            "template", release, str(CHART), "--namespace", namespace,
            "--kube-version", kube_version or pinned_kube_version(), "--values", path, *extra,
        )  # fmt: skip
    finally:
        os.unlink(path)


def render(
    values: Obj | None = None,
    *extra: str,
    release: str = RELEASE,
    namespace: str = NS,
    kube_version: str | None = None,
) -> list[Obj]:
    proc = render_text(values, *extra, release=release, namespace=namespace, kube_version=kube_version)
    assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def find(docs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def find_all(docs: list[Obj], kind: str) -> list[Obj]:
    return [d for d in docs if d["kind"] == kind]


def rendered_config(docs: list[Obj], fullname: str = RELEASE) -> Obj:
    cm = find(docs, "ConfigMap", f"{fullname}-config")
    data: Obj = yaml.safe_load(cm["data"]["config.yaml"])
    return data


def deployment(docs: list[Obj], component: str, fullname: str = RELEASE) -> Obj:
    return find(docs, "Deployment", f"{fullname}-{component}")


def container(docs: list[Obj], component: str, name: str | None = None) -> Obj:
    """A container of a component's pods: the first, or the one named ``name``."""
    containers: list[Obj] = deployment(docs, component)["spec"]["template"]["spec"]["containers"]
    return containers[0] if name is None else next(c for c in containers if c["name"] == name)


# ---- CRDs --------------------------------------------------------------------------------------
def test_chart_crds_are_identical_to_the_top_level_crds() -> None:
    top = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "crds/ holds no CRD"
    assert sorted(chart) == sorted(top), "helm/slurm-bridge/crds/ must hold exactly the files of crds/"
    stale = [name for name in top if chart[name] != top[name]]
    assert not stale, f"helm/slurm-bridge/crds/ differs from crds/ for {stale}: cp crds/*.yaml helm/slurm-bridge/crds/"


def _crd_version() -> Obj:
    crd = yaml.safe_load((REPO / "crds" / "placeholderjobs.slinky.slurm.net.yaml").read_text())
    version: Obj = crd["spec"]["versions"][0]
    return version


def test_long_printer_columns_show_only_with_wide_output() -> None:
    """PODS and NODES list every member (up to 4096): `kubectl get phj` stays one short line per
    job, `-o wide` adds them (priority 1), Slurm's expected start of a pending job, and the Slurm
    user and account (docs/tenancy.md)."""
    columns = {c["name"]: c.get("priority", 0) for c in _crd_version()["additionalPrinterColumns"]}
    assert {n for n, p in columns.items() if p == 1} == {"Pods", "Nodes", "ExpectedStart", "User", "Account"}
    assert {n for n, p in columns.items() if p == 0} == {"JobID", "Phase", "Reason", "Age"}


def test_conditions_require_every_field_of_the_kubernetes_convention() -> None:
    item = _crd_version()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]["items"]
    fields = ["type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"]
    assert sorted(item["required"]) == sorted(fields)
    assert set(item["properties"]) == set(fields)
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"


# ---- lint and schema ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "values",
    [
        {},
        {"webhook": {"tls": {"certManager": {"enabled": True}}}},
        {"slurmJwt": {"token": "x"}, "operator": {"replicas": 3}, "config": {"managedNamespaces": ["a", "b"]}},
    ],
    ids=["defaults", "cert-manager", "token-and-replicas"],
)
def test_helm_lint_is_clean(values: Obj, tmp_path: Path) -> None:
    f = tmp_path / "values.yaml"
    f.write_text(json.dumps(values))
    proc = helm("lint", str(CHART), "--strict", "--values", str(f), "--kube-version", pinned_kube_version())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "0 chart(s) failed" in out
    assert not re.search(r"\[(INFO|WARNING|ERROR)\]", out), out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.pollPeriodSecond=1"], "pollPeriodSecond"),
        (["--set", "operator.replica=2"], "replica"),
        (["--set", "config.bridgeId=Not_A_Label"], "bridgeId"),
        (["--set", "config.pollPeriodSeconds=5"], "pollPeriodSeconds"),
        (["--set", "config.slurmRestApi=slurmrestd:6820"], "slurmRestApi"),
        (["--set", "webhook.failurePolicy=Maybe"], "failurePolicy"),
        (["--set", "logLevel=LOUD"], "logLevel"),
        (["--set-json", 'config.managedNamespaceSelector={"matchExpressions":[{"key":"a","operator":"In"}]}'],
         "values"),
        (["--set-json", 'config.managedNamespaceSelector={"matchLabel":{"a":"b"}}'], "matchLabel"),
        (["--set", "config.managedNamespaces={slurm-bridge}"], "release namespace"),
        (["--set", "operator.podDisruptionBudget.minAvailable=1"], "podDisruptionBudget"),
        (["--set", "scheduler.extraArgs={-v=4}"], "extraArgs"),
    ],
)  # fmt: skip
def test_invalid_values_are_refused_with_the_key_named(args: list[str], message: str) -> None:
    proc = render_text({}, *args)
    assert proc.returncode != 0, f"{args} was accepted"
    assert message in proc.stderr, proc.stderr


# Kubernetes objects passed through as they are: documented and validated as one value.
OPAQUE = frozenset({"resources", "podSecurityContext", "containerSecurityContext"})


def _leaf_paths(obj: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(obj, dict) and obj and prefix.rsplit(".", 1)[-1] not in OPAQUE:
        for k, v in obj.items():
            yield from _leaf_paths(v, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix


def _schema_for(schema: Obj, path: str) -> Obj | None:
    node: Obj | None = schema
    for part in path.split("."):
        if node is None:
            return None
        props = node.get("properties")
        if props is None and node.get("type") == "object" and "additionalProperties" not in node:
            return node  # an opaque Kubernetes object: everything below it is its own business
        if props and part in props:
            node = props[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def _values() -> Obj:
    values: Obj = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def _schema() -> Obj:
    schema: Obj = json.loads((CHART / "values.schema.json").read_text())
    return schema


def test_schema_describes_every_value_and_forbids_unknown_keys() -> None:
    schema = _schema()
    missing = [p for p in _leaf_paths(_values()) if _schema_for(schema, p) is None]
    assert not missing, f"values.schema.json does not describe: {missing}"
    closed = ["", "image", "config", "slurmJwt", *COMPONENTS, "extender", "webhook.tls", "webhook.tls.certManager"]
    for path in closed:
        node = schema if not path else _schema_for(schema, path)
        assert node is not None and node.get("additionalProperties") is False, f"{path or 'top level'} is open"


# ---- the bridge config -------------------------------------------------------------------------
def test_rendered_config_is_valid_for_every_component() -> None:
    docs = render()
    cfg = parse_config(rendered_config(docs), "chart config.yaml")  # what the components do at start-up
    assert f"system:serviceaccount:{NS}:{RELEASE}-operator" in cfg.trustedUsers
    # Paths and ports agree with the mounts and container ports.
    op = deployment(docs, "operator")["spec"]["template"]["spec"]
    jwt_vol = next(v for v in op["volumes"] if v["name"] == "slurm-jwt")
    jwt_mount = next(m for m in op["containers"][0]["volumeMounts"] if m["name"] == "slurm-jwt")
    assert str(cfg.slurmJwtFile) == f"{jwt_mount['mountPath']}/jwt"
    assert "items" not in jwt_vol["secret"], "every key is mounted (a Go slurm-bridge Secret's too)"
    assert jwt_vol["secret"]["secretName"] == f"{RELEASE}-slurm-jwt"
    assert op["containers"][0]["ports"][0]["containerPort"] == int(cfg.operatorHealthListen.rsplit(":", 1)[1])
    wh = deployment(docs, "webhook")["spec"]["template"]["spec"]
    tls_mount = next(m for m in wh["containers"][0]["volumeMounts"] if m["name"] == "tls")["mountPath"]
    assert {str(cfg.webhookCertFile), str(cfg.webhookKeyFile)} == {f"{tls_mount}/tls.crt", f"{tls_mount}/tls.key"}
    assert wh["containers"][0]["ports"][0]["containerPort"] == int(cfg.webhookListen.rsplit(":", 1)[1])
    # The extender listens on its pod's loopback only (the scheduler beside it is its one caller).
    assert cfg.extenderListen == "127.0.0.1:8090"
    # The chart names the Secret the token comes from, for the operator's error messages.
    assert cfg.slurmJwtSource == f"Secret {NS}/{RELEASE}-slurm-jwt, key jwt"
    # Only the operator talks to Slurm, so only it mounts the token.
    for component in ("webhook", "scheduler"):
        vols = deployment(docs, component)["spec"]["template"]["spec"]["volumes"]
        assert not any("secret" in v and v["secret"]["secretName"].endswith("slurm-jwt") for v in vols), component


def test_every_config_key_is_emitted_or_settable() -> None:
    fields = set(Config.model_fields)
    values_config = set(_values()["config"])
    assert values_config <= fields, (
        f"values.config keys unknown to slurm_bridge/core/config.py: {values_config - fields}"
    )
    selector = {"managedNamespaceSelector": {"matchLabels": {"team": "hpc"}}}
    emitted = set(rendered_config(render({"config": selector})))
    assert emitted == fields, f"config.yaml misses {fields - emitted}, has unknown {emitted - fields}"


def test_values_config_defaults_follow_config_py() -> None:
    defaults = Config()
    # The in-cluster slurmrestd URL and the empty selector are deliberate differences.
    different = {"slurmRestApi", "managedNamespaceSelector"}
    for key, value in _values()["config"].items():
        if key not in different:
            default = getattr(defaults, key)
            default = default.model_dump() if isinstance(default, BaseModel) else default  # a nested key (handoff)
            assert value == default, f"values.config.{key}={value!r}, config.py: {default!r}"


def test_the_handoff_values_reach_the_config_and_the_webhooks_skip_condition() -> None:
    docs = render({"config": {"handoff": {"maxGracePeriodSeconds": 45, "marginSeconds": 7}}})
    cfg = parse_config(rendered_config(docs))
    assert (cfg.handoff.maxGracePeriodSeconds, cfg.handoff.marginSeconds) == (45, 7)
    conditions = find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
    check = next(c["expression"] for c in conditions if c["name"] == "something-to-check")
    assert check.endswith("object.spec.terminationGracePeriodSeconds > 45)")


def test_config_values_pass_through() -> None:
    values = {
        "config": {
            "schedulerName": "hpc-bridge",
            "slurmRestApi": "https://slurmrestd.hpc.example:6820/",
            "slurmUser": "slurm",
            "managedNamespaces": ["team-a", "team-b"],
            "mcsLabel": "hpc",
            "partition": "k8s",
            "bridgeId": "cluster-east",
            "pollPeriodSeconds": 0.5,
            "slurmRequestTimeoutSeconds": 20,
            "trustedUsers": ["admin"],
            "operatorWorkers": 32,
            "orphanGraceSeconds": 60,
        }
    }
    cfg = parse_config(rendered_config(render(values)))
    assert cfg.schedulerName == "hpc-bridge"
    assert cfg.slurmRestApi == "https://slurmrestd.hpc.example:6820"
    assert cfg.managedNamespaces == ["team-a", "team-b"]
    assert cfg.pollPeriodSeconds == 0.5 and cfg.operatorWorkers == 32 and cfg.orphanGraceSeconds == 60
    assert cfg.trustedUsers == ["admin", f"system:serviceaccount:{NS}:{RELEASE}-operator"]
    # --set passes decimals as strings: the chart turns them back into numbers.
    cfg = parse_config(rendered_config(render({}, "--set", "config.pollPeriodSeconds=0.25")))
    assert cfg.pollPeriodSeconds == 0.25


# ---- webhook configurations and TLS ------------------------------------------------------------
def _strip(obj: Obj) -> Obj:
    out: Obj = json.loads(json.dumps(obj))
    out["metadata"].pop("labels", None)
    out["metadata"].pop("annotations", None)
    for w in out.get("webhooks", []):
        w["clientConfig"].pop("caBundle", None)
    return out


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"managedNamespaces": ["team-a", "team-b"]},
        {"managedNamespaceSelector": {"matchLabels": {"slurm-bridge/managed": "true"}}},
        {
            "managedNamespaces": ["ignored"],
            "managedNamespaceSelector": {
                "matchLabels": {"a": "b"},
                "matchExpressions": [{"key": "team", "operator": "Exists"},
                                     {"key": "tier", "operator": "NotIn", "values": ["web"]}],
            },
        },
        {"managedNamespaceSelector": {}, "managedNamespaces": ["only-this"]},
        {"managedNamespaces": ["a"], "nodeSharing": "coResident"},
        {"managedNamespaces": ["a"], "nodeSharing": "exclusive"},
    ],
    ids=["nothing-managed", "list", "labels", "selector-wins", "empty-selector-uses-list", "co-resident",
         "exclusive"],
)  # fmt: skip
def test_webhook_configurations_have_the_shape_render_py_gives(config: Obj) -> None:
    docs = render({"config": config})
    cfg = parse_config(rendered_config(docs))
    expected = webhook_configurations(
        cfg, bundle="unused", service=ServiceRef(NS, f"{RELEASE}-webhook", 443), name=RELEASE
    )
    got = [find(docs, "MutatingWebhookConfiguration"), find(docs, "ValidatingWebhookConfiguration")]
    assert [_strip(g) for g in got] == [_strip(e) for e in expected]
    for g in got:
        assert g["webhooks"][0]["failurePolicy"] == "Fail"
        assert g["webhooks"][0]["namespaceSelector"] == cfg.namespace_selector.to_kubernetes()


def test_generated_tls_signs_the_service_names_and_fills_the_ca_bundle() -> None:
    docs = render()
    secret = find(docs, "Secret", f"{RELEASE}-webhook-tls")
    ca_pem = base64.b64decode(secret["data"]["ca.crt"])
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName))  # fmt: skip
    svc = f"{RELEASE}-webhook"
    assert {svc, f"{svc}.{NS}", f"{svc}.{NS}.svc", f"{svc}.{NS}.svc.cluster.local"} <= names
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        client = find(docs, kind)["webhooks"][0]["clientConfig"]
        assert client["caBundle"] == secret["data"]["ca.crt"]
        assert client["service"]["name"] == svc and client["service"]["namespace"] == NS


def test_cert_manager_issues_the_certificate_and_injects_the_ca() -> None:
    docs = render({"webhook": {"tls": {"certManager": {"enabled": True}}}})
    assert not [d for d in find_all(docs, "Secret") if d["metadata"]["name"].endswith("webhook-tls")]
    issuer = find(docs, "Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    cert = find(docs, "Certificate")
    assert cert["spec"]["secretName"] == f"{RELEASE}-webhook-tls"
    assert f"{RELEASE}-webhook.{NS}.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        obj = find(docs, kind)
        assert obj["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NS}/{cert['metadata']['name']}"
        assert "caBundle" not in obj["webhooks"][0]["clientConfig"]
    docs = render({"webhook": {"tls": {"certManager": {"enabled": True, "issuerRef": {
        "name": "corp-ca", "kind": "ClusterIssuer"}}}}})  # fmt: skip
    assert not find_all(docs, "Issuer")
    assert find(docs, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}


# ---- RBAC --------------------------------------------------------------------------------------
Grant = set[tuple[str, str, str, tuple[str, ...]]]


def _rules(obj: Obj) -> Grant:
    """(apiGroup, resource, verb, resourceNames) for every combination a role grants."""
    out = set()
    for r in obj["rules"]:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                for v in r["verbs"]:
                    out.add((g, res, v, tuple(r.get("resourceNames", ()))))
    return out


def _grant(group: str, resource: str, *verbs: str, names: tuple[str, ...] = ()) -> Grant:
    return {(group, resource, v, names) for v in verbs}


def test_rbac_grants_exactly_what_the_code_uses() -> None:
    docs = render()
    for role in find_all(docs, "ClusterRole") + find_all(docs, "Role"):
        text = json.dumps(role["rules"])
        assert '"*"' not in text, f"{role['metadata']['name']} uses a wildcard"
    operator = (
        _grant("", "pods", "get", "list", "watch", "patch", "delete")
        | _grant("", "pods/status", "patch")
        | _grant("", "nodes", "get", "list", "watch", "patch")  # node sync (docs/nodes.md)
        | _grant("", "nodes/status", "patch")  # the SlurmResourcesFit condition (docs/colocation.md)
        | _grant("", "events", "create")
        # the owner chain of managed pods (docs/workloads.md)
        | _grant("", "replicationcontrollers", "get")
        | _grant("apps", "replicasets", "get")
        | _grant("apps", "deployments", "get")
        | _grant("apps", "statefulsets", "get")
        | _grant("apps", "daemonsets", "get")
        # ... and the metadata of those whose slurmjob annotations configure jobs, listed and watched
        # (operator/placeholderjobs/optionwatch.py: a change reaches a waiting job)
        | _grant("batch", "jobs", "get", "list", "watch")
        | _grant("jobset.x-k8s.io", "jobsets", "get", "list", "watch")
        | _grant("leaderworkerset.x-k8s.io", "leaderworkersets", "get", "list", "watch")
        | _grant("scheduling.x-k8s.io", "podgroups", "get", "list", "watch")
        # the 1.36 Workload API: a gang's PodGroup and Workload, the PodGroup's condition
        | _grant("scheduling.k8s.io", "podgroups", "get", "list", "watch")
        | _grant("scheduling.k8s.io", "workloads", "get", "list", "watch")
        | _grant("scheduling.k8s.io", "podgroups/status", "patch")
        # 1.37 CompositePodGroups: the parent of a PodGroup, the composite's condition
        | _grant("scheduling.k8s.io", "compositepodgroups", "get", "list", "watch")
        | _grant("scheduling.k8s.io", "compositepodgroups/status", "patch")
        # exact DRA devices: the pods' claims and the nodes' ResourceSlices (watched: SlurmDevicesMatch)
        | _grant("resource.k8s.io", "resourceclaims", "get", "create")
        | _grant("resource.k8s.io", "resourceclaims/status", "patch")
        | _grant("resource.k8s.io", "resourceclaims/binding", "patch")  # 1.37 checks it for status.allocation
        | _grant("resource.k8s.io", "resourceslices", "list", "watch")
        | _grant("resource.k8s.io", "devicetaintrules", "list", "watch")  # device taints drain Slurm nodes
        | _grant("slinky.slurm.net", "placeholderjobs", "get", "list", "watch", "create", "patch", "delete")
        | _grant("slinky.slurm.net", "placeholderjobs/status", "patch")
        | _grant("slinky.slurm.net", "placeholderjobs/finalizers", "update")
        | _grant("apiextensions.k8s.io", "customresourcedefinitions", "list", "watch")  # kopf's resource scan
        # tenancy (docs/tenancy.md): policies, the namespaces' labels, the policies' status
        | _grant("", "namespaces", "get", "list", "watch")
        | _grant("slinky.slurm.net", "tenantpolicies", "get", "list", "watch")
        | _grant("slinky.slurm.net", "tenantpolicies/status", "patch")
    )
    assert _rules(find(docs, "ClusterRole", f"{RELEASE}-operator")) == operator
    # The webhook reads policies, namespaces and ResourceSlices (its caches, slurm_bridge/kube/cache.py), and
    # gets the claims and templates a pod names (webhook/devicedoors.py), no more.
    assert _rules(find(docs, "ClusterRole", f"{RELEASE}-webhook")) == (
        _grant("", "namespaces", "get", "list", "watch")
        | _grant("slinky.slurm.net", "tenantpolicies", "list", "watch")
        | _grant("resource.k8s.io", "resourceslices", "list", "watch")
        | _grant("resource.k8s.io", "resourceclaims", "get")
        | _grant("resource.k8s.io", "resourceclaimtemplates", "get")
    )
    assert _rules(find(docs, "Role", f"{RELEASE}-operator-lease")) == (
        _grant("coordination.k8s.io", "leases", "create")
        | _grant("coordination.k8s.io", "leases", "get", "update", names=("slurm-bridge-operator",))
        # The places of preempted workloads (operator/placeholderjobs/places.py), in its namespace only.
        | _grant("", "configmaps", "get", "list", "create", "patch", "delete")
    )
    assert not [r for r in find_all(docs, "ClusterRole") if "extender" in r["metadata"]["name"]], (
        "the extender binds as the scheduler's ServiceAccount (system:kube-scheduler grants pods/binding)"
    )
    assert _rules(find(docs, "Role", f"{RELEASE}-scheduler-lease")) == _grant(
        "coordination.k8s.io", "leases", "get", "update", names=("slurm-bridge-scheduler",)
    )
    bindings: dict[str, set[str]] = {}
    for b in find_all(docs, "ClusterRoleBinding") + find_all(docs, "RoleBinding"):
        (subject,) = b["subjects"]
        assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NS
        bindings.setdefault(subject["name"], set()).add(f"{b['roleRef']['kind']}/{b['roleRef']['name']}")
    assert bindings == {
        f"{RELEASE}-operator": {f"ClusterRole/{RELEASE}-operator", f"Role/{RELEASE}-operator-lease"},
        f"{RELEASE}-scheduler": {
            "ClusterRole/system:kube-scheduler",
            "ClusterRole/system:volume-scheduler",
            "Role/extension-apiserver-authentication-reader",
            f"Role/{RELEASE}-scheduler-lease",
        },
        f"{RELEASE}-webhook": {f"ClusterRole/{RELEASE}-webhook"},
    }
    auth_reader = find(docs, "RoleBinding", f"{RELEASE}-scheduler-auth-reader")
    assert auth_reader["metadata"]["namespace"] == "kube-system"


def test_extra_operator_rules_are_added_without_wildcards() -> None:
    rule = {"apiGroups": ["example.com"], "resources": ["trainjobs"], "verbs": ["get"]}
    docs = render({"operator": {"extraRules": [rule]}})
    assert ("example.com", "trainjobs", "get", ()) in _rules(find(docs, "ClusterRole", f"{RELEASE}-operator"))
    proc = render_text({"operator": {"extraRules": [{**rule, "verbs": ["*"]}]}})
    assert proc.returncode != 0 and "extraRules" in proc.stderr


def test_lease_names_follow_the_config() -> None:
    docs = render({"config": {"bridgeId": "east", "schedulerName": "hpc"}})
    op_lease = find(docs, "Role", f"{RELEASE}-operator-lease")
    assert {"east-operator"} == {n for r in op_lease["rules"] for n in r.get("resourceNames", [])}
    sched_cfg = yaml.safe_load(find(docs, "ConfigMap", f"{RELEASE}-scheduler-config")["data"]["kube-scheduler.yaml"])
    assert sched_cfg["leaderElection"]["resourceName"] == "hpc-scheduler"
    sched_lease = find(docs, "Role", f"{RELEASE}-scheduler-lease")
    assert sched_lease["rules"][0]["resourceNames"] == ["hpc-scheduler"]


def test_webhook_pods_get_an_api_token_for_the_tenancy_rules() -> None:
    """The webhook lists and watches TenantPolicies and namespaces (docs/tenancy.md), read-only."""
    docs = render()
    assert deployment(docs, "webhook")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert find(docs, "ServiceAccount", f"{RELEASE}-webhook")["automountServiceAccountToken"] is True


# ---- workloads ---------------------------------------------------------------------------------
def test_every_pod_is_locked_down_probed_labelled_and_budgeted() -> None:
    docs = render()
    deployments = find_all(docs, "Deployment")
    assert sorted(d["metadata"]["name"] for d in deployments) == sorted(f"{RELEASE}-{c}" for c in COMPONENTS)
    pdbs = {p["metadata"]["name"]: p for p in find_all(docs, "PodDisruptionBudget")}
    for d in deployments:
        name = d["metadata"]["name"]
        component = name.removeprefix(f"{RELEASE}-")
        meta = d["spec"]["template"]["metadata"]
        for key in ("name", "instance", "version", "managed-by", "component", "part-of"):
            assert f"app.kubernetes.io/{key}" in meta["labels"], (name, key)
        assert meta["labels"]["app.kubernetes.io/component"] == component
        assert d["spec"]["selector"]["matchLabels"].items() <= meta["labels"].items()
        assert "checksum/config" in meta["annotations"], name
        spec = d["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == f"{RELEASE}-{component}"
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"]:
            where = f"{name}/{c['name']}"
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert c["livenessProbe"] and c["readinessProbe"], where
            assert c["resources"]["requests"] and c["resources"]["limits"], where
        pdb = pdbs[name]
        assert pdb["spec"]["selector"]["matchLabels"] == d["spec"]["selector"]["matchLabels"]


def test_operator_elects_a_leader_in_the_release_namespace() -> None:
    docs = render({"operator": {"replicas": 3}})
    d = deployment(docs, "operator")
    assert d["spec"]["replicas"] == 3
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["slurm-bridge-operator"]
    assert "--lease-namespace=$(POD_NAMESPACE)" in c["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_each_component_runs_its_own_entry_point_of_one_image() -> None:
    docs = render({"image": {"repository": "registry.example/slurm-bridge", "tag": "1.2.3"}})
    for component, c in [("operator", container(docs, "operator")), ("webhook", container(docs, "webhook")),
                         ("extender", container(docs, "scheduler", "extender"))]:  # fmt: skip
        assert c["image"] == "registry.example/slurm-bridge:1.2.3"
        assert c["command"] == [f"slurm-bridge-{component}"]
        assert "--config=/etc/slurm-bridge/config/config.yaml" in c["args"]
    default = deployment(render(), "operator")["spec"]["template"]["spec"]["containers"][0]["image"]
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert default == f"slurm-bridge:{chart_yaml['appVersion']}"


@pytest.mark.parametrize("component", ["operator", "webhook", "extender"])
def test_each_entry_point_accepts_the_charts_arguments(
    component: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chart's args parse (the shared flags of slurm_bridge/core/cli.py and each component's own):
    with a bad config in place of the chart's, each component stops at its config, exit 2, before
    it starts anything."""
    from slurm_bridge.extender.main import main as extender_main
    from slurm_bridge.operator.main import main as operator_main
    from slurm_bridge.webhook.main import main as webhook_main

    mains: dict[str, Callable[[list[str]], object]] = {
        "operator": operator_main, "webhook": webhook_main, "extender": extender_main
    }  # fmt: skip
    docs = render({"logLevel": "DEBUG", "logFormat": "text"})
    c = container(docs, "scheduler", "extender") if component == "extender" else container(docs, component)
    bad = tmp_path / "config.yaml"
    bad.write_text("pollPeriodSeconds: 5\n")
    args = [f"--config={bad}" if a.startswith("--config=") else a for a in c["args"]]
    assert f"--config={bad}" in args and "--log-level=DEBUG" in args and "--log-format=text" in args
    try:
        code = mains[component](args)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: invalid configuration:") and "pollPeriodSeconds" in err, err


def test_chart_log_levels_are_the_components() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["logLevel"]["enum"] == LOG_LEVELS


@pytest.mark.parametrize(
    ("kube_version", "tag"), [("v1.34.4", "v1.34.4"), ("v1.37.2", "v1.37.2"), ("v1.35.1+k3s1", "v1.35.1")]
)
def test_scheduler_image_follows_the_cluster_version(kube_version: str, tag: str) -> None:
    d = deployment(render(kube_version=kube_version), "scheduler")
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == f"registry.k8s.io/kube-scheduler:{tag}"
    d = deployment(render({"scheduler": {"image": {"tag": "v1.36.0"}}}, kube_version=kube_version), "scheduler")
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.k8s.io/kube-scheduler:v1.36.0"


def _tested_versions() -> list[str]:
    text = (REPO / "hack" / "versions.env").read_text()
    m = re.search(r'^KUBERNETES_VERSIONS="([^"]+)"$', text, re.M)
    assert m, "hack/versions.env has no KUBERNETES_VERSIONS"
    return m.group(1).split()


NEWEST_TESTED = "slurm-bridge/newest-tested-kubernetes"  # the Chart.yaml annotation NOTES.txt reads


def _minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


def _newest_tested_minor() -> int:
    return max(_minor(v) for v in _tested_versions())


def render_notes(kube_version: str) -> subprocess.CompletedProcess[str]:
    """templates/NOTES.txt as helm renders it for a cluster of ``kube_version``. `helm template`
    leaves NOTES out and `helm install --dry-run=client` has no --kube-version, so a copy of the
    chart gets one more template that includes NOTES.txt (by its template name) into a ConfigMap."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / CHART.name
        shutil.copytree(CHART, chart)
        (chart / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            f'data: {{notes: {{{{ include "{CHART.name}/templates/NOTES.txt" . | toJson }}}}}}\n'
        )
        proc = helm(
            "template", RELEASE, str(chart), "--namespace", NS, "--kube-version", kube_version,
            "--show-only", "templates/zz-notes.yaml",
        )  # fmt: skip
    if proc.returncode == 0:
        proc.stdout = yaml.safe_load(proc.stdout)["data"]["notes"]
    return proc


def test_chart_installs_from_the_oldest_tested_kubernetes_version_on() -> None:
    """kubeVersion starts at the matrix's oldest minor and has no upper bound (docs/compatibility.md):
    every tested version renders, the minor below the oldest is refused by helm, and newer minors
    install, as the bridge finds its API versions by discovery."""
    versions = _tested_versions()
    minors = sorted(_minor(v) for v in versions)
    assert minors == list(range(minors[0], minors[-1] + 1)), "one version per minor, none skipped"
    assert _chart_yaml()["kubeVersion"] == f">=1.{minors[0]}.0-0"
    for v in versions:
        assert render_text(kube_version=v).returncode == 0, v
    proc = render_text(kube_version=f"v1.{minors[0] - 1}.9")
    assert proc.returncode != 0, proc.stdout
    assert f"chart requires kubeVersion: >=1.{minors[0]}.0-0 which is incompatible with Kubernetes" in proc.stderr
    for newer in (f"v1.{minors[-1] + 1}.0", f"v1.{minors[-1] + 2}.0"):
        assert render_text(kube_version=newer).returncode == 0, newer


def test_newest_tested_kubernetes_minor_is_the_matrixs_and_the_docs() -> None:
    """The chart's one record of the newest tested minor follows hack/versions.env, and the
    compatibility doc names the same range."""
    tested = _chart_yaml()["annotations"][NEWEST_TESTED]
    assert tested == f"1.{_newest_tested_minor()}"
    oldest = min(_tested_versions(), key=_minor)
    doc = (REPO / "docs" / "compatibility.md").read_text()
    assert f"1.{_minor(oldest)} to {tested}" in doc and f"`{NEWEST_TESTED}`" in doc


# Versions relative to the newest tested minor N (1.37 now): N+1 and N+2, a release candidate of
# N+1, a vendor's build of it; and N's own releases (a vendor's too) and the oldest tested.
@pytest.mark.parametrize("template", ["v1.{n1}.0", "v1.{n2}.0", "v1.{n1}.0-rc.0", "v1.{n1}.1-gke.1200"])
def test_a_cluster_newer_than_the_newest_tested_minor_installs_with_a_warning(template: str) -> None:
    n = _newest_tested_minor()
    kube_version = template.format(n1=n + 1, n2=n + 2)
    proc = render_notes(kube_version)
    assert proc.returncode == 0, proc.stderr
    # --kube-version drops a pre-release or vendor suffix from .Capabilities.KubeVersion.Version.
    assert re.search(
        rf"WARNING: Kubernetes v1\.{_minor(kube_version)}\.\S+ is newer than 1\.{n}, the newest", proc.stdout
    )
    assert "docs/compatibility.md" in proc.stdout


@pytest.mark.parametrize("template", ["v1.{n}.0", "v1.{n}.9", "v1.{n}.9-eks-1a2b3c", "{oldest}"])
def test_a_tested_kubernetes_minor_installs_without_a_warning(template: str) -> None:
    kube_version = template.format(n=_newest_tested_minor(), oldest=min(_tested_versions(), key=_minor))
    proc = render_notes(kube_version)
    assert proc.returncode == 0, proc.stderr
    assert f"slurm-bridge {_chart_yaml()['appVersion']} is installed" in proc.stdout
    assert "WARNING" not in proc.stdout


def test_scheduler_config_matches_the_local_template() -> None:
    docs = render()
    got = yaml.safe_load(find(docs, "ConfigMap", f"{RELEASE}-scheduler-config")["data"]["kube-scheduler.yaml"])
    template = (REPO / "extender" / "kube-scheduler.yaml").read_text()
    for var, value in {"KUBECONFIG": "x", "LEADER_ELECT": "true", "SCHEDULER_NAME": "slurm-bridge",
                       "NAMESPACE": NS, "EXTENDER_URL": "http://x"}.items():  # fmt: skip
        template = template.replace("${" + var + "}", value)
    local = yaml.safe_load(template)
    assert got["leaderElection"]["leaderElect"] is True
    assert got["leaderElection"]["resourceNamespace"] == NS
    assert got["leaderElection"]["resourceName"] == local["leaderElection"]["resourceName"]
    assert got["profiles"] == local["profiles"]
    ext_url = got["extenders"][0].pop("urlPrefix")
    local["extenders"][0].pop("urlPrefix")
    assert got["extenders"] == local["extenders"]
    assert ext_url == "http://127.0.0.1:8090", "the extender beside the scheduler, on the pod's loopback"
    assert "kubeconfig" not in got["clientConnection"], "in-cluster credentials"
    for key in ("podInitialBackoffSeconds", "podMaxBackoffSeconds"):
        assert got[key] == local[key]
    assert not [o for o in docs if o["metadata"]["name"] == f"{RELEASE}-extender"], "nothing exposes the extender"
    # The kubelet cannot reach a pod's loopback: it probes a listener that serves health alone.
    extender = container(docs, "scheduler", "extender")
    assert extender["ports"] == [{"name": "extender-health", "containerPort": 8091, "protocol": "TCP"}]
    assert extender["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "extender-health"}
    cfg = parse_config(rendered_config(docs))
    assert (cfg.extenderListen, cfg.extenderHealthListen) == ("127.0.0.1:8090", "0.0.0.0:8091")


def test_a_config_change_rolls_exactly_the_components_that_read_it() -> None:
    def checksums(values: Obj) -> dict[str, str]:
        docs = render(values)
        annotations = {c: deployment(docs, c)["spec"]["template"]["metadata"]["annotations"] for c in COMPONENTS}
        return {c: a["checksum/config"] + a.get("checksum/scheduler-config", "") for c, a in annotations.items()}

    base = checksums({})
    assert checksums({}) == base, "checksums are stable (no random input)"
    # Every pod reads config.yaml (the scheduler's through its extender), so every one rolls.
    changed = checksums({"config": {"pollPeriodSeconds": 0.5}})
    assert {c for c in COMPONENTS if changed[c] != base[c]} == {"operator", "webhook", "scheduler"}
    # The extender's port is in the scheduler's own configuration only.
    moved = checksums({"extender": {"port": 8091}})
    assert {c for c in COMPONENTS if moved[c] != base[c]} == {"operator", "webhook", "scheduler"}


def test_jwt_secret_is_referenced_or_created() -> None:
    docs = render()
    assert not [s for s in find_all(docs, "Secret") if s["metadata"]["name"].endswith("slurm-jwt")]
    docs = render({"slurmJwt": {"secretName": "site-jwt", "secretKey": "token", "token": "abc"}})
    secret = find(docs, "Secret", "site-jwt")
    assert secret["stringData"] == {"token": "abc"}
    vol = next(v for v in deployment(docs, "operator")["spec"]["template"]["spec"]["volumes"]
               if v["name"] == "slurm-jwt")  # fmt: skip
    assert vol["secret"]["secretName"] == "site-jwt"
    assert str(parse_config(rendered_config(docs)).slurmJwtFile) == "/var/run/secrets/slurm-bridge/token"


def test_names_follow_release_and_overrides() -> None:
    docs = render(release="hpc", namespace="bridge")
    assert deployment(docs, "operator", "hpc-slurm-bridge")["metadata"]["namespace"] == "bridge"
    assert find(docs, "MutatingWebhookConfiguration")["metadata"]["name"] == "hpc-slurm-bridge"
    cfg = parse_config(rendered_config(docs, "hpc-slurm-bridge"))
    assert cfg.trustedUsers == ["system:serviceaccount:bridge:hpc-slurm-bridge-operator"]
    docs = render({"fullnameOverride": "sb"}, release="x")
    assert find(docs, "ValidatingWebhookConfiguration")["metadata"]["name"] == "sb"
    assert find(docs, "ValidatingWebhookConfiguration")["webhooks"][0]["name"] == "validate.sb.slinky.slurm.net"
    for d in docs:
        labels = d["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == "x", d["metadata"]["name"]


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "CustomResourceDefinition", "PriorityClass",
                  "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [{}, {"webhook": {"tls": {"certManager": {"enabled": True}}}}, {"slurmJwt": {"token": "x"}}],
    ids=["defaults", "cert-manager", "jwt-secret"],
)
def test_namespace_override_moves_every_namespaced_object_and_reference(values: Obj) -> None:
    proc = render_text({**values, "namespaceOverride": "hpc-bridge"}, namespace="release-ns")
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    # Nothing refers to the release namespace any more: objects, subjects, webhook Services,
    # certificate names, the operator's trusted user, the JWT Secret's description.
    assert "release-ns" not in proc.stdout
    for d in docs:
        ns = d["metadata"].get("namespace")
        if d["kind"] in CLUSTER_SCOPED:
            assert ns is None, f"{d['kind']} {d['metadata']['name']} is cluster-scoped"
        elif ns != "kube-system":  # the authentication-reader RoleBinding lives there by nature
            assert ns == "hpc-bridge", f"{d['kind']} {d['metadata']['name']} is in {ns}"
        for subject in d.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                assert subject["namespace"] == "hpc-bridge"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in find(docs, kind)["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == "hpc-bridge"
    cfg = parse_config(rendered_config(docs))
    assert cfg.trustedUsers[0] == "system:serviceaccount:hpc-bridge:slurm-bridge-operator"


def test_namespace_override_is_refused_in_managed_namespaces_and_when_malformed() -> None:
    proc = render_text({"namespaceOverride": "team-a", "config": {"managedNamespaces": ["team-a"]}})
    assert proc.returncode != 0 and 'must not include the release namespace "team-a"' in proc.stderr
    proc = render_text({"namespaceOverride": "Not_A_Namespace"})
    assert proc.returncode != 0 and "namespaceOverride" in proc.stderr


def _chart_yaml() -> Obj:
    chart: Obj = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return chart


def test_chart_metadata_names_home_and_sources() -> None:
    chart = _chart_yaml()
    assert chart["home"].startswith("https://")
    assert chart["home"] in chart["sources"]


def test_readme_links_work_in_the_packaged_chart(tmp_path: Path) -> None:
    """Links of the chart README either stay inside the chart (present in `helm package`'s
    archive) or are absolute; links into the project's repository name files that exist."""
    import tarfile

    proc = helm("package", str(CHART), "--destination", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (archive,) = tmp_path.glob("slurm-bridge-*.tgz")
    with tarfile.open(archive) as tar:
        packaged = {n.removeprefix("slurm-bridge/").rstrip("/") for n in tar.getnames()}
    packaged |= {str(Path(n).parent) for n in packaged}
    readme = (CHART / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links, "the chart README links to nothing"
    home = _chart_yaml()["home"].rstrip("/")
    for link in links:
        target = link.split("#")[0]
        if re.match(r"^[a-z]+://", target):
            assert target.startswith("https://"), link
            if target.startswith(home + "/"):
                path = re.sub(r"^(blob|tree)/main/", "", target.removeprefix(home + "/"))
                assert (REPO / path).exists(), f"{link}: {path} is not in the repository"
        else:
            assert not target.startswith(("/", "..")), f"{link} leaves the chart"
            assert target.rstrip("/") in packaged, f"{link} is not in the packaged chart"


# ---- docs --------------------------------------------------------------------------------------
def test_configuration_doc_covers_every_config_key_and_helm_value() -> None:
    doc = (REPO / "docs" / "configuration.md").read_text()
    missing_keys = [k for k in Config.model_fields if f"`{k}`" not in doc]
    assert not missing_keys, f"docs/configuration.md does not document config keys {missing_keys}"

    def documented(path: str) -> bool:
        head, _, rest = path.partition(".")
        return f"`{path}`" in doc or (head in COMPONENTS and f"`<component>.{rest}`" in doc)

    missing_values = [p for p in _leaf_paths(_values()) if not documented(p)]
    assert not missing_values, f"docs/configuration.md does not document Helm values {missing_values}"


# ---- metrics -------------------------------------------------------------------------------------
def _container_port(docs: list[Obj], component: str, container_name: str, port_name: str) -> int:
    ports = container(docs, component, container_name)["ports"]
    port: int = next(p["containerPort"] for p in ports if p["name"] == port_name)
    return port


def test_each_components_metrics_port_has_a_service_that_reaches_it() -> None:
    """/metrics is served on the operator's and extender's health listener (never the extender's
    loopback /bind port) and on the webhook's HTTPS port; each Service selects that component's
    pods and targets that named port, and the config listens there."""
    docs = render()
    cfg = parse_config(rendered_config(docs), "chart config.yaml")
    expected = {  # Service -> (pods' component, container, named port, config listen)
        "operator": ("operator", "operator", "health", cfg.operatorHealthListen),
        "extender": ("scheduler", "extender", "extender-health", cfg.extenderHealthListen),
        "webhook": ("webhook", "webhook", "https", cfg.webhookListen),
    }
    for name, (component, container_name, port_name, listen) in expected.items():
        svc = find(docs, "Service", f"{RELEASE}-{name}-metrics")
        assert svc["metadata"]["labels"]["slinky.slurm.net/metrics"] == "true"
        assert svc["spec"]["selector"] == deployment(docs, component)["spec"]["selector"]["matchLabels"]
        (port,) = svc["spec"]["ports"]
        assert port["targetPort"] == port_name
        assert port["name"] == ("https-metrics" if name == "webhook" else "http-metrics")
        number = _container_port(docs, component, container_name, port_name)
        assert port["port"] == number and listen.endswith(f":{number}"), name
    assert cfg.extenderListen.startswith("127.0.0.1:"), "the extender's /bind must stay on loopback"
    # The webhook's own Service (the API server's) is not a metrics Service.
    assert "slinky.slurm.net/metrics" not in find(docs, "Service", f"{RELEASE}-webhook")["metadata"]["labels"]
    assert not find_all(render({"metrics": {"service": {"enabled": False}}}), "ServiceMonitor")


def test_service_monitor_is_off_by_default_and_scrapes_every_metrics_service() -> None:
    assert not find_all(render(), "ServiceMonitor")
    docs = render({"metrics": {"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "p"}}}})
    sm = find(docs, "ServiceMonitor", RELEASE)
    assert sm["metadata"]["labels"]["release"] == "p"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    services = [s for s in find_all(docs, "Service")
                if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]  # fmt: skip
    assert sorted(s["metadata"]["name"] for s in services) == sorted(
        f"{RELEASE}-{c}-metrics" for c in ("operator", "webhook", "extender")
    )
    endpoints = {e["port"]: e for e in sm["spec"]["endpoints"]}
    assert set(endpoints) == {p["name"] for s in services for p in s["spec"]["ports"]}
    assert all(e["path"] == "/metrics" and e["interval"] == "15s" for e in endpoints.values())
    tls = endpoints["https-metrics"]
    assert tls["scheme"] == "https"
    assert tls["tlsConfig"]["ca"]["secret"] == {"name": f"{RELEASE}-webhook-tls", "key": "ca.crt"}
    assert tls["tlsConfig"]["serverName"] == f"{RELEASE}-webhook.{NS}.svc"


def test_dashboard_configmap_carries_the_repositorys_dashboard_only_when_asked() -> None:
    assert not [d for d in find_all(render(), "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    docs = render({"metrics": {"dashboard": {"enabled": True, "namespace": "monitoring",
                                             "annotations": {"grafana_folder": "Slurm"}}}})  # fmt: skip
    cm = find(docs, "ConfigMap", f"{RELEASE}-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Slurm"}
    shipped = json.loads((CHART / "dashboards" / "slurm-bridge.json").read_text())
    assert json.loads(cm["data"]["slurm-bridge.json"]) == shipped


def test_dashboard_queries_only_metrics_the_code_defines() -> None:
    """Every slurm_bridge_* series a panel queries is one metrics.py defines (a renamed metric
    would leave an empty panel)."""
    from slurm_bridge.core import metrics

    defined: set[str] = set()
    for registry in (metrics.OPERATOR, metrics.WEBHOOK, metrics.EXTENDER):
        defined |= set(registry._names_to_collectors)  # every series name, suffixes included
    defined |= {"slurm_bridge_placeholderjobs", "slurm_bridge_workqueue_depth", "slurm_bridge_leader"}  # collector
    dashboard = json.loads((CHART / "dashboards" / "slurm-bridge.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    used = {m for e in exprs for m in re.findall(r"\bslurm_bridge_\w+", e)}
    assert used and not used - defined, f"the dashboard queries unknown metrics {sorted(used - defined)}"
    assert {p["gridPos"]["y"] for p in dashboard["panels"]}, "panels need positions"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
        ({"metrics": {"dashbord": {"enabled": True}}}, "dashbord"),
    ],
)
def test_invalid_metrics_values_are_refused(values: Obj, message: str) -> None:
    proc = render_text(values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_slurm_hooks_off_by_default_and_on_with_the_token_the_service_and_the_config() -> None:
    """slurmctld's hook (docs/configuration.md#slurm-hooks): the operator mounts the token and takes
    notices on its health port, behind a Service of its own, only when enabled."""
    off = render()
    assert rendered_config(off)["slurmHookTokenFile"] is None
    assert not [d for d in off if d["kind"] == "Service" and d["metadata"]["name"].endswith("-operator-hook")]
    on = render({"slurmHooks": {"enabled": True, "token": "s3cret"}})
    assert rendered_config(on)["slurmHookTokenFile"] == "/var/run/secrets/slurm-bridge-hook/token"
    assert rendered_config(off)["slurmHookAcceptBearer"] is False
    assert rendered_config(on)["slurmHookAcceptBearer"] is False, "signed notices only, by default"
    migrating = render({"slurmHooks": {"enabled": True, "acceptBearer": True}})
    assert rendered_config(migrating)["slurmHookAcceptBearer"] is True, "bearer notices only when asked"
    op = deployment(on, "operator")["spec"]["template"]["spec"]
    mount = next(m for m in op["containers"][0]["volumeMounts"] if m["name"] == "slurm-hook")
    volume = next(v for v in op["volumes"] if v["name"] == "slurm-hook")
    assert mount["mountPath"] == "/var/run/secrets/slurm-bridge-hook" and mount["readOnly"]
    assert volume["secret"]["secretName"] == f"{RELEASE}-slurm-hook" and volume["secret"]["optional"]
    service = find(on, "Service", f"{RELEASE}-operator-hook")
    assert service["spec"]["ports"][0]["targetPort"] == "health"
    assert service["spec"]["selector"] == deployment(on, "operator")["spec"]["selector"]["matchLabels"]
    secret = find(on, "Secret", f"{RELEASE}-slurm-hook")
    assert secret["stringData"] == {"token": "s3cret"}
    assert not [
        d
        for d in render({"slurmHooks": {"enabled": True}})
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-slurm-hook")
    ]


# ---- the pod policy (webhook/podpolicy.py) ----------------------------------------------------------
MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def _policy_docs(docs: list[Obj]) -> list[Obj]:
    return [d for d in docs if d["kind"] in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")]


@pytest.mark.parametrize(
    "values",
    [{}, {"config": {"schedulerName": "hpc-bridge", "managedNamespaces": ["team-a"]}},
     {"fullnameOverride": "hpc", "config": {"managedNamespaceSelector": {"matchLabels": {"a": "1"}}}}],
    ids=["defaults", "scheduler-and-list", "names-and-selector"],
)  # fmt: skip
def test_the_chart_renders_the_pod_policy_podpolicy_py_gives(values: Obj) -> None:
    docs = render(values, "--api-versions", MAP_API, kube_version="1.37.0")
    fullname = values.get("fullnameOverride", RELEASE)
    cfg = parse_config(rendered_config(docs, fullname))
    expected = pod_policy(cfg, name=fullname)
    assert [_strip(d) for d in _policy_docs(docs)] == [_strip(e) for e in expected]
    mutating = find(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    assert mutating["matchConditions"] == [webhook_skip_condition(cfg.schedulerName)]


@pytest.mark.parametrize(
    ("setting", "apis", "kube", "present"),
    [
        ("auto", [MAP_API], "1.37.0", True),
        ("auto", [MAP_API], "1.36.0", True),
        ("auto", [], "1.37.0", False),  # `helm template` without the API named: the cluster may not serve it
        ("auto", [MAP_API], "1.35.0", False),  # 1.35 serves only the beta, if enabled
        (True, [], "1.34.0", True),
        (False, [MAP_API], "1.37.0", False),
    ],
)
def test_the_pod_policy_is_rendered_where_the_cluster_serves_it(
    setting: object, apis: list[str], kube: str, present: bool
) -> None:
    extra = [a for api in apis for a in ("--api-versions", api)]
    docs = render({"webhook": {"podPolicy": setting}}, *extra, kube_version=kube)
    assert [d["kind"] for d in _policy_docs(docs)] == (
        ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"] if present else []
    )
    # The webhook's skip is right with or without the policy: it skips only a pod already in its shape.
    conditions = find(docs, "MutatingWebhookConfiguration")["webhooks"][0]["matchConditions"]
    assert conditions[0]["name"] == "something-to-change"


def test_a_pod_policy_setting_that_is_not_one_of_three_is_refused() -> None:
    proc = render_text({"webhook": {"podPolicy": "sometimes"}})
    assert proc.returncode != 0 and "podPolicy" in proc.stderr
