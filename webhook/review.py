"""AdmissionReview (admission.k8s.io/v1) in and out.

The request is checked once here, so the mutate and validate logic can trust its shape and a
malformed review becomes one HTTP 400 with a message that says what is wrong.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Final

from slurm_bridge.core import objects

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"
OPERATIONS: Final = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})

JSON = dict[str, Any]


class MalformedReview(ValueError):
    """The body is not a usable AdmissionReview; answered with HTTP 400."""


class InvalidObject(ValueError):
    """The review is well formed but its object cannot be handled (for example a pod without spec)."""


@dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    operation: str
    group: str
    version: str
    kind: str
    sub_resource: str
    namespace: str
    name: str
    username: str
    object: JSON | None
    old_object: JSON | None
    dry_run: bool = False

    @property
    def object_name(self) -> str:
        """A name for logs: pods created from generateName have none yet, so show the prefix."""
        if self.name:
            return self.name
        meta = objects.meta(self.object)
        if meta.get("name"):
            return str(meta["name"])
        if meta.get("generateName"):
            return f"{meta['generateName']}*"
        return ""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str = ""
    code: int = 200
    reason: str = ""
    patch: list[JSON] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _str(obj: JSON, key: str, where: str, *, required: bool = False) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise MalformedReview(f"{where}.{key} is missing")
        return ""
    if not isinstance(value, str):
        raise MalformedReview(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def _obj(obj: JSON, key: str, where: str) -> JSON | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedReview(f"{where}.{key} must be an object, got {type(value).__name__}")
    return value


def parse_review(body: bytes) -> AdmissionRequest:
    """Parse and check an AdmissionReview request body."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MalformedReview(f"body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise MalformedReview(f"body must be a JSON object, got {type(doc).__name__}")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise MalformedReview(
            f"expected apiVersion {API_VERSION!r} kind {KIND!r}, "
            f"got apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r} "
            "(set admissionReviewVersions: [v1] in the webhook configuration)"
        )
    req = _obj(doc, "request", "AdmissionReview")
    if req is None:
        raise MalformedReview("AdmissionReview.request is missing")
    uid = _str(req, "uid", "request", required=True)
    if not uid:
        raise MalformedReview("request.uid is empty")
    operation = _str(req, "operation", "request", required=True)
    if operation not in OPERATIONS:
        raise MalformedReview(f"request.operation {operation!r} is not one of {sorted(OPERATIONS)}")
    kind = _obj(req, "kind", "request")
    if kind is None:
        raise MalformedReview("request.kind is missing")
    user = _obj(req, "userInfo", "request") or {}
    obj = _obj(req, "object", "request")
    old = _obj(req, "oldObject", "request")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise MalformedReview(f"request.object is missing for {operation}")
    if operation == "UPDATE" and old is None:
        raise MalformedReview("request.oldObject is missing for UPDATE")
    dry_run = req.get("dryRun", False)
    return AdmissionRequest(
        uid=uid,
        operation=operation,
        group=_str(kind, "group", "request.kind"),
        version=_str(kind, "version", "request.kind"),
        kind=_str(kind, "kind", "request.kind", required=True),
        sub_resource=_str(req, "subResource", "request"),
        namespace=_str(req, "namespace", "request"),
        name=_str(req, "name", "request"),
        username=_str(user, "username", "request.userInfo"),
        object=obj,
        old_object=old,
        dry_run=bool(dry_run),
    )


def review_response(uid: str, decision: Decision) -> JSON:
    """The AdmissionReview answer; the patch is only sent when there is something to change."""
    response: JSON = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed or decision.message:
        status: JSON = {"code": decision.code if not decision.allowed else 200}
        if decision.message:
            status["message"] = decision.message
        if decision.reason:
            status["reason"] = decision.reason
        response["status"] = status
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode()
    if decision.warnings:
        response["warnings"] = list(decision.warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
