"""The PlaceholderJob models (slurm_bridge/kube/placeholderjob.py) against the CRD's OpenAPI schema.

Both ways: every schema property has a model field and every field a schema property, with the
same type, the same required set and the same lower bounds; and objects the models dump are valid
under the schema (and parse back), so the operator writes only what the API server keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from slurm_bridge.kube.placeholderjob import PlaceholderJob, PlaceholderJobSpec, PlaceholderJobStatus
from slurm_bridge.slurm.models import JobRequest

Obj = dict[str, Any]
CRD = Path(__file__).parents[3] / "crds" / "placeholderjobs.slinky.slurm.net.yaml"


def crd_schema() -> Obj:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def model_schema() -> tuple[Obj, Obj]:
    schema = PlaceholderJob.model_json_schema(by_alias=True, mode="serialization")
    return schema, schema.get("$defs", {})


def resolve(node: Obj, defs: Obj) -> Obj:
    """A pydantic schema node without $ref and without the ``null`` of an optional field."""
    if "$ref" in node:
        return resolve(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        assert len(options) == 1, node
        return resolve({**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}, defs)
    return node


def compare(path: str, crd: Obj, model: Obj, defs: Obj, problems: list[str]) -> None:
    model = resolve(model, defs)
    ctype = crd.get("type")
    mtype = model.get("type") or ("string" if "enum" in model else None)
    if ctype == "object" and "additionalProperties" not in crd and not crd.get("properties"):
        if mtype != "object":  # metadata: any object
            problems.append(f"{path}: schema object, model {mtype}")
        return
    if ctype != mtype:
        problems.append(f"{path}: schema type {ctype}, model type {mtype}")
        return
    if "enum" in crd and sorted(crd["enum"]) != sorted(model.get("enum", [])):
        problems.append(f"{path}: schema enum {crd['enum']}, model enum {model.get('enum')}")
    for bound in ("minimum",):
        if crd.get(bound) != model.get(bound):
            problems.append(f"{path}: schema {bound} {crd.get(bound)}, model {model.get(bound)}")
    if ctype == "array":
        compare(f"{path}[]", crd["items"], model["items"], defs, problems)
    if ctype == "object" and "additionalProperties" in crd:
        compare(f"{path}{{}}", crd["additionalProperties"], model.get("additionalProperties", {}), defs, problems)
    if ctype == "object" and "properties" in crd:
        cprops, mprops = crd["properties"], model.get("properties", {})
        for name in sorted(set(cprops) - set(mprops)):
            problems.append(f"{path}.{name}: in the schema, not in the model")
        for name in sorted(set(mprops) - set(cprops)):
            problems.append(f"{path}.{name}: in the model, not in the schema")
        if sorted(crd.get("required", [])) != sorted(model.get("required", [])):
            problems.append(f"{path}: schema requires {crd.get('required', [])}, model {model.get('required', [])}")
        for name in sorted(set(cprops) & set(mprops)):
            compare(f"{path}.{name}", cprops[name], mprops[name], defs, problems)


def test_models_and_schema_have_the_same_fields_types_and_required_sets() -> None:
    schema, defs = model_schema()
    problems: list[str] = []
    compare("", crd_schema(), schema, defs, problems)
    assert not problems, "\n".join(problems)


def test_the_comparison_sees_a_difference() -> None:
    """A schema with a field the models lack, a changed type and a changed required set fails."""
    crd = crd_schema()
    spec = crd["properties"]["spec"]
    spec["properties"]["extra"] = {"type": "string"}
    spec["properties"]["minMember"] = {"type": "string"}
    spec["required"] = ["pods"]
    del crd["properties"]["status"]["properties"]["jobId"]
    schema, defs = model_schema()
    problems: list[str] = []
    compare("", crd, schema, defs, problems)
    assert problems == [
        ".spec.extra: in the schema, not in the model",
        ".spec: schema requires ['pods'], model ['pods', 'slurm']",
        ".spec.minMember: schema type string, model type integer",
        ".status.jobId: in the model, not in the schema",
    ]


EXAMPLES: list[Obj] = [
    {"apiVersion": "slinky.slurm.net/v1alpha1", "kind": "PlaceholderJob", "metadata": {"name": "p"},
     "spec": PlaceholderJobSpec(pods=["p"], slurm=JobRequest()).dump()},
    {"spec": PlaceholderJobSpec(
        pods=["a", "b"], podUIDs={"a": "u1", "b": "u2"}, min_member=2,
        group={"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u"},
        slurm=JobRequest(job_name="j", partition="debug", nodes=2, max_nodes=3, required_nodes=["n1"],
                         excluded_nodes=["n2"], gres="gres/gpu:1", exclusive=True, time_limit_minutes=5),
     ).dump(),
     "status": PlaceholderJobStatus(
        observed_generation=2, job_id=7, phase="Running", slurm_state="RUNNING", reason="", message="m",
        pod_list="a,b", node_list="n[1-2]", assignments=[{"pod": "a", "node": "n1"}],
        submit_time="2026-01-01T00:00:00Z", start_time="2026-01-01T00:00:01Z", end_time="2026-01-01T00:00:02Z",
        conditions=[{"type": "Ready", "status": "True", "reason": "PodsBound", "message": "m",
                     "lastTransitionTime": "2026-01-01T00:00:01Z", "observedGeneration": 2}],
     ).dump()},
]  # fmt: skip


@pytest.mark.parametrize("obj", EXAMPLES, ids=["minimal", "every-field"])
def test_dumped_models_validate_against_the_crd_schema_and_parse_back(obj: Obj) -> None:
    jsonschema.validate(obj, crd_schema())
    assert PlaceholderJob.model_validate(obj).dump() == obj


def test_an_invalid_status_is_refused_by_both() -> None:
    bad = {"spec": EXAMPLES[0]["spec"], "status": {"phase": "Sleeping"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, crd_schema())
    with pytest.raises(ValueError):
        PlaceholderJob.model_validate(bad)


# ---- the rules read off the model ----------------------------------------------------------------
def phj(group: Obj | None = None, owner: str | None = None, **spec: Any) -> PlaceholderJob:
    meta: Obj = {"name": "p", "namespace": "ns", "uid": "phj", "generation": 1}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner}]
    body: Obj = {"pods": ["p"], "slurm": {}, **spec}
    if group is not None:
        body["group"] = group
    return PlaceholderJob.parse({"metadata": meta, "spec": body})


def pod(name: str, uid: str) -> Obj:
    return {"metadata": {"name": name, "uid": uid}}


def test_gang_composite_and_membership() -> None:
    gang = phj({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u"},
               podUIDs={"p": "pod-1"})  # fmt: skip
    assert gang.is_gang() and not gang.is_composite()
    assert gang.is_member(pod("p", "pod-1")) and not gang.is_member(pod("p", "pod-2")), "another incarnation"
    assert gang.is_member(pod("q", "any")), "a name the gang does not record yet"
    composite = phj({"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup", "name": "c", "uid": "u"})
    assert composite.is_composite()
    single = phj(owner="pod-1")
    assert not single.is_gang() and single.pod_owner_uid() == "pod-1"
    assert single.is_member(pod("p", "pod-1")) and not single.is_member(pod("p", "pod-2"))
    assert single.owned_by_other_pod(pod("p", "pod-2")) and not single.owned_by_other_pod(None)
    assert phj().is_member(pod("p", "x")), "no owner recorded: any incarnation"
    assert phj().raw["spec"]["pods"] == ["p"], "the object it was parsed from"


def test_a_new_spec_in_crd_form_leaves_unset_fields_out() -> None:
    spec = PlaceholderJobSpec(pods=["p"], pod_uids=None, slurm=JobRequest(job_name="j"))
    out = spec.crd_dict()
    assert "podUIDs" not in out and out["slurm"] == JobRequest(job_name="j").crd_dict()
    jsonschema.validate({"spec": out}, crd_schema())
