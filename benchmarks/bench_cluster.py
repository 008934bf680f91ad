"""A three-broker cluster's speed and failover, next to the machine's own limits measured in
the same run.

Run: .venv/bin/python benchmarks/bench_cluster.py [--seconds S] [--size BYTES]
     [--partitions N] [--disk-mib MIB]   (about 3 minutes with the defaults)

The script runs `odradek cluster up --brokers 3` (a private ZooKeeper and three brokers on
loopback, free ports, data under .bench-tmp/, removed at the end) with
zookeeper.session.timeout.ms=6000, and measures:

0. limits: loopback TCP throughput and the disk's sequential write throughput
   (bench_broker's measurements), the latter over --disk-mib: the page cache's speed over
   the first GiB, and over the last, once the writes land in pages the machine has not
   touched lately (on a virtual machine whose host backs memory lazily, several times
   slower: what a broker writing for minutes gets).
1. produce: a producer process sends --size byte values (linger.ms=5, batch.size=1 MiB,
   as bench_broker) for --seconds to a topic of --partitions partitions: RF=3 with acks=all
   and min.insync.replicas=2, and RF=1 with acks=1, on the same cluster. After an RF=1
   warm-up, in the order RF=3, RF=1, RF=1, RF=3, each after a sync: drift in the machine
   (how warm its memory is, writeback of the run before) weighs on both alike. Records/s
   and MB/s of values over both runs of each, the page cache all replicas wrote against
   the machine's, and the ratio (target: RF=3 acks=all >= 0.5x RF=1 acks=1).
2. failover: an idempotent acks=all producer (in this process) keeps an RF=3 topic busy;
   the leader of partition 0 is killed (SIGKILL); the time from the kill to the first
   acknowledgement of partition 0 after it, and the longest gap between acknowledgements
   of any partition (target: within zookeeper.session.timeout.ms + 2 s).
3. controlled shutdown: the new leader of partition 0 gets SIGTERM; the time from the
   signal until another broker's Metadata shows every partition it led led by another
   broker, and the producer's longest gap (target: leadership moved in under 1 s).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_broker import (
    MB,
    disk_limit,
    loopback_limit,
    run_producer,
    run_workers,
    spawn_context,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
SESSION_TIMEOUT_MS = 6000
_BROKER_LINE = re.compile(r"broker (\d+): 127\.0\.0\.1:(\d+), pid (\d+)")


class LocalCluster:
    """`odradek cluster up --brokers 3` in the background."""

    def __init__(self, directory: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "3",
             "--port-base", "0", "--zookeeper-port", "0", "--data-dir", str(directory),
             "--set", f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        self.pids: dict[int, int] = {}
        self.bootstrap = ""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if (m := _BROKER_LINE.match(line)) is not None:
                self.pids[int(m.group(1))] = int(m.group(3))
            if line.startswith("bootstrap: "):
                self.bootstrap = line.split()[1]
                break
        if not self.bootstrap:
            raise RuntimeError("odradek cluster up did not start")
        threading.Thread(target=self.process.stdout.read, daemon=True).start()  # drain

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def create_topic(self, name: str, partitions: int, rf: int, **configs: str) -> None:
        admin = self.admin()
        admin.create_topics([NewTopic(name, partitions, rf, config=configs)])[name].result(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            shown = admin.list_topics(name, timeout=5).topics[name].partitions
            if len(shown) == partitions and all(p.leader >= 0 and len(p.isrs) == rf
                                                for p in shown.values()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{name} did not get leaders and full ISRs")

    def leaders(self, topic: str, via: int | None = None) -> dict[int, int]:
        bootstrap = (self.bootstrap if via is None else
                     next(b for b in self.bootstrap.split(",")
                          if b.endswith(f":{self.port_of(via)}")))
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        return {p: m.leader for p, m in
                admin.list_topics(topic, timeout=5).topics[topic].partitions.items()}

    def port_of(self, broker_id: int) -> int:
        return int(self.bootstrap.split(",")[broker_id - 1].rsplit(":", 1)[1])


class SteadyProducer:
    """An idempotent acks=all producer sending from a thread; acknowledgement times."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5,
                                  "request.timeout.ms": 3000, "log_level": 0})
        self.topic = topic
        self.acks: list[tuple[float, int]] = []  # (monotonic time, partition)
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acks.append((time.monotonic(), msg.partition()))
        else:
            self.errors += 1

    def _run(self) -> None:
        value = os.urandom(1000)
        while not self._stop.is_set():
            with contextlib.suppress(BufferError):
                self.producer.produce(self.topic, value, on_delivery=self._delivered)
            self.producer.poll(0.001)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(60)

    def first_ack_after(self, moment: float, partition: int) -> float | None:
        return next((t for t, p in list(self.acks) if t > moment and p == partition), None)

    def longest_gap(self, since: float) -> float:
        times = [t for t, _ in list(self.acks) if t >= since]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def wait_for(condition: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return time.monotonic()


def produce_case(ctx: Any, cluster: LocalCluster, topic: str, acks: str, args: Any
                 ) -> dict[str, Any]:
    start_event = ctx.Event()
    (result,) = run_workers(ctx, [(run_producer, (cluster.bootstrap, topic, args.size, acks,
                                                  args.seconds, 0, start_event))],
                            on_started=start_event.set)
    return {"records": result["records"], "wall": result["end"] - result["start"],
            "failed": result["failed"]}


def combined(runs: list[dict[str, Any]], size: int) -> dict[str, Any]:
    records = sum(r["records"] for r in runs)
    wall = sum(r["wall"] for r in runs)
    return {"records_s": records / wall, "mb_s": records * size / wall / MB,
            "failed": sum(r["failed"] for r in runs),
            "each_mb_s": [r["records"] * size / r["wall"] / MB for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8, help="per produce run")
    parser.add_argument("--size", type=int, default=1024, help="value bytes")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--disk-mib", type=int, default=8192,
                        help="written for the disk's limits; its last GiB lands in cold pages")
    args = parser.parse_args()
    ctx = spawn_context()
    base = ROOT / ".bench-tmp"
    base.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="cluster-", dir=base))
    try:
        print("limits ...", flush=True)
        loopback = loopback_limit(ctx, 3)
        disk = disk_limit(tmp, args.disk_mib)
        cluster = LocalCluster(tmp / "cluster")
        try:
            run(ctx, cluster, args, loopback, disk)
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(ctx: Any, cluster: LocalCluster, args: Any, loopback: dict[str, float],
        disk: dict[str, float]) -> None:
    print(f"cluster: 3 brokers on {cluster.bootstrap}, zookeeper.session.timeout.ms="
          f"{SESSION_TIMEOUT_MS}", flush=True)
    cluster.create_topic("rf3", args.partitions, 3, **{"min.insync.replicas": "2"})
    cluster.create_topic("rf1", args.partitions, 1)
    runs: dict[str, list[dict[str, Any]]] = {"rf3": [], "rf1": []}
    print("warm-up: RF=1 acks=1, not counted ...", flush=True)
    produce_case(ctx, cluster, "rf1", "1", args)  # uses up the pages recently freed
    for topic in ("rf3", "rf1", "rf1", "rf3"):
        # The kernel writes a run's dirty pages back up to 30 s later: synced first, no run
        # pays for the writeback of the one before it.
        os.sync()
        print(f"produce {'RF=3 acks=all' if topic == 'rf3' else 'RF=1 acks=1'} ...", flush=True)
        runs[topic].append(produce_case(ctx, cluster, topic, "all" if topic == "rf3" else "1",
                                        args))
    rf3, rf1 = combined(runs["rf3"], args.size), combined(runs["rf1"], args.size)

    cluster.create_topic("steady", args.partitions, 3, **{"min.insync.replicas": "2"})
    producer = SteadyProducer(cluster.bootstrap, "steady").start()
    try:
        time.sleep(3)  # steady state before the kill
        victim = cluster.leaders("steady")[0]
        print(f"failover: kill -9 broker {victim}, the leader of steady-0 ...", flush=True)
        killed = time.monotonic()
        os.kill(cluster.pids[victim], signal.SIGKILL)
        acked = wait_for(lambda: producer.first_ack_after(killed + 0.05, 0) is not None,
                         60, "an acknowledgement of steady-0 after the kill")
        failover = (producer.first_ack_after(killed + 0.05, 0) or acked) - killed
        time.sleep(2)
        failover_gap = producer.longest_gap(killed - 1)

        survivor_leaders = cluster.leaders("steady")
        leader = survivor_leaders[0]
        witness = next(b for b in cluster.pids if b not in (victim, leader))
        led = [p for p, b in survivor_leaders.items() if b == leader]
        print(f"controlled shutdown: SIGTERM broker {leader}, leading {len(led)} "
              "partitions ...", flush=True)
        signalled = time.monotonic()
        os.kill(cluster.pids[leader], signal.SIGTERM)

        def moved() -> bool:
            try:
                now = cluster.leaders("steady", via=witness)
            except Exception:
                return False
            return all(now[p] not in (leader, -1) for p in led)

        moved_at = wait_for(moved, 30, "leadership moved off the stopping broker")
        time.sleep(2)
        shutdown_gap = producer.longest_gap(signalled - 1)
    finally:
        producer.stop()

    budget = SESSION_TIMEOUT_MS / 1000 + 2
    ratio = rf3["mb_s"] / rf1["mb_s"] if rf1["mb_s"] else 0.0
    print()
    cold = disk.get("sustained_mbps", disk["page_cache_mbps"])
    print(f"machine: loopback {loopback['mbps']:,.0f} MB/s; disk page cache "
          f"{disk['page_cache_mbps']:,.0f} MB/s, in cold pages {cold:,.0f} MB/s, "
          f"{disk['mib']} MiB with fsync {disk['fsync_mbps']:,.0f} MB/s")
    print(f"{'case':<34} {'records/s':>10} {'MB/s':>8} {'of loopback':>12} {'of disk':>8}")
    for name, r in (("produce RF=3 acks=all (min.isr 2)", rf3), ("produce RF=1 acks=1", rf1)):
        each = ", ".join(f"{m:.0f}" for m in r["each_mb_s"])
        print(f"{name:<34} {r['records_s']:>10,.0f} {r['mb_s']:>8.1f} "
              f"{r['mb_s'] / loopback['mbps']:>12.1%} {r['mb_s'] / disk['fsync_mbps']:>8.1%}"
              f"   (runs: {each} MB/s)")
    print("page cache written, all replicas: "
          f"RF=3 {3 * rf3['mb_s']:,.0f} MB/s ({3 * rf3['mb_s'] / cold:.0%} of cold pages), "
          f"RF=1 {rf1['mb_s']:,.0f} MB/s ({rf1['mb_s'] / cold:.0%})")
    print()
    print(f"RF=3 acks=all / RF=1 acks=1: {ratio:.2f}  (target >= 0.5: "
          f"{'PASS' if ratio >= 0.5 else 'MISS'})")
    print(f"failover (kill -9 of a leader -> first acks=all acknowledgement): {failover:.2f} s;"
          f" longest gap {failover_gap:.2f} s  (target <= {budget:g} s: "
          f"{'PASS' if failover <= budget else 'MISS'})")
    print(f"controlled shutdown (SIGTERM -> leadership moved): {moved_at - signalled:.2f} s; "
          f"producer's longest gap {shutdown_gap:.2f} s  (target < 1 s: "
          f"{'PASS' if moved_at - signalled < 1 else 'MISS'})")
    if producer.errors or rf3["failed"] or rf1["failed"]:
        print(f"delivery failures: steady {producer.errors}, rf3 {rf3['failed']}, "
              f"rf1 {rf1['failed']}")


if __name__ == "__main__":
    main()
