"""glibc's malloc tuned for a broker's traffic.

A produce request or a fetch response of a MiB arrives in a buffer of its own. glibc maps
each such buffer afresh from the kernel and unmaps it when it is freed, so every request
pays for page faults and zeroed pages (on a virtual machine whose host backs guest memory
lazily, more than the copy itself). With the mmap threshold above the buffers' sizes and
the heap kept rather than trimmed, freed buffers are reused warm. The heap may then hold up
to TRIM_THRESHOLD of free memory, a small price next to a JVM broker's heap.

That is for steady traffic. Memory freed after a burst that will not come back (hundreds
of connections dropped with their partial requests) is handed back to the operating
system explicitly: `release_free_memory` (malloc_trim) returns the free pages of every
arena, those in the middle of the heap included.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Hands the heap's free memory back to the operating system (glibc's malloc_trim);
    whether any was. It takes ~10 ms for a few hundred MiB: call it from a thread (ctypes
    releases the GIL), after a burst, not per request."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
