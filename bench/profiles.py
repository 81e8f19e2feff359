"""The benchmark's profiles of issue 31, set up around a run and taken down after it.

- ``tenant_policy``: a TenantPolicy for the bridge's namespace, so that every pod names a user
  (hack/accounting.env's first tenant: its user, group and default account, QOS ``normal``).
- ``BusyPartition``: the bridge's partition busy, so that every bridge pod goes through Slurm's
  queue (an immediate allocation is refused while a job of higher priority waits there): one
  external job holds a whole node for an hour (so the jobs below cannot start), and ``--busy``
  jobs of high priority wait for every node of the partition at once. The bench's pods then carry
  a time limit, which lets Slurm's backfill start them ahead of the waiting jobs (bench/log).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

REPO = Path(__file__).resolve().parent.parent
PHJ_GROUP, PHJ_VERSION = "slinky.slurm.net", "v1alpha1"
BUSY_PREFIX = "bench-busy-"
# The bench pods' time limit in the busy profile (minutes), well under the blocker's.
BUSY_POD_TIME_LIMIT = "10"
BLOCKER_MINUTES = 60


def first_tenant() -> dict[str, str]:
    """hack/accounting.env's first tenant: user, uid, group, gid, accounts (the first the default)."""
    for line in (REPO / "hack" / "accounting.env").read_text().splitlines():
        if line.startswith("TENANTS="):
            user, uid, group, gid, accounts, _ = line.split("=", 1)[1].strip('"').split()[0].split(":")
            return {"user": user, "uid": uid, "group": group, "gid": gid, "account": accounts.split(",")[0]}
    raise SystemExit("hack/accounting.env has no TENANTS line")


def tenant_policy(api: k8s.ApiClient, ns: str) -> str:
    """A TenantPolicy selecting ``ns`` (returns its name); waits until the operator reports it."""
    t, custom = first_tenant(), k8s.CustomObjectsApi(api)
    name = f"bench-{ns}"
    spec = {
        "namespaces": [ns],
        "user": {"name": t["user"]},
        "group": {"id": int(t["gid"])},
        "accounts": {"default": t["account"], "allowed": [t["account"]]},
        "qos": {"default": "normal", "allowed": ["normal"]},
    }
    body = {
        "apiVersion": f"{PHJ_GROUP}/{PHJ_VERSION}",
        "kind": "TenantPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }
    custom.create_cluster_custom_object(PHJ_GROUP, PHJ_VERSION, "tenantpolicies", body)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = custom.get_cluster_custom_object(PHJ_GROUP, PHJ_VERSION, "tenantpolicies", name).get("status") or {}
        if ns in status.get("namespaces", []):
            return name
        time.sleep(0.2)
    raise SystemExit(f"TenantPolicy {name} did not select {ns} within 30 s (is the operator running?)")


def delete_tenant_policy(api: k8s.ApiClient, name: str) -> None:
    try:
        k8s.CustomObjectsApi(api).delete_cluster_custom_object(PHJ_GROUP, PHJ_VERSION, "tenantpolicies", name)
    except k8s.exceptions.ApiException as e:
        if e.status != 404:
            raise


class BusyPartition:
    """Pending jobs of higher priority than any bridge pod in ``partition`` (see the module doc)."""

    def __init__(self, url: str, token_file: str, partition: str, waiting: int) -> None:
        self.url, self.partition, self.waiting = url.rstrip("/"), partition, waiting
        self.token = Path(token_file).read_text().strip().removeprefix("SLURM_JWT=")
        self.jobs: list[int] = []

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            f"{self.url}/slurm/v0.0.44/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"X-SLURM-USER-TOKEN": self.token, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            raise SystemExit(f"busy profile: {method} {path}: HTTP {e.code}: {e.read()[:500]!r}") from None

    def _job(self, name: str, nodes: int, **more: Any) -> dict[str, Any]:
        return {
            "name": BUSY_PREFIX + name,
            "partition": self.partition,
            "flags": ["EXTERNAL_JOB"],
            "minimum_nodes": nodes,
            "maximum_nodes": nodes,
            "tasks_per_node": 1,
            "shared": ["none"],  # whole nodes
            "time_limit": {"set": True, "number": BLOCKER_MINUTES},
            "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin"],
            **more,
        }

    def __enter__(self) -> BusyPartition:
        self.clean()
        nodes = self._call("GET", f"partition/{self.partition}")["partitions"][0]["nodes"]["total"]
        blocker = self._call("POST", "job/allocate", {"job": {**self._job("blocker", 1), "immediate": True}})
        self.jobs.append(blocker["job_id"])
        for i in range(self.waiting):
            job = self._job(f"waiting-{i}", nodes, priority={"set": True, "number": 1_000_000})
            self.jobs.append(self._call("POST", "job/submit", {"job": job})["job_id"])
        time.sleep(2)  # a scheduling pass sets their reason
        listed = self._call("GET", "jobs/state/")["jobs"]
        states = {str(j["job_id"]): j.get("state", j.get("job_state", [])) for j in listed}
        pending = [j for j in self.jobs[1:] if "PENDING" in states.get(str(j), [])]
        if len(pending) != self.waiting:
            raise SystemExit(
                f"busy profile: only {len(pending)} of {self.waiting} waiting jobs pend in {self.partition}"
            )
        return self

    def __exit__(self, *_: object) -> None:
        self.clean()

    def clean(self) -> None:
        """Cancel this profile's jobs, and any an earlier run left."""
        for job in self._call("GET", "jobs/")["jobs"]:
            if str(job.get("name", "")).startswith(BUSY_PREFIX) and {"PENDING", "RUNNING"} & set(job["job_state"]):
                self._call("DELETE", f"job/{job['job_id']}")
        self.jobs.clear()
