"""The process's stop (slurm_bridge/core/shutdown.py, signals.py): a stop request cancels the main
coroutine wherever it is and waits for its cleanup; what does not stop is cut off by the watchdog;
a signal before the event loop exits with status 0."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator

import pytest

from slurm_bridge.core import shutdown
from slurm_bridge.core.shutdown import EXIT_STOP_TIMEOUT, Stop

pytestmark = pytest.mark.unit


@pytest.fixture
def make_stop() -> Iterator[Callable[[], Stop]]:
    """Stops whose watchdog (30 s, failing the test if it fires) is ended with the test, so that it
    does not fire later in another test's time."""
    made: list[Stop] = []

    def make() -> Stop:
        made.append(Stop(deadline=30, hard_exit=lambda code: pytest.fail(f"hard exit {code}")))
        return made[-1]

    yield make
    for stop in made:
        stop.disarm()


async def test_a_stop_request_cancels_main_and_waits_for_its_cleanup(make_stop: Callable[[], Stop]) -> None:
    stop = make_stop()
    steps: list[str] = []

    async def main() -> None:
        steps.append("started")
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # a cleanup that itself awaits (the Lease's release)
            steps.append("cleaned up")

    serving = asyncio.create_task(stop.serve(main()))
    await asyncio.sleep(0.01)
    stop.request("SIGTERM")
    await asyncio.wait_for(serving, 5)
    assert steps == ["started", "cleaned up"] and stop.reason == "SIGTERM"


async def test_a_slow_stop_names_what_it_waits_for(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    make_stop: Callable[[], Stop],
) -> None:
    """A stop still running after SLOW_STOP_SECONDS logs each task with the line it awaits at, so
    a slow stop in a test's log says which step held it."""
    monkeypatch.setattr(shutdown, "SLOW_STOP_SECONDS", 0.05)
    stop = make_stop()

    async def lease_release() -> None:
        await asyncio.sleep(0.3)

    async def main() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.create_task(lease_release(), name="lease-release")

    serving = asyncio.create_task(stop.serve(main()))
    await asyncio.sleep(0.01)
    stop.request("SIGTERM")
    await asyncio.wait_for(serving, 5)
    slow = [r.getMessage() for r in caplog.records if "still stopping" in r.getMessage()]
    assert len(slow) == 1 and "lease-release:" in slow[0] and "in lease_release" in slow[0], slow
    assert [t for t in asyncio.all_tasks() if t.get_name() == "stop-request"] == [], "the request's waiter is gone"


async def test_a_request_before_main_runs_still_stops_it(make_stop: Callable[[], Stop]) -> None:
    stop = make_stop()
    stop.request("SIGTERM")
    ran: list[str] = []

    async def main() -> None:
        ran.append("main")
        await asyncio.Event().wait()

    await asyncio.wait_for(stop.serve(main()), 5)
    assert ran == []


async def test_a_second_request_cuts_a_long_cleanup_short(make_stop: Callable[[], Stop]) -> None:
    stop = make_stop()
    drained: list[bool] = []

    async def main() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            try:
                await asyncio.sleep(60)  # the webhook's drain
                drained.append(True)
            except asyncio.CancelledError:
                drained.append(False)
                raise

    serving = asyncio.create_task(stop.serve(main()))
    await asyncio.sleep(0.01)
    stop.request("SIGTERM")
    await asyncio.sleep(0.05)
    stop.request("SIGINT")
    await asyncio.wait_for(serving, 5)
    assert drained == [False] and stop.reason == "SIGTERM"


async def test_mains_own_error_is_the_processes() -> None:
    async def main() -> None:
        raise RuntimeError("cannot bind")

    with pytest.raises(RuntimeError, match="cannot bind"):
        await Stop().serve(main())


async def test_what_does_not_stop_is_cut_off_at_the_deadline() -> None:
    exits: list[int] = []
    let_go = asyncio.Event()
    loop = asyncio.get_running_loop()

    def hard_exit(code: int) -> None:  # called on the watchdog's thread
        exits.append(code)
        loop.call_soon_threadsafe(let_go.set)

    stop = Stop(deadline=0.2, hard_exit=hard_exit)

    async def main() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await let_go.wait()  # swallows its cancel and hangs, until the watchdog fires

    serving = asyncio.create_task(stop.serve(main()))
    await asyncio.sleep(0.01)
    started = time.monotonic()
    stop.request("SIGTERM")
    await asyncio.wait_for(let_go.wait(), 5)
    await asyncio.wait_for(serving, 5)
    assert exits == [EXIT_STOP_TIMEOUT]
    assert 0.15 < time.monotonic() - started < 3


def _python(code: str, *, seconds: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=seconds
    )


def test_a_signal_before_the_event_loop_exits_with_status_0() -> None:
    done = _python(
        """
        import os, signal, time
        from slurm_bridge.core.signals import exit_on_signal
        exit_on_signal()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        print("still running")
        """
    )
    assert done.returncode == 0 and "still running" not in done.stdout, done


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_in_the_event_loop_stops_main_with_its_cleanup_and_status_0(sig: str) -> None:
    done = _python(
        f"""
        import asyncio, os, signal
        from slurm_bridge.core import shutdown

        async def main(stop):
            asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.{sig})
            try:
                await asyncio.sleep(30)
            finally:
                await asyncio.sleep(0.05)
                print("cleaned up", flush=True)

        shutdown.run(main)
        print("returned", flush=True)
        """
    )
    assert done.returncode == 0, done
    assert done.stdout.split() == ["cleaned", "up", "returned"], done


def test_the_watchdog_exits_even_when_a_log_handler_cannot_flush() -> None:
    """A closed or broken log stream must not keep a stuck process from exiting."""
    exits: list[int] = []

    class Broken(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

        def flush(self) -> None:
            raise ValueError("I/O operation on closed file.")

    broken = Broken()
    logging.getLogger().addHandler(broken)
    try:
        Stop(deadline=30, hard_exit=exits.append)._too_late()
    finally:
        logging.getLogger().removeHandler(broken)
    assert exits == [EXIT_STOP_TIMEOUT]


def test_a_disarmed_watchdog_never_fires() -> None:
    exits: list[int] = []
    stop = Stop(deadline=0.05, hard_exit=exits.append)
    stop.request("SIGTERM")
    stop.disarm()
    time.sleep(0.2)
    assert exits == []
