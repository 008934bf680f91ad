"""One of a broker's log.dirs: its lock, its free-space reserve, and whether it is online.

Kafka takes a log dir offline on the first I/O error in it (KIP-112's LogDirFailureChannel):
its partitions answer KAFKA_STORAGE_ERROR, the controller moves their leadership away, and
a broker with no dir left stops. Odradek does the same, and adds a reserve of free space
(Redpanda's storage_min_free_bytes): an append that would leave less than the reserve is
refused before a byte is written, with a retriable error, so a filling disk slows producers
down instead of corrupting logs, and writes resume by themselves once space returns.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from odradek.storage.errors import DiskFullError, LogDirOfflineError, StorageError

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"  # Kafka's name: held by the broker that owns the dir
RESERVE_MAX_FRACTION = 0.05  # the reserve never exceeds this share of the file system
_RECHECK_S = 1.0  # free space is read again at least this often (others write there too)
# Errors that mean "no space": an append failing with one is undone and refused, not fatal.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(e: BaseException | None) -> bool:
    return isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS


def lock_log_dir(path: Path) -> int:
    """Takes the dir's `.lock` (flock, released when the process ends however it ends), so
    a second broker on the same dir refuses to start before it reads or writes anything
    there. Returns the lock's file descriptor."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"{path} is in use by another broker (its {LOCK_FILE} is held); "
                           "two brokers cannot share a log dir") from None
    return fd


class LogDir:
    """The state a log dir's logs share: online or offline (and why), and free space."""

    def __init__(self, path: Path, min_free_bytes: int, *, offline_on_full: bool = False,
                 on_offline: Callable[[LogDir], None] = lambda d: None,
                 monotonic: Callable[[], float] = time.monotonic,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs) -> None:
        self.path = path
        self.min_free_bytes = min_free_bytes
        # In a cluster other replicas can lead: a write that finds the disk full takes the
        # dir offline there (Kafka's behaviour), rather than refusing appends until it has
        # space again as a single broker does.
        self.offline_on_full = offline_on_full
        self.offline_reason: str | None = None
        self._on_offline = on_offline
        self._monotonic = monotonic
        self._statvfs = statvfs
        self._lock = threading.Lock()
        self._free = 0  # bytes available to us at the last look, less appends since
        self._reserve = 0
        self._checked_at = float("-inf")
        self.refusing = False  # below the reserve at the last append: logged once per episode

    def __repr__(self) -> str:
        return f"LogDir({str(self.path)!r}{', offline' if self.offline else ''})"

    @property
    def offline(self) -> bool:
        return self.offline_reason is not None

    def check_online(self) -> None:
        if self.offline_reason is not None:
            raise LogDirOfflineError(f"log dir {self.path} is offline: {self.offline_reason}")

    def _stat(self) -> None:
        st = self._statvfs(self.path)
        self._free = st.f_bavail * st.f_frsize
        total = st.f_blocks * st.f_frsize
        self._reserve = min(self.min_free_bytes, int(total * RESERVE_MAX_FRACTION))
        self._checked_at = self._monotonic()

    def reserve(self, nbytes: int) -> None:
        """Takes `nbytes` of the free space for an append, or refuses it (DiskFullError)
        if that would leave less than the reserve. Free space is read again when the
        estimate says no, and at least once a second."""
        if self.min_free_bytes <= 0:
            return
        with self._lock:
            if (self._free - nbytes < self._reserve
                    or self._monotonic() - self._checked_at >= _RECHECK_S):
                try:
                    self._stat()
                except OSError as e:
                    raise self.fail(f"cannot read its free space: {e}") from e
            if self._free - nbytes < self._reserve:
                if not self.refusing:
                    self.refusing = True
                    log.warning("log dir %s has %d bytes free, less than its reserve of %d "
                                "(log.dir.min.free.bytes): refusing appends until space "
                                "returns", self.path, self._free, self._reserve)
                raise DiskFullError(
                    f"log dir {self.path} has {self._free} bytes free, less than its reserve "
                    f"of {self._reserve} bytes (log.dir.min.free.bytes): retry once space is "
                    "freed")
            if self.refusing:
                self.refusing = False
                log.warning("log dir %s has %d bytes free again: accepting appends",
                            self.path, self._free)
            self._free -= nbytes

    def out_of_space(self) -> None:
        """A write failed with ENOSPC (and was undone): the next append reads free space
        afresh instead of trusting the estimate."""
        with self._lock:
            self._free = 0
            if not self.refusing:
                self.refusing = True
                log.warning("log dir %s is out of space: refusing appends until space "
                            "returns", self.path)

    def fail(self, reason: str) -> LogDirOfflineError:
        """Takes the dir offline (once; later calls keep the first reason) and returns the
        error to raise."""
        with self._lock:
            first = self.offline_reason is None
            if first:
                self.offline_reason = reason
        if first:
            log.error("log dir %s is offline: %s", self.path, reason)
            self._on_offline(self)
        return LogDirOfflineError(f"log dir {self.path} is offline: {self.offline_reason}")
