"""TransactionStateManager: the transactional ids of the __transaction_state partitions
this broker leads, cached in memory and kept in the log (Kafka's TransactionStateManager).

- Each cached partition carries its coordinator epoch (the partition's leader epoch when
  this broker became its leader): a write prepared under one epoch is not applied under
  another, and the client is told NOT_COORDINATOR.
- Writes: each transition's record is appended to the id's partition with acks=-1 through
  the ReplicaManager and the manager waits until the ISR has it; only then is the
  transition applied to the cached metadata (`complete_transition_to`). A failed write
  clears the pending state (unless the caller retries), as Kafka does.
- Loading: when this broker becomes leader of a partition, the partition is read from its
  log start to its log end, transaction.state.log.load.buffer.size bytes per step, each
  step a timer task; meanwhile its ids answer COORDINATOR_LOAD_IN_PROGRESS. The last
  record of each id wins; a tombstone removes it. The coordinator is then told which
  transactions were left in PrepareCommit or PrepareAbort, to complete them.
- Unloading: on the loss of leadership the partition's ids leave the cache at once.
- Expiry: every transaction.remove.expired.transaction.cleanup.interval.ms, ids without
  a transaction (Empty, CompleteCommit, CompleteAbort) not updated for
  transactional.id.expiration.ms get a tombstone and leave the cache.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.topics import TRANSACTION_STATE_TOPIC
from odradek.coordinator.partition_loader import PartitionLoad, PartitionLoader
from odradek.coordinator.timer import Time, Timer, TimerTask
from odradek.coordinator.transaction.transaction_log import (
    UnknownKey,
    key_to_bytes,
    partition_for,
    read_key,
    read_value,
    value_to_bytes,
)
from odradek.coordinator.transaction.transaction_metadata import (
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError
from odradek.protocol.records import (
    RecordBatchHeader,
    SimpleRecord,
    build_record_batch,
    decode_records,
)
from odradek.server.config import BrokerConfig

log = logging.getLogger(__name__)

# Tombstones per batch when expiring ids: well under max.message.bytes.
_MAX_TOMBSTONE_BATCH_BYTES = 512 * 1024
_DEFAULT_REQUEST_TIMEOUT_MS = 30_000
# Transactional ids whose __transaction_state partition is remembered (a Java string hash
# in Python costs microseconds, and each transaction asks for it a dozen times).
_PARTITION_CACHE_SIZE = 65_536


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """Kafka's TransactionConfig: the transaction coordinator's settings."""

    transactional_id_expiration_ms: int = 7 * 24 * 60 * 60 * 1000
    transaction_max_timeout_ms: int = 15 * 60 * 1000
    transaction_log_num_partitions: int = 50
    transaction_log_replication_factor: int = 3
    transaction_log_min_isr: int = 2
    transaction_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_log_load_buffer_size: int = 5 * 1024 * 1024
    abort_timed_out_transactions_interval_ms: int = 10_000
    remove_expired_transactional_ids_interval_ms: int = 60 * 60 * 1000
    request_timeout_ms: int = _DEFAULT_REQUEST_TIMEOUT_MS

    @classmethod
    def from_broker_config(cls, config: BrokerConfig) -> TransactionConfig:
        return cls(
            transactional_id_expiration_ms=config.get("transactional.id.expiration.ms"),
            transaction_max_timeout_ms=config.get("transaction.max.timeout.ms"),
            transaction_log_num_partitions=config.get("transaction.state.log.num.partitions"),
            transaction_log_replication_factor=config.get(
                "transaction.state.log.replication.factor"),
            transaction_log_min_isr=config.get("transaction.state.log.min.isr"),
            transaction_log_segment_bytes=config.get("transaction.state.log.segment.bytes"),
            transaction_log_load_buffer_size=config.get(
                "transaction.state.log.load.buffer.size"),
            abort_timed_out_transactions_interval_ms=config.get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            remove_expired_transactional_ids_interval_ms=config.get(
                "transaction.remove.expired.transaction.cleanup.interval.ms"),
            request_timeout_ms=config.get("request.timeout.ms") or _DEFAULT_REQUEST_TIMEOUT_MS,
        )

    def topic_configs(self, replication_factor: int | None = None) -> dict[str, str]:
        """__transaction_state's topic configs, as Kafka creates it. With the replication
        factor the topic gets (capped to the live brokers on a single node), its
        min.insync.replicas is capped to it, or no coordinator write could succeed."""
        min_isr = self.transaction_log_min_isr
        if replication_factor is not None:
            min_isr = max(1, min(min_isr, replication_factor))
        return {"unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
                "cleanup.policy": "compact",
                "min.insync.replicas": str(min_isr),
                "segment.bytes": str(self.transaction_log_segment_bytes)}


@dataclass(frozen=True, slots=True)
class CoordinatorEpochAndTxnMetadata:
    coordinator_epoch: int
    metadata: TransactionMetadata


@dataclass(slots=True)
class TxnMetadataCacheEntry:
    coordinator_epoch: int
    metadata_per_transactional_id: dict[str, TransactionMetadata]


@dataclass(frozen=True, slots=True)
class PendingCompletion:
    """A transaction a previous coordinator left in PrepareCommit or PrepareAbort: its
    markers are to be sent again and its Complete* state written (`transit`)."""

    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransitMetadata


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


# Kafka's mapping of a failed append to what the coordinator's client is told.
_APPEND_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


class BackgroundTasks:
    """asyncio tasks started from timer callbacks and completions, cancelled at shutdown;
    a failure is logged, never lost."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any] | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            log.error("%s: no running event loop; not started", name)
            return None
        task = loop.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def cancel_all(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        self.tasks.clear()

    async def wait_idle(self) -> None:
        """Waits until no task is running (tests)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


class _PartitionLoad(PartitionLoad):
    def __init__(self, partition: int, coordinator_epoch: int,
                 on_loaded: Callable[[int, list[PendingCompletion]], None],
                 started_ms: int) -> None:
        super().__init__(partition, started_ms)
        self.coordinator_epoch = coordinator_epoch
        self.on_loaded = on_loaded
        self.transactions: dict[str, TransactionMetadata] = {}


class TransactionStateManager:
    def __init__(self, config: TransactionConfig, replica_manager: ReplicaManager, time: Time,
                 timer: Timer) -> None:
        self.config = config
        self.replica_manager = replica_manager
        self.time = time
        self.timer = timer
        # Loaded partitions: their coordinator epoch and ids.
        self.transaction_metadata_cache: dict[int, TxnMetadataCacheEntry] = {}
        self.loader: PartitionLoader[_PartitionLoad] = PartitionLoader(
            TRANSACTION_STATE_TOPIC, replica_manager, timer,
            config.transaction_log_load_buffer_size, self._read_batch, self._finish_load)
        self.loading = self.loader.loading
        # Fixed once the topic exists: the coordinator sets it from the topic's metadata.
        self.partition_count = config.transaction_log_num_partitions
        self._partitions: dict[str, tuple[int, int]] = {}  # id: (partition count, partition)
        self.background = BackgroundTasks()
        self._expiry_task: TimerTask | None = None
        self._active = False

    # ---- lifecycle --------------------------------------------------------------------

    def startup(self, enable_transactional_id_expiration: bool = True) -> None:
        self._active = True
        if enable_transactional_id_expiration:
            self._schedule_expiry()

    def shutdown(self) -> None:
        self._active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            self._expiry_task = None
        self.loader.stop_all()
        self.transaction_metadata_cache.clear()
        self.background.cancel_all()

    # ---- where ids live ---------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        count = self.partition_count
        cached = self._partitions.get(transactional_id)
        if cached is not None and cached[0] == count:
            return cached[1]
        partition = partition_for(transactional_id, count)
        if len(self._partitions) >= _PARTITION_CACHE_SIZE:
            self._partitions.clear()
        self._partitions[transactional_id] = (count, partition)
        return partition

    def is_loading(self) -> bool:
        return bool(self.loading)

    def owned_partitions(self) -> set[int]:
        return set(self.transaction_metadata_cache)

    def validate_transaction_timeout_ms(self, txn_timeout_ms: int) -> bool:
        return 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms

    # ---- the cache --------------------------------------------------------------------

    def get_transaction_state(self, transactional_id: str
                              ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """(NONE, the id's metadata or None if unknown), or (the error, None):
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads, NOT_COORDINATOR when this
        broker does not lead it."""
        return self._get_and_maybe_add(transactional_id, None)

    def put_transaction_state_if_not_exists(self, metadata: TransactionMetadata
                                            ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        """Caches a new id unless one is cached; the cached one either way."""
        return self._get_and_maybe_add(metadata.transactional_id, metadata)

    def _get_and_maybe_add(self, transactional_id: str, created: TransactionMetadata | None
                           ) -> tuple[int, CoordinatorEpochAndTxnMetadata | None]:
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        entry = self.transaction_metadata_cache.get(partition)
        if entry is None:
            return ErrorCode.NOT_COORDINATOR, None
        metadata = entry.metadata_per_transactional_id.get(transactional_id)
        if metadata is None and created is not None:
            metadata = entry.metadata_per_transactional_id.setdefault(transactional_id, created)
        if metadata is None:
            return ErrorCode.NONE, None
        return ErrorCode.NONE, CoordinatorEpochAndTxnMetadata(entry.coordinator_epoch, metadata)

    def all_transactions(self) -> Iterable[TransactionMetadata]:
        for entry in self.transaction_metadata_cache.values():
            yield from entry.metadata_per_transactional_id.values()

    def timed_out_transactions(self) -> list[tuple[str, int, int]]:
        """(transactional id, producer id, epoch) of Ongoing transactions older than their
        timeout, without a transition in progress."""
        now = self.time.milliseconds()
        return [(m.transactional_id, m.producer_id, m.producer_epoch)
                for m in self.all_transactions()
                if m.pending_state is None and m.state is TransactionState.ONGOING
                and m.txn_start_timestamp + m.txn_timeout_ms < now]

    def list_transaction_states(self, producer_ids: Iterable[int], state_names: Iterable[str],
                                duration_ms: int = -1
                                ) -> tuple[int, list[str], list[ListedTransaction]]:
        """ListTransactions (KIP-664, KIP-994): (error, unknown state filters,
        transactions). COORDINATOR_LOAD_IN_PROGRESS while a partition loads, as Kafka."""
        if self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [], []
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pids = set(producer_ids)
        now = self.time.milliseconds()
        listed = []
        for m in self.all_transactions():
            if m.state is TransactionState.DEAD:  # being expired
                continue
            if pids and m.producer_id not in pids:
                continue
            if states and m.state not in states:
                continue
            if duration_ms >= 0 and now - m.txn_start_timestamp <= duration_ms:
                continue
            listed.append(ListedTransaction(m.transactional_id, m.producer_id,
                                            m.state.state_name))
        return ErrorCode.NONE, unknown, listed

    # ---- writes -----------------------------------------------------------------------

    def _append(self, partition: int, records: list[tuple[bytes, bytes | None]]
                ) -> tuple[int, tuple[int, int] | None]:
        """Appends with acks=-1: (error, (offset to replicate up to, leader epoch))."""
        now = self.time.milliseconds()
        batch = build_record_batch([SimpleRecord(k, v, (), now) for k, v in records])
        tp = (TRANSACTION_STATE_TOPIC, partition)
        result = self.replica_manager.append_records(-1, {tp: bytearray(batch)})[tp]
        if result.error_code:
            log.warning("appending %d records to %s-%d failed: %s", len(records),
                        TRANSACTION_STATE_TOPIC, partition,
                        result.error_message or ErrorCode(result.error_code).name)
            return result.error_code, None
        leader = self.replica_manager.get_partition(tp)
        epoch = leader.leader_epoch if leader is not None else -1
        return ErrorCode.NONE, (result.last_offset + 1, epoch)

    async def _append_and_wait(self, partition: int, records: list[tuple[bytes, bytes | None]],
                               timeout_ms: int) -> int:
        error, waiting = self._append(partition, records)
        if not error and waiting is not None:
            tp = (TRANSACTION_STATE_TOPIC, partition)
            error = (await self.replica_manager.wait_for_isr({tp: waiting}, timeout_ms))[tp]
        return _APPEND_ERRORS.get(error, error)

    async def append_transaction_to_log(
            self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata,
            retry_on_error: Callable[[int], bool] = lambda error: False) -> int:
        """Writes the transition's record and waits for the ISR; then applies it to the
        cached metadata (NONE), or returns the error the client is told. A write under a
        coordinator epoch that is no longer the partition's is NOT_COORDINATOR."""
        error, entry = self.get_transaction_state(transactional_id)
        if error:
            return error
        if entry is None or entry.coordinator_epoch != coordinator_epoch:
            return ErrorCode.NOT_COORDINATOR
        error = await self._append_and_wait(
            self.partition_for(transactional_id),
            [(key_to_bytes(transactional_id), value_to_bytes(transit))], transit.txn_timeout_ms)
        found, entry = self.get_transaction_state(transactional_id)
        if error == ErrorCode.NONE:
            if found:
                log.info("%s: its metadata is not accessible (%s) after its transition to %s "
                         "was written", transactional_id, ErrorCode(found).name, transit)
                return found
            if (entry is None or entry.coordinator_epoch != coordinator_epoch
                    or entry.metadata.pending_state is not transit.txn_state):
                # The partition moved (and maybe came back) meanwhile.
                log.info("%s: the coordinator epoch changed after its transition to %s was "
                         "written with epoch %d", transactional_id, transit, coordinator_epoch)
                return ErrorCode.NOT_COORDINATOR
            entry.metadata.complete_transition_to(transit)
            return ErrorCode.NONE
        if not found and entry is not None and entry.coordinator_epoch == coordinator_epoch:
            if retry_on_error(error):
                log.info("%s: writing its transition to %s failed (%s); the caller retries",
                         transactional_id, transit.txn_state, ErrorCode(error).name)
            else:
                log.info("%s: writing its transition to %s failed (%s); the transition is "
                         "dropped", transactional_id, transit.txn_state, ErrorCode(error).name)
                entry.metadata.pending_state = None
        return error

    # ---- expiry of transactional ids --------------------------------------------------

    def _should_expire(self, metadata: TransactionMetadata, now: int) -> bool:
        return (metadata.state.is_expiration_allowed and metadata.pending_state is None
                and metadata.txn_last_update_timestamp
                <= now - self.config.transactional_id_expiration_ms)

    async def remove_expired_transactional_ids(self) -> int:
        """Writes tombstones for the expired ids of every loaded partition and removes
        them from the cache; how many were removed."""
        now = self.time.milliseconds()
        removed = 0
        for partition, entry in list(self.transaction_metadata_cache.items()):
            expired: list[tuple[TransactionMetadata, TxnTransitMetadata]] = [
                (m, m.prepare_dead()) for m in list(entry.metadata_per_transactional_id.values())
                if self._should_expire(m, now)]
            size = 0
            chunk: list[tuple[TransactionMetadata, TxnTransitMetadata]] = []
            for i, item in enumerate(expired):
                chunk.append(item)
                size += len(item[0].transactional_id.encode()) + 32
                if size >= _MAX_TOMBSTONE_BATCH_BYTES or i == len(expired) - 1:
                    removed += await self._write_tombstones(partition, entry, chunk)
                    chunk, size = [], 0
        if removed:
            log.info("removed %d expired transactional ids", removed)
        return removed

    async def _write_tombstones(self, partition: int, entry: TxnMetadataCacheEntry,
                                expired: list[tuple[TransactionMetadata, TxnTransitMetadata]]
                                ) -> int:
        error = await self._append_and_wait(
            partition, [(key_to_bytes(m.transactional_id), None) for m, _ in expired],
            self.config.request_timeout_ms)
        removed = 0
        current = self.transaction_metadata_cache.get(partition)
        for metadata, transit in expired:
            tid = metadata.transactional_id
            if (error == ErrorCode.NONE and current is entry
                    and entry.metadata_per_transactional_id.get(tid) is metadata
                    and metadata.pending_state is TransactionState.DEAD
                    and metadata.producer_epoch == transit.producer_epoch):
                del entry.metadata_per_transactional_id[tid]
                removed += 1
            else:
                log.warning("%s: not expired (the tombstone's write: %s, or its metadata "
                            "changed meanwhile)", tid, ErrorCode(error).name)
                metadata.pending_state = None
        return removed

    def _schedule_expiry(self) -> None:
        self._expiry_task = self.timer.schedule(
            self.config.remove_expired_transactional_ids_interval_ms, self._run_expiry)

    def _run_expiry(self) -> None:
        if not self._active:
            return
        try:
            self.background.spawn(self.remove_expired_transactional_ids(),
                                  "remove expired transactional ids")
        finally:
            self._schedule_expiry()

    # ---- loading and unloading --------------------------------------------------------

    def schedule_load_transactions_for_partition(
            self, partition: int, coordinator_epoch: int,
            on_loaded: Callable[[int, list[PendingCompletion]], None]) -> None:
        """Loads the partition step by step on the timer; its ids answer
        COORDINATOR_LOAD_IN_PROGRESS until done. `on_loaded` is told the transactions
        left in Prepare* (with their Complete* transitions prepared)."""
        self._start_load(partition, coordinator_epoch, on_loaded, now=False)

    def load_transactions_for_partition(
            self, partition: int, coordinator_epoch: int,
            on_loaded: Callable[[int, list[PendingCompletion]], None]) -> None:
        """Loads the whole partition now (tests, empty partitions)."""
        self._start_load(partition, coordinator_epoch, on_loaded, now=True)

    def _start_load(self, partition: int, coordinator_epoch: int,
                    on_loaded: Callable[[int, list[PendingCompletion]], None], now: bool) -> None:
        entry = self.transaction_metadata_cache.get(partition)
        if entry is not None and entry.coordinator_epoch == coordinator_epoch:
            return  # loaded already
        previous = self.loading.get(partition)
        if previous is not None and previous.coordinator_epoch == coordinator_epoch and not now:
            return
        self.loader.start(_PartitionLoad(partition, coordinator_epoch, on_loaded,
                                         self.time.milliseconds()), now)

    def _read_batch(self, load: _PartitionLoad, data: bytes, pos: int,
                    header: RecordBatchHeader, start: int) -> None:
        if header.is_control:
            return
        for record in decode_records(data, pos, header):
            if record.offset >= start:
                self._read_record(load, record.key, record.value, record.offset)

    def _read_record(self, load: _PartitionLoad, key: bytes | None, value: bytes | None,
                     offset: int) -> None:
        where = f"{TRANSACTION_STATE_TOPIC}-{load.partition} at offset {offset}"
        if key is None:
            log.warning("%s: a record without a key; skipped", where)
            return
        load.records += 1
        try:
            tid = read_key(key)
            if isinstance(tid, UnknownKey):
                log.warning("%s: a key of unknown version %d; skipped", where, tid.version)
                return
            metadata = read_value(tid, value)
        except ProtocolError as e:
            log.error("%s: a record that does not parse (%s); skipped", where, e)
            return
        if metadata is None:
            load.transactions.pop(tid, None)
        else:
            load.transactions[tid] = metadata

    def _finish_load(self, load: _PartitionLoad) -> None:
        if self.transaction_metadata_cache.pop(load.partition, None) is not None:
            log.info("replaced the cached transactions of %s-%d (new coordinator epoch %d)",
                     TRANSACTION_STATE_TOPIC, load.partition, load.coordinator_epoch)
        self.transaction_metadata_cache[load.partition] = TxnMetadataCacheEntry(
            load.coordinator_epoch, load.transactions)
        now = self.time.milliseconds()
        pending = [PendingCompletion(tid, load.coordinator_epoch, m, m.prepare_complete(now))
                   for tid, m in load.transactions.items()
                   if m.state in (TransactionState.PREPARE_COMMIT,
                                  TransactionState.PREPARE_ABORT)]
        took = now - load.started_ms
        log.log(logging.INFO if load.records else logging.DEBUG,
                "loaded %s-%d at coordinator epoch %d: %d transactional ids (%d to complete) "
                "from %d records in %d ms", TRANSACTION_STATE_TOPIC, load.partition,
                load.coordinator_epoch, len(load.transactions), len(pending), load.records, took)
        load.on_loaded(load.coordinator_epoch, pending)

    def remove_transactions_for_partition(self, partition: int,
                                          coordinator_epoch: int | None = None) -> None:
        """This broker no longer leads the partition: its ids leave the cache."""
        load = self.loading.get(partition)
        if load is not None and (coordinator_epoch is None
                                 or load.coordinator_epoch == coordinator_epoch):
            self.loader.stop(partition)
        entry = self.transaction_metadata_cache.pop(partition, None)
        if entry is not None:
            log.info("unloaded %d transactional ids of %s-%d", len(
                entry.metadata_per_transactional_id), TRANSACTION_STATE_TOPIC, partition)
