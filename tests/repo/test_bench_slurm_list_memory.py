"""bench/slurm_list_memory.py's parts that need no cluster: the jobs it fills Slurm with never run
and are not the bridge's, and a process's memory is read as the kernel reports it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import slurm_list_memory  # bench/ is not a package


def test_its_jobs_are_held_native_batch_jobs() -> None:
    job = slurm_list_memory.held_job("debug")["job"]
    assert job["hold"] is True, "a held job never starts: it needs no node, only a record"
    assert "flags" not in job and "comment" not in job, "not an external job, nor marked as the bridge's"
    assert job["name"] == slurm_list_memory.NAME and job["partition"] == "debug"


def test_memory_is_the_processs_rss_and_its_peak() -> None:
    got = slurm_list_memory.memory_kib(os.getpid())
    assert set(got) == {"VmRSS", "VmHWM"} and 0 < got["VmRSS"] <= got["VmHWM"]
