"""The operator's check of Slurm's side of node sharing (slurm_bridge/rules/slurmsetup.py): run by the
leader's node controller after its first node list and every CHECK_SECONDS, so a slurm.conf fixed
later clears without a restart.

How a finding surfaces (docs/colocation.md, "What the bridge checks in Slurm"): a log line when it
changes (WARNING for a problem, INFO otherwise), the gauge ``slurm_bridge_slurm_setup_problem{check}``
(1 while it is a problem), and ``/stats`` (``slurmSetup``). Readiness is not touched: the bridge
works, only the sharing guarantee is weaker, and an unready operator would stop every pod.
"""

from __future__ import annotations

import logging
import time
from typing import Final, Protocol

from slurm_bridge.core import metrics
from slurm_bridge.core.config import Config
from slurm_bridge.rules.slurmsetup import Finding, SiteView, findings
from slurm_bridge.slurm.errors import SlurmError
from slurm_bridge.slurm.models import PartitionInfo, SlurmConf

log = logging.getLogger(__name__)
CHECK_SECONDS: Final = 600.0
# After a failed read, the next try comes this much sooner than a full period.
RETRY_SECONDS: Final = 60.0


class SlurmSetupReads(Protocol):
    """What the check reads of Slurm: slurm.conf, one partition, the REST API version."""

    async def slurm_conf(self) -> SlurmConf | None: ...
    async def partition(self, name: str) -> PartitionInfo | None: ...
    async def api_version(self) -> str: ...


class SetupCheck:
    def __init__(self, config: Config, slurm: SlurmSetupReads) -> None:
        self.config = config
        self.slurm = slurm
        self.findings: list[Finding] = []
        self._due = 0.0  # monotonic time of the next check
        self._told: dict[str, tuple[str, str]] = {}  # check -> (state, message) last logged

    async def maybe_run(self) -> None:
        if time.monotonic() < self._due:
            return
        try:
            view = SiteView(
                await self.slurm.slurm_conf(),
                await self.slurm.partition(self.config.partition),
                await self.slurm.api_version(),
            )
        except SlurmError as e:
            self._due = time.monotonic() + RETRY_SECONDS
            log.warning("cannot read Slurm's configuration to check node sharing %s: %s", self.config.nodeSharing, e)
            return
        self._due = time.monotonic() + CHECK_SECONDS
        self.report(findings(self.config, view))

    def report(self, found: list[Finding]) -> None:
        self.findings = found
        for f in found:
            metrics.slurm_setup(f.check, f.state == "problem")
            if self._told.get(f.check) == (f.state, f.message):
                continue
            self._told[f.check] = (f.state, f.message)
            if f.state == "problem":
                log.warning("Slurm setup (%s): %s", f.check, f.message)
            else:
                log.info("Slurm setup (%s, %s): %s", f.check, f.state, f.message)

    def stats(self) -> list[dict[str, str]]:
        """For /stats."""
        return [{"check": f.check, "state": f.state, "message": f.message} for f in self.findings]
