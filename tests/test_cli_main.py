"""The odradek command as a shell pipeline meets it."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_reader_that_goes_away_stops_the_command_quietly() -> None:
    # `odradek errors | head`: the reader is gone before the command writes (its end of
    # the pipe closed first, so that the outcome does not depend on who runs first).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "odradek", "errors"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert result.returncode == 1
    assert result.stderr == "", result.stderr
