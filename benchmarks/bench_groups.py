"""Consumer groups: rebalance time, offset commits per second, coordinator load time.

Runs a broker of its own (benchmarks/bench_broker.py's BenchBroker) and confluent-kafka
clients, and prints each figure next to its target (issue 5):

- rebalance: a 10-member group on a 20-partition topic; one member leaves (LeaveGroup);
  the time until the nine others hold new assignments covering every partition. The
  members learn of the rebalance from their next heartbeat, so the clients' own lower
  bound is heartbeat.interval.ms; target: within 1.5x of it.
- commits: synchronous offset commits of one member, one after the other (latency bound),
  and asynchronous ones kept in flight; target >= 5,000 commits/s.
- load: 100,000 committed offsets (100 groups x 1,000 partitions), broker restarted; the
  time from its "started" line until every group's offsets can be fetched; target < 2 s.

Usage: .venv/bin/python benchmarks/bench_groups.py [--quick] [--only rebalance,commits,load]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_broker import ROOT, BenchBroker
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

HEARTBEAT_MS = 1000
SESSION_MS = 6000
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


def admin_of(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = admin_of(bootstrap)  # kept alive until the answer: a dropped client aborts it
    futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=120)
    futures[name].result(180)


# ---- rebalance ----------------------------------------------------------------------------


class Member(threading.Thread):
    """One group member polling in its own thread; records when assignments arrive."""

    def __init__(self, bootstrap: str, group: str, topic: str, n: int) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": f"member-{n}",
            "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": SESSION_MS,
            "enable.auto.commit": False, "log_level": 3,
        })
        self.topic = topic
        self.assigned: list[tuple[float, set[int]]] = []  # (when, partitions)
        self.stop = threading.Event()

    def run(self) -> None:
        def on_assign(consumer: Any, partitions: list[TopicPartition]) -> None:
            self.assigned.append((time.monotonic(), {tp.partition for tp in partitions}))

        self.consumer.subscribe([self.topic], on_assign=on_assign)
        while not self.stop.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()  # LeaveGroup

    def partitions_since(self, since: float) -> tuple[float, set[int]] | None:
        later = [a for a in self.assigned if a[0] >= since]
        return later[-1] if later else None


def bench_rebalance(bootstrap: str, rounds: int) -> dict[str, Any]:
    topic, partitions, size = "rebalance", 20, 10
    create_topic(bootstrap, topic, partitions)
    times = []
    for r in range(rounds):
        members = [Member(bootstrap, f"rebalance-{r}", topic, n) for n in range(size)]
        for m in members:
            m.start()
        deadline = time.monotonic() + 120
        while not (all(m.assigned for m in members) and
                   sorted(p for m in members for p in m.assigned[-1][1]) == list(
                       range(partitions))):
            if time.monotonic() > deadline:
                raise RuntimeError("the group never became stable")
            time.sleep(0.01)
        time.sleep(HEARTBEAT_MS / 1000)  # stable for a heartbeat: no rebalance under way
        leaver, stayers = members[0], members[1:]
        started = time.monotonic()
        leaver.stop.set()
        while True:
            found = [m.partitions_since(started) for m in stayers]
            news = [n for n in found if n is not None]
            covered = sorted(p for _, owned in news for p in owned)
            if len(news) == len(stayers) and covered == list(range(partitions)):
                times.append(max(when for when, _ in news) - started)
                break
            if time.monotonic() - started > 60:
                raise RuntimeError("the rebalance did not complete within 60 s")
            time.sleep(0.005)
        for m in stayers:
            m.stop.set()
        for m in members:
            m.join(30)
    median = statistics.median(times)
    return {"rounds": times, "median_s": median,
            "bound_s": HEARTBEAT_MS / 1000, "ratio": median / (HEARTBEAT_MS / 1000)}


# ---- commits ------------------------------------------------------------------------------


def bench_commits(bootstrap: str, seconds: float) -> dict[str, Any]:
    topic = "commits"
    create_topic(bootstrap, topic, 4)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer",
                         "enable.auto.commit": False, "log_level": 3})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        consumer.poll(0.1)
        if time.monotonic() > deadline:
            raise RuntimeError("no assignment")
    n = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        consumer.commit(offsets=[TopicPartition(topic, n % 4, n)], asynchronous=False)
        n += 1
    sync_rate = n / (time.monotonic() - started)

    done = 0
    errors: list[Any] = []

    def committed(err: Any, partitions: Any) -> None:
        nonlocal done
        done += 1
        if err is not None:
            errors.append(err)

    consumer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer",
                         "enable.auto.commit": False, "log_level": 3,
                         "on_commit": committed})
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(100):
            consumer.commit(offsets=[TopicPartition(topic, sent % 4, sent)], asynchronous=True)
            sent += 1
        consumer.poll(0)
    while done < sent and time.monotonic() - started < seconds + 30:
        consumer.poll(0.01)
    async_rate = done / (time.monotonic() - started)
    consumer.close()
    if errors:
        raise RuntimeError(f"commit errors: {errors[:3]}")
    return {"sync_per_s": sync_rate, "async_per_s": async_rate}


# ---- load ---------------------------------------------------------------------------------


def commit_offsets(bootstrap: str, groups: int, partitions: int, topic: str) -> None:
    admin = admin_of(bootstrap)
    for g in range(groups):
        request = ConsumerGroupTopicPartitions(
            f"load-{g}", [TopicPartition(topic, p, 1000 + p) for p in range(partitions)])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=120)
        for future in futures.values():
            future.result(180)


def all_fetchable(admin: AdminClient, groups: int, partitions: int) -> bool:
    """Whether every group's offsets come back (all requests in flight at once)."""
    requests = [ConsumerGroupTopicPartitions(f"load-{g}") for g in range(groups)]
    futures = [f for r in requests
               for f in admin.list_consumer_group_offsets([r], request_timeout=10).values()]
    try:
        return all(sum(1 for tp in f.result(15).topic_partitions if tp.offset >= 0)
                   == partitions for f in futures)
    except KafkaException:
        return False  # COORDINATOR_LOAD_IN_PROGRESS, after the client's retries


_LOADED = re.compile(r"loaded __consumer_offsets-\d+: (\d+) groups, (\d+) offsets from "
                     r"(\d+) records in (\d+) ms")


def bench_load(broker: BenchBroker, groups: int, partitions: int) -> dict[str, Any]:
    topic = "load"
    create_topic(broker.bootstrap, topic, partitions)
    commit_offsets(broker.bootstrap, groups, partitions, topic)
    broker.stop()
    spawned = time.monotonic()
    broker.start()
    started = time.monotonic()
    admin = admin_of(broker.bootstrap)
    while not all_fetchable(admin, groups, partitions):
        if time.monotonic() - started > 120:
            raise RuntimeError("offsets were not fetchable within 120 s")
    ready = time.monotonic()
    # The coordinator's own account: partitions load side by side, each logging its time.
    loads = [tuple(map(int, m.groups())) for m in _LOADED.finditer(broker.log_text())]
    return {"offsets": groups * partitions, "start_s": started - spawned,
            "fetchable_s": ready - started,
            "loaded_offsets": sum(o for _, o, _, _ in loads),
            "load_s": max((ms for *_, ms in loads), default=0) / 1000}


# ---- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter runs")
    parser.add_argument("--only", default="rebalance,commits,load")
    args = parser.parse_args()
    cases = set(args.only.split(","))
    (ROOT / ".bench-tmp").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-groups-", dir=ROOT / ".bench-tmp"))
    broker = BenchBroker(tmp / "data", "default", settings=BROKER_SETTINGS).start()
    print(f"Python {sys.version.split()[0]}; broker on {broker.bootstrap} "
          f"({broker.event_loop()}); data in {tmp}")
    rows = []
    try:
        if "rebalance" in cases:
            r = bench_rebalance(broker.bootstrap, 2 if args.quick else 5)
            rounds = ", ".join(f"{t:.2f}" for t in r["rounds"])
            print(f"rebalance: 10 members, one leaves: median {r['median_s']:.2f} s "
                  f"(rounds {rounds}); heartbeat.interval.ms bound {r['bound_s']:.2f} s")
            rows.append(("rebalance after a leave", f"{r['ratio']:.2f}x the bound",
                         "<= 1.5x", r["ratio"] <= 1.5))
        if "commits" in cases:
            c = bench_commits(broker.bootstrap, 3 if args.quick else 10)
            print(f"commits: {c['sync_per_s']:,.0f}/s synchronous, "
                  f"{c['async_per_s']:,.0f}/s asynchronous")
            rows.append(("offset commits (async)", f"{c['async_per_s']:,.0f}/s", ">= 5,000/s",
                         c["async_per_s"] >= 5000))
        if "load" in cases:
            # A broker of its own: __consumer_offsets holds just these offsets, not the
            # commits case's hundred thousand superseded ones (compaction has not run).
            broker.stop()
            broker = BenchBroker(tmp / "load-data", "default", settings=BROKER_SETTINGS).start()
            groups = 20 if args.quick else 100
            load = bench_load(broker, groups, 1000)
            print(f"load: the coordinator loaded {load['loaded_offsets']:,} offsets in "
                  f"{load['load_s']:.2f} s (its log); all {load['offsets']:,} fetchable by a "
                  f"client {load['fetchable_s']:.2f} s after the broker's start "
                  f"({load['start_s']:.2f} s to start)")
            rows.append((f"load of {load['offsets']:,} offsets", f"{load['load_s']:.2f} s",
                         "< 2 s", load["load_s"] < 2))
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for name, figure, target, ok in rows:
        print(f"{name:<28} {figure:>16}   target {target:<10} {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
