"""The same operations through each real client library: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat. Tests run one scenario through all of them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass, field

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None  # ms; None: the client stamps it
    partition: int = -1
    offset: int = -1


@dataclass
class Client:
    name: str
    bootstrap: str
    sets_timestamps: bool = True
    delivered: list[Rec] = field(default_factory=list)

    def produce(self, topic: str, records: list[Rec], *, compression: str = "none",
                acks: str = "all") -> list[Rec]:
        raise NotImplementedError

    def consume(self, topic: str, partitions: int, count: int, timeout: float = 30) -> list[Rec]:
        raise NotImplementedError

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int:
        raise NotImplementedError


class ConfluentClient(Client):
    def _config(self, **extra: object) -> dict[str, object]:
        return {"bootstrap.servers": self.bootstrap, **extra}

    def produce(self, topic, records, *, compression="none", acks="all"):  # type: ignore[no-untyped-def]
        from confluent_kafka import Producer

        producer = Producer(self._config(**{
            "compression.type": compression, "acks": acks, "linger.ms": 5,
            "partitioner": "murmur2_random", "enable.idempotence": acks == "all"}))
        out: list[Rec] = []
        errors: list[object] = []

        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(err)
            else:
                out.append(Rec(msg.key(), msg.value(), tuple(msg.headers() or ()),
                               msg.timestamp()[1], msg.partition(), msg.offset()))

        for r in records:
            kwargs: dict[str, object] = {"key": r.key, "value": r.value, "headers": list(r.headers),
                                         "on_delivery": report}
            if r.timestamp is not None:
                kwargs["timestamp"] = r.timestamp
            if r.partition >= 0:
                kwargs["partition"] = r.partition
            producer.produce(topic, **kwargs)
            producer.poll(0)
        assert producer.flush(30) == 0
        assert not errors, errors
        return out

    def consume(self, topic, partitions, count, timeout=30):  # type: ignore[no-untyped-def]
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._config(**{"group.id": "unused", "enable.auto.commit": False}))
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        try:
            while len(out) < count and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                out.append(Rec(msg.key(), msg.value(), tuple(msg.headers() or ()),
                               msg.timestamp()[1], msg.partition(), msg.offset()))
        finally:
            consumer.close()
        return out

    def offset_for_time(self, topic, partition, timestamp):  # type: ignore[no-untyped-def]
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._config(**{"group.id": "unused"}))
        try:
            [found] = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp)],
                                                 timeout=10)
            return found.offset
        finally:
            consumer.close()


class KafkaPythonClient(Client):
    def produce(self, topic, records, *, compression="none", acks="all"):  # type: ignore[no-untyped-def]
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap, linger_ms=5,
            acks=acks if acks == "all" else int(acks),
            compression_type=None if compression == "none" else compression)
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp,
                                 partition=r.partition if r.partition >= 0 else None)
                   for r in records]
        producer.flush(30)
        out = []
        for r, future in zip(records, futures, strict=True):
            meta = future.get(30)
            out.append(Rec(r.key, r.value, r.headers, meta.timestamp, meta.partition,
                           meta.offset))
        producer.close()
        return out

    def consume(self, topic, partitions, count, timeout=30):  # type: ignore[no-untyped-def]
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                 consumer_timeout_ms=int(timeout * 1000))
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        out: list[Rec] = []
        for msg in consumer:
            out.append(Rec(msg.key, msg.value, tuple(msg.headers), msg.timestamp,
                           msg.partition, msg.offset))
            if len(out) >= count:
                break
        consumer.close()
        return out

    def offset_for_time(self, topic, partition, timestamp):  # type: ignore[no-untyped-def]
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            found = consumer.offsets_for_times({tp: timestamp})[tp]
            return -1 if found is None else found.offset
        finally:
            consumer.close()


class AiokafkaClient(Client):
    def produce(self, topic, records, *, compression="none", acks="all"):  # type: ignore[no-untyped-def]
        return asyncio.run(self._produce(topic, records, compression, acks))

    async def _produce(self, topic, records, compression, acks):  # type: ignore[no-untyped-def]
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, linger_ms=5,
            acks=acks if acks == "all" else int(acks),
            compression_type=None if compression == "none" else compression)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value,
                                           headers=list(r.headers), timestamp_ms=r.timestamp,
                                           partition=r.partition if r.partition >= 0 else None)
                       for r in records]
            out = []
            for r, future in zip(records, futures, strict=True):
                meta = await future
                if meta is None:  # acks=0: nothing to report
                    continue
                out.append(Rec(r.key, r.value, r.headers, meta.timestamp, meta.partition,
                               meta.offset))
            return out
        finally:
            await producer.stop()

    def consume(self, topic, partitions, count, timeout=30):  # type: ignore[no-untyped-def]
        return asyncio.run(self._consume(topic, partitions, count, timeout))

    async def _consume(self, topic, partitions, count, timeout):  # type: ignore[no-untyped-def]
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            out: list[Rec] = []
            deadline = time.monotonic() + timeout
            while len(out) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    out += [Rec(m.key, m.value, tuple(m.headers), m.timestamp, m.partition,
                                m.offset) for m in msgs]
            return out
        finally:
            await consumer.stop()

    def offset_for_time(self, topic, partition, timestamp):  # type: ignore[no-untyped-def]
        return asyncio.run(self._offset_for_time(topic, partition, timestamp))

    async def _offset_for_time(self, topic, partition, timestamp):  # type: ignore[no-untyped-def]
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            found = (await consumer.offsets_for_times({tp: timestamp}))[tp]
            return -1 if found is None else found.offset
        finally:
            await consumer.stop()


class KcatClient(Client):
    """kcat sends each record's key and value from stdin lines; it cannot set timestamps,
    and its -H headers apply to every record of a run."""

    def produce(self, topic, records, *, compression="none", acks="all"):  # type: ignore[no-untyped-def]
        by_headers: dict[tuple[tuple[str, bytes], ...], list[Rec]] = {}
        for r in records:
            by_headers.setdefault(r.headers, []).append(r)
        for headers, group in by_headers.items():
            argv = ["kcat", "-P", "-b", self.bootstrap, "-t", topic, "-K", "\t", "-z",
                    compression, "-X", "partitioner=murmur2_random",
                    "-X", f"request.required.acks={-1 if acks == 'all' else acks}"]
            for k, v in headers:
                argv += ["-H", f"{k}={v.decode()}"]
            lines = b"".join((r.key or b"") + b"\t" + (r.value or b"") + b"\n" for r in group)
            subprocess.run(argv, input=lines, check=True, timeout=60, capture_output=True)
        return []  # kcat does not report offsets

    def consume(self, topic, partitions, count, timeout=30):  # type: ignore[no-untyped-def]
        argv = ["kcat", "-C", "-b", self.bootstrap, "-t", topic, "-o", "beginning", "-e",
                "-c", str(count), "-J"]
        done = subprocess.run(argv, check=True, timeout=timeout + 30, capture_output=True)
        out = []
        for line in done.stdout.decode().splitlines():
            m = json.loads(line)
            h = m.get("headers") or []
            headers = tuple((h[i], h[i + 1].encode()) for i in range(0, len(h), 2))
            key = None if m["key"] is None else m["key"].encode()
            value = None if m["payload"] is None else m["payload"].encode()
            out.append(Rec(key, value, headers, m["ts"], m["partition"], m["offset"]))
        return out

    def offset_for_time(self, topic, partition, timestamp):  # type: ignore[no-untyped-def]
        # kcat -Q prints "topic [partition] offset N".
        argv = ["kcat", "-Q", "-b", self.bootstrap, "-t", f"{topic}:{partition}:{timestamp}"]
        done = subprocess.run(argv, check=True, timeout=60, capture_output=True)
        return int(done.stdout.decode().split("offset")[-1].split()[0])


CLIENTS = {
    "confluent-kafka": ConfluentClient,
    "kafka-python": KafkaPythonClient,
    "aiokafka": AiokafkaClient,
    "kcat": KcatClient,
}


def make_client(name: str, bootstrap: str) -> Client:
    client = CLIENTS[name](name, bootstrap)
    client.sets_timestamps = name != "kcat"
    return client
