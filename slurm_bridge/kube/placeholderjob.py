"""The PlaceholderJob as pydantic models, spec and status field for field the CRD's schema, and
the rules read off it (``PlaceholderJob.is_gang``, ``is_member``, ``resubmit_wait``).

``crds/placeholderjobs.slinky.slurm.net.yaml`` is the contract with users and the Go bridge; a
unit test (tests/unit/kube/test_placeholderjob_models.py) checks these models against it both ways,
so the operator reads and writes the same fields the API server keeps. ``spec.slurm`` is the
``JobRequest`` the job is submitted with. The operator parses a PlaceholderJob once per stored
version (operator/runtime/store.py, ``ParsedStore``) and hands the typed object on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, PrivateAttr

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.kube.conditions import Camel as _Camel
from slurm_bridge.kube.conditions import Condition
from slurm_bridge.kube.times import parse_iso
from slurm_bridge.rules.workloadkinds import COMPOSITE_PODGROUP, GANG_KINDS, group_kind
from slurm_bridge.slurm.models import JobRequest

Phase = Literal["Pending", "Allocated", "Running", "Completed", "Failed", "Cancelled"]


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

    def crd_dict(self) -> dict[str, Any]:
        """The CRD form of a new spec: camelCase, unset (None) fields left out, as
        ``JobRequest.crd_dict``."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


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

    def merged(self, top: PlaceholderJobStatus) -> PlaceholderJobStatus:
        """This status with the fields ``top`` sets (as a merge patch of both leaves it)."""
        return self.model_copy(update={k: getattr(top, k) for k in top.model_fields_set})


class OwnerReference(_Camel):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(_Camel):
    """The metadata the operator reads."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str | None = None
    generation: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = None


class PlaceholderJob(_Camel):
    """The whole object, parsed once (:meth:`parse`); ``raw`` is the object it was parsed from,
    for the calls that send it back (Events, patches)."""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PlaceholderJobSpec
    status: PlaceholderJobStatus = Field(default_factory=PlaceholderJobStatus)
    _raw: dict[str, Any] = PrivateAttr(default_factory=dict)

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> PlaceholderJob:
        phj = cls.model_validate(obj)
        phj._raw = obj
        return phj

    @property
    def raw(self) -> dict[str, Any]:
        # pydantic's private-attribute lookup takes about 1.6 us; its dict, 0.05 (a reconcile asks often)
        raw: dict[str, Any] = self.__pydantic_private__["_raw"]  # type: ignore[index]
        return raw

    @property
    def deleted(self) -> bool:
        return bool(self.metadata.deletion_timestamp)

    def with_status(self, status: PlaceholderJobStatus) -> PlaceholderJob:
        """The same object with another status (the raw object stays the one parsed)."""
        return self.model_copy(update={"status": status})

    def is_gang(self) -> bool:
        """A gang's: all its members start together, each recorded by its uid."""
        return self.spec.group is not None and self.spec.group.kind in GANG_KINDS

    def is_composite(self) -> bool:
        """A CompositePodGroup's: one heterogeneous Slurm job."""
        return self.spec.group is not None and group_kind(self.spec.group.dump()) == COMPOSITE_PODGROUP.group_kind

    def pod_owner_uid(self) -> str | None:
        """The uid of the pod a single pod's PlaceholderJob belongs to (its Pod owner)."""
        for ref in self.metadata.owner_references or []:
            if ref.kind == "Pod" and ref.api_version == "v1":
                return ref.uid
        return None

    def owned_by_other_pod(self, pod: dict[str, Any] | None) -> bool:
        """A single-pod PlaceholderJob belongs to one pod incarnation (its Pod owner's uid)."""
        if pod is None:
            return False
        owner = self.pod_owner_uid()
        return owner is not None and owner != objects.uid(pod)

    def is_member(self, pod: dict[str, Any]) -> bool:
        """Whether ``pod`` is the incarnation the PlaceholderJob counts as its member of that name:
        a gang records each member's uid in spec.podUIDs, a single pod is the PlaceholderJob's owner."""
        if self.is_gang():
            uid = (self.spec.pod_uids or {}).get(pod["metadata"]["name"])
            return uid is None or uid == objects.uid(pod)
        return not self.owned_by_other_pod(pod)

    def resubmit_wait(self, retry_seconds: float, now: datetime | None = None) -> float:
        """Seconds to wait before submitting again a spec Slurm refused; 0 when a submit may go ahead.

        The refusal is kept in status (reason, submitTime, observedGeneration), so neither a watch
        event nor a restart submits the same refused spec again before ``retry_seconds``."""
        status, generation = self.status, self.metadata.generation
        if status.reason != names.REASON_SUBMIT_REJECTED or status.job_id:
            return 0.0
        if generation is not None and status.observed_generation != generation:
            return 0.0  # the spec changed: try it now
        try:
            attempted = parse_iso(str(status.submit_time))
        except ValueError:
            return 0.0
        elapsed = ((now or datetime.now(UTC)) - attempted).total_seconds()
        return max(retry_seconds - elapsed, 0.0)
