"""glibc's malloc tuned for a broker's traffic.

A produce request or a fetch response of a MiB arrives in a buffer of its own. glibc maps
each such buffer afresh from the kernel and unmaps it when it is freed, so every request
pays for page faults and zeroed pages (on a virtual machine whose host backs guest memory
lazily, more than the copy itself). With the mmap threshold above the buffers' sizes and
the heap kept rather than trimmed, freed buffers are reused warm. The heap may then hold up
to TRIM_THRESHOLD of free memory, a small price next to a JVM broker's heap.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest on 64 bits
TRIM_THRESHOLD = 256 * 1024 * 1024


def keep_large_buffers_in_heap() -> bool:
    """Whether it could (glibc on Linux); elsewhere malloc is left as it is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
