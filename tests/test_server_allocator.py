"""The broker's malloc tuning takes on glibc (Linux), where the tests run."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from odradek.server.allocator import keep_large_buffers_in_heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_settings() -> None:
    # In a process of its own: the test run's malloc stays as it was.
    code = ("from odradek.server.allocator import keep_large_buffers_in_heap as k; "
            "print(k())")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    assert shown.stdout.strip() == "True"


def test_elsewhere_it_declines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert keep_large_buffers_in_heap() is False
