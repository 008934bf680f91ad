"""One scenario, every client: confluent-kafka, kafka-python, aiokafka and kcat against a
real broker process. Keyed records with headers and timestamps in every codec come back
exactly, on the partitions murmur2 picks; offsets for times; acks 0, 1 and all; the
max.message.bytes boundary."""

from __future__ import annotations

import time

import pytest
from clients import CLIENTS, CODECS, Rec, make_client
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from support.murmur2 import partition_for_key

PARTITIONS = 4


def create_topic(broker: BrokerProcess, name: str, partitions: int = PARTITIONS,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1, config=config or {})])
    futures[name].result(30)


def scenario_records(client_name: str, codec_index: int, codec: str, base_ts: int) -> list[Rec]:
    kcat = client_name == "kcat"  # kcat: headers per run, no timestamps, no tabs in keys
    return [
        Rec(key=f"key-{codec}-{i}".encode(),
            value=(f"value {codec} {i} " * (1 + i % 7)).encode(),
            headers=(("codec", codec.encode()),) + (() if kcat else (("n", str(i).encode()),)),
            timestamp=None if kcat else base_ts + codec_index * 1000 + i)
        for i in range(40)
    ]


@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_records_round_trip_in_every_codec(broker: BrokerProcess, client_name: str) -> None:
    client = make_client(client_name, broker.bootstrap)
    topic = f"scenario-{client_name}"
    create_topic(broker, topic)
    base_ts = int(time.time() * 1000) - 60_000
    sent: list[Rec] = []
    started = int(time.time() * 1000)
    for i, codec in enumerate(CODECS):
        records = scenario_records(client_name, i, codec, base_ts)
        client.produce(topic, records, compression=codec)
        sent += records
    got = client.consume(topic, PARTITIONS, len(sent))
    assert len(got) == len(sent)

    def essence(r: Rec) -> tuple[object, ...]:
        return (r.key, r.value, r.headers, r.timestamp if client.sets_timestamps else None)

    assert sorted(map(essence, got)) == sorted(map(essence, sent))
    for r in got:
        assert r.partition == partition_for_key(r.key or b"", PARTITIONS), r
        if not client.sets_timestamps:
            assert started - 5_000 <= (r.timestamp or 0) <= int(time.time() * 1000) + 5_000
    for p in range(PARTITIONS):
        offsets = sorted(r.offset for r in got if r.partition == p)
        assert offsets == list(range(len(offsets)))  # dense, from 0, no duplicates

    # Offsets for times: the first record at or after a timestamp, per partition.
    if client.sets_timestamps:
        p = got[len(got) // 2].partition
        in_p = sorted((r for r in got if r.partition == p), key=lambda r: r.offset)
        probe = in_p[len(in_p) // 2]
        expected = min(r.offset for r in in_p if (r.timestamp or 0) >= (probe.timestamp or 0))
        assert client.offset_for_time(topic, p, probe.timestamp or 0) == expected
        assert client.offset_for_time(topic, p, base_ts + 10**9) == -1  # nothing that late
        assert client.offset_for_time(topic, p, 0) == 0


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_acks(broker: BrokerProcess, client_name: str, acks: str) -> None:
    client = make_client(client_name, broker.bootstrap)
    topic = f"acks-{acks}-{client_name}"
    create_topic(broker, topic, partitions=1)
    records = [Rec(f"k{i}".encode(), f"v{i}".encode()) for i in range(25)]
    delivered = client.produce(topic, records, acks=acks)
    if delivered and acks != "0":
        assert sorted(r.offset for r in delivered) == list(range(25))
    got = client.consume(topic, 1, 25)
    assert [(r.key, r.value) for r in sorted(got, key=lambda r: r.offset)] == [
        (r.key, r.value) for r in records]


@pytest.mark.parametrize("client_name", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_max_message_bytes(broker: BrokerProcess, client_name: str) -> None:
    limit = 20_000
    topic = f"limits-{client_name}"
    create_topic(broker, topic, partitions=1, config={"max.message.bytes": str(limit)})
    client = make_client(client_name, broker.bootstrap)
    # A one-record uncompressed batch is the value plus about 80 bytes of headers.
    fits = Rec(b"k", b"x" * (limit - 200))
    assert client.produce(topic, [fits], acks="1")[0].offset == 0
    with pytest.raises(Exception) as refused:
        client.produce(topic, [Rec(b"k", b"y" * (limit + 100))], acks="1")
    # MESSAGE_TOO_LARGE (10), however the client spells it.
    assert "TOOLARGE" in str(refused.value).upper().replace(" ", "").replace("_", "")
    got = client.consume(topic, 1, 1)
    assert [r.value for r in got] == [fits.value]
