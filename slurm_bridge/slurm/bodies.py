"""Request bodies: the version-neutral :class:`.models.JobRequest` as slurmrestd's job
description (submit, immediate allocation, heterogeneous submit, update) and node updates.

A mixin of :class:`.versions.Codec`, which sets the REST API version and its node states.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .formats import gres_to_tres_per_node
from .models import JobRequest
from .wire import JobDesc, NoVal, UpdateNode


class RequestBodies:
    """Encode requests (the layout every supported version shares)."""

    version: ClassVar[str]
    node_update_states: ClassVar[frozenset[str]]

    def job_desc(self, req: JobRequest, *, for_update: bool = False) -> JobDesc:
        """The job description for ``req``.

        Node count: ``minimum_nodes`` is ``req.nodes`` and ``maximum_nodes`` is ``req.max_nodes``,
        or also ``req.nodes`` so that pods get exactly the nodes they were counted for.

        Sharing: ``exclusive=True`` sends ``shared: ["none"]``, which is sbatch's ``--exclusive``
        (whole nodes). ``exclusive=False`` sends nothing, which under select/cons_tres lets other
        jobs use the node's remaining cpus, memory and GRES (partition OverSubscribe=NO, the
        default) -- that is what "shared node" means here. ``["oversubscribe"]`` is deliberately
        not used: it means sbatch's ``--oversubscribe``, sharing the *same* cpus with other jobs
        where the partition allows it, and it cannot undo a partition's OverSubscribe=EXCLUSIVE.
        ``None`` also sends nothing (the partition's default).

        ``user_id``/``group_id`` are strings on the wire, and the API also accepts names there:
        ``user_name``/``group_name`` (a TenantPolicy's user by name) go into the same fields.

        Placement: ``required_nodes`` and ``excluded_nodes`` are arrays of node names (the
        ``csv_string`` of every supported version), sbatch's ``--nodelist`` and ``--exclude``.
        """
        d = JobDesc(
            partition=req.partition,
            account=req.account,
            qos=req.qos,
            reservation=req.reservation,
            wckey=req.wckey,
            constraints=req.constraints,
            required_nodes=list(req.required_nodes) if req.required_nodes else None,
            excluded_nodes=list(req.excluded_nodes) if req.excluded_nodes else None,
            licenses=req.licenses,
            minimum_nodes=req.nodes,
            maximum_nodes=req.max_nodes if req.max_nodes is not None else req.nodes,
            tasks_per_node=req.tasks_per_node,
            cpus_per_task=req.cpus_per_task,
            memory_per_node=None if req.memory_per_node_mib is None else NoVal.of(req.memory_per_node_mib),
            tres_per_node=gres_to_tres_per_node(req.gres) if req.gres else None,
            time_limit=None if req.time_limit_minutes is None else NoVal.of(req.time_limit_minutes),
            shared=["none"] if req.exclusive else None,
            priority=None if req.priority is None else NoVal.of(req.priority),
            mcs_label=req.mcs_label,
        )
        if not for_update:
            d.user_id = req.user_name or (None if req.user_id is None else str(req.user_id))
            d.group_id = req.group_name or (None if req.group_id is None else str(req.group_id))
        return d

    def submit_body(self, req: JobRequest, *, name: str, admin_comment: str) -> dict[str, Any]:
        """An external job: Slurm allocates the nodes and runs nothing on them (the pods do)."""
        d = self.job_desc(req)
        d.name = name
        d.admin_comment = admin_comment
        d.flags = ["EXTERNAL_JOB"]
        d.current_working_directory = "/tmp"
        return {"job": d.body()}

    def het_submit_body(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> dict[str, Any]:
        """One heterogeneous external job, a component per request in offset order (``jobs``, a
        list of job descriptions: Slurm 26.05 makes them one job whose leader is component 0,
        checked). Every component carries the name and the admin comment, so each is found as the
        bridge's in Slurm's lists, where each component is a job of its own."""
        if not reqs:
            raise ValueError("a heterogeneous job needs at least one component")
        return {"jobs": [self.submit_body(r, name=name, admin_comment=admin_comment)["job"] for r in reqs]}

    def allocate_body(self, req: JobRequest, *, name: str, admin_comment: str, as_user: bool = False) -> dict[str, Any]:
        """The external job of :meth:`submit_body`, allocated now or refused (never queued).

        ``as_user``: called as another user, who may not set ``admin_comment`` (Slurm 26.05
        answers 2002 "Access/permission denied"): the marker goes into ``comment`` instead, until
        the bridge sets ``admin_comment`` itself (:meth:`.jobcalls.JobCalls.mark_job`)."""
        body = self.submit_body(req, name=name, admin_comment=admin_comment)
        body["job"]["immediate"] = True
        if as_user:
            body["job"]["comment"] = body["job"].pop("admin_comment")
        return body

    def mark_body(self, admin_comment: str) -> dict[str, Any]:
        """A job update that sets only ``admin_comment`` (a bare job_desc_msg)."""
        return {"admin_comment": admin_comment}

    def update_body(self, req: JobRequest) -> dict[str, Any]:
        """Fields a pending job may change; name, admin comment and owner are kept as submitted."""
        return self.job_desc(req, for_update=True).body()

    def node_update_body(self, state: str | None, reason: str | None, comment: str | None = None) -> dict[str, Any]:
        if state is not None:
            state = state.upper()
            if state not in self.node_update_states:
                raise ValueError(
                    f"node state {state!r} cannot be set through REST API {self.version}; "
                    f"use one of {', '.join(sorted(self.node_update_states))}"
                )
        return UpdateNode(state=None if state is None else [state], reason=reason, comment=comment).body()
