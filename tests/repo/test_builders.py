"""The shared test builders (tests/builders.py) make valid objects: a PlaceholderJob the CRD's schema
accepts and the model parses, pods whose fields are where Kubernetes has them, jobs as Slurm
reports them; and each ``obj()`` is a fresh copy."""

from __future__ import annotations

import pytest

from slurm_bridge import names
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import decode_admin_comment
from slurm_bridge.operator.views.slurmjobs import PhjRef
from tests.builders import make_phj, make_pod, slurm_job
from tests.e2e.phj_schema import assert_matches_crd

pytestmark = pytest.mark.unit


def test_a_placeholderjob_matches_the_crd_and_parses() -> None:
    built = make_phj("p").uid("u").finalizer().owned_by_pod("p", "pu").pods("p").spec(slurm={"nodes": 1})
    obj = built.phase("Pending").job_id(7).obj()
    assert_matches_crd(obj)
    phj = built.parsed()
    assert (phj.metadata.name, phj.spec.pods, phj.status.job_id, phj.pod_owner_uid()) == ("p", ["p"], 7, "pu")
    assert names.FINALIZER_PLACEHOLDER_JOB in (phj.metadata.finalizers or [])


def test_a_pod_has_its_fields_where_kubernetes_has_them() -> None:
    built = make_pod("p").uid("u").scheduler().gated().node("n1").container("c", requests={"cpu": "1"}).phase("Running")
    pod = built.deleted().obj()
    assert pod["spec"]["schedulingGates"] == [{"name": names.SCHEDULING_GATE}]
    assert (pod["spec"]["nodeName"], pod["spec"]["schedulerName"], pod["status"]["phase"]) == (
        "n1",
        "slurm-bridge",
        "Running",
    )
    assert pod["spec"]["containers"] == [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    assert pod["metadata"]["deletionTimestamp"] and "namespace" not in built.manifest()["metadata"]
    first = built.obj()
    first["metadata"]["name"] = "changed"
    assert built.obj()["metadata"]["name"] == "p", "each obj() is a copy"


def test_a_slurm_job_names_its_placeholderjob() -> None:
    ref = PhjRef("bridge", "ns", "p", "u")
    job = slurm_job(7, "RUNNING", nodes=("n1",), ref=ref, het=(7, 0))
    assert decode_admin_comment(job.admin_comment) == ref
    assert (job.state, job.nodes, job.het_job_id, job.het_job_offset) == ("RUNNING", ("n1",), 7, 0)
