"""EmbeddedBroker: a real Odradek broker for an application's tests, on a free port of
loopback with a temporary data dir, started in a fraction of a second.

Two ways to run it, with one interface:

- `mode="thread"` (the default): in this process, on a thread and event loop of its own.
  Fastest to start (no interpreter to boot, the broker's modules imported once per
  process), and the broker's log goes through this process's `logging`.
- `mode="process"`: a child process (`python -m odradek serve`). It keeps serving while the
  test holds the GIL (a client blocking in C, a busy loop), and `kill()` is a real SIGKILL.

Settings take Kafka's names (`{"num.partitions": "3", "log.retention.ms": "1000"}`). The
defaults differ from `odradek serve` only where tests want it: rebalances start at once
(`group.initial.rebalance.delay.ms=0`), no HTTP listener, no free-space reserve on the
(often small) temporary file system.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from odradek.testing.clock import TestClock

TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "http.listeners": "",
    "registry.listeners": "",
    "log.dir.min.free.bytes": "0",
    "offsets.topic.num.partitions": "5",  # 50 partitions cost start-up time a test never uses
}
LOG_LINES = 2000  # kept for log_tail()
_LISTENING = re.compile(r"listening on PLAINTEXT://\S*:(\d+)")
_STARTED = re.compile(r"broker \d+ started")


class BrokerError(RuntimeError):
    """The broker could not start, or stopped on its own; the message ends with its log."""


@dataclass
class Record:
    """A record as consume() returns it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = 0

    @property
    def text(self) -> str | None:
        """The value as UTF-8 text (None for a null value)."""
        return None if self.value is None else self.value.decode()


def _bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


class _Embedded:
    """What a broker and a cluster share: `with` and `async with` (start, then close), and
    arranging and asserting through a real client: topics, records in, records out."""

    default_replicas = 1

    @property
    def bootstrap_servers(self) -> str:
        raise NotImplementedError

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        try:
            return await asyncio.to_thread(self.start)
        except BaseException:
            await asyncio.to_thread(self.close)
            raise

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.to_thread(self.close)


    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     config: Mapping[str, object] | None = None, timeout: float = 30.0) -> str:
        """Creates a topic (Kafka's topic configs in `config`) and returns its name; its
        replicas default to every broker of the cluster (one for a broker alone)."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, partitions, replication_factor or self.default_replicas,
                         config={k: str(v) for k, v in (config or {}).items()})
        admin = self._admin()  # kept until answered: a client collected ends its requests
        [future] = admin.create_topics([topic], request_timeout=timeout).values()
        future.result(timeout)
        return name

    def produce(self, topic: str, values: Iterable[str | bytes | None] | str | bytes | None,
                *, key: str | bytes | None = None, partition: int | None = None,
                headers: Sequence[tuple[str, str | bytes | None]] | None = None,
                timeout: float = 30.0) -> list[tuple[int, int]]:
        """Produces one value or several (acks=all, in order) and returns where each landed,
        (partition, offset); raises if any delivery failed."""
        from confluent_kafka import Producer

        if values is None or isinstance(values, str | bytes):
            values = [values]
        producer = Producer({"bootstrap.servers": self.bootstrap_servers, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 0, "log_level": 3})
        placed: list[tuple[int, int]] = []
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placed.append((msg.partition(), msg.offset()))

        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        if headers:
            extra["headers"] = [(k, _bytes(v)) for k, v in headers]
        for value in values:
            producer.produce(topic, value=_bytes(value), key=_bytes(key), on_delivery=delivered,
                             **extra)
        left = producer.flush(timeout)
        if errors or left:
            raise BrokerError(f"produce to {topic} failed: "
                              f"{errors[0] if errors else f'{left} records unacknowledged'}")
        return placed

    def consume(self, topic: str, count: int | None = None, timeout: float = 10.0,
                isolation_level: str = "read_committed") -> list[Record]:
        """The topic's records from the beginning, sorted by partition and offset: every
        record there is (count=None), or the first `count` to arrive, waiting up to
        `timeout` for them (fewer are returned when they do not come)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers,
                             "group.id": "odradek-testing", "enable.auto.commit": False,
                             "enable.partition.eof": True, "isolation.level": isolation_level,
                             "auto.offset.reset": "earliest",
                             "log_level": 3})
        try:
            metadata = consumer.list_topics(topic, timeout=timeout).topics[topic]
            if metadata.error is not None:
                raise BrokerError(f"cannot consume {topic}: {metadata.error}")
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                             for p in metadata.partitions])
            records: list[Record] = []
            ended: set[int] = set()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if count is None and len(ended) == len(metadata.partitions):
                    break
                if count is not None and len(records) >= count:
                    break
                for m in consumer.consume(500, timeout=0.1):
                    error = m.error()
                    if error is None:
                        records.append(Record(m.topic(), m.partition(), m.offset(), m.key(),
                                              m.value(), list(m.headers() or []),
                                              m.timestamp()[1]))
                    elif error.code() == KafkaError._PARTITION_EOF:
                        ended.add(m.partition())
                    else:
                        raise BrokerError(f"cannot consume {topic}: {error}")
            records.sort(key=lambda r: (r.partition, r.offset))
            return records if count is None else records[:count]
        finally:
            consumer.close()


class EmbeddedBroker(_Embedded):
    """A broker for tests: `with EmbeddedBroker() as broker:` or `async with`, then
    `broker.bootstrap_servers` for any Kafka client."""

    def __init__(self, settings: Mapping[str, object] | None = None, *, mode: str = "thread",
                 data_dir: str | os.PathLike[str] | None = None, host: str = "127.0.0.1",
                 start_timeout: float = 60.0, test_clock: bool = False) -> None:
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', not {mode!r}")
        if test_clock and mode != "thread":
            raise ValueError("test_clock needs mode='thread': the clock is an object the "
                             "test and the broker share")
        self.mode = mode
        # advance_time() moves it: retention and timeouts without sleeping.
        self.clock = TestClock() if test_clock else None
        self.settings = {**TEST_DEFAULTS, **{k: str(v) for k, v in (settings or {}).items()}}
        self.host = host
        self.start_timeout = start_timeout
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.port = 0  # chosen at the first start, kept by restarts
        self._lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._runner: _ThreadRunner | _ProcessRunner | None = None

    # ---- life cycle ----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self.port == 0:
            raise BrokerError("the broker has not been started")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None and self._runner.alive()

    def start(self) -> EmbeddedBroker:
        if self.running:
            return self
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="odradek-broker-"))
        settings = {"listeners": f"PLAINTEXT://{self.host}:{self.port}",
                    "log.dirs": str(self.data_dir), **self.settings}
        runner = (_ThreadRunner(settings, self._lines, self.clock) if self.mode == "thread"
                  else _ProcessRunner(settings, self._lines))
        try:
            self.port = runner.start(self.start_timeout)
        except BaseException:
            runner.abandon()
            raise
        self._runner = runner
        return self

    def stop(self) -> None:
        """A clean shutdown (as SIGTERM): everything written is flushed and checkpointed."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.stop()

    def kill(self) -> None:
        """Stops the broker the way SIGKILL does: no shutdown at all, so the next start
        recovers its logs. In a child process it is SIGKILL; in a thread the broker's loop is
        abandoned where it is and its sockets and files are closed under it."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.kill()

    def restart(self, kill: bool = False) -> EmbeddedBroker:
        """Stops (or kills) and starts again on the same port and data dir."""
        self.kill() if kill else self.stop()
        return self.start()

    def close(self) -> None:
        """Stops the broker and removes its data dir if this broker made it."""
        try:
            self.stop()
        finally:
            if self._own_dir and self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)
                self.data_dir = None


    def advance_time(self, ms: int) -> None:
        """Moves the broker's time `ms` ahead (test_clock=True): the coordinators' timers
        that fell due run (session, rebalance and transaction timeouts, offset expiry), and
        then the log chores that go by time (retention, deletion of old segments' files,
        producer id expiry), as if that much time had passed. Returns once they have run."""
        if self.clock is None:
            raise BrokerError("advance_time() needs EmbeddedBroker(test_clock=True)")
        runner = self._runner
        if not isinstance(runner, _ThreadRunner) or runner.loop is None:
            raise BrokerError("the broker is not running")
        asyncio.run_coroutine_threadsafe(runner.advance(ms), runner.loop).result(60)

    def log_tail(self, lines: int = 50) -> str:
        """The last lines of the broker's log (this broker's only, in both modes)."""
        return "".join(list(self._lines)[-lines:])


# ---- runners ---------------------------------------------------------------------------

class _LogHandler(logging.Handler):
    """Keeps the log records of one broker's loop thread."""

    def __init__(self, lines: collections.deque[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines
        self.thread: int | None = None
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.lines.append(self.format(record) + "\n")


class _LogCapture:
    """The "odradek" logger at INFO while brokers run in this process (their log tails
    want the INFO lines), and as it was once the last of them has stopped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handlers: set[logging.Handler] = set()
        self._level = logging.NOTSET

    def attach(self, handler: logging.Handler) -> None:
        logger = logging.getLogger("odradek")
        with self._lock:
            if not self._handlers:
                self._level = logger.level
                if logger.getEffectiveLevel() > logging.INFO:
                    logger.setLevel(logging.INFO)
            self._handlers.add(handler)
            logger.addHandler(handler)

    def detach(self, handler: logging.Handler) -> None:
        logger = logging.getLogger("odradek")
        with self._lock:
            if handler not in self._handlers:
                return  # detached already (a killed broker)
            self._handlers.discard(handler)
            logger.removeHandler(handler)
            if not self._handlers:
                logger.setLevel(self._level)


_CAPTURE = _LogCapture()


class _ThreadRunner:
    """The broker's event loop on a daemon thread of this process."""

    def __init__(self, settings: dict[str, str], lines: collections.deque[str],
                 clock: TestClock | None) -> None:
        self.settings = settings
        self.lines = lines
        self.clock = clock
        self.server: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.started = threading.Event()
        self.error: BaseException | None = None
        self.handler = _LogHandler(lines)

    def start(self, timeout: float) -> int:
        from odradek.broker.kafka_server import KafkaServer
        from odradek.server.config import BrokerConfig

        self.server = KafkaServer(BrokerConfig.from_properties(self.settings), self.clock)
        _CAPTURE.attach(self.handler)
        self.thread = threading.Thread(target=self._run, name="odradek-broker", daemon=True)
        self.thread.start()
        if not self.started.wait(timeout) or self.error is not None:
            raise BrokerError(f"the broker did not start: {self.error or 'timed out'}\n"
                              + "".join(self.lines))
        return int(next(b.port for b in self.server.bound if b.name == "PLAINTEXT"))

    def _run(self) -> None:
        self.handler.thread = threading.get_ident()
        try:
            with asyncio.Runner() as runner:
                self.loop = runner.get_loop()
                runner.run(self.server.run(handle_signals=False, started=self.started.set))
        except BaseException as e:  # a start-up failure: start() reports it
            self.error = e
            self.started.set()
        finally:
            _CAPTURE.detach(self.handler)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    async def advance(self, ms: int) -> None:
        assert self.clock is not None
        self.clock.advance(ms)  # on the loop: the coordinators' timers run here
        logs = self.server.log_manager
        for chore in (logs.cleanup_logs, logs.delete_pending_files,
                      logs.remove_expired_producers):
            await asyncio.to_thread(chore)  # where the log manager's scheduler runs them

    def stop(self) -> None:
        if self.loop is not None and self.alive():
            self.loop.call_soon_threadsafe(self.server.request_stop)
        if self.thread is not None:
            self.thread.join(60)

    def kill(self) -> None:
        """Freezes the loop mid-flight, as SIGKILL freezes a process: nothing more runs on
        it, no shutdown step (no flush, no checkpoint, no clean-shutdown marker). Then the
        descriptors a dead process loses are closed under it: clients see the broker gone,
        and a restart can lock the data dir again. (The frozen thread and its memory stay
        until this process exits.)"""
        loop = self.loop
        if loop is None or not self.alive():
            return
        frozen = threading.Event()

        def freeze() -> None:
            frozen.set()
            threading.Event().wait()  # forever: the loop never runs again

        loop.call_soon_threadsafe(freeze)
        frozen.wait(10)
        _CAPTURE.detach(self.handler)
        _close_descriptors(self.server)

    def abandon(self) -> None:
        self.stop()


def _close_descriptors(server: Any) -> None:
    """Listening and client sockets, the data dirs' locks and the ZooKeeper session of a
    frozen broker. (The session's client runs on threads of its own that would keep it
    alive; it is closed at once, where a killed process's session would expire after
    zookeeper.session.timeout.ms.)"""
    if server.zk_store is not None:
        with contextlib.suppress(Exception):
            server.zk_store.close()
    socket_server = server.socket_server
    if socket_server is not None:
        for sock in socket_server._listening:
            sock.close()
        for connection in list(socket_server.connections):
            sock = connection.transport.get_extra_info("socket") if connection.transport \
                else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    os.close(sock.fileno())
    for fd in server._dir_locks:
        with contextlib.suppress(OSError):
            os.close(fd)
    server._dir_locks = []


class _ProcessRunner:
    """The broker as a child process: `python -m odradek serve --set ...`."""

    def __init__(self, settings: dict[str, str], lines: collections.deque[str]) -> None:
        self.settings = settings
        self.lines = lines
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.started = threading.Event()

    def start(self, timeout: float) -> int:
        argv = [sys.executable, "-m", "odradek", "serve"]
        for key, value in self.settings.items():
            argv += ["--set", f"{key}={value}"]
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self.started.wait(0.02):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise BrokerError("the broker did not start:\n" + "".join(self.lines))
        return self.port

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)
            if (m := _LISTENING.search(line)) is not None:
                self.port = int(m.group(1))
            elif _STARTED.search(line):
                self.started.set()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def abandon(self) -> None:
        self.kill()


class EmbeddedCluster(_Embedded):
    """Several brokers (3 by default) coordinated by a private ZooKeeper (Debian's
    `zookeeper` package, started for the cluster): `kill_broker(n)` and
    `restart_broker(n)` test an application's handling of a broker's failure. Without
    ZooKeeper installed, start() raises ZooKeeperUnavailableError."""

    def __init__(self, brokers: int = 3, settings: Mapping[str, object] | None = None, *,
                 mode: str = "thread", data_dir: str | os.PathLike[str] | None = None,
                 start_timeout: float = 60.0) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path(
            tempfile.mkdtemp(prefix="odradek-cluster-"))
        self.settings = dict(settings or {})
        self.size = brokers
        self.default_replicas = min(3, brokers)
        self.mode = mode
        self.start_timeout = start_timeout
        self.zookeeper: Any = None
        self.brokers: dict[int, EmbeddedBroker] = {}

    @property
    def bootstrap_servers(self) -> str:
        """Every running broker's address."""
        return ",".join(b.bootstrap_servers for b in self.brokers.values() if b.running)

    def start(self) -> EmbeddedCluster:
        from concurrent.futures import ThreadPoolExecutor

        from odradek.cluster.zookeeper_server import ZooKeeperServer

        if self.zookeeper is None:
            self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper").start()
        # The last broker to stop cannot hand its leaderships to anyone: it retries its
        # controlled shutdown, 100 ms apart here rather than Kafka's 5 s.
        common = {"zookeeper.connect": self.zookeeper.connect_string,
                  "zookeeper.session.timeout.ms": "6000",
                  "controlled.shutdown.retry.backoff.ms": "100", **self.settings}
        for n in range(1, self.size + 1):
            self.brokers.setdefault(n, EmbeddedBroker(
                {**common, "broker.id": n}, mode=self.mode,
                data_dir=self.data_dir / f"broker-{n}", start_timeout=self.start_timeout))
        with ThreadPoolExecutor(self.size) as pool:
            list(pool.map(EmbeddedBroker.start, self.brokers.values()))
        self.wait_for_brokers()
        return self

    def wait_for_brokers(self, timeout: float = 30.0) -> None:
        """Until every running broker's metadata lists every running broker."""
        from confluent_kafka.admin import AdminClient

        running = {n for n, b in self.brokers.items() if b.running}
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(set(AdminClient({"bootstrap.servers": self.brokers[n].bootstrap_servers,
                                        "log_level": 3}).list_topics(timeout=2).brokers)
                       == running for n in running):
                    return
            except Exception:  # KafkaException: a broker not answering yet
                pass
            if time.monotonic() > deadline:
                raise BrokerError(f"brokers {sorted(running)} did not all see each other "
                                  f"within {timeout:g} s")
            time.sleep(0.05)

    def kill_broker(self, n: int) -> None:
        self.brokers[n].kill()

    def stop_broker(self, n: int) -> None:
        self.brokers[n].stop()

    def restart_broker(self, n: int, kill: bool = False) -> None:
        self.brokers[n].restart(kill=kill)
        self.wait_for_brokers()

    def broker(self, n: int) -> EmbeddedBroker:
        return self.brokers[n]

    def log_tail(self, lines: int = 50) -> str:
        return "".join(f"---- broker {n}\n{b.log_tail(lines)}" for n, b in self.brokers.items())

    def close(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        try:
            with ThreadPoolExecutor(self.size) as pool:
                list(pool.map(EmbeddedBroker.stop, self.brokers.values()))
        finally:
            if self.zookeeper is not None:
                self.zookeeper.stop()
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)

