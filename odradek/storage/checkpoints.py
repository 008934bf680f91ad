"""Kafka's checkpoint files and clean-shutdown marker, byte for byte.

A log directory holds one checkpoint file per kind of offset (recovery point, log start
offset, cleaner offset), each listing every partition of that directory:

    0                  <- format version
    2                  <- number of entries
    events 0 42        <- topic, partition, offset, separated by one space
    logs 3 7

Writes go to `<file>.tmp`, are fsynced, renamed over the file and the directory is fsynced,
so a crash leaves either the old file or the new one, never a mix; a stray .tmp is simply
overwritten by the next write. The clean-shutdown marker tells the next start that the logs
were closed properly and need no recovery.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

from odradek.storage.errors import StorageError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

CHECKPOINT_VERSION = 0
TMP_SUFFIX = ".tmp"

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_NUMBER = re.compile(r"[+-]?[0-9]+")
_PARTITION = re.compile(r"[0-9]+")
_INT_MAX = 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename, creation or deletion in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Write `data` to path.tmp, fsync it, rename it over `path` and fsync the directory."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StorageError(f"cannot write {path}: {e}") from e


class OffsetCheckpointFile:
    """One of Kafka's `topic partition offset` checkpoint files (version 0)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def write(self, entries: Mapping[tuple[str, int], int]) -> None:
        """Replace the file's contents with `entries`, atomically and durably.

        Entries are written sorted by topic and partition so that equal maps give equal files.
        Raises ValueError for a topic Kafka could not have, StorageError if the disk fails.
        """
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        for (topic, partition), offset in sorted(entries.items()):
            if not _TOPIC.fullmatch(topic):
                raise ValueError(f"{topic!r} is not a legal Kafka topic name")
            if not 0 <= partition <= _INT_MAX or not _LONG_MIN <= offset <= _LONG_MAX:
                raise ValueError(f"{topic} {partition} {offset}: partition or offset out of range")
            lines.append(f"{topic} {partition} {offset}")
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            write_durably(self.path, data)

    def read(self) -> dict[tuple[str, int], int]:
        """The entries by (topic, partition); empty if the file is missing or empty.

        Raises StorageError naming the file and line when the contents are not a checkpoint
        Kafka would write, so that the caller can fall back to recovering the logs.
        """
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return {}
            except OSError as e:
                raise StorageError(f"cannot read {self.path}: {e}") from e
        if not data:
            return {}  # Kafka creates the file empty before its first write
        try:
            text = data.decode()
        except UnicodeDecodeError as e:
            raise StorageError(f"{self.path}: not UTF-8 text ({e})") from None
        if not text.endswith("\n"):
            raise StorageError(f"{self.path}: truncated (no newline at the end)")
        lines = text[:-1].split("\n")
        if lines[0] != str(CHECKPOINT_VERSION):
            raise self._malformed(1, lines[0], f"expected version {CHECKPOINT_VERSION}")
        if len(lines) < 2 or not _NUMBER.fullmatch(lines[1]) or int(lines[1]) < 0:
            raise self._malformed(2, lines[1] if len(lines) > 1 else "", "expected entry count")
        expected = int(lines[1])
        if len(lines) - 2 != expected:
            raise StorageError(f"{self.path}: expected {expected} entries, found {len(lines) - 2}")
        entries: dict[tuple[str, int], int] = {}
        for number, line in enumerate(lines[2:], start=3):
            parts = line.split(" ")
            if (
                len(parts) != 3
                or not _TOPIC.fullmatch(parts[0])
                or not _PARTITION.fullmatch(parts[1])
                or not _NUMBER.fullmatch(parts[2])
            ):
                raise self._malformed(number, line, "expected 'topic partition offset'")
            tp, offset = (parts[0], int(parts[1])), int(parts[2])
            if tp[1] > _INT_MAX or not _LONG_MIN <= offset <= _LONG_MAX:
                raise self._malformed(number, line, "partition or offset out of range")
            if tp in entries:
                raise self._malformed(number, line, "partition listed twice")
            entries[tp] = offset
        return entries

    def _malformed(self, number: int, line: str, why: str) -> StorageError:
        return StorageError(f"{self.path}, line {number}: malformed ({why}): {line!r}")


def _marker(log_dir: str | os.PathLike[str]) -> Path:
    return Path(log_dir) / CLEAN_SHUTDOWN_FILE


def write_clean_shutdown_marker(log_dir: str | os.PathLike[str], broker_epoch: int = -1) -> None:
    """Record that every log in `log_dir` was flushed and closed; durable once it returns.

    The contents are Kafka 3.6+'s (KIP-966), `{"broker_epoch":"<epoch>","version":"0"}`;
    only the file's existence matters to log recovery.
    """
    payload = json.dumps({"broker_epoch": str(broker_epoch), "version": "0"}, separators=(",", ":"))
    write_durably(_marker(log_dir), payload.encode())


def has_clean_shutdown_marker(log_dir: str | os.PathLike[str]) -> bool:
    """Whether the logs in `log_dir` were closed cleanly and can skip recovery."""
    return _marker(log_dir).is_file()


def read_clean_shutdown_broker_epoch(log_dir: str | os.PathLike[str]) -> int | None:
    """The broker epoch in the marker; None if missing, empty (Kafka before 3.6) or unreadable."""
    try:
        content = json.loads(_marker(log_dir).read_bytes())
        return int(content["broker_epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_clean_shutdown_marker(log_dir: str | os.PathLike[str]) -> None:
    """Forget the clean shutdown, durably: done when the logs are opened for writing, so that
    a crash from then on is followed by recovery."""
    path = _marker(log_dir)
    try:
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)
    except OSError as e:
        raise StorageError(f"cannot remove {path}: {e}") from e
