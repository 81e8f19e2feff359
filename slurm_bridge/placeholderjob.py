"""The PlaceholderJob's spec and status as pydantic models, field for field the CRD's schema.

``crds/placeholderjobs.slinky.slurm.net.yaml`` is the contract with users and the Go bridge; a
unit test (tests/unit/test_placeholderjob_models.py) checks these models against it both ways,
so the operator reads and writes the same fields the API server keeps. ``spec.slurm`` is the
``JobRequest`` the job is submitted with.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from slurm_bridge.slurm.models import JobRequest

Phase = Literal["Pending", "Allocated", "Running", "Completed", "Failed", "Cancelled"]


class _Camel(BaseModel):
    # Fields the schema does not know are pruned by the API server; reading ignores them so an
    # object written by a newer bridge still parses.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def dump(self) -> dict[str, Any]:
        """The API form: camelCase, only the fields that were set (a merge patch keeps the rest)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


class GroupSource(_Camel):
    """The workload the pods belong to (where the options came from)."""

    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    uid: str | None = None


class Component(_Camel):
    """One component of a heterogeneous Slurm job: a child PodGroup of a CompositePodGroup, its
    member pods (one node each) and its own request. Its offset is its place in the list."""

    pod_group: str
    min_member: int = Field(ge=1)
    pods: list[str]
    slurm: JobRequest


class PlaceholderJobSpec(_Camel):
    pods: list[str]
    # The uid of each member (gangs only): a pod with a member's name but another uid is a later
    # incarnation, not that member.
    pod_uids: dict[str, str] | None = Field(default=None, alias="podUIDs")
    min_member: int | None = Field(default=None, ge=1)
    group: GroupSource | None = None
    slurm: JobRequest
    # A CompositePodGroup's heterogeneous job: its components in offset order (``pods`` lists
    # every component's pods, ``slurm`` is component 0's request), and how many must be complete.
    min_components: int | None = Field(default=None, ge=1)
    components: list[Component] | None = None


class Assignment(_Camel):
    pod: str
    node: str
    offset: int | None = Field(default=None, ge=0)  # the pod's heterogeneous job component


class ComponentStatus(_Camel):
    """A heterogeneous job's component as Slurm reports it."""

    offset: int = Field(ge=0)
    pod_group: str
    job_id: int | None = None
    slurm_state: str | None = None
    node_list: str | None = None


# What a condition written before every field was required reads as (see Condition).
LEGACY_CONDITION: dict[str, Any] = {
    "reason": "Unknown", "message": "", "lastTransitionTime": "1970-01-01T00:00:00Z", "observedGeneration": 0,
}  # fmt: skip


class Condition(_Camel):
    """A metav1.Condition: the CRD requires every field.

    Conditions written by bridge versions that left some out still parse, with the missing
    fields filled from LEGACY_CONDITION, so the next status write (which sends the whole list)
    is valid under the stricter schema instead of being refused after an upgrade."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _fill_legacy(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {**LEGACY_CONDITION, **{k: v for k, v in data.items() if v is not None}}
        return data


class PlaceholderJobStatus(_Camel):
    observed_generation: int | None = None
    job_id: int | None = None
    het_job_id: int | None = None  # a CompositePodGroup's heterogeneous job (its leader's id)
    components: list[ComponentStatus] | None = None
    phase: Phase | None = None
    slurm_state: str | None = None
    reason: str | None = None
    message: str | None = None
    # Whom Slurm runs and charges the job as, from its record (written with the job id).
    slurm_user: str | None = None
    account: str | None = None
    pod_list: str | None = None
    node_list: str | None = None
    assignments: list[Assignment] | None = None
    submit_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    # Slurm's estimate of a pending job's start (the backfill scheduler's), while it has one.
    expected_start: str | None = None
    conditions: list[Condition] | None = None

    def condition_dicts(self) -> list[dict[str, Any]] | None:
        """The conditions as the API has them (what status.set_condition edits)."""
        return None if self.conditions is None else [c.dump() for c in self.conditions]


def spec_of(phj: dict[str, Any]) -> PlaceholderJobSpec:
    return PlaceholderJobSpec.model_validate(phj.get("spec") or {})


def status_of(phj: dict[str, Any]) -> PlaceholderJobStatus:
    return PlaceholderJobStatus.model_validate(phj.get("status") or {})


class PlaceholderJob(_Camel):
    """The whole object; the operator reads ``spec`` and ``status`` through the models above."""

    api_version: str | None = None
    kind: str | None = None
    metadata: dict[str, Any] | None = None
    spec: PlaceholderJobSpec
    status: PlaceholderJobStatus | None = None
