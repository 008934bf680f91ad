"""Test-wide settings.

Hypothesis runs derandomized (a fixed sequence of examples), so a run is repeatable and
CI never fails on an example no earlier run saw. To search afresh for new failures, run
with HYPOTHESIS_PROFILE=explore (random examples, more of them).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
