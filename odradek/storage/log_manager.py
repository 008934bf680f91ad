"""LogManager: every partition log of a broker, across its log.dirs, and their chores.

On start-up it loads each `<topic>-<partition>` directory, recovering those that a crash
left unflushed (no clean-shutdown marker); it then removes the marker, so that a crash
from here on is noticed. In the background it applies retention and compaction (the
LogCleaner), flushes logs whose flush.ms has passed, checkpoints recovery points and log
start offsets, removes deleted files after file.delete.delay.ms, and forgets idempotent
producers idle for producer.id.expiration.ms. Shutdown flushes
and closes every log, writes the checkpoints and the clean-shutdown marker.

Each dir is a LogDir (log_dir.py): a free-space reserve that refuses appends before the
disk fills, and an online state. A dir that fails an I/O operation goes offline (Kafka's
KIP-112): its logs refuse appends, its chores stop, its checkpoints and clean-shutdown
marker are no longer written (the next start recovers it), and `on_log_dir_failure` tells
the broker, which moves leadership away or stops when no dir is left.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from odradek.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    has_clean_shutdown_marker,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
)
from odradek.storage.cleaner import CleanerConfig, LogCleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import DiskFullError, LogDirOfflineError, StorageError
from odradek.storage.log import Clock, Log, parse_partition_dir, system_clock
from odradek.storage.log_dir import LogDir
from odradek.storage.log_validator import RecordValidation
from odradek.storage.scheduler import Scheduler

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_DELETE_DIR_SUFFIX = "-delete"  # <topic>-<partition>.<uuid>-delete, as Kafka names them


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """The broker-level settings of the log manager, with Kafka's defaults."""

    log_dirs: tuple[Path, ...]
    retention_check_interval_ms: int = 5 * 60 * 1000  # log.retention.check.interval.ms
    flush_check_interval_ms: int = 1000  # log.flush.scheduler.interval.ms (checks flush.ms)
    recovery_point_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    log_start_offset_checkpoint_interval_ms: int = 60_000  # ...start.offset.checkpoint...
    file_delete_check_interval_ms: int = 1000
    cleaner_enable: bool = True  # log.cleaner.enable: compaction of compacted topics
    cleaner_threads: int = 1  # log.cleaner.threads
    producer_id_expiration_ms: int = 86_400_000  # producer.id.expiration.ms
    producer_id_expiration_check_interval_ms: int = 600_000  # ...expiration.check.interval.ms
    # odradek.record.validation.enable, odradek.batch.max.decompressed.bytes
    record_validation: RecordValidation = field(default_factory=RecordValidation)
    min_free_bytes: int = 0  # log.dir.min.free.bytes (the broker's default: 1 GiB)
    offline_on_full: bool = False  # in a cluster: a full disk takes its dir offline


class LogManager:
    def __init__(
        self,
        config: LogManagerConfig,
        default_log_config: LogConfig,
        *,
        topic_config: Callable[[str], LogConfig | None] = lambda topic: None,
        clock: Clock = system_clock,
    ) -> None:
        if not config.log_dirs:
            raise StorageError("log.dirs is empty: a broker needs at least one log directory")
        self.config = config
        self.default_log_config = default_log_config
        self.topic_config = topic_config  # a topic's overrides, when it has any
        self.clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Partitions per dir, kept as logs come and go: counting _dir_of for each new
        # log made creating a topic of n partitions O(n^2) (seconds at 10,000).
        self._partition_counts: dict[Path, int] = {}
        self._lock = threading.Lock()
        self._scheduler: Scheduler | None = None
        self.cleaner: LogCleaner | None = None
        # Called (from whichever thread found it) when a log dir goes offline.
        self.on_log_dir_failure: Callable[[LogDir], None] = lambda d: None
        self.log_dirs = {
            d: LogDir(d, config.min_free_bytes, offline_on_full=config.offline_on_full,
                      on_offline=lambda failed: self.on_log_dir_failure(failed))
            for d in config.log_dirs}

    # ---- lifecycle --------------------------------------------------------------------

    def startup(self, background: bool = True) -> None:
        for log_dir in self.config.log_dirs:
            self._load_dir(log_dir)
        if background:
            self._start_background_tasks()

    def _load_dir(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        clean = has_clean_shutdown_marker(log_dir)
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
        start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
        recovered = 0
        for entry in os.scandir(log_dir):
            if not entry.is_dir():
                continue
            if entry.name.endswith(_DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)  # a deletion a crash interrupted
                continue
            try:
                tp = parse_partition_dir(entry.name)
            except StorageError:
                log.warning("ignoring %s: not a partition directory", entry.path)
                continue
            if tp in self._logs:
                raise StorageError(f"{tp[0]}-{tp[1]} is in two log dirs: {entry.path} and "
                                   f"{self._dir_of[tp]}")
            partition_log = Log.open(
                Path(entry.path), self.log_config(tp[0]),
                log_start_offset=start_offsets.get(tp, 0),
                recovery_point=recovery_points.get(tp, 0),
                clean_shutdown=clean, clock=self.clock,
                producer_id_expiration_ms=self.config.producer_id_expiration_ms,
            )
            recovered += not clean
            self._add(tp, partition_log, log_dir)
        if not clean and recovered:
            log.info("recovered %d logs in %s after an unclean shutdown", recovered, log_dir)
        # From here on the logs are live: a crash must be recovered next time.
        remove_clean_shutdown_marker(log_dir)

    def _start_background_tasks(self) -> None:
        c = self.config
        scheduler = Scheduler("odradek-log-manager")
        scheduler.schedule("retention", self.cleanup_logs, c.retention_check_interval_ms,
                           delay_ms=30_000)
        scheduler.schedule("flush", self.flush_dirty_logs, c.flush_check_interval_ms)
        scheduler.schedule("recovery-point-checkpoint", self.checkpoint_recovery_points,
                           c.recovery_point_checkpoint_interval_ms)
        scheduler.schedule("log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
                           c.log_start_offset_checkpoint_interval_ms)
        scheduler.schedule("delete-files", self.delete_pending_files,
                           c.file_delete_check_interval_ms)
        scheduler.schedule("producer-expiration", self.remove_expired_producers,
                           c.producer_id_expiration_check_interval_ms)
        scheduler.start()
        self._scheduler = scheduler
        if c.cleaner_enable:
            self.cleaner = LogCleaner(self.online_logs,
                                      config=CleanerConfig(threads=c.cleaner_threads),
                                      clock=self.clock)
            self.cleaner.start()

    def _flush_in_background(self, flush: Callable[[], None]) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            flush()
        else:
            scheduler.schedule_once("flush-log", flush)

    def shutdown(self) -> None:
        """A clean shutdown: the next start-up needs no recovery."""
        if self.cleaner is not None:
            self.cleaner.shutdown()
            self.cleaner = None
        if self._scheduler is not None:
            self._scheduler.shutdown()
            self._scheduler = None
        unclean = {d for d in self.config.log_dirs if self.log_dirs[d].offline}
        for tp, partition_log in list(self._logs.items()):
            log_dir = self._dir_of[tp]
            if log_dir in unclean:
                continue  # offline: nothing more is written there
            try:
                partition_log.close()
            except (OSError, StorageError) as e:
                # Not closed cleanly (no space for its indexes or snapshot): the next start
                # recovers this dir rather than trust it.
                log.warning("%s not closed cleanly: %s", partition_log.name, e)
                unclean.add(log_dir)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        for log_dir in self.config.log_dirs:
            if log_dir in unclean:
                log.warning("log dir %s is recovered at the next start", log_dir)
                continue
            try:
                write_clean_shutdown_marker(log_dir)
            except OSError as e:
                log.warning("log dir %s is recovered at the next start: %s", log_dir, e)

    # ---- logs -------------------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        return self.topic_config(topic) or self.default_log_config

    def logs(self) -> list[Log]:
        with self._lock:
            return list(self._logs.values())

    def online_logs(self) -> list[Log]:
        """The logs whose dir is online: the background chores' share."""
        with self._lock:
            return [lg for tp, lg in self._logs.items()
                    if not self.log_dirs[self._dir_of[tp]].offline]

    def online_dirs(self) -> list[Path]:
        return [d for d in self.config.log_dirs if not self.log_dirs[d].offline]

    def log_dir_of(self, topic: str, partition: int) -> LogDir | None:
        d = self._dir_of.get((topic, partition))
        return None if d is None else self.log_dirs[d]

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int,
                          config: LogConfig | None = None) -> Log:
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            # The online log dir with the fewest partitions, as Kafka places new ones.
            counts = {d: self._partition_counts.get(d, 0) for d in self.online_dirs()}
            if not counts:
                raise LogDirOfflineError(f"no log dir is online to create {topic}-{partition}")
            log_dir = min(counts, key=lambda d: counts[d])
            partition_log = Log.open(
                log_dir / f"{topic}-{partition}", config or self.log_config(topic),
                clock=self.clock, producer_id_expiration_ms=self.config.producer_id_expiration_ms,
            )
            self._add((topic, partition), partition_log, log_dir)
            return partition_log

    def _add(self, tp: TopicPartition, partition_log: Log, log_dir: Path) -> None:
        partition_log.flush_in_background = self._flush_in_background
        partition_log.validation = self.config.record_validation
        partition_log.log_dir = self.log_dirs[log_dir]
        self._logs[tp] = partition_log
        self._dir_of[tp] = log_dir
        self._partition_counts[log_dir] = self._partition_counts.get(log_dir, 0) + 1

    def delete_log(self, topic: str, partition: int) -> None:
        """Takes the log out at once; its directory is renamed `...-delete` and removed."""
        with self._lock:
            partition_log = self._logs.pop((topic, partition), None)
            log_dir = self._dir_of.pop((topic, partition), None)
            if log_dir is not None:
                self._partition_counts[log_dir] -= 1
        if partition_log is None:
            return
        if self.cleaner is not None:
            self.cleaner.pause_cleaning(partition_log)
            self.cleaner.forget(partition_log)
        partition_log.close()
        directory = partition_log.directory
        doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{_DELETE_DIR_SUFFIX}")
        os.replace(directory, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    # ---- background chores (public so tests drive them with their own clock) -----------

    def cleanup_logs(self) -> int:
        """Retention: deletes the segments that retention.ms, retention.bytes and log start
        offsets no longer keep. Returns how many."""
        deleted = 0
        now = self.clock()
        for partition_log in self.online_logs():
            try:
                deleted += len(partition_log.delete_old_segments(now))
            except (OSError, StorageError):
                log.exception("retention failed for %s", partition_log.name)
        return deleted

    def flush_dirty_logs(self) -> None:
        now = self.clock()
        for partition_log in self.online_logs():
            try:
                partition_log.flush_if_due(now)
            except (DiskFullError, LogDirOfflineError) as e:
                log.debug("flush of %s: %s", partition_log.name, e)  # said once, by the dir

    def delete_pending_files(self) -> int:
        now = self.clock()
        return sum(partition_log.delete_pending_files(now)
                   for partition_log in self.online_logs())

    def remove_expired_producers(self) -> int:
        """producer.id.expiration.ms: forgets producers whose last batch is older, in every
        log (Kafka's PeriodicProducerExpirationCheck). Returns how many."""
        removed = 0
        now = self.clock()
        for partition_log in self.online_logs():
            try:
                removed += partition_log.remove_expired_producers(now)
            except (OSError, StorageError):
                log.exception("producer expiration failed for %s", partition_log.name)
        return removed

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(RECOVERY_POINT_CHECKPOINT, lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT, lambda lg: lg.log_start_offset)

    def _checkpoint(self, name: str, offset: Callable[[Log], int]) -> None:
        with self._lock:
            by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.config.log_dirs}
            for tp, partition_log in self._logs.items():
                by_dir[self._dir_of[tp]][tp] = offset(partition_log)
        for log_dir, entries in by_dir.items():
            if self.log_dirs[log_dir].offline:
                continue
            try:
                OffsetCheckpointFile(log_dir / name).write(entries)
            except StorageError as e:
                # The old checkpoint stays, which only makes the next recovery longer.
                log.warning("%s", e)
