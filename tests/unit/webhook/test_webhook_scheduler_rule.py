"""Which pods the bridge takes (webhook/mutate.py goes_to_bridge): the mutating webhook takes
exactly the pods whose templates the validating webhook checks as the bridge's."""

from __future__ import annotations

from typing import Any

import pytest

from slurm_bridge.core.config import Config
from slurm_bridge.webhook.mutate import DEFAULT_SCHEDULER, goes_to_bridge, mutate_pod
from slurm_bridge.webhook.review import AdmissionRequest
from slurm_bridge.webhook.validate import validate

pytestmark = pytest.mark.unit

SCHED = Config().schedulerName
SCHEDULERS = [None, "", DEFAULT_SCHEDULER, SCHED, "volcano"]


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_goes_to_bridge(scheduler: str | None) -> None:
    assert goes_to_bridge(scheduler, SCHED) is (scheduler != "volcano")
    assert goes_to_bridge(scheduler, "other-bridge") is (scheduler in (None, "", DEFAULT_SCHEDULER))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_mutation_and_template_validation_agree(scheduler: str | None) -> None:
    # A placement Slurm cannot honour: refused in a template the bridge takes, ignored in others.
    spec: dict[str, Any] = {"containers": [{"name": "c"}], "affinity": {"podAffinity": {"x": 1}}}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    pod = {"metadata": {"name": "p"}, "spec": spec}
    taken = not mutate_pod(pod, SCHED).skipped
    job = {"metadata": {"name": "j"}, "spec": {"template": {"metadata": {}, "spec": spec}}}
    request = AdmissionRequest(uid="u", operation="CREATE", group="batch", version="v1", kind="Job",
                               sub_resource="", namespace="ns", name="j", username="alice", object=job,
                               old_object=None)  # fmt: skip
    checked = not validate(request, Config()).allowed
    assert taken is checked is goes_to_bridge(scheduler, SCHED)
