"""auto.offset.reset (earliest, latest, none) with each client, for a new group and for a
group whose offsets expired; offset expiry's exact rules on a manual clock.

Kafka's shortest offsets.retention.minutes is one minute, so a real broker cannot expire
an empty group's offsets quickly the way it usually happens. Two things make up for it:

- on the real broker, offsets expire through the per-commit retention of OffsetCommit
  v2-v4 (`retention_time_ms`, which Kafka still honours): the broker's own expiry task,
  tombstones and the Dead group are exercised, and the clients then fall to their
  auto.offset.reset exactly as after any expiry;
- the rules themselves (retention counted from when the group last became empty, kept
  across restarts, an offset's own expire timestamp, a stable group's subscribed topics)
  run on GroupHarness with MockTime, to the millisecond and without sleeping.

The natural one-minute expiry on a real broker is also here, but it takes over a minute:
it runs only with ODRADEK_SLOW_TESTS=1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from group_wire import GroupWire, subscription
from support.broker import BrokerProcess
from support.groups import GroupHarness
from test_groups import SETTINGS, create_topic, produce, wait_for

from odradek.coordinator.group.group_coordinator import LeavingMember
from odradek.coordinator.group.group_metadata import GroupState
from odradek.coordinator.group.group_metadata_manager import OffsetConfig
from odradek.protocol.errors import ErrorCode

EXPIRY_SETTINGS = {**SETTINGS, "offsets.retention.check.interval.ms": "100"}
LIBRARIES = ("confluent-kafka", "kafka-python", "aiokafka")
PRODUCED = 10  # records in each test's topic before its consumer starts
COMMITTED = 4  # what the group had committed before its offsets expired


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("expiry"), EXPIRY_SETTINGS).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


# ---- on a real broker --------------------------------------------------------------------


def consume_and_commit(broker: BrokerProcess, topic: str, group: str, count: int) -> None:
    """A member of the group reads `count` records, commits after them and leaves."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        for _ in range(count):
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
        consumer.commit(offsets=[TopicPartition(topic, 0, count)], asynchronous=False)
    finally:
        consumer.close()


def expire_offsets(broker: BrokerProcess, topic: str, group: str) -> None:
    """The group commits COMMITTED and becomes empty; then its offsets expire and the
    group is gone, as if offsets.retention.minutes had passed."""
    tp = (topic, 0)
    consume_and_commit(broker, topic, group, COMMITTED)
    observer = GroupWire(broker.port)
    try:
        assert observer.committed(group, [tp]) == {tp: COMMITTED}
        assert observer.describe(group).group_state == "Empty"
        # The same offset again, with a retention of its own (OffsetCommit v2).
        assert observer.commit(group, {tp: COMMITTED}, retention_ms=300, version=2) == {
            tp: ErrorCode.NONE}
        wait_for(lambda: observer.committed(group, [tp]) == {tp: -1}, "the offsets to expire",
                 timeout=10)
        assert observer.describe(group).group_state == "Dead"  # and the group went with them
    finally:
        observer.close()


Probe = Callable[[], None]
NO_OFFSET = "no offset"  # what a consumer with auto.offset.reset=none runs into


def first_offset_confluent(broker: BrokerProcess, topic: str, group: str, reset: str,
                           probe: Probe | None) -> int | str:
    from confluent_kafka import KafkaError

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False,
                         "auto.offset.reset": "error" if reset == "none" else reset})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if probe is not None:
                    probe()
                continue
            if msg.error() is not None:
                assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET, msg.error()
                return NO_OFFSET
            return int(msg.offset())
        raise AssertionError("no record and no error")
    finally:
        consumer.close()


def first_offset_kafka_python(broker: BrokerProcess, topic: str, group: str, reset: str,
                              probe: Probe | None) -> int | str:
    from kafka import KafkaConsumer
    from kafka.errors import NoOffsetForPartitionError

    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset=reset)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                batches = consumer.poll(timeout_ms=500, max_records=1)
            except NoOffsetForPartitionError:
                return NO_OFFSET
            for records in batches.values():
                return int(records[0].offset)
            if probe is not None:
                probe()
        raise AssertionError("no record and no error")
    finally:
        consumer.close()


def first_offset_aiokafka(broker: BrokerProcess, topic: str, group: str, reset: str,
                          probe: Probe | None) -> int | str:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import NoOffsetForPartitionError

    async def run() -> int | str:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    enable_auto_commit=False, auto_offset_reset=reset)
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    batches = await consumer.getmany(timeout_ms=500, max_records=1)
                except NoOffsetForPartitionError:
                    return NO_OFFSET
                for records in batches.values():
                    return int(records[0].offset)
                if probe is not None:
                    probe()
            raise AssertionError("no record and no error")
        finally:
            await consumer.stop()

    return asyncio.run(run())


FIRST_OFFSET = {"confluent-kafka": first_offset_confluent,
                "kafka-python": first_offset_kafka_python,
                "aiokafka": first_offset_aiokafka}


@pytest.mark.parametrize("situation", ["new-group", "after-expiry"])
@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
@pytest.mark.parametrize("library", LIBRARIES)
def test_auto_offset_reset(broker: BrokerProcess, library: str, reset: str,
                           situation: str) -> None:
    topic = group = f"reset-{library}-{reset}-{situation}"
    create_topic(broker, topic, 1)
    produce(broker, topic, PRODUCED, partitions=1)
    if situation == "after-expiry":
        expire_offsets(broker, topic, group)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    sent = PRODUCED

    def probe() -> None:
        # Records produced once the consumer sits at the end reach it; when the client
        # resets its position is its own business, so keep producing until one does.
        nonlocal sent
        producer.produce(topic, value=f"probe {sent}".encode(), partition=0)
        producer.flush(10)
        sent += 1

    first = FIRST_OFFSET[library](broker, topic, group, reset,
                                  probe if reset == "latest" else None)
    if reset == "earliest":
        assert first == 0  # not COMMITTED: the expired offsets are gone
    elif reset == "latest":
        assert isinstance(first, int) and first >= PRODUCED
    else:
        assert first == NO_OFFSET


def test_expired_offsets_and_their_group_stay_gone_after_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", EXPIRY_SETTINGS).start()
    try:
        topic = group = "expired-for-good"
        tp = (topic, 0)
        create_topic(broker, topic, 1)
        produce(broker, topic, PRODUCED, partitions=1)
        consume_and_commit(broker, topic, group, 2)
        expire_offsets(broker, topic, group)  # the group had generations 1 and 2
        broker.stop(signal.SIGKILL)
        broker.start()
        wire = GroupWire(broker.port)
        try:
            wait_for(lambda: wire.loaded(group), "the coordinator to load the group")
            assert wire.committed(group, [tp]) == {tp: -1}
            assert wire.describe(group).group_state == "Dead"
            joined = wire.join(group, protocols=[("range", subscription(topic))])
            assert (joined.error_code, joined.generation_id) == (ErrorCode.NONE, 1)  # anew
        finally:
            wire.close()
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


@pytest.mark.skipif(not os.environ.get("ODRADEK_SLOW_TESTS"),
                    reason="waits out offsets.retention.minutes=1 (set ODRADEK_SLOW_TESTS=1)")
def test_an_empty_groups_offsets_expire_after_offsets_retention_minutes(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {
        **SETTINGS, "offsets.retention.minutes": "1",
        "offsets.retention.check.interval.ms": "200"}).start()
    try:
        topic = group = "one-minute"
        tp = (topic, 0)
        create_topic(broker, topic, 1)
        produce(broker, topic, PRODUCED, partitions=1)
        consume_and_commit(broker, topic, group, COMMITTED)
        emptied = time.monotonic()
        wire = GroupWire(broker.port)
        try:
            wait_for(lambda: wire.committed(group, [tp]) == {tp: -1}, "the offsets to expire",
                     timeout=75)
            expired_after = time.monotonic() - emptied
            assert 59.5 <= expired_after < 65, expired_after
            assert wire.describe(group).group_state == "Dead"
        finally:
            wire.close()
        assert first_offset_confluent(broker, topic, group, "earliest", None) == 0
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()


# ---- the rules, on a manual clock --------------------------------------------------------

G = "expiring"
EVENTS = ("events", 0)
MINUTE = 60_000
HOUR = 60 * MINUTE


@pytest.fixture
def h(tmp_path: Path) -> Iterator[GroupHarness]:
    """Offsets kept for an hour, expiry checked every minute."""
    harness = GroupHarness(tmp_path, offset_config=OffsetConfig(
        offsets_retention_ms=HOUR, offsets_retention_check_interval_ms=MINUTE))
    yield harness
    harness.close()


def keep_alive(h: GroupHarness, member_id: str, generation: int, ms: int) -> None:
    for _ in range(ms // 5000):
        h.advance(5000)
        assert h.heartbeat(G, member_id, generation) == ErrorCode.NONE


def leave(h: GroupHarness, member_id: str) -> None:
    error, results = h.coordinator.handle_leave_group(G, [LeavingMember(member_id)])
    assert error == ErrorCode.NONE and results[0][1] == ErrorCode.NONE
    assert h.group(G).is_(GroupState.EMPTY)


def test_the_retention_counts_from_when_the_group_last_became_empty_even_after_a_restart(
        h: GroupHarness) -> None:
    a, = h.form_group(G, 1)
    h.commit(G, {EVENTS: 7}, member_id=a, generation=1)
    leave(h, a)
    h.advance(50 * MINUTE)
    b, = h.form_group(G, 1)  # back before the retention ran out
    keep_alive(h, b, h.group(G).generation_id, 5 * MINUTE)
    leave(h, b)
    emptied = h.time.now
    h.advance(30 * MINUTE)  # 80 minutes since the first time it became empty
    assert h.committed(G) == {EVENTS: 7}
    # The time it became empty is in its metadata record: the restart does not reset it
    # (the offsets would live 30 minutes more) nor lose it (they would expire at once).
    h.restart()
    assert h.group(G).current_state_timestamp == emptied
    h.advance(emptied + HOUR - MINUTE - h.time.now)
    assert h.committed(G) == {EVENTS: 7}
    h.advance(2 * MINUTE)
    assert h.manager.get_group(G) is None
    assert h.committed(G) == {}


def test_an_offsets_own_expire_timestamp_decides_once_the_group_is_empty(
        h: GroupHarness) -> None:
    a, = h.form_group(G, 1)
    start = h.time.now
    soon, late, plain = ("events", 0), ("events", 1), ("events", 2)
    h.commit(G, {soon: 1}, member_id=a, generation=1, expire_timestamp=start + 10 * MINUTE)
    h.commit(G, {late: 2}, member_id=a, generation=1, expire_timestamp=start + 3 * HOUR)
    h.commit(G, {plain: 3}, member_id=a, generation=1)
    # A stable group never loses offsets of topics it consumes, whatever their expiry.
    keep_alive(h, a, 1, 20 * MINUTE)
    assert h.committed(G) == {soon: 1, late: 2, plain: 3}
    leave(h, a)
    emptied = h.time.now
    h.advance(MINUTE)  # the next check: `soon` is long past its own expiry
    assert h.committed(G) == {late: 2, plain: 3}
    h.restart()  # the expire timestamps are in the log (OffsetCommitValue v1)
    h.advance(emptied + HOUR + MINUTE - h.time.now)  # the group's retention: `plain` goes
    assert h.committed(G) == {late: 2}
    h.advance(start + 3 * HOUR - MINUTE - h.time.now)
    assert h.committed(G) == {late: 2}  # its own expiry, later than the group's, holds it
    h.advance(2 * MINUTE)
    assert h.manager.get_group(G) is None


def test_an_offsets_own_retention_from_offset_commit_v2_is_honoured(
        broker: BrokerProcess) -> None:
    """OffsetCommit v2-v4 carry a retention time of their own: 0 expires the offset at the
    next check, the largest there is (Long.MAX_VALUE) keeps it. Regression: commit time
    plus Long.MAX_VALUE overflowed the record's int64 expire timestamp; the commit failed
    to encode, the broker logged a traceback and closed the client's connection."""
    topic = group = "own-retention"
    create_topic(broker, topic, 2)
    forever, at_once = (topic, 0), (topic, 1)
    wire = GroupWire(broker.port)
    try:
        assert wire.commit(group, {forever: 5}, retention_ms=2**63 - 1, version=2) == {
            forever: ErrorCode.NONE}
        assert wire.commit(group, {at_once: 6}, retention_ms=0, version=2) == {
            at_once: ErrorCode.NONE}
        wait_for(lambda: wire.committed(group, [at_once]) == {at_once: -1},
                 "the offset without retention to expire", timeout=10)
        checked = time.monotonic()
        while time.monotonic() - checked < 0.5:  # several more expiry checks
            assert wire.committed(group, [forever]) == {forever: 5}
            time.sleep(0.05)
    finally:
        wire.close()
