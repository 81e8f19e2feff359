"""What sacct shows for a pod's job (issue 38 §6), on the real cluster and the real Slurm: Slurm
records an external job the bridge ends as CANCELLED, whatever its pod did (no REST call completes
an external job: docs/tenancy.md, "What Slurm's accounting says"), so the bridge writes the pod's outcome and
exit code into the job's admin comment with the released mark, and ``sacct -o AdminComment``
shows them beside the state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s

from slurm_bridge import names
from tests.e2e.util import KWOK_COMPLETE_DELAY, KWOK_FAIL_EXIT_CODE, get_phj, make_pod
from tests.harness import SlurmEnv, wait_for

pytestmark = pytest.mark.usefixtures("bridge")
Obj = dict[str, Any]


def ended_job(custom: k8s.CustomObjectsApi, ns: str, name: str, phase: str) -> int:
    def done() -> int | None:
        status = (get_phj(custom, ns, name) or {}).get("status") or {}
        return int(status["jobId"]) if status.get("phase") == phase and status.get("jobId") else None

    job_id: int = wait_for(done, 90, f"PlaceholderJob {name} {phase} with its job id")
    return job_id


def accounted(slurm: SlurmEnv, job_id: int) -> tuple[str, Obj]:
    """(State, the bridge's admin comment) as slurmdbd recorded them, once the outcome is in."""

    def read() -> tuple[str, Obj] | None:
        out = slurm.sacct("-j", str(job_id), "-X", "-n", "-P", "-o", "JobID,State,AdminComment")
        for line in out.splitlines():
            job, state, comment = [*line.split("|", 2), "", ""][:3]
            if job == str(job_id) and comment.startswith(names.ADMIN_COMMENT_PREFIX):
                mark: Obj = json.loads(comment[len(names.ADMIN_COMMENT_PREFIX) :])
                if names.ADMIN_COMMENT_OUTCOME in mark:
                    return state, mark
        return None

    found: tuple[str, Obj] = wait_for(read, 60, f"sacct to show job {job_id}'s outcome in its AdminComment", 1)
    return found


@pytest.mark.parametrize(("code", "phase"), [(0, "Completed"), (3, "Failed")])
def test_sacct_shows_the_pods_outcome_and_exit_code_beside_slurms_cancelled(
    ns: str, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, slurm_env: SlurmEnv, code: int, phase: str
) -> None:
    annotations = {KWOK_COMPLETE_DELAY: "2s"} | ({KWOK_FAIL_EXIT_CODE: str(code)} if code else {})
    core.create_namespaced_pod(ns, make_pod("outcome", annotations=annotations))
    job_id = ended_job(custom, ns, "outcome", phase)
    state, mark = accounted(slurm_env, job_id)
    assert state.startswith("CANCELLED"), f"Slurm's own record of an external job the bridge ended: {state}"
    assert mark[names.ADMIN_COMMENT_RELEASED] is True
    assert mark[names.ADMIN_COMMENT_OUTCOME] == phase
    assert mark[names.ADMIN_COMMENT_EXIT_CODE] == code
    assert (mark["ns"], mark["name"]) == (ns, "outcome")
