"""KafkaStore: the registry's state kept in the compacted `_schemas` topic, as Confluent's
KafkaStore keeps it.

A reader thread consumes the topic's one partition from the start, for ever, applying each
record to the RegistryState under a lock. A write produces one record (acks=all,
idempotent) and returns once the reader has applied it, so the registry answers only
what every other instance will also read, in the same order. Before deciding a write, the
writer waits for the reader to reach the topic's end (`catch_up`): a decision is never
made on a state older than the topic.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.registry.state import RegistryState

log = logging.getLogger(__name__)

TOPIC = "_schemas"  # Confluent's kafkastore.topic
T = TypeVar("T")


class StoreError(Exception):
    """The topic could not be read or written in time (50001/50002 to a client)."""


class KafkaStore:
    def __init__(self, client_config: Mapping[str, Any], *, topic: str = TOPIC,
                 replication_factor: int = 3, timeout_s: float = 30.0) -> None:
        self.client_config = dict(client_config)  # bootstrap.servers and security
        self.topic = topic
        self.replication_factor = replication_factor
        self.timeout_s = timeout_s
        self.state = RegistryState()
        self._lock = threading.Condition()
        self._next_offset = 0  # the offset after the last record applied
        self._stop = threading.Event()
        self._reader: threading.Thread | None = None
        self._consumer: Consumer | None = None  # the reader thread's alone
        self._offsets: Consumer | None = None  # asks for the topic's end
        self._producer: Producer | None = None
        self.error: str | None = None  # why the reader stopped, if it did

    # ---- start and stop --------------------------------------------------------------------

    def start(self) -> None:
        """Makes the topic if it is missing, then reads it to its end."""
        self._ensure_topic()
        self._producer = Producer({**self.client_config, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 0})
        self._consumer = Consumer({**self.client_config, "group.id": "odradek-registry-reader",
                                   "enable.auto.commit": False, "enable.partition.eof": True,
                                   "isolation.level": "read_committed"})
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        # A consumer of its own: a call on the reader's while it consumes waits for ever.
        self._offsets = Consumer({**self.client_config,
                                  "group.id": "odradek-registry-reader"})
        self._reader = threading.Thread(target=self._read, name="registry-reader",
                                        daemon=True)
        self._reader.start()
        self.catch_up()
        log.info("registry: %d subjects, %d schema ids read from %s", len(self.state.subjects),
                 len(self.state.schemas_by_id), self.topic)

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(10)
        for consumer in (self._consumer, self._offsets):
            if consumer is not None:
                consumer.close()
        if self._producer is not None:
            self._producer.flush(5)

    def _ensure_topic(self) -> None:
        admin = AdminClient(self.client_config)
        metadata = admin.list_topics(timeout=self.timeout_s)
        if self.topic in metadata.topics and not metadata.topics[self.topic].error:
            partitions = len(metadata.topics[self.topic].partitions)
            if partitions != 1:  # an order across partitions does not exist
                raise StoreError(f"the {self.topic} topic must have 1 partition, not "
                                 f"{partitions}")
            return
        factor = max(1, min(self.replication_factor, len(metadata.brokers)))
        futures = admin.create_topics([NewTopic(self.topic, 1, factor, config={
            "cleanup.policy": "compact"})], request_timeout=self.timeout_s)
        try:
            futures[self.topic].result(self.timeout_s)
            log.info("registry: created the %s topic (replication factor %d)",
                     self.topic, factor)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another instance's
                raise StoreError(f"cannot create the {self.topic} topic: {e}") from e

    # ---- the reader ------------------------------------------------------------------------

    def _read(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stop.is_set():
            try:
                messages = consumer.consume(500, timeout=0.2)
            except KafkaException as e:
                log.warning("registry: reading %s: %s", self.topic, e)
                continue
            applied = False
            with self._lock:
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("registry: reading %s: %s", self.topic, error)
                        continue
                    self.state.apply(message.key(), message.value())
                    self._next_offset = message.offset() + 1
                    applied = True
                if applied:
                    self._lock.notify_all()

    def _end_offset(self) -> int:
        assert self._offsets is not None
        try:
            _, high = self._offsets.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=self.timeout_s, cached=False)
        except KafkaException as e:
            raise StoreError(f"cannot find the end of {self.topic}: {e}") from e
        return int(high)

    def _wait_applied(self, offset: int, deadline: float) -> None:
        """Until the record before `offset` is applied."""
        with self._lock:
            while self._next_offset < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(f"the registry's reader did not reach offset {offset} "
                                     f"of {self.topic} in time (at {self._next_offset})")
                self._lock.wait(left)

    def catch_up(self) -> None:
        """Returns once every record the topic holds now is applied."""
        self._wait_applied(self._end_offset(), time.monotonic() + self.timeout_s)

    # ---- writes ----------------------------------------------------------------------------

    def write(self, key: bytes, value: bytes | None) -> None:
        """Produces one record and returns once it is applied."""
        assert self._producer is not None
        delivered: list[Any] = []

        def on_delivery(error: KafkaError | None, message: Any) -> None:
            delivered.append(error or message)

        self._producer.produce(self.topic, key=key, value=value, partition=0,
                               on_delivery=on_delivery)
        deadline = time.monotonic() + self.timeout_s
        while not delivered:
            if time.monotonic() >= deadline:
                raise StoreError(f"writing to {self.topic} timed out")
            self._producer.poll(0.05)
        result = delivered[0]
        if isinstance(result, KafkaError):
            raise StoreError(f"writing to {self.topic}: {result.str()}")
        self._wait_applied(result.offset() + 1, deadline)

    def read(self, reader: Callable[[RegistryState], T]) -> T:
        """`reader` of the state under the lock (the reader thread changes it)."""
        with self._lock:
            return reader(self.state)
