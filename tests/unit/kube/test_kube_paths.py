"""The one home of JSON pointers (slurm_bridge/core/kubeformats.py) and of API paths
(slurm_bridge/kube/client.py), and who uses them."""

from __future__ import annotations

import pytest

from slurm_bridge.core.kubeformats import escape_pointer, pointer
from slurm_bridge.kube import client as kube

pytestmark = pytest.mark.unit


def test_pointer_escapes_each_key_and_joins_indices() -> None:
    assert pointer() == ""
    assert pointer("spec", "containers", 0, "resources") == "/spec/containers/0/resources"
    assert pointer("metadata", "annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"
    # "~1" in a key is a literal "~" then "1": escaping "~" first keeps it from reading as "/".
    assert pointer("x~1") == "/x~01"
    assert pointer("spec", "tolerations", "-") == "/spec/tolerations/-"
    assert pointer("k") == "/" + escape_pointer("k")


def test_the_webhook_uses_the_shared_pointer() -> None:
    from slurm_bridge.webhook import mutate

    # Read from the module's namespace: mutate uses pointer, it does not re-export it.
    assert vars(mutate)["pointer"] is pointer


def test_resource_path_core_group_and_cluster_scope() -> None:
    assert kube.resource_path("v1", "pods", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert kube.resource_path("batch/v1", "jobs", "ns", "j") == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert (
        kube.resource_path("scheduling.k8s.io/v1alpha2", "podgroups", "ns", "g")
        == "/apis/scheduling.k8s.io/v1alpha2/namespaces/ns/podgroups/g"
    )
    assert kube.resource_path("v1", "nodes", None, "n1") == "/api/v1/nodes/n1"
    assert kube.resource_path("v1", "nodes", "", "n1") == "/api/v1/nodes/n1"


def test_object_path_is_resource_path_of_the_objects_own_fields() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "l", "namespace": "ns"},
    }
    assert kube.object_path(job) == kube.resource_path("batch/v1", "jobs", "ns", "j")
    assert kube.object_path(lws) == "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/l"


def test_api_prefix() -> None:
    assert kube.api_prefix("v1") == "/api/v1"
    assert kube.api_prefix("apps/v1") == "/apis/apps/v1"
