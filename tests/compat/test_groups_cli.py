"""`odradek groups` against a real broker: list, describe with lag, reset offsets (dry run,
execute, refused while the group is active) and delete."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from test_cli import create, failed, odradek, ok

TOPIC = "orders"


@pytest.fixture(scope="module")
def groups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-cli"),
                            {"group.initial.rebalance.delay.ms": "0"}).start()
    # retention.ms=-1: the records' 2023 timestamps are far past the default 7 days, and
    # the broker's retention pass (30 s after its start) would delete them mid-module.
    create(process, TOPIC, 2, "--config", "retention.ms=-1")
    producer = Producer({"bootstrap.servers": process.bootstrap})
    for i in range(10):  # 5 records in each partition, timestamps one second apart
        producer.produce(TOPIC, value=f"order {i}".encode(), partition=i % 2,
                         timestamp=1_700_000_000_000 + (i // 2) * 1000)
    assert producer.flush(30) == 0
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def commit(broker: BrokerProcess, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                    asynchronous=False)
    consumer.close()


def describe(broker: BrokerProcess, group: str) -> dict:  # type: ignore[type-arg]
    document: dict = ok(odradek(broker, "groups", "describe", group, "--json")).json()  # type: ignore[type-arg]
    return document


def test_list_and_describe_with_lag(groups_broker: BrokerProcess) -> None:
    commit(groups_broker, "billing", {0: 2, 1: 5})
    listed = ok(odradek(groups_broker, "groups", "list", "--json")).json()
    assert {"group": "billing", "state": "Empty"} in listed
    d = describe(groups_broker, "billing")
    assert d["state"] == "Empty" and d["members"] == []
    lags = {r["partition"]: (r["committed_offset"], r["log_end_offset"], r["lag"])
            for r in d["partitions"]}
    assert lags == {0: (2, 5, 3), 1: (5, 5, 0)}  # lag = log end offset - committed
    assert d["total_lag"] == 3
    table = ok(odradek(groups_broker, "groups", "describe", "billing")).out
    assert "total lag 3" in table and "LOG-END-OFFSET" in table


def test_describe_a_group_that_does_not_exist(groups_broker: BrokerProcess) -> None:
    result = odradek(groups_broker, "groups", "describe", "nosuchgroup")
    assert result.code == 1 and result.out == ""
    assert "consumer group 'nosuchgroup' does not exist" in result.err
    # With others that do: those are shown, and the exit code still says one was missing.
    commit(groups_broker, "present", {0: 1})
    both = odradek(groups_broker, "groups", "describe", "present", "nosuchgroup", "--json")
    assert both.code == 1 and [d["group"] for d in both.json()] == ["present"]


def test_a_dry_run_for_a_missing_topic_creates_nothing(groups_broker: BrokerProcess) -> None:
    failed(odradek(groups_broker, "groups", "reset-offsets", "g", "--topic", "nosuch",
                   "--to-earliest"), "topic 'nosuch' does not exist")
    topics = ok(odradek(groups_broker, "topics", "list", "--json")).json()
    assert "nosuch" not in str(topics)


def test_reset_offsets_plans_then_executes(groups_broker: BrokerProcess) -> None:
    commit(groups_broker, "audit", {0: 4, 1: 4})
    plan = ok(odradek(groups_broker, "groups", "reset-offsets", "audit", "--topic", TOPIC,
                      "--to-earliest", "--json")).json()
    assert not plan["executed"]
    assert [(p["partition"], p["new_offset"]) for p in plan["partitions"]] == [(0, 0), (1, 0)]
    assert describe(groups_broker, "audit")["total_lag"] == 2  # a dry run changes nothing

    ok(odradek(groups_broker, "groups", "reset-offsets", "audit", "--topic", f"{TOPIC}:1",
               "--shift-by", "-3", "--execute"))
    ok(odradek(groups_broker, "groups", "reset-offsets", "audit", "--topic", f"{TOPIC}:0",
               "--to-datetime", "2023-11-14T22:13:22Z", "--execute"))  # 1_700_000_002_000
    offsets = {r["partition"]: r["committed_offset"]
               for r in describe(groups_broker, "audit")["partitions"]}
    assert offsets == {0: 2, 1: 1}
    ok(odradek(groups_broker, "groups", "reset-offsets", "audit", "--topic", TOPIC,
               "--to-offset", "99", "--execute"))  # kept within the log: the end
    offsets = {r["partition"]: r["committed_offset"]
               for r in describe(groups_broker, "audit")["partitions"]}
    assert offsets == {0: 5, 1: 5}


def test_reset_is_refused_while_the_group_is_active(groups_broker: BrokerProcess) -> None:
    consumer = Consumer({"bootstrap.servers": groups_broker.bootstrap, "group.id": "live",
                         "session.timeout.ms": 6000})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.1)
    try:
        assert describe(groups_broker, "live")["state"] == "Stable"
        failed(odradek(groups_broker, "groups", "reset-offsets", "live", "--topic", TOPIC,
                       "--to-earliest", "--execute"), "no active members")
        failed(odradek(groups_broker, "groups", "delete", "live"), "NON_EMPTY_GROUP")
    finally:
        consumer.close()


def test_delete(groups_broker: BrokerProcess) -> None:
    commit(groups_broker, "gone", {0: 1})
    ok(odradek(groups_broker, "groups", "delete", "gone"))
    listed = ok(odradek(groups_broker, "groups", "list", "--json")).json()
    assert "gone" not in {g["group"] for g in listed}
    failed(odradek(groups_broker, "groups", "delete", "gone"), "GROUP_ID_NOT_FOUND")
