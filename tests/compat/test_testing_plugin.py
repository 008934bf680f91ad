"""The pytest plugin of odradek.testing, run the way its users run it: pytest in a child
process (pytester) on test files that use its fixtures with real clients."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(240)


def test_fixtures_give_real_brokers_to_real_clients(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app="""
        import asyncio

        import pytest
        from confluent_kafka import Consumer, Producer


        def test_function_broker(odradek_broker):
            odradek_broker.create_topic("orders", partitions=3)
            producer = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers})
            for i in range(10):
                producer.produce("orders", value=f"order {i}", partition=i % 3)
            assert producer.flush(10) == 0
            got = odradek_broker.consume("orders")
            assert sorted(r.text for r in got) == sorted(f"order {i}" for i in range(10))
            assert {r.partition for r in got} == {0, 1, 2}


        @pytest.mark.odradek({"num.partitions": 4}, **{"auto.create.topics.enable": "true"})
        def test_marker_settings(odradek_broker):
            odradek_broker.produce("auto", "x")
            [record] = odradek_broker.consume("auto")
            metadata = Consumer({"bootstrap.servers": odradek_broker.bootstrap_servers,
                                 "group.id": "g"}).list_topics("auto", timeout=10)
            assert len(metadata.topics["auto"].partitions) == 4


        def test_session_broker_a(bootstrap_servers, odradek_topic, odradek_broker_session):
            odradek_broker_session.produce(odradek_topic, ["a1", "a2"])
            assert [r.text for r in odradek_broker_session.consume(odradek_topic)] == [
                "a1", "a2"]


        def test_session_broker_b(bootstrap_servers, odradek_topic, odradek_broker_session):
            # The same broker, a topic of its own: nothing of test a.
            assert odradek_topic.startswith("test_session_broker_b-")
            odradek_broker_session.produce(odradek_topic, "b1")
            assert [r.text for r in odradek_broker_session.consume(odradek_topic)] == ["b1"]


        def test_async_app(odradek_broker):
            from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

            async def app():
                producer = AIOKafkaProducer(bootstrap_servers=odradek_broker.bootstrap_servers)
                await producer.start()
                try:
                    await producer.send_and_wait("events", b"hello")
                finally:
                    await producer.stop()
                consumer = AIOKafkaConsumer("events", auto_offset_reset="earliest",
                                            bootstrap_servers=odradek_broker.bootstrap_servers)
                await consumer.start()
                try:
                    message = await asyncio.wait_for(consumer.getone(), 20)
                finally:
                    await consumer.stop()
                return message.value

            assert asyncio.run(app()) == b"hello"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5)


def test_xdist_workers_get_brokers_of_their_own(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_parallel="""
        import os

        import pytest


        @pytest.mark.parametrize("n", range(4))
        def test_one(n, bootstrap_servers, odradek_topic, odradek_broker_session):
            odradek_broker_session.produce(odradek_topic, f"v{n}")
            assert [r.text for r in odradek_broker_session.consume(odradek_topic)] == [f"v{n}"]
            with open(f"seen-{n}", "w") as f:
                f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {bootstrap_servers}")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-n", "2")
    result.assert_outcomes(passed=4)
    seen = {tuple((pytester.path / f"seen-{n}").read_text().split()) for n in range(4)}
    workers = {worker for worker, _ in seen}
    assert workers == {"gw0", "gw1"}
    # One session broker per worker: as many addresses as workers.
    assert len({address for _, address in seen}) == 2


def test_a_failing_test_shows_the_brokers_log(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fails="""
        def test_broken(odradek_broker):
            odradek_broker.create_topic("seen-in-the-log")
            assert False, "the application's bug"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*odradek log (127.0.0.1:*)*",
                                 "*broker 1 started*"])
    assert "the application's bug" in result.stdout.str()


def test_the_broker_is_not_assertion_rewritten(pytester: pytest.Pytester) -> None:
    """Installed from a wheel, pytest marks the whole odradek package for assertion
    rewriting (every module of a pytest11 plugin's distribution); `-p mark_odradek` marks
    it the same way here, before the entry points load. The plugin keeps only itself
    marked: the broker's modules load from their own bytecode."""
    pytester.makepyfile(mark_odradek="""
        import pytest
        pytest.register_assert_rewrite("odradek")
    """, test_loaders="""
        import sys

        def test_loaders(odradek_broker):
            broker = sys.modules["odradek.broker.kafka_server"]
            plugin = sys.modules["odradek.testing.pytest_plugin"]
            assert type(broker.__loader__).__name__ == "SourceFileLoader"
            assert type(plugin.__loader__).__name__ == "AssertionRewritingHook"
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-p",
                                           "mark_odradek")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_restart_and_kill_keep_what_was_acknowledged(pytester: pytest.Pytester,
                                                      mode: str) -> None:
    pytester.makepyfile(test_faults="""
        from confluent_kafka import Producer


        def test_faults(odradek_broker):
            address = odradek_broker.bootstrap_servers
            odradek_broker.create_topic("t")
            odradek_broker.produce("t", ["one", "two"])
            odradek_broker.restart()
            assert odradek_broker.bootstrap_servers == address  # the same port
            odradek_broker.produce("t", "three")
            odradek_broker.kill()
            # The broker is gone: a producer cannot deliver.
            producer = Producer({"bootstrap.servers": address, "message.timeout.ms": 1000,
                                 "log_level": 0})
            failed = []
            producer.produce("t", b"lost", on_delivery=lambda err, msg: failed.append(err))
            producer.flush(5)
            assert len(failed) == 1 and failed[0] is not None
            odradek_broker.start()  # recovers its logs after the kill
            assert "unclean shutdown" in odradek_broker.log_tail(40)
            assert [r.text for r in odradek_broker.consume("t")] == ["one", "two", "three"]
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q",
                                           f"--odradek-mode={mode}")
    result.assert_outcomes(passed=1)


def test_a_cluster_survives_a_killed_broker(pytester: pytest.Pytester) -> None:
    pytest.importorskip("kazoo")
    pytester.makepyfile(test_cluster="""
        def test_cluster(odradek_cluster):
            topic = odradek_cluster.create_topic("replicated", partitions=3)
            odradek_cluster.produce(topic, [f"r{i}" for i in range(30)])
            odradek_cluster.kill_broker(2)
            odradek_cluster.wait_for_brokers()
            odradek_cluster.produce(topic, [f"s{i}" for i in range(30)])
            got = sorted(r.text for r in odradek_cluster.consume(topic))
            assert got == sorted([f"r{i}" for i in range(30)] + [f"s{i}" for i in range(30)])
            odradek_cluster.restart_broker(2)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-rs")
    outcomes = result.parseoutcomes()
    if outcomes.get("skipped"):
        pytest.skip("ZooKeeper is not installed: " + result.stdout.str()[-300:])
    result.assert_outcomes(passed=1)
