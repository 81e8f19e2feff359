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

        Sharing: :meth:`sharing`.

        ``user_id``/``group_id`` are strings on the wire, and the API also accepts names there:
        ``user_name``/``group_name`` (a TenantPolicy's user by name) go into the same fields.

        Placement: ``required_nodes`` and ``excluded_nodes`` are arrays of node names (the
        ``csv_string`` of every supported version), sbatch's ``--nodelist`` and ``--exclude``. A
        ``topology`` sends both sbatch's ``--segment=<nodes>`` and ``--switches=1``: Slurm 26.05
        honours the first on a topology/block partition and the second on a topology/tree one, and
        ignores each on the other kind (checked, v0.0.43 to v0.0.45 have both fields, as v0.0.46's
        description has), so the bridge need not know which kind a topology is. ``--switches``
        waits at most the site's ``max_switch_wait`` for one leaf switch (docs/workloads.md#topology).
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
            priority=None if req.priority is None else NoVal.of(req.priority),
        )
        if req.topology:
            d.segment_size, d.required_switches = NoVal.of(req.nodes), NoVal.of(1)
        d.shared, d.mcs_label = self.sharing(req)
        if not for_update:
            d.user_id = req.user_name or (None if req.user_id is None else str(req.user_id))
            d.group_id = req.group_name or (None if req.group_id is None else str(req.group_id))
        return d

    def sharing(self, req: JobRequest) -> tuple[list[str] | None, str | None]:
        """``shared`` and ``mcs_label`` for the request's node sharing (docs/colocation.md).

        The same in every supported version: the submit side of v0.0.43 to v0.0.45 has only
        ``shared`` (its enum unchanged) and ``mcs_label``; v0.0.45 deprecates ``shared`` on the
        *read* side alone (``job_info``, where it is then always empty), and its replacements
        ``exclusive``/``oversubscribe`` exist only there and in slurmdb (checked on Slurm 26.05.5,
        docs/colocation.md); v0.0.46's description keeps all of it. A version that changes the
        submit side overrides this.

        - ``exclusive``: ``["none"]``, sbatch's ``--exclusive``: whole nodes.
        - ``timeShared``: ``["mcs"]`` and the MCS label: with ``MCSPlugin=mcs/label`` and
          ``MCSParameters=ondemand,ondemandselect`` the node then takes only jobs of that label
          (pods share it among themselves; native jobs wait) -- the Go bridge's behaviour.
        - ``coResident``: nothing, and no label (``MCSParameters=select`` would turn a label alone
          into a filter): under select/cons_tres and a partition with ``OverSubscribe=NO`` other
          jobs use the node's remaining cores and memory. ``["oversubscribe"]`` is never sent: it
          shares the *same* cores where the partition allows it.
        - unset (a request from before the modes): ``["none"]`` when ``exclusive``, and the label
          as given.
        """
        mode = req.node_sharing
        if mode == "exclusive":
            return ["none"], None
        if mode == "timeShared":
            if not req.mcs_label:
                raise ValueError(
                    "a time-shared job needs an MCS label (mcs_label): Slurm would not keep native jobs off"
                )
            return ["mcs"], req.mcs_label
        if mode == "coResident":
            return None, None
        return (["none"] if req.exclusive else None), req.mcs_label

    def submit_body(
        self, req: JobRequest, *, name: str, admin_comment: str, as_user: bool = False, comment: str | None = None
    ) -> dict[str, Any]:
        """An external job: Slurm allocates the nodes and runs nothing on them (the pods do).

        Its working directory is /tmp: nothing runs there. A job's user can set it, so it proves
        nothing; the handoff's EpilogSlurmctld only takes it as "perhaps the bridge's" and holds
        such a job provisionally, for milliseconds, until it has read the admin comment
        (docs/design/handoff.md, "The provisional hold"): keep the two in step.
        ``admin_comment`` is the bridge's mark (only an operator can set it), which the handoff's
        EpilogSlurmctld also reads (slurm_bridge/rules/handoff.py).

        ``as_user``: sent as another user, who may not set ``admin_comment`` (Slurm 26.05 answers
        2002 "Access/permission denied"): the marker goes into ``comment`` instead, until the bridge
        sets ``admin_comment`` itself (:meth:`.jobcalls.JobCalls.mark_job`).

        ``comment``: the job's comment instead (slurmctld's notify hook reads it: what it tells the
        operator of this job); as another user, it must carry the marker too."""
        d = self.job_desc(req)
        d.name = name
        d.flags = ["EXTERNAL_JOB"]
        d.current_working_directory = "/tmp"
        if as_user:
            d.comment = admin_comment
        else:
            d.admin_comment = admin_comment
        if comment is not None:
            d.comment = comment
        return {"job": d.body()}

    def het_submit_body(self, reqs: list[JobRequest], *, name: str, admin_comment: str) -> dict[str, Any]:
        """One heterogeneous external job, a component per request in offset order (``jobs``, a
        list of job descriptions: Slurm 26.05 makes them one job whose leader is component 0,
        checked). Every component carries the name and the admin comment, so each is found as the
        bridge's in Slurm's lists, where each component is a job of its own."""
        if not reqs:
            raise ValueError("a heterogeneous job needs at least one component")
        return {"jobs": [self.submit_body(r, name=name, admin_comment=admin_comment)["job"] for r in reqs]}

    def allocate_body(
        self,
        req: JobRequest,
        *,
        name: str,
        admin_comment: str,
        as_user: bool = False,
        comment: str | None = None,
    ) -> dict[str, Any]:
        """The external job of :meth:`submit_body` (``as_user`` and ``comment`` as there), allocated
        now or refused (never queued)."""
        body = self.submit_body(req, name=name, admin_comment=admin_comment, as_user=as_user, comment=comment)
        body["job"]["immediate"] = True
        return body

    def priority_body(self, priority: int) -> dict[str, Any]:
        """A job update that sets only ``priority`` (a bare job_desc_msg)."""
        return {"priority": NoVal.of(priority).model_dump(exclude_none=True)}

    def mark_body(self, admin_comment: str, comment: str | None = None) -> dict[str, Any]:
        """A job update that sets only ``admin_comment`` (and ``comment``): a bare job_desc_msg."""
        return {"admin_comment": admin_comment} | ({} if comment is None else {"comment": comment})

    def update_body(self, req: JobRequest, *, name: str | None = None, unlimited_time: bool = False) -> dict[str, Any]:
        """A pending job's update: a bare ``job_desc_msg``, never wrapped in ``{"job": ...}``
        (slurmrestd answers a wrapped one 200 with "Ignoring unknown field" warnings and changes
        nothing: checked on Slurm 26.05, v0.0.43 to v0.0.45 alike).

        Every field of ``req`` (the job's whole request, so the update is all or nothing), ``name``
        when given, and the values that put back what an unset field means, where Slurm has one:
        ``constraints: ""`` (none) and ``qos: ""`` (the association's default QOS), both checked;
        ``unlimited_time`` sends an infinite time limit. Owner (user, group), admin comment and
        node sharing stay as submitted. Sharing is never sent on an update: Slurm 26.05.5 turns
        ``shared: ["mcs"]`` in an update into OverSubscribe (read back as ``["oversubscribe"]``,
        checked in v0.0.43 to v0.0.45), which would take a time-shared job out of its turns with
        native jobs. Nor is the topology placement: Slurm 26.05 keeps a waiting job's segment size
        whatever an update says (checked), so a topology job's node count does not change either
        (slurm_bridge/rules/jobchanges.py)."""
        d = self.job_desc(req, for_update=True)
        d.shared = d.mcs_label = d.segment_size = d.required_switches = None
        if name is not None:
            d.name = name
        if d.constraints is None:
            d.constraints = ""
        if d.qos is None:
            d.qos = ""
        if unlimited_time:
            d.time_limit = NoVal(set=True, infinite=True)
        return d.body()

    def node_update_body(self, state: str | None, reason: str | None, comment: str | None = None) -> dict[str, Any]:
        if state is not None:
            state = state.upper()
            if state not in self.node_update_states:
                raise ValueError(
                    f"node state {state!r} cannot be set through REST API {self.version}; "
                    f"use one of {', '.join(sorted(self.node_update_states))}"
                )
        return UpdateNode(state=None if state is None else [state], reason=reason, comment=comment).body()
