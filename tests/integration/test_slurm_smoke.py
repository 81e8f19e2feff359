"""The local Slurm is real: slurmrestd runs external jobs on the expected nodes and checks JWTs."""

from __future__ import annotations

from typing import Any

import httpx

from tests.harness import SlurmEnv, wait_for

API = "/slurm/v0.0.44"


def test_external_job_runs_on_expected_nodes_and_cancels(slurm_env: SlurmEnv) -> None:
    body = {
        "job": {
            "name": "smoke",
            "flags": ["EXTERNAL_JOB"],
            "nodes": "2",
            "partition": slurm_env.partition,
            "cpus_per_task": 1,
            "tasks_per_node": 1,
            "memory_per_node": {"set": True, "number": 100},
            "current_working_directory": "/tmp",
            "required_nodes": slurm_env.nodes[:2],
        }
    }
    with httpx.Client(base_url=slurm_env.url, headers=slurm_env.headers(), timeout=10) as c:
        r = c.post(f"{API}/job/submit", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["errors"] == []
        job_id = r.json()["job_id"]

        def job() -> dict[str, Any]:
            jobs: list[dict[str, Any]] = c.get(f"{API}/job/{job_id}").json()["jobs"]
            return jobs[0]

        running = wait_for(lambda: (j := job())["job_state"] == ["RUNNING"] and j, 20, "job RUNNING")
        assert running["nodes"] == f"{slurm_env.nodes[0][:-1]}[1-2]"
        assert "EXTERNAL_JOB" in running["flags"]
        r = c.delete(f"{API}/job/{job_id}")
        assert r.status_code == 200, r.text
        wait_for(lambda: job()["job_state"] == ["CANCELLED"], 20, "job CANCELLED")


def test_bad_jwt_is_refused(slurm_env: SlurmEnv) -> None:
    # slurmctld rejects the token; slurmrestd answers 511 with the reason in errors[].
    r = httpx.get(f"{slurm_env.url}{API}/jobs", headers={"X-SLURM-USER-TOKEN": "not-a-token"}, timeout=10)
    assert r.status_code in (401, 403, 511), (r.status_code, r.text)
    assert "authentication" in r.json()["errors"][0]["error"].lower()
    r = httpx.get(f"{slurm_env.url}{API}/jobs", headers=slurm_env.headers(), timeout=10)
    assert r.status_code == 200, r.text
    assert r.json()["errors"] == []
