"""The one home of JSON pointers and API paths (slurm_bridge/kube.py) and who uses it."""

from __future__ import annotations

import pytest

from slurm_bridge import kube
from slurm_bridge.kube import escape_pointer, pointer

pytestmark = pytest.mark.unit


def test_pointer_escapes_each_key_and_joins_indices() -> None:
    assert pointer() == ""
    assert pointer("spec", "containers", 0, "resources") == "/spec/containers/0/resources"
    assert pointer("metadata", "annotations", "a~b/c") == "/metadata/annotations/a~0b~1c"
    # "~1" in a key is a literal "~" then "1": escaping "~" first keeps it from reading as "/".
    assert pointer("x~1") == "/x~01"
    assert pointer("spec", "tolerations", "-") == "/spec/tolerations/-"
    assert pointer("k") == "/" + escape_pointer("k")


def test_the_webhook_uses_the_shared_pointer() -> None:
    from slurm_bridge.webhook import mutate

    assert mutate.pointer is kube.pointer
