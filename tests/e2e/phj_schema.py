"""PlaceholderJobs checked against the CRD's own openAPIV3Schema (crds/), with jsonschema.

The API server validates what the bridge writes too, but only the fields a write touches and
only as far as its structural-schema rules go; this reads back whole objects and names the
JSON path of any mismatch, so a test fails at the field rather than with a 422 somewhere.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import jsonschema
import yaml

from tests.harness import REPO

CRD = REPO / "crds" / "placeholderjobs.slinky.slurm.net.yaml"


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema = version["schema"]["openAPIV3Schema"]
    checker = jsonschema.FormatChecker()
    checker.checks("date-time", raises=ValueError)(_rfc3339)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator: jsonschema.protocols.Validator = cls(schema, format_checker=checker)
    return validator


def _rfc3339(value: object) -> bool:
    """date-time as the API server reads metav1.Time: RFC 3339 with a zone (without the optional
    rfc3339-validator package, jsonschema would not check the format at all)."""
    return not isinstance(value, str) or datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None


def schema_errors(phj: dict[str, Any]) -> list[str]:
    """One "<json path>: <message>" per mismatch, sorted by path."""
    errors = sorted(_validator().iter_errors(phj), key=lambda e: e.json_path)
    return [f"{e.json_path}: {e.message}" for e in errors]


def assert_matches_crd(phj: dict[str, Any]) -> None:
    errors = schema_errors(phj)
    meta = phj.get("metadata", {})
    assert not errors, (
        f"PlaceholderJob {meta.get('namespace')}/{meta.get('name')} does not match the CRD's schema:\n  "
        + "\n  ".join(errors)
    )
