"""The ZooKeeper metadata store against a real ZooKeeper: Kafka's znode layout and formats,
topics through the store and the Controller, broker registration, controller election and
fencing, conditional partition state updates, producer id blocks, chroots, a ZooKeeper
restart and a session expiry."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from support.wait import wait_until
from zk_helpers import WAIT, Recorder, StoreFactory, TcpProxy

from odradek.cluster.controller import Controller
from odradek.cluster.embedded import EmbeddedMetadataStore
from odradek.cluster.metadata import PartitionState, TopicMetadata
from odradek.cluster.zookeeper import (
    BrokerIdInUseError,
    ControllerMovedError,
    PartitionStateConflictError,
    SessionEvent,
    ZooKeeperMetadataStore,
)
from odradek.cluster.zookeeper import store as store_module
from odradek.cluster.zookeeper import znodes as z
from odradek.cluster.zookeeper_server import ZooKeeperServer
from odradek.server.config import Listener

PLAINTEXT = Listener("PLAINTEXT", "broker1.example", 9092, "PLAINTEXT")
SSL = Listener("INTERNAL", "10.0.0.1", 9093, "SSL")


def read_json(raw: KazooClient, path: str) -> Any:
    return json.loads(raw.get(path)[0])


def new_topic(name: str, partitions: int = 2, replicas: tuple[int, ...] = (1,),
              configs: dict[str, str] | None = None) -> TopicMetadata:
    return TopicMetadata(
        name, uuid.uuid4(),
        {p: PartitionState(list(replicas), replicas[0], 0, list(replicas))
         for p in range(partitions)},
        dict(configs or {}))


# ---- layout and formats ---------------------------------------------------------------------


def test_znode_layout_and_formats_are_kafkas(make_store: StoreFactory, raw: KazooClient) -> None:
    store = make_store(broker_id=1)
    # The persistent znodes Kafka's brokers make sure of (ZkData.PersistentZkPaths).
    for path in ("/consumers", "/brokers/ids", "/brokers/topics", "/brokers/seqid",
                 "/config/changes", "/admin/delete_topics", "/isr_change_notification",
                 "/latest_producer_id_block", "/log_dir_event_notification", "/config/topics",
                 "/config/clients", "/config/users", "/config/brokers", "/config/ips"):
        assert raw.exists(path), path
    assert read_json(raw, "/cluster/id") == {"version": "1", "id": store.cluster_id}
    assert len(store.cluster_id) == 22  # a UUID in URL-safe base64, as Kafka makes them

    store.register_broker([PLAINTEXT, SSL], rack="rack-a")
    broker = read_json(raw, "/brokers/ids/1")
    assert int(broker.pop("timestamp")) > 0
    assert broker == {  # BrokerIdZNode.encode, version 5
        "version": 5, "host": "broker1.example", "port": 9092,
        "endpoints": ["PLAINTEXT://broker1.example:9092", "INTERNAL://10.0.0.1:9093"],
        "jmx_port": -1, "rack": "rack-a",
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "SSL"},
        "features": {}}
    assert raw.get("/brokers/ids/1")[1].ephemeralOwner == store.session_id

    topic = new_topic("events", partitions=2, replicas=(1,), configs={"retention.ms": "60000"})
    topic.partitions[1].adding_replicas = [2]
    store.create_topic(topic)
    assert read_json(raw, "/brokers/topics/events") == {  # TopicZNode.encode
        "version": 3, "partitions": {"0": [1], "1": [1]},
        "adding_replicas": {"1": [2]}, "removing_replicas": {},
        "topic_id": z.encode_uuid(topic.topic_id)}
    assert read_json(raw, "/brokers/topics/events/partitions/0/state") == {
        "version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 0, "isr": [1]}
    assert read_json(raw, "/config/topics/events") == {
        "version": 1, "config": {"retention.ms": "60000"}}

    assert store.try_elect_controller() == 1
    controller = read_json(raw, "/controller")
    assert controller["version"] == 1 and controller["brokerid"] == 1
    assert isinstance(controller["timestamp"], str)  # Kafka writes it as a string
    assert raw.get("/controller")[1].ephemeralOwner == store.session_id
    assert raw.get("/controller_epoch")[0] == b"1"  # a bare number, not JSON

    state = topic.partitions[0]
    state.leader_recovery_state = 1  # RECOVERING: the only case Kafka writes the field
    state.leader_epoch = 1
    store.set_partition_states({("events", 0): state})
    assert read_json(raw, "/brokers/topics/events/partitions/0/state") == {
        "version": 1, "leader": 1, "leader_epoch": 1, "controller_epoch": 1, "isr": [1],
        "leader_recovery_state": 1}

    store.set_broker_configs({"<default>/log.retention.ms": "1000", "1/num.io.threads": "4"})
    assert read_json(raw, "/config/brokers/<default>") == {
        "version": 1, "config": {"log.retention.ms": "1000"}}
    assert read_json(raw, "/config/brokers/1") == {"version": 1, "config": {"num.io.threads": "4"}}
    changes = sorted(raw.get_children("/config/changes"))
    assert changes == ["config_change_0000000000", "config_change_0000000001"]
    assert {read_json(raw, f"/config/changes/{c}")["entity_path"] for c in changes} == {
        "brokers/<default>", "brokers/1"}
    assert read_json(raw, "/config/changes/config_change_0000000000")["version"] == 2

    store.allocate_producer_ids(1000)
    assert read_json(raw, "/latest_producer_id_block") == {
        "version": 1, "broker": 1, "block_start": "0", "block_end": "999"}

    path = store.notify_isr_change([("events", 1), ("events", 0)])
    assert path == "/isr_change_notification/isr_change_0000000000"
    assert read_json(raw, path) == {"version": 1, "partitions": [
        {"topic": "events", "partition": 0}, {"topic": "events", "partition": 1}]}

    store.mark_topic_for_deletion("events")
    assert raw.exists("/admin/delete_topics/events")


def test_formats_read_what_kafka_writes() -> None:
    """Bytes as a Kafka 3.x broker leaves them (older versions of each format too)."""
    broker = z.decode_broker(3, (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT",'
        b'"REPLICATION":"SASL_SSL"},"endpoints":["PLAINTEXT://kafka-3:9092",'
        b'"REPLICATION://[::1]:9093"],"jmx_port":9999,"port":9092,"host":"kafka-3",'
        b'"version":5,"timestamp":"1700000000000"}'))
    assert [str(e) for e in broker.endpoints] == ["PLAINTEXT://kafka-3:9092",
                                                   "REPLICATION://[::1]:9093"]
    assert broker.endpoints[1].security_protocol == "SASL_SSL"
    assert (broker.rack, broker.jmx_port, broker.timestamp_ms) == (None, 9999, 1700000000000)
    old = z.decode_broker(1, b'{"version":1,"host":"h","port":9092,"jmx_port":-1,'
                             b'"timestamp":"1"}')
    assert [str(e) for e in old.endpoints] == ["PLAINTEXT://h:9092"]

    topic = z.decode_topic(b'{"version":2,"partitions":{"1":[2,3],"0":[1,2]},'
                           b'"topic_id":"vDGVJUOjTHu8q4b9hdw1lw"}')
    assert topic.replicas == {0: [1, 2], 1: [2, 3]} and topic.adding_replicas == {}
    assert z.encode_uuid(topic.topic_id) == "vDGVJUOjTHu8q4b9hdw1lw"
    assert z.decode_topic(b'{"version":1,"partitions":{"0":[1]}}').topic_id == z.ZERO_UUID

    state = z.decode_partition_state(
        b'{"controller_epoch":7,"leader":2,"version":1,"leader_epoch":4,"isr":[2,1]}', 12,
        [1, 2])
    assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch,
            state.partition_epoch, state.leader_recovery_state) == (2, 4, [2, 1], 7, 12, 0)
    assert z.decode_controller(b'{"version":2,"brokerid":5,"timestamp":"1",'
                               b'"kraftControllerEpoch":-1}') == 5
    assert z.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"t"}') \
        == "topics/t"
    assert z.decode_reassignment(z.encode_reassignment({("t", 0): [1, 2]})) == {("t", 0): [1, 2]}
    assert z.decode_partition_list(z.encode_preferred_replica_election([("t", 1)])) == {("t", 1)}


# ---- topics ---------------------------------------------------------------------------------


def test_topics_round_trip_through_the_controller(make_store: StoreFactory, raw: KazooClient,
                                                  tmp_path: Path) -> None:
    store = make_store(broker_id=1)
    controller = Controller(1, store)

    async def change() -> TopicMetadata:
        created = await controller.create_topic("events", 3, 1, {"cleanup.policy": "compact"})
        await controller.create_topic("other", 1, 1, {})
        await controller.create_partitions("events", 5)
        await controller.alter_topic_configs("events", {"cleanup.policy": "delete",
                                                        "retention.ms": "9"})
        return created

    created = asyncio.run(change())

    # Another broker's session reads what the controller wrote.
    reader = make_store(broker_id=2)
    topics = reader.topics()
    assert sorted(topics) == ["events", "other"]
    events = topics["events"]
    assert events.topic_id == created.topic_id
    assert sorted(events.partitions) == [0, 1, 2, 3, 4]
    assert all(s.replicas == [1] and s.leader == 1 and s.isr == [1]
               for s in events.partitions.values())
    assert events.configs == {"cleanup.policy": "delete", "retention.ms": "9"}
    assert events == controller.topics["events"]  # partition epochs included
    assert [read_json(raw, f"/config/changes/{c}")["entity_path"]
            for c in sorted(raw.get_children("/config/changes"))] == ["topics/events"]

    # The embedded store holds the same topics after the same operations.
    embedded = Controller(1, EmbeddedMetadataStore(tmp_path))
    asyncio.run(embedded.create_topic("events", 3, 1, {}))
    asyncio.run(embedded.create_partitions("events", 5))
    assert {p: (s.replicas, s.leader, s.isr) for p, s in events.partitions.items()} == {
        p: (s.replicas, s.leader, s.isr) for p, s in embedded.topics["events"].partitions.items()}

    with pytest.raises(ValueError, match="exists already"):
        store.create_topic(new_topic("events"))
    asyncio.run(controller.delete_topic("events"))
    assert sorted(reader.topics()) == ["other"]
    assert not raw.exists("/brokers/topics/events")
    assert not raw.exists("/config/topics/events")
    assert not raw.exists("/admin/delete_topics/events")
    store.delete_topic("events")  # gone already: nothing to do
    # A fresh Controller starts from what the store holds.
    assert sorted(Controller(1, reader).topics) == ["other"]


def test_watches_on_topics_and_deletions(make_store: StoreFactory) -> None:
    store = make_store(broker_id=1)
    topics: Recorder[set[str]] = Recorder()
    deletions: Recorder[set[str]] = Recorder()
    store.watch_topics(topics)
    store.watch_topic_deletions(deletions)
    assert topics.values == [set()] and deletions.values == [set()]  # at once: the current
    writer = make_store(broker_id=2)
    writer.create_topic(new_topic("a"))
    topics.wait_value({"a"})
    writer.mark_topic_for_deletion("a")
    deletions.wait_value({"a"})
    writer.delete_topic("a")
    topics.wait_for(lambda v: v[-1] == set())
    deletions.wait_for(lambda v: v[-1] == set())


# ---- brokers ----------------------------------------------------------------------------------


def test_broker_registration_is_ephemeral_and_exclusive(make_store: StoreFactory) -> None:
    observer = make_store(broker_id=100)
    live: Recorder[set[int]] = Recorder()
    observer.watch_brokers(live)
    first = make_store(broker_id=1)
    assert first.broker_epoch == -1
    first.register_broker([PLAINTEXT], rack="r1")
    live.wait_value({1})
    registration = observer.live_brokers()[1]
    assert (registration.rack, [str(e) for e in registration.endpoints]) == (
        "r1", ["PLAINTEXT://broker1.example:9092"])
    # The broker epoch is the registration's czxid, as both sides see it.
    assert registration.epoch == first.broker_epoch > 0

    twin = make_store(broker_id=1)
    with pytest.raises(BrokerIdInUseError, match=r"broker\.id=1") as refused:
        twin.register_broker([PLAINTEXT])
    assert isinstance(refused.value, NodeExistsError)
    first.register_broker([PLAINTEXT, SSL])  # again in the same session: updated, not refused
    assert len(observer.live_brokers()[1].endpoints) == 2
    assert observer.live_brokers()[1].epoch == first.broker_epoch == registration.epoch

    first.close()  # the session ends: ZooKeeper deletes the registration at once
    live.wait_for(lambda v: v[-1] == set())
    twin.register_broker([PLAINTEXT])
    live.wait_for(lambda v: v[-1] == {1})
    assert observer.live_brokers()[1].epoch == twin.broker_epoch > registration.epoch


# ---- the controller -------------------------------------------------------------------------


def test_controller_election_epochs_and_fencing(make_store: StoreFactory, raw: KazooClient) -> None:
    one, two = make_store(broker_id=1), make_store(broker_id=2)
    assert one.controller_id() is None and one.controller_epoch is None
    seen: Recorder[int | None] = Recorder()
    two.watch_controller(seen)
    assert one.try_elect_controller() == 1
    assert two.try_elect_controller() is None  # one is the controller
    assert one.controller_id() == two.controller_id() == 1
    seen.wait_value(1)

    topic = new_topic("events", partitions=2, replicas=(1, 2))
    one.create_topic(topic)
    assert read_json(raw, "/brokers/topics/events/partitions/0/state")["controller_epoch"] == 1

    # An operator deletes /controller to move it (or one's session is about to expire):
    # two is elected with a newer epoch while one still believes it is the controller.
    raw.delete("/controller")
    seen.wait_value(None)
    assert two.try_elect_controller() == 2
    seen.wait_for(lambda v: v[-1] == 2)
    assert one.controller_epoch == 1  # it has not heard yet...

    state = one.topic("events").partitions[0]  # type: ignore[union-attr]
    state.leader, state.leader_epoch, state.isr = 2, 1, [2]
    with pytest.raises(ControllerMovedError) as fenced:  # ...but ZooKeeper refuses it
        one.set_partition_states({("events", 0): state})
    assert fenced.value.error_code == 11  # STALE_CONTROLLER_EPOCH
    assert one.controller_epoch is None  # it knows now
    # A topic any broker may create, it creates as any broker does: unfenced, the new
    # partitions' states with their own controller epoch, not its stale one.
    one.create_topic(new_topic("late"))
    assert read_json(raw, "/brokers/topics/late/partitions/0/state")["controller_epoch"] == 0
    assert read_json(raw, "/brokers/topics/events/partitions/0/state")["leader"] == 1

    fresh = two.topic("events").partitions[0]  # type: ignore[union-attr]
    fresh.leader, fresh.leader_epoch, fresh.isr = 2, 1, [2]
    assert two.set_partition_states({("events", 0): fresh}) == {("events", 0): 1}
    assert read_json(raw, "/brokers/topics/events/partitions/0/state") == {
        "version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": 2, "isr": [2]}

    two.resign_controller()
    seen.wait_for(lambda v: v[-1] is None)
    with pytest.raises(ControllerMovedError):
        two.set_partition_states({("events", 0): fresh})
    assert one.try_elect_controller() == 3  # epochs only grow


def test_large_topics_are_written_in_bounded_transactions(
        make_store: StoreFactory, raw: KazooClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper drops a request over jute.maxbuffer (a topic of 5,000 partitions in one
    transaction was): no transaction touches more than PARTITIONS_PER_TRANSACTION
    partitions (4 here). A larger topic is written as config and assignment, as Kafka's
    admin tools write it, and the controller creates its states, a transaction per 4."""
    monkeypatch.setattr(store_module, "PARTITIONS_PER_TRANSACTION", 4)
    admin, controller = make_store(broker_id=2), make_store(broker_id=1)
    assert controller.try_elect_controller() == 1
    admin.create_topic(new_topic("small", partitions=4))  # fits: states included
    assert all(s.partition_epoch == 0 for s in admin.topic("small").partitions.values())  # type: ignore[union-attr]

    big = new_topic("big", partitions=10)
    admin.create_topic(big)
    assert all(s.partition_epoch == -1 for s in big.partitions.values())
    assert not raw.exists("/brokers/topics/big/partitions")
    read = admin.topic("big")
    assert read is not None and sorted(read.partitions) == list(range(10))
    assert all((s.leader, s.partition_epoch) == (-1, -1) for s in read.partitions.values())

    states = {("big", p): PartitionState([1], 1, 0, [1], partition_epoch=-1)
              for p in range(10)}
    controller.create_partition_states(states)
    assert all((s.partition_epoch, s.controller_epoch) == (0, 1) for s in states.values())
    read = admin.topic("big")
    assert read is not None
    assert all((s.leader, s.isr, s.partition_epoch) == (1, [1], 0)
               for s in read.partitions.values())

    # Six partitions added: more than one transaction's worth, so the controller's job.
    read.partitions.update({p: PartitionState([1], 1, 0, [1]) for p in range(10, 16)})
    admin.update_topic(read)
    again = admin.topic("big")
    assert again is not None and sorted(again.partitions) == list(range(16))
    assert [p for p, s in again.partitions.items() if s.partition_epoch < 0] == list(
        range(10, 16))
    # The controller's states for them: one transaction conflicts (a state is there
    # already), the other is written; the error says which.
    raw.create("/brokers/topics/big/partitions/15/state", b"{}", makepath=True)
    new = {("big", p): PartitionState([1], 1, 0, [1], partition_epoch=-1)
           for p in range(10, 16)}
    with pytest.raises(PartitionStateConflictError) as info:
        controller.create_partition_states(new)
    assert info.value.conflicts == {("big", 14), ("big", 15)}
    assert set(info.value.written) == {("big", p) for p in range(10, 14)}
    assert [p for (_, p), s in new.items() if s.partition_epoch == 0] == [10, 11, 12, 13]

    admin.delete_topic("big")
    assert not raw.exists("/brokers/topics/big")
    assert not raw.exists("/config/topics/big")
    assert not raw.exists("/admin/delete_topics/big")
    assert sorted(admin.topics()) == ["small"]


def test_conditional_partition_state_updates(make_store: StoreFactory, raw: KazooClient) -> None:
    controller = make_store(broker_id=1)
    leader = make_store(broker_id=2)
    assert controller.try_elect_controller() == 1
    controller.create_topic(new_topic("events", partitions=2, replicas=(2, 1)))
    seen: Recorder[PartitionState | None] = Recorder()
    controller.watch_partition_state(("events", 0), seen)
    assert seen.last is not None and seen.last.isr == [2, 1] and seen.last.replicas == [2, 1]

    # The leader shrinks the ISR, conditional on the version it read (Kafka's leaders did
    # so in ZooKeeper); the controller epoch in the state stays the controller's.
    state = leader.topic("events").partitions[0]  # type: ignore[union-attr]
    assert state.partition_epoch == 0
    state.isr = [2]
    assert leader.update_partition_state(("events", 0), state, 0) == 1
    assert state.partition_epoch == 1
    seen.wait_for(lambda v: v[-1] is not None and v[-1].isr == [2])
    assert read_json(raw, "/brokers/topics/events/partitions/0/state")["controller_epoch"] == 1

    stale = controller.topic("events").partitions[0]  # type: ignore[union-attr]
    stale.partition_epoch = 0  # as read before the leader's change
    stale.isr = [2, 1]
    with pytest.raises(PartitionStateConflictError) as conflict:
        leader.update_partition_state(("events", 0), stale, 0)
    assert conflict.value.conflicts == {("events", 0)}

    # The controller's batch: the stale state conflicts, the other one is written.
    other = controller.topic("events").partitions[1]  # type: ignore[union-attr]
    other.leader_epoch = 1
    with pytest.raises(PartitionStateConflictError) as conflict:
        controller.set_partition_states({("events", 0): stale, ("events", 1): other})
    assert conflict.value.conflicts == {("events", 0)}
    assert conflict.value.written == {("events", 1): 1}
    assert read_json(raw, "/brokers/topics/events/partitions/0/state")["isr"] == [2]
    assert controller.topic("events").partitions[1].leader_epoch == 1  # type: ignore[union-attr]

    # update_topic also writes states conditionally.
    topic = controller.topic("events")
    assert topic is not None
    topic.partitions[0].partition_epoch = 0
    topic.partitions[0].leader_epoch = 5
    with pytest.raises(PartitionStateConflictError):
        controller.update_topic(topic)
    assert controller.topic("events").partitions[0].leader_epoch == 0  # type: ignore[union-attr]


def test_partition_states_created_by_the_controller(make_store: StoreFactory,
                                                    raw: KazooClient) -> None:
    """A topic whose assignment alone was written (as Kafka's admin tools did) reads with
    leaderless partitions until the controller creates their states."""
    store = make_store(broker_id=1)
    raw.create("/brokers/topics/legacy", z.encode_topic(z.TopicAssignment(
        z.ZERO_UUID, {0: [1], 1: [1]})))
    partitions = store.topic("legacy").partitions  # type: ignore[union-attr]
    assert {p: (s.leader, s.isr, s.partition_epoch) for p, s in partitions.items()} == {
        0: (-1, [], -1), 1: (-1, [], -1)}
    with pytest.raises(ControllerMovedError):  # only the controller creates states
        store.create_partition_states({("legacy", 0): partitions[0]})
    assert store.try_elect_controller() == 1
    states = {("legacy", p): PartitionState([1], 1, 0, [1]) for p in (0, 1)}
    store.create_partition_states(states)
    assert {p: (s.leader, s.partition_epoch, s.controller_epoch)
            for p, s in store.topic("legacy").partitions.items()} == {  # type: ignore[union-attr]
        0: (1, 0, 1), 1: (1, 0, 1)}
    with pytest.raises(PartitionStateConflictError):
        store.create_partition_states(states)


# ---- producer ids and broker configs --------------------------------------------------------


def test_producer_id_blocks_never_overlap(make_store: StoreFactory) -> None:
    stores = [make_store(broker_id=1), make_store(broker_id=2)]
    blocks: list[tuple[int, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(stores))

    def allocate(store: ZooKeeperMetadataStore) -> None:
        start.wait(WAIT)
        for _ in range(40):
            first = store.allocate_producer_ids(1000)
            with lock:
                blocks.append((first, store.broker_id))

    threads = [threading.Thread(target=allocate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 2)
    assert not any(t.is_alive() for t in threads)
    firsts = sorted(first for first, _ in blocks)
    # Every block is [first, first + 999], and they tile the ids from 0 with no overlap.
    assert firsts == [1000 * i for i in range(80)]
    assert {broker for _, broker in blocks} == {1, 2}


def test_broker_configs(make_store: StoreFactory, raw: KazooClient) -> None:
    store = make_store(broker_id=1)
    assert store.broker_configs() == {}
    configs = {"<default>/log.retention.ms": "5", "1/num.io.threads": "4", "2/num.io.threads": "8"}
    store.set_broker_configs(configs)
    assert make_store(broker_id=2).broker_configs() == configs
    store.set_broker_configs({"<default>/log.retention.ms": "5"})
    assert store.broker_configs() == {"<default>/log.retention.ms": "5"}
    assert read_json(raw, "/config/brokers/1") == {"version": 1, "config": {}}  # kept, emptied
    # Three entities written, then two emptied: one notification each.
    assert len(raw.get_children("/config/changes")) == 5
    with pytest.raises(ValueError, match="entity"):
        store.set_broker_configs({"log.retention.ms": "5"})


# ---- chroot, restart and sessions -----------------------------------------------------------


def test_chroot_is_created_and_separates_clusters(zookeeper: ZooKeeperServer,
                                                  make_store: StoreFactory, chroot: str) -> None:
    a = make_store(connect_string=f"{zookeeper.connect_string}{chroot}/a/b")
    b = make_store(connect_string=f"{zookeeper.connect_string}{chroot}/c/")
    a.create_topic(new_topic("only-in-a"))
    assert sorted(a.topics()) == ["only-in-a"] and b.topics() == {}
    assert a.cluster_id != b.cluster_id
    top = KazooClient(hosts=zookeeper.connect_string)
    top.start(timeout=WAIT)
    try:
        assert top.exists(f"{chroot}/a/b/brokers/topics/only-in-a")
        assert sorted(top.get_children(chroot)) == ["a", "c"]
        assert not top.exists("/brokers/topics/only-in-a")
    finally:
        top.stop()
        top.close()


def test_zookeeper_restart_keeps_the_data(zookeeper: ZooKeeperServer,
                                          make_store: StoreFactory) -> None:
    store = make_store(broker_id=1, session_timeout_ms=4_000)
    store.register_broker([PLAINTEXT])
    store.create_topic(new_topic("events", configs={"retention.ms": "1"}))
    before = store.topics()
    session = store.session_id
    events: Recorder[SessionEvent] = Recorder()
    store.add_session_listener(events)

    zookeeper.restart()  # same port, same data directory

    # ZooKeeper restores sessions from its data, so the store is back in the same session.
    # But ZooKeeper 3.8.0 leaves a connection made while it starts unanswered (an NPE in
    # its close), and such a handshake waits out the session timeout: the session expires,
    # and the store goes on in a new one, registered again. Either way nothing is lost.
    outcome = events.wait_for(lambda v: SessionEvent.RECONNECTED in v
                              or SessionEvent.NEW_SESSION in v)
    assert outcome in ([SessionEvent.SUSPENDED, SessionEvent.RECONNECTED],
                       [SessionEvent.SUSPENDED, SessionEvent.EXPIRED, SessionEvent.NEW_SESSION])
    assert (store.session_id == session) == (SessionEvent.RECONNECTED in outcome)
    assert store.topics() == before
    assert set(store.live_brokers()) == {1}
    state = before["events"].partitions[0]
    state.leader_epoch = 1
    assert store.update_partition_state(("events", 0), state, 0) == 1
    other = make_store(broker_id=2)  # and new clients connect
    assert other.topics()["events"].partitions[0].leader_epoch == 1


def test_session_expiry_and_new_session(zookeeper: ZooKeeperServer, chroot: str,
                                        proxy: TcpProxy, make_store: StoreFactory) -> None:
    # The broker reaches ZooKeeper through a proxy that can partition it away.
    broker = make_store(broker_id=1, connect_string=f"{proxy.address}{chroot}",
                        session_timeout_ms=2_000)
    observer = make_store(broker_id=100)
    broker.register_broker([PLAINTEXT])
    assert broker.try_elect_controller() == 1
    old_session, old_epoch = broker.session_id, broker.broker_epoch
    events: Recorder[SessionEvent] = Recorder()
    broker.add_session_listener(events)
    live: Recorder[set[int]] = Recorder()
    observer.watch_brokers(live)
    controller: Recorder[int | None] = Recorder()
    observer.watch_controller(controller)

    proxy.cut()
    events.wait_value(SessionEvent.SUSPENDED)
    # ZooKeeper expires the session after its 2 s: the broker's ephemeral znodes go.
    live.wait_for(lambda v: v[-1] == set())
    controller.wait_value(None)
    proxy.heal()

    events.wait_value(SessionEvent.NEW_SESSION)
    assert events.values == [SessionEvent.SUSPENDED, SessionEvent.EXPIRED,
                             SessionEvent.NEW_SESSION]
    assert broker.session_id != old_session
    live.wait_for(lambda v: v[-1] == {1})  # registered again by the store, with a new epoch
    assert observer.live_brokers()[1].epoch == broker.broker_epoch > old_epoch
    assert observer.live_brokers()[1].endpoints == broker.live_brokers()[1].endpoints
    # Its controllership went with the old session: its writes are fenced off...
    assert broker.controller_epoch is None
    with pytest.raises(ControllerMovedError):
        broker.create_partition_states({("t", 0): PartitionState([1], 1)})
    # ...until it is elected again, with a new epoch.
    assert broker.try_elect_controller() == 2
    wait_until(lambda: observer.controller_id() == 1)
