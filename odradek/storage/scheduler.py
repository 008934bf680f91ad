"""Scheduler: periodic background tasks on one daemon thread (Kafka's KafkaScheduler).

Tasks receive nothing and return nothing; a task that raises is logged and runs again at
its next period, so one bad partition cannot stop retention for the others. Tests call
the tasks' targets directly with an injected clock instead of waiting for this thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: list[tuple[float, int, str, Callable[[], object], float | None]] = []
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def schedule(self, name: str, task: Callable[[], object], period_ms: int,
                 delay_ms: int | None = None) -> None:
        """Runs `task` every period_ms, first after delay_ms (default: one period)."""
        period = period_ms / 1000
        first = time.monotonic() + (period if delay_ms is None else delay_ms / 1000)
        with self._condition:
            heapq.heappush(self._tasks, (first, next(self._sequence), name, task, period))
            self._condition.notify()

    def schedule_once(self, name: str, task: Callable[[], object]) -> None:
        """Runs `task` once, as soon as the thread is free."""
        with self._condition:
            heapq.heappush(self._tasks, (time.monotonic(), next(self._sequence), name, task,
                                         None))
            self._condition.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stops after the running task (if any) completes."""
        with self._condition:
            self._stopping = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("scheduler %s did not stop within %.0f s", self.name, timeout)
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stopping:
                    if self._tasks:
                        wait = self._tasks[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._condition.wait(wait)
                    else:
                        self._condition.wait()
                if self._stopping:
                    return
                due, _, name, task, period = heapq.heappop(self._tasks)
            try:
                task()
            except Exception:
                log.exception("background task %s failed", name)
            if period is None:
                continue
            with self._condition:
                heapq.heappush(
                    self._tasks, (max(due + period, time.monotonic()), next(self._sequence),
                                  name, task, period)
                )
