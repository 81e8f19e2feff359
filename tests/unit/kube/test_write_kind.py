"""``write_kind``: the verb and resource a write counts under in the operator's /stats
(``kube_writes_by_kind``), which tests/e2e/test_costs.py counts per pod: names and namespaces
left out, subresources kept, as the API server's own request metrics name them."""

from __future__ import annotations

import pytest

from slurm_bridge.kube.client import write_kind

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("POST", "/api/v1/namespaces/ns-a/pods", "POST pods"),
        ("PATCH", "/api/v1/namespaces/ns-a/pods/p-1", "PATCH pods"),
        ("PATCH", "/api/v1/namespaces/ns-a/pods/p-1/status", "PATCH pods/status"),
        ("POST", "/api/v1/namespaces/ns-a/pods/p-1/binding", "POST pods/binding"),
        ("POST", "/api/v1/namespaces/ns-a/events", "POST events"),
        ("POST", "/apis/slinky.slurm.net/v1alpha1/namespaces/ns-a/placeholderjobs", "POST placeholderjobs"),
        (
            "PATCH",
            "/apis/slinky.slurm.net/v1alpha1/namespaces/ns-a/placeholderjobs/x/status?fieldManager=y",
            "PATCH placeholderjobs/status",
        ),
        ("DELETE", "/apis/slinky.slurm.net/v1alpha1/namespaces/ns-a/placeholderjobs/x", "DELETE placeholderjobs"),
        ("PATCH", "/api/v1/nodes/kwok-node-1", "PATCH nodes"),
        ("PATCH", "/api/v1/nodes/kwok-node-1/status", "PATCH nodes/status"),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/sys/leases/slurm-bridge", "PUT leases"),
        ("PATCH", "/api/v1/namespaces/ns-a", "PATCH namespaces"),
        ("POST", "/apis/resource.k8s.io/v1/resourceslices", "POST resourceslices"),
        ("POST", "/", "POST -"),
    ],
)
def test_a_write_counts_under_its_verb_and_resource(method: str, path: str, kind: str) -> None:
    assert write_kind(method, path) == kind
