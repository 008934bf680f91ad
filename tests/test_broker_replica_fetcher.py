"""The follower side of replication (odradek.broker.replica_fetcher), with real parts: the
leader is a real single-node broker process on loopback, written to by librdkafka; the
follower is a real Partition over a real Log in a directory of the test's own, fetched
into by a ReplicaFetcherManager over a real InterBrokerClient.

The single-node broker (node 1) leads its partitions in leader epoch 0 and never changes
it by itself. Where a test needs a newer leader epoch (a leader elected again, as a
controller would write it), it stops the broker, sets the partition's leader epoch in the
broker's metadata file (odradek-metadata.json) and starts it again: the broker then leads
in that epoch, stamps it on new batches and records it in its leader epoch cache.

Without a broker: offset_truncation_state (over a real Log) and FetcherConfig.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol, TypeVar

import pytest
from confluent_kafka import Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess

from odradek.broker.inter_broker_client import InterBrokerClient
from odradek.broker.partition import Partition
from odradek.broker.replica_fetcher import (
    FetcherConfig,
    InitialFetchState,
    ReplicaFetcherManager,
    offset_truncation_state,
)
from odradek.cluster.metadata import PartitionState
from odradek.protocol.primitives import ZERO_UUID
from odradek.protocol.records import SimpleRecord, build_record_batch, iter_batch_headers
from odradek.storage.config import LogConfig
from odradek.storage.leader_epoch import EpochEntry, read_checkpoint
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager, LogManagerConfig

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")
HOST = "127.0.0.1"
LEADER = 1  # the single-node broker's node.id (its default)
FOLLOWER = 2
TOPIC = "replicated"
TP = (TOPIC, 0)
TEST_TIMEOUT_S = 40  # no test body waits longer than this
WAIT_S = 15  # the longest wait for one condition

Batch = tuple[int, int, int, bytes]  # base offset, last offset, leader epoch, the bytes


# ---- running and waiting ------------------------------------------------------------------


def run(body: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner() as runner:
        return runner.run(asyncio.wait_for(body(), TEST_TIMEOUT_S))


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


# ---- the leader: a broker process -----------------------------------------------------------


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "leader").start()
    try:
        yield broker
    finally:
        broker.kill()
    log = broker.log_text()
    assert "Traceback" not in log, log  # the follower's requests never broke the leader


def create_topic(broker: BrokerProcess, partitions: int = 1) -> uuid.UUID:
    """Creates TOPIC on the broker; returns its topic id."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
    described = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(str(described.topic_id) + "=="))


def produce(broker: BrokerProcess, values: list[bytes], partition: int = 0, *,
            one_batch: bool = False) -> None:
    """Produces `values` in order: one batch each, or all in one batch."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False,
                         "linger.ms": 1000 if one_batch else 0, "message.timeout.ms": 30_000})
    errors: list[Any] = []
    for value in values:
        producer.produce(TOPIC, value=value, partition=partition,
                         on_delivery=lambda err, msg: err and errors.append(err))
        if not one_batch:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    assert not errors, errors


def delete_records(broker: BrokerProcess, before: int, partition: int = 0) -> int:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (future,) = admin.delete_records([TopicPartition(TOPIC, partition, before)]).values()
    return future.result(30).low_watermark


def restart_in_epoch(broker: BrokerProcess, epoch: int, partition: int = 0) -> None:
    """Restarts the broker leading the partition in `epoch`, as if elected again."""
    broker.stop()
    path = broker.data_dir / "odradek-metadata.json"
    data = json.loads(path.read_text())
    data["topics"][TOPIC]["partitions"][str(partition)]["leader_epoch"] = epoch
    path.write_text(json.dumps(data))
    broker.start()


def batches_in(directory: Path, from_offset: int = 0) -> list[Batch]:
    """The batches of a log directory's segments holding offsets >= from_offset."""
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for pos, h in iter_batch_headers(data):
            if h.last_offset >= from_offset:
                out.append((h.base_offset, h.last_offset, h.partition_leader_epoch,
                            data[pos:pos + h.size_in_bytes]))
    return out


def leader_dir(broker: BrokerProcess, partition: int = 0) -> Path:
    return broker.data_dir / f"{TOPIC}-{partition}"


def leader_batches(broker: BrokerProcess, partition: int = 0, from_offset: int = 0
                   ) -> list[Batch]:
    return batches_in(leader_dir(broker, partition), from_offset)


def leader_epochs(broker: BrokerProcess, partition: int = 0) -> list[EpochEntry]:
    return read_checkpoint(leader_dir(broker, partition) / "leader-epoch-checkpoint")


def leader_end(broker: BrokerProcess, partition: int = 0) -> int:
    batches = leader_batches(broker, partition)
    return batches[-1][1] + 1 if batches else 0


# ---- the follower: a Partition over a Log ----------------------------------------------------


class RecordingPartition(Partition):
    """A real Partition that also notes the truncations the fetcher asks of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.truncations: list[tuple[str, int]] = []

    def truncate_to(self, offset: int) -> None:
        self.truncations.append(("to", offset))
        super().truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.truncations.append(("fully", offset))
        super().truncate_fully_and_start_at(offset)


class Follower:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs = LogManager(LogManagerConfig(log_dirs=(directory,)), LogConfig())
        self.logs.startup(background=False)

    def partition(self, topic_id: uuid.UUID, leader_epoch: int, index: int = 0
                  ) -> RecordingPartition:
        log = self.logs.get_or_create_log(TOPIC, index)
        partition = RecordingPartition(TOPIC, index, topic_id, log, node_id=FOLLOWER)
        follow(partition, leader_epoch)
        return partition

    def close(self) -> None:
        self.logs.shutdown()


def follow(partition: Partition, leader_epoch: int) -> None:
    partition.make_follower(PartitionState(replicas=[LEADER, FOLLOWER], leader=LEADER,
                                           leader_epoch=leader_epoch,
                                           isr=[LEADER, FOLLOWER]))


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[Follower]:
    f = Follower(tmp_path / "follower")
    try:
        yield f
    finally:
        f.close()


def follower_batches(partition: Partition) -> list[Batch]:
    return batches_in(partition.log.directory)


class Listening(Protocol):
    port: int


def new_manager(broker: Listening, clients: list[InterBrokerClient] | None = None,
                **settings: int) -> ReplicaFetcherManager:
    config = FetcherConfig(**{"fetch_backoff_ms": 50, "fetch_wait_max_ms": 200, **settings})

    def client(client_id: str) -> InterBrokerClient:
        made = InterBrokerClient(client_id=client_id,
                                 request_timeout_ms=config.socket_timeout_ms,
                                 reconnect_backoff_max_ms=200)
        if clients is not None:
            clients.append(made)
        return made

    # The broker's port is looked up on every request: a restart keeps it.
    return ReplicaFetcherManager(
        FOLLOWER, lambda broker_id: (HOST, broker.port) if broker_id == LEADER else None,
        config, client_factory=client)


def add(manager: ReplicaFetcherManager, partition: Partition, leader_epoch: int) -> None:
    manager.add_partitions({partition.tp: InitialFetchState(LEADER, leader_epoch, partition)})


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def own_batch(base_offset: int, count: int, epoch: int, prefix: str) -> bytes:
    """A batch as a leader of `epoch` other than the broker would have written it."""
    now = int(time.time() * 1000)
    return build_record_batch(
        [SimpleRecord(None, f"{prefix}-{i}".encode(), timestamp=now) for i in range(count)],
        base_offset=base_offset, partition_leader_epoch=epoch)


async def caught_up(partition: Partition, broker: BrokerProcess, end: int) -> None:
    """Waits until the follower has the leader's log up to `end`, then checks that it is
    the leader's, batch for batch."""
    await wait_until(lambda: partition.log_end_offset == end,
                     f"the follower's log end to reach {end}")
    assert leader_end(broker) == end
    start = partition.log_start_offset
    assert batches_in(partition.log.directory, start) == leader_batches(broker, from_offset=start)


# ---- 1. catching up -----------------------------------------------------------------------


@pytest.mark.parametrize("by_id", [True, False], ids=["topic-id", "topic-name"])
def test_follower_catches_up_and_long_poll_brings_new_records(
        leader: BrokerProcess, follower: Follower, by_id: bool) -> None:
    """The follower's log becomes the leader's, batch for batch (same offsets, same leader
    epochs, same bytes), its high watermark follows the leader's, and records produced
    while it waits in a long-polling Fetch arrive at once, not at the end of the wait.
    A partition whose topic id is unknown is fetched by name (Fetch v12)."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 10))  # ten batches of one record
    produce(leader, values("b", 5), one_batch=True)  # and one of five
    produced = leader_batches(leader)
    assert [(b[0], b[1], b[2]) for b in produced] == [
        *((i, i, 0) for i in range(10)), (10, 14, 0)]

    async def body() -> None:
        partition = follower.partition(topic_id if by_id else ZERO_UUID, 0)
        assert partition.high_watermark == 0
        # A long fetch.wait: a long poll that is not woken by the produce shows as a wait.
        manager = new_manager(leader, fetch_wait_max_ms=10_000)
        try:
            add(manager, partition, 0)
            await caught_up(partition, leader, 15)
            assert follower_batches(partition) == produced
            assert partition.log.leader_epoch_cache.entries == [EpochEntry(0, 0)]
            assert leader_epochs(leader) == [EpochEntry(0, 0)]
            await wait_until(lambda: partition.high_watermark == 15, "the high watermark")
            status = manager.partition_status(TP)
            assert status is not None
            assert (status.leader_id, status.leader_epoch, status.state, status.fetch_offset,
                    status.lag) == (LEADER, 0, "fetching", 15, 0)

            # Now the fetcher waits in a Fetch at the leader's log end.
            started = time.monotonic()
            await asyncio.to_thread(produce, leader, values("c", 3), one_batch=True)
            await caught_up(partition, leader, 18)
            assert time.monotonic() - started < 5, "the long poll was not woken"
            await wait_until(lambda: partition.high_watermark == 18, "the high watermark")
            assert follower_batches(partition) == leader_batches(leader)
            assert follower_batches(partition)[-1][:3] == (15, 17, 0)
            assert partition.truncations == []
        finally:
            await manager.shutdown()

    run(body)


# ---- 2. truncation (KIP-101/279) ------------------------------------------------------------


def test_follower_truncates_records_the_leader_lost(leader: BrokerProcess,
                                                    follower: Follower) -> None:
    """KIP-101: the follower got offsets 5-7 from the leader of epoch 0, which lost them
    (unflushed when it crashed) and leads again in epoch 2 from offset 5. Asked where
    epoch 0 ends, the leader answers 5: the follower truncates there, then catches up."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 5))
    partition = follower.partition(topic_id, 2)
    for batch in leader_batches(leader):  # what the follower had fetched...
        partition.append_records_as_follower(batch[3])
    partition.append_records_as_follower(own_batch(5, 3, 0, "lost"))  # ...and lost later
    assert (partition.log_end_offset, partition.latest_epoch) == (8, 0)

    restart_in_epoch(leader, 2)
    produce(leader, values("b", 4))  # offsets 5-8, one batch each, in epoch 2
    assert leader_epochs(leader) == [EpochEntry(0, 0), EpochEntry(2, 5)]
    assert [b[:3] for b in leader_batches(leader, from_offset=5)] == [
        (5, 5, 2), (6, 6, 2), (7, 7, 2), (8, 8, 2)]

    async def body() -> None:
        manager = new_manager(leader)
        try:
            add(manager, partition, 2)
            status = manager.partition_status(TP)
            assert status is not None and status.state == "truncating"
            await caught_up(partition, leader, 9)
            # Fetching from 8 without truncating would have kept offsets 5-7 of epoch 0.
            assert partition.truncations == [("to", 5)]
            assert follower_batches(partition) == leader_batches(leader)
            assert partition.log.leader_epoch_cache.entries == leader_epochs(leader)
            await wait_until(lambda: partition.high_watermark == 9, "the high watermark")
        finally:
            await manager.shutdown()

    run(body)


# An epoch that wrote nothing: this broker led briefly and appended nothing (Kafka's
# truncateTo drops it from the epoch cache even at the log end).
@pytest.mark.parametrize("records_in_epoch_3", [1, 0],
                         ids=["epoch-3-wrote-one-record", "epoch-3-wrote-nothing"])
def test_follower_truncates_an_epoch_the_leader_never_had(
        leader: BrokerProcess, follower: Follower, records_in_epoch_3: int) -> None:
    """KIP-279: the follower led epoch 1 (offsets 5-7, never replicated) and then epoch
    3, which the leader's log does not have either (the leader led epochs 0, 2 and now
    4). Asked about epoch 3, the leader answers with its epoch 2; the follower does not
    know epoch 2, so it truncates to where its epoch 1 ends and asks again about epoch 1;
    the leader answers that epoch 0 ends at 5, and the follower truncates there."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 5))  # epoch 0: offsets 0-4
    partition = follower.partition(topic_id, 0)
    for batch in leader_batches(leader):
        partition.append_records_as_follower(batch[3])

    # The follower leads epoch 1, then epoch 3, writing records the leader never gets.
    partition.make_leader(PartitionState(replicas=[FOLLOWER, LEADER], leader=FOLLOWER,
                                         leader_epoch=1, isr=[FOLLOWER]))
    partition.append_records_to_leader(bytearray(own_batch(0, 3, -1, "epoch-1")),
                                       required_acks=1)
    partition.make_leader(PartitionState(replicas=[FOLLOWER, LEADER], leader=FOLLOWER,
                                         leader_epoch=3, isr=[FOLLOWER]))
    if records_in_epoch_3:
        partition.truncate_to(7)
        partition.append_records_to_leader(bytearray(own_batch(0, 1, -1, "epoch-3")),
                                           required_acks=1)
        expected_epochs = [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(3, 7)]
    else:
        expected_epochs = [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(3, 8)]
    partition.truncations.clear()
    assert partition.log_end_offset == 8
    assert partition.log.leader_epoch_cache.entries == expected_epochs

    # Meanwhile the broker leads epoch 2 (offsets 5-8), then epoch 4 (from 9).
    restart_in_epoch(leader, 2)
    produce(leader, values("b", 4))
    restart_in_epoch(leader, 4)
    produce(leader, values("c", 2))
    assert leader_epochs(leader) == [EpochEntry(0, 0), EpochEntry(2, 5), EpochEntry(4, 9)]

    async def body() -> None:
        follow(partition, 4)
        manager = new_manager(leader)
        try:
            add(manager, partition, 4)
            await caught_up(partition, leader, 11)
            assert follower_batches(partition) == leader_batches(leader)
            assert partition.log.leader_epoch_cache.entries == leader_epochs(leader)
            # Two rounds: to where the follower's epoch 1 ends, then to where epoch 0 does.
            if records_in_epoch_3:
                assert partition.truncations == [("to", 7), ("to", 5)]
            assert partition.truncations[-1] == ("to", 5)
        finally:
            await manager.shutdown()

    run(body)


# ---- 3. OFFSET_OUT_OF_RANGE -----------------------------------------------------------------


def test_follower_starts_at_the_leaders_log_start_after_delete_records(
        leader: BrokerProcess, follower: Follower) -> None:
    """The leader deleted records up to 6, past the (empty) follower's log end: the Fetch
    from 0 is out of range, and the follower starts its log at the leader's log start and
    fetches from there. Later, a log start that moves within the follower's log is
    followed without truncation."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 10))
    assert delete_records(leader, 6) == 6

    async def body() -> None:
        partition = follower.partition(topic_id, 0)
        manager = new_manager(leader)
        try:
            add(manager, partition, 0)
            await caught_up(partition, leader, 10)
            assert partition.truncations == [("fully", 6)]
            assert partition.log_start_offset == 6
            assert follower_batches(partition) == leader_batches(leader, from_offset=6)
            assert [b[0] for b in follower_batches(partition)] == [6, 7, 8, 9]
            assert partition.log.leader_epoch_cache.entries == [EpochEntry(0, 6)]
            await wait_until(lambda: partition.high_watermark == 10, "the high watermark")

            # DeleteRecords within the follower's log: its log start follows the leader's
            # with the next fetch response.
            assert await asyncio.to_thread(delete_records, leader, 8) == 8
            await asyncio.to_thread(produce, leader, values("b", 1))
            await caught_up(partition, leader, 11)
            await wait_until(lambda: partition.log_start_offset == 8, "the log start")
            assert partition.truncations == [("fully", 6)]
            assert follower_batches(partition)[-1][:3] == (10, 10, 0)
        finally:
            await manager.shutdown()

    run(body)


def test_follower_starting_inside_a_leader_batch_takes_the_whole_batch(
        leader: BrokerProcess, follower: Follower) -> None:
    """The leader's log start (6) is inside its batch 4-7: the follower starts at 6, gets
    the whole batch from 4 (as Kafka, a batch is appended whole) and keeps 6 as its log
    start, which the leader's fetch response tells it."""
    topic_id = create_topic(leader)
    for prefix in ("a", "b", "c"):
        produce(leader, values(prefix, 4 if prefix != "c" else 2), one_batch=True)
    assert [b[:2] for b in leader_batches(leader)] == [(0, 3), (4, 7), (8, 9)]
    assert delete_records(leader, 6) == 6

    async def body() -> None:
        partition = follower.partition(topic_id, 0)
        manager = new_manager(leader)
        try:
            add(manager, partition, 0)
            await caught_up(partition, leader, 10)
            assert partition.truncations == [("fully", 6), ("to", 4)]
            assert follower_batches(partition) == leader_batches(leader, from_offset=6)
            assert [b[:2] for b in follower_batches(partition)] == [(4, 7), (8, 9)]
            await wait_until(lambda: partition.log_start_offset == 6, "the log start")
            assert partition.log.read_records(6)[0].value == b"b-2"
        finally:
            await manager.shutdown()

    run(body)


def test_follower_longer_than_the_leader_truncates_to_its_end(
        leader: BrokerProcess, follower: Follower) -> None:
    """A follower log without leader epochs (nothing to ask the leader about) that ends
    past the leader's: the Fetch is out of range, and the follower cuts its log back to the
    leader's log end (Kafka's handleOutOfRangeError), then fetches what comes next."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 5))
    partition = follower.partition(topic_id, 0)
    for offset in range(8):
        partition.append_records_as_follower(own_batch(offset, 1, -1, f"old{offset}"))
    assert (partition.log_end_offset, partition.latest_epoch) == (8, -1)

    async def body() -> None:
        manager = new_manager(leader)
        try:
            add(manager, partition, 0)
            assert manager.status()[TP].state == "fetching"  # no epochs: no truncation
            await wait_until(lambda: partition.truncations != [], "a truncation")
            assert partition.truncations == [("to", 5)]
            assert partition.log_end_offset == 5
            await asyncio.to_thread(produce, leader, values("b", 3))
            await wait_until(lambda: partition.log_end_offset == 8, "the new records")
            assert follower_batches(partition)[-3:] == leader_batches(leader, from_offset=5)
        finally:
            await manager.shutdown()

    run(body)


# ---- 4. removing, stopping, re-adding -------------------------------------------------------


def test_removed_partitions_are_not_fetched_and_idle_fetchers_stop(
        leader: BrokerProcess, follower: Follower) -> None:
    """Once remove_partitions returns, the partition is not written again, even by the
    answer to the Fetch in flight; the fetcher goes on with the others, and stops (its
    connection closed) when it has none left. shutdown() stops every fetcher."""
    topic_id = create_topic(leader, partitions=3)
    for p in range(3):
        produce(leader, values(f"p{p}", 3), partition=p)

    async def body() -> None:
        parts = [follower.partition(topic_id, 0, index=p) for p in range(3)]
        clients: list[InterBrokerClient] = []
        manager = new_manager(leader, clients, fetch_wait_max_ms=10_000)
        try:
            manager.add_partitions({p.tp: InitialFetchState(LEADER, 0, p) for p in parts})
            assert list(manager.fetchers) == [LEADER] and len(clients) == 1
            fetcher = manager.fetchers[LEADER]
            await wait_until(lambda: all(p.log_end_offset == 3 for p in parts), "catch-up")

            # The fetcher now waits in a long-polling Fetch for all three partitions.
            manager.remove_partitions([(TOPIC, 0)])
            assert manager.leader_of((TOPIC, 0)) is None
            assert set(manager.status()) == {(TOPIC, 1), (TOPIC, 2)}
            assert fetcher.partitions == [(TOPIC, 1), (TOPIC, 2)]
            for p in range(3):
                await asyncio.to_thread(produce, leader, values(f"q{p}", 2), p)
            await wait_until(lambda: parts[1].log_end_offset == 5
                             and parts[2].log_end_offset == 5, "the others' new records")
            assert parts[0].log_end_offset == 3
            assert parts[1].high_watermark == 5 and parts[0].high_watermark == 3
            assert fetcher.task is not None and not fetcher.task.done()

            manager.remove_partitions([(TOPIC, 1), (TOPIC, 2), ("unknown", 0)])
            assert manager.fetchers == {} and manager.status() == {}
            await asyncio.wait({fetcher.task}, timeout=5)
            assert fetcher.task.cancelled()  # stopped, not failed
            assert not clients[0].is_connected(LEADER)
            await asyncio.to_thread(produce, leader, values("r", 1), 1)
            assert [p.log_end_offset for p in parts] == [3, 5, 5]

            # A new fetcher for the next partition added; shutdown stops it.
            add(manager, parts[0], 0)
            assert len(clients) == 2
            await caught_up(parts[0], leader, 5)
            second = manager.fetchers[LEADER]
            await manager.shutdown()
            assert manager.fetchers == {} and manager.status() == {}
            assert second.task is not None and second.task.done()
            assert not clients[1].is_connected(LEADER)
            add(manager, parts[1], 0)  # a stopping broker's late LeaderAndIsr: ignored
            assert manager.fetchers == {} and manager.status() == {}
            await asyncio.to_thread(produce, leader, values("s", 1), 0)
            assert parts[0].log_end_offset == 5
        finally:
            await manager.shutdown()

    run(body)


def test_a_fetcher_stopped_as_its_wakeup_comes_stops(follower: Follower) -> None:
    """Removing a fetcher's last partition wakes it and stops it in the same step. It
    stops: on Python 3.11, asyncio.wait_for lost such a cancellation, the fetcher ran on
    and the broker's shutdown waited for it forever (found by `cluster up`'s test)."""
    with socket.socket() as unused:  # a port nobody listens on: every Fetch fails
        unused.bind((HOST, 0))
        port = unused.getsockname()[1]

    async def body() -> None:
        manager = new_manager(SimpleNamespace(port=port), fetch_backoff_ms=60_000)
        try:
            partition = follower.partition(uuid.uuid4(), 0)
            add(manager, partition, 0)
            fetcher = manager.fetchers[LEADER]
            # Backing off after the failed Fetch: waiting for work, for up to a minute.
            await wait_until(lambda: manager.status()[TP].state == "delayed", "the backoff")
            await asyncio.sleep(0.05)
            assert fetcher.task is not None
            manager.remove_partitions([TP])
            await asyncio.wait({fetcher.task}, timeout=5)
            assert fetcher.task.cancelled()
        finally:
            await manager.shutdown()

    run(body)


def test_fenced_partition_waits_and_a_new_epoch_restarts_with_truncation(
        leader: BrokerProcess, follower: Follower) -> None:
    """A follower added with a leader epoch older than the leader's is fenced
    (FENCED_LEADER_EPOCH): "failed", left alone, also when added again in that epoch. Added
    in the leader's epoch it starts over, truncating first: here the records it wrote as
    leader of epoch 1 go, and it ends with the leader's log."""
    topic_id = create_topic(leader)
    produce(leader, values("a", 5))

    async def body() -> None:
        partition = follower.partition(topic_id, 0)
        manager = new_manager(leader)
        try:
            add(manager, partition, 0)
            await caught_up(partition, leader, 5)
            manager.remove_partitions([TP])
            assert manager.fetchers == {}
        finally:
            await manager.shutdown()

        # The follower leads epoch 1 for a while; then the broker leads epoch 2.
        partition.make_leader(PartitionState(replicas=[FOLLOWER, LEADER], leader=FOLLOWER,
                                             leader_epoch=1, isr=[FOLLOWER]))
        partition.append_records_to_leader(bytearray(own_batch(0, 3, -1, "mine")), 1)
        assert (partition.log_end_offset, partition.latest_epoch) == (8, 1)
        await asyncio.to_thread(restart_in_epoch, leader, 2)
        await asyncio.to_thread(produce, leader, values("b", 4))  # 5-8, one batch each
        assert leader_epochs(leader) == [EpochEntry(0, 0), EpochEntry(2, 5)]

        follow(partition, 1)  # a LeaderAndIsr of epoch 2 has not come yet
        manager = new_manager(leader)
        try:
            add(manager, partition, 1)
            await wait_until(lambda: manager.failed_partitions == {TP}, "the fencing")
            status = manager.partition_status(TP)
            assert status is not None
            assert (status.leader_epoch, status.state, status.fetch_offset) == (1, "failed", 8)
            add(manager, partition, 1)  # the same epoch again: still failed
            assert manager.failed_partitions == {TP}
            assert partition.truncations == [] and partition.log_end_offset == 8

            follow(partition, 2)
            add(manager, partition, 2)
            status = manager.partition_status(TP)
            assert status is not None
            assert (status.leader_epoch, status.state, status.fetch_offset) == (
                2, "truncating", 8)
            await caught_up(partition, leader, 9)
            assert partition.truncations == [("to", 5)]
            assert follower_batches(partition) == leader_batches(leader)
            assert partition.log.leader_epoch_cache.entries == leader_epochs(leader)
            assert manager.failed_partitions == set()
        finally:
            await manager.shutdown()

    run(body)


# ---- 5. a leader that is down -------------------------------------------------------------


def test_partitions_back_off_while_the_leader_is_down_and_catch_up_after(
        leader: BrokerProcess, follower: Follower) -> None:
    """The leader stops: every partition of its fetcher is "delayed" (backing off) and the
    fetcher keeps running; the leader comes back on the same port, and the follower
    catches up with what was produced since."""
    topic_id = create_topic(leader, partitions=2)
    for p in range(2):
        produce(leader, values(f"a{p}", 4), partition=p)

    async def body() -> None:
        parts = [follower.partition(topic_id, 0, index=p) for p in range(2)]
        manager = new_manager(leader, fetch_backoff_ms=300)
        try:
            manager.add_partitions({p.tp: InitialFetchState(LEADER, 0, p) for p in parts})
            await wait_until(lambda: all(p.log_end_offset == 4 for p in parts), "catch-up")
            fetcher = manager.fetchers[LEADER]

            await asyncio.to_thread(leader.stop)
            await wait_until(lambda: {s.state for s in manager.status().values()} == {
                "delayed"}, "both partitions delayed")
            status = manager.status()
            assert [(s.state, s.fetch_offset) for s in status.values()] == [
                ("delayed", 4), ("delayed", 4)]
            assert manager.failed_partitions == set()
            assert fetcher.task is not None and not fetcher.task.done()

            await asyncio.to_thread(leader.start)
            for p in range(2):
                await asyncio.to_thread(produce, leader, values(f"b{p}", 2), p)
            await wait_until(lambda: all(p.log_end_offset == 6 for p in parts), "catch-up")
            for p in parts:
                assert follower_batches(p) == leader_batches(leader, p.index)
            await wait_until(lambda: all(p.high_watermark == 6 for p in parts), "the HWs")
            assert {s.state for s in manager.status().values()} == {"fetching"}
            assert manager.fetchers[LEADER] is fetcher
        finally:
            await manager.shutdown()

    run(body)


# ---- 6. offset_truncation_state and FetcherConfig -----------------------------------------


@pytest.fixture
def epoch_partition(tmp_path: Path) -> Iterator[Partition]:
    """A follower whose log holds epoch 0 at 0-2, epoch 2 at 3-5 and epoch 4 at 6-7."""
    log = Log.open(tmp_path / f"{TOPIC}-0", LogConfig())
    for base, count, epoch in ((0, 3, 0), (3, 3, 2), (6, 2, 4)):
        log.append_as_follower(own_batch(base, count, epoch, "x"))
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 3),
                                              EpochEntry(4, 6)]
    yield Partition(TOPIC, 0, uuid.uuid4(), log, node_id=FOLLOWER)
    log.close()


@pytest.mark.parametrize(("fetch_offset", "leader_epoch", "leader_end", "expected"), [
    # The leader's latest epoch is the follower's: the smaller end.
    (8, 4, 10, (8, True)),
    (8, 4, 7, (7, True)),
    # An epoch both have: where the earlier of the two ends of it is.
    (8, 2, 5, (5, True)),
    (8, 2, 9, (6, True)),
    (8, 0, 2, (2, True)),
    (8, 0, 3, (3, True)),
    # An epoch the follower does not know: to the end of its largest epoch below it,
    # then ask again.
    (8, 3, 7, (6, False)),
    (8, 1, 2, (3, False)),
    # The leader knows nothing of the epoch: the fetch offset, within the log.
    (5, 2, -1, (5, True)),
    (20, 2, -1, (8, True)),
    # A leader that answers without an epoch: its offset, within the log.
    (8, -1, 4, (4, True)),
    (8, -1, 40, (8, True)),
])
def test_offset_truncation_state(epoch_partition: Partition, fetch_offset: int,
                                 leader_epoch: int, leader_end: int,
                                 expected: tuple[int, bool]) -> None:
    assert offset_truncation_state(epoch_partition, fetch_offset, leader_epoch,
                                   leader_end) == expected
    assert epoch_partition.log_end_offset == 8  # it only computes


def test_offset_truncation_state_of_a_follower_without_epochs(tmp_path: Path) -> None:
    """A log written without leader epochs: the leader's offset is trusted, within the
    log; an epoch before the follower's first known one ends where that one starts."""
    log = Log.open(tmp_path / f"{TOPIC}-0", LogConfig())
    log.append_as_follower(own_batch(0, 8, -1, "x"))
    partition = Partition(TOPIC, 0, uuid.uuid4(), log, node_id=FOLLOWER)
    try:
        assert partition.latest_epoch == -1
        assert offset_truncation_state(partition, 8, 3, 5) == (5, True)
        assert offset_truncation_state(partition, 8, 3, 50) == (8, True)
        log.append_as_follower(own_batch(8, 2, 5, "y"))  # epoch 5 from 8
        assert offset_truncation_state(partition, 10, 3, 6) == (6, True)
        assert offset_truncation_state(partition, 10, 3, 9) == (8, True)
    finally:
        log.close()


def test_fetcher_config_defaults_are_kafkas() -> None:
    config = FetcherConfig()
    assert (config.fetch_max_bytes, config.fetch_response_max_bytes, config.fetch_min_bytes,
            config.fetch_wait_max_ms, config.fetch_backoff_ms, config.socket_timeout_ms) == (
        1_048_576, 10_485_760, 1, 500, 1000, 30_000)


@pytest.mark.parametrize("name", ["fetch_max_bytes", "fetch_response_max_bytes",
                                  "fetch_min_bytes", "fetch_wait_max_ms", "fetch_backoff_ms",
                                  "socket_timeout_ms"])
def test_fetcher_config_rejects_negative_values(name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} must not be negative$"):
        FetcherConfig(**{name: -1})
    assert getattr(FetcherConfig(**{name: 0, "fetch_wait_max_ms": 0}), name) == 0


def test_fetcher_config_socket_timeout_must_cover_the_fetch_wait() -> None:
    with pytest.raises(ValueError, match=r"replica\.socket\.timeout\.ms \(499\) must be at "
                       r"least replica\.fetch\.wait\.max\.ms \(500\)"):
        FetcherConfig(socket_timeout_ms=499)
    assert FetcherConfig(socket_timeout_ms=500).socket_timeout_ms == 500
    with pytest.raises(ValueError, match="must be at least"):
        FetcherConfig(fetch_wait_max_ms=40_000)
    assert FetcherConfig(fetch_wait_max_ms=40_000, socket_timeout_ms=40_000)


def test_fetcher_config_from_broker_config() -> None:
    settings: dict[str, Any] = {"replica.fetch.max.bytes": "2048",
                                "replica.fetch.wait.max.ms": 100,
                                "replica.fetch.backoff.ms": None,  # unset: the default
                                "replica.socket.timeout.ms": 5000}

    def get(name: str) -> Any:
        return settings[name]  # KeyError for the others: the default

    assert FetcherConfig.from_broker_config(get) == FetcherConfig(
        fetch_max_bytes=2048, fetch_wait_max_ms=100, socket_timeout_ms=5000)
    settings["replica.socket.timeout.ms"] = 50
    with pytest.raises(ValueError, match="must be at least"):
        FetcherConfig.from_broker_config(get)
    settings["replica.fetch.min.bytes"] = -5
    with pytest.raises(ValueError, match="fetch_min_bytes must not be negative"):
        FetcherConfig.from_broker_config(get)
