"""Waiting for a condition in tests: polled, always bounded, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT = 30.0  # seconds: the default bound of a wait


def wait_until(condition: Callable[[], Any], timeout: float = WAIT, what: str = "",
               interval: float = 0.05) -> Any:
    """Polls `condition` until it is truthy; returns its value, or fails after `timeout`
    with an AssertionError naming `what` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        time.sleep(interval)
