"""Long work on the event loop, cut into slices that let other requests run in between.

No request or background task may hold the broker's event loop for more than a few tens
of milliseconds (docs/architecture.md): a loop over thousands of partitions calls
`await slices.pause()` after each step, which yields to the loop once the current slice
has run for `budget_s`. Blocking I/O does not belong in slices at all: it goes to worker
threads (asyncio.to_thread), and only the loop-owned bookkeeping stays here.
"""

from __future__ import annotations

import asyncio
import time

# A slice's budget: well under the ~50 ms a request may wait for the loop, and long enough
# that yielding (a pass through the loop's ready queue) costs little.
SLICE_S = 0.01


class Slices:
    def __init__(self, budget_s: float = SLICE_S) -> None:
        self.budget_s = budget_s
        self.yields = 0  # how many times the loop was given back (tests, logs)
        self._start = time.monotonic()

    async def pause(self) -> None:
        """Yields to the event loop if this slice has used its budget."""
        if time.monotonic() - self._start >= self.budget_s:
            await asyncio.sleep(0)
            self.yields += 1
            self._start = time.monotonic()
