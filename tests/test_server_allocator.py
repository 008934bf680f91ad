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


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_buffers_go_back_to_the_os() -> None:
    # With the broker's tuning, 1,000 freed 256 KiB buffers stay in the heap; trimmed,
    # they are the operating system's again.
    code = """
from odradek.server.allocator import keep_large_buffers_in_heap, release_free_memory
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
keep_large_buffers_in_heap()
before = rss()
buffers = [bytearray(256 * 1024) for _ in range(1000)]
del buffers
freed = rss()
release_free_memory()
print(before, freed, rss())
"""
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True)
    before, freed, trimmed = map(int, shown.stdout.split())
    assert freed - before > 200  # MiB: kept, as the broker wants for steady traffic
    assert trimmed - before < 50
