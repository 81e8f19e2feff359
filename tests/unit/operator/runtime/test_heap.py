"""operator/runtime/heap.py: the C allocator's free memory goes back to the system."""

from __future__ import annotations

import platform

import pytest

from slurm_bridge.operator.runtime import heap

pytestmark = pytest.mark.unit


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_trimming_returns_freed_memory_that_malloc_kept() -> None:
    assert platform.libc_ver()[0] == "glibc", "the operator's image and CI run on glibc"
    # 2 KB blocks come from malloc, not Python's small-object allocator. Keeping every 50th pins
    # the heap's top, so free() alone cannot shrink it: only the trim gives the pages back.
    blocks = [bytes(2048) for _ in range(100_000)]
    kept = blocks[::50]
    del blocks
    before = _rss_mib()
    assert heap.release_free_heap()
    after = _rss_mib()
    assert before - after > 100, f"RSS {before:.0f} MiB -> {after:.0f} MiB"
    assert len(kept) == 2000
