"""Test-wide settings.

Hypothesis runs derandomized (a fixed sequence of examples), so a run is repeatable and
CI never fails on an example no earlier run saw. To search afresh for new failures, run
with HYPOTHESIS_PROFILE=explore (random examples, more of them).

The tests start hundreds of Python processes (brokers, `odradek` commands, workers). Where
PYTHONDONTWRITEBYTECODE is set, each of them compiled every module of odradek anew; they
keep their bytecode outside the source tree instead (PYTHONPYCACHEPREFIX), so the tree
stays as clean as the setting meant and each module is compiled once.
"""

from __future__ import annotations

import os
import tempfile

from hypothesis import settings

if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(
        tempfile.gettempdir(), f"odradek-tests-pycache-{os.getuid()}"))

settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
