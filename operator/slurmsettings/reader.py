"""Slurm's settings, read in one place (leader only; docs/design/handoff.md, "Slurm's settings"): every
POLICY_SECONDS, slurm.conf (EpilogSlurmctld, PreemptType, OverTimeLimit), the QOS preemption
settings, the bridge user's default QOS and the partitions' OverTimeLimit, into the
:class:`PolicyHolder` that the PlaceholderJob controller (the placer's queue-or-allocate rule, the
handoff rows) and the handoff loop (which jobs may be preempted) decide with.

What it changes is said, not decided in silence: the QOS whose jobs are now queued rather than
allocated at once (a job that may preempt must be queued), and what the handoff needs from Slurm
and does not find there, each logged once per reading that changed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from slurm_bridge.core.config import Config
from slurm_bridge.operator.runtime.pollloop import PollLoop
from slurm_bridge.operator.views.slurmpolicy import PolicyHolder, SlurmPolicy
from slurm_bridge.rules.resume import preempt_mode
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import QosInfo, SlurmConf

log = logging.getLogger(__name__)

# Slurm's preemption and time-limit settings are read again this often.
POLICY_SECONDS = 60.0


class SlurmSettingsReads(Protocol):
    """The Slurm calls a reading makes."""

    async def slurm_conf(self) -> SlurmConf | None: ...
    async def qos_preemption(self) -> list[QosInfo] | None: ...
    async def default_qos(self, user: str) -> dict[str, str] | None: ...
    async def partition_over_time(self) -> dict[str, int | None]: ...


def policy_problems(policy: SlurmPolicy, config: Config, used: frozenset[str]) -> list[str]:
    """What the handoff needs from Slurm and does not find there (pure; logged as warnings).
    ``used``: the QOS the bridge's jobs run in (its jobs seen, its user's default QOS)."""
    out: list[str] = []
    conf = policy.conf
    if conf is not None and not conf.handoff_epilogs:
        out.append(
            "slurm.conf has no EpilogSlurmctld (but slurmctld's hook to the operator): when Slurm ends a "
            "bridge job itself (scancel by "
            "someone else, a node failure) native work may start under the pods still stopping "
            "(install the handoff script, docs/colocation.md)"
        )
    need = config.handoff.maxGracePeriodSeconds + config.handoff.marginSeconds
    for q in sorted(policy.qos.values(), key=lambda q: q.name):
        if q.name not in used or not policy.preemptable(q.name):
            continue
        mode = preempt_mode(q.mode, conf.preempt_mode if conf is not None else ())
        if mode in ("SUSPEND", "GANG"):
            out.append(
                f"QOS {q.name} may be preempted with PreemptMode={mode}, which Slurm cannot do to a pod's job (an "
                "external job is neither suspended nor time-sliced: the pod would run on beside its preemptor): use "
                "REQUEUE (the work comes back at its place) or CANCEL (it does not; docs/colocation.md)"
            )
        elif q.grace_seconds < need:
            out.append(
                f"QOS {q.name} may be preempted with GraceTime {q.grace_seconds}s, shorter than "
                f"handoff.maxGracePeriodSeconds + marginSeconds ({need}s): a preempted pod may be cut short"
            )
    return out


def queueing(policy: SlurmPolicy) -> str:
    """How the placer submits under ``policy``, in words (pure): which jobs it queues rather than
    allocates at once, because they may preempt (``SlurmPolicy.may_preempt``)."""
    if not policy.known or not policy.preemption_on:
        return "Slurm preempts nothing: jobs are allocated at once where immediateAllocation asks for it"
    if policy.conf is not None and policy.conf.preempt_type == "preempt/partition_prio":
        return "PreemptType=preempt/partition_prio: every job is queued (any may preempt), never allocated at once"
    preemptors = sorted(q.name for q in policy.qos.values() if q.preempts)
    if not preemptors:
        return "no QOS may preempt: jobs are allocated at once where immediateAllocation asks for it"
    return (
        f"jobs of QOS {', '.join(preemptors)} may preempt, so they are queued (job/submit), never allocated at once; "
        "a job whose QOS is not known is queued too"
    )


class SlurmSettings:
    """Keeps :attr:`holder` current; the one reader of Slurm's settings."""

    def __init__(
        self,
        config: Config,
        slurm: SlurmSettingsReads,
        holder: PolicyHolder,
        used_qos: Callable[[], set[str]] = set,
        user: Callable[[], str] = lambda: "",
    ) -> None:
        self.config = config
        self.slurm = slurm
        self.holder = holder
        self.used_qos = used_qos
        self.user = user
        self._problems: list[str] = []
        self._queueing = ""
        self._loop = PollLoop(
            "slurm-settings",
            POLICY_SECONDS,
            self.read,
            log=log,
            ok_message=lambda: "reading Slurm's settings OK",
            failed="reading Slurm's settings",
            errors=(SlurmError,),
        )

    @property
    def healthy(self) -> bool:
        return self._loop.healthy

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def read(self) -> None:
        """One reading: replaces the holder's policy, says what changed."""
        conf = await self.slurm.slurm_conf()
        qos = await self.slurm.qos_preemption()
        user = self.config.slurmUser or self.user()
        defaults = await self.slurm.default_qos(user) if user else None
        over = await self.slurm.partition_over_time()
        policy = SlurmPolicy(True, conf, {q.name: q for q in qos or []}, defaults, over)
        self.holder.current = policy
        mode = queueing(policy)
        if mode != self._queueing:
            log.info("Slurm's settings: %s", mode)
            self._queueing = mode
        used = frozenset(self.used_qos() | set((defaults or {}).values()))
        problems = policy_problems(policy, self.config, used)
        if problems != self._problems:
            for p in problems:
                log.warning("handoff: %s", p)
        self._problems = problems
