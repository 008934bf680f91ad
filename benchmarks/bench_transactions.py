"""Transactions: transactional produce against the idempotent producer, and read_committed
consume against read_uncommitted, with confluent-kafka (librdkafka) in the same run.

Run: .venv/bin/python benchmarks/bench_transactions.py [--quick] [--seconds S] [--rounds N]
     [--consume-rounds N] [--cprofile] (a full run takes about 1.5-2 minutes; --quick
     about 40 s)

The script starts its own broker (benchmarks/bench_broker.py's BenchBroker: `python -m
odradek serve` on 127.0.0.1, a free port, its data under .bench-tmp/, removed at the end)
and runs each client in its own process, client and broker sharing this machine's cores:

1. produce: records of 1 KiB with no key to a topic of 4 partitions per case, for --seconds
   each, acks=all, linger.ms=5, batch.size=1 MiB (bench_broker's producer settings):
   - idempotent: enable.idempotence=true, no transactions;
   - txn-100, txn-1000: a transactional producer that loops begin_transaction, 100 (or
     1,000) produce() calls, commit_transaction. Only whole committed transactions count.
     Commit latency is the time from the last produce() to the end of commit_transaction():
     flush() of the transaction's records still in flight, then commit_transaction()
     (EndTxn; shown alone too).
   The three cases alternate, --rounds times over; records/s counts from the first
   produce() to the last acknowledgement (flush or commit), and every record is checked
   against the topic's high watermark (records plus one marker per partition written to
   in each transaction; the consume cases then read every committed record back).
2. consume: a fresh consumer assigns the 4 partitions of the last txn-1000 topic at offset
   0 and reads every record, with isolation.level read_uncommitted and read_committed in
   turn, --consume-rounds times each (3; 1 with --quick), with large fetches allowed
   (bench_broker's consume settings). Both see the same records: librdkafka drops
   control batches in either mode.

Each case prints the broker's and the clients' CPU in cores over its wall time. --cprofile
runs the broker under cProfile and prints where its time went (all cases together).
Targets (issue 16): txn-1000 >= 0.8x idempotent records/s; read_committed >= 0.9x
read_uncommitted records/s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_broker import (
    BENCH_ROOT,
    MB,
    MIB,
    PARTITIONS,
    PRODUCER_SETTINGS,
    Admin,
    BenchBroker,
    CpuWindow,
    cpu_model,
    filesystem_of,
    percentiles,
    print_cprofile,
    run_consumer,
    run_workers,
    self_cpu_s,
    spawn_context,
    wait_for_quiet,
)

SIZE = 1024
PRODUCE_CASES = {"idempotent": 0, "txn-100": 100, "txn-1000": 1000}
TARGET_TXN_RATIO = 0.8      # txn-1000 / idempotent records/s
TARGET_COMMITTED_RATIO = 0.9  # read_committed / read_uncommitted records/s
FETCH_SETTINGS: dict[str, Any] = {
    "fetch.max.bytes": 64 * MIB, "max.partition.fetch.bytes": 8 * MIB,
    # librdkafka's local queue must not be what limits the consumer (bench_broker.py).
    "queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576,
}


# ---- worker processes ---------------------------------------------------------------------


def run_txn_producer(bootstrap: str, topic: str, per_txn: int, seconds: float,
                     start_event: Any) -> dict[str, Any]:
    """Idempotent (per_txn == 0) or transactional produce of SIZE-byte records for
    `seconds`; the records acknowledged (committed), the commit latencies in ms."""
    from confluent_kafka import KafkaError, Producer

    failed = [0]
    last_error: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed[0] += 1
            last_error[:] = [str(err)]

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "all",
                              "enable.idempotence": True, **PRODUCER_SETTINGS,
                              "on_delivery": on_delivery, "log_level": 3}
    if per_txn:
        config["transactional.id"] = f"bench-{topic}"
    producer = Producer(config)
    producer.list_topics(topic, timeout=30)  # connected, metadata known: not timed
    if per_txn:
        producer.init_transactions(30)
    value = os.urandom(SIZE)
    produce, poll = producer.produce, producer.poll
    commits: list[float] = []  # flush + commit_transaction, ms
    end_txns: list[float] = []  # commit_transaction alone, after the flush
    start_event.wait()
    cpu0 = self_cpu_s()
    start = time.monotonic()
    deadline = start + seconds
    n = 0
    if per_txn:
        while time.monotonic() < deadline:
            producer.begin_transaction()
            for _ in range(per_txn):
                while True:
                    try:
                        produce(topic, value)
                        break
                    except BufferError:
                        poll(0.001)
            # commit_transaction() would flush too; flushing first splits its time into
            # the records' acknowledgements and EndTxn with its markers.
            t0 = time.monotonic()
            producer.flush(60)
            t1 = time.monotonic()
            producer.commit_transaction(60)
            t2 = time.monotonic()
            commits.append((t2 - t0) * 1000)
            end_txns.append((t2 - t1) * 1000)
            n += per_txn
        sent = end = time.monotonic()
        left = 0
    else:
        while True:
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
            "sent": sent, "end": end, "cpu": self_cpu_s() - cpu0, "commits": commits,
            "end_txns": end_txns, "transactions": len(commits),
            "last_error": last_error[0] if last_error else None}


# ---- cases --------------------------------------------------------------------------------


@dataclass
class Result:
    case: str
    records: int
    seconds: float
    broker_cores: float
    client_cores: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.rps * SIZE / MB


class Bench:
    def __init__(self, broker: BenchBroker, quiet_wait: float) -> None:
        self.ctx = spawn_context()
        self.broker = broker
        self.admin = Admin(broker.bootstrap)
        self.quiet_wait = quiet_wait
        self.last_txn_topic: tuple[str, int] | None = None

    def quiet(self, case: str) -> None:
        if self.quiet_wait <= 0:
            return
        load = wait_for_quiet(self.quiet_wait)
        if load >= 0.25:
            print(f"  ({case}: the machine is busy, {load:.2f} cores used by others)")

    def produce(self, case: str, round_no: int, seconds: float) -> Result:
        per_txn = PRODUCE_CASES[case]
        topic = f"bench-{case}-{round_no}"
        self.admin.create_topic(topic, PARTITIONS)
        os.sync()  # earlier cases' dirty pages written back first
        self.quiet(case)
        start_event = self.ctx.Event()
        window = CpuWindow(self.broker.pid)

        def go() -> None:  # once the producer has connected and initialized
            time.sleep(1.5)
            window.start()
            start_event.set()

        [r] = run_workers(self.ctx, [(run_txn_producer, (self.broker.bootstrap, topic,
                                                          per_txn, seconds, start_event))],
                          on_started=go)
        window.stop()
        stored = self.admin.end_offsets(topic)
        # One marker per partition each transaction wrote to (librdkafka's sticky
        # partitioner may keep a small transaction on fewer than all of them).
        markers = stored - r["records"]
        low, high = (r["transactions"], r["transactions"] * PARTITIONS) if per_txn else (0, 0)
        if r["failed"] or not low <= markers <= high:
            raise RuntimeError(f"{case}: {r['records']:,} records acknowledged, "
                               f"{r['failed']:,} failed ({r['last_error']}), {stored:,} "
                               f"offsets in the topic, {r['transactions']:,} transactions")
        broker, client, _ = window.cores(r["cpu"])
        extra: dict[str, Any] = {"transactions": r["transactions"]}
        if per_txn:
            extra["commit"] = percentiles(r["commits"])
            extra["end_txn"] = percentiles(r["end_txns"])
            if case == "txn-1000":
                self.last_txn_topic = (topic, r["records"])
        return Result(f"{case}", r["records"], r["end"] - r["start"], broker, client, extra)

    def consume(self, isolation: str) -> Result:
        assert self.last_txn_topic is not None
        topic, expected = self.last_txn_topic
        self.quiet(isolation)
        window = CpuWindow(self.broker.pid).start()
        [r] = run_workers(self.ctx, [(run_consumer, (
            self.broker.bootstrap, topic, expected, SIZE,
            {**FETCH_SETTINGS, "isolation.level": isolation}))])
        window.stop()
        if r["records"] != expected:
            raise RuntimeError(f"{isolation}: {r['records']:,} records read, "
                               f"{expected:,} committed")
        broker, client, _ = window.cores(r["cpu"])
        return Result(isolation, r["records"], r["end"] - r["start"], broker, client,
                      {"first_record_s": r["first"] - r["start"]})

    def close(self) -> None:
        self.admin.close()


# ---- report -------------------------------------------------------------------------------


def progress(r: Result) -> None:
    commit = r.extra.get("commit")
    end = r.extra.get("end_txn")
    latency = (f", commit p50 {commit['p50']:.1f} ms p99 {commit['p99']:.1f} ms "
               f"(EndTxn alone p50 {end['p50']:.1f} p99 {end['p99']:.1f}; "
               f"{commit['n']:,} commits)") if commit and end else ""
    print(f"  {r.case:17} {r.rps:>10,.0f} records/s {r.mbps:>7.1f} MB/s over "
          f"{r.seconds:5.1f} s{latency}; CPU broker {r.broker_cores:.2f} / client "
          f"{r.client_cores:.2f} cores", flush=True)


def best(results: list[Result], case: str) -> Result:
    return max((r for r in results if r.case == case), key=lambda r: r.rps)


def total_rps(results: list[Result], case: str) -> float:
    rs = [r for r in results if r.case == case]
    return sum(r.records for r in rs) / sum(r.seconds for r in rs)


def report(produced: list[Result], consumed: list[Result]) -> None:
    print("\nproduce, 1 KiB records, acks=all (all rounds together):")
    print(f"  {'case':12} {'records/s':>10} {'MB/s':>7} {'commit p50':>11} {'commit p99':>11}"
          f" {'broker cores':>13} {'x idempotent':>13}")
    base = total_rps(produced, "idempotent")
    for case in PRODUCE_CASES:
        rs = [r for r in produced if r.case == case]
        rps = total_rps(produced, case)
        commits = [c for r in rs for c in ([] if "commit" not in r.extra else [r.extra["commit"]])]
        p50 = f"{statistics.median(c['p50'] for c in commits):.1f} ms" if commits else "-"
        p99 = f"{max(c['p99'] for c in commits):.1f} ms" if commits else "-"
        cores = statistics.mean(r.broker_cores for r in rs)
        print(f"  {case:12} {rps:>10,.0f} {rps * SIZE / MB:>7.1f} {p50:>11} {p99:>11} "
              f"{cores:>13.2f} {rps / base:>13.2f}")
    print("\nconsume of the last txn-1000 topic (best run of each):")
    unc, com = best(consumed, "read_uncommitted"), best(consumed, "read_committed")
    for r in (unc, com):
        print(f"  {r.case:17} {r.rps:>10,.0f} records/s {r.mbps:>7.1f} MB/s "
              f"(runs: {', '.join(f'{x.rps:,.0f}' for x in consumed if x.case == r.case)})")
    txn_ratio = total_rps(produced, "txn-1000") / base
    read_ratio = com.rps / unc.rps
    print("\ntargets:")
    print(f"  txn-1000 / idempotent        {txn_ratio:.2f}  (>= {TARGET_TXN_RATIO}: "
          f"{'met' if txn_ratio >= TARGET_TXN_RATIO else 'MISSED'})")
    print(f"  txn-100 / idempotent         {total_rps(produced, 'txn-100') / base:.2f}  "
          f"(no target)")
    print(f"  read_committed / uncommitted {read_ratio:.2f}  (>= {TARGET_COMMITTED_RATIO}: "
          f"{'met' if read_ratio >= TARGET_COMMITTED_RATIO else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="one round of 4 s per produce case (about 40 s in all)")
    parser.add_argument("--seconds", type=float, help="per produce case (default 8)")
    parser.add_argument("--rounds", type=int, help="rounds of the cases (default 2)")
    parser.add_argument("--consume-rounds", type=int,
                        help="reads of the topic per isolation level (default 3)")
    parser.add_argument("--quiet-wait", type=float, default=10.0,
                        help="wait up to this long before each case for other load to end")
    parser.add_argument("--cprofile", action="store_true",
                        help="run the broker under cProfile, print its top functions")
    args = parser.parse_args()
    seconds = args.seconds or (4.0 if args.quick else 8.0)
    rounds = args.rounds or (1 if args.quick else 2)
    BENCH_ROOT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-transactions-", dir=BENCH_ROOT))
    profile = tmp / "broker.prof" if args.cprofile else None
    print(f"machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}"
          f", data on {filesystem_of(tmp)}")
    print(f"{rounds} round(s) of {seconds:g} s per produce case; 1 KiB records, "
          f"{PARTITIONS} partitions{', broker under cProfile' if profile else ''}", flush=True)
    broker = BenchBroker(tmp / "data", "default", profile).start()
    bench: Bench | None = None
    try:
        bench = Bench(broker, args.quiet_wait)
        produced: list[Result] = []
        consumed: list[Result] = []
        for round_no in range(rounds):
            for case in PRODUCE_CASES:
                produced.append(bench.produce(case, round_no, seconds))
                progress(produced[-1])
        for _ in range(args.consume_rounds or (1 if args.quick else 3)):
            for isolation in ("read_uncommitted", "read_committed"):
                consumed.append(bench.consume(isolation))
                progress(consumed[-1])
        report(produced, consumed)
    finally:
        if bench is not None:
            bench.close()
        broker.stop()
        if profile is not None:
            print_cprofile(profile)
        if "Traceback" in broker.log_text():
            print("\nthe broker logged a traceback:\n" + broker.log_text()[-4000:],
                  file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # left when other benchmarks use it
            BENCH_ROOT.rmdir()


if __name__ == "__main__":
    main()
