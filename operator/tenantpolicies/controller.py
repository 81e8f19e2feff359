"""TenantPolicy status: what the leader tells administrators about each policy.

For each policy: the namespaces it selects, whether another policy selects one of them too
(``Ready``), whether Slurm's accounting knows its accounts and QOS (``AccountsValid``, read from
slurmrestd's slurmdb endpoints, at most every ACCOUNTS_RECHECK_SECONDS unless a policy changed),
and the live jobs that no longer fit it after a change (never cancelled: listed, and an Event).
:func:`desired_status` is pure; :class:`TenantStatusController` reads, decides and writes only
what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from slurm_bridge import names
from slurm_bridge.core import objects
from slurm_bridge.core.config import Config
from slurm_bridge.core.objects import Obj
from slurm_bridge.core.tasks import cancel_and_wait
from slurm_bridge.kube.cache import TenantCache
from slurm_bridge.kube.client import KubeError, resource_path
from slurm_bridge.kube.conditions import set_condition_dicts
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.kube.seams import ConditionKube
from slurm_bridge.rules import tenancy
from slurm_bridge.slurm.errors import SlurmError

log = logging.getLogger(__name__)

# Slurm's accounts and QOS are read again this often (and when a policy changes, at most every
# ACCOUNTS_MIN_SECONDS): not on every poll.
ACCOUNTS_RECHECK_SECONDS: Final = 300.0
ACCOUNTS_MIN_SECONDS: Final = 10.0
# Policies are looked at this often even when nothing woke the controller (jobs outside a policy).
PERIOD_SECONDS: Final = 30.0
MAX_NAMESPACES_LISTED: Final = 100
MAX_JOBS_LISTED: Final = 20
_LIVE: Final = frozenset({names.PHASE_PENDING, names.PHASE_ALLOCATED, names.PHASE_RUNNING})


@dataclass(frozen=True)
class SlurmNames:
    """Slurm's accounts and QOS as last read; None when they could not be read (``problem`` says why)."""

    accounts: frozenset[str] | None = None
    qos: frozenset[str] | None = None
    problem: str = "Slurm's accounting has not been read yet"


def accounts_condition(policy: tenancy.TenantPolicy, slurm: SlurmNames) -> tuple[bool | None, str, str]:
    """(status, reason, message) of AccountsValid."""
    spec = policy.spec
    assert spec is not None
    wanted_accounts = sorted({*(spec.accounts.permitted() if spec.accounts else ())})
    wanted_qos = sorted({*(spec.qos.permitted() if spec.qos else ())})
    if not wanted_accounts and not wanted_qos:
        return True, names.TP_REASON_ACCOUNTS_FOUND, "the policy names no account or QOS (Slurm's defaults apply)"
    if slurm.accounts is None or slurm.qos is None:
        return None, names.TP_REASON_ACCOUNTING_UNAVAILABLE, f"accounting cannot be checked: {slurm.problem}"
    missing_accounts = [a for a in wanted_accounts if a not in slurm.accounts]
    missing_qos = [q for q in wanted_qos if q not in slurm.qos]
    if missing_accounts:
        listed = ", ".join(missing_accounts)
        word = "account" if len(missing_accounts) == 1 else "accounts"
        verb = "does" if len(missing_accounts) == 1 else "do"
        return (
            False,
            names.TP_REASON_UNKNOWN_ACCOUNT,
            f"{word} {listed} {verb} not exist in Slurm (sacctmgr add account)",
        )
    if missing_qos:
        listed = ", ".join(missing_qos)
        return False, names.TP_REASON_UNKNOWN_QOS, f"QOS {listed} does not exist in Slurm (sacctmgr add qos)"
    found = ", ".join([*wanted_accounts, *(f"QOS {q}" for q in wanted_qos)])
    return True, names.TP_REASON_ACCOUNTS_FOUND, f"Slurm knows {found}"


def outside_policy(policy: tenancy.TenantPolicy, phjs: Iterable[Obj], selected: set[str]) -> list[str]:
    """Live jobs of the policy's namespaces that do not fit it now: "ns/name (job N): why"."""
    out: list[str] = []
    spec = policy.spec
    if spec is None:
        return out
    for phj in phjs:
        meta = objects.meta(phj)
        if meta.get("namespace") not in selected:
            continue
        typed = PlaceholderJob.parse(phj)
        status = typed.status
        if status.phase not in _LIVE or status.job_id is None:
            continue
        phj_spec = typed.spec
        # A heterogeneous job (a CompositePodGroup's) is judged component by component.
        for requested in [c.slurm for c in phj_spec.components or []] or [phj_spec.slurm]:
            try:
                request = tenancy.apply_defaults(requested, policy)
            except ValueError:
                continue
            values = request.model_dump(exclude_none=True)
            if status.account:
                values["account"] = status.account  # what Slurm charges it to
            if status.slurm_user and spec.user is not None and spec.user.name is not None:
                values.pop("user_id", None)
                values["user_name"] = status.slurm_user
            problems = tenancy.check(values, policy)
            if problems:
                out.append(f"{meta.get('namespace')}/{meta.get('name')} (job {status.job_id}): {problems[0]}")
                break
    return sorted(out)


@dataclass
class PolicyView:
    """What the controller computed for one policy (the status to write and what to announce)."""

    status: Obj
    outside: list[str] = field(default_factory=list)


def desired_status(
    policy: tenancy.TenantPolicy,
    current: Mapping[str, Any],
    index: tenancy.TenantIndex,
    slurm: SlurmNames,
    phjs: Iterable[Obj],
) -> PolicyView:
    """The policy's status: its namespaces, Ready, AccountsValid and the jobs outside it."""
    gen = policy.generation
    conditions: list[Obj] | None = list(current.get("conditions") or []) or None
    selected = (
        index.selected(policy)
        if policy.spec is not None
        else sorted(n for n in policy.raw_namespaces if n in index.namespaces)
    )
    conflicts = index.conflicts(policy)
    if policy.spec is None:
        ready: tuple[bool, str, str] = (False, names.TP_REASON_INVALID, f"the policy is invalid: {policy.problem}")
    elif conflicts:
        parts = [f"{ns} (also {', '.join(others)})" for ns, others in sorted(conflicts.items())]
        message = "namespaces selected by another TenantPolicy too, whose pods are refused: " + "; ".join(parts[:20])
        ready = (False, names.TP_REASON_CONFLICT, message)
    elif not selected:
        ready = (True, names.TP_REASON_NO_NAMESPACES, "the policy selects no namespace yet")
    else:
        ready = (True, names.TP_REASON_SELECTED, f"the policy selects {len(selected)} namespace(s)")
    conditions = set_condition_dicts(conditions, names.TP_COND_READY, *ready, gen)
    if policy.spec is not None:
        conditions = set_condition_dicts(
            conditions, names.TP_COND_ACCOUNTS_VALID, *accounts_condition(policy, slurm), gen
        )
    outside = outside_policy(policy, phjs, set(selected))
    user = policy.spec.user if policy.spec is not None else None
    status: Obj = {
        "observedGeneration": gen,
        "user": str(user) if user is not None else "",
        "namespaceCount": len(selected),
        "namespaces": selected[:MAX_NAMESPACES_LISTED],
        "jobsOutsidePolicyCount": len(outside),
        "jobsOutsidePolicy": outside[:MAX_JOBS_LISTED],
        "conditions": conditions,
    }
    return PolicyView(status, outside)


def _comparable(status: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in status.items() if k != "conditions"} | {
        "conditions": sorted(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
            for c in status.get("conditions") or []
        )
    }


class SlurmAccounting(Protocol):
    """What the TenantPolicy status reads of Slurm's accounting: its accounts and QOS (None: the
    accounting cannot be read)."""

    async def list_accounts(self) -> list[str] | None: ...
    async def list_qos(self) -> list[str] | None: ...


class TenantStatusController:
    """Writes each TenantPolicy's status while this replica leads."""

    def __init__(
        self, config: Config, kube: ConditionKube, slurm: SlurmAccounting, tenants: TenantCache, phjs: Any
    ) -> None:
        self.config, self.kube, self.slurm, self.tenants, self.phjs = config, kube, slurm, tenants, phjs
        self.slurm_names = SlurmNames()
        self._read_at = -1e9
        self._checked: dict[str, int] = {}  # policy -> generation whose accounts were checked
        self._announced: dict[str, set[str]] = {}  # policy -> jobs outside it already announced
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self, *_: Any) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="tenant-status")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    async def run(self) -> None:
        await self.tenants.wait_synced()
        while True:
            self._wake.clear()
            try:
                await self.sync_once()
            except (KubeError, OSError, TimeoutError) as e:
                log.warning("TenantPolicy status not written: %s", e)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PERIOD_SECONDS):
                    await self._wake.wait()
            await asyncio.sleep(0.5)  # a burst of namespace or policy events is one pass

    async def read_slurm(self, policies: list[tenancy.TenantPolicy]) -> None:
        """Slurm's accounts and QOS, read again when old or when a policy changed since."""
        now = time.monotonic()
        changed = any(self._checked.get(p.name) != p.generation for p in policies)
        age = now - self._read_at
        if age < ACCOUNTS_RECHECK_SECONDS and not (changed and age >= ACCOUNTS_MIN_SECONDS):
            return
        self._read_at = now
        try:
            accounts, qos = await self.slurm.list_accounts(), await self.slurm.list_qos()
        except SlurmError as e:
            self.slurm_names = SlurmNames(problem=f"slurmrestd's slurmdb endpoints failed: {e}")
        else:
            if accounts is None or qos is None:
                problem = (
                    "slurmrestd serves no slurmdb endpoints (no slurmdbd, or slurmrestd started without "
                    "its slurmdbd plugin)"
                )
                self.slurm_names = SlurmNames(problem=problem)
            else:
                self.slurm_names = SlurmNames(frozenset(accounts), frozenset(qos), "")
        self._checked = {p.name: p.generation for p in policies}

    async def sync_once(self) -> None:
        index = self.tenants.index()
        await self.read_slurm(index.policies)
        phjs = self.phjs.values()
        for policy in index.policies:
            obj = self.tenants.policies.objects.get(policy.name)
            if obj is None:
                continue
            current = obj.get("status") or {}
            view = desired_status(policy, current, index, self.slurm_names, phjs)
            if _comparable(view.status) != _comparable(current):
                path = resource_path(f"{names.GROUP}/{names.VERSION}", names.TP_PLURAL, None, policy.name)
                updated = await self.kube.patch(f"{path}/status", {"status": view.status})
                self.tenants.policies.objects[policy.name] = {**obj, "status": updated.get("status") or view.status}
            await self._announce(obj, policy.name, view.outside)
        for gone in set(self._announced) - {p.name for p in index.policies}:
            del self._announced[gone]

    async def _announce(self, obj: Obj, name: str, outside: list[str]) -> None:
        before = self._announced.get(name, set())
        new = [j for j in outside if j not in before]
        self._announced[name] = set(outside)
        if new:
            shown = "; ".join(new[:5]) + (f"; and {len(new) - 5} more" if len(new) > 5 else "")
            message = (
                f"{len(new)} live job(s) no longer fit this policy; they keep running (a policy change applies "
                f"to new submissions only): {shown}"
            )
            await self.kube.event(obj, names.REASON_JOBS_OUTSIDE_POLICY, message, warning=True)
