"""Give the C allocator's free memory back to the system now and then.

Decoding a large answer (a full Slurm job list, kopf's initial lists) frees most of what it
allocated at once, but glibc's malloc keeps freed memory inside its arenas: at 10,000
PlaceholderJobs about 100 MB of the operator's RSS was free memory that ``malloc_trim`` returns
in a few milliseconds (bench/log, run 11). Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

PERIOD_SECONDS = 60.0


def _load_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


_TRIM = _load_trim()


def release_free_heap() -> bool:
    """Whether the allocator could be asked (glibc)."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True


async def release_periodically(period: float = PERIOD_SECONDS) -> None:
    """Every ``period`` seconds; a few milliseconds each, on the event loop (the allocator's
    arenas are locked one at a time, so other threads are not held up)."""
    if _TRIM is None:
        log.info("no malloc_trim in this C library: the heap is not trimmed")
        return
    while True:
        await asyncio.sleep(period)
        release_free_heap()
