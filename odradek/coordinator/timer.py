"""Time and timers for the coordinators, injected so tests never sleep.

A coordinator reads the clock through a `Time` (wall-clock milliseconds: commit
timestamps, state timestamps, deadlines) and defers work through a `Timer` (session
timeouts, rebalance timeouts, group.initial.rebalance.delay.ms, offset expiry, loading
a partition step by step). The broker uses `SystemTime` and `AsyncioTimer` (callbacks on
the event loop); tests and benchmarks use `MockTime`, one object that is both, whose
clock moves only when told to and which then runs what fell due, in order (Kafka's
MockTime and MockTimer).

Callbacks run on one thread (the event loop, or the test's), one at a time: the
coordinator needs no locks.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Time(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time, in milliseconds since the epoch."""
        ...


class TimerTask(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        """Runs `callback` once, `delay_ms` from now (0: as soon as the caller returns)."""
        ...


class SystemTime:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


def run_logged(callback: Callable[[], object]) -> None:
    # A failing timer task is a bug to see in the log; it must not stop the others.
    try:
        callback()
    except Exception:
        log.exception("timer task %r failed", callback)


class AsyncioTimer:
    """Timers on the running event loop (loop.call_later)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.loop = loop or asyncio.get_running_loop()

    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        return self.loop.call_later(max(delay_ms, 0) / 1000, run_logged, callback)


class _MockTask:
    __slots__ = ("callback", "cancelled", "due")

    def __init__(self, due: int, callback: Callable[[], object]) -> None:
        self.due = due
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class MockTime:
    """A clock that moves only when told to, and the timer that goes with it.

    `advance(ms)` moves the clock and runs every task that falls due on the way, each at
    its own time (the clock reads its due time while it runs), in due order, ties in the
    order scheduled; tasks scheduled meanwhile run too if they fall due within the
    advance. `run_pending()` runs what is due now (e.g. tasks scheduled with delay 0).
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms
        self._tasks: list[tuple[int, int, _MockTask]] = []
        self._sequence = itertools.count()

    def milliseconds(self) -> int:
        return self.now

    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        task = _MockTask(self.now + max(delay_ms, 0), callback)
        heapq.heappush(self._tasks, (task.due, next(self._sequence), task))
        return task

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while self._tasks and self._tasks[0][0] <= target:
            due, _, task = heapq.heappop(self._tasks)
            if task.cancelled:
                continue
            self.now = max(self.now, due)
            task.callback()
        self.now = target

    def run_pending(self) -> None:
        self.advance(0)

    @property
    def pending(self) -> int:
        """How many tasks wait (cancelled ones not counted)."""
        return sum(1 for _, _, t in self._tasks if not t.cancelled)
