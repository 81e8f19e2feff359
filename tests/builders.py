"""Typed builders of the objects the tests make: pods, PlaceholderJobs, Slurm's jobs.

As Kueue's ``testingjobs`` wrappers: each starts from a valid minimal object and says what differs,
then hands out a fresh copy, e.g. ``make_pod("p").uid("u1").gated().obj()`` or
``make_phj("phj").pods("a", "b").phase("Pending").job_id(7).obj()``. Unit tests use them for
their inputs, e2e tests for what they create (``.manifest()``: no namespace, no uid, as a user
writes it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Self

from slurm_bridge import names
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.slurmjobs.jobref import encode_admin_comment
from slurm_bridge.operator.views.slurmjobs import PhjRef
from slurm_bridge.slurm.models import JobInfo

Obj = dict[str, Any]
DELETED_AT = "2026-01-01T00:00:00Z"


class _Wrapper:
    def __init__(self, obj: Obj) -> None:
        self._obj = obj

    @property
    def _meta(self) -> Obj:
        meta: Obj = self._obj["metadata"]
        return meta

    def uid(self, uid: str) -> Self:
        self._meta["uid"] = uid
        return self

    def rv(self, rv: int | str) -> Self:
        self._meta["resourceVersion"] = str(rv)
        return self

    def generation(self, generation: int) -> Self:
        self._meta["generation"] = generation
        return self

    def label(self, key: str, value: str) -> Self:
        self._meta.setdefault("labels", {})[key] = value
        return self

    def annotation(self, key: str, value: str) -> Self:
        self._meta.setdefault("annotations", {})[key] = value
        return self

    def meta(self, **fields: Any) -> Self:
        """Any other metadata field, as the API names it (``managedFields=...``)."""
        self._meta.update(fields)
        return self

    def owner(self, ref: Mapping[str, Any], *, controller: bool | None = None) -> Self:
        """An ownerReference (``apiVersion``, ``kind``, ``name``, ``uid``)."""
        owner = dict(ref) | ({} if controller is None else {"controller": controller})
        self._meta.setdefault("ownerReferences", []).append(owner)
        return self

    def deleted(self, at: str = DELETED_AT) -> Self:
        """Being deleted (a deletionTimestamp): a terminating pod, a PlaceholderJob being finalized."""
        self._meta["deletionTimestamp"] = at
        return self

    def status(self, **fields: Any) -> Self:
        """Status fields, as the API names them; merged into what is there."""
        self._obj.setdefault("status", {}).update(fields)
        return self

    def obj(self) -> Obj:
        """A fresh copy: the wrapper may go on building."""
        return copy.deepcopy(self._obj)


class PodWrapper(_Wrapper):
    def __init__(self, name: str, namespace: str = "ns") -> None:
        super().__init__(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": {}}
        )

    def scheduler(self, name: str = "slurm-bridge") -> Self:
        self._obj["spec"]["schedulerName"] = name
        return self

    def gated(self, *gates: str) -> Self:
        """Held by scheduling gates (the bridge's by default), as the webhook leaves a pod."""
        self._obj["spec"]["schedulingGates"] = [{"name": g} for g in gates or (names.SCHEDULING_GATE,)]
        return self

    def node(self, node: str) -> Self:
        """Bound to ``node``."""
        self._obj["spec"]["nodeName"] = node
        return self

    def container(
        self,
        name: str = "c",
        *,
        image: str | None = None,
        command: list[str] | None = None,
        requests: Mapping[str, str] | None = None,
        limits: Mapping[str, str] | None = None,
    ) -> Self:
        container: Obj = {"name": name}
        if image is not None:
            container["image"] = image
        if command is not None:
            container["command"] = list(command)
        resources = {k: dict(v) for k, v in (("requests", requests), ("limits", limits)) if v}
        if resources or requests is not None:
            container["resources"] = resources
        self._obj["spec"].setdefault("containers", []).append(container)
        return self

    def spec(self, **fields: Any) -> Self:
        """Any other spec field, as the API names it (``restartPolicy="Never"``)."""
        self._obj["spec"].update(fields)
        return self

    def phase(self, phase: str) -> Self:
        return self.status(phase=phase)

    def manifest(self) -> Obj:
        """What a user creates: no namespace (the request's), no uid."""
        out = self.obj()
        out["metadata"].pop("namespace", None)
        return out


class PlaceholderJobWrapper(_Wrapper):
    def __init__(self, name: str = "phj", namespace: str = "ns") -> None:
        super().__init__(
            {
                "apiVersion": names.API_VERSION,
                "kind": names.KIND,
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"pods": []},
            }
        )

    def finalizer(self) -> Self:
        """The bridge's finalizer (every PlaceholderJob the bridge made has it)."""
        self._meta.setdefault("finalizers", []).append(names.FINALIZER_PLACEHOLDER_JOB)
        return self

    def owned_by_pod(self, name: str, uid: str) -> Self:
        """A single pod's PlaceholderJob: owned by its pod."""
        return self.owner({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid})

    def pods(self, *pods: str) -> Self:
        self._obj["spec"]["pods"] = list(pods)
        return self

    def spec(self, **fields: Any) -> Self:
        """Spec fields, as the CRD names them (``slurm={"nodes": 2}``, ``minMember=2``, ``group=...``)."""
        self._obj["spec"].update(fields)
        return self

    def phase(self, phase: str) -> Self:
        return self.status(phase=phase)

    def job_id(self, job_id: int) -> Self:
        return self.status(jobId=job_id)

    def parsed(self) -> PlaceholderJob:
        return PlaceholderJob.parse(self.obj())


def make_pod(name: str, namespace: str = "ns") -> PodWrapper:
    return PodWrapper(name, namespace)


def make_phj(name: str = "phj", namespace: str = "ns") -> PlaceholderJobWrapper:
    return PlaceholderJobWrapper(name, namespace)


def slurm_job(
    job_id: int,
    state: str = "PENDING",
    *,
    nodes: tuple[str, ...] = (),
    reason: str = "",
    ref: PhjRef | None = None,
    het: tuple[int, int] | None = None,
    **fields: Any,
) -> JobInfo:
    """A job as Slurm reports it; ``ref``: made by the bridge for that PlaceholderJob (its
    admin_comment); ``het``: a heterogeneous job's component (leader's id, offset)."""
    more: Obj = dict(fields)
    if ref is not None:
        more["admin_comment"] = encode_admin_comment(ref)
    if het is not None:
        more["het_job_id"], more["het_job_offset"] = het
    return JobInfo(job_id=job_id, states=(state,), nodes=nodes, reason=reason, **more)


def phj_ref(uid: str) -> PhjRef:
    """Bridge ``bridge``'s reference to PlaceholderJob ``ns/phj-<uid>`` (uid ``uid``)."""
    return PhjRef("bridge", "ns", f"phj-{uid}", uid)


def bridge_job(job_id: int, uid: str, state: str = "PENDING", nodes: tuple[str, ...] = (), **fields: Any) -> JobInfo:
    """A job the bridge made for ``phj_ref(uid)``."""
    return slurm_job(job_id, state, nodes=nodes, ref=phj_ref(uid), **fields)
