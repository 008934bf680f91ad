"""A failed log dir in a cluster (Kafka's KIP-112): the broker tells the controller through
/log_dir_event_notification, answers KAFKA_STORAGE_ERROR for the replicas in that dir, and
the controller moves their leadership to replicas on healthy brokers, while the broker goes
on serving the partitions in its other dirs. End to end on real broker processes, one of
them with a log dir on a small tmpfs that fills up; and the pieces on their own: the
znode, the store's notifications, the broker's answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from kazoo.client import KazooClient
from support.cluster import Cluster, wait_until
from support.replication import consume_with_offsets
from zk_helpers import Recorder, StoreFactory

from odradek.broker.admin import AdminManager
from odradek.broker.inter_broker_client import RequestBuilder
from odradek.broker.replica_manager import ReplicaManager
from odradek.cluster.kafka_controller import IsrChange, KafkaController
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.zookeeper import ControllerMovedError
from odradek.cluster.zookeeper import znodes as z
from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import decode_request, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import leader_and_isr_response as lair
from odradek.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from odradek.protocol.records import SimpleRecord, build_record_batch
from odradek.server.config import BrokerConfig, Listener
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager, LogManagerConfig

# ---- the pieces ---------------------------------------------------------------------------


def test_log_dir_event_znode_is_kafkas() -> None:
    assert json.loads(z.encode_log_dir_event(3)) == {"version": 1, "broker": 3, "event": 1}
    assert z.decode_log_dir_event(b'{"version":1,"broker":7,"event":1}') == (7, 1)


def test_log_dir_event_notifications(make_store: StoreFactory, raw: KazooClient) -> None:
    controller, broker = make_store(broker_id=1), make_store(broker_id=2)
    seen: Recorder[list[str]] = Recorder()
    controller.watch_log_dir_events(seen)
    seen.wait_value([])
    broker.notify_log_dir_event()
    broker.notify_log_dir_event()  # a second failed dir, or a retry: one more notification
    names = seen.wait_for(lambda v: len(v[-1]) == 2)[-1]
    assert all(n.startswith("log_dir_event_") for n in names)
    assert json.loads(raw.get(f"/log_dir_event_notification/{names[0]}")[0]) == {
        "version": 1, "broker": 2, "event": 1}
    assert controller.read_log_dir_events([*names, "log_dir_event_9999999999"]) == {2}
    with pytest.raises(ControllerMovedError):  # only the controller deletes them
        controller.delete_log_dir_events(names)
    assert controller.try_elect_controller() is not None
    controller.delete_log_dir_events([*names, "log_dir_event_9999999999"])  # gone: fine
    seen.wait_for(lambda v: v[-1] == [])


ME = 1


def state(leader: int, epoch: int = 1) -> PartitionState:
    return PartitionState([ME, 2, 3], leader, epoch, [ME, 2, 3], partition_epoch=epoch)


def test_the_broker_answers_storage_error_for_replicas_in_a_failed_dir(tmp_path: Path) -> None:
    dirs = (tmp_path / "a", tmp_path / "b")
    logs = LogManager(LogManagerConfig(log_dirs=dirs), LogConfig())
    logs.startup(background=False)
    manager = ReplicaManager(ME, logs)
    resigned: list[tuple[str, list[int]]] = []
    manager.add_leadership_listener(lambda t, n, led, gone: resigned.append((t, gone)))
    topic_id = uuid.uuid4()

    async def scenario() -> None:
        # events-0 goes to a/ (fewest partitions, first), events-1 to b/.
        assert await manager.become_leader_or_follower(
            [("events", topic_id, 0, state(ME)), ("events", topic_id, 1, state(ME))],
            {"events": 2}) == {}
        assert logs.log_dir_of("events", 0).path == dirs[0]  # type: ignore[union-attr]
        assert logs.log_dir_of("events", 1).path == dirs[1]  # type: ignore[union-attr]
        logs.log_dirs[dirs[0]].fail("a test took it offline")
        manager.handle_log_dir_failure(dirs[0])
        assert resigned[-1] == ("events", [0])
        assert not manager.partitions[("events", 0)].is_leader
        records = build_record_batch([SimpleRecord(None, b"v", timestamp=int(time.time() * 1000))])
        results = manager.append_records(-1, {("events", 0): bytearray(records),
                                              ("events", 1): bytearray(records)})
        assert results[("events", 0)].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert results[("events", 1)].error_code == ErrorCode.NONE
        # DescribeLogDirs (kafka-log-dirs.sh, `odradek log-dirs describe`) shows which.
        admin = AdminManager(BrokerConfig.default(), None, manager)  # type: ignore[arg-type]
        request = decode_request(encode_request(DescribeLogDirsRequest(topics=None), 4, 1,
                                                "test")[4:])
        described: Any = admin.handle_describe_log_dirs(request, None)  # type: ignore[arg-type]
        assert sorted((Path(r.log_dir), r.error_code, [t.name for t in r.topics])
                      for r in described.results) == [
            (dirs[0], ErrorCode.KAFKA_STORAGE_ERROR, []), (dirs[1], ErrorCode.NONE, ["events"])]
        # The controller asks again (its probe, or after a failover): the failed replica
        # answers KAFKA_STORAGE_ERROR and stays offline, whatever it is told; the other
        # one takes its new state.
        errors = await manager.become_leader_or_follower(
            [("events", topic_id, 0, state(ME, 2)), ("events", topic_id, 1, state(2, 2))],
            {"events": 2})
        assert errors == {("events", 0): ErrorCode.KAFKA_STORAGE_ERROR}
        assert not manager.partitions[("events", 0)].is_leader
        assert manager.partitions[("events", 1)].leader_id == 2

    try:
        asyncio.run(scenario())
    finally:
        logs.shutdown()


class Brokers:
    """The controller's channel to brokers that answer LeaderAndIsr as ours do: with
    KAFKA_STORAGE_ERROR for their replicas in `offline` (failed log dirs)."""

    VERSIONS = {ApiKey.LEADER_AND_ISR: 7, ApiKey.UPDATE_METADATA: 8, ApiKey.STOP_REPLICA: 4}

    def __init__(self) -> None:
        self.offline: dict[int, set[tuple[str, int]]] = {}
        self.sent: list[tuple[int, Message]] = []

    def update_brokers(self, endpoints: Mapping[int, tuple[str, int]],
                       epochs: Mapping[int, int] | None = None) -> None:
        pass

    def send(self, broker_id: int, request: Message | RequestBuilder,
             callback: Callable[[Message], None] | None = None) -> None:
        if isinstance(request, RequestBuilder):
            request = request.build(self.VERSIONS[ApiKey(request.api_key)])
        self.sent.append((broker_id, request))
        if callback is None or request.API_KEY != ApiKey.LEADER_AND_ISR:
            return
        offline = self.offline.get(broker_id, set())
        answer = lair.LeaderAndIsrResponse(topics=[lair.LeaderAndIsrTopicError(
            topic_id=t.topic_id, partition_errors=[lair.LeaderAndIsrPartitionError(
                partition_index=s.partition_index,
                error_code=(ErrorCode.KAFKA_STORAGE_ERROR
                            if (t.topic_name, s.partition_index) in offline else 0))
                for s in t.partition_states]) for t in request.topic_states])
        asyncio.get_running_loop().call_soon(callback, answer)

    def offline_in_metadata(self, broker_id: int, topic: str, partition: int) -> list[int]:
        """offline_replicas of the partition in the last UpdateMetadata to `broker_id`."""
        for to, request in reversed(self.sent):
            if to == broker_id and request.API_KEY == ApiKey.UPDATE_METADATA:
                for t in request.topic_states:
                    for s in t.partition_states:
                        if (t.topic_name, s.partition_index) == (topic, partition):
                            return list(s.offline_replicas)
        return []


async def until(condition: Callable[[], Any], what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def test_the_controller_moves_leadership_off_offline_replicas(make_store: StoreFactory,
                                                              raw: KazooClient) -> None:
    stores = {b: make_store(broker_id=b) for b in (1, 2, 3)}
    for b, store in stores.items():
        store.register_broker([Listener("PLAINTEXT", "127.0.0.1", 9000 + b, "PLAINTEXT")])
    stores[1].create_topic(TopicMetadata("events", uuid.uuid4(), {
        0: PartitionState([1, 2, 3], 1, 0, [1, 2, 3]),
        1: PartitionState([2, 1, 3], 2, 0, [2, 1, 3])}))
    brokers = Brokers()
    # Broker 1's events-0 was in a dir that failed before this controller took over: the
    # LeaderAndIsr of its failover finds it (Kafka learns it the same way).
    brokers.offline[1] = {("events", 0)}
    controller = KafkaController(3, stores[3], brokers, inter_broker_listener="PLAINTEXT",
                                 auto_leader_rebalance=False)

    def state(p: int) -> PartitionState:
        return controller.topics["events"].partitions[p]

    async def scenario() -> None:
        await controller.startup()
        await until(lambda: "events" in controller.topics and state(0).leader == 2,
                    "events-0 led by broker 2")
        assert state(0).isr == [2, 3] and state(1).isr == [2, 1, 3]
        assert controller.offline_replicas == {1: {("events", 0)}}
        assert brokers.offline_in_metadata(2, "events", 0) == [1]
        # The offline replica may not rejoin the ISR, nor lead.
        s = state(0)
        refused = await controller.alter_partition(2, [IsrChange(
            "events", 0, s.leader_epoch, [2, 3, 1], s.partition_epoch)])
        assert refused[0].error_code == ErrorCode.INELIGIBLE_REPLICA
        elected = await controller.elect_leaders([("events", 0)], unclean=False)
        assert elected[("events", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

        # Another dir of broker 1 fails: it says so in ZooKeeper, the controller asks it
        # about all its replicas, and its events-1 leaves the ISR.
        brokers.offline[1].add(("events", 1))
        await asyncio.to_thread(stores[1].notify_log_dir_event)
        await until(lambda: state(1).isr == [2, 3], "broker 1 out of events-1's ISR")
        assert state(1).leader == 2
        assert controller.offline_replicas == {1: {("events", 0), ("events", 1)}}
        await until(lambda: not raw.get_children("/log_dir_event_notification"),
                    "the notification deleted")

        # Broker 1 restarts with its dirs repaired: its replicas are online again.
        brokers.offline[1] = set()
        await asyncio.to_thread(stores[1].close)
        await until(lambda: 1 not in controller.live, "broker 1 gone")
        stores[1] = await asyncio.to_thread(make_store, 1)
        await asyncio.to_thread(stores[1].register_broker, [
            Listener("PLAINTEXT", "127.0.0.1", 9001, "PLAINTEXT")])
        await until(lambda: 1 in controller.live, "broker 1 back")
        assert controller.offline_replicas == {}
        s = state(0)
        accepted = await controller.alter_partition(2, [IsrChange(
            "events", 0, s.leader_epoch, [2, 3, 1], s.partition_epoch)])
        assert accepted[0].error_code == ErrorCode.NONE
        await controller.shutdown()

    asyncio.run(scenario())


# ---- end to end -----------------------------------------------------------------------------

X = 1  # the broker with a log dir on a small tmpfs
TMPFS_BYTES = 16 * 1024 * 1024
HEADROOM = 1024 * 1024  # left free by the filler file: the producer fills that
VALUE_BYTES = 8 * 1024


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "tmpfs"
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                        str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"mounting a tmpfs is needed (run as root): {e}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


class RecordingProducer:
    """Idempotent acks=all producer of numbered VALUE_BYTES records to both partitions, from
    a thread; remembers each acknowledged (offset, value) by partition."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 60_000})
        self.acked: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked[msg.partition()].append((msg.offset(), msg.value()))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            head = f"record-{i:08d}-".encode()
            value = head + os.urandom(VALUE_BYTES - len(head))
            try:
                # Three of four to the partition in the tmpfs: it fills up soon.
                self.producer.produce(self.topic, value, partition=0 if i % 4 else 1,
                                      on_delivery=self._delivered)
                i += 1
            except BufferError:  # the queue is full while a leader moves
                pass
            self.producer.poll(0.002)

    def start(self) -> RecordingProducer:
        self._thread.start()
        return self

    def wait_for_more(self, partition: int, more: int, timeout: float) -> None:
        target = len(self.acked[partition]) + more
        wait_until(lambda: len(self.acked[partition]) >= target, timeout,
                   f"{target} acknowledged records in partition {partition}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(30) == 0, "records left unacknowledged"


@pytest.mark.timeout(90)
def test_a_full_log_dir_moves_leadership_to_healthy_brokers(
        tmp_path: Path, connect: str, small_tmpfs: Path) -> None:
    other = tmp_path / "broker-1-other"
    cluster = Cluster(tmp_path, connect, brokers=3)
    # The tmpfs first: it takes the first partition (fewest partitions, then dir order).
    # No free-space reserve on it: the append that finds it full takes the dir offline,
    # where the reserve would only refuse appends and keep the dir, and the leadership.
    cluster.brokers[X].settings.update({"log.dirs": f"{small_tmpfs},{other}",
                                        "log.dir.min.free.bytes": "0"})
    try:
        cluster.start()
        admin = cluster.admin()
        admin.create_topics([NewTopic("events", 2, replica_assignment=[[X, 2, 3], [X, 3, 2]],
                                      config={"min.insync.replicas": "2"})]
                            )["events"].result(30)
        def ready() -> bool:
            views = [cluster.partitions("events", b) for b in cluster.brokers]
            return all(v.get(p, (None, [], []))[0] == X and len(v[p][2]) == 3
                       for v in views for p in (0, 1))

        wait_until(ready, what="events led by broker 1 and in sync in every broker's metadata")
        assert (small_tmpfs / "events-0").is_dir() and (other / "events-1").is_dir()
        free = os.statvfs(small_tmpfs)
        with open(small_tmpfs / "filler", "wb") as f:  # leave the producer a little room
            f.truncate(0)
            remaining = free.f_bavail * free.f_frsize - HEADROOM
            while remaining > 0:
                remaining -= f.write(b"\0" * min(remaining, 1 << 20))

        producer = RecordingProducer(cluster.bootstrap, "events").start()
        # The tmpfs fills, the dir goes offline, the controller elects another leader of
        # events-0 from its ISR and takes broker 1 out of it; events-1 stays on broker 1.
        def moved() -> bool:
            views = [cluster.partitions("events", b) for b in cluster.brokers]
            return all(v[0][0] in (2, 3) and X not in v[0][2] and v[1][0] == X
                       for v in views)

        wait_until(moved, 45, "events-0 led off broker 1 in every broker's metadata")
        log = cluster.brokers[X].log_text()
        assert f"log dir {small_tmpfs} is offline" in log, log
        # Producing goes on, on the new leader and on broker 1's healthy dir.
        producer.wait_for_more(0, 200, 20)
        producer.wait_for_more(1, 50, 20)
        producer.stop()
        assert not producer.errors, producer.errors[:5]
        assert cluster.brokers[X].process is not None
        assert cluster.brokers[X].process.poll() is None, "broker 1 stopped"

        consumed = consume_with_offsets(cluster.bootstrap, "events", [0, 1])
        for p, acked in producer.acked.items():
            at = dict(consumed[p])
            wrong = [o for o, v in acked if at.get(o) != v]
            assert not wrong, f"events-{p}: {len(wrong)} of {len(acked)} acknowledged " \
                f"records not read back as written, first offsets {wrong[:5]}"
            values = [v for _, v in consumed[p]]
            assert len(values) == len(set(values)), f"events-{p}: a record appears twice"
        assert len(producer.acked[0]) > 200 and len(producer.acked[1]) > 50
    finally:
        for broker in cluster.brokers.values():
            broker.kill()
    text = cluster.logs()
    assert "Traceback" not in text, text
