"""What Slurm's configuration says about preemption and time limits (docs/colocation.md): which QOS
may preempt which (the submit's rule, the likely preemptor, which running jobs can be preempted),
and each partition's OverTimeLimit (the time-limit ending). Read by three controllers: the
PlaceholderJob controller (the placer's ``may_preempt``, the handoff rows' input:
``decisions.inputs.Handoff.of_policy``), the handoff loop, and operator/slurmsettings/, which keeps
:class:`PolicyHolder` current; pure data here, so each decides without I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurm_bridge.slurm.models import JobRequest, QosInfo, SlurmConf

# slurm.conf's PreemptType that preempts nothing.
NO_PREEMPTION = ("", "preempt/none")


@dataclass(frozen=True)
class SlurmPolicy:
    """One reading of Slurm's preemption and time-limit settings (``known``: read at least once)."""

    known: bool = False
    conf: SlurmConf | None = None
    qos: Mapping[str, QosInfo] = field(default_factory=dict)
    # The bridge user's default QOS per account ("" = its default account); None: not readable.
    default_qos: Mapping[str, str] | None = None
    over_time_minutes: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def preemption_on(self) -> bool:
        """Whether Slurm preempts at all (unknown PreemptType: assume it does)."""
        if self.conf is None:
            return bool(self.qos) and any(q.preempts for q in self.qos.values())
        return self.conf.preempt_type not in NO_PREEMPTION

    def qos_of(self, request: JobRequest) -> str | None:
        """The QOS a job gets: its own, else its account's default for the bridge's user."""
        if request.qos:
            return request.qos
        if self.default_qos is None:
            return None
        return self.default_qos.get(request.account or "") or self.default_qos.get("") or None

    def may_preempt(self, request: JobRequest) -> bool:
        """Whether the job may preempt others when it starts: then it must be queued (``job/submit``),
        never an immediate allocation, which preempts its victims and then fails with 2016 (Slurm
        26.05; docs/colocation.md). Unknown (settings not read, QOS not known): True when Slurm
        preempts at all."""
        if not self.known:
            return False  # nothing read yet: the first submits behave as before the handoff
        if not self.preemption_on:
            return False
        if self.conf is not None and self.conf.preempt_type == "preempt/partition_prio":
            return True  # any partition of a higher PriorityTier may preempt: always queue
        qos = self.qos_of(request)
        if qos is None or qos not in self.qos:
            return any(q.preempts for q in self.qos.values())
        return bool(self.qos[qos].preempts)

    def preemptors_of(self, qos: str) -> tuple[str, ...]:
        """The QOS that may preempt jobs of ``qos``."""
        return tuple(sorted(q.name for q in self.qos.values() if qos in q.preempts))

    def preemptable(self, qos: str) -> bool:
        """Whether jobs of ``qos`` can be preempted (some QOS lists it in Preempt=)."""
        return self.preemption_on and any(qos in q.preempts for q in self.qos.values())


class PolicyHolder:
    """The current :class:`SlurmPolicy`, shared by the PlaceholderJob controller (the placer, the
    shell), the handoff loop and its preemptor finder (operator/slurmsettings replaces it at each reading)."""

    def __init__(self, policy: SlurmPolicy | None = None) -> None:
        self.current = policy or SlurmPolicy()
