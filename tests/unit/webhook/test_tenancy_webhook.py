"""Tenancy at admission (webhook/validate.py with a TenantPolicy view), the rendered
matchConditions per tenancy mode, and the watch cache the webhook and operator read policies from."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.kube.cache import TenantCache, WatchCache
from slurm_bridge.rules import tenancy
from slurm_bridge.webhook.render import webhook_configurations
from slurm_bridge.webhook.validate import validate
from tests.unit.kubefakes import FakeKube
from tests.unit.webhook.test_webhook import CONFIG, SCHED, make_pod, make_request

Obj = dict[str, Any]
STRICT = CONFIG.model_copy(update={"tenancy": "strict"})
TEAM = {
    "metadata": {"name": "team-a", "generation": 1},
    "spec": {"namespaces": ["slurm"], "user": {"id": 2001}, "group": {"id": 2001}, "accounts": {"default": "team-a"},
             "limits": {"maxCPUs": 4}},
}  # fmt: skip


@dataclass
class FakeTenants:
    policies: list[Obj] = field(default_factory=lambda: [TEAM])
    synced: bool = True
    problem: str = "the first lists are not in yet"

    def index(self) -> tenancy.TenantIndex:
        return tenancy.TenantIndex.build(self.policies, [{"metadata": {"name": "slurm"}}])


def bridge_pod(annotations: Obj | None = None, cpu: str | None = None, **kw: Any) -> Obj:
    spec: Obj = {"schedulerName": SCHED, "schedulingGates": [{"name": names.SCHEDULING_GATE}]}
    if cpu is not None:
        spec["containers"] = [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]
    return make_pod(spec, annotations=annotations, **kw)


def decide(obj: Obj, config: Config = CONFIG, tenants: FakeTenants | None = None, **kw: Any) -> Any:
    return validate(make_request(obj, **kw), config, FakeTenants() if tenants is None else tenants)


# (case, config, tenants, pod annotations, cpu, allowed, message fragments)
POD_TABLE: list[tuple[str, Config, FakeTenants, Obj | None, str | None, bool, list[str]]] = [
    ("plain pod, policy", CONFIG, FakeTenants(), None, None, True, []),
    ("the tenant's own values", CONFIG, FakeTenants(), {names.ANN_ACCOUNT: "team-a", names.ANN_USER_ID: "2001"},
     None, True, []),
    ("another team's account", CONFIG, FakeTenants(), {names.ANN_ACCOUNT: "team-b"}, None, False,
     [names.ANN_ACCOUNT, "'team-b'", "TenantPolicy team-a", "allowed: team-a"]),
    ("another uid", CONFIG, FakeTenants(), {names.ANN_USER_ID: "0"}, None, False,
     [names.ANN_USER_ID, "'0'", "only the tenant's user 2001"]),
    ("CPUs over the cap", CONFIG, FakeTenants(), None, "6", False, ["cpus: '6 CPUs'", "at most 4"]),
    ("open, no policy: anything goes", CONFIG, FakeTenants([]), {names.ANN_USER_ID: "0"}, None, True, []),
    ("strict, no policy: refused", STRICT, FakeTenants([]), None, None, False,
     ["namespace slurm is selected by no TenantPolicy", "strict"]),
    ("strict, policy: fine", STRICT, FakeTenants(), None, None, True, []),
    ("not synced, plain pod, open", CONFIG, FakeTenants(synced=False), None, None, False,
     ["has not read the TenantPolicies yet"]),
    ("not synced, annotated", CONFIG, FakeTenants(synced=False), {names.ANN_ACCOUNT: "team-a"}, None, False,
     ["has not read the TenantPolicies yet", "try again"]),
    ("two policies", CONFIG, FakeTenants([TEAM, {**TEAM, "metadata": {"name": "team-z"}}]), None, None, False,
     ["more than one TenantPolicy (team-a, team-z)"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("config", "tenants", "annotations", "cpu", "allowed", "fragments"),
    [r[1:] for r in POD_TABLE],
    ids=[r[0] for r in POD_TABLE],
)
def test_pod_admission_decision_table(
    config: Config, tenants: FakeTenants, annotations: Obj | None, cpu: str | None, allowed: bool, fragments: list[str]
) -> None:
    d = decide(bridge_pod(annotations, cpu), config, tenants)
    assert d.allowed is allowed, d.message
    for fragment in fragments:
        assert fragment in d.message
    if not allowed:
        assert d.code == 403 and d.reason == "Forbidden"


def test_without_a_tenant_view_nothing_changes() -> None:
    assert validate(make_request(bridge_pod({names.ANN_USER_ID: "0"})), STRICT).allowed


def test_a_pod_of_another_scheduler_is_not_the_policys() -> None:
    other = make_pod({"schedulerName": "default-scheduler"}, annotations={names.ANN_ACCOUNT: "team-b"})
    assert decide(other, STRICT, FakeTenants([])).allowed


def test_an_update_that_does_not_touch_the_slurm_annotations_is_not_checked_again() -> None:
    pod = bridge_pod({names.ANN_ACCOUNT: "team-b"})
    changed = bridge_pod({names.ANN_ACCOUNT: "team-b", "other": "x"})
    assert decide(changed, operation="UPDATE", old=pod).allowed


def test_a_workload_outside_the_policy_is_refused_and_the_message_names_the_key() -> None:
    template = {"metadata": {"annotations": {names.ANN_QOS: "x"}}, "spec": {"schedulerName": SCHED,
                "containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}}  # fmt: skip
    job: Obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "slurm",
                "annotations": {names.ANN_ACCOUNT: "team-b"}}, "spec": {"template": template}}  # fmt: skip
    d = decide(job, group="batch", kind="Job")
    assert not d.allowed and d.code == 403
    assert f"{names.ANN_ACCOUNT}: 'team-b'" in d.message
    fine = {**job, "metadata": {**job["metadata"], "annotations": {names.ANN_ACCOUNT: "team-a"}}}
    assert decide(fine, group="batch", kind="Job").allowed


@pytest.mark.parametrize(("mode", "skips_plain_pods"), [("open", True), ("strict", False)])
def test_plain_pods_skip_validation_only_while_tenancy_is_open(mode: str, skips_plain_pods: bool) -> None:
    config = CONFIG.model_copy(update={"tenancy": mode})
    _, validating = webhook_configurations(config, bundle="Y2E=", url="https://127.0.0.1:9443")
    conditions = {c["name"] for c in validating["webhooks"][0].get("matchConditions", [])}
    assert ("something-to-check" in conditions) is skips_plain_pods
    assert "not-the-bridge" in conditions


def test_the_tenancy_key_is_validated() -> None:
    from slurm_bridge.core.config import ConfigError, parse_config

    assert parse_config({"tenancy": "strict"}).tenancy == "strict"
    assert parse_config({}).tenancy == "open"
    with pytest.raises(ConfigError, match="tenancy"):
        parse_config({"tenancy": "closed"})


# ---- the watch cache ---------------------------------------------------------------------------


async def _run_until_synced(cache: WatchCache) -> asyncio.Task[None]:
    task = asyncio.create_task(cache.run())
    await asyncio.wait_for(cache.synced.wait(), 5)
    await asyncio.sleep(0.05)
    return task


async def test_the_cache_lists_in_pages_then_follows_the_watch() -> None:
    page1 = {"metadata": {"continue": "c", "resourceVersion": "1"}, "items": [{"metadata": {"name": "a"}}]}
    page2 = {"metadata": {"resourceVersion": "2"}, "items": [{"metadata": {"name": "b"}}]}
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": "c", "resourceVersion": "3"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "4"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}},
    ]
    changes: list[str] = []
    cache = WatchCache(FakeKube(pages=[page1, page2], watch_events=events), "/x", "things",
                       on_change=lambda name, _: changes.append(name))  # fmt: skip
    task = await _run_until_synced(cache)
    try:
        assert sorted(cache.objects) == ["b", "c"]
        assert changes[:2] == ["a", "b"] or sorted(changes[:2]) == ["a", "b"]
        assert changes[2:] == ["c", "a"]
    finally:
        task.cancel()


async def test_a_missing_crd_means_no_policy_and_is_synced() -> None:
    cache = WatchCache(FakeKube(missing=True), "/x", "TenantPolicies", missing_ok=True)
    task = await _run_until_synced(cache)
    try:
        assert cache.objects == {} and cache.synced.is_set()
    finally:
        task.cancel()


async def test_without_credentials_the_tenant_cache_never_syncs_and_says_why() -> None:
    cache = TenantCache(None, unavailable="no Kubernetes credentials")
    cache.start()
    assert not cache.synced and cache.problem == "no Kubernetes credentials"
    await cache.stop()


async def test_a_namespace_created_a_moment_ago_is_read_once() -> None:
    fresh = {"metadata": {"name": "fresh", "labels": {"team": "a"}}}
    cache = TenantCache(FakeKube({"/api/v1/namespaces/fresh": fresh}))
    cache.namespaces.synced.set()
    await cache.ensure_namespace("fresh")
    assert cache.index().labels("fresh") == {"team": "a"}
