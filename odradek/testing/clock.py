"""TestClock: the broker's time for tests that must not sleep.

It runs with the real clock and jumps forward when a test says so: `advance(ms)` moves
every reading of the broker's time (record timestamps of LogAppendTime, retention, segment
rolls, producer id expiry, coordinator deadlines) and runs at once every coordinator timer
that fell due on the way (session timeouts, rebalance timeouts, offset expiry, transaction
timeouts), in order. Between jumps, timers fire on the event loop as they would anyway, so
the broker behaves normally while the test is not moving time.

The broker reads it as three things: the coordinators' `Time` and `Timer`
(odradek.coordinator.timer) and the storage layer's clock (a callable, milliseconds).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable

from odradek.coordinator.timer import TimerTask, run_logged


class _Task:
    __slots__ = ("callback", "done", "due", "handle")

    def __init__(self, due: int, callback: Callable[[], object]) -> None:
        self.due = due
        self.callback = callback
        self.done = False
        self.handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self.done = True
        if self.handle is not None:
            self.handle.cancel()


class TestClock:
    """Real time plus the jumps made with advance(). Used from the broker's event loop."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self) -> None:
        self.offset_ms = 0
        self._tasks: list[tuple[int, int, _Task]] = []
        self._sequence = itertools.count()

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    __call__ = milliseconds  # the storage layer's Clock

    def schedule(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        task = _Task(self.milliseconds() + max(delay_ms, 0), callback)
        heapq.heappush(self._tasks, (task.due, next(self._sequence), task))
        task.handle = asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000,
                                                            self._fire, task)
        return task

    def _fire(self, task: _Task) -> None:
        if not task.done:
            task.done = True
            run_logged(task.callback)

    def advance(self, ms: int) -> None:
        """Jumps `ms` ahead and runs the timers due by then, each in due order (tasks they
        schedule run too when due within the jump)."""
        if ms < 0:
            raise ValueError("time moves forward only")
        self.offset_ms += ms
        now = self.milliseconds()
        while self._tasks and self._tasks[0][0] <= now:
            _, _, task = heapq.heappop(self._tasks)
            if task.handle is not None:
                task.handle.cancel()
            self._fire(task)
        # Cancelled and fired tasks are dropped from the heap as they come to its top.
        while self._tasks and self._tasks[0][2].done:
            heapq.heappop(self._tasks)
