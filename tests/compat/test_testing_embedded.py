"""odradek.testing's EmbeddedBroker used directly, as an application's tests use it: the
three Python clients against it, `with` and `async with`, the test clock (retention and a
group's session timeout without sleeping), and the errors a test gets for bad input."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from odradek.testing import BrokerError, EmbeddedBroker

pytestmark = pytest.mark.timeout(120)
HOUR = 3_600_000


def test_kafka_python_and_confluent_kafka_share_a_topic() -> None:
    from kafka import KafkaConsumer, KafkaProducer

    with EmbeddedBroker() as broker:
        broker.create_topic("mixed", partitions=2)
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(5):
            producer.send("mixed", f"kp{i}".encode(), partition=i % 2)
        producer.flush(10)
        producer.close()
        broker.produce("mixed", ["ck0", "ck1"], key="k", partition=1)
        consumer = KafkaConsumer("mixed", bootstrap_servers=broker.bootstrap_servers,
                                 auto_offset_reset="earliest", consumer_timeout_ms=5000)
        seen = sorted(m.value.decode() for m in consumer)
        consumer.close()
        assert seen == ["ck0", "ck1", "kp0", "kp1", "kp2", "kp3", "kp4"]
        assert [(r.partition, r.key, r.text) for r in broker.consume("mixed")][-2:] == [
            (1, b"k", "ck0"), (1, b"k", "ck1")]


def test_async_with_and_a_restart_on_the_same_port() -> None:
    async def scenario() -> tuple[str, str, list[str]]:
        async with EmbeddedBroker() as broker:
            first = broker.bootstrap_servers
            await asyncio.to_thread(broker.produce, "t", ["a", "b"])
            await asyncio.to_thread(broker.restart)
            records = await asyncio.to_thread(broker.consume, "t")
            return first, broker.bootstrap_servers, [r.text or "" for r in records]

    first, after, values = asyncio.run(scenario())
    assert first == after and values == ["a", "b"]


def test_the_data_dir_is_removed_unless_it_was_given(tmp_path: Any) -> None:
    with EmbeddedBroker() as broker:
        made = broker.data_dir
        assert made is not None and made.exists()
    assert not made.exists()
    with EmbeddedBroker(data_dir=tmp_path / "kept") as broker:
        broker.produce("t", "v")
    assert (tmp_path / "kept" / "t-0").is_dir()
    with EmbeddedBroker(data_dir=tmp_path / "kept") as broker:  # its data again
        assert [r.text for r in broker.consume("t")] == ["v"]


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_call_that_holds_the_gil_stops_a_thread_broker_not_a_process_one(mode: str) -> None:
    """C code that does not release the GIL (here libc's usleep through ctypes.PyDLL) stops
    every Python thread of the test's process, a broker's too; a broker in a child process
    goes on serving librdkafka's own threads meanwhile. LogAppendTime says when each
    record was appended."""
    hold_s = 1.5
    with EmbeddedBroker(mode=mode) as broker:
        broker.create_topic("held", config={"message.timestamp.type": "LogAppendTime"})
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all",
                             "linger.ms": 0})
        producer.produce("held", b"warm")
        assert producer.flush(10) == 0  # the connection is up before the GIL is held
        appended: list[int] = []  # LogAppendTime, in milliseconds as the broker keeps it
        began = int(time.time() * 1000)
        for _ in range(10):
            producer.produce("held", b"x", on_delivery=lambda err, msg: appended.append(
                msg.timestamp()[1] if err is None else -1))
        holding = time.time()
        ctypes.PyDLL(None).usleep(int(hold_s * 1_000_000))  # the GIL stays held
        # Not time.time() now: a broker thread takes the GIL before this one gets it back.
        ended = int((holding + hold_s) * 1000)
        assert producer.flush(10) == 0
    assert len(appended) == 10 and min(appended) > 0
    if mode == "process":
        assert all(began <= t <= ended for t in appended), (began, appended, ended)
    else:  # nothing appended while the GIL was held (0.1 s for a switch before it was)
        held_from = int(holding * 1000) + 100
        assert not [t for t in appended if held_from <= t < ended], (held_from, appended)


def test_retention_with_the_test_clock() -> None:
    with EmbeddedBroker(test_clock=True) as broker:
        # LogAppendTime: records carry the broker's (moved) time, not the client's.
        broker.create_topic("events", config={"retention.ms": HOUR, "segment.ms": HOUR,
                                               "message.timestamp.type": "LogAppendTime"})
        broker.produce("events", ["old-1", "old-2"])
        broker.advance_time(2 * HOUR)
        broker.produce("events", "new")
        records = broker.consume("events")
        assert [(r.offset, r.text) for r in records] == [(2, "new")]
        assert records[0].timestamp - int(time.time() * 1000) >= 2 * HOUR - 60_000
        assert "00000000000000000000.log" not in {
            p.name for p in (broker.data_dir / "events-0").iterdir()}


def test_a_session_timeout_with_the_test_clock() -> None:
    with EmbeddedBroker(test_clock=True) as broker:
        broker.create_topic("work", partitions=2)
        assigned: list[int] = []
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers,
                             "group.id": "workers", "session.timeout.ms": 60_000,
                             "heartbeat.interval.ms": 1000})
        consumer.subscribe(["work"], on_assign=lambda c, ps: assigned.append(len(ps)))
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                consumer.poll(0.1)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            deadline = time.monotonic() + 30
            while not assigned and time.monotonic() < deadline:
                time.sleep(0.05)
            assert assigned == [2]
            # A minute passes for the broker at once: the member's session times out
            # (its heartbeats came in real time), it is removed and rejoins.
            broker.advance_time(61_000)
            deadline = time.monotonic() + 30
            while len(assigned) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert assigned == [2, 2]
            assert "workers" in broker.log_tail(100)
        finally:
            stop.set()
            poller.join()
            consumer.close()


def test_the_odradek_loggers_level_is_restored() -> None:
    # The log tail wants the broker's INFO lines while it runs; afterwards the test
    # process's logging is as it was (other tests' caplog assertions depend on it).
    logger = logging.getLogger("odradek")
    before = logger.level
    with EmbeddedBroker() as broker:
        assert logger.getEffectiveLevel() <= logging.INFO
        broker.produce("t", "v")
    assert logger.level == before
    assert "created topic t" in broker.log_tail()


def test_bad_input_gets_clear_errors() -> None:
    with pytest.raises(ValueError, match="mode must be 'thread' or 'process'"):
        EmbeddedBroker(mode="docker")
    with pytest.raises(ValueError, match="test_clock needs mode='thread'"):
        EmbeddedBroker(mode="process", test_clock=True)
    with pytest.raises(BrokerError, match="has not been started"):
        _ = EmbeddedBroker().bootstrap_servers
    with pytest.raises(Exception, match=r"num\.partitions"):
        EmbeddedBroker({"num.partitions": "-3"}).start()
    with EmbeddedBroker({"auto.create.topics.enable": "false"}) as broker:
        broker.create_topic("once")
        with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
            broker.create_topic("once")
        with pytest.raises(BrokerError, match="cannot consume nowhere"):
            broker.consume("nowhere", timeout=3)
        with pytest.raises(BrokerError, match="produce to nowhere failed"):
            broker.produce("nowhere", "v", timeout=5)
        with pytest.raises(BrokerError, match="needs EmbeddedBroker\\(test_clock=True\\)"):
            broker.advance_time(1000)
