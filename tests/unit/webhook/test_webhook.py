"""Admission webhook: mutation, validation, AdmissionReview handling, CLI, certificates, server."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from slurm_bridge import names
from slurm_bridge.core.config import Config, LabelSelector
from slurm_bridge.core.kubeformats import is_dns_subdomain, pointer
from slurm_bridge.core.logs import JsonFormatter
from slurm_bridge.kube.taints import managed_toleration, tolerates
from slurm_bridge.rules.dra.classes import EXTENDED_PREFIX
from slurm_bridge.webhook import server as server_mod
from slurm_bridge.webhook.certs import CertError, is_host_name, subject_alt_names, write_certs
from slurm_bridge.webhook.main import main
from slurm_bridge.webhook.mutate import mutate, mutate_pod
from slurm_bridge.webhook.render import (
    BRIDGE_KEY_MARK,
    MAX_NAME,
    PLAIN_POD_CREATE_CHECK,
    RenderError,
    ca_bundle,
    check_url,
    parse_service,
    webhook_configurations,
)
from slurm_bridge.webhook.review import (
    AdmissionRequest,
    Decision,
    InvalidObject,
    MalformedReview,
    parse_review,
    review_response,
)
from slurm_bridge.webhook.server import WebhookServer
from slurm_bridge.webhook.templates import pod_templates
from slurm_bridge.webhook.validate import PLACEMENT_FIELDS, validate
from tests.builders import make_pod as build_pod

pytestmark = pytest.mark.unit

JSON = dict[str, Any]
SCHED = "slurm-bridge"
BRIDGE_USER = "system:serviceaccount:slurm-bridge:slurm-bridge"
CONFIG = Config(schedulerName=SCHED, managedNamespaces=["slurm"], trustedUsers=[BRIDGE_USER])
GATE = {"name": names.SCHEDULING_GATE}
TOLERATION = {"key": names.TAINT_MANAGED_NODE, "operator": "Equal", "value": SCHED, "effect": "NoExecute"}
ANN_TIME = names.ANN_TIMELIMIT
ANN_NODES = names.ANN_MIN_NODES


def make_pod(
    spec: JSON | None = None, labels: JSON | None = None, annotations: JSON | None = None, name: str = "p"
) -> JSON:
    """A pod created in the managed namespace ``slurm``; ``spec``: fields over its one container's."""
    built = build_pod(name, "slurm").container("c", image="busybox")
    if labels is not None:
        built.meta(labels=labels)
    if annotations is not None:
        built.meta(annotations=annotations)
    return built.spec(**(spec or {})).obj()


def make_review(
    obj: JSON | None,
    *,
    operation: str = "CREATE",
    old: JSON | None = None,
    group: str = "",
    version: str = "v1",
    kind: str = "Pod",
    user: str = "alice",
    uid: str = "uid-1",
) -> JSON:
    request: JSON = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "namespace": "slurm",
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def make_request(obj: JSON | None, **kw: Any) -> AdmissionRequest:
    return parse_review(json.dumps(make_review(obj, **kw)).encode())


def apply(pod: JSON, patch: list[JSON]) -> JSON:
    """Apply with an independent RFC 6902 implementation, as the apiserver would."""
    result: JSON = jsonpatch.apply_patch(pod, patch)
    return result


# --- mutate -----------------------------------------------------------------------------------


def test_pointer_escapes_slash_and_tilde() -> None:
    key = "slinky.slurm.net/a~b"
    path = pointer("metadata", "annotations", key)
    assert path == "/metadata/annotations/slinky.slurm.net~1a~0b"
    pod = make_pod(annotations={})
    assert apply(pod, [{"op": "add", "path": path, "value": "v"}])["metadata"]["annotations"] == {key: "v"}


MUTATE_CASES: list[tuple[str, JSON, JSON]] = [
    # (case, spec of the new pod, expected spec fields after the patch)
    (
        "default scheduler",
        {"schedulerName": "default-scheduler"},
        {"schedulerName": SCHED, "schedulingGates": [GATE], "tolerations": [TOLERATION]},
    ),
    (
        "scheduler unset",
        {},
        {"schedulerName": SCHED, "schedulingGates": [GATE], "tolerations": [TOLERATION]},
    ),
    (
        "already the bridge's scheduler",
        {"schedulerName": SCHED},
        {"schedulerName": SCHED, "schedulingGates": [GATE], "tolerations": [TOLERATION]},
    ),
    (
        "nodeName is cleared",
        {"schedulerName": "default-scheduler", "nodeName": "node-1"},
        {"schedulerName": SCHED, "nodeName": None, "schedulingGates": [GATE]},
    ),
    (
        "other gates and tolerations are kept",
        {
            "schedulingGates": [{"name": "example.com/other"}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        },
        {
            "schedulingGates": [{"name": "example.com/other"}, GATE],
            "tolerations": [{"key": "gpu", "operator": "Exists"}, TOLERATION],
        },
    ),
    (
        "null lists are replaced",
        {"schedulingGates": None, "tolerations": None},
        {"schedulingGates": [GATE], "tolerations": [TOLERATION]},
    ),
    (
        "an Exists toleration already covers the taint",
        {"tolerations": [{"key": names.TAINT_MANAGED_NODE, "operator": "Exists"}]},
        {"tolerations": [{"key": names.TAINT_MANAGED_NODE, "operator": "Exists"}]},
    ),
    (
        "a timed toleration does not count",
        {"tolerations": [{**TOLERATION, "tolerationSeconds": 30}]},
        {"tolerations": [{**TOLERATION, "tolerationSeconds": 30}, TOLERATION]},
    ),
    (
        "the gate is already there",
        {"schedulerName": SCHED, "schedulingGates": [GATE], "tolerations": [TOLERATION]},
        {"schedulerName": SCHED, "schedulingGates": [GATE], "tolerations": [TOLERATION]},
    ),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in MUTATE_CASES], ids=[c[0] for c in MUTATE_CASES])
def test_mutate_pod(spec: JSON, expected: JSON) -> None:
    pod = make_pod(spec)
    original = copy.deepcopy(pod)
    decision = mutate(make_request(pod), CONFIG)
    assert decision.allowed
    assert pod == original, "the input is not modified"
    patched = apply(pod, decision.patch)
    for key, value in expected.items():
        if value is None:
            assert key not in patched["spec"]
        else:
            assert patched["spec"][key] == value
    assert patched["spec"]["containers"] == pod["spec"]["containers"]
    # Reinvocation on the result is a no-op.
    again = mutate(make_request(patched), CONFIG)
    assert again.allowed and again.patch == []


def test_mutate_warns_about_cleared_node_name() -> None:
    decision = mutate(make_request(make_pod({"nodeName": "node-1"})), CONFIG)
    assert any("node-1" in w for w in decision.warnings)
    assert {"op": "remove", "path": "/spec/nodeName"} in decision.patch


@pytest.mark.parametrize(
    ("case", "pod", "kw"),
    [
        ("other scheduler", make_pod({"schedulerName": "volcano"}), {}),
        (
            "mirror pod",
            make_pod({"nodeName": "n1"}, annotations={"kubernetes.io/config.mirror": "abc"}),
            {},
        ),
        ("update", make_pod(), {"operation": "UPDATE", "old": make_pod()}),
        ("not a pod", {"metadata": {"name": "j"}, "spec": {}}, {"group": "batch", "kind": "Job"}),
    ],
)
def test_mutate_leaves_alone(case: str, pod: JSON, kw: dict[str, Any]) -> None:
    decision = mutate(make_request(pod, **kw), CONFIG)
    assert decision.allowed
    assert decision.patch == [], case


def test_mutate_pod_without_spec() -> None:
    with pytest.raises(InvalidObject):
        mutate_pod({"metadata": {}}, SCHED)


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": names.TAINT_MANAGED_NODE, "operator": "Equal", "value": "other"}, False),
        ({"key": names.TAINT_MANAGED_NODE, "value": SCHED}, True),
        ({"key": "x", "operator": "Exists"}, False),
    ],
)
def test_tolerates(toleration: JSON, ok: bool) -> None:
    assert tolerates(toleration, names.TAINT_MANAGED_NODE, SCHED, "NoExecute") is ok
    assert tolerates(managed_toleration(SCHED), names.TAINT_MANAGED_NODE, SCHED, "NoExecute")


# --- validate ---------------------------------------------------------------------------------

JOB_ID = names.LABEL_SLURM_JOB_ID
NODE_ANN = names.ANN_SLURM_NODE


def _pod_update(old_labels: JSON, new_labels: JSON, old_ann: JSON, new_ann: JSON) -> JSON:
    return {
        "obj": make_pod(labels=new_labels, annotations=new_ann),
        "old": make_pod(labels=old_labels, annotations=old_ann),
    }


VALIDATE_CASES: list[tuple[str, JSON, int | None, list[str]]] = [
    # (case, request kwargs (obj/old/operation/user/...), denial code or None, words in the message)
    ("plain pod", {"obj": make_pod()}, None, []),
    (
        "reserved label on create",
        {"obj": make_pod(labels={JOB_ID: "42"})},
        403,
        [JOB_ID, "'42'", "remove it"],
    ),
    (
        "reserved annotation on create",
        {"obj": make_pod(annotations={NODE_ANN: "n1"})},
        403,
        [NODE_ANN, "'n1'", "remove it"],
    ),
    (
        "trusted user creates with reserved label",
        {"obj": make_pod(labels={JOB_ID: "42"}), "user": BRIDGE_USER},
        None,
        [],
    ),
    (
        "label added on update",
        {**_pod_update({}, {JOB_ID: "7"}, {}, {}), "operation": "UPDATE"},
        403,
        [JOB_ID, "may not be added", "'7'"],
    ),
    (
        "label changed on update",
        {**_pod_update({JOB_ID: "7"}, {JOB_ID: "8"}, {}, {}), "operation": "UPDATE"},
        403,
        [JOB_ID, "changed from '7' to '8'"],
    ),
    (
        "annotation removed on update",
        {**_pod_update({}, {}, {NODE_ANN: "n1"}, {}), "operation": "UPDATE"},
        403,
        [NODE_ANN, "may not be removed", "'n1'"],
    ),
    (
        "unchanged reserved keys on update",
        {
            **_pod_update({JOB_ID: "7"}, {JOB_ID: "7", "x": "y"}, {NODE_ANN: "n"}, {NODE_ANN: "n"}),
            "operation": "UPDATE",
        },
        None,
        [],
    ),
    (
        "the bridge sets them on update",
        {**_pod_update({}, {JOB_ID: "7"}, {}, {NODE_ANN: "n"}), "operation": "UPDATE", "user": BRIDGE_USER},
        None,
        [],
    ),
    (
        "invalid slurmjob annotations, all listed",
        {"obj": make_pod(annotations={ANN_TIME: "soon", ANN_NODES: "0", "other": "x"})},
        422,
        ["2 problems", ANN_TIME, '"soon"', "minutes", ANN_NODES, '"0"', "whole number of nodes"],
    ),
    (
        "unknown slurmjob key",
        {"obj": make_pod(annotations={names.SLURMJOB_PREFIX + "partiton": "a"})},
        422,
        ["partiton", "did you mean", names.ANN_PARTITION],
    ),
    (
        "valid slurmjob annotations",
        {"obj": make_pod(annotations={ANN_TIME: "1-00:00:00", ANN_NODES: "2", names.ANN_PARTITION: "debug"})},
        None,
        [],
    ),
    (
        "trusted users still get annotation errors",
        {"obj": make_pod(annotations={ANN_TIME: "soon"}), "user": BRIDGE_USER},
        422,
        [ANN_TIME],
    ),
    (
        "reserved and invalid together",
        {"obj": make_pod(labels={JOB_ID: "1"}, annotations={ANN_TIME: "soon"})},
        403,
        [JOB_ID, ANN_TIME],
    ),
    (
        "unchanged invalid annotations on update",
        {
            **_pod_update({"a": "1"}, {"a": "2"}, {ANN_TIME: "soon"}, {ANN_TIME: "soon"}),
            "operation": "UPDATE",
        },
        None,
        [],
    ),
    (
        "changed invalid annotations on update",
        {**_pod_update({}, {}, {ANN_TIME: "60"}, {ANN_TIME: "1:75:00"}), "operation": "UPDATE"},
        422,
        [ANN_TIME, '"1:75:00"'],
    ),
    ("delete", {"obj": None, "old": make_pod(labels={JOB_ID: "1"}), "operation": "DELETE"}, None, []),
    ("connect", {"obj": None, "operation": "CONNECT"}, None, []),
    (
        "other kinds",
        {"obj": {"metadata": {"annotations": {ANN_TIME: "soon"}}}, "group": "batch", "kind": "CronJob"},
        None,
        [],
    ),
    (
        "a pod-making controller (its pods' options)",
        {"obj": {"metadata": {"annotations": {ANN_TIME: "soon"}}}, "group": "apps", "kind": "Deployment"},
        422,
        [ANN_TIME, '"soon"'],
    ),
]


def _job(annotations: JSON | None = None, template_meta: JSON | None = None) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "annotations": annotations or {}},
        "spec": {"template": {"metadata": template_meta or {}, "spec": {"containers": []}}},
    }


def _jobset(template_meta: JSON) -> JSON:
    rj = [
        {"name": "ok", "template": {"spec": {"template": {"metadata": {}}}}},
        {"name": "bad", "template": {"spec": {"template": {"metadata": template_meta}}}},
    ]
    return {"metadata": {"name": "js"}, "spec": {"replicatedJobs": rj}}


def _lws(worker_meta: JSON) -> JSON:
    return {
        "metadata": {"name": "l"},
        "spec": {
            "leaderWorkerTemplate": {
                "leaderTemplate": {"metadata": {}},
                "workerTemplate": {"metadata": worker_meta},
            }
        },
    }


JOB = {"group": "batch", "kind": "Job"}
JOBSET = {"group": "jobset.x-k8s.io", "version": "v1alpha2", "kind": "JobSet"}
LWS = {"group": "leaderworkerset.x-k8s.io", "kind": "LeaderWorkerSet"}
PODGROUP = {"group": "scheduling.x-k8s.io", "version": "v1alpha1", "kind": "PodGroup"}

VALIDATE_CASES += [
    ("job ok", {"obj": _job({ANN_TIME: "30"}), **JOB}, None, []),
    ("job annotation", {"obj": _job({ANN_TIME: "soon"}), **JOB}, 422, [ANN_TIME, '"soon"']),
    (
        "job template annotation",
        {"obj": _job(template_meta={"annotations": {ANN_NODES: "x"}}), **JOB},
        422,
        ["spec.template.metadata", ANN_NODES],
    ),
    (
        "job template reserved label",
        {"obj": _job(template_meta={"labels": {JOB_ID: "3"}}), **JOB},
        403,
        ["spec.template.metadata", JOB_ID],
    ),
    (
        "job update with unchanged bad annotation",
        {
            "obj": _job({ANN_TIME: "soon", "x": "1"}),
            "old": _job({ANN_TIME: "soon"}),
            "operation": "UPDATE",
            **JOB,
        },
        None,
        [],
    ),
    (
        "jobset template",
        {"obj": _jobset({"annotations": {ANN_TIME: "soon"}}), **JOBSET},
        422,
        ["spec.replicatedJobs[1].template.spec.template.metadata", ANN_TIME],
    ),
    (
        "lws worker template",
        {"obj": _lws({"labels": {names.LABEL_PLACEHOLDER_JOB: "x"}}), **LWS},
        403,
        ["spec.leaderWorkerTemplate.workerTemplate.metadata", names.LABEL_PLACEHOLDER_JOB],
    ),
    (
        "podgroup annotation",
        {"obj": {"metadata": {"name": "pg", "annotations": {names.ANN_EXCLUSIVE: "yes"}}}, **PODGROUP},
        422,
        [names.ANN_EXCLUSIVE, '"yes"', "true"],
    ),
]


# --- placement: what Slurm cannot honour is refused (slurm_bridge/rules/nodeplacement.py) -----------------

HOST = names.LABEL_HOSTNAME
FEATURE = names.LABEL_NODE_FEATURE_PREFIX
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
ANN_CONSTRAINTS = names.ANN_CONSTRAINTS
ANTI = {"podAntiAffinity": {REQUIRED: [{"topologyKey": HOST, "labelSelector": {"matchLabels": {"a": "b"}}}]}}


def node_affinity(*terms: list[JSON]) -> JSON:
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


def host_in(*nodes: str) -> JSON:
    return {"key": HOST, "operator": "In", "values": list(nodes)}


def feature(name: str) -> JSON:
    return {"key": FEATURE + name, "operator": "Exists"}


def managed_pod(
    spec: JSON | None = None,
    annotations: JSON | None = None,
    labels: JSON | None = None,
    owner: bool = False,
    gated: bool = True,
) -> JSON:
    """A pod as the validating webhook sees it after the bridge's mutation."""
    mutated: JSON = {"schedulerName": SCHED, "tolerations": [TOLERATION], **(spec or {})}
    if gated:
        mutated["schedulingGates"] = [GATE]
    pod = make_pod(mutated, labels=labels, annotations=annotations)
    if owner:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
        ]
    return pod


def _job_with(spec: JSON, annotations: JSON | None = None) -> JSON:
    job = _job(annotations)
    job["spec"]["template"]["spec"].update(spec)
    return job


def _jobset_with(*specs: JSON, annotations: JSON | None = None) -> JSON:
    rj = [{"name": f"r{i}", "template": {"spec": {"template": {"spec": s}}}} for i, s in enumerate(specs)]
    return {"metadata": {"name": "js", "annotations": annotations or {}}, "spec": {"replicatedJobs": rj}}


def _lws_with(worker_spec: JSON) -> JSON:
    lws = _lws({})
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"] = worker_spec
    return lws


VALIDATE_CASES += [
    ("managed pod on a named node", {"obj": managed_pod({"nodeSelector": {HOST: "n1"}})}, None, []),
    (
        "managed pod with node features and constraints",
        {"obj": managed_pod({"affinity": node_affinity([feature("gpu")])}, annotations={ANN_CONSTRAINTS: "a|b"})},
        None,
        [],
    ),
    (
        "managed pod with pod anti-affinity",
        {"obj": managed_pod({"affinity": ANTI})},
        422,
        ["spec.affinity.podAntiAffinity", "a node of its own", names.ANN_EXCLUSIVE],
    ),
    (
        "managed pod with pod affinity",
        {"obj": managed_pod({"affinity": {"podAffinity": {PREFERRED: [{"weight": 1}]}}})},
        422,
        ["spec.affinity.podAffinity", "gang", ANN_CONSTRAINTS],
    ),
    (
        "managed pod with topology spread",
        {"obj": managed_pod({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOST}]})},
        422,
        ["spec.topologySpreadConstraints", ANN_CONSTRAINTS],
    ),
    (
        "managed pod with preferred node affinity",
        {"obj": managed_pod({"affinity": {"nodeAffinity": {PREFERRED: [{"weight": 1}]}}})},
        422,
        [f"spec.affinity.nodeAffinity.{PREFERRED}", "silently ignored", REQUIRED],
    ),
    (
        "managed pod selecting a label Slurm does not know",
        {"obj": managed_pod({"nodeSelector": {"topology.kubernetes.io/zone": "z1"}})},
        422,
        ['spec.nodeSelector["topology.kubernetes.io/zone"]', FEATURE + "<feature>", ANN_CONSTRAINTS],
    ),
    (
        "managed pod selecting Linux nodes, as many charts do (every Slurm node is one)",
        {"obj": managed_pod({"nodeSelector": {"kubernetes.io/os": "linux"}})},
        None,
        [],
    ),
    (
        "managed pod with terms Slurm cannot OR",
        {"obj": managed_pod({"affinity": node_affinity([host_in("a")], [feature("gpu")])})},
        422,
        [f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms", "ORs these 2 terms"],
    ),
    (
        "pod of another scheduler keeps its rules",
        {"obj": make_pod({"schedulerName": "other", "affinity": ANTI, "topologySpreadConstraints": [{}]})},
        None,
        [],
    ),
    (
        "bare pod that may use two nodes",
        {"obj": managed_pod({"affinity": node_affinity([host_in("a", "b")])})},
        422,
        ["spec: the pods' required node names allow 2 node(s) (a, b)", "holds 1 node(s)"],
    ),
    (
        "bare pod that holds both of its two nodes",
        {"obj": managed_pod({"affinity": node_affinity([host_in("a", "b")])}, annotations={ANN_NODES: "2"})},
        None,
        [],
    ),
    (
        "job pod that may use two nodes (its group is the operator's to judge)",
        {"obj": managed_pod({"affinity": node_affinity([host_in("a", "b")])}, owner=True)},
        None,
        [],
    ),
    (
        "pod-group member that may use two nodes",
        {"obj": managed_pod({"affinity": node_affinity([host_in("a", "b")])}, labels={names.LABEL_POD_GROUP: "pg"})},
        None,
        [],
    ),
    (
        "bare pod whose features cannot join its constraints",
        {
            "obj": managed_pod(
                {"affinity": node_affinity([feature("gpu")], [feature("a100"), feature("ib")])},
                annotations={ANN_CONSTRAINTS: "x|y"},
            )
        },
        422,
        ["spec: ", ANN_CONSTRAINTS, "nesting parentheses"],
    ),
    (
        "placement and annotation problems together",
        {"obj": managed_pod({"affinity": ANTI}, annotations={ANN_TIME: "soon"})},
        422,
        ["2 problems", ANN_TIME, "spec.affinity.podAntiAffinity"],
    ),
    (
        "gated pod gains node affinity on update: its Slurm job would not know",
        {
            "obj": managed_pod({"affinity": node_affinity([host_in("n1")])}),
            "old": managed_pod(),
            "operation": "UPDATE",
        },
        422,
        ["spec.nodeSelector and spec.affinity", "cannot change after it was created", "delete the pod"],
    ),
    (
        "gated pod gains preferred node affinity on update",
        {
            "obj": managed_pod({"affinity": {"nodeAffinity": {PREFERRED: [{"weight": 1}]}}}),
            "old": managed_pod(),
            "operation": "UPDATE",
        },
        422,
        ["cannot change after it was created"],
    ),
    (
        "gated pod gains an unknown nodeSelector entry on update",
        {"obj": managed_pod({"nodeSelector": {"disk": "ssd"}}), "old": managed_pod(), "operation": "UPDATE"},
        422,
        ["cannot change after it was created"],
    ),
    (
        "unchanged refused placement on update",
        {
            "obj": managed_pod({"affinity": ANTI}, labels={"x": "1"}),
            "old": managed_pod({"affinity": ANTI}),
            "operation": "UPDATE",
        },
        None,
        [],
    ),
    (
        "the bridge releases a pod with a refused placement",
        {
            "obj": managed_pod({"affinity": ANTI}, labels={JOB_ID: "7"}, annotations={NODE_ANN: "n"}, gated=False),
            "old": managed_pod({"affinity": ANTI}),
            "operation": "UPDATE",
            "user": BRIDGE_USER,
        },
        None,
        [],
    ),
    (
        "bare pod's constraints change to clash with its features",
        {
            "obj": managed_pod(
                {"affinity": node_affinity([feature("gpu")], [feature("a100"), feature("ib")])},
                annotations={ANN_CONSTRAINTS: "x|y"},
            ),
            "old": managed_pod({"affinity": node_affinity([feature("gpu")], [feature("a100"), feature("ib")])}),
            "operation": "UPDATE",
        },
        422,
        [ANN_CONSTRAINTS, "nesting parentheses"],
    ),
    (
        "job template with pod anti-affinity",
        {"obj": _job_with({"affinity": ANTI}), **JOB},
        422,
        ["spec.template.spec.affinity.podAntiAffinity"],
    ),
    (
        "job template of another scheduler",
        {"obj": _job_with({"schedulerName": "other", "affinity": ANTI}), **JOB},
        None,
        [],
    ),
    (
        "job template that may use two nodes",
        {"obj": _job_with({"affinity": node_affinity([host_in("a", "b")])}), **JOB},
        422,
        ["spec.template.spec: the pods' required node names allow 2 node(s)"],
    ),
    (
        "job template that holds both of its two nodes",
        {"obj": _job_with({"affinity": node_affinity([host_in("a", "b")])}, {names.ANN_MAX_NODES: "2"}), **JOB},
        None,
        [],
    ),
    (
        "suspended job's template gains an unknown label",
        {
            "obj": _job_with({"nodeSelector": {"zone": "z1"}}),
            "old": _job_with({}),
            "operation": "UPDATE",
            **JOB,
        },
        422,
        ['spec.template.spec.nodeSelector["zone"]'],
    ),
    (
        "job update leaves a refused placement alone",
        {
            "obj": _job_with({"affinity": ANTI}, {"other": "x"}),
            "old": _job_with({"affinity": ANTI}),
            "operation": "UPDATE",
            **JOB,
        },
        None,
        [],
    ),
    (
        "job's constraints change to clash with its template's features",
        {
            "obj": _job_with(
                {"affinity": node_affinity([feature("a"), feature("b")], [feature("c")])}, {ANN_CONSTRAINTS: "x|y"}
            ),
            "old": _job_with({"affinity": node_affinity([feature("a"), feature("b")], [feature("c")])}),
            "operation": "UPDATE",
            **JOB,
        },
        422,
        ["spec.template.spec: ", ANN_CONSTRAINTS],
    ),
    (
        "jobset templates without a common node",
        {"obj": _jobset_with({"nodeSelector": {HOST: "a"}}, {"nodeSelector": {HOST: "b"}}), **JOBSET},
        422,
        [
            "spec.replicatedJobs[0].template.spec.template.spec, spec.replicatedJobs[1].template.spec.template.spec: ",
            "no node in common",
        ],
    ),
    (
        "jobset templates that may use two nodes (the gang's size is the operator's to judge)",
        {"obj": _jobset_with({"affinity": node_affinity([host_in("a", "b")])}, {}), **JOBSET},
        None,
        [],
    ),
    (
        "jobset templates' features and constraints",
        {
            "obj": _jobset_with({"nodeSelector": {FEATURE + "gpu": "true"}}, {}, annotations={ANN_CONSTRAINTS: "a|b"}),
            **JOBSET,
        },
        None,
        [],
    ),
    (
        "lws worker template with topology spread",
        {"obj": _lws_with({"topologySpreadConstraints": [{"maxSkew": 1}]}), **LWS},
        422,
        ["spec.leaderWorkerTemplate.workerTemplate.spec.topologySpreadConstraints"],
    ),
]


@pytest.mark.parametrize(("kw", "code", "words"), [c[1:] for c in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES])
def test_validate(kw: JSON, code: int | None, words: list[str]) -> None:
    kw = dict(kw)
    decision = validate(make_request(kw.pop("obj"), **kw), CONFIG)
    if code is None:
        assert decision.allowed, decision.message
        return
    assert not decision.allowed
    assert decision.code == code
    for w in words:
        assert w in decision.message


def _has_something_to_check(pod: JSON) -> bool:
    """PLAIN_POD_CREATE_CHECK for a pod create, as the apiserver evaluates it (e2e: test_metrics)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    keys = [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    resources = [
        r for c in containers for part in ("requests", "limits") for r in (c.get("resources") or {}).get(part) or {}
    ]
    return (
        any(BRIDGE_KEY_MARK in k for k in keys)
        or any(f in spec for f in (*PLACEMENT_FIELDS, "resourceClaims"))
        or any(r.startswith(EXTENDED_PREFIX) for r in resources)
    )


def test_the_skip_condition_names_what_its_mirror_checks() -> None:
    for field in (*PLACEMENT_FIELDS, "resourceClaims"):
        assert f"has(object.spec.{field})" in PLAIN_POD_CREATE_CHECK
    assert f"k.contains('{BRIDGE_KEY_MARK}')" in PLAIN_POD_CREATE_CHECK
    assert f"r.startsWith('{EXTENDED_PREFIX}')" in PLAIN_POD_CREATE_CHECK
    assert PLAIN_POD_CREATE_CHECK.startswith("request.operation != 'CREATE' || request.resource.resource != 'pods' || ")


def test_every_key_validate_reads_carries_the_mark() -> None:
    keys = [*names.RESERVED_POD_LABELS, *names.RESERVED_POD_ANNOTATIONS, names.SLURMJOB_PREFIX]
    keys.append(names.ANN_DEVICE_REQUESTS)
    assert all(BRIDGE_KEY_MARK in k for k in keys)


REFUSED_POD_CREATES = [
    c for c in VALIDATE_CASES if c[2] is not None and c[1].get("operation", "CREATE") == "CREATE" and "kind" not in c[1]
]


@pytest.mark.parametrize("kw", [c[1] for c in REFUSED_POD_CREATES], ids=[c[0] for c in REFUSED_POD_CREATES])
def test_every_refused_pod_create_is_sent_to_validation(kw: JSON) -> None:
    assert _has_something_to_check(kw["obj"])


PLAIN_PODS = {
    "bare": managed_pod(),
    "labels and annotations of others": managed_pod(labels={"app": "x", "example.com/team": "a"},
                                                    annotations={"prometheus.io/scrape": "true"}),
    "native and device-plugin resources": managed_pod({"containers": [{"name": "c", "image": "i", "resources": {
        "requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}),
    "init containers, volumes, tolerations": managed_pod({
        "initContainers": [{"name": "i", "image": "i", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [TOLERATION, {"key": "k", "operator": "Exists"}]}),
    "a Job's pod": managed_pod(owner=True, labels={"batch.kubernetes.io/job-name": "j"}),
    "a coscheduling PodGroup member": managed_pod(labels={names.LABEL_POD_GROUP: "g"}),
    "another scheduler's pod": make_pod({"schedulerName": "other"}),
    "a mirror pod": make_pod(annotations={"kubernetes.io/config.mirror": "x"}),
}  # fmt: skip


@pytest.mark.parametrize("pod", PLAIN_PODS.values(), ids=PLAIN_PODS.keys())
def test_a_create_the_condition_skips_is_one_validation_allows(pod: JSON) -> None:
    assert not _has_something_to_check(pod)
    decision = validate(make_request(pod), CONFIG)
    assert decision.allowed, decision.message


def test_placement_is_checked_on_create_and_frozen_after() -> None:
    new = managed_pod({"nodeSelector": {HOST: "n1"}})
    assert validate(make_request(new), CONFIG).allowed
    changed = validate(make_request(new, operation="UPDATE", old=managed_pod()), CONFIG)
    assert not changed.allowed and "cannot change after it was created" in changed.message
    assert validate(make_request(new, operation="UPDATE", old=new), CONFIG).allowed, "an update that keeps it"


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ({"nodeSelector": {HOST: "n1", FEATURE + "gpu": "true"}}, True),
        ({"affinity": node_affinity([host_in("n1")]), "schedulerName": "default-scheduler"}, True),
        ({"affinity": ANTI}, False),
    ],
)
def test_mutated_pods_are_validated(spec: JSON, allowed: bool) -> None:
    """Mutation hands the pod to the bridge (gate, toleration, scheduler) and leaves its placement alone;
    validation, which runs after it, then judges that placement."""
    pod = make_pod(spec)
    mutated = apply(pod, mutate(make_request(pod), CONFIG).patch)
    assert {k: mutated["spec"].get(k) for k in ("nodeSelector", "affinity")} == {
        k: pod["spec"].get(k) for k in ("nodeSelector", "affinity")
    }
    assert validate(make_request(mutated), CONFIG).allowed is allowed


def test_pod_templates_paths() -> None:
    found = pod_templates(
        _jobset({"labels": {"a": "b"}}), [("spec", "replicatedJobs", "*", "template", "spec", "template")]
    )
    assert list(found) == [
        "spec.replicatedJobs[0].template.spec.template",
        "spec.replicatedJobs[1].template.spec.template",
    ]
    assert pod_templates({"spec": {}}, [("spec", "template")]) == {}


# --- AdmissionReview ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
            "v1beta1",
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "request is missing",
        ),
        (json.dumps({**make_review(make_pod()), "request": {"kind": {"kind": "Pod"}}}).encode(), "uid"),
        (json.dumps(make_review(make_pod(), operation="PATCH")).encode(), "operation"),
        (json.dumps(make_review(None)).encode(), "object is missing"),
        (json.dumps(make_review(make_pod(), operation="UPDATE")).encode(), "oldObject"),
        (json.dumps(make_review("x")).encode(), "must be an object"),  # type: ignore[arg-type]
    ],
)
def test_malformed_reviews(body: bytes, words: str) -> None:
    with pytest.raises(MalformedReview, match=words):
        parse_review(body)


def test_review_response() -> None:
    patch = [{"op": "add", "path": "/spec/x", "value": 1}]
    allowed = review_response("u", Decision(allowed=True, patch=patch, warnings=["w"]))
    assert allowed["apiVersion"] == "admission.k8s.io/v1" and allowed["kind"] == "AdmissionReview"
    resp = allowed["response"]
    assert resp["uid"] == "u" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == patch
    assert resp["warnings"] == ["w"]
    denied = review_response("u", Decision(allowed=False, code=403, reason="Forbidden", message="no"))["response"]
    assert denied == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 403, "message": "no", "reason": "Forbidden"},
    }
    assert "patch" not in review_response("u", Decision(allowed=True))["response"]


# --- render-config --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    write_certs(d, ["127.0.0.1", "localhost"])
    return d


def test_render_url(certs: Path) -> None:
    pem = (certs / "ca.crt").read_bytes()
    docs = webhook_configurations(CONFIG, bundle=ca_bundle(pem), url="https://127.0.0.1:9443/")
    assert [d["kind"] for d in docs] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["slurm"]}]}
    for doc, path in zip(docs, ["/mutate", "/validate"], strict=True):
        assert doc["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert doc["metadata"]["name"] == "slurm-bridge"
        assert doc["metadata"]["labels"][names.LABEL_APP_NAME] == names.APP_NAME
        (hook,) = doc["webhooks"]
        assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443" + path
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == pem
        assert hook["namespaceSelector"] == selector
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 10
        assert len(hook["name"].split(".")) >= 3
    mutating, validating = (d["webhooks"][0] for d in docs)
    assert mutating["rules"][0] == {
        "operations": ["CREATE"],
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": ["pods"],
        "scope": "Namespaced",
    }
    # Workloads with pod templates: only their creates, only checked (webhook/apis.py).
    assert [(r["operations"], r["apiGroups"][0], r["resources"][0]) for r in mutating["rules"][1:]] == [
        (["CREATE"], "batch", "jobs"),
        (["CREATE"], "jobset.x-k8s.io", "jobsets"),
        (["CREATE"], "leaderworkerset.x-k8s.io", "leaderworkersets"),
    ]
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    resources = {(r["apiGroups"][0], r["resources"][0]) for r in validating["rules"]}
    assert resources == {
        ("", "pods"),
        ("batch", "jobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("scheduling.x-k8s.io", "podgroups"),
        ("scheduling.k8s.io", "workloads"),
        ("scheduling.k8s.io", "podgroups"),
        ("scheduling.k8s.io", "compositepodgroups"),
        ("", "replicationcontrollers"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "deployments"),
        ("apps", "daemonsets"),
        ("resource.k8s.io", "resourceclaims"),  # claims made by hand (webhook/devicedoors.py): their creates
    }
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in validating["rules"][:-1])
    assert validating["rules"][-1]["operations"] == ["CREATE"]


def test_render_service_and_selector(certs: Path) -> None:
    config = Config(managedNamespaceSelector=LabelSelector(matchLabels={"slurm-bridge": "enabled"}))
    service = parse_service("slurm-bridge/webhook:9443")
    docs = webhook_configurations(config, bundle=ca_bundle((certs / "ca.crt").read_bytes()), service=service)
    hook = docs[0]["webhooks"][0]
    assert hook["clientConfig"]["service"] == {
        "namespace": "slurm-bridge",
        "name": "webhook",
        "path": "/mutate",
        "port": 9443,
    }
    assert hook["namespaceSelector"] == {"matchLabels": {"slurm-bridge": "enabled"}}
    assert parse_service("ns/svc").port == 443


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: check_url("http://127.0.0.1:9443"), "https"),
        (lambda: check_url("https://127.0.0.1:9443/?a=b"), "query"),
        (lambda: parse_service("svc"), "NAMESPACE/NAME"),
        (lambda: parse_service("ns/svc:0"), "out of range"),
        (lambda: ca_bundle(b"garbage"), "no certificate|not a PEM"),
    ],
)
def test_render_errors(call: Callable[[], object], words: str) -> None:
    with pytest.raises(RenderError, match=words):
        call()


def test_render_name_at_its_limit_gives_webhook_names_of_253() -> None:
    """--name is as long as the longest webhook name (mutate-pods.<name>.slinky.slurm.net) allows."""
    name = ".".join(["n" * 63] * 3) + "." + "m" * 32
    assert len(name) == MAX_NAME == 224
    docs = webhook_configurations(CONFIG, bundle="Y2E=", url="https://127.0.0.1:9443", name=name)
    hooks = [d["webhooks"][0]["name"] for d in docs]
    assert [len(h) for h in hooks] == [253, 250]
    assert all(is_dns_subdomain(h) for h in hooks) and all(d["metadata"]["name"] == name for d in docs)
    for bad in (name + "m", "Slurm-Bridge", "sb-", "sb\n"):
        with pytest.raises(RenderError, match=f"--name .* at most {MAX_NAME} characters"):
            webhook_configurations(CONFIG, bundle="Y2E=", url="https://127.0.0.1:9443", name=bad)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("slurm-bridge/webhook", True),
        (f"{'n' * 63}/{'s' * 63}:9443", True),
        (f"{'n' * 64}/webhook", False),
        (f"slurm-bridge/{'s' * 64}", False),
        ("slurm-bridge/web.hook", False),
    ],
)
def test_service_namespace_and_name_are_dns_labels(value: str, ok: bool) -> None:
    if ok:
        assert parse_service(value).name == value.split("/")[1].split(":")[0]
    else:
        with pytest.raises(RenderError, match="must be DNS labels"):
            parse_service(value)


def test_render_config_cli(certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("managedNamespaces: [slurm, team-a]\n")
    rc = main(
        [
            "--config",
            str(cfg),
            "render-config",
            "--url",
            "https://127.0.0.1:9443",
            "--ca-file",
            str(certs / "ca.crt"),
            "--name",
            "sb",
        ]
    )
    assert rc == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    # The webhooks, then the node guard (webhook/nodeguard.py), which hack/bridge.sh applies with them.
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("MutatingWebhookConfiguration", "sb"),
        ("ValidatingWebhookConfiguration", "sb"),
        ("ValidatingAdmissionPolicy", "sb-node-guard"),
        ("ValidatingAdmissionPolicyBinding", "sb-node-guard"),
    ]
    values = docs[1]["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    assert values == ["slurm", "team-a"]
    without = ["render-config", "--url", "https://x", "--ca-file", str(certs / "ca.crt"), "--without-node-guard"]
    assert main(["--config", str(cfg), *without]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    # With --pod-policy (hack/bridge.sh, where the cluster serves it): the pod policy (webhook/podpolicy.py) too.
    assert main(["--config", str(cfg), *without, "--pod-policy", "--name", "sb"]) == 0
    policy = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(capsys.readouterr().out)][2:]
    assert policy == [("MutatingAdmissionPolicy", "sb-pods"), ("MutatingAdmissionPolicyBinding", "sb-pods")]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["render-config", "--url", "http://x", "--ca-file", "{ca}"], "https"),
        (["render-config", "--url", "https://x", "--ca-file", "{missing}"], "cannot read --ca-file"),
        (
            ["--config", "{badcfg}", "render-config", "--url", "https://x", "--ca-file", "{ca}"],
            "pollPeriodSeconds",
        ),
        (["--config", "{badcfg}", "serve"], "pollPeriodSeconds"),
        (["--config", "{badcfg}"], "pollPeriodSeconds"),
        (["--config", "{missing}"], "cannot read config file"),
        (["gen-certs", "--dir", "{tmp}", "--host", "bad host!"], "neither an IP address nor a DNS name"),
    ],
)
def test_cli_errors_exit_2(
    args: list[str], words: str, certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pollPeriodSeconds: 5\n")
    subst = {
        "ca": str(certs / "ca.crt"),
        "missing": str(tmp_path / "nope"),
        "badcfg": str(bad),
        "tmp": str(tmp_path / "o"),
    }
    assert main([a.format(**subst) for a in args]) == 2
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err


def test_cli_reports_a_bad_config_like_the_other_components(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """slurm_bridge/core/cli.py's config_or_exit: the same message and status as the operator and extender."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("pollPeriodSeconds: 5\n")
    assert main(["--config", str(bad), "serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid configuration:\n") and f"{bad}: pollPeriodSeconds" in err
    # gen-certs needs no configuration, so a bad one does not stop it.
    assert main(["--config", str(bad), "gen-certs", "--dir", str(tmp_path / "tls")]) == 0
    assert (tmp_path / "tls" / "tls.crt").is_file()


def test_cli_takes_the_flags_hack_bridge_sh_passes() -> None:
    """hack/bridge.sh runs the webhook with the shared flags and serve's own."""
    from slurm_bridge.webhook.main import _parser

    args = _parser().parse_args(
        ["--config", "c.yaml", "--kubeconfig", "kc", "--log-level", "INFO", "--log-format", "json",
         "serve", "--drain-seconds", "0"]
    )  # fmt: skip
    assert (args.config, args.kubeconfig, args.log_level, args.log_format) == ("c.yaml", "kc", "INFO", "json")
    assert (args.command, args.drain_seconds) == ("serve", 0.0)
    render = _parser().parse_args(
        ["--config", "c.yaml", "render-config", "--url", "https://127.0.0.1:9443", "--ca-file", "ca.crt"]
    )
    assert (render.command, render.url, render.name) == ("render-config", "https://127.0.0.1:9443", "slurm-bridge")


@pytest.mark.parametrize(
    "args", [["--help"], ["serve", "--help"], ["render-config", "--help"], ["gen-certs", "--help"]]
)
def test_help(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 0
    assert "usage: slurm-bridge-webhook" in capsys.readouterr().out


# --- gen-certs ----------------------------------------------------------------------------------


def test_gen_certs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "tls"
    assert (
        main(
            [
                "gen-certs",
                "--dir",
                str(d),
                "--host",
                "127.0.0.1",
                "--host",
                "webhook.slurm-bridge.svc",
                "--host",
                "::1",
            ]
        )
        == 0
    )
    assert "new" in capsys.readouterr().out
    ca = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((d / "tls.crt").read_bytes())
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert san.get_values_for_type(x509.DNSName) == ["webhook.slurm-bridge.svc"]
    key = serialization.load_pem_private_key((d / "tls.key").read_bytes(), password=None)
    assert key.public_key() == leaf.public_key()
    for name in ("ca.key", "tls.key"):
        assert (d / name).stat().st_mode & 0o777 == 0o600
    assert not [p for p in d.iterdir() if p.name.startswith(".")], "no temporary files left"

    # A second run keeps the CA (so a registered caBundle stays valid) but issues a new leaf.
    assert main(["gen-certs", "--dir", str(d)]) == 0
    assert "reused" in capsys.readouterr().out
    assert (d / "ca.crt").read_bytes() == ca.public_bytes(serialization.Encoding.PEM)
    leaf2 = x509.load_pem_x509_certificate((d / "tls.crt").read_bytes())
    leaf2.verify_directly_issued_by(ca)
    assert leaf2.serial_number != leaf.serial_number
    san2 = leaf2.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san2.get_values_for_type(x509.DNSName) == ["localhost"]

    assert main(["gen-certs", "--dir", str(d), "--new-ca"]) == 0
    assert x509.load_pem_x509_certificate((d / "ca.crt").read_bytes()) != ca


def test_gen_certs_mismatched_ca(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_certs(a, ["localhost"])
    write_certs(b, ["localhost"])
    (a / "ca.key").write_bytes((b / "ca.key").read_bytes())
    with pytest.raises(CertError, match="not the key of"):
        write_certs(a, ["localhost"])


def test_subject_alt_names() -> None:
    assert subject_alt_names(["10.0.0.1", "Example.COM."]) == [
        x509.IPAddress(__import__("ipaddress").ip_address("10.0.0.1")),
        x509.DNSName("example.com"),
    ]
    with pytest.raises(CertError):
        subject_alt_names([])


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("*.slurm-bridge.svc", True),
        ("a" * 63 + ".svc", True),
        ("a" * 64 + ".svc", False),  # a DNS label holds at most 63
        (".".join(["a" * 63] * 3) + "." + "b" * 61, True),  # 253
        (".".join(["a" * 63] * 3) + "." + "b" * 62, False),  # 254
        ("*.", False),
        ("a.*.svc", False),
        ("-a.svc", False),
        ("a..svc", False),
    ],
)
def test_certificate_host_names_at_their_limits(host: str, ok: bool) -> None:
    assert is_host_name(host) is ok
    if ok:
        assert subject_alt_names([host]) == [x509.DNSName(host)]
    else:
        with pytest.raises(CertError, match="neither an IP address nor a DNS name"):
            subject_alt_names([host])


# --- the HTTPS server -------------------------------------------------------------------------------


def _client_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, Path]]:
    d = tmp_path / "tls"
    write_certs(d, ["127.0.0.1", "localhost"])
    config = CONFIG.model_copy(update={"webhookCertFile": d / "tls.crt", "webhookKeyFile": d / "tls.key"})
    srv = WebhookServer(config, listen="127.0.0.1:0", tls_reload_seconds=0.05)
    await srv.start()
    try:
        yield srv, d
    finally:
        await srv.stop()


async def test_server_round_trip(running: tuple[WebhookServer, Path], caplog: pytest.LogCaptureFixture) -> None:
    srv, d = running
    base = f"https://127.0.0.1:{srv.port}"
    caplog.set_level(logging.INFO, logger="slurm_bridge.webhook")
    async with httpx.AsyncClient(verify=_client_context(d / "ca.crt"), timeout=5) as client:
        assert (await client.get(base + "/healthz")).text == "ok\n"
        assert (await client.get(base + "/readyz")).status_code == 200

        pod = make_pod({"schedulerName": "default-scheduler"}, annotations={"secret-ish": "do-not-log"})
        r = await client.post(base + "/mutate", json=make_review(pod, uid="m-1"))
        assert r.status_code == 200
        resp = r.json()["response"]
        assert resp["uid"] == "m-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
        patched = apply(pod, json.loads(base64.b64decode(resp["patch"])))
        assert patched["spec"]["schedulerName"] == SCHED
        assert patched["spec"]["schedulingGates"] == [GATE]

        r = await client.post(base + "/validate", json=make_review(make_pod(labels={JOB_ID: "9"}), uid="v-1"))
        resp = r.json()["response"]
        assert resp["uid"] == "v-1" and resp["allowed"] is False and resp["status"]["code"] == 403
        assert JOB_ID in resp["status"]["message"]

        r = await client.post(base + "/validate", json=make_review(make_pod(), uid="v-2"))
        assert r.json()["response"] == {"uid": "v-2", "allowed": True}

        r = await client.post(base + "/mutate", content=b"{nope")
        assert r.status_code == 400 and "malformed AdmissionReview" in r.text

        r = await client.post(base + "/mutate", json=make_review({"metadata": {"name": "x"}}, uid="m-2"))
        resp = r.json()["response"]
        assert resp["allowed"] is False and resp["status"]["code"] == 400 and "spec" in resp["status"]["message"]

    decisions = [rec for rec in caplog.records if rec.getMessage() == "admission decision"]
    assert len(decisions) == 4
    fields = decisions[0].fields  # type: ignore[attr-defined]
    assert fields["uid"] == "m-1" and fields["allowed"] is True and fields["patch_ops"] == 3
    line = JsonFormatter().format(decisions[0])
    assert json.loads(line)["namespace"] == "slurm"
    assert "do-not-log" not in line and "containers" not in line


async def test_server_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(request: AdmissionRequest, config: Config, *rest: object) -> Decision:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(server_mod, "validate", boom)
    monkeypatch.setattr(server_mod, "mutate", boom)
    d = tmp_path / "tls"
    write_certs(d, ["127.0.0.1"])
    config = CONFIG.model_copy(update={"webhookCertFile": d / "tls.crt", "webhookKeyFile": d / "tls.key"})
    srv = WebhookServer(config, listen="127.0.0.1:0")
    await srv.start()
    try:
        async with httpx.AsyncClient(verify=_client_context(d / "ca.crt"), timeout=5) as client:
            for path in ("/validate", "/mutate"):
                r = await client.post(f"https://127.0.0.1:{srv.port}{path}", json=make_review(make_pod()))
                resp = r.json()["response"]
                assert r.status_code == 200 and resp["allowed"] is False
                assert resp["status"]["code"] == 500 and "kaboom" in resp["status"]["message"]
            # Still serving afterwards.
            assert (await client.get(f"https://127.0.0.1:{srv.port}/healthz")).status_code == 200
    finally:
        await srv.stop()


async def _served_cert(port: int, ca: Path) -> bytes | None:
    """The DER certificate the server presents, or None if it does not verify against ``ca``."""
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_client_context(ca))
    except ssl.SSLError:
        return None
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    assert isinstance(der, bytes)
    return der


async def test_server_reloads_rotated_certificate(running: tuple[WebhookServer, Path], tmp_path: Path) -> None:
    srv, d = running
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes((d / "ca.crt").read_bytes())
    assert await _served_cert(srv.port, old_ca) is not None

    # A broken rotation (key that does not match) keeps the old certificate in service.
    good_key = (d / "tls.key").read_bytes()
    write_certs(tmp_path / "other", ["127.0.0.1"])
    (d / "tls.key").write_bytes((tmp_path / "other" / "tls.key").read_bytes())
    assert srv.ssl_context is not None and not srv.ssl_context.reload_if_changed()
    assert await _served_cert(srv.port, old_ca) is not None
    (d / "tls.key").write_bytes(good_key)

    write_certs(d, ["127.0.0.1"], new_ca=True)
    want = x509.load_pem_x509_certificate((d / "tls.crt").read_bytes()).public_bytes(serialization.Encoding.DER)
    deadline = time.monotonic() + 10
    while (got := await _served_cert(srv.port, d / "ca.crt")) != want:
        assert time.monotonic() < deadline, f"server still presents the old certificate ({got!r:.40})"
        await asyncio.sleep(0.05)
    assert await _served_cert(srv.port, old_ca) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_command_drains_then_stops_on_sigterm(tmp_path: Path) -> None:
    """On SIGTERM the server answers not-ready but keeps serving (closing each connection) for
    --drain-seconds, so calls routed to it meanwhile still succeed; then it stops."""
    d = tmp_path / "tls"
    write_certs(d, ["127.0.0.1"])
    port = _free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "webhookListen": f"127.0.0.1:{port}",
                "webhookCertFile": str(d / "tls.crt"),
                "webhookKeyFile": str(d / "tls.key"),
            }
        )
    )
    code = "import sys; from slurm_bridge.webhook.main import main; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--config", str(cfg), "serve", "--drain-seconds", "2"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 20
        with httpx.Client(verify=_client_context(d / "ca.crt"), timeout=2) as client:
            while True:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    if client.get(f"https://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server did not become ready"
                time.sleep(0.05)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            wait_until = signalled + 1.5
            not_ready = None
            while time.monotonic() < wait_until and not_ready is None:
                r = client.get(f"https://127.0.0.1:{port}/readyz")
                if r.status_code == 503:
                    not_ready = r
            assert not_ready is not None, "/readyz stayed 200 after SIGTERM"
            assert not_ready.headers.get("connection", "").lower() == "close", "draining answers end the connection"
            review = client.post(f"https://127.0.0.1:{port}/mutate", json=make_review(make_pod()))
            assert review.status_code == 200 and review.json()["response"]["allowed"] is True
            assert proc.poll() is None, "still serving while draining"
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - signalled >= 2, "stopped before --drain-seconds had passed"
        assert proc.stderr is not None
        logs = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
        assert [e["msg"] for e in logs if e["msg"].startswith("webhook")] == [
            "webhook serving",
            "webhook draining",
            "webhook stopped",
        ]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_without_certificate_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"webhookListen": "127.0.0.1:1", "webhookCertFile": str(tmp_path / "none.crt")}))
    assert main(["--config", str(cfg), "serve"]) == 2
    err = capsys.readouterr().err
    assert "none.crt" in err and "Traceback" not in err
