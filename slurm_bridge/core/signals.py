"""The first thing each component's entry module does: own SIGTERM and SIGINT.

Python's default for SIGTERM kills the process by the signal (status 143). Until a component's
event loop takes the signals over (slurm_bridge/core/shutdown.py), and again after it closed, nothing
has started that needs stopping, so the signal ends the process at once with status 0. It does
so with ``os._exit`` after flushing the standard streams, not by raising SystemExit: an exception
raised wherever the main thread happens to be (inside an import, a library's ``except
BaseException``) could be caught, and the signal lost. This module imports nothing but the
small :mod:`contextlib`, :mod:`os`, :mod:`sys` and :mod:`signal`: it runs before the second the entry points spend
on imports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType
from typing import NoReturn

SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


def _exit_now(signum: int, _frame: FrameType | None) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to keep
            stream.flush()
    os._exit(0)


def exit_on_signal() -> None:
    """From now until an event loop takes them: SIGTERM and SIGINT exit with status 0."""
    for sig in SIGNALS:
        signal.signal(sig, _exit_now)
