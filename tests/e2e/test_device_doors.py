"""Only the bridge hands out Slurm's devices in a managed namespace (docs/security.md, "Devices";
docs/gpus.md): against the local cluster's real API server and the bridge's webhook, without any
Slurm job. A claim or template of a class the bridge maps made by a tenant, a pod naming one (made
before its namespace was managed) or another pod's claim, device-plugin GPUs in a hybrid
partition (the local config's hybridPartitions), and an ephemeral container on a pod bound to exact
``dra.cpu`` cores are refused, each saying why and what to do; their neighbours are not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from slurm_bridge import names
from tests.e2e.util import read_pod
from tests.harness import MANAGED_LABEL, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]
RESOURCE = ("resource.k8s.io", "v1")
PREFIX = "deviceclass.resource.kubernetes.io/"


def refusal(call: Callable[[], object]) -> str:
    """The API server's message for a call the webhook refuses (403)."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    return str(json.loads(err.value.body)["message"])


def claim(name: str, cls: str, owner: k8s.V1Pod | None = None) -> Obj:
    meta: Obj = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner.metadata.name,
                                    "uid": owner.metadata.uid}]  # fmt: skip
    spec = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": cls}}]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "spec": spec}


def template(name: str, cls: str) -> Obj:
    spec = {"spec": claim(name, cls)["spec"]}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def pod(name: str, *, entry: Obj | None = None, limits: Obj | None = None, annotations: Obj | None = None) -> Obj:
    container: Obj = {"name": "main", "image": "busybox", "command": ["sleep", "3600"]}
    container["resources"] = {"limits": limits or {"cpu": "100m", "memory": "64Mi"}}
    spec: Obj = {"restartPolicy": "Never", "containers": [container]}
    if entry is not None:
        spec["resourceClaims"] = [entry]
        container["resources"]["claims"] = [{"name": entry["name"]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec}  # fmt: skip


def test_a_tenants_claim_or_template_of_a_gpu_class_is_refused_and_one_of_another_class_is_made(
    ns: str, custom: k8s.CustomObjectsApi
) -> None:
    said = refusal(lambda: custom.create_namespaced_custom_object(*RESOURCE, ns, "resourceclaims",
                                                                  claim("mine", "gpu.nvidia.com")))  # fmt: skip
    assert "ResourceClaim mine: requests DeviceClass gpu.nvidia.com" in said and PREFIX + "gpu.nvidia.com" in said
    said = refusal(lambda: custom.create_namespaced_custom_object(*RESOURCE, ns, "resourceclaimtemplates",
                                                                  template("cores", "dra.cpu")))  # fmt: skip
    assert "ResourceClaimTemplate cores: requests DeviceClass dra.cpu" in said
    custom.create_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", claim("nic", "nic.example.com"))


def test_a_pod_naming_a_gpu_template_made_before_its_namespace_was_managed_is_refused(
    namespace: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    custom.create_namespaced_custom_object(
        *RESOURCE, namespace, "resourceclaimtemplates", template("gpus", "gpu.nvidia.com")
    )
    core.patch_namespace(namespace, {"metadata": {"labels": {MANAGED_LABEL: "true"}}})
    entry = {"name": "mine", "resourceClaimTemplateName": "gpus"}
    said = refusal(lambda: core.create_namespaced_pod(namespace, pod("sneaky", entry=entry)))
    assert "spec.resourceClaims[mine]: ResourceClaimTemplate gpus requests DeviceClass gpu.nvidia.com" in said
    assert PREFIX + "gpu.nvidia.com: N" in said


def test_a_pod_naming_another_pods_claim_is_refused(ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi) -> None:
    core.create_namespaced_pod(ns, pod("owner"))
    owner = wait_for(lambda: read_pod(core, ns, "owner"), 30, "the owner pod")
    custom.create_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", claim("theirs", "nic.example.com", owner))
    entry = {"name": "borrowed", "resourceClaimName": "theirs"}
    said = refusal(lambda: core.create_namespaced_pod(ns, pod("borrower", entry=entry)))
    assert "ResourceClaim theirs belongs to pod owner" in said
    custom.create_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", claim("shared", "nic.example.com"))
    core.create_namespaced_pod(ns, pod("user", entry={"name": "nic", "resourceClaimName": "shared"}))


def test_device_plugin_gpus_are_refused_in_a_hybrid_partition_and_kept_on_external_nodes(
    ns: str, core: k8s.CoreV1Api
) -> None:
    limits = {"cpu": "100m", "memory": "64Mi", "nvidia.com/gpu": "1"}
    hybrid = pod("hybrid-gpu", limits=limits, annotations={names.ANN_PARTITION: "hybrid"})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, hybrid)
    said = json.loads(err.value.body)["message"]
    # (Kubernetes copies the limit to the request before admission: the first field named is the request)
    assert 'spec.containers[0].resources.requests["nvidia.com/gpu"]' in said
    assert "partition hybrid, which holds hybrid nodes" in said
    assert PREFIX + "gpu.nvidia.com: N" in said
    core.create_namespaced_pod(ns, pod("external-gpu", limits=limits))  # the config's partition: external nodes


def test_an_ephemeral_container_is_refused_on_exact_cores_and_added_to_another_bridge_pod(
    ns: str, core: k8s.CoreV1Api
) -> None:
    core.create_namespaced_pod(ns, pod("cores", limits={PREFIX + "dra.cpu": "1", "memory": "64Mi"}))
    made = wait_for(lambda: read_pod(core, ns, "cores"), 30, "the dra.cpu pod")
    assert "dra.cpu" in (made.metadata.annotations or {}).get(names.ANN_DEVICE_REQUESTS, ""), "rewritten by the webhook"
    debug = {"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox"}]}}
    said = refusal(lambda: core.patch_namespaced_pod_ephemeralcontainers("cores", ns, debug))
    assert "debugger cannot be added" in said and "kubectl debug --copy-to" in said
    core.create_namespaced_pod(ns, pod("plain"))
    core.patch_namespaced_pod_ephemeralcontainers("plain", ns, debug)
    plain = read_pod(core, ns, "plain")
    assert plain is not None and [c.name for c in plain.spec.ephemeral_containers or []] == ["debugger"]
