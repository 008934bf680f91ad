"""The Spark data source's speed, next to Parquet and the machine's own limits in the same run.

Run: .venv/bin/python benchmarks/bench_spark.py [--quick] [--only CASES] [--records N]
     [--repeats N] [--read-option KEY=VALUE ...] [--profile py-spy|py-spy-native]
     (a full run takes about 6 minutes; --quick about 3)

The script starts its own broker (benchmarks/bench_broker.py's BenchBroker: `python -m
odradek serve` on 127.0.0.1, a free port, data under .bench-tmp/, removed at the end), fills
a topic of --partitions (4) partitions with --records (2,000,000) records of --size (100)
bytes (each distinct: its number, then random bytes), no key, the same count in each
partition, in a producer process of its own (confluent-kafka, linger.ms=5, batch.size=1
MiB), and starts one SparkSession (local[2], spark.ui.enabled=false, session time zone UTC,
spark.sql.shuffle.partitions=--shuffle-partitions (4, as `odradek pipeline`'s session),
PYSPARK_PYTHON=this interpreter; every other setting Spark's default). --read-option
KEY=VALUE adds an option to the odradek reads of cases 1 and 3 (e.g. a kafka.* consumer
setting). Broker, producer, Spark's JVM and its Python workers share this machine's cores.
Cases:

0. limits: loopback TCP throughput and the disk's write throughput, measured as
   bench_broker.py does (its functions), and the client's own ceiling: one confluent-kafka
   consumer process reading the whole topic (the 4 partitions assigned at offset 0, large
   fetches and local queues, as bench_broker's consume cases).
1. batch: `spark.read.format("odradek")...load()` of the whole topic written to Spark's
   noop sink (`write.format("noop").mode("overwrite").save()`), which materializes every
   row of every column; rows/s over the wall time from load() to the end of the write,
   planning included. Before the timed reads the same DataFrame is written to a Parquet
   file (not timed; that also warms the Python workers up) and checked: count, the bytes
   of the values, the offsets (without the parquet case: one untimed read instead).
2. parquet: the same rows read back from that Parquet file into the noop sink the same way;
   the ratio of the two.
3. stream: a streaming query from the earliest offsets, trigger(availableNow=True), into the
   noop sink, a fresh checkpoint each time; rows/s from start() to the query's end. An
   untimed query over the last 1,000 records of each partition goes first (the session's
   first streaming query starts the driver's Python stream reader).
4. latency: micro-batch durations (durationMs.triggerExecution of each batch in the
   query's progress reports, the first batch left out) at a steady input of --rate (2,000)
   events/s for --latency-seconds (30), trigger processingTime --trigger (250 ms):
   - the activity pipeline (odradek/pipelines/activity.py) when it is importable: a
     producer process sends page views (JSON as the pipeline reads them) at that rate and
     both of its queries (to a topic and to a Parquet table) run, with --window and
     --watermark shortened so that windows close during the run. Its output is a count per
     window once the watermark passes, so its event-to-output time is the window plus the
     watermark by design: only batch durations are reported for it.
   - a copy query (topic -> odradek sink -> topic, the values unchanged), with the sink's
     exactly-once default (copy) and with deliveryGuarantee=at-least-once
     (copy-at-least-once), the cost of the transactions side by side: the producer
     stamps time.monotonic_ns() into each value, a consumer process reads the output topic
     and takes now - stamp: the event-to-output latency; records sent in the first
     --warmup (2) seconds are left out.

Every timed read is repeated --repeats (3) times; best and median are printed. Before each
one the script waits up to --quiet-wait seconds for the rest of the machine to go quiet,
and each prints the CPU used over its wall time, in cores: Spark's JVM, its Python workers,
the broker, the script's own clients (producers, consumers) and others (other processes on
the machine). --json FILE writes every figure, with each micro-batch's duration, to FILE.
--profile samples the Python workers with py-spy (--subprocesses) during the first timed
batch read and prints where their time goes; raw stacks land in .bench-tmp/profiles/.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import Any

from bench_broker import (
    BENCH_ROOT,
    MB,
    PRODUCER_SETTINGS,
    ROOT,
    STAMP,
    Admin,
    BenchBroker,
    clock_ticks,
    cpu_model,
    disk_limit,
    filesystem_of,
    loopback_limit,
    percentiles,
    process_user_system_s,
    run_consumer,
    run_e2e_producer,
    run_workers,
    self_cpu_s,
    spawn_context,
    system_busy_s,
    wait_for_quiet,
)

TOPIC = "bench-spark"
CASES = ["limits", "batch", "parquet", "stream", "latency"]

# Targets (the issue), on this machine.
TARGET_BATCH_RPS = 600_000.0
TARGET_PARQUET_RATIO = 0.4
TARGET_BATCH_MS = 1000.0

# The client's own ceiling, as bench_broker.py's consume cases read: large fetches, and
# librdkafka's local queue thresholds raised so that they are not what is measured.
CLIENT_FETCH = {"fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
                "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576}


# ---- processes and CPU --------------------------------------------------------------------


def process_table() -> dict[int, tuple[int, float, float]]:
    """pid -> (parent pid, own CPU s, CPU s of its children already reaped) of every process."""
    table: dict[int, tuple[int, float, float]] = {}
    ticks = clock_ticks()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        own = (int(fields[11]) + int(fields[12])) / ticks
        reaped = (int(fields[13]) + int(fields[14])) / ticks
        table[int(entry)] = (int(fields[1]), own, reaped)
    return table


def descendants(table: dict[int, tuple[int, float, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack += children.get(pid, [])
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def jvm_pid() -> int:
    """Spark's JVM: the java process this script started (through PySpark's launcher)."""
    table = process_table()
    for pid in sorted(descendants(table, os.getpid())):
        if "org.apache.spark.deploy.SparkSubmit" in cmdline(pid):
            return pid
    raise RuntimeError("Spark's JVM is not a child of this process")


@dataclass
class CpuSample:
    wall: float
    busy: float
    jvm: float
    workers: float
    broker: float
    harness: float

    @staticmethod
    def take(jvm: int, broker: int) -> CpuSample:
        table = process_table()
        workers = sum(table[p][1] + table[p][2] for p in descendants(table, jvm) if p in table)
        jvm_own = table.get(jvm, (0, 0.0, 0.0))[1]
        broker_cpu = table.get(broker, (0, 0.0, 0.0))[1]
        return CpuSample(time.monotonic(), system_busy_s(), jvm_own, workers, broker_cpu,
                         sum(process_user_system_s(os.getpid())))


@dataclass
class Cores:
    """CPU over a window, in cores: Spark's JVM, its Python workers, the broker, clients
    of the harness (producers, consumers), the harness itself and everything else."""

    jvm: float = 0.0
    workers: float = 0.0
    broker: float = 0.0
    clients: float = 0.0
    others: float = 0.0

    @staticmethod
    def between(a: CpuSample, b: CpuSample, clients_cpu: float = 0.0) -> Cores:
        wall = max(b.wall - a.wall, 1e-9)
        jvm, workers = b.jvm - a.jvm, b.workers - a.workers
        broker, harness = b.broker - a.broker, b.harness - a.harness
        others = max(0.0, (b.busy - a.busy) - jvm - workers - broker - harness - clients_cpu)
        return Cores(jvm / wall, workers / wall, broker / wall, (clients_cpu + harness) / wall,
                     others / wall)

    def text(self) -> str:
        clients = f" / clients {self.clients:.2f}" if self.clients >= 0.01 else ""
        return (f"CPU jvm {self.jvm:.2f} / python {self.workers:.2f} / broker "
                f"{self.broker:.2f}{clients} / others {self.others:.2f} cores")


# ---- py-spy on the Python workers ---------------------------------------------------------


class WorkerProfile:
    """py-spy record of every PySpark daemon under the JVM and the workers it forks."""

    def __init__(self, jvm: int, directory: Path, label: str, native: bool) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        table = process_table()
        daemons = [p for p in sorted(descendants(table, jvm)) if "pyspark.daemon" in cmdline(p)
                   and table[p][0] == jvm]
        directory.mkdir(parents=True, exist_ok=True)
        self.rate = 100 if native else 250
        self.paths: list[Path] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        for pid in daemons:
            path = directory / f"{label}-{pid}.txt"
            argv = [exe, "record", "-p", str(pid), "--subprocesses", "-r", str(self.rate),
                    "--format", "raw", "-o", str(path), "--native" if native else "--nonblocking"]
            self.paths.append(path)
            self.processes.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
        time.sleep(0.5)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def summary(self, top: int = 14) -> None:
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = 0
        for path in self.paths:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                stack, _, count_text = line.rpartition(" ")
                if not stack or not count_text.isdigit():
                    continue
                frames = [f.replace(str(ROOT) + "/", "") for f in stack.split(";")
                          if not f.startswith(("process ", "thread "))]
                if not frames or any(f.startswith(("select (", "poll (", "accept ("))
                                     or "wait (" in f for f in frames[-1:]):
                    continue
                count = int(count_text)
                total += count
                own[frames[-1]] += count
                for frame in set(frames):
                    if "odradek/" in frame or "pyarrow" in frame or "serializers" in frame:
                        inclusive[frame] += count
        where = ", ".join(str(p.relative_to(ROOT)) for p in self.paths)
        print(f"  py-spy of the Python workers: {total:,} busy samples at {self.rate} Hz "
              f"(raw stacks: {where})")
        if not total:
            return
        print(f"    {'self %':>7}  function on top of the stack")
        for name, count in own.most_common(top):
            print(f"    {100 * count / total:6.1f}%  {name}")
        print(f"    {'incl %':>7}  odradek, pyarrow and serializer frames anywhere in the stack")
        for name, count in inclusive.most_common(top):
            print(f"    {100 * count / total:6.1f}%  {name}")


# ---- producers and consumers (own processes) ----------------------------------------------


def run_fill(bootstrap: str, topic: str, records: int, size: int,
             partitions: int) -> dict[str, Any]:
    """Fills the topic: `records` distinct random values, round-robin over the partitions
    (each gets the same count), acks=1, large batches."""
    from confluent_kafka import KafkaError, Producer

    failed: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", **PRODUCER_SETTINGS,
                         "on_delivery": on_delivery, "log_level": 3})
    producer.list_topics(topic, timeout=30)
    slots = 65_536
    block = os.urandom(size * slots)
    produce, poll = producer.produce, producer.poll
    start = time.monotonic()
    n = 0
    while n < records:
        # Distinct values: the record's number, then random bytes.
        at = (n % slots) * size
        value = n.to_bytes(8, "big") + block[at + 8:at + size]
        try:
            produce(topic, value, partition=n % partitions)
        except BufferError:
            poll(0.001)
            continue
        n += 1
        if not n & 1023:
            poll(0)
    left = producer.flush(120)
    return {"records": n - len(failed) - left, "failed": len(failed) + left,
            "seconds": time.monotonic() - start, "last_error": failed[0] if failed else None}


def run_stamp_consumer(bootstrap: str, topic: str, partitions: int, ready: Any, done: Any,
                       warmup_ns: int, grace_s: float) -> dict[str, Any]:
    """Reads `topic` from its end; now - the stamp in each value (ms). Stops `grace_s`
    after `done` is set and nothing more arrives."""
    from confluent_kafka import Consumer, TopicPartition

    cpu0 = self_cpu_s()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                         "enable.auto.commit": False, "log_level": 3})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)]
    consumer.assign([TopicPartition(topic, p, ends[p]) for p in range(partitions)])
    consumer.consume(num_messages=1, timeout=1.0)
    ready.set()
    unpack = STAMP.unpack_from
    latencies: list[float] = []
    first = 0
    received = 0
    idle_since = None
    while True:
        msg = consumer.poll(0.05)
        now = time.monotonic_ns()
        if msg is None:
            if done.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > grace_s:
                    break
            continue
        idle_since = None
        if msg.error() is not None:
            raise RuntimeError(f"consumer error: {msg.error()}")
        sent = unpack(msg.value() or bytes(STAMP.size))[0]
        first = first or sent
        received += 1
        if sent - first >= warmup_ns:
            latencies.append((now - sent) / 1e6)
    consumer.close()
    return {"role": "consumer", "received": received, "latency": percentiles(latencies),
            "cpu": self_cpu_s() - cpu0}


def run_activity_events(bootstrap: str, topic: str, rate: int, seconds: float,
                        ready: Any) -> dict[str, Any]:
    """Page views as the activity pipeline reads them (JSON: user, page, referrer,
    event_time; key: the user), `rate` a second, paced with sleeps. Not the pipeline's own
    generator: its live clock waits with poll() timeouts under 1 ms, which round to 0 and
    spin (0.7 of a core at 2,000 events/s here), CPU the pipeline would not get."""
    import random

    from confluent_kafka import Producer

    rng = random.Random(7)
    pages = ["/", "/search", "/cart", "/checkout", "/account"] + [
        f"/products/{n}" for n in range(1, 21)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
    producer.list_topics(topic, timeout=30)
    ready.wait(120)
    cpu0 = self_cpu_s()
    start = time.monotonic()
    total = int(rate * seconds)
    sent = 0
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            now = time.time()
            user = f"user-{rng.randint(1, 50):03d}"
            event = {"user": user, "page": rng.choice(pages), "referrer": None,
                     "event_time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                     + f".{int(now * 1000) % 1000:03d}Z"}
            producer.produce(topic, json.dumps(event).encode(), key=user.encode())
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, start + sent / rate - time.monotonic()))
    rate_sent = sent / (time.monotonic() - start)
    left = producer.flush(30)
    return {"role": "producer", "sent": sent - left, "rate": rate_sent,
            "cpu": self_cpu_s() - cpu0}


# ---- Spark ---------------------------------------------------------------------------------


def spark_session(shuffle_partitions: int) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("odradek-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@dataclass
class Timed:
    seconds: float
    rows: int
    cores: Cores
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


@dataclass
class Series:
    """Repeats of one timed read."""

    name: str
    runs: list[Timed] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max(r.rps for r in self.runs) if self.runs else 0.0

    @property
    def median(self) -> float:
        return statistics.median(r.rps for r in self.runs) if self.runs else 0.0


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path, broker: BenchBroker) -> None:
        self.args = args
        self.tmp = tmp
        self.broker = broker
        self.spark: Any = None
        self.jvm = 0
        self.parquet = tmp / "rows.parquet"
        self.profiled = False

    def start_spark(self) -> None:
        started = time.monotonic()
        self.spark = spark_session(self.args.shuffle_partitions)
        self.jvm = jvm_pid()
        import pyspark

        print(f"\n== SparkSession local[2], pyspark {pyspark.__version__}, started in "
              f"{time.monotonic() - started:.1f} s; JVM pid {self.jvm} ==")

    def source(self, stream: bool = False, starting: str = "earliest") -> Any:
        reader = self.spark.readStream if stream else self.spark.read
        reader = (reader.format("odradek")
                  .option("kafka.bootstrap.servers", self.broker.bootstrap)
                  .option("subscribe", TOPIC))
        if stream:
            reader = reader.option("startingOffsets", starting)
        for key, value in self.args.read_option:
            reader = reader.option(key, value)
        return reader.load()

    def quiet(self, what: str) -> None:
        if self.args.quiet_wait <= 0:
            return
        start = time.monotonic()
        load = wait_for_quiet(self.args.quiet_wait)
        if load >= 0.25:
            print(f"  ({what}: the machine is busy, {load:.2f} cores used by others)")
        elif time.monotonic() - start > 2.5:
            print(f"  ({what}: waited {time.monotonic() - start:.0f} s for other load to end)")

    @contextlib.contextmanager
    def window(self) -> Iterator[list[CpuSample]]:
        samples = [CpuSample.take(self.jvm, self.broker.pid)]
        yield samples
        samples.append(CpuSample.take(self.jvm, self.broker.pid))

    def timed(self, what: str, action: Callable[[], int]) -> Timed:
        self.quiet(what)
        profile = None
        if self.args.profile != "none" and not self.profiled and what.startswith("batch"):
            profile = WorkerProfile(self.jvm, self.args.profile_dir, "batch-read",
                                    native=self.args.profile == "py-spy-native")
        with self.window() as samples:
            start = time.monotonic()
            rows = action()
            seconds = time.monotonic() - start
        cores = Cores.between(samples[0], samples[1])
        timed = Timed(seconds, rows, cores)
        print(f"  {what}: {rows:,} rows in {seconds:.2f} s = {timed.rps:,.0f} rows/s; "
              f"{cores.text()}")
        if profile is not None:
            profile.stop()
            profile.summary()
            self.profiled = True
        return timed

    # -- cases --

    def prepare_parquet(self) -> None:
        """The topic's rows into a Parquet file (not timed), then checked."""
        from pyspark.sql import functions as F

        start = time.monotonic()
        self.source().write.mode("overwrite").parquet(str(self.parquet))
        written = time.monotonic() - start
        df = self.spark.read.parquet(str(self.parquet))
        row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"),
                     F.countDistinct("partition", "offset").alias("distinct")).first()
        expected = self.args.records
        if (row.n, row.bytes, row.distinct) != (expected, expected * self.args.size, expected):
            raise RuntimeError(f"the Parquet copy holds {row.n:,} rows, {row.bytes:,} value "
                               f"bytes, {row.distinct:,} distinct offsets; expected {expected:,}")
        size = sum(p.stat().st_size for p in self.parquet.glob("*.parquet"))
        files = len(list(self.parquet.glob("*.parquet")))
        print(f"  Parquet copy (not timed): {expected:,} rows read through the data source and "
              f"written in {written:.1f} s; {files} files, {size / MB:,.0f} MB; checked")

    def warm_up(self) -> None:
        """One untimed read: Python workers started, consumers cached, JIT warm."""
        start = time.monotonic()
        self._batch_once()
        print(f"  warm-up read (not timed): {time.monotonic() - start:.1f} s")

    def batch(self) -> Series:
        series = Series("batch")
        for i in range(self.args.repeats):
            series.runs.append(self.timed(f"batch read #{i + 1}", self._batch_once))
        return series

    def _batch_once(self) -> int:
        self.source().write.format("noop").mode("overwrite").save()
        return self.args.records

    def parquet_read(self) -> Series:
        series = Series("parquet")

        def once() -> int:
            self.spark.read.parquet(str(self.parquet)).write.format("noop").mode(
                "overwrite").save()
            return self.args.records

        for i in range(self.args.repeats):
            series.runs.append(self.timed(f"parquet read #{i + 1}", once))
        return series

    def warm_up_stream(self) -> None:
        """An untimed availableNow query over the last 1,000 records of each partition: the
        first streaming query of a session starts the driver's Python stream reader."""
        from confluent_kafka import TopicPartition

        admin = Admin(self.broker.bootstrap)
        try:
            ends = {str(p): admin.consumer.get_watermark_offsets(
                TopicPartition(TOPIC, p), timeout=30)[1] for p in range(self.args.partitions)}
        finally:
            admin.close()
        starting = json.dumps({TOPIC: {p: max(0, end - 1000) for p, end in ends.items()}})
        start = time.monotonic()
        query = (self.source(stream=True, starting=starting).writeStream.format("noop")
                 .trigger(availableNow=True)
                 .option("checkpointLocation", str(self.tmp / "stream-warm-up")).start())
        query.awaitTermination()
        print(f"  streaming warm-up (not timed): {time.monotonic() - start:.1f} s")

    def stream(self) -> Series:
        series = Series("stream")
        self.warm_up_stream()
        for i in range(self.args.repeats):
            checkpoint = self.tmp / f"stream-checkpoint-{i}"
            progress: list[dict[str, Any]] = []

            def once(checkpoint: Path = checkpoint, progress: list[dict[str, Any]] = progress
                     ) -> int:
                query = (self.source(stream=True).writeStream.format("noop")
                         .trigger(availableNow=True)
                         .option("checkpointLocation", str(checkpoint)).start())
                query.awaitTermination()
                if query.exception() is not None:
                    raise RuntimeError(f"the streaming query failed: {query.exception()}")
                progress += [dict(p) for p in query.recentProgress]
                return sum(int(p["numInputRows"]) for p in progress)

            timed = self.timed(f"stream availableNow #{i + 1}", once)
            batches = [p for p in progress if "addBatch" in (p.get("durationMs") or {})]
            timed.extra["batches"] = len(batches)
            if timed.rows != self.args.records:
                raise RuntimeError(f"the streaming query read {timed.rows:,} rows, not "
                                   f"{self.args.records:,}")
            series.runs.append(timed)
            shutil.rmtree(checkpoint, ignore_errors=True)
        return series

    def latency(self, ctx: SpawnContext) -> list[dict[str, Any]]:
        results = []
        kinds = self.args.latency_pipeline
        if "activity" in kinds:
            try:
                from odradek.pipelines import activity  # noqa: F401
            except ImportError as e:
                print(f"  activity pipeline not importable ({e}): measured with the copy "
                      "query only")
                kinds = [k for k in kinds if k != "activity"]
        for kind in kinds:
            self.quiet(f"latency {kind}")
            result = (self._activity(ctx) if kind == "activity"
                      else self._copy(ctx, kind))
            results.append(result)
        return results

    def _copy(self, ctx: SpawnContext, kind: str) -> dict[str, Any]:
        a = self.args
        source, sink = f"bench-latency-in-{kind}", f"bench-latency-out-{kind}"
        guarantee = "at-least-once" if kind == "copy-at-least-once" else "exactly-once"
        admin = Admin(self.broker.bootstrap)
        try:
            admin.create_topic(source, a.partitions)
            admin.create_topic(sink, a.partitions)
        finally:
            admin.close()
        df = (self.spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", self.broker.bootstrap)
              .option("subscribe", source).option("startingOffsets", "latest").load())
        query = (df.select("key", "value").writeStream.format("odradek")
                 .option("kafka.bootstrap.servers", self.broker.bootstrap)
                 .option("topic", sink).option("deliveryGuarantee", guarantee)
                 .trigger(processingTime=a.trigger)
                 .option("checkpointLocation", str(self.tmp / f"latency-{kind}")).start())
        try:
            self._first_batch(query)
            ready, done = ctx.Event(), ctx.Event()
            with self.window() as samples:
                results = run_workers(ctx, [
                    (run_stamp_consumer, (self.broker.bootstrap, sink, a.partitions, ready,
                                          done, int(a.warmup * 1e9), 10.0)),
                    (run_e2e_producer, (self.broker.bootstrap, source, a.size, "1", a.rate,
                                        a.latency_seconds, ready, done)),
                ], timeout=a.latency_seconds + 300)
            progress = [dict(p) for p in query.recentProgress]
            if query.exception() is not None:
                raise RuntimeError(f"the copy query failed: {query.exception()}")
        finally:
            self.stop_quietly([query])
        consumer = next(r for r in results if r["role"] == "consumer")
        producer = next(r for r in results if r["role"] == "producer")
        if producer["failed"] or consumer["received"] != producer["sent"]:
            raise RuntimeError(f"copy query: {producer['sent']:,} sent, {producer['failed']:,} "
                               f"failed, {consumer['received']:,} received")
        result = {"pipeline": kind, "queries": {kind: batch_durations(progress)},
                  "rate": producer["rate"], "sent": producer["sent"],
                  "latency": consumer["latency"],
                  "cores": Cores.between(samples[0], samples[1],
                                         consumer["cpu"] + producer["cpu"])}
        print_latency(result)
        return result

    def _activity(self, ctx: SpawnContext) -> dict[str, Any]:
        from odradek.pipelines.activity import ActivityConfig, run

        a = self.args
        source = "bench-page-views"
        config = ActivityConfig(
            bootstrap=self.broker.bootstrap, checkpoint=str(self.tmp / "latency-activity"),
            input=source, output="bench-page-views-per-window",
            table=str(self.tmp / "activity-table"), window=a.window, watermark=a.watermark,
            starting_offsets="latest", interval=a.trigger)
        admin = Admin(self.broker.bootstrap)
        try:
            admin.create_topic(source, a.partitions)
        finally:
            admin.close()
        queries = run(self.spark, config)
        try:
            for query in queries:
                self._first_batch(query)
            ready = ctx.Event()
            with self.window() as samples:
                [producer] = run_workers(ctx, [
                    (run_activity_events, (self.broker.bootstrap, source, a.rate,
                                           a.latency_seconds, ready)),
                ], on_started=ready.set, timeout=a.latency_seconds + 300)
                time.sleep(3 * _seconds(a.trigger) + 2.0)  # the last events go through
            progress = {q.name or f"query-{i}": [dict(p) for p in q.recentProgress]
                        for i, q in enumerate(queries)}
            for i, query in enumerate(queries):
                if query.exception() is not None:
                    raise RuntimeError(f"activity query {i} failed: {query.exception()}")
        finally:
            self.stop_quietly(queries)
        labels = ["table", "topic"] if len(progress) == 2 else list(progress)
        names = {label: batch_durations(items)
                 for label, items in zip(labels, progress.values(), strict=True)}
        result = {"pipeline": "activity", "queries": names, "rate": producer["rate"],
                  "sent": producer["sent"], "latency": None,
                  "cores": Cores.between(samples[0], samples[1], producer["cpu"])}
        print_latency(result)
        return result

    def stop_quietly(self, queries: list[Any]) -> None:
        """Stops the queries without Spark's log of the tasks it interrupts (harmless ERROR
        lines and stack traces); a query's own failure was checked before."""
        self.spark.sparkContext.setLogLevel("OFF")
        try:
            for query in queries:
                query.stop()
        finally:
            self.spark.sparkContext.setLogLevel("ERROR")

    def _first_batch(self, query: Any, timeout: float = 120) -> None:
        """Waits until the query has finished its first micro-batch."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            if any("addBatch" in (p.get("durationMs") or {}) for p in query.recentProgress):
                return
            time.sleep(0.1)
        raise RuntimeError("the streaming query did not finish its first batch")


def _seconds(interval: str) -> float:
    number, _, unit = interval.strip().partition(" ")
    scale = {"millisecond": 1e-3, "milliseconds": 1e-3, "ms": 1e-3, "second": 1.0,
             "seconds": 1.0, "s": 1.0}.get(unit.strip() or "seconds", 1.0)
    return float(number) * scale


def batch_durations(progress: list[dict[str, Any]]) -> dict[str, Any]:
    """triggerExecution of each micro-batch that ran (one with addBatch), the first left
    out; percentiles and the count over 1 s."""
    ran = [p for p in progress if "addBatch" in (p.get("durationMs") or {})]
    ran.sort(key=lambda p: int(p["batchId"]))
    first = ran[0] if ran else None
    rest = ran[1:]
    durations = [float(p["durationMs"]["triggerExecution"]) for p in rest]
    rows = [int(p["numInputRows"]) for p in rest]
    phases: dict[str, float] = {}
    for p in rest:
        for name, ms in p["durationMs"].items():
            phases[name] = phases.get(name, 0.0) + float(ms)
        # Time in the state store (stateful queries): updates, removals, commits.
        for operator in p.get("stateOperators") or []:
            for name in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                key = f"state.{name.removesuffix('Ms')}"
                phases[key] = phases.get(key, 0.0) + float(operator.get(name) or 0)
    return {"batches": len(rest), "first_ms": float(first["durationMs"]["triggerExecution"])
            if first else float("nan"), "ms": percentiles(durations),
            "mean_ms": statistics.fmean(durations) if durations else float("nan"),
            "over_1s": sum(d >= TARGET_BATCH_MS for d in durations),
            "rows_per_batch": statistics.fmean(rows) if rows else 0.0,
            "each": [(int(p["batchId"]), float(p["durationMs"]["triggerExecution"]),
                      int(p["numInputRows"])) for p in ran],
            "phases_ms": {k: v / len(rest) for k, v in phases.items()} if rest else {}}


# ---- report -------------------------------------------------------------------------------


def print_latency(result: dict[str, Any]) -> None:
    print(f"  latency, {result['pipeline']} pipeline: {result['sent']:,} events at "
          f"{result['rate']:,.0f}/s; {result['cores'].text()}")
    for name, d in result["queries"].items():
        ms = d["ms"]
        phases = ", ".join(f"{k} {v:.0f}" for k, v in sorted(
            d["phases_ms"].items(), key=lambda kv: -kv[1]) if k != "triggerExecution")
        print(f"    query {name}: {d['batches']} batches after the first ({d['first_ms']:,.0f} "
              f"ms), {d['rows_per_batch']:,.0f} rows each; triggerExecution p50 "
              f"{ms['p50']:,.0f} / p99 {ms['p99']:,.0f} / max {ms['max']:,.0f} ms, "
              f"mean {d['mean_ms']:,.0f}; {d['over_1s']} over 1 s")
        if phases:
            print(f"      mean ms per batch: {phases}")
    if result["latency"] is not None:
        lat = result["latency"]
        print(f"    event-to-output: p50 {lat['p50']:,.0f} / p99 {lat['p99']:,.0f} / max "
              f"{lat['max']:,.0f} ms over {lat['n']:,} records")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_summary(limits: dict[str, float], series: dict[str, Series],
                  latency: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print("\nResults (rows/s: best and median of the repeats; targets judged on the median)")
    loopback, consumer = limits.get("loopback_mbps"), limits.get("consumer_rps")
    row_bytes = args.size  # the value bytes of a row
    header = (f"{'read':<22}{'best rows/s':>13}{'median':>12}{'MB/s':>8}{'/loopback':>11}"
              f"{'/consumer':>11}{'target':>22}{'':>6}")
    print(header)
    print("-" * len(header))
    for name, label in (("batch", "batch (odradek)"), ("parquet", "batch (Parquet file)"),
                        ("stream", "stream availableNow")):
        s = series.get(name)
        if s is None or not s.runs:
            continue
        mbps = s.median * row_bytes / MB
        to_loop = f"{mbps / loopback:.3f}x" if loopback else ""
        to_consumer = f"{s.median / consumer:.2f}x" if consumer else ""
        target, ok = "", None
        if name == "batch":
            target, ok = f">= {TARGET_BATCH_RPS:,.0f} rows/s", s.median >= TARGET_BATCH_RPS
        print(f"{label:<22}{s.best:>13,.0f}{s.median:>12,.0f}{mbps:>8,.1f}{to_loop:>11}"
              f"{to_consumer:>11}{target:>22}{'' if ok is None else verdict(ok):>6}")
    if "batch" in series and "parquet" in series and series["parquet"].median:
        b, p = series["batch"], series["parquet"]
        ratio = b.median / p.median
        print(f"{'odradek / Parquet':<22}{b.best / p.best:>12.2f}x{ratio:>11.2f}x"
              f"{'':>8}{'':>11}{'':>11}{f'>= {TARGET_PARQUET_RATIO}x':>22}"
              f"{verdict(ratio >= TARGET_PARQUET_RATIO):>6}")
    for result in latency:
        for name, d in result["queries"].items():
            ms = d["ms"]
            ok = d["batches"] > 0 and ms["max"] < TARGET_BATCH_MS
            text = f"batches p50 {ms['p50']:,.0f} / max {ms['max']:,.0f} ms"
            label = name if name == result["pipeline"] else f"{result['pipeline']} {name}"
            print(f"{label + ' query':<22}{text:>44}{'':>11}"
                  f"{'< 1 s after the first':>22}{verdict(ok):>6}")
        if result["latency"] is not None:
            lat = result["latency"]
            text = f"event-to-output p50 {lat['p50']:,.0f} / p99 {lat['p99']:,.0f} ms"
            print(f"{result['pipeline'] + ' e2e':<22}{text:>44}")
    limit_text = []
    if loopback:
        limit_text.append(f"loopback {loopback:,.0f} MB/s")
    if "page_cache_mbps" in limits:
        limit_text.append(f"disk {limits['page_cache_mbps']:,.0f} MB/s (page cache), "
                          f"{limits['fsync_mbps']:,.0f} MB/s with fsync")
    if consumer:
        limit_text.append(f"one confluent-kafka consumer {consumer:,.0f} records/s")
    if limit_text:
        print("machine limits, same run: " + "; ".join(limit_text))
    if args.read_option:
        print("read options: " + ", ".join(f"{k}={v}" for k, v in args.read_option))


# ---- main ---------------------------------------------------------------------------------


def select_cases(only: str) -> list[str]:
    wanted = [c.strip() for c in only.split(",") if c.strip()]
    for case in wanted:
        if case not in CASES:
            raise SystemExit(f"--only: no case {case!r}; cases: {', '.join(CASES)}")
    return [c for c in CASES if c in wanted]


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="500,000 records, 2 repeats, 15 s of latency, smaller limits")
    parser.add_argument("--only", default=",".join(CASES),
                        help=f"comma-separated cases of {', '.join(CASES)}")
    parser.add_argument("--records", type=int, default=None, help="default 2,000,000")
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=None, help="timed reads per case (3)")
    parser.add_argument("--read-option", type=key_value, action="append", default=[],
                        metavar="KEY=VALUE", help="an option of the odradek reads (batch, "
                        "stream), e.g. kafka.queued.min.messages=1000000; repeatable")
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--latency-pipeline", default="activity,copy,copy-at-least-once",
                        help="activity, copy (exactly once), copy-at-least-once "
                             "(comma-separated)")
    parser.add_argument("--rate", type=int, default=2000, help="events/s of the latency case")
    parser.add_argument("--latency-seconds", type=float, default=None, help="default 30")
    parser.add_argument("--trigger", default="250 milliseconds",
                        help="processingTime of the latency queries")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="seconds of events left out of the event-to-output figures")
    parser.add_argument("--window", default="10 seconds",
                        help="the activity pipeline's window in the latency case")
    parser.add_argument("--watermark", default="2 seconds",
                        help="the activity pipeline's watermark in the latency case")
    parser.add_argument("--disk-mib", type=int, default=None, help="default 1024, quick 256")
    parser.add_argument("--loopback-seconds", type=float, default=None,
                        help="default 3, quick 1")
    parser.add_argument("--quiet-wait", type=float, default=20.0,
                        help="seconds to wait before each timed read for other processes to "
                        "use less than a quarter of a core (0: do not wait)")
    parser.add_argument("--profile", default="none", choices=["none", "py-spy", "py-spy-native"])
    parser.add_argument("--profile-dir", type=Path, default=BENCH_ROOT / "profiles")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args()
    args.records = args.records or (500_000 if args.quick else 2_000_000)
    args.repeats = args.repeats or (2 if args.quick else 3)
    args.latency_seconds = args.latency_seconds or (15.0 if args.quick else 30.0)
    args.latency_pipeline = [k.strip() for k in args.latency_pipeline.split(",") if k.strip()]
    if set(args.latency_pipeline) - {"activity", "copy", "copy-at-least-once"}:
        parser.error("--latency-pipeline takes activity, copy and/or copy-at-least-once")
    if args.size < STAMP.size:
        parser.error(f"--size must be at least {STAMP.size}")
    args.profile_dir = args.profile_dir.resolve()
    cases = select_cases(args.only)
    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=BENCH_ROOT))
    try:
        run(args, cases, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            BENCH_ROOT.rmdir()


def run(args: argparse.Namespace, cases: list[str], tmp: Path) -> None:
    import confluent_kafka
    import pyarrow

    ctx = spawn_context()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({cpu_model()}), "
          f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
          f"{confluent_kafka.libversion()[0]}), pyarrow {pyarrow.__version__}, "
          f"{java.splitlines()[0] if java else 'java ?'}")
    print(f"data in {tmp.relative_to(ROOT)} ({filesystem_of(tmp)}); load average "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the start")
    print(f"topic: {args.records:,} records of {args.size} B, {args.partitions} partitions; "
          f"{args.repeats} repeats per read")

    limits: dict[str, float] = {}
    if "limits" in cases:
        print("\n== machine limits ==")
        lb = loopback_limit(ctx, args.loopback_seconds or (1.0 if args.quick else 3.0))
        limits["loopback_mbps"] = lb["mbps"]
        print(f"  loopback TCP, 1 MiB sends, sender and receiver processes: {lb['mbps']:,.0f} "
              f"MB/s ({lb['cores']:.2f} cores)")
        disk = disk_limit(tmp, args.disk_mib or (256 if args.quick else 1024))
        limits.update({k: v for k, v in disk.items() if k.endswith("mbps")})
        print(f"  disk, os.write of 1 MiB chunks, {disk['mib']:,} MiB: "
              f"{disk['page_cache_mbps']:,.0f} MB/s (page cache), {disk['fsync_mbps']:,.0f} "
              f"MB/s with its fsync")

    broker = BenchBroker(tmp / "data", "default").start()
    print(f"\n== broker on {broker.event_loop()}, pid {broker.pid}, {broker.bootstrap} ==")
    series: dict[str, Series] = {}
    latency: list[dict[str, Any]] = []
    bench = Bench(args, tmp, broker)
    try:
        needs_topic = any(c in cases for c in ("limits", "batch", "parquet", "stream"))
        if needs_topic:
            admin = Admin(broker.bootstrap)
            try:
                admin.create_topic(TOPIC, args.partitions)
                [fill] = run_workers(ctx, [(run_fill, (broker.bootstrap, TOPIC, args.records,
                                                       args.size, args.partitions))])
                from confluent_kafka import TopicPartition

                stored = sum(admin.consumer.get_watermark_offsets(
                    TopicPartition(TOPIC, p), timeout=30)[1] for p in range(args.partitions))
            finally:
                admin.close()
            if fill["failed"] or stored != args.records:
                raise RuntimeError(f"fill: {fill['records']:,} acknowledged, "
                                   f"{fill['failed']:,} failed ({fill['last_error']}), {stored:,} "
                                   "in the topic")
            print(f"  filled {TOPIC}: {stored:,} records in {fill['seconds']:.1f} s "
                  f"({stored / fill['seconds']:,.0f}/s)")
        if "limits" in cases:
            bench.quiet("consumer limit")
            [r] = run_workers(ctx, [(run_consumer, (broker.bootstrap, TOPIC, args.records,
                                                    args.size, CLIENT_FETCH))])
            wall = r["end"] - r["start"]
            limits["consumer_rps"] = r["records"] / wall
            print(f"  one confluent-kafka consumer, the {args.partitions} partitions assigned, "
                  f"{', '.join(f'{k}={v}' for k, v in CLIENT_FETCH.items())}: "
                  f"{limits['consumer_rps']:,.0f} records/s ({r['cpu'] / wall:.2f} cores)")
        if set(cases) & {"batch", "parquet", "stream", "latency"}:
            bench.start_spark()
        if "parquet" in cases:
            bench.prepare_parquet()  # also the batch reads' warm-up
        elif "batch" in cases:
            bench.warm_up()
        if "batch" in cases:
            series["batch"] = bench.batch()
        if "parquet" in cases:
            series["parquet"] = bench.parquet_read()
        if "stream" in cases:
            series["stream"] = bench.stream()
        if "latency" in cases:
            latency = bench.latency(ctx)
    except BaseException:
        print(broker.log_text()[-3000:], file=sys.stderr)
        raise
    finally:
        if bench.spark is not None:
            bench.spark.stop()
        broker.stop()

    print_summary(limits, series, latency, args)
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end")
    if args.json is not None:
        def plain(value: Any) -> Any:
            if isinstance(value, Cores):
                return value.__dict__
            raise TypeError(type(value).__name__)

        args.json.write_text(json.dumps({
            "limits": limits,
            "reads": {name: [{"seconds": r.seconds, "rows": r.rows, "rps": r.rps,
                              "cores": r.cores.__dict__, **r.extra} for r in s.runs]
                      for name, s in series.items()},
            "latency": latency}, indent=1, default=plain))


if __name__ == "__main__":
    main()
