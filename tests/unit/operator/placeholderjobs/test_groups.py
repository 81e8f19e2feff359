"""Pod -> group resolution: owner chains, the depth limit, unreadable and missing owners, gang
sizes and names, and the membership rules of a gang (all without a server: a dict of objects
stands in for the API)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from slurm_bridge import names
from slurm_bridge.core.config import Config
from slurm_bridge.core.kubeformats import MAX_NAME_LENGTH
from slurm_bridge.kube.placeholderjob import PlaceholderJob
from slurm_bridge.operator.placeholderjobs.grouping.gangjoin import Join, plan_join
from slurm_bridge.operator.placeholderjobs.grouping.groups import (
    Group,
    GroupError,
    jobset_size,
    lws_size,
    phj_name,
    podgroup_size,
    same_group,
)
from slurm_bridge.operator.placeholderjobs.grouping.resolver import GroupResolver
from slurm_bridge.rules.translate import job_request
from tests.unit.kubefakes import FakeKube

pytestmark = pytest.mark.unit

P = names.SLURMJOB_PREFIX
NS = "ns"
Obj = dict[str, Any]

# --- a fake API -------------------------------------------------------------------------------

_PATHS = {
    ("v1", "Pod"): "/api/v1/namespaces/ns/pods/",
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/ns/jobs/",
    ("batch/v1", "CronJob"): "/apis/batch/v1/namespaces/ns/cronjobs/",
    ("apps/v1", "ReplicaSet"): "/apis/apps/v1/namespaces/ns/replicasets/",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/ns/deployments/",
    ("apps/v1", "StatefulSet"): "/apis/apps/v1/namespaces/ns/statefulsets/",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets/",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): (
        "/apis/leaderworkerset.x-k8s.io/v1/namespaces/ns/leaderworkersets/"
    ),
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/",
    ("example.com/v1", "Trainer"): "/apis/example.com/v1/namespaces/ns/trainers/",
}


def obj(
    api_version: str,
    kind: str,
    name: str,
    *,
    owner: Obj | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    spec: Obj | None = None,
    uid: str | None = None,
    extra_owners: list[Obj] | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": NS, "uid": uid or f"uid-{kind}-{name}"}
    refs = list(extra_owners or [])
    if owner is not None:
        refs.append(ref(owner))
    if refs:
        meta["ownerReferences"] = refs
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}


def ref(o: Obj, controller: bool = True) -> Obj:
    m = o["metadata"]
    return {
        "apiVersion": o["apiVersion"],
        "kind": o["kind"],
        "name": m["name"],
        "uid": m["uid"],
        "controller": controller,
    }


def path_of(o: Obj) -> str:
    return _PATHS[(o["apiVersion"], o["kind"])] + str(o["metadata"]["name"])


def api_of(*objs: Obj, fail: dict[str, int] | None = None, docs: dict[str, Obj] | None = None) -> FakeKube:
    """The API server holding ``objs`` at their paths."""
    return FakeKube({path_of(o): o for o in objs}, fail=fail, docs=docs)


def pod(name: str = "p", **kw: Any) -> Obj:
    return obj("v1", "Pod", name, **kw)


# --- owner chains -----------------------------------------------------------------------------

JOB = obj("batch/v1", "Job", "train", annotations={P + "timelimit": "90", "other/key": "x"},
          spec={"activeDeadlineSeconds": 3601})  # fmt: skip
CRON = obj("batch/v1", "CronJob", "nightly", annotations={P + "account": "cron"})
CRON_JOB = obj("batch/v1", "Job", "nightly-1", owner=CRON, annotations={P + "account": "job"})
DEPLOY = obj("apps/v1", "Deployment", "web", annotations={P + "qos": "deploy"})
RS = obj("apps/v1", "ReplicaSet", "web-1", owner=DEPLOY, annotations={P + "qos": "rs"})
JOBSET = obj(
    "jobset.x-k8s.io/v1alpha2",
    "JobSet",
    "js",
    annotations={P + "partition": "gpu", P + "timelimit": "30"},
    spec={"replicatedJobs": [
        {"name": "a", "replicas": 1, "template": {"spec": {"parallelism": 2}}},
        {"name": "b", "replicas": 1, "template": {"spec": {"parallelism": 2}}},
    ]},
)  # fmt: skip
JOBSET_JOB = obj("batch/v1", "Job", "js-a-0", owner=JOBSET, annotations={P + "partition": "job-level"})
LWS_OBJ = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lws", annotations={P + "qos": "high"},
              spec={"leaderWorkerTemplate": {"size": 3}})  # fmt: skip
LEADER_STS = obj("apps/v1", "StatefulSet", "lws", owner=LWS_OBJ)
LWS_LABELS = {names.LABEL_LWS_NAME: "lws", names.LABEL_LWS_GROUP_INDEX: "1"}
LEADER = obj("v1", "Pod", "lws-1", owner=LEADER_STS, labels=LWS_LABELS)
WORKER_STS = obj("apps/v1", "StatefulSet", "lws-1", owner=LEADER)
PODGROUP = obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "pg", annotations={P + "account": "pg"},
               spec={"minMember": 2})  # fmt: skip
TRAINER = obj("example.com/v1", "Trainer", "t1", annotations={P + "wckey": "trainer"})
TRAINER_DOC = {"/apis/example.com/v1": {"resources": [
    {"name": "trainers/status", "kind": "Trainer"}, {"name": "trainers", "kind": "Trainer"},
]}}  # fmt: skip

# (case, the pod, the API, expected: (name, min_member, gang, source kind/name, annotations, derived))
RESOLVE_CASES: list[tuple[str, Obj, Callable[[], FakeKube], tuple[Any, ...]]] = [
    ("bare pod: its own group and its own annotations",
     pod("p", annotations={P + "qos": "mine", "x/y": "z"}), api_of,
     ("p", 1, False, ("Pod", "p"), {P + "qos": "mine"}, {})),
    ("batch Job pod: one group per pod, options from the Job, deadline rounded up to minutes",
     pod("train-abc", owner=JOB, annotations={P + "timelimit": "5"}), lambda: api_of(JOB),
     ("train-abc", 1, False, ("Job", "train"), {P + "timelimit": "90"}, {"time_limit_minutes": 61})),
    ("Job under an unrecognised CronJob: the Job stays the root",
     pod("n-1", owner=CRON_JOB), lambda: api_of(CRON_JOB, CRON),
     ("n-1", 1, False, ("Job", "nightly-1"), {P + "account": "job"}, {})),
    ("no recognised workload: options from the highest readable controller",
     pod("web-1-x", owner=RS, annotations={P + "qos": "pod"}), lambda: api_of(RS, DEPLOY),
     ("web-1-x", 1, False, ("Deployment", "web"), {P + "qos": "deploy"}, {})),
    ("forbidden unsupported owner above a readable one: the walk stops below it",
     pod("web-1-x", owner=RS), lambda: api_of(RS, DEPLOY, fail={path_of(DEPLOY): 403}),
     ("web-1-x", 1, False, ("ReplicaSet", "web-1"), {P + "qos": "rs"}, {})),
    ("unknown owner kind: its resource found by discovery",
     pod("t1-0", owner=TRAINER), lambda: api_of(TRAINER, docs=TRAINER_DOC),
     ("t1-0", 1, False, ("Trainer", "t1"), {P + "wckey": "trainer"}, {})),
    ("JobSet: one gang named after it, sized over every replicated Job, options from the JobSet only",
     pod("js-a-0-0-x", owner=JOBSET_JOB, annotations={P + "partition": "pod-level"}),
     lambda: api_of(JOBSET_JOB, JOBSET),
     ("jobset-js", 4, True, ("JobSet", "js"), {P + "partition": "gpu", P + "timelimit": "30"}, {})),
    ("LeaderWorkerSet leader: one gang per group index",
     LEADER, lambda: api_of(LEADER_STS, LWS_OBJ),
     ("lws-lws-1", 3, True, ("LeaderWorkerSet", "lws"), {P + "qos": "high"}, {})),
    ("LeaderWorkerSet worker: owned through its leader pod, same gang as the leader",
     pod("lws-1-1", owner=WORKER_STS, labels=LWS_LABELS), lambda: api_of(WORKER_STS, LEADER, LEADER_STS, LWS_OBJ),
     ("lws-lws-1", 3, True, ("LeaderWorkerSet", "lws"), {P + "qos": "high"}, {})),
    ("coscheduling PodGroup label: the PodGroup is the gang, whatever owns the pod",
     pod("w0", owner=JOB, labels={names.LABEL_POD_GROUP: "pg"}, annotations={P + "account": "pod"}),
     lambda: api_of(PODGROUP),
     ("podgroup-pg", 2, True, ("PodGroup", "pg"), {P + "account": "pg"}, {})),
    ("a non-controller ownerReference is not followed",
     pod("p", extra_owners=[ref(JOB, controller=False)]), api_of,
     ("p", 1, False, ("Pod", "p"), {}, {})),
]  # fmt: skip


@pytest.mark.parametrize(("case", "the_pod", "api", "expected"), RESOLVE_CASES, ids=[c[0] for c in RESOLVE_CASES])
async def test_resolve(case: str, the_pod: Obj, api: Callable[[], FakeKube], expected: tuple[Any, ...]) -> None:
    name, min_member, gang, (kind, source_name), annotations, derived = expected
    group = await GroupResolver(api().get).resolve(the_pod)
    assert (group.name, group.min_member, group.gang) == (name, min_member, gang)
    assert (group.source["kind"], group.source["name"]) == (kind, source_name)
    assert group.annotations == annotations
    assert group.derived == derived
    assert group.namespace == NS
    if gang:
        # The gang's PlaceholderJob is owned by the root workload, so garbage collection removes it.
        assert (group.owner["kind"], group.owner["name"], group.owner["uid"]) == (
            kind,
            source_name,
            group.source["uid"],
        )
    else:
        assert (group.owner["kind"], group.owner["name"]) == ("Pod", the_pod["metadata"]["name"])
    assert group.owner["blockOwnerDeletion"] is False


def _chain(length: int) -> tuple[Obj, list[Obj]]:
    """A pod under ``length`` ReplicaSets rs0 (its controller) .. rs<length-1> (the top)."""
    owners: list[Obj] = []
    top: Obj | None = None
    for i in reversed(range(length)):
        top = obj("apps/v1", "ReplicaSet", f"rs{i}", owner=top)
        owners.append(top)
    return pod("deep", owner=top), owners


LOOP_A = obj("apps/v1", "ReplicaSet", "a", uid="uid-a",
             extra_owners=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "uid-b",
                            "controller": True}])  # fmt: skip
LOOP_B = obj("apps/v1", "ReplicaSet", "b", uid="uid-b", owner=LOOP_A)

ERROR_CASES: list[tuple[str, Obj, Callable[[], FakeKube], str, str]] = [
    ("the pod's own controller is forbidden: no fallback (its direct owner must be readable)",
     pod("web-1-x", owner=RS), lambda: api_of(RS, fail={path_of(RS): 403}), "OwnerForbidden", "ReplicaSet ns/web-1"),
    ("a forbidden recognised workload is missing RBAC, not a reason to fall back",
     pod("js-a-0-0-x", owner=JOBSET_JOB), lambda: api_of(JOBSET_JOB, fail={path_of(JOBSET): 403}),
     "OwnerForbidden", "JobSet ns/js"),
    ("a missing owner fails (the garbage collector is about to remove the pod)",
     pod("train-abc", owner=JOB), api_of, "OwnerNotFound", "Job ns/train"),
    ("an owner recreated under the same name is not the pod's owner",
     pod("train-abc", owner=JOB), lambda: api_of(obj("batch/v1", "Job", "train", uid="other")),
     "OwnerNotFound", "Job ns/train"),
    ("another API error fails the resolution for now",
     pod("train-abc", owner=JOB), lambda: api_of(JOB, fail={path_of(JOB): 500}), "OwnerUnreadable", "500"),
    ("an owner kind the API server does not serve",
     pod("t1-0", owner=TRAINER), lambda: api_of(TRAINER), "OwnerKindNotServed", "Trainer (example.com/v1)"),
    ("an owner loop", pod("x", owner=LOOP_B), lambda: api_of(LOOP_A, LOOP_B), "OwnerChainLoop", "ReplicaSet ns/b"),
    ("PodGroup not (yet) created: the pod waits for it",
     pod("w0", labels={names.LABEL_POD_GROUP: "pg"}), api_of, "PodGroupNotFound", "PodGroup pg"),
    ("PodGroup unreadable", pod("w0", labels={names.LABEL_POD_GROUP: "pg"}),
     lambda: api_of(fail={path_of(PODGROUP): 403}), "PodGroupUnreadable", "403"),
    ("LeaderWorkerSet pod without its group index label",
     pod("lws-1", owner=LEADER_STS, labels={names.LABEL_LWS_NAME: "lws"}), lambda: api_of(LEADER_STS, LWS_OBJ),
     "LeaderWorkerSetGroupUnknown", names.LABEL_LWS_GROUP_INDEX),
]  # fmt: skip


@pytest.mark.parametrize(("case", "the_pod", "api", "reason", "detail"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
async def test_resolve_errors(case: str, the_pod: Obj, api: Callable[[], FakeKube], reason: str, detail: str) -> None:
    with pytest.raises(GroupError) as err:
        await GroupResolver(api().get).resolve(the_pod)
    assert err.value.reason == reason
    assert detail in err.value.message
    assert err.value.retry_after > 0


@pytest.mark.parametrize(("length", "max_depth", "ok"), [(3, 3, True), (4, 3, False), (1, 1, True), (2, 1, False)])
async def test_owner_depth_limit(length: int, max_depth: int, ok: bool) -> None:
    the_pod, owners = _chain(length)
    api = api_of(*owners)
    resolver = GroupResolver(api.get, max_depth=max_depth)
    if ok:
        group = await resolver.resolve(the_pod)
        assert group.source["name"] == f"rs{length - 1}"  # the top of the chain
        assert len(api.reads) == length
    else:
        with pytest.raises(GroupError) as err:
            await resolver.resolve(the_pod)
        assert err.value.reason == "OwnerChainTooDeep"
        assert f"longer than {max_depth}" in err.value.message
        assert len(api.reads) == max_depth  # never reads past the limit


async def test_default_depth_limit_matches_go_bridge() -> None:
    the_pod, owners = _chain(33)
    with pytest.raises(GroupError, match="longer than 32"):
        await GroupResolver(api_of(*owners).get).resolve(the_pod)


async def test_discovery_is_cached() -> None:
    api = api_of(TRAINER, docs=TRAINER_DOC)
    resolver = GroupResolver(api.get)
    await resolver.resolve(pod("t1-0", owner=TRAINER))
    await resolver.resolve(pod("t1-1", owner=TRAINER))
    assert api.reads.count("/apis/example.com/v1") == 1


async def test_podgroup_pod_needs_no_owner_walk() -> None:
    api = api_of(PODGROUP, JOB)
    await GroupResolver(api.get).resolve(pod("w0", owner=JOB, labels={names.LABEL_POD_GROUP: "pg"}))
    assert api.reads == [path_of(PODGROUP)]


# --- gang sizes, names, warnings --------------------------------------------------------------


def _rjob(replicas: Any = None, parallelism: Any = None, completions: Any = None) -> Obj:
    spec: Obj = {}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    r: Obj = {"name": "r", "template": {"spec": spec}}
    if replicas is not None:
        r["replicas"] = replicas
    return r


JOBSET_SIZES: list[tuple[str, list[Obj], int]] = [
    ("defaults: one Job of one pod", [_rjob()], 1),
    ("2 replicated Jobs x 2 pods", [_rjob(1, 2), _rjob(1, 2)], 4),
    ("replicas multiply parallelism", [_rjob(3, 2)], 6),
    ("completions cap parallelism", [_rjob(2, 4, 3)], 6),
    ("completions above parallelism do not add pods", [_rjob(1, 2, 10)], 2),
    ("a suspended-size Job (parallelism 0) adds none", [_rjob(1, 0), _rjob(1, 2)], 2),
    ("no pods at all still counts one", [_rjob(0, 2)], 1),
    ("garbage values fall back to defaults", [_rjob("x", True)], 1),
]


@pytest.mark.parametrize(("case", "rjobs", "size"), JOBSET_SIZES, ids=[c[0] for c in JOBSET_SIZES])
def test_jobset_size(case: str, rjobs: list[Obj], size: int) -> None:
    assert jobset_size({"spec": {"replicatedJobs": rjobs}}) == size


@pytest.mark.parametrize(
    ("spec", "size"), [({}, 1), ({"leaderWorkerTemplate": {}}, 1), ({"leaderWorkerTemplate": {"size": 4}}, 4)]
)
def test_lws_size(spec: Obj, size: int) -> None:
    assert lws_size({"spec": spec}) == size


@pytest.mark.parametrize(("spec", "size"), [({}, 1), ({"minMember": 0}, 1), ({"minMember": 5}, 5)])
def test_podgroup_size(spec: Obj, size: int) -> None:
    assert podgroup_size({"spec": spec}) == size


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (("jobset", "train"), "jobset-train"),
        (("lws", "serve", "12"), "lws-serve-12"),
        (("podgroup", "a" * 244), "podgroup-" + "a" * 244),  # exactly 253
    ],
)
def test_phj_name_short(parts: tuple[str, ...], expected: str) -> None:
    assert phj_name(*parts) == expected


@pytest.mark.parametrize("long_name", ["a" * 253, "a.b-" * 63 + "c", "x" * 245])
def test_phj_name_long_is_shortened_validly_and_uniquely(long_name: str) -> None:
    name = phj_name("podgroup", long_name)
    assert len(name) <= MAX_NAME_LENGTH
    assert _DNS_SUBDOMAIN.match(name), name
    assert name != phj_name("podgroup", long_name + "z")
    assert name == phj_name("podgroup", long_name)  # stable


async def test_workload_settings_that_defeat_a_gang_are_reported() -> None:
    after = {**_rjob(1, 1), "dependsOn": [{"name": "r", "status": "Ready"}]}
    spec = {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [_rjob(1, 1), after]}
    js = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "ordered", spec=spec)
    job = obj("batch/v1", "Job", "ordered-r-0", owner=js)
    group = await GroupResolver(api_of(js, job).get).resolve(pod("x", owner=job))
    assert len(group.warnings) == 2
    assert "InOrder" in group.warnings[0] and "dependsOn" in group.warnings[1]
    exclusive_key = "alpha.jobset.sigs.k8s.io/exclusive-topology"
    marked = {**_rjob(1, 2), "template": {"metadata": {"annotations": {exclusive_key: "z"}}}}
    exclusive = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "x", spec={"replicatedJobs": [marked]})
    job = obj("batch/v1", "Job", "x-r-0", owner=exclusive)
    group = await GroupResolver(api_of(exclusive, job).get).resolve(pod("y", owner=job))
    assert len(group.warnings) == 1 and "exclusive-topology" in group.warnings[0]
    lws = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "lr", spec={"startupPolicy": "LeaderReady"})
    sts = obj("apps/v1", "StatefulSet", "lr", owner=lws)
    leader = pod("lr-0", owner=sts, labels={names.LABEL_LWS_GROUP_INDEX: "0"})
    group = await GroupResolver(api_of(sts, lws).get).resolve(leader)
    assert group.warnings and "LeaderReady" in group.warnings[0]
    lws["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}
    group = await GroupResolver(api_of(sts, lws).get).resolve(leader)
    assert len(group.warnings) == 2 and "exclusive-topology" in group.warnings[1]
    assert (await GroupResolver(api_of(LEADER_STS, LWS_OBJ).get).resolve(LEADER)).warnings == ()


def test_derived_for_sizes_a_gang_for_every_member() -> None:
    gang = Group("g", NS, 3, {}, {"kind": "JobSet", "uid": "u"}, derived={"time_limit_minutes": 5}, gang=True)
    assert gang.derived_for(1) == {"time_limit_minutes": 5, "nodes": 3}
    assert gang.derived_for(4) == {"time_limit_minutes": 5, "nodes": 4}
    single = Group("p", NS, 1, {}, {"kind": "Pod", "uid": "u"}, derived={"time_limit_minutes": 5})
    assert single.derived_for(1) == {"time_limit_minutes": 5}


def is_gang(phj: dict[str, Any]) -> bool:
    """PlaceholderJob.is_gang of a PlaceholderJob with this spec (and no pods yet)."""
    return PlaceholderJob.parse({"spec": {"pods": [], "slurm": {}, **phj["spec"]}}).is_gang()


def test_is_gang_and_same_group() -> None:
    gang_phj = {"spec": {"group": {"kind": "JobSet", "name": "js", "uid": "u1"}}}
    assert is_gang(gang_phj)
    assert not is_gang({"spec": {"group": {"kind": "Job", "name": "j", "uid": "u"}}})
    assert not is_gang({"spec": {}})
    group = Group("jobset-js", NS, 2, {}, {"kind": "JobSet", "name": "js", "uid": "u1"}, gang=True)
    assert same_group(gang_phj, group)
    assert not same_group({"spec": {"group": {"kind": "JobSet", "name": "js", "uid": "old"}}}, group)
    assert not same_group({"spec": {"group": {"kind": "Pod", "name": "jobset-js", "uid": "u1"}}}, group)


# --- joining a gang ---------------------------------------------------------------------------

JOIN_CASES: list[tuple[str, dict[str, Any], Join]] = [
    ("a recorded member", dict(pods=["a", "b"], uids={"a": "1", "b": "2"}, pod="b", uid="2"), Join("member")),
    ("a member of a PlaceholderJob written before uids were recorded",
     dict(pods=["a"], uids={}, pod="a", uid="9"), Join("member")),
    ("a member of an ended gang is ended with it, not recycled",
     dict(pods=["a"], uids={"a": "1"}, pod="a", uid="1", terminal=True, submitted=True), Join("member")),
    ("first pod of a new run after the gang ended: a new PlaceholderJob",
     dict(pods=["a"], uids={"a": "1"}, pod="a", uid="2", terminal=True, submitted=True), Join("recycle")),
    ("a new name after the gang ended", dict(pods=["a"], uids={"a": "1"}, pod="c", uid="3", terminal=True),
     Join("recycle")),
    ("before submission a new pod joins",
     dict(pods=["a"], uids={"a": "1"}, pod="b", uid="2"), Join("add", ("a", "b"), {"a": "1", "b": "2"})),
    ("before submission ended members drop out (they must hold no node)",
     dict(pods=["a", "b"], uids={"a": "1", "b": "2"}, pod="c", uid="3", ended={"a"}),
     Join("add", ("b", "c"), {"b": "2", "c": "3"})),
    ("a recreated pod of a member's name replaces its earlier incarnation (before submission)",
     dict(pods=["a", "b"], uids={"a": "1", "b": "2"}, pod="a", uid="7"),
     Join("replace", ("a", "b"), {"a": "7", "b": "2"}, slot="a")),
    ("a recreated pod of a member's name takes its place after allocation (LeaderWorkerSet restart)",
     dict(pods=["a", "b"], uids={"a": "1", "b": "2"}, pod="b", uid="8", submitted=True),
     Join("replace", ("a", "b"), {"a": "1", "b": "8"}, slot="b")),
    ("after submission a new name takes the place of an ended member",
     dict(pods=["a", "b", "c"], uids={"a": "1", "b": "2", "c": "3"}, pod="d", uid="4", submitted=True,
          ended={"b", "c"}),
     Join("replace", ("a", "d", "c"), {"a": "1", "c": "3", "d": "4"}, slot="b")),
    ("after submission with every member alive the pod waits",
     dict(pods=["a", "b"], uids={"a": "1", "b": "2"}, pod="c", uid="3", submitted=True), Join("wait")),
    ("ended names outside the spec are ignored",
     dict(pods=["a"], uids={"a": "1"}, pod="c", uid="3", submitted=True, ended={"zz"}), Join("wait")),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "expected"), JOIN_CASES, ids=[c[0] for c in JOIN_CASES])
def test_plan_join(case: str, args: dict[str, Any], expected: Join) -> None:
    got = plan_join(
        args["pods"],
        args["uids"],
        args["pod"],
        args["uid"],
        submitted=args.get("submitted", False),
        terminal=args.get("terminal", False),
        ended=args.get("ended", set()),
    )
    assert got == expected


def test_plan_join_never_grows_a_submitted_gang() -> None:
    pods, uids = ["a", "b"], {"a": "1", "b": "2"}
    for ended in (set(), {"a"}, {"a", "b"}):
        got = plan_join(pods, uids, "new", "9", submitted=True, terminal=False, ended=ended)
        assert got.action in ("wait", "replace")
        if got.action == "replace":
            assert len(got.pods) == len(pods)
            assert set(got.uids) == set(got.pods)


# --- a gang's job request ---------------------------------------------------------------------


def _member_pod(name: str, cpu: str, gpus: int = 0) -> Obj:
    limits: dict[str, str] = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}, "limits": limits}}
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": [container]}}


GANG = Group("jobset-js", NS, 3, {}, {"kind": "JobSet", "uid": "u"}, annotations={P + "timelimit": "30"}, gang=True)

GANG_REQUESTS: list[tuple[str, list[Obj], dict[str, str], dict[str, Any]]] = [
    ("sized for the whole gang before every member exists", [_member_pod("a", "2")], {},
     {"nodes": 3, "cpus_per_task": 2, "time_limit_minutes": 30}),
    ("each node sized for the largest member, GPUs per node", [_member_pod("a", "1", 1), _member_pod("b", "3", 2)], {},
     {"nodes": 3, "cpus_per_task": 3, "gres": "gres/gpu:2"}),
    ("min-nodes above the gang holds extra nodes", [_member_pod("a", "1")], {P + "min-nodes": "5"}, {"nodes": 5}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "pods", "extra", "expected"), GANG_REQUESTS, ids=[c[0] for c in GANG_REQUESTS])
def test_gang_job_request(case: str, pods: list[Obj], extra: dict[str, str], expected: dict[str, Any]) -> None:
    request = job_request(
        pods, config=Config(partition="p"), derived=GANG.derived_for(len(pods)), annotations=GANG.annotations | extra
    )
    for field_name, value in expected.items():
        assert getattr(request, field_name) == value, field_name


def test_gang_min_nodes_below_the_gang_is_an_error() -> None:
    pods = [_member_pod(n, "1") for n in "abc"]
    with pytest.raises(ValueError, match=r"min-nodes \(2\) is below the number of pods \(3\)"):
        job_request(pods, config=Config(), derived=GANG.derived_for(3), annotations={P + "min-nodes": "2"})
