"""The exactly-once sink's commit protocol against a real broker, without Spark's scheduler:
write tasks (sink.write_task, the code Spark's Python workers run) leave their transactions
open, and the driver's Committer commits them once per micro-batch, however the driver died.

Each case stops the driver where a crash would (after the commit record, after some EndTxns,
before the record) and checks with read_committed and read_uncommitted consumers what is
visible, and that nothing is left open to hold back the last stable offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql.types import BinaryType, StructField, StructType
from support.broker import BrokerProcess
from support.spark import consume_all, create_topic
from support.wait import wait_until

from odradek.spark import sink
from odradek.spark.commit_log import CommitLog, CommitRecord
from odradek.spark.options import OdradekOptionError, WriteOptions, parse_write_options
from odradek.spark.sink import Committer, OdradekStreamWriter, WriteResult, write_task
from odradek.spark.transactions import SinkTransactionError, SinkTransactions

pytestmark = pytest.mark.timeout(120)

VALUE_ONLY = StructType([StructField("value", BinaryType())])


def options(broker: BrokerProcess, topic: str, checkpoint: Path) -> WriteOptions:
    return parse_write_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                                "checkpointLocation": str(checkpoint)}, streaming=True)


def rows(*values: str) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"value": [v.encode() for v in values]})]


def task(opts: WriteOptions, partition_id: int, *values: str) -> WriteResult:
    return write_task(opts, iter(rows(*values)), partition_id)


def values(broker: BrokerProcess, topic: str, isolation: str = "read_committed") -> list[str]:
    return sorted(r[4].decode() for r in consume_all(broker.bootstrap, topic, isolation))


def stable(broker: BrokerProcess, topic: str) -> bool:
    """No open transaction holds the partition back: the last stable offset is the high
    watermark."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = {TopicPartition(topic, 0): OffsetSpec.latest()}
    high = admin.list_offsets(tp)[TopicPartition(topic, 0)].result().offset
    lso = admin.list_offsets(tp, isolation_level=IsolationLevel.READ_COMMITTED)[
        TopicPartition(topic, 0)].result().offset
    return bool(lso == high)


def test_a_micro_batch_is_visible_once_committed(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    results: list[Any] = [task(opts, 0, "a", "b"), task(opts, 1, "c"), task(opts, 2), None]
    assert [r.records for r in results[:3]] == [2, 1, 0] and results[2].transaction is None
    # Written, not committed: read_uncommitted sees the rows, read_committed nothing.
    assert values(broker, topic, "read_uncommitted") == ["a", "b", "c"]
    assert values(broker, topic) == [] and not stable(broker, topic)
    Committer(opts).commit(results, 0)
    assert values(broker, topic) == ["a", "b", "c"] and stable(broker, topic)
    record = CommitLog(str(tmp_path)).latest()
    assert record is not None and record.batch == 0 and record.committed
    assert sorted(h.transactional_id for h in record.transactions) == [
        f"{opts.transactional_id_prefix}-0", f"{opts.transactional_id_prefix}-1"]
    # The next micro-batch's tasks reuse their producers: no new init_transactions.
    kept = {id(p) for p, _ in sink._PRODUCERS.values()}
    Committer(opts).commit([task(opts, 0, "d"), task(opts, 1, "e")], 1)
    assert {id(p) for p, _ in sink._PRODUCERS.values()} == kept
    assert values(broker, topic) == ["a", "b", "c", "d", "e"] and stable(broker, topic)


def test_producers_no_task_uses_are_dropped(broker: BrokerProcess, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    monkeypatch.setattr(sink, "_IDLE_S", 0.5)
    Committer(opts).commit([task(opts, 0, "a")], 0)
    ours = f"{opts.transactional_id_prefix}-0"
    assert any(ours in key for key in sink._PRODUCERS)
    wait_until(lambda: not any(ours in key for key in sink._PRODUCERS), 10,
               "the idle producer dropped")
    # The next task makes a new producer, fencing nothing that matters: the commit holds.
    Committer(opts).commit([task(opts, 0, "b")], 1)
    assert values(broker, topic) == ["a", "b"] and stable(broker, topic)


def test_a_driver_that_died_mid_commit_is_completed_and_the_replay_aborted(
        broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    Committer(opts).commit([task(opts, 0, "first")], 0)
    results = [task(opts, 0, "x1", "x2"), task(opts, 1, "y1")]
    # The driver recorded the commit and ended one transaction, then died: Spark has no
    # record of micro-batch 1 being committed.
    with SinkTransactions(opts.client) as client:
        handles = client.resolve([r.transaction for r in results if r.transaction])
        log = CommitLog(str(tmp_path))
        log.write(CommitRecord(1, False, tuple(handles)))
        client.end(handles[:1], commit=True)
    assert values(broker, topic) == ["first", "x1", "x2"]
    # The restarted query's writer completes the commit before any task runs.
    OdradekStreamWriter(opts, VALUE_ONLY)
    assert values(broker, topic) == ["first", "x1", "x2", "y1"]
    latest = log.latest()
    assert latest is not None and latest.committed and latest.batch == 1
    # Spark replays micro-batch 1: its tasks write the rows again, and the commit aborts them.
    replay = [task(opts, 0, "x1", "x2"), task(opts, 1, "y1")]
    Committer(opts).commit(replay, 1)
    assert values(broker, topic) == ["first", "x1", "x2", "y1"] and stable(broker, topic)
    assert values(broker, topic, "read_uncommitted") == sorted(
        ["first", "x1", "x2", "y1", "x1", "x2", "y1"])


def test_transactions_left_open_by_a_crashed_run_are_aborted(broker: BrokerProcess,
                                                             tmp_path: Path) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    # A run with three tasks wrote micro-batch 0 and died before the commit.
    for partition_id in range(3):
        task(opts, partition_id, f"lost-{partition_id}")
    assert not stable(broker, topic)
    # The next run replays it with two tasks: the third task's transaction stays open until
    # the commit fences it.
    Committer(opts).commit([task(opts, 0, "a"), task(opts, 1, "b")], 0)
    assert values(broker, topic) == ["a", "b"] and stable(broker, topic)
    with SinkTransactions(opts.client) as client:
        assert client.open_transactions(opts.transactional_id_prefix) == []


def test_a_fenced_task_cannot_be_committed(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    zombie = task(opts, 0, "zombie")
    newer = task(opts, 0, "newer")   # the next attempt of task 0 fences the first
    with pytest.raises(SinkTransactionError, match="no longer open"):
        Committer(opts).commit([zombie], 0)
    Committer(opts).commit([newer], 0)
    assert values(broker, topic) == ["newer"]


def test_a_commit_that_cannot_be_completed_says_what_was_lost(broker: BrokerProcess,
                                                              tmp_path: Path) -> None:
    topic = create_topic(broker, 1)
    opts = options(broker, topic, tmp_path)
    result = task(opts, 0, "gone")
    with SinkTransactions(opts.client) as client:
        handles = client.resolve([result.transaction] if result.transaction else [])
        CommitLog(str(tmp_path)).write(CommitRecord(0, False, tuple(handles)))
        # The coordinator aborted it before the restart (as after transaction.timeout.ms).
        client.fence([handles[0].transactional_id], opts.transaction_timeout_ms)
    with pytest.raises(SinkTransactionError, match=r"micro-batch 0 .* Delete .*0\.json"):
        OdradekStreamWriter(opts, VALUE_ONLY)
    assert values(broker, topic) == []


@pytest.mark.parametrize(("given", "message"), [
    ({"deliveryGuarantee": "maybe-once"}, "must be exactly-once or at-least-once"),
    ({"kafka.transactional.id": "t"}, "names its tasks' transactions"),
    ({"kafka.enable.idempotence": "false"}, "needs the idempotent producer"),
    ({"batchId": "3"}, "give both or neither"),
    ({"checkpointLocation": "/tmp/x"}, "give both or neither"),
    ({"deliveryGuarantee": "at-least-once", "batchId": "3"}, "is for deliveryGuarantee"),
    ({"transactionalIdPrefix": "a b"}, "may hold letters"),
    ({"kafka.transaction.timeout.ms": "soon"}, "number of milliseconds"),
])
def test_write_option_errors(given: dict[str, str], message: str) -> None:
    with pytest.raises(OdradekOptionError, match=message):
        parse_write_options({"kafka.bootstrap.servers": "x:1", "topic": "t", **given})


def test_streaming_exactly_once_needs_the_checkpoint() -> None:
    with pytest.raises(OdradekOptionError, match="needs the query's checkpointLocation"):
        parse_write_options({"kafka.bootstrap.servers": "x:1", "topic": "t"}, streaming=True)
    same = [parse_write_options({"kafka.bootstrap.servers": "x:1", "topic": "t",
                                 "checkpointLocation": "/data/q"}, streaming=True)
            .transactional_id_prefix for _ in range(2)]
    other = parse_write_options({"kafka.bootstrap.servers": "x:1", "topic": "t",
                                 "checkpointLocation": "/data/r"}, streaming=True)
    assert same[0] == same[1] != other.transactional_id_prefix
