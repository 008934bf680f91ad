"""What the pipelines share: their options, topics, the Spark session, and the generators'
clock and producer.

Nothing here imports pyspark at module level: `odradek pipeline list` and the generators
work without Spark installed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

DEFAULT_PARTITIONS = 3
_TIMEOUT = 30.0


def option(default: Any, help: str, flag: str | None = None) -> Any:
    """A config field; `odradek pipeline run` turns it into --NAME (or `flag`) with this help."""
    return field(default=default, metadata={"help": help, "flag": flag})


@dataclass
class StreamConfig:
    """Options of every streaming pipeline."""

    bootstrap: str = option("localhost:9092", "the cluster's bootstrap servers",
                            flag="--bootstrap-server")
    checkpoint: str = option("checkpoints/pipeline", "the checkpoint directory")
    starting_offsets: str = option(
        "earliest", "where a new query starts reading (earliest or latest); once it has a "
        "checkpoint it continues from there")
    available_now: bool = option(False, "process what the input holds now, then stop")
    interval: str = option("", "micro-batch interval such as '10 seconds' (default: the next "
                           "batch starts when the previous one ends)")


# ---- Spark ---------------------------------------------------------------------------------

def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise RuntimeError("pyspark is not installed: pip install 'odradek[spark]' "
                           "(Spark also needs Java 17)") from None


def create_session(master: str = "local[*]", app: str = "odradek-pipeline",
                   conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession with the odradek format registered; workers run this interpreter."""
    require_pyspark()
    from pyspark.sql import SparkSession

    from odradek.spark import register

    # Otherwise Spark's workers start the system Python, which lacks odradek and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.showConsoleProgress", "false"))   # it garbles our output
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def read_stream(spark: SparkSession, config: StreamConfig, *, subscribe: str = "",
                pattern: str = "", headers: bool = False, **options: str) -> DataFrame:
    """The streaming source over `subscribe` (comma-separated topics) or `pattern`, with
    more of the source's options if given."""
    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", config.bootstrap)
              .option("startingOffsets", config.starting_offsets)
              .option("includeHeaders", str(headers).lower()))
    reader = (reader.option("subscribePattern", pattern) if pattern
              else reader.option("subscribe", subscribe))
    return reader.options(**options).load()


def start(writer: DataStreamWriter, config: StreamConfig, name: str) -> StreamingQuery:
    """Starts a query with the config's trigger and its own checkpoint sub-directory."""
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    elif config.interval:
        writer = writer.trigger(processingTime=config.interval)
    return (writer.queryName(name)
            .option("checkpointLocation", os.path.join(config.checkpoint, name)).start())


def to_topic(df: DataFrame, bootstrap: str) -> DataStreamWriter:
    """A streaming writer to the odradek sink (the rows name their topic or the caller adds
    a topic option)."""
    return df.writeStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)


# ---- topics --------------------------------------------------------------------------------

def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})


def ensure_topics(bootstrap: str, partitions: dict[str, int],
                  configs: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Creates the topics that do not exist yet; returns their names. An existing topic is
    left as it is."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    existing = client.list_topics(timeout=_TIMEOUT).topics
    missing = [name for name in partitions if name not in existing]
    if not missing:
        return []
    futures = client.create_topics(
        [NewTopic(name, partitions[name], -1, config=(configs or {}).get(name, {}))
         for name in missing], request_timeout=_TIMEOUT)
    for future in futures.values():
        try:
            future.result(_TIMEOUT)
        except KafkaException as e:
            # Someone else (another pipeline, a generator) created it meanwhile.
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    wait_for_topics(client, missing)
    return missing


def wait_for_topics(client: Any, names: list[str]) -> None:
    # CreateTopics answers before every broker's metadata has the topic.
    deadline = time.monotonic() + _TIMEOUT
    while time.monotonic() < deadline:
        topics = client.list_topics(timeout=_TIMEOUT).topics
        if all(n in topics and topics[n].error is None and topics[n].partitions
               for n in names):
            return
        time.sleep(0.05)
    raise TimeoutError(f"topics {names} did not appear in the metadata")


# ---- generators ----------------------------------------------------------------------------

@dataclass
class Record:
    """A record a generator sent; partition and offset are filled in on delivery."""

    topic: str
    key: bytes | None
    value: bytes | None
    timestamp: int                       # CreateTime, milliseconds since the epoch
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    partition: int = -1                  # -1: the producer's partitioner picks it
    offset: int = -1


class Clock:
    """Event times of a generated stream: `rate` events per second from `start` (ms).

    Without a start the stream is live: it starts now and send() paces the records at that
    rate, so a newcomer can watch windows fill. With a start it is a simulated stream, sent as
    fast as possible (tests, back-fills) but with the same spacing of event times.
    """

    def __init__(self, rate: float, start: int | None) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, not {rate}")
        self.rate = rate
        self.live = start is None
        self.start = int(time.time() * 1000) if start is None else start

    def at(self, i: int) -> int:
        return self.start + int(i * 1000 / self.rate)


def iso(ms: int) -> str:
    """2024-05-01T12:00:03.120Z: the event times generators write into JSON."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def send(bootstrap: str, records: Iterable[Record], clock: Clock | None = None) -> list[Record]:
    """Produces the records in order (idempotent, so a partition keeps their order) and
    returns them with their partitions and offsets. A live clock sends each at its
    timestamp."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "log_level": 4})
    errors: list[str] = []
    sent: list[Record] = []
    began = time.monotonic()

    def delivered(record: Record) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                record.partition, record.offset = msg.partition(), msg.offset()
        return callback

    for record in records:
        if clock is not None and clock.live:
            # Serve delivery callbacks while waiting for the record's moment.
            due = began + (record.timestamp - clock.start) / 1000
            while (delay := due - time.monotonic()) > 0:
                if delay < 0.002:
                    # poll() rounds a timeout under 1 ms down to 0: it would spin a core.
                    time.sleep(delay)
                    producer.poll(0)
                else:
                    producer.poll(min(delay, 0.1))
        kwargs: dict[str, Any] = {"key": record.key, "value": record.value,
                                  "timestamp": record.timestamp, "headers": record.headers,
                                  "on_delivery": delivered(record)}
        if record.partition >= 0:
            kwargs["partition"] = record.partition
        while True:
            try:
                producer.produce(record.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        sent.append(record)
        if errors:
            break
    if producer.flush(_TIMEOUT) or errors:
        raise RuntimeError(f"the generator could not deliver its records: "
                           f"{errors[0] if errors else 'timed out'}")
    return sent
