"""The `odradek` sink: batch and streaming writes into topics, exactly once by default.

Exactly once (`deliveryGuarantee=exactly-once`): each task writes its rows in a Kafka
transaction it leaves open, and the driver commits the transactions of a micro-batch (or of
a batch write) only when Spark commits it; see transactions.py for the protocol and
commit_log.py for how a restarted query finishes a commit and skips a replayed micro-batch.
Read with `isolation.level=read_committed`, every input row appears once.

At least once (`deliveryGuarantee=at-least-once`, as Spark's Kafka sink): each task writes
with an idempotent producer and waits for every acknowledgement; a retried task or a
replayed micro-batch writes its rows again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .commit_log import CommitLog, CommitRecord
from .options import OdradekOptionError, WriteOptions
from .registry_formats import ColumnEncoder, writer_schema
from .transactions import (
    OpenTransaction,
    SinkTransactionError,
    SinkTransactions,
    transaction_state,
)

log = logging.getLogger(__name__)


@dataclass
class WriteResult(WriterCommitMessage):
    partition_id: int
    records: int
    # Exactly once: the task's open transaction (None when the task wrote nothing).
    transaction: OpenTransaction | None = None


_WRITE_COLUMNS = {"key", "value", "topic", "partition", "headers", "timestamp"}


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    names = {f.name.lower(): f for f in schema.fields}
    unknown = sorted(set(names) - _WRITE_COLUMNS)
    if unknown:
        raise OdradekOptionError(f"cannot write columns {unknown}: the odradek sink takes key, "
                                 "value, topic, partition, headers and timestamp")
    if "value" not in names:
        raise OdradekOptionError("the odradek sink needs a value column")
    formatted = {f.column for f in options.formats}  # any type, encoded by its schema
    for column in ("key", "value"):
        if column in formatted:
            continue
        if column in names and names[column].dataType.typeName() not in ("binary", "string"):
            raise OdradekOptionError(f"column {column} must be binary or string, not "
                                     f"{names[column].dataType.simpleString()}")
    if "topic" in names and names["topic"].dataType.typeName() != "string":
        raise OdradekOptionError("column topic must be a string")
    if "partition" in names and names["partition"].dataType.typeName() != "integer":
        raise OdradekOptionError("column partition must be an int")
    if "timestamp" in names and names["timestamp"].dataType.typeName() != "timestamp":
        raise OdradekOptionError("column timestamp must be a timestamp")
    if "headers" in names:
        text = names["headers"].dataType.simpleString()
        if text not in ("array<struct<key:string,value:binary>>",
                        "array<struct<key:string,value:string>>"):
            raise OdradekOptionError(
                f"column headers must be array<struct<key string, value binary>>, not {text}")
    if options.topic is None and "topic" not in names:
        raise OdradekOptionError("give the topic: a topic option or a topic column")


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _column(array: pa.Array) -> list[Any]:
    if pa.types.is_timestamp(array.type):
        # The record's CreateTime: milliseconds since the epoch.
        micros = array.cast(pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
        return [None if v is None else v // 1000 for v in micros.to_pylist()]
    return array.to_pylist()


def _records(options: WriteOptions, iterator: Iterator[pa.RecordBatch], partition_id: int,
             encoders: dict[str, ColumnEncoder]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(topic, produce() keyword arguments) of each row."""
    count = 0
    for batch in iterator:
        columns = {name.lower(): _column(batch.column(i))
                   for i, name in enumerate(batch.schema.names)}
        for name, encoder in encoders.items():
            columns[name] = encoder.encode(
                columns[name], lambda i, n=count: f"row {n + i} of task {partition_id}")
        for i in range(batch.num_rows):
            topic = options.topic or columns["topic"][i]
            if topic is None:
                raise ValueError(f"row {count + i} of task {partition_id} has no topic")
            kwargs: dict[str, Any] = {"value": _bytes(columns["value"][i])}
            if "key" in columns:
                kwargs["key"] = _bytes(columns["key"][i])
            if "partition" in columns and columns["partition"][i] is not None:
                kwargs["partition"] = columns["partition"][i]
            if "timestamp" in columns and columns["timestamp"][i] is not None:
                kwargs["timestamp"] = columns["timestamp"][i]
            if "headers" in columns and columns["headers"][i]:
                kwargs["headers"] = [(h["key"], _bytes(h["value"]))
                                     for h in columns["headers"][i]]
            yield topic, kwargs
        count += batch.num_rows


# Idle producers of this Python worker by settings (the transactional id among them): a
# worker runs one task at a time and lives across tasks, so the next task reuses the
# connections and the producer id (a new producer's first flush or init_transactions takes
# 50-500 ms; Spark's Kafka sink caches its producers too).
_PRODUCERS: dict[str, tuple[Any, float]] = {}   # settings -> (producer, when kept)
_KEPT = 8   # at most this many kept per worker
# A producer no task has used for this long is dropped: one left to a cluster that went
# away would otherwise keep reconnecting (and logging) for as long as the worker lives.
_IDLE_S = 60.0
_LOCK = threading.Lock()
_reaper: list[threading.Thread] = []


def _keep(key: str, producer: Any) -> None:
    with _LOCK:
        _PRODUCERS[key] = (producer, time.monotonic())
        while len(_PRODUCERS) > _KEPT:
            del _PRODUCERS[next(iter(_PRODUCERS))]
        if not _reaper:
            _reaper.append(threading.Thread(target=_reap, name="odradek-sink-reaper",
                                            daemon=True))
            _reaper[0].start()


def _take(key: str) -> Any:
    with _LOCK:
        entry = _PRODUCERS.pop(key, None)
    return None if entry is None else entry[0]


def _reap() -> None:
    while True:
        time.sleep(min(_IDLE_S / 4, 1.0))
        now = time.monotonic()
        with _LOCK:
            idle = [k for k, (_, since) in _PRODUCERS.items() if now - since > _IDLE_S]
            dropped = [_PRODUCERS.pop(k) for k in idle]
        # Destroyed here, outside the lock: a kept producer has nothing left to deliver, and
        # an open transaction of its is the driver's to end, as for any producer dropped.
        dropped.clear()


def _ready_for_next(producer: Any, options: WriteOptions, transactional_id: str) -> bool:
    """Readies a kept transactional producer for its next transaction. The driver ended
    the last one behind librdkafka's back; ending it the same way from the producer (the
    coordinator answers a repeated EndTxn with the same outcome) makes librdkafka ready
    again. A transaction the driver has not decided is never touched: the producer is
    dropped, and a new one's init_transactions aborts it. A producer fenced meanwhile fails
    here and is dropped."""
    state = transaction_state(options.client, transactional_id)
    try:
        if state == "CompleteCommit":
            producer.commit_transaction(30)
            return True
        if state == "CompleteAbort":
            producer.abort_transaction(30)
            return True
    except Exception as e:   # KafkaException: fenced, or the cluster went away
        log.info("not reusing the producer of %s: %s", transactional_id, e)
    return False


def write_task(options: WriteOptions, iterator: Iterator[pa.RecordBatch],
               partition_id: int | None = None,
               encoders: dict[str, ColumnEncoder] | None = None) -> WriteResult:
    """One write task, batch or micro-batch: sends its rows (acks=all), waits for every
    acknowledgement and fails with the broker's error if any delivery failed. Exactly once,
    the rows go into a transaction of the task's own that is left open for the driver.
    `partition_id` is Spark's task partition id, unless given."""
    from confluent_kafka import Producer
    from pyspark import TaskContext

    if partition_id is None:
        context = TaskContext.get()
        partition_id = context.partitionId() if context is not None else 0
    errors: list[str] = []
    first: list[tuple[str, int, int]] = []   # the first delivery: where the transaction starts

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        elif not first:
            first.append((msg.topic(), msg.partition(), msg.offset()))

    settings: dict[str, Any] = {"acks": "all", **options.client, "enable.idempotence": True}
    transactional_id = (f"{options.transactional_id_prefix}-{partition_id}"
                        if options.exactly_once else None)
    if transactional_id is not None:
        # reconnect.backoff.ms: librdkafka waits half of it before connecting to the broker
        # it learned from the bootstrap server; 100 ms made init_transactions take 55 ms,
        # for each task whose producer was kept by another worker.
        settings = {"transaction.timeout.ms": options.transaction_timeout_ms,
                    "reconnect.backoff.ms": 10, **settings, "transactional.id": transactional_id}
    key = json.dumps(settings, sort_keys=True)
    producer: Any = None
    count = 0
    try:
        for topic, kwargs in _records(options, iterator, partition_id, encoders or {}):
            if producer is None:
                producer = _take(key)
                if transactional_id is None:
                    producer = producer or Producer(settings)
                else:
                    if producer is None or not _ready_for_next(producer, options,
                                                               transactional_id):
                        # Fences an earlier attempt of this task and aborts what it left open.
                        producer = Producer(settings)
                        producer.init_transactions(120)
                    producer.begin_transaction()
            while True:
                try:
                    producer.produce(topic, on_delivery=delivered, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
            if errors:
                break
        remaining = producer.flush(120) if producer is not None else 0
        if errors or remaining:
            detail = errors[0] if errors else f"{remaining} records unacknowledged"
            raise RuntimeError(f"odradek sink task {partition_id} failed after {count} rows "
                               f"({len(errors)} delivery errors): {detail}")
    except BaseException:
        if transactional_id is not None and producer is not None:
            try:   # frees the partitions' last stable offset now, not at the next attempt
                producer.abort_transaction(10)
            except Exception as e:   # fenced already, or the cluster is gone
                log.info("task %d could not abort its transaction: %s", partition_id, e)
        raise
    if producer is not None:
        _keep(key, producer)   # only a producer that delivered everything is kept
    if transactional_id is None:
        return WriteResult(partition_id, count)
    # The transaction stays open: the driver ends it (a producer dropped from the cache
    # closes without ending it).
    if not first:
        return WriteResult(partition_id, 0)
    topic, partition, offset = first[0]
    return WriteResult(partition_id, count,
                       OpenTransaction(transactional_id, topic, partition, offset))


def _opened(messages: list[WriterCommitMessage | None]) -> list[OpenTransaction]:
    return [m.transaction for m in messages
            if isinstance(m, WriteResult) and m.transaction is not None]


class Committer:
    """The driver's side of an exactly-once write (transactions.py). With a commit log (a
    streaming query, or a foreachBatch write given checkpointLocation and batchId) a
    micro-batch is committed once even when Spark replays it."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.log = (CommitLog(options.checkpoint_location)
                    if options.checkpoint_location else None)

    def recover(self) -> None:
        """Completes the commit of a micro-batch that a driver died in the middle of. Runs
        before the tasks of a (re)started query open their transactions."""
        latest = self.log.latest() if self.log else None
        if latest is None or latest.committed:
            return
        assert self.log is not None
        with SinkTransactions(self.options.client) as client:
            try:
                client.end(latest.transactions, commit=True)
            except SinkTransactionError as e:
                raise SinkTransactionError(
                    f"the odradek sink was committing micro-batch {latest.batch} when the "
                    f"query stopped, and cannot finish: {e}. Rows of that micro-batch are "
                    f"missing from the output. Delete {self.log.path(latest.batch)} to go on: "
                    "Spark then writes the micro-batch again, and tasks whose transactions "
                    "were committed write their rows a second time") from e
        self.log.write(CommitRecord(latest.batch, True, latest.transactions))
        log.info("completed the commit of micro-batch %d", latest.batch)

    def commit(self, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        opened = _opened(messages)
        with SinkTransactions(self.options.client) as client:
            if self.log is not None and batch_id is not None:
                self.recover()
                latest = self.log.latest()
                if latest is not None and batch_id <= latest.batch:
                    # A replay of a micro-batch committed before the driver died.
                    log.info("micro-batch %d was committed before: aborting its replay",
                             batch_id)
                    client.end(self._resolvable(client, opened), commit=False)
                    return
            handles = client.resolve(opened)
            if self.log is not None and batch_id is not None:
                self.log.write(CommitRecord(batch_id, False, tuple(handles)))
            client.end(handles, commit=True)
            if self.log is not None and batch_id is not None:
                self.log.write(CommitRecord(batch_id, True, tuple(handles)))
                # Transactions of tasks that a crashed run had and this one has not (fewer
                # tasks now) stay open until fenced; they hold back read_committed readers.
                ours = {h.transactional_id for h in handles}
                left = [t for t in client.open_transactions(self.options.transactional_id_prefix)
                        if t not in ours]
                if left:
                    log.info("aborting transactions a previous run left open: %s", left)
                    client.fence(left, self.options.transaction_timeout_ms)

    @staticmethod
    def _resolvable(client: SinkTransactions, opened: list[OpenTransaction]) -> list[Any]:
        handles = []
        for o in opened:
            try:
                handles += client.resolve([o])
            except SinkTransactionError as e:   # gone already: nothing to abort
                log.info("%s", e)
        return handles

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Aborts the transactions of the tasks that finished (best effort: the next attempt
        of a task, or the coordinator's timeout, aborts the others)."""
        opened = _opened(messages)
        if not opened:
            return
        with SinkTransactions(self.options.client) as client:
            client.end(self._resolvable(client, opened), commit=False)


class _TopicWriter:
    """What the batch and the streaming writer share: the options, the schemas of keys and
    values written through a registry (registered before any task runs), a commit the last
    run left unfinished completed before any task runs, and the tasks' write."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schemas = {f.column: (f, writer_schema(f, schema[f.column].dataType),
                                   schema[f.column].dataType) for f in options.formats}
        if options.exactly_once:
            Committer(options).recover()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        encoders = {column: ColumnEncoder(*spec) for column, spec in self.schemas.items()}
        return write_task(self.options, iterator, encoders=encoders)


class OdradekBatchWriter(_TopicWriter, DataSourceArrowWriter):
    """A DataFrame written to topics: exactly once, the driver commits every task's
    transaction when Spark commits the job, and aborts them when it aborts it."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            Committer(self.options).commit(messages, self.options.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            Committer(self.options).abort(messages)


class OdradekStreamWriter(_TopicWriter, DataSourceStreamArrowWriter):
    """Each micro-batch written to topics; exactly once, its transactions are committed by
    commit(messages, batchId), once per micro-batch even when Spark replays it."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            Committer(self.options).commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            Committer(self.options).abort(messages)
