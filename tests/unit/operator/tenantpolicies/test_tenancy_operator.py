"""Tenancy in the operator: the submit decision with a policy, Slurm's association refusals, the
Slurm identity in status, the TenantPolicy status and the metrics by account (no servers)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from slurm_bridge import names
from slurm_bridge.core import metrics
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs import lifecycle as lc
from slurm_bridge.operator.placeholderjobs.decisions import plan as pl
from slurm_bridge.operator.placeholderjobs.decisions.allocation import allocation
from slurm_bridge.operator.placeholderjobs.decisions.inputs import TENANCY_WAIT_SECONDS
from slurm_bridge.operator.placeholderjobs.decisions.phjstatus import rejected_status, submitted_status
from slurm_bridge.operator.tenantpolicies import controller as tn
from slurm_bridge.rules import tenancy
from slurm_bridge.slurm.client import SlurmClient
from slurm_bridge.slurm.errors import SlurmError, SlurmErrorDetail
from slurm_bridge.slurm.models import JobInfo, JobRequest, JobSettings
from slurm_bridge.slurm.versions import codec_for
from tests.unit.operator.placeholderjobs.test_lifecycle import NOW, phj, pod, slurm_side
from tests.unit.situations import decide_in

Obj = dict[str, Any]
POLICY = tenancy.TenantPolicy.from_object({
    "metadata": {"name": "team-a", "generation": 2},
    "spec": {"namespaces": ["ns"], "user": {"name": "alice"}, "group": {"id": 2001}, "accounts": {"default": "team-a"},
             "qos": {"default": "team-a-qos", "allowed": ["team-a-qos", "normal"]}},
})  # fmt: skip


def with_policy(mode: tenancy.Mode = "open", policy: tenancy.TenantPolicy | None = POLICY) -> lc.Tenancy:
    return lambda request: tenancy.verdict(tenancy.Match(policy), "ns", request, mode)


def decide(obj: Obj, members: dict[str, Obj | None], policy: lc.Tenancy | None, state: str = "vanished") -> pl.Plan:
    job_id = None if state == "vanished" else 7
    # What the shell reads when the spec changed (what the job asks for now, the partitions).
    settings = JobSettings(job_id=7) if job_id is not None else None
    return decide_in(
        PlaceholderJob.parse(obj),
        slurm_side(state, job_id=job_id),
        members,
        NOW,
        scheduler="s",
        tenancy=policy,
        settings=settings,
        partitions={},
    )


# ---- submit ----------------------------------------------------------------------------------------
def test_the_tenant_defaults_go_into_the_submitted_request() -> None:
    plan = decide(phj(None, job_id=None), {"p": pod("gated")}, with_policy())
    (submit,) = plan.actions
    assert isinstance(submit, pl.Submit)
    assert (submit.request.user_name, submit.request.account, submit.request.qos) == ("alice", "team-a", "team-a-qos")


def test_without_a_policy_in_open_mode_the_request_is_unchanged() -> None:
    obj = phj(None, job_id=None)
    obj["spec"]["slurm"] = {"nodes": 1, "userId": 0, "account": "anything"}
    (submit,) = decide(obj, {"p": pod("gated")}, with_policy("open", None)).actions
    assert isinstance(submit, pl.Submit) and submit.request.user_id == 0 and submit.request.account == "anything"


@pytest.mark.parametrize(
    ("slurm", "mode", "policy", "reason", "fragment"),
    [
        ({"nodes": 1, "userId": 0}, "open", POLICY, names.REASON_TENANT_POLICY_VIOLATION, names.ANN_USER_ID),
        ({"nodes": 1, "account": "team-b"}, "open", POLICY, names.REASON_TENANT_POLICY_VIOLATION, "team-b"),
        ({"nodes": 1, "qos": "high"}, "strict", POLICY, names.REASON_TENANT_POLICY_VIOLATION, names.ANN_QOS),
        ({"nodes": 1}, "strict", None, names.REASON_NO_TENANT_POLICY, "namespace ns is selected by no TenantPolicy"),
    ],
)
def test_a_placeholderjob_outside_the_policy_fails_and_nothing_is_submitted(
    slurm: Obj, mode: tenancy.Mode, policy: tenancy.TenantPolicy | None, reason: str, fragment: str
) -> None:
    """A trusted user's PlaceholderJob (no webhook) is refused by the operator: Failed, a Warning
    Event, the pods ended with the reason, no Submit."""
    obj = phj(None, job_id=None)
    obj["spec"]["slurm"] = slurm
    plan = decide(obj, {"p": pod("gated")}, with_policy(mode, policy))
    assert not any(isinstance(a, pl.Submit | pl.Fence) for a in plan.actions)
    status, event, end = plan.actions
    assert isinstance(status, pl.WriteStatus) and status.status.phase == names.PHASE_FAILED
    assert status.status.reason == reason and fragment in (status.status.message or "")
    submitted = next(c for c in status.status.conditions or [] if c.type == names.COND_SUBMITTED)
    assert submitted.status == "False" and submitted.reason == reason
    assert isinstance(event, pl.Event) and event.warning and event.reason == reason and fragment in event.message
    assert isinstance(end, pl.EndPods) and end.pods == ("p",) and end.reason == reason


def test_a_conflict_names_both_policies() -> None:
    def conflicted(request: JobRequest) -> tenancy.Verdict:
        return tenancy.verdict(tenancy.Match(None, ("a", "b")), "ns", request, "open")

    status = decide(phj(None, job_id=None), {"p": pod("gated")}, conflicted).actions[0]
    assert isinstance(status, pl.WriteStatus) and status.status.reason == names.REASON_TENANT_POLICY_CONFLICT
    assert "(a, b)" in (status.status.message or "")


def test_the_submit_waits_while_the_policies_are_not_read() -> None:
    def waiting(request: JobRequest) -> tenancy.Verdict:
        return tenancy.Verdict(request, waiting="not synced")

    assert decide(phj(None, job_id=None), {"p": pod("gated")}, waiting) == pl.Plan(requeue=TENANCY_WAIT_SECONDS)


def test_a_running_job_is_never_touched_by_a_policy() -> None:
    """A policy change applies to new submissions: a running job's plan asks nothing of the policy."""

    def fail(_: JobRequest) -> tenancy.Verdict:
        raise AssertionError("the policy was asked about a running job")

    plan = decide(phj("Running"), {"p": pod("running")}, fail, state="RUNNING")
    assert not any(isinstance(a, pl.Cancel | pl.EndPods) for a in plan.actions)


def test_a_spec_change_outside_the_policy_is_not_applied_to_the_pending_job() -> None:
    obj = phj("Pending")
    obj["metadata"]["generation"] = 2
    obj["spec"]["slurm"] = {"nodes": 1, "account": "team-b"}
    plan = decide(obj, {"p": pod("gated")}, with_policy(), state="PENDING")
    assert not any(isinstance(a, pl.UpdateJob) for a in plan.actions)
    assert any(isinstance(a, pl.Event) and a.reason == names.REASON_TENANT_POLICY_VIOLATION for a in plan.actions)
    obj["spec"]["slurm"] = {"nodes": 1, "account": "team-a"}
    (update,) = [a for a in decide(obj, {"p": pod("gated")}, with_policy(), state="PENDING").actions
                 if isinstance(a, pl.UpdateJob)]  # fmt: skip
    assert update.request.account == "team-a"


# ---- Slurm's association refusals ----------------------------------------------------------------
ASSOC = SlurmError("POST job/submit: Slurm refused the request", status=500, errors=[
    SlurmErrorDetail("Invalid account or account/partition combination specified", 2045, "", "job submit")
])  # fmt: skip


@pytest.mark.parametrize(
    ("error", "association"),
    [
        (ASSOC, True),
        (SlurmError("x", errors=[SlurmErrorDetail("Invalid qos specification", 2066)]), True),
        (SlurmError("x", errors=[SlurmErrorDetail("Invalid wckey specification", 2057)]), True),
        (SlurmError("x", errors=[SlurmErrorDetail("Job violates accounting/QOS policy (job submit limit)", 0)]), True),
        (SlurmError("x", errors=[SlurmErrorDetail("Requested node configuration is not available", 2014)]), False),
        (SlurmError("x", errors=[SlurmErrorDetail("Invalid partition name specified", 2000)]), False),
    ],
)
def test_association_refusals_are_recognised(error: SlurmError, association: bool) -> None:
    assert error.is_association_refusal is association


def test_an_association_refusal_is_retried_once_then_fails_with_slurms_message() -> None:
    obj = phj(None, job_id=None)
    first = rejected_status(PlaceholderJob.parse(obj), f"Slurm refused the job: {ASSOC}", NOW.wall, association=True)
    assert first.phase == names.PHASE_PENDING and first.reason == "SubmitRejected"
    obj["status"] = first.dump()
    # The first refusal waits SUBMIT_RETRY_SECONDS, as any refusal (one retry).
    assert (
        decide_in(
            PlaceholderJob.parse(obj), slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s"
        ).actions
        == ()
    )
    second = rejected_status(PlaceholderJob.parse(obj), f"Slurm refused the job: {ASSOC}", NOW.wall, association=True)
    assert second.phase == names.PHASE_FAILED and second.reason == names.REASON_SLURM_ASSOCIATION_REJECTED
    assert "Invalid account or account/partition combination specified" in (second.message or "")
    obj["status"] = second.dump()
    # Failed: the next reconcile ends the pods with that reason and submits nothing.
    plan = decide_in(
        PlaceholderJob.parse(obj), slurm_side("vanished", job_id=None), {"p": pod("gated")}, NOW, scheduler="s"
    )
    assert plan.actions == (pl.EndPods(("p",), names.REASON_SLURM_ASSOCIATION_REJECTED, second.message or ""),)


def test_other_refusals_keep_retrying() -> None:
    obj = phj(None, job_id=None)
    for _ in range(3):
        obj["status"] = rejected_status(
            PlaceholderJob.parse(obj), "Slurm refused the job: busy", NOW.wall, association=False
        ).dump()
        assert PlaceholderJob.parse(obj).status.phase == names.PHASE_PENDING


# ---- identity in status ----------------------------------------------------------------------------
def test_the_slurm_user_and_account_are_written_with_the_job_id() -> None:
    job = JobInfo(job_id=7, states=("PENDING",), user_name="alice", account="team-a")
    status = submitted_status(PlaceholderJob.parse(phj(None, job_id=None)), 7, job, JobRequest(), NOW.wall)
    assert (status.job_id, status.slurm_user, status.account) == (7, "alice", "team-a")
    assert status.dump()["slurmUser"] == "alice"
    running = JobInfo(job_id=7, states=("RUNNING",), nodes=("n1",), user_name="alice", account="team-a")
    plan = allocation(PlaceholderJob.parse(phj("Pending")), {"p": pod("gated")}, running, scheduler="s", now=NOW)
    write = next(a for a in plan.actions if isinstance(a, pl.WriteStatus))
    assert (write.status.slurm_user, write.status.account) == ("alice", "team-a")


def test_the_codec_reads_user_and_account_and_sends_names() -> None:
    codec = codec_for("v0.0.44")
    info = codec.decode_job({"job_id": 3, "job_state": ["RUNNING"], "user_name": "alice", "account": "team-a"})
    assert (info.user_name, info.account) == ("alice", "team-a")
    body = codec.submit_body(JobRequest(user_name="alice", group_name="team-a"), name="n", admin_comment="c")["job"]
    assert (body["user_id"], body["group_id"]) == ("alice", "team-a")
    body = codec.submit_body(JobRequest(user_id=2001), name="n", admin_comment="c")["job"]
    assert body["user_id"] == "2001" and "group_id" not in body
    assert "user_id" not in codec.update_body(JobRequest(user_name="alice"))


async def test_accounts_and_qos_come_from_the_slurmdb_endpoints(tmp_path: Any) -> None:
    token = tmp_path / "jwt"
    token.write_text("t")
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path.endswith("/accounts/"):
            return httpx.Response(200, json={"accounts": [{"name": "team-a"}, {"name": "root"}], "errors": []})
        return httpx.Response(200, json={"qos": [{"name": "normal"}], "errors": []})

    async with SlurmClient("http://slurm", token, api_version="v0.0.44", transport=httpx.MockTransport(handler)) as c:
        assert await c.list_accounts() == ["team-a", "root"]
        assert await c.list_qos() == ["normal"]
        assert seen == ["/slurmdb/v0.0.44/accounts/", "/slurmdb/v0.0.44/qos/"]
        assert "GET /slurmdb/accounts/" in c.requests_by_kind


async def test_no_slurmdb_endpoints_means_accounting_cannot_be_checked(tmp_path: Any) -> None:
    token = tmp_path / "jwt"
    token.write_text("t")
    transport = httpx.MockTransport(lambda r: httpx.Response(404, text="Unable to find path"))
    async with SlurmClient("http://slurm", token, api_version="v0.0.44", transport=transport) as c:
        assert await c.list_accounts() is None


# ---- TenantPolicy status ---------------------------------------------------------------------------
def _index(*policies: tenancy.TenantPolicy, namespaces: dict[str, dict[str, str]] | None = None) -> tenancy.TenantIndex:
    return tenancy.TenantIndex(list(policies), namespaces if namespaces is not None else {"ns": {}, "other": {}})


KNOWN = tn.SlurmNames(frozenset({"team-a"}), frozenset({"team-a-qos", "normal"}), "")


def _cond(status: Obj, ctype: str) -> Obj:
    found: Obj = next(c for c in status["conditions"] if c["type"] == ctype)
    return found


@pytest.mark.parametrize(
    ("slurm", "expected"),
    [
        (KNOWN, ("True", names.TP_REASON_ACCOUNTS_FOUND, "Slurm knows team-a")),
        (tn.SlurmNames(frozenset({"x"}), frozenset({"team-a-qos", "normal"}), ""),
         ("False", names.TP_REASON_UNKNOWN_ACCOUNT, "account team-a does not exist in Slurm")),
        (tn.SlurmNames(frozenset({"team-a"}), frozenset({"normal"}), ""),
         ("False", names.TP_REASON_UNKNOWN_QOS, "QOS team-a-qos does not exist in Slurm")),
        (tn.SlurmNames(problem="slurmrestd serves no slurmdb endpoints"),
         ("Unknown", names.TP_REASON_ACCOUNTING_UNAVAILABLE, "accounting cannot be checked")),
    ],
)  # fmt: skip
def test_accounts_valid_condition(slurm: tn.SlurmNames, expected: tuple[str, str, str]) -> None:
    view = tn.desired_status(POLICY, {}, _index(POLICY), slurm, [])
    cond = _cond(view.status, names.TP_COND_ACCOUNTS_VALID)
    assert (cond["status"], cond["reason"]) == expected[:2] and expected[2] in cond["message"]
    assert cond["observedGeneration"] == 2


def test_ready_counts_namespaces_and_reports_conflicts_on_both_policies() -> None:
    view = tn.desired_status(POLICY, {}, _index(POLICY), KNOWN, [])
    assert view.status["namespaceCount"] == 1 and view.status["namespaces"] == ["ns"] and view.status["user"] == "alice"
    assert _cond(view.status, names.TP_COND_READY)["status"] == "True"
    other = tenancy.TenantPolicy.from_object({"metadata": {"name": "zeta"}, "spec": {"namespaces": ["ns", "other"]}})
    index = _index(POLICY, other)
    for p, also in ((POLICY, "zeta"), (other, "team-a")):
        ready = _cond(tn.desired_status(p, {}, index, KNOWN, []).status, names.TP_COND_READY)
        assert ready["status"] == "False" and ready["reason"] == names.TP_REASON_CONFLICT
        assert f"ns (also {also})" in ready["message"]


def test_running_jobs_outside_a_changed_policy_are_listed_not_cancelled() -> None:
    live = phj("Running", account="team-b", slurmUser="alice")
    live["metadata"]["namespace"] = "ns"
    fits = phj("Running", account="team-a", slurmUser="alice")
    fits["metadata"].update(namespace="ns", name="fits")
    view = tn.desired_status(POLICY, {}, _index(POLICY), KNOWN, [live, fits])
    assert view.status["jobsOutsidePolicyCount"] == 1
    (line,) = view.status["jobsOutsidePolicy"]
    assert line.startswith("ns/phj (job 7): ") and "team-b" in line


def test_an_unchanged_status_is_not_written_again() -> None:
    view = tn.desired_status(POLICY, {}, _index(POLICY), KNOWN, [])
    again = tn.desired_status(POLICY, view.status, _index(POLICY), KNOWN, [])
    assert tn._comparable(again.status) == tn._comparable(view.status)


# ---- metrics ---------------------------------------------------------------------------------------
def test_jobs_and_cpus_by_account() -> None:
    running = phj("Running", account="team-a")
    running["spec"]["slurm"] = {"nodes": 2, "cpusPerTask": 4}
    running["status"]["assignments"] = [{"pod": "a", "node": "n1"}, {"pod": "b", "node": "n2"}]
    pending = phj("Pending", account="team-a")
    other = phj("Running", account="team-b")
    done = phj("Completed", account="team-b")
    families = {m.name: {s.labels["account"]: s.value for s in m.samples} for m in metrics.by_account(
        [running, pending, other, done])}  # fmt: skip
    assert families["slurm_bridge_jobs_by_account"] == {"team-a": 2, "team-b": 1}
    assert families["slurm_bridge_allocated_cpus_by_account"] == {"team-a": 8, "team-b": 1}


def test_a_heterogeneous_job_is_judged_and_counted_component_by_component() -> None:
    """A CompositePodGroup's job: its components' requests and sizes, not only component 0's."""
    het = phj("Running", account="team-a", slurmUser="alice")
    het["metadata"]["namespace"] = "ns"
    het["spec"]["components"] = [
        {"podGroup": "a", "minMember": 1, "pods": ["a0"], "slurm": {"nodes": 1, "cpusPerTask": 2}},
        {"podGroup": "b", "minMember": 2, "pods": ["b0", "b1"],
         "slurm": {"nodes": 2, "cpusPerTask": 4, "qos": "not-allowed"}},
    ]  # fmt: skip
    het["spec"]["slurm"] = het["spec"]["components"][0]["slurm"]
    het["status"]["assignments"] = [{"pod": "a0", "node": "n1", "offset": 0}, {"pod": "b0", "node": "n2", "offset": 1},
                                    {"pod": "b1", "node": "n3", "offset": 1}]  # fmt: skip
    families = {m.name: {s.labels["account"]: s.value for s in m.samples} for m in metrics.by_account([het])}
    assert families["slurm_bridge_allocated_cpus_by_account"] == {"team-a": 1 * 2 + 2 * 4}
    view = tn.desired_status(POLICY, {}, _index(POLICY), KNOWN, [het])
    (line,) = view.status["jobsOutsidePolicy"]
    assert line.startswith("ns/phj (job 7): ") and "not-allowed" in line, line
