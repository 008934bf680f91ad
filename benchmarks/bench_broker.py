"""Broker speed with a real client, next to the machine's own limits measured in the same run.

Run: .venv/bin/python benchmarks/bench_broker.py [--quick] [--only CASES] [--loops LOOPS]
     [--seconds S | --records N] [--producers N] [--profile py-spy|py-spy-native|cprofile]
     [--compare-validation | --compare-scraping [--rounds N]]
     (a full run takes about 3-4 minutes; --quick about 1.5)

The script starts its own broker (`python -m odradek serve` on 127.0.0.1, a free port, its
data in a temporary directory under .bench-tmp/, removed at the end) and loads it with
confluent-kafka (librdkafka), each client in its own process, client and broker sharing
this machine's cores:

0. limits: loopback TCP throughput (a sender and a receiver process, 1 MiB sends over
   127.0.0.1), and the disk's sequential write throughput: os.write of 1 MiB chunks to a
   file next to the broker's data, over the first GiB (page cache), over the last GiB of
   --disk-mib (the device, once the kernel throttles writers because dirty pages reached
   its limit) and for the whole with its fsync.
1. produce-1k-acks1, produce-1k-acksall, produce-100b-acks1, produce-100b-acksall: a
   producer process (--producers for more) sends records of that value size with no key to
   its own topic of 4 partitions for --seconds (or --records), linger.ms=5, batch.size=1 MiB,
   then flushes; records/s count from the first send to the end of the flush. Every record
   is checked against the topic's high watermarks; batch sizes are read from the segment
   files; a thread samples the segment files' growth (append MB/s over the first and last
   third) and the machine's dirty page cache, to show when the disk starts to limit.
2. consume-1k, consume-100b: a fresh consumer assigns the 4 partitions of the acks=1 topic
   at offset 0 and reads every record, with large fetches allowed (and librdkafka's
   local queue thresholds raised so that they, not the broker, are not what is measured).
3. e2e: a producer at a fixed 10,000 records/s of 1 KiB (acks=1, linger.ms=5) stamps
   time.monotonic_ns() into each value; a consumer in another process computes now - sent
   on receipt; p50/p99/p99.9 in ms, records sent in the first second left out (warm-up).
   The producer's own produce-to-acknowledgement latencies (Message.latency()) split the
   figure in two.
4. rss: a fresh broker's resident memory (VmRSS) after creating a topic of 1,000 partitions
   and --settle seconds of idle, with the mappings that hold most of it.

Each case prints CPU in cores over its wall time: the broker's (and its share in the
kernel), the clients', and the rest of the machine's ("others": other processes, kernel
threads such as writeback), so a busy machine shows; before each case the script waits up
to --quiet-wait seconds for other processes to go quiet. MB/s/core is the throughput per
core of broker CPU: what one broker event loop with a core to itself would carry. Figures
are printed as ratios to the limits where that makes sense. Throughputs are MB/s of 10^6
bytes of record values.

--compare-validation runs the produce cases only (with --only, those it selects), against a
broker with odradek.record.validation.enable=false and then one with it true, --rounds
times over, and prints validated / unvalidated records/s per case (issue 14: >= 0.85x).

--compare-scraping runs the produce cases against a broker with an HTTP listener
(http.listeners) left alone and then one whose /metrics is scraped every second meanwhile
(as Prometheus would, more often), --rounds times over, and prints scraped / unscraped
records/s per case (issue 18: >= 0.95x).

--loops runs cases 1-4 against a broker on each event loop (ODRADEK_EVENT_LOOP=asyncio or
uvloop, which `odradek serve` honours; the loop in use is read from the broker's mappings)
and compares them. --profile samples the broker with py-spy during each case (Python
frames, without pausing it; py-spy-native adds C frames but pauses it for each sample) and
prints where its time goes, raw stacks kept under .bench-tmp/profiles/; or runs the broker
under cProfile (`python -m cProfile -o ...`, one .prof per broker, printed at the end).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path
from typing import Any

KIB = 1024
MIB = 1024 * KIB
MB = 1e6
ROOT = Path(__file__).resolve().parents[1]
BENCH_ROOT = ROOT / ".bench-tmp"
PARTITIONS = 4
SIZES = {"1k": 1024, "100b": 100}
ACKS = {"acks1": "1", "acksall": "all"}
PRODUCE_CASES = [f"produce-{s}-{a}" for s in SIZES for a in ACKS]
CONSUME_CASES = [f"consume-{s}" for s in SIZES]
CASES = ["limits", *PRODUCE_CASES, *CONSUME_CASES, "e2e", "rss"]
STAMP = struct.Struct("<q")

# Targets (the issue): Apache Kafka 3.3.1 on this machine with the same client and settings.
TARGET_PRODUCE_1K_MBPS = 200.0
TARGET_CONSUME_1K_MBPS = 600.0
TARGET_PRODUCE_100B_RPS = 550_000.0
TARGET_E2E_P99_MS = 10.0
TARGET_RSS_MIB = 150.0
# Issue 14: produce throughput with the leader's record walk on, over the same with it off.
TARGET_VALIDATION_RATIO = 0.85
TARGET_SCRAPE_RATIO = 0.95  # issue 18: produce with /metrics scraped every second
SCRAPE_INTERVAL_S = 1.0
VALIDATION_SETTING = "odradek.record.validation.enable"

PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_048_576,
    # librdkafka's default (100,000) would hold 100 B producers to ~10 MB in flight.
    "queue.buffering.max.messages": 1_000_000,
    # ... and at most 64 MiB queued (librdkafka's default, 1 GiB, lets a producer faster
    # than the cluster fill a GiB of fresh memory, which costs it more CPU than the
    # brokers it competes with on this machine; 64 MiB keeps every in-flight slot full).
    "queue.buffering.max.kbytes": 262_144,
    # One report per failed record only: no Python callback per acknowledged record.
    "delivery.report.only.error": True,
}


# ---- machine ------------------------------------------------------------------------------


def clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def system_busy_s() -> float:
    """CPU seconds spent busy on all cores since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / clock_ticks()


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process, all its threads (/proc/PID/stat)."""
    return sum(process_user_system_s(pid))


def process_user_system_s(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process in seconds: in Python and C, and in the kernel."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return 0.0, 0.0
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) / clock_ticks(), int(fields[12]) / clock_ticks()


def self_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def proc_status(pid: int, field_name: str) -> int:
    """A /proc/PID/status field in bytes (VmRSS, VmHWM...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * KIB
    return 0


def rss_by_mapping(pid: int, top: int = 8) -> list[tuple[str, int]]:
    """Resident bytes per mapped file (anonymous memory as [anon]), largest first."""
    sizes: Counter[str] = Counter()
    name = "[anon]"
    header = re.compile(r"^[0-9a-f]+-[0-9a-f]+ ")
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if header.match(line):
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) > 5 else ""
                name = short_mapping(path) if path else "[anon]"
            elif line.startswith("Rss:"):
                sizes[name] += int(line.split()[1]) * KIB
    return sizes.most_common(top)


def short_mapping(path: str) -> str:
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1]
    if "/lib/" in path:
        return path.rsplit("/", 1)[1]
    return path


def maps_mention(pid: int, needle: str) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return needle in f.read()


def dirty_bytes() -> int:
    """Dirty and under-writeback page cache now (/proc/meminfo), in bytes."""
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                total += int(line.split()[1]) * KIB
    return total


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def filesystem_of(path: Path) -> str:
    found = ("?", "?", "")
    resolved = str(path.resolve())
    with open("/proc/mounts") as f:
        for line in f:
            device, mount, fstype = line.split()[:3]
            inside = resolved == mount or resolved.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(found[2]):
                found = (fstype, device, mount)
    return f"{found[0]} on {found[1]}"


def wait_for_quiet(limit_s: float, threshold: float = 0.25) -> float:
    """Waits up to limit_s for the rest of the machine to use less than `threshold` cores
    (over 1 s, while our broker and clients idle); returns the load last seen, in cores."""
    deadline = time.monotonic() + limit_s
    while True:
        busy0, wall0 = system_busy_s(), time.monotonic()
        time.sleep(1.0)
        load = (system_busy_s() - busy0) / (time.monotonic() - wall0)
        if load < threshold or time.monotonic() >= deadline:
            return load


@dataclass
class CpuWindow:
    """CPU use over a wall-clock window: the broker's, ours, and the whole machine's."""

    broker_pid: int
    wall0: float = 0.0
    busy0: float = 0.0
    broker0: float = 0.0
    self0: float = 0.0
    system0: float = 0.0
    wall: float = 0.0
    busy: float = 0.0
    broker: float = 0.0
    broker_system: float = 0.0
    harness: float = 0.0

    def start(self) -> CpuWindow:
        self.wall0 = time.monotonic()
        self.busy0 = system_busy_s()
        user, system = process_user_system_s(self.broker_pid)
        self.broker0, self.system0 = user + system, system
        self.self0 = self_cpu_s()
        return self

    def stop(self) -> CpuWindow:
        self.wall = time.monotonic() - self.wall0
        self.busy = system_busy_s() - self.busy0
        user, system = process_user_system_s(self.broker_pid)
        self.broker = user + system - self.broker0
        self.broker_system = system - self.system0
        self.harness = self_cpu_s() - self.self0
        return self

    @property
    def kernel_share(self) -> float:
        """The part of the broker's CPU spent in the kernel (system time)."""
        return self.broker_system / self.broker if self.broker else 0.0

    def cores(self, client_cpu: float) -> tuple[float, float, float]:
        """(broker, client, others) in cores: CPU seconds per wall second."""
        wall = max(self.wall, 1e-9)
        others = max(0.0, self.busy - self.broker - client_cpu - self.harness)
        return self.broker / wall, client_cpu / wall, others / wall


# ---- worker processes ---------------------------------------------------------------------


def spawn_context() -> SpawnContext:
    return mp.get_context("spawn")


def run_workers(ctx: SpawnContext,
                targets: list[tuple[Callable[..., dict[str, Any]], tuple[Any, ...]]],
                on_started: Callable[[], object] | None = None,
                timeout: float = 600) -> list[dict[str, Any]]:
    """Runs each fn(*args) in its own process; returns what they returned, in the order
    they finished. `on_started` runs once they all run."""
    queue = ctx.Queue()
    processes: list[SpawnProcess] = []
    try:
        for fn, args in targets:
            process = ctx.Process(target=worker_main, args=(fn, args, queue), daemon=True)
            process.start()
            processes.append(process)
        if on_started is not None:
            on_started()
        results: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(results) < len(processes):
            try:
                results.append(queue.get(timeout=1.0))
            except Exception:  # queue.Empty
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"a worker failed (exit codes "
                                       f"{[p.exitcode for p in processes]})") from None
        for result in results:
            if "error" in result:
                raise RuntimeError(f"worker failed: {result['error']}")
        return results
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


def worker_main(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], queue: Any) -> None:
    """A worker process: fn's result, or its error, goes on the queue."""
    try:
        queue.put(fn(*args))
    except BaseException as e:
        queue.put({"error": f"{fn.__name__}: {type(e).__name__}: {e}"})
        raise


def run_loopback_receiver(port_queue: Any) -> dict[str, Any]:
    server = socket.create_server(("127.0.0.1", 0))
    port_queue.put(server.getsockname()[1])
    conn, _ = server.accept()
    buf = bytearray(MIB)
    view = memoryview(buf)
    total = 0
    start = 0.0
    cpu0 = self_cpu_s()
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        if not total:
            start = time.monotonic()
        total += n
    elapsed = time.monotonic() - start
    conn.close()
    server.close()
    return {"bytes": total, "seconds": elapsed, "cpu": self_cpu_s() - cpu0}


def run_loopback_sender(port_queue: Any, seconds: float) -> dict[str, Any]:
    port = port_queue.get(timeout=30)
    conn = socket.create_connection(("127.0.0.1", port))
    data = os.urandom(MIB)
    cpu0 = self_cpu_s()
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        conn.sendall(data)
        sent += len(data)
    conn.close()
    return {"sent": sent, "cpu": self_cpu_s() - cpu0}


def run_producer(bootstrap: str, topic: str, size: int, acks: str, seconds: float, records: int,
              start_event: Any) -> dict[str, Any]:
    from confluent_kafka import KafkaError, Producer

    failed = [0]
    last_error: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed[0] += 1
            last_error[:] = [str(err)]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_SETTINGS,
                         "on_delivery": on_delivery, "log_level": 3})
    producer.list_topics(topic, timeout=30)  # connected, metadata known: not timed
    value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    limit = records if records > 0 else 1 << 62
    start_event.wait()
    cpu0 = self_cpu_s()
    start = time.monotonic()
    deadline = start + seconds if records <= 0 else float("inf")
    n = 0
    while n < limit:
        try:
            produce(topic, value)
        except BufferError:  # the client's queue is full: let it drain
            poll(0.001)
            continue
        n += 1
        if not n & 1023:
            poll(0)
            if time.monotonic() >= deadline:
                break
    sent = time.monotonic()
    left = producer.flush(120)
    end = time.monotonic()
    return {"records": n - failed[0] - left, "failed": failed[0] + left, "start": start,
            "sent": sent, "end": end, "cpu": self_cpu_s() - cpu0,
            "last_error": last_error[0] if last_error else None}


def run_consumer(bootstrap: str, topic: str, expected: int, size: int,
              fetch_settings: dict[str, int]) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                         "enable.auto.commit": False, "log_level": 3, **fetch_settings})
    consumer.list_topics(topic, timeout=30)
    cpu0 = self_cpu_s()
    start = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    consume = consumer.consume
    count = nbytes = 0
    first = 0.0
    last_progress = start
    while count < expected:
        # At most what is left: the last call returns once those arrive, not on timeout.
        msgs = consume(num_messages=min(10_000, expected - count), timeout=0.5)
        if not msgs:
            if time.monotonic() - last_progress > 30:
                raise RuntimeError(f"consumer stalled at {count:,} of {expected:,} records")
            continue
        got = sum(map(len, msgs))
        if got != len(msgs) * size:
            for msg in msgs:
                if msg.error() is not None:
                    raise RuntimeError(f"consumer error: {msg.error()}")
        if not count:
            first = time.monotonic()
        count += len(msgs)
        nbytes += got
        last_progress = time.monotonic()
    end = time.monotonic()
    cpu = self_cpu_s() - cpu0
    consumer.close()
    return {"records": count, "bytes": nbytes, "start": start, "first": first, "end": end,
            "cpu": cpu}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "p99.9": float("nan"),
                "max": float("nan"), "n": 0}
    values = sorted(values)

    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {"p50": at(0.50), "p99": at(0.99), "p99.9": at(0.999), "max": values[-1],
            "n": len(values)}


def run_e2e_consumer(bootstrap: str, topic: str, ready: Any, done: Any,
                  warmup_ns: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                         "enable.auto.commit": False, "log_level": 3})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)]
    consumer.assign([TopicPartition(topic, p, ends[p]) for p in range(PARTITIONS)])
    consumer.consume(num_messages=1, timeout=1.0)  # fetches under way before we are ready
    ready.set()
    latencies: list[float] = []
    unpack = STAMP.unpack_from
    first_stamp = 0
    received = 0
    cpu0 = self_cpu_s()
    idle_since = None
    poll = consumer.poll
    while True:
        # poll, not consume(num_messages=N): that waits for N records or its timeout.
        msg = poll(0.05)
        now = time.monotonic_ns()
        if msg is None:
            if done.is_set():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > 1.0:
                    break
            continue
        idle_since = None
        if msg.error() is not None:
            raise RuntimeError(f"consumer error: {msg.error()}")
        sent = unpack(msg.value() or bytes(STAMP.size))[0]
        if not first_stamp:
            first_stamp = sent
        received += 1
        if sent - first_stamp >= warmup_ns:
            latencies.append((now - sent) / 1e6)
    cpu = self_cpu_s() - cpu0
    consumer.close()
    return {"role": "consumer", "received": received, **percentiles(latencies), "cpu": cpu}


def run_e2e_producer(bootstrap: str, topic: str, size: int, acks: str, rate: int, seconds: float,
                  ready: Any, done: Any) -> dict[str, Any]:
    from confluent_kafka import KafkaError, Message, Producer

    acked: list[float] = []
    failed = [0]

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed[0] += 1
        else:
            acked.append((msg.latency() or 0.0) * 1000)

    settings = {k: v for k, v in PRODUCER_SETTINGS.items() if k != "delivery.report.only.error"}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **settings,
                         "on_delivery": on_delivery, "log_level": 3})
    producer.list_topics(topic, timeout=30)
    ready.wait(60)
    padding = os.urandom(size - STAMP.size)
    pack = STAMP.pack
    cpu0 = self_cpu_s()
    start = time.monotonic()
    total = int(rate * seconds)
    sent = 0
    max_lag = 0.0
    while sent < total:
        now = time.monotonic()
        due = min(total, int((now - start) * rate) + 1)
        max_lag = max(max_lag, (now - start) - sent / rate)
        while sent < due:
            producer.produce(topic, pack(time.monotonic_ns()) + padding)
            sent += 1
        producer.poll(0)
        time.sleep(max(0.0, start + sent / rate - time.monotonic()))
    end_send = time.monotonic()
    left = producer.flush(30)
    done.set()
    warm = acked[int(rate):]  # the first second out, as for the end-to-end figures
    return {"role": "producer", "sent": sent, "failed": failed[0] + left,
            "rate": sent / (end_send - start), "max_lag_ms": max_lag * 1000,
            "ack": percentiles(warm), "cpu": self_cpu_s() - cpu0}


# ---- limits -------------------------------------------------------------------------------


def loopback_limit(ctx: SpawnContext, seconds: float) -> dict[str, float]:
    port_queue = ctx.Queue()
    window = CpuWindow(os.getpid())
    results = run_workers(ctx, [(run_loopback_receiver, (port_queue,)),
                                (run_loopback_sender, (port_queue, seconds))],
                          on_started=window.start)
    window.stop()
    received = next(r for r in results if "bytes" in r)
    client = sum(r["cpu"] for r in results)
    return {"mbps": received["bytes"] / received["seconds"] / MB, "bytes": received["bytes"],
            "cores": client / window.wall}


def disk_limit(directory: Path, mib: int) -> dict[str, float]:
    """os.write of 1 MiB chunks: the page cache's speed over the first GiB (while dirty
    pages stay under the kernel's limit), the device's over the last GiB (once writers are
    throttled to writeback: needs --disk-mib >= 3072 or so), and the whole with its fsync."""
    path = directory / "disk-limit.bin"
    chunk = os.urandom(MIB)
    marks: list[float] = []
    cpu_marks: list[float] = []
    peak = 0
    os.sync()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for i in range(mib):
            written = os.write(fd, chunk)
            while written < len(chunk):
                written += os.write(fd, memoryview(chunk)[written:])
            if (i + 1) % 1024 == 0:
                marks.append(time.perf_counter())
                cpu_marks.append(self_cpu_s())
                peak = max(peak, dirty_bytes())
        wrote = time.perf_counter()
        os.fsync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        path.unlink()
    os.sync()
    total = mib * MIB
    result = {"page_cache_mbps": (1024 * MIB if marks else total)
              / ((marks[0] if marks else wrote) - start) / MB,
              "fsync_mbps": total / (synced - start) / MB, "mib": mib, "dirty_peak": peak}
    if len(marks) >= 3:
        result["sustained_mbps"] = 1024 * MIB / (marks[-1] - marks[-2]) / MB
        result["sustained_cores"] = (cpu_marks[-1] - cpu_marks[-2]) / (marks[-1] - marks[-2])
    return result


# ---- the broker ---------------------------------------------------------------------------


_LISTENING = re.compile(r"listening on PLAINTEXT://[^:]*:(\d+)")
_STARTED = re.compile(r"broker \d+ started")
_HTTP_LISTENING = re.compile(r"http listening on http://[^:]*:(\d+)")


class BenchBroker:
    """`python -m odradek serve` on 127.0.0.1 and a free port, its log in a file.

    loop: "asyncio" or "uvloop" sets ODRADEK_EVENT_LOOP ("default" leaves it alone);
    cprofile: a path to run the broker under cProfile and write its stats there on exit.
    """

    def __init__(self, data_dir: Path, loop: str, cprofile: Path | None = None,
                 settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.loop = loop
        self.cprofile = cprofile
        self.settings = dict(settings or {})  # more broker settings (Kafka names)
        self.log_path = data_dir.with_suffix(".log")
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 60) -> BenchBroker:
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                    "log.dirs": str(self.data_dir), **self.settings}
        argv = [sys.executable]
        if self.cprofile is not None:
            argv += ["-m", "cProfile", "-o", str(self.cprofile)]
        argv += ["-m", "odradek", "serve"]
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.loop != "default":
            env["ODRADEK_EVENT_LOOP"] = self.loop
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env,
                                            cwd=ROOT)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            if (m := _LISTENING.search(text)) is not None:
                self.port = int(m.group(1))
            if _STARTED.search(text) and self.port:
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + text[-4000:])
            time.sleep(0.05)

    @property
    def http_port(self) -> int | None:
        """The broker's first HTTP listener's port (http.listeners), None without one."""
        m = _HTTP_LISTENING.search(self.log_text())
        return int(m.group(1)) if m is not None else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def event_loop(self) -> str:
        """The loop the broker runs: uvloop when its extension is mapped."""
        return "uvloop" if maps_mention(self.pid, "uvloop") else "asyncio"

    def stop(self, timeout: float = 60) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Admin:
    """Topic creation and high watermarks, for the harness."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                                  "enable.auto.commit": False, "log_level": 3})

    def create_topic(self, name: str, partitions: int) -> float:
        from confluent_kafka.admin import NewTopic

        start = time.monotonic()
        futures = self.admin.create_topics([NewTopic(name, partitions, 1)],
                                           operation_timeout=120, request_timeout=120)
        futures[name].result(timeout=180)
        return time.monotonic() - start

    def end_offsets(self, topic: str) -> int:
        from confluent_kafka import TopicPartition

        return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(PARTITIONS))

    def close(self) -> None:
        """Closes both clients now: a client left to the garbage collector would go on
        trying to reach a stopped broker."""
        self.consumer.close()
        del self.admin, self.consumer
        gc.collect()


def log_batches(data_dir: Path, topic: str) -> tuple[int, int]:
    """(bytes, record batches) in the topic's segment files."""
    nbytes = batches = 0
    for p in range(PARTITIONS):
        for path in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
            fd = os.open(path, os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                position = 0
                while position + 12 <= size:
                    length = struct.unpack(">i", os.pread(fd, 4, position + 8))[0]
                    position += 12 + length
                    batches += 1
                nbytes += size
            finally:
                os.close(fd)
    return nbytes, batches


class LogSampler:
    """Samples, in a thread, the bytes in a topic's segment files and the machine's dirty
    page cache, to see the append rate change as the kernel starts throttling writes."""

    def __init__(self, data_dir: Path, topic: str, period: float = 0.25) -> None:
        self.dirs = [data_dir / f"{topic}-{p}" for p in range(PARTITIONS)]
        self.period = period
        self.samples: list[tuple[float, int, int]] = []  # (monotonic, log bytes, dirty bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        for directory in self.dirs:
            with contextlib.suppress(OSError):
                total += sum(e.stat().st_size for e in os.scandir(directory)
                             if e.name.endswith(".log"))
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._size(), dirty_bytes()))
            self._stop.wait(self.period)

    def __enter__(self) -> LogSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def phases(self, start: float, end: float) -> dict[str, float]:
        """Append MB/s in the first and the last third of [start, end], peak dirty bytes."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 6:
            return {}
        third = len(inside) // 3

        def rate(a: tuple[float, int, int], b: tuple[float, int, int]) -> float:
            return (b[1] - a[1]) / max(b[0] - a[0], 1e-9) / MB

        return {"first_third_mbps": rate(inside[0], inside[third]),
                "last_third_mbps": rate(inside[-third - 1], inside[-1]),
                "dirty_peak": max(s[2] for s in inside)}


# ---- profiling ----------------------------------------------------------------------------


class PySpy:
    """py-spy record of the broker during one case: raw (collapsed) stacks, then a summary.

    Python frames only by default, sampled without stopping the broker (--nonblocking);
    with `native`, C frames too, which needs py-spy to pause the broker for each sample
    (slower: sampled at 100 Hz)."""

    def __init__(self, pid: int, path: Path, native: bool) -> None:
        self.path = path
        self.rate = 100 if native else 250
        argv = ["py-spy", "record", "-p", str(pid), "-r", str(self.rate), "--format", "raw",
                "-o", str(path)]
        argv.append("--native" if native else "--nonblocking")
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        argv[0] = exe
        self.started = time.monotonic()
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        time.sleep(0.3)  # attached before the load starts

    def stop(self) -> float:
        elapsed = time.monotonic() - self.started
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return elapsed


_LINE_NUMBER = re.compile(r":\d+\)$")
_ADDRESS = re.compile(r"^0x[0-9a-f]+ \(")  # a C function without a symbol: its library
# Frames of a thread waiting, not working: asyncio's poll, uvloop's (libuv's epoll_pwait)
# and the background threads' sleeps. py-spy leaves out most such samples itself, not all.
_IDLE_FRAMES = ("EpollSelector.select (", "Condition.wait (", "epoll_wait (", "epoll_pwait (")
_OURS = ("odradek/server/", "odradek/broker/", "odradek/storage/", "odradek/protocol/",
         "odradek/cluster/")


def shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


@dataclass
class StackSummary:
    samples: int = 0  # all samples
    busy: int = 0  # samples whose leaf is not a wait
    own: list[tuple[str, int]] = field(default_factory=list)  # leaf frames, busy samples
    inclusive: list[tuple[str, int]] = field(default_factory=list)  # our frames anywhere


def summarize_stacks(path: Path, top: int = 12) -> StackSummary:
    """py-spy's raw output ("frame;frame;... count" per line) summed by function."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    summary = StackSummary()
    if not path.exists():
        return summary
    with open(path) as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_ADDRESS.sub("? (", _LINE_NUMBER.sub(")", frame.replace(str(ROOT) + "/", "")))
                      for frame in stack.split(";") if not frame.startswith("process ")]
            if not frames:
                continue
            summary.samples += count
            if any(frame.startswith(_IDLE_FRAMES) for frame in frames):
                continue
            summary.busy += count
            own[frames[-1]] += count
            for frame in set(frames):
                if any(part in frame for part in _OURS):
                    inclusive[frame] += count
    summary.own = own.most_common(top)
    summary.inclusive = inclusive.most_common(top)
    return summary


def print_profile(title: str, path: Path, rate: int, seconds: float) -> dict[str, Any]:
    summary = summarize_stacks(path)
    busy = summary.busy
    print(f"  profile of the broker during {title}: {busy:,} busy samples of "
          f"{summary.samples:,} at {rate} Hz over {seconds:.1f} s "
          f"(~{busy / rate / max(seconds, 1e-9):.2f} cores); raw stacks in {shown(path)}")
    if busy:
        print(f"    {'self %':>7}  function on top of the stack (C calls count in their caller)")
        for name, count in summary.own[:10]:
            print(f"    {100 * count / busy:6.1f}%  {name}")
        print(f"    {'incl %':>7}  odradek function anywhere in the stack")
        for name, count in summary.inclusive[:10]:
            print(f"    {100 * count / busy:6.1f}%  {name}")
    return asdict(summary)


# ---- cases --------------------------------------------------------------------------------


@dataclass
class CaseResult:
    case: str
    loop: str
    records: int = 0
    seconds: float = 0.0
    value_bytes: int = 0
    log_bytes: int = 0
    batches: int = 0
    broker_cores: float = 0.0
    client_cores: float = 0.0
    other_cores: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.value_bytes / self.seconds / MB if self.seconds else 0.0


@dataclass
class Options:
    seconds: float
    records: int
    producers: int
    e2e_seconds: float
    e2e_rate: int
    e2e_size: int
    e2e_acks: str
    rss_partitions: int
    settle: float
    fetch: dict[str, int]
    profile: str
    profile_dir: Path
    quiet_wait: float


class Suite:
    """One broker, one event loop: the produce, consume and end-to-end cases against it."""

    def __init__(self, ctx: SpawnContext, options: Options, broker: BenchBroker,
                 loop: str) -> None:
        self.ctx = ctx
        self.options = options
        self.broker = broker
        self.loop = loop
        self.admin = Admin(broker.bootstrap)
        self.produced: dict[str, tuple[str, int]] = {}  # size label -> (topic, records)
        self.profiles: dict[str, Any] = {}

    @contextlib.contextmanager
    def measured(self, case: str) -> Iterator[CpuWindow]:
        """Waits for a quiet machine, profiles the broker (py-spy), counts CPU."""
        if self.options.quiet_wait > 0:
            start = time.monotonic()
            load = wait_for_quiet(self.options.quiet_wait)
            waited = time.monotonic() - start
            if load >= 0.25:
                print(f"  ({case}: the machine is busy, {load:.2f} cores used by others)")
            elif waited > 2.5:
                print(f"  ({case}: waited {waited:.0f} s for other load to end)")
        spy = None
        if self.options.profile.startswith("py-spy"):
            self.options.profile_dir.mkdir(parents=True, exist_ok=True)
            path = self.options.profile_dir / f"{self.loop}-{case}.txt"
            spy = PySpy(self.broker.pid, path, native=self.options.profile == "py-spy-native")
        window = CpuWindow(self.broker.pid)
        try:
            yield window
        finally:
            if spy is not None:
                seconds = spy.stop()
                self.profiles[case] = print_profile(case, spy.path, spy.rate, seconds)

    def produce(self, case: str) -> CaseResult:
        _, size_label, acks_label = case.split("-")
        size, acks = SIZES[size_label], ACKS[acks_label]
        topic = f"bench-{size_label}-{acks_label}"
        self.admin.create_topic(topic, PARTITIONS)
        os.sync()  # earlier cases' dirty pages written back first
        o = self.options
        per_producer = -(-o.records // o.producers) if o.records > 0 else 0
        start_event = self.ctx.Event()
        sampler = LogSampler(self.broker.data_dir, topic)
        with self.measured(case) as window, sampler:

            def go() -> None:  # once the producers have connected and read the metadata
                time.sleep(1.5)
                window.start()
                start_event.set()

            results = run_workers(
                self.ctx,
                [(run_producer, (self.broker.bootstrap, topic, size, acks, o.seconds,
                                    per_producer, start_event))] * o.producers,
                on_started=go,
            )
            window.stop()
        records = sum(r["records"] for r in results)
        failed = sum(r["failed"] for r in results)
        start = min(r["start"] for r in results)
        end = max(r["end"] for r in results)
        stored = self.admin.end_offsets(topic)
        if failed or stored != records:
            raise RuntimeError(f"{case}: {records:,} records acknowledged, {failed:,} failed, "
                               f"{stored:,} in the topic")
        log_bytes, batches = log_batches(self.broker.data_dir, topic)
        client = sum(r["cpu"] for r in results)
        broker, client_cores, others = window.cores(client)
        if acks == "1":
            self.produced[size_label] = (topic, records)
        flush = max(r["end"] - r["sent"] for r in results)
        return CaseResult(case, self.loop, records, end - start, records * size, log_bytes,
                          batches, broker, client_cores, others,
                          {"flush_s": flush, "broker_kernel": window.kernel_share,
                           **sampler.phases(start, end)})

    def consume(self, case: str) -> CaseResult:
        size_label = case.split("-")[1]
        topic, expected = self.produced[size_label]
        size = SIZES[size_label]
        with self.measured(case) as window:
            window.start()
            [r] = run_workers(self.ctx, [(run_consumer, (self.broker.bootstrap, topic,
                                                            expected, size,
                                                            self.options.fetch))])
            window.stop()
        broker, client, others = window.cores(r["cpu"])
        return CaseResult(case, self.loop, r["records"], r["end"] - r["start"], r["bytes"],
                          0, 0, broker, client, others,
                          {"first_record_s": r["first"] - r["start"],
                           "broker_kernel": window.kernel_share})

    def e2e(self) -> CaseResult:
        o = self.options
        topic = "bench-e2e"
        self.admin.create_topic(topic, PARTITIONS)
        ready, done = self.ctx.Event(), self.ctx.Event()
        with self.measured("e2e") as window:
            results = run_workers(self.ctx, [
                (run_e2e_consumer, (self.broker.bootstrap, topic, ready, done, 1_000_000_000)),
                (run_e2e_producer, (self.broker.bootstrap, topic, o.e2e_size, o.e2e_acks,
                                       o.e2e_rate, o.e2e_seconds, ready, done)),
            ], on_started=lambda: (ready.wait(60), window.start()))
            window.stop()
        consumer = next(r for r in results if r["role"] == "consumer")
        producer = next(r for r in results if r["role"] == "producer")
        if producer["failed"] or consumer["received"] != producer["sent"]:
            raise RuntimeError(f"e2e: {producer['sent']:,} sent, {producer['failed']:,} failed, "
                               f"{consumer['received']:,} received")
        broker, client, others = window.cores(consumer["cpu"] + producer["cpu"])
        return CaseResult("e2e", self.loop, consumer["received"],
                          producer["sent"] / producer["rate"],
                          consumer["received"] * o.e2e_size, 0, 0, broker, client, others,
                          {"latency": {k: consumer[k] for k in ("p50", "p99", "p99.9", "max",
                                                                "n")},
                           "ack": producer["ack"], "rate": producer["rate"],
                           "max_lag_ms": producer["max_lag_ms"],
                           "broker_kernel": window.kernel_share})

    def close(self) -> None:
        self.admin.close()


def rss_case(tmp: Path, loop: str, options: Options) -> CaseResult:
    """A fresh broker: its idle RSS, then with a topic of N partitions after a settle."""
    broker = BenchBroker(tmp / f"rss-{loop}", loop).start()
    try:
        time.sleep(options.settle)
        before = proc_status(broker.pid, "VmRSS")
        admin = Admin(broker.bootstrap)
        try:
            created = admin.create_topic("bench-partitions", options.rss_partitions)
        finally:
            admin.close()
        time.sleep(options.settle)
        window = CpuWindow(broker.pid).start()
        time.sleep(2.0)  # idle: what does it do when nothing happens?
        window.stop()
        after = proc_status(broker.pid, "VmRSS")
        hwm = proc_status(broker.pid, "VmHWM")
        fds = len(os.listdir(f"/proc/{broker.pid}/fd"))
        mappings = rss_by_mapping(broker.pid)
        librdkafka = maps_mention(broker.pid, "librdkafka")
        loop_in_use = broker.event_loop()
    finally:
        broker.stop()
    broker_cores, _, others = window.cores(0.0)
    return CaseResult("rss", loop_in_use, options.rss_partitions, created, 0, 0, 0,
                      broker_cores, 0.0, others,
                      {"rss_before": before, "rss_after": after, "hwm": hwm, "fds": fds,
                       "mappings": mappings, "librdkafka_mapped": librdkafka})


class Scraper:
    """GETs a broker's /metrics every `interval` seconds in a thread, as Prometheus
    would, until stopped; counts the scrapes and their times."""

    def __init__(self, port: int, interval: float) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval = interval
        self.times: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Scraper:
        self._thread.start()
        return self

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.interval):
            began = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    response.read()
            except OSError:
                self.failures += 1
            else:
                self.times.append(time.perf_counter() - began)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(15)
        times = sorted(self.times)
        return {"scrapes": len(times), "failures": self.failures,
                "median_ms": times[len(times) // 2] * 1000 if times else 0.0,
                "max_ms": times[-1] * 1000 if times else 0.0}


def run_suite(ctx: SpawnContext, tmp: Path, loop: str, cases: list[str],
              options: Options, settings: dict[str, str] | None = None,
              label: str = "", scrape_every: float | None = None) -> list[CaseResult]:
    """The cases against one broker on `loop` (plus `settings`); `label` names the broker's
    data directory and profile, and is kept in each result's extra["label"]. With
    `scrape_every`, the broker's /metrics is scraped that often during each case."""
    results: list[CaseResult] = []
    need_broker = [c for c in cases if c not in ("limits", "rss")]
    name = f"{loop}-{label}" if label else loop
    if need_broker:
        cprofile = None
        if options.profile == "cprofile":
            options.profile_dir.mkdir(parents=True, exist_ok=True)
            cprofile = options.profile_dir / f"broker-{name}.prof"
        broker = BenchBroker(tmp / f"data-{name}", loop, cprofile, settings).start()
        actual = broker.event_loop()
        shown_settings = "".join(f", {k}={v}" for k, v in (settings or {}).items())
        print(f"\n== broker on {actual} (ODRADEK_EVENT_LOOP={loop}{shown_settings}), pid "
              f"{broker.pid}, {broker.bootstrap} ==")
        if loop != "default" and actual != loop:
            print(f"  warning: asked for {loop}, the broker runs {actual}")
        suite = Suite(ctx, options, broker, actual)
        try:
            for case in need_broker:
                scraper = None
                if scrape_every is not None:
                    port = broker.http_port
                    if port is None:
                        raise SystemExit("the broker logged no HTTP listener to scrape")
                    scraper = Scraper(port, scrape_every).start()
                try:
                    if case.startswith("produce"):
                        r = suite.produce(case)
                    elif case.startswith("consume"):
                        r = suite.consume(case)
                    else:
                        r = suite.e2e()
                finally:
                    scraped = scraper.stop() if scraper is not None else None
                if scraped is not None:
                    r.extra["scraped"] = scraped
                r.extra["label"] = label
                print_progress(r)
                results.append(r)
        except BaseException:
            print(broker.log_text()[-3000:], file=sys.stderr)
            raise
        finally:
            suite.close()
            broker.stop()
            if cprofile is not None:
                print_cprofile(cprofile)
            shutil.rmtree(broker.data_dir, ignore_errors=True)
    if "rss" in cases:
        r = rss_case(tmp, loop, options)
        print_progress(r)
        results.append(r)
    return results


def print_cprofile(path: Path) -> None:
    import pstats

    if not path.exists():
        print(f"  no cProfile output at {path}")
        return
    print(f"\n  cProfile of the broker (all cases), {shown(path)}:")
    pstats.Stats(str(path)).sort_stats("tottime").print_stats(25)


# ---- report -------------------------------------------------------------------------------


def print_progress(r: CaseResult) -> None:
    kernel = r.extra.get("broker_kernel")
    share = f" ({100 * kernel:.0f}% in the kernel)" if kernel is not None else ""
    cpu = f"CPU broker {r.broker_cores:.2f}{share} / client {r.client_cores:.2f} / " \
          f"others {r.other_cores:.2f} cores"
    if r.case == "rss":
        print(f"  rss: {r.extra['rss_after'] / MIB:.1f} MiB with {r.records:,} partitions "
              f"({r.extra['rss_before'] / MIB:.1f} MiB before; created in {r.seconds:.1f} s; "
              f"{r.extra['fds']:,} descriptors); idle {cpu}")
    elif r.case == "e2e":
        lat, ack = r.extra["latency"], r.extra["ack"]
        print(f"  e2e: p50 {lat['p50']:.2f} / p99 {lat['p99']:.2f} / p99.9 {lat['p99.9']:.2f} / "
              f"max {lat['max']:.1f} ms over {lat['n']:,} records at {r.extra['rate']:,.0f}/s; "
              f"produce->ack p50 {ack['p50']:.2f} / p99 {ack['p99']:.2f} ms; {cpu}")
    else:
        extra = ""
        if r.batches:
            extra = (f"; {r.batches:,} batches on disk, {r.log_bytes / r.batches / KIB:,.0f} KiB"
                     f" and {r.records / r.batches:,.0f} records each")
        if "last_third_mbps" in r.extra:
            extra += (f"; appends {r.extra['first_third_mbps']:,.0f} MB/s in the first third, "
                      f"{r.extra['last_third_mbps']:,.0f} in the last (dirty page cache up to "
                      f"{r.extra['dirty_peak'] / 2**30:.1f} GiB)")
        print(f"  {r.case}: {r.records:,} records in {r.seconds:.2f} s = {r.rps:,.0f} records/s, "
              f"{r.mbps:,.1f} MB/s{extra}; {cpu}")


def row(*cells: tuple[str, int]) -> str:
    first, *rest = cells
    return f"{first[0]:<{first[1]}}" + "".join(f"{text:>{width}}" for text, width in rest)


def target_of(r: CaseResult) -> tuple[str, bool | None]:
    """The target text and whether it is met (None: no target for this row)."""
    if r.case == "produce-1k-acks1":
        return f">= {TARGET_PRODUCE_1K_MBPS:.0f} MB/s", r.mbps >= TARGET_PRODUCE_1K_MBPS
    if r.case == "consume-1k":
        return f">= {TARGET_CONSUME_1K_MBPS:.0f} MB/s", r.mbps >= TARGET_CONSUME_1K_MBPS
    if r.case == "produce-100b-acks1":
        return f">= {TARGET_PRODUCE_100B_RPS:,.0f} rec/s", r.rps >= TARGET_PRODUCE_100B_RPS
    if r.case == "e2e":
        p99 = r.extra["latency"]["p99"]
        return f"p99 <= {TARGET_E2E_P99_MS:.0f} ms", p99 <= TARGET_E2E_P99_MS
    if r.case == "rss":
        rss = r.extra["rss_after"] / MIB
        return f"< {TARGET_RSS_MIB:.0f} MiB", rss < TARGET_RSS_MIB
    return "", None


def print_table(results: list[CaseResult], limits: dict[str, float]) -> None:
    loopback = limits.get("loopback_mbps", 0.0)
    disk = limits.get("sustained_mbps", limits.get("page_cache_mbps", 0.0))
    widths = [("case", 21), ("loop", 8), ("records/s", 11), ("MB/s", 8), ("/loopback", 10),
              ("/disk", 7), ("broker", 7), ("client", 7), ("others", 7), ("MB/s/core", 10),
              ("target", 19), ("", 6)]
    print()
    print("Results. MB/s: record values; /loopback, /disk: bytes moved (on disk for produce) "
          "over the machine's limits;\nbroker, client, others: CPU in cores; MB/s/core: MB/s "
          "per core of broker CPU, what the broker would carry with a core to itself;\n"
          "e2e: latency p50 / p99 / p99.9 at the records/s shown")
    line = row(*widths)
    print(line)
    print("-" * len(line))
    for r in results:
        target, ok = target_of(r)
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        head = [(r.case, 21), (r.loop, 8)]
        cpu = [(f"{r.broker_cores:.2f}", 7), (f"{r.client_cores:.2f}", 7),
               (f"{r.other_cores:.2f}", 7)]
        tail = [(target, 19), (verdict, 6)]
        if r.case == "rss":
            figure = f"{r.extra['rss_after'] / MIB:.1f} MiB RSS, {r.records:,} partitions"
            print(row(*head, (figure, 36), *cpu, ("", 10), *tail))
        elif r.case == "e2e":
            lat = r.extra["latency"]
            figure = f"{lat['p50']:.1f} / {lat['p99']:.1f} / {lat['p99.9']:.1f} ms"
            print(row(*head, (f"{r.rps:,.0f}", 11), (figure, 25), *cpu, ("", 10), *tail))
        else:
            moved = r.log_bytes if r.log_bytes else r.value_bytes
            rate = moved / r.seconds / MB if r.seconds else 0.0
            to_loop = f"{rate / loopback:.2f}x" if loopback else ""
            to_disk = f"{rate / disk:.2f}x" if disk and r.case.startswith("produce") else ""
            per_core = f"{r.mbps / r.broker_cores:,.0f}" if r.broker_cores else ""
            print(row(*head, (f"{r.rps:,.0f}", 11), (f"{r.mbps:,.1f}", 8), (to_loop, 10),
                      (to_disk, 7), *cpu, (per_core, 10), *tail))


def print_comparison(results: list[CaseResult]) -> None:
    loops = sorted({r.loop for r in results})
    if len(loops) != 2:
        return
    by = {(r.case, r.loop): r for r in results}
    cases = list(dict.fromkeys(r.case for r in results))
    first, second = loops
    print()
    print(f"Event loops: {first} vs {second}. Figure: records/s (e2e: p99 ms; rss: MiB); "
          "cost: broker CPU per record (e2e, rss: broker cores)")
    widths = [("case", 21), (f"{first}", 14), ("cost", 10), (f"{second}", 14), ("cost", 10),
              (f"{second}/{first}", 16), ("cost ratio", 11)]
    line = row(*widths)
    print(line)
    print("-" * len(line))

    def figure(r: CaseResult) -> tuple[str, float, str, float]:
        if r.case == "rss":
            mib = r.extra["rss_after"] / MIB
            return f"{mib:.1f}", mib, f"{r.broker_cores:.2f}", r.broker_cores
        if r.case == "e2e":
            p99 = r.extra["latency"]["p99"]
            return f"{p99:.2f}", p99, f"{r.broker_cores:.2f}", r.broker_cores
        us = r.broker_cores / r.rps * 1e6 if r.rps else 0.0
        return f"{r.rps:,.0f}", r.rps, f"{us:.2f} us", us

    for case in cases:
        a, b = by.get((case, first)), by.get((case, second))
        if a is None or b is None:
            continue
        fa, fb = figure(a), figure(b)
        ratio = f"{fb[1] / fa[1]:.2f}x" if fa[1] else ""
        cost_ratio = f"{fb[3] / fa[3]:.2f}x" if fa[3] else ""
        print(row((case, 21), (fa[0], 14), (fa[2], 10), (fb[0], 14), (fb[2], 10),
                  (ratio, 16), (cost_ratio, 11)))


def run_validation_comparison(ctx: SpawnContext, tmp: Path, loop: str, cases: list[str],
                              options: Options, rounds: int) -> list[CaseResult]:
    """The produce cases against a broker with the record walk off, then one with it on,
    `rounds` times over (alternating, so that a machine that slows down or speeds up
    meanwhile weighs on both); each case's best round of each is compared."""
    produce = [c for c in cases if c.startswith("produce-")]
    if not produce:
        raise SystemExit("--compare-validation: --only selects no produce case")
    results: list[CaseResult] = []
    for _ in range(rounds):
        for enabled in ("false", "true"):
            label = "validated" if enabled == "true" else "unvalidated"
            results += run_suite(ctx, tmp, loop, produce, options,
                                 {VALIDATION_SETTING: enabled}, label)
    return results


def run_scraping_comparison(ctx: SpawnContext, tmp: Path, loop: str, cases: list[str],
                            options: Options, rounds: int) -> list[CaseResult]:
    """The produce cases against a broker with an HTTP listener nobody scrapes, then one
    whose /metrics is scraped every SCRAPE_INTERVAL_S, `rounds` times over (alternating);
    each case's best round of each is compared."""
    produce = [c for c in cases if c.startswith("produce-")]
    if not produce:
        raise SystemExit("--compare-scraping: --only selects no produce case")
    results: list[CaseResult] = []
    settings = {"http.listeners": "http://127.0.0.1:0"}
    for _ in range(rounds):
        results += run_suite(ctx, tmp, loop, produce, options, settings, "unscraped")
        results += run_suite(ctx, tmp, loop, produce, options, settings, "scraped",
                             scrape_every=SCRAPE_INTERVAL_S)
    return results


def print_scraping_comparison(results: list[CaseResult]) -> None:
    print()
    print(f"/metrics scraped every {SCRAPE_INTERVAL_S:g} s: the best round of each, records/s; "
          "cost: broker CPU per record; scrapes: count, median and slowest")
    widths = [("case", 21), ("unscraped", 12), ("cost", 10), ("scraped", 12), ("cost", 10),
              ("scrapes", 22), ("ratio", 7), ("target", 9), ("", 6)]
    line = row(*widths)
    print(line)
    print("-" * len(line))
    for case in dict.fromkeys(r.case for r in results):
        best = {}
        for label in ("unscraped", "scraped"):
            runs = [r for r in results if r.case == case and r.extra.get("label") == label]
            best[label] = max(runs, key=lambda r: r.rps)
        off, on = best["unscraped"], best["scraped"]
        ratio = on.rps / off.rps if off.rps else 0.0
        cost = [f"{r.broker_cores / r.rps * 1e6:.2f} us" if r.rps else "" for r in (off, on)]
        s = on.extra.get("scraped", {})
        scrapes = (f"{s.get('scrapes', 0):.0f}, {s.get('median_ms', 0):.1f}/"
                   f"{s.get('max_ms', 0):.1f} ms")
        verdict = "PASS" if ratio >= TARGET_SCRAPE_RATIO else "FAIL"
        print(row((case, 21), (f"{off.rps:,.0f}", 12), (cost[0], 10), (f"{on.rps:,.0f}", 12),
                  (cost[1], 10), (scrapes, 22), (f"{ratio:.2f}x", 7),
                  (f">= {TARGET_SCRAPE_RATIO}", 9), (verdict, 6)))


def print_validation_comparison(results: list[CaseResult]) -> None:
    print()
    print(f"Record validation ({VALIDATION_SETTING}): the best round of each, records/s; "
          "cost: broker CPU per record")
    widths = [("case", 21), ("off", 12), ("cost", 10), ("on", 12), ("cost", 10),
              ("on/off", 8), ("target", 9), ("", 6)]
    line = row(*widths)
    print(line)
    print("-" * len(line))
    for case in dict.fromkeys(r.case for r in results):
        best = {}
        for label in ("unvalidated", "validated"):
            runs = [r for r in results if r.case == case and r.extra.get("label") == label]
            best[label] = max(runs, key=lambda r: r.rps)
        off, on = best["unvalidated"], best["validated"]
        ratio = on.rps / off.rps if off.rps else 0.0
        cost = [f"{r.broker_cores / r.rps * 1e6:.2f} us" if r.rps else "" for r in (off, on)]
        verdict = "PASS" if ratio >= TARGET_VALIDATION_RATIO else "FAIL"
        print(row((case, 21), (f"{off.rps:,.0f}", 12), (cost[0], 10), (f"{on.rps:,.0f}", 12),
                  (cost[1], 10), (f"{ratio:.2f}x", 8), (f">= {TARGET_VALIDATION_RATIO}", 9),
                  (verdict, 6)))


def select_cases(only: str) -> list[str]:
    wanted: list[str] = []
    for token in only.split(","):
        token = token.strip()
        matches = [c for c in CASES if c == token or c.startswith(token + "-")]
        if not matches:
            raise SystemExit(f"--only: no case {token!r}; cases: {', '.join(CASES)}")
        wanted += matches
    for case in list(wanted):  # a consume case reads what its acks=1 produce case wrote
        if case.startswith("consume-"):
            wanted.append(f"produce-{case.split('-')[1]}-acks1")
    return [c for c in CASES if c in wanted]


def available_loops() -> list[str]:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return ["asyncio"]
    return ["asyncio", "uvloop"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 2 s per produce case, 5 s of e2e, less disk")
    parser.add_argument("--only", default=",".join(CASES),
                        help=f"comma-separated cases or prefixes of {', '.join(CASES)}")
    parser.add_argument("--loops", default="",
                        help="comma-separated event loops to run the broker on: asyncio, "
                        "uvloop, default (default: asyncio,uvloop when uvloop is installed)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of producing per produce case (default 6, quick 2)")
    parser.add_argument("--records", type=int, default=0,
                        help="a fixed number of records per produce case instead of --seconds")
    parser.add_argument("--producers", type=int, default=1, help="producer processes per case")
    parser.add_argument("--e2e-seconds", type=float, default=None,
                        help="seconds of the end-to-end case (default 15, quick 5)")
    parser.add_argument("--e2e-rate", type=int, default=10_000)
    parser.add_argument("--e2e-size", type=int, default=1024)
    parser.add_argument("--e2e-acks", default="1", choices=["0", "1", "all"])
    parser.add_argument("--rss-partitions", type=int, default=1000)
    parser.add_argument("--settle", type=float, default=None,
                        help="seconds of idle before RSS is read (default 5, quick 2)")
    parser.add_argument("--disk-mib", type=int, default=None,
                        help="MiB written for the disk limit (default 1024, quick 256)")
    parser.add_argument("--loopback-seconds", type=float, default=None,
                        help="seconds of the loopback limit (default 3, quick 1)")
    parser.add_argument("--fetch-max-bytes", type=int, default=64 * MIB)
    parser.add_argument("--partition-fetch-bytes", type=int, default=8 * MIB,
                        help="max.partition.fetch.bytes of the consumers")
    parser.add_argument("--profile", default="none",
                        choices=["none", "py-spy", "py-spy-native", "cprofile"])
    parser.add_argument("--profile-dir", type=Path, default=BENCH_ROOT / "profiles")
    parser.add_argument("--quiet-wait", type=float, default=10.0,
                        help="seconds to wait before each case for other processes to use "
                        "less than a quarter of a core (0: do not wait)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--compare-validation", action="store_true",
                        help=f"run only the produce cases, against a broker with "
                        f"{VALIDATION_SETTING}=false and one with it true (on the first of "
                        "--loops), and print the ratio (issue 14's target: >= "
                        f"{TARGET_VALIDATION_RATIO}x)")
    parser.add_argument("--compare-scraping", action="store_true",
                        help="run only the produce cases, against a broker whose /metrics "
                        "nobody scrapes and one scraped every second (on the first of "
                        f"--loops), and print the ratio (issue 18's target: >= "
                        f"{TARGET_SCRAPE_RATIO}x)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="--compare-validation, --compare-scraping: the two brokers "
                        "this many times over")
    args = parser.parse_args()
    if args.compare_validation and args.compare_scraping:
        parser.error("--compare-validation and --compare-scraping: one at a time")
    cases = select_cases(args.only)
    if args.compare_validation or args.compare_scraping:
        cases = [c for c in cases if c.startswith("produce-")]
    quick = args.quick
    loops = [s.strip() for s in args.loops.split(",") if s.strip()] or available_loops()
    for loop in loops:
        if loop not in ("asyncio", "uvloop", "default"):
            parser.error(f"--loops: {loop!r} is not asyncio, uvloop or default")
    if args.e2e_size < STAMP.size:
        parser.error(f"--e2e-size must be at least {STAMP.size}")
    options = Options(
        seconds=args.seconds if args.seconds is not None else (2.0 if quick else 6.0),
        records=args.records, producers=max(1, args.producers),
        e2e_seconds=args.e2e_seconds if args.e2e_seconds is not None else (5 if quick else 15),
        e2e_rate=args.e2e_rate, e2e_size=args.e2e_size, e2e_acks=args.e2e_acks,
        rss_partitions=args.rss_partitions,
        settle=args.settle if args.settle is not None else (2.0 if quick else 5.0),
        fetch={"fetch.max.bytes": args.fetch_max_bytes,
               "max.partition.fetch.bytes": args.partition_fetch_bytes,
               # librdkafka stops fetching a partition whose local queue holds
               # queued.min.messages (default 100,000: 10 MB of 100 B records), then waits
               # fetch.queue.backoff.ms (1 s): that, not the broker, would be measured.
               "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576},
        profile=args.profile, profile_dir=args.profile_dir.resolve(),
        quiet_wait=args.quiet_wait,
    )
    if args.profile.startswith("py-spy") and not (
            shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists()):
        parser.error("--profile py-spy needs py-spy: .venv/bin/pip install py-spy")

    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-broker-", dir=BENCH_ROOT))
    try:
        run(args, options, cases, loops, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            BENCH_ROOT.rmdir()


def run(args: argparse.Namespace, options: Options, cases: list[str], loops: list[str],
        tmp: Path) -> None:
    import confluent_kafka

    ctx = spawn_context()
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({cpu_model()}), "
          f"confluent-kafka {confluent_kafka.version()[0]}, librdkafka "
          f"{confluent_kafka.libversion()[0]}")
    print(f"data in {tmp.relative_to(ROOT)} ({filesystem_of(tmp)}); load average "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the start")
    print(f"settings: {PARTITIONS} partitions, linger.ms={PRODUCER_SETTINGS['linger.ms']}, "
          f"batch.size={PRODUCER_SETTINGS['batch.size']}, "
          + (f"{options.records:,} records" if options.records else f"{options.seconds:g} s")
          + f" per produce case, {options.producers} producer process(es); consumers "
          + ", ".join(f"{k}={v}" for k, v in options.fetch.items()))

    limits: dict[str, float] = {}
    if "limits" in cases:
        print("\n== machine limits ==")
        lb = loopback_limit(ctx, args.loopback_seconds or (1.0 if args.quick else 3.0))
        limits["loopback_mbps"] = lb["mbps"]
        print(f"  loopback TCP, 1 MiB sends, sender and receiver processes: {lb['mbps']:,.0f} "
              f"MB/s ({lb['cores']:.2f} cores)")
        disk = disk_limit(tmp, args.disk_mib or (1024 if args.quick else 4096))
        limits.update({k: v for k, v in disk.items() if k.endswith(("mbps", "cores"))})
        sustained = (f"{disk['sustained_mbps']:,.0f} MB/s over the last GiB (writers "
                     "throttled to the device once dirty pages reach the kernel's limit; "
                     f"the writer used {disk['sustained_cores']:.2f} cores), "
                     if "sustained_mbps" in disk else "")
        print(f"  disk, os.write of 1 MiB chunks, {disk['mib']:,.0f} MiB: "
              f"{disk['page_cache_mbps']:,.0f} MB/s over the first GiB (page cache), "
              f"{sustained}{disk['fsync_mbps']:,.0f} MB/s for the whole with its fsync; "
              f"dirty pages peaked at {disk['dirty_peak'] / 2**30:.1f} GiB")

    results: list[CaseResult] = []
    if args.compare_validation:
        results = run_validation_comparison(ctx, tmp, loops[0], cases, options,
                                            max(1, args.rounds))
        print_table(results, limits)
        print_validation_comparison(results)
    elif args.compare_scraping:
        results = run_scraping_comparison(ctx, tmp, loops[0], cases, options,
                                          max(1, args.rounds))
        print_table(results, limits)
        print_scraping_comparison(results)
    else:
        for loop in loops:
            results += run_suite(ctx, tmp, loop, [c for c in cases if c != "limits"], options)
        print_table(results, limits)
        print_comparison(results)
    for r in results:
        if r.case == "rss":
            top = ", ".join(f"{name} {size / MIB:.1f}" for name, size in r.extra["mappings"])
            print(f"\nrss ({r.loop}): MiB resident by mapping: {top}; librdkafka mapped in "
                  f"the broker: {'yes' if r.extra['librdkafka_mapped'] else 'no'}")
    if args.json is not None:
        args.json.write_text(json.dumps({"limits": limits,
                                         "results": [asdict(r) for r in results]}, indent=1))


if __name__ == "__main__":
    main()
