"""Does the broker stay responsive while admin work runs? A probe producer's ack latencies
while another client creates and deletes thousands of partitions, next to the same probe
against the idle broker in the same run.

Run: .venv/bin/python benchmarks/bench_responsiveness.py [--mode single,zookeeper]
     [--partitions 5000] [--topics 300] [--rate 50] [--idle 10] [--tail 5]
     [--zk-brokers 1] [--restart-partitions 10000] [--odradek DIR]
     (about 2 minutes per mode with the defaults, on this 2-core machine)

For each mode the script starts its own broker(s) in a temporary directory under
.bench-tmp/ (removed at the end): `single`, one `python -m odradek serve` on its embedded
store; `zookeeper`, a private ZooKeeper (odradek.cluster.zookeeper_server) and
--zk-brokers brokers on it. Then:

1. probe: a confluent-kafka producer in a process of its own (acks=all, linger.ms=0)
   sends --rate records/s of 100 B to a topic of one partition and records each record's
   ack latency (send to delivery report).
2. idle: --idle seconds of the probe alone: the baseline.
3. admin load, from an AdminClient in this process, each step waited for:
   create one topic of --partitions partitions; create --topics topics of one partition
   (one request); delete them all (one request); then --tail seconds more (in a cluster
   the brokers delete the logs after the request is answered).
   Every record sent from the first step to the end of the tail counts for the load's
   figures (p50/p99/max, and per step). Target (issue 14): p99 < 100 ms, max < 500 ms.
4. restart (single mode, --restart-partitions > 0): a fresh broker with one topic of that
   many partitions is stopped (SIGTERM) and started again: the seconds until it listens
   and until it logs "started", and the stop's; then killed (SIGKILL) and started again,
   recovering every log.

--odradek DIR runs the brokers from another copy of the source tree (e.g. an earlier
commit unpacked with `git archive <commit> | tar -x -C DIR`), for before/after figures
from the same script; the probe and the admin client are the same.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
BENCH_ROOT = ROOT / ".bench-tmp"
PROBE_TOPIC = "probe"
BIG_TOPIC = "bench-big"
TARGET_P99_MS = 100.0
TARGET_MAX_MS = 500.0
_LISTENING = re.compile(r"listening on PLAINTEXT://[^:]*:(\d+)")
_STARTED = re.compile(r"broker \d+ started")
# Generous client timeouts: the broker before the fix took minutes for these requests.
ADMIN_SETTINGS = {"socket.timeout.ms": 300_000, "log_level": 3}
ADMIN_TIMEOUT_S = 900.0


# ---- brokers ----------------------------------------------------------------------------------


class Broker:
    """`python -m odradek serve` from `source` (a source tree), its log in a file."""

    def __init__(self, data_dir: Path, source: Path, settings: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.source = source
        self.settings = settings
        self.log_path = data_dir.with_suffix(".log")
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 600) -> dict[str, float]:
        """Starts it; the seconds until it listened and until it logged "started"."""
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                    "log.dirs": str(self.data_dir), **self.settings}
        argv = [sys.executable, "-m", "odradek", "serve"]
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        # `python -m` puts its working directory first on sys.path: the tree under test.
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(self.source))
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log,
                                            env=env, cwd=self.source)
        listening = 0.0
        while True:
            text = self.log_text()[offset:]
            if not listening and (m := _LISTENING.search(text)) is not None:
                self.port = int(m.group(1))
                listening = time.monotonic() - began
            if _STARTED.search(text) and self.port:
                return {"listening_s": listening, "started_s": time.monotonic() - began}
            if self.process.poll() is not None or time.monotonic() - began > timeout:
                self.kill()
                raise RuntimeError("broker did not start:\n" + text[-4000:])
            time.sleep(0.02)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 600) -> float:
        """SIGTERM; the seconds it took to exit."""
        if self.process is None or self.process.poll() is not None:
            return 0.0
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return time.monotonic() - began

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class Setup:
    """The brokers of one mode, and ZooKeeper for the cluster."""

    def __init__(self, mode: str, tmp: Path, source: Path, brokers: int) -> None:
        self.mode = mode
        self.zookeeper: Any = None
        settings: dict[str, str] = {}
        if mode == "zookeeper":
            from odradek.cluster.zookeeper_server import ZooKeeperServer

            self.zookeeper = ZooKeeperServer(tmp / "zookeeper").start()
            settings = {"zookeeper.connect": f"{self.zookeeper.connect_string}/bench",
                        "offsets.topic.replication.factor": str(min(3, brokers))}
        else:
            brokers = 1
        self.brokers = [
            Broker(tmp / f"{mode}-{i}", source, {**settings, "broker.id": str(i)})
            for i in range(1, brokers + 1)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> None:
        for broker in self.brokers:
            broker.start()

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()


# ---- the probe --------------------------------------------------------------------------------


def run_probe(bootstrap: str, topic: str, rate: float, ready: Any, stop: Any,
              results: Any) -> None:
    """The probe process: sends at `rate` until `stop`, then puts its samples on
    `results`: (sent at, monotonic; latency in s, or None if the record failed)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 900_000, "log_level": 3})
    samples: list[tuple[float, float | None]] = []

    def report(sent: float) -> Any:
        def on_delivery(err: Any, _msg: Any) -> None:
            samples.append((sent, None if err is not None else time.monotonic() - sent))
        return on_delivery

    value = b"x" * 100
    # Warm-up: metadata and a connection, then a first acknowledgement.
    while not samples:
        producer.produce(topic, value, on_delivery=report(time.monotonic()))
        producer.flush(10)
    samples.clear()
    ready.set()
    interval = 1.0 / rate
    next_send = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_send:
            producer.produce(topic, value, on_delivery=report(now))
            next_send += interval
            if next_send < now:  # fell behind (a stalled client): keep the rate, not a burst
                next_send = now + interval
        producer.poll(max(0.0, min(next_send - time.monotonic(), 0.005)))
    producer.flush(ADMIN_TIMEOUT_S)
    results.put(samples)


@dataclass
class Window:
    name: str
    start: float
    end: float = 0.0
    detail: str = ""


@dataclass
class Figures:
    name: str
    seconds: float
    acks: int
    failed: int
    p50: float
    p99: float
    max: float
    detail: str = ""


def figures(window: Window, samples: list[tuple[float, float | None]]) -> Figures:
    inside = [lat for sent, lat in samples if window.start <= sent < window.end]
    latencies = sorted(lat * 1000 for lat in inside if lat is not None)

    def at(q: float) -> float:
        if not latencies:
            return float("nan")
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return Figures(window.name, window.end - window.start, len(latencies),
                   len(inside) - len(latencies), at(0.5), at(0.99),
                   latencies[-1] if latencies else float("nan"), window.detail)


# ---- the admin load ---------------------------------------------------------------------------


def wait_for(futures: dict[str, Any]) -> list[str]:
    """Waits for every future; the errors, if any."""
    errors = []
    for name, future in futures.items():
        try:
            future.result(timeout=ADMIN_TIMEOUT_S)
        except Exception as e:
            errors.append(f"{name}: {e}")
    return errors


def wait_until_led(admin: AdminClient, topics: list[str], partitions: int,
                   timeout: float = ADMIN_TIMEOUT_S) -> None:
    """Until the metadata shows the topics with every partition led (in a cluster the
    controller elects the leaders after CreateTopics is answered)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = admin.list_topics(timeout=60).topics
        if all(t in shown and shown[t].error is None and len(shown[t].partitions) == partitions
               and all(p.leader >= 0 for p in shown[t].partitions.values()) for t in topics):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{len(topics)} topics not led after {timeout} s")


def admin_load(admin: AdminClient, partitions: int, topics: int, replication_factor: int
               ) -> list[Window]:
    windows = []
    many = [f"bench-{i:04d}" for i in range(topics)]

    def step(name: str, detail: str, fn: Any) -> None:
        window = Window(name, time.monotonic(), detail=detail)
        errors = fn()
        window.end = time.monotonic()
        if errors:  # reported, and the load goes on (the old broker failed some)
            window.detail += f"; FAILED: {errors[0][:100]}"
        windows.append(window)
        print(f"  {name}: {window.end - window.start:.2f} s"
              + (f"; {len(errors)} failed: {errors[:2]}" if errors else ""), flush=True)

    def create_big() -> list[str]:
        errors = wait_for(admin.create_topics(
            [NewTopic(BIG_TOPIC, partitions, replication_factor)], request_timeout=300))
        if not errors:
            wait_until_led(admin, [BIG_TOPIC], partitions)
        return errors

    def create_many() -> list[str]:
        errors = wait_for(admin.create_topics(
            [NewTopic(t, 1, replication_factor) for t in many], request_timeout=300))
        if not errors:
            wait_until_led(admin, many, 1)
        return errors

    def delete_all() -> list[str]:
        return wait_for(admin.delete_topics([BIG_TOPIC, *many], request_timeout=300))

    step("create 1 topic", f"{partitions:,} partitions", create_big)
    step(f"create {topics} topics", "1 partition each, one request", create_many)
    step(f"delete {topics + 1} topics", "one request", delete_all)
    return windows


def run_mode(mode: str, args: argparse.Namespace, tmp: Path, source: Path) -> list[Figures]:
    setup = Setup(mode, tmp, source, args.zk_brokers)
    ctx = mp.get_context("spawn")
    probe: Any = None
    try:
        setup.start()
        admin = AdminClient({"bootstrap.servers": setup.bootstrap, **ADMIN_SETTINGS})
        rf = args.replication_factor
        # A cluster's brokers learn of the controller and of each other a moment after
        # they start (UpdateMetadata): until then librdkafka has no controller to ask.
        deadline = time.monotonic() + 60
        while True:
            shown = admin.list_topics(timeout=10)
            if shown.controller_id >= 0 and len(shown.brokers) == len(setup.brokers):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no controller, or not every broker, after 60 s: {shown}")
            time.sleep(0.2)
        errors = wait_for(admin.create_topics([NewTopic(PROBE_TOPIC, 1, rf)],
                                              request_timeout=60))
        if errors:
            raise RuntimeError(f"cannot create {PROBE_TOPIC}: {errors}")
        wait_until_led(admin, [PROBE_TOPIC], 1, 60)
        ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
        probe = ctx.Process(target=run_probe, args=(setup.bootstrap, PROBE_TOPIC, args.rate,
                                                    ready, stop, results), daemon=True)
        probe.start()
        if not ready.wait(120):
            raise RuntimeError("the probe did not get its first acknowledgement")
        idle = Window("idle (baseline)", time.monotonic())
        time.sleep(args.idle)
        idle.end = time.monotonic()
        print(f"  idle: {args.idle:g} s", flush=True)
        steps = admin_load(admin, args.partitions, args.topics, rf)
        tail = Window("tail", time.monotonic(), detail="after the last answer")
        time.sleep(args.tail)
        tail.end = time.monotonic()
        stop.set()
        samples = results.get(timeout=ADMIN_TIMEOUT_S)
        probe.join(30)
        load = Window("admin load, all", steps[0].start, tail.end,
                      f"{tail.end - steps[0].start:.1f} s")
        return [figures(w, samples) for w in (idle, *steps, tail, load)]
    except BaseException:
        for broker in setup.brokers:
            print(f"---- {broker.log_path.name}, its end:\n{broker.log_text()[-3000:]}")
        raise
    finally:
        if probe is not None and probe.is_alive():
            probe.kill()
        setup.stop()


def restart_case(args: argparse.Namespace, tmp: Path, source: Path) -> dict[str, float]:
    broker = Broker(tmp / "restart", source, {})
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, **ADMIN_SETTINGS})
        began = time.monotonic()
        errors = wait_for(admin.create_topics(
            [NewTopic(BIG_TOPIC, args.restart_partitions, 1)], request_timeout=300))
        if errors:
            raise RuntimeError(errors)
        created = time.monotonic() - began
        del admin
        stopped = broker.stop()
        started = broker.start()
        broker.kill()  # and after a crash: every log is recovered
        recovered = broker.start()
        return {"create_s": created, "stop_s": stopped, **started,
                "recovered_listening_s": recovered["listening_s"],
                "recovered_started_s": recovered["started_s"]}
    finally:
        broker.stop()


# ---- report -----------------------------------------------------------------------------------


def print_table(mode: str, source: Path, rows: list[Figures]) -> None:
    print(f"\n== {mode} (brokers from {source}) ==")
    print(f"{'':<22}{'seconds':>9}{'acks':>7}{'failed':>8}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'max ms':>9}")
    for r in rows:
        print(f"{r.name:<22}{r.seconds:>9.1f}{r.acks:>7}{r.failed:>8}{r.p50:>9.1f}"
              f"{r.p99:>9.1f}{r.max:>9.1f}  {r.detail}")
    load = rows[-1]
    met = load.failed == 0 and load.p99 < TARGET_P99_MS and load.max < TARGET_MAX_MS
    print(f"target under admin load: p99 < {TARGET_P99_MS:g} ms, max < {TARGET_MAX_MS:g} ms: "
          f"{'met' if met else 'MISSED'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", default="single,zookeeper",
                        help="comma-separated: single, zookeeper")
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--topics", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0, help="probe records per second")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of baseline")
    parser.add_argument("--tail", type=float, default=5.0,
                        help="seconds of probing after the last admin answer")
    parser.add_argument("--zk-brokers", type=int, default=1,
                        help="brokers in the zookeeper mode")
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--restart-partitions", type=int, default=10_000,
                        help="partitions of the restart case (0: skip it)")
    parser.add_argument("--odradek", type=Path, default=ROOT,
                        help="the source tree the brokers run from (default: this one)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    for m in modes:
        if m not in ("single", "zookeeper"):
            parser.error(f"--mode: {m!r} is not single or zookeeper")
    source = args.odradek.resolve()
    if not (source / "odradek" / "__main__.py").exists():
        parser.error(f"--odradek: {source} holds no odradek package")

    import confluent_kafka

    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, confluent-kafka "
          f"{confluent_kafka.version()[0]}, librdkafka {confluent_kafka.libversion()[0]}; "
          f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"probe: acks=all, linger.ms=0, {args.rate:g} records/s; load: a topic of "
          f"{args.partitions:,} partitions, {args.topics} topics, then deleting them all")
    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-responsiveness-", dir=BENCH_ROOT))
    try:
        tables = []
        for mode in modes:
            print(f"\n{mode}:", flush=True)
            tables.append((mode, run_mode(mode, args, tmp, source)))
        restart = None
        if args.restart_partitions > 0 and "single" in modes:
            print(f"\nrestart with {args.restart_partitions:,} partitions:", flush=True)
            restart = restart_case(args, tmp, source)
        for mode, rows in tables:
            print_table(mode, source, rows)
        if restart is not None:
            print(f"\n== restart, one topic of {args.restart_partitions:,} partitions ==\n"
                  f"created in {restart['create_s']:.1f} s; SIGTERM to exit "
                  f"{restart['stop_s']:.1f} s; start to listening {restart['listening_s']:.1f}"
                  f" s, to started {restart['started_s']:.1f} s; after SIGKILL, start to "
                  f"listening {restart['recovered_listening_s']:.1f} s, to started "
                  f"{restart['recovered_started_s']:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            BENCH_ROOT.rmdir()


if __name__ == "__main__":
    main()
