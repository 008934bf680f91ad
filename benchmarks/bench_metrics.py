"""What watching a big broker costs its event loop: a /metrics scrape and a console
history sample, over fakes of a broker's state with the real collectors.

    .venv/bin/python benchmarks/bench_metrics.py [--partitions 1000,10000] [--repeat 5]

For each size: the synchronous exposition() (prometheus_client's collect, then the text:
all of it holds the loop) as the baseline, then exposition_async() as the HTTP listener
runs it, with a ticker on the same loop measuring the longest time the loop was held;
the ratio is the longest hold against the baseline's. Then one MetricsHistory sample with
as many topics moving, against the sampling interval (the share of the loop it takes).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from types import SimpleNamespace
from typing import Any

from odradek.console.history import MetricsHistory
from odradek.metrics import stats as s
from odradek.metrics.broker_metrics import BrokerMetrics

GROUPS_PER_1000 = 5  # consumer groups, each committing a tenth of the partitions
TOPIC_PARTITIONS = 10


def fake_server(partitions: int) -> SimpleNamespace:
    """The state the collectors read: leaders of one replica each, with a segment, and
    groups with committed offsets; plain objects, as tests/test_metrics.py's fakes."""
    segment = SimpleNamespace(size=1 << 20)
    tps = [(f"topic-{i // TOPIC_PARTITIONS:05d}", i % TOPIC_PARTITIONS)
           for i in range(partitions)]

    def partition(tp: tuple[str, int]) -> SimpleNamespace:
        log = SimpleNamespace(config=SimpleNamespace(min_insync_replicas=1),
                              segments=lambda: [segment], log_start_offset=0,
                              log_end_offset=1000)
        return SimpleNamespace(topic=tp[0], index=tp[1], tp=tp, is_leader=True, isr=[1],
                               replicas=[1], high_watermark=1000, log=log)

    nothing = SimpleNamespace(watchers=lambda: [])
    rm = SimpleNamespace(partitions={tp: partition(tp) for tp in tps},
                         offline_partitions=set(), isr_shrinks=0, isr_expands=0,
                         purgatory=nothing, produce_purgatory=nothing)
    groups = {}
    for g in range(max(1, partitions * GROUPS_PER_1000 // 1000)):
        offsets = {tp: SimpleNamespace(offset=900) for tp in tps[g::10]}
        groups[f"group-{g}"] = SimpleNamespace(group_id=f"group-{g}", state="Stable",
                                               members={"m": None}, offsets=offsets)
    coordinator = SimpleNamespace(manager=SimpleNamespace(groups=groups))
    return SimpleNamespace(replica_manager=rm, metadata_cache=None, kafka_controller=None,
                           admin=None, socket_server=None, group_coordinator=coordinator)


def counted(metrics: BrokerMetrics, partitions: int) -> None:
    for i in range(0, partitions, TOPIC_PARTITIONS):
        counters = metrics.topic_stats.counters(f"topic-{i // TOPIC_PARTITIONS:05d}")
        counters[s.BYTES_IN] += 1000
        counters[s.MESSAGES_IN] += 10
    for name in ("Produce", "FetchConsumer", "Metadata", "ApiVersions"):
        metrics.requests.record(name, 9, 1_000_000)


async def longest_hold(work: Any) -> tuple[float, float]:
    """(wall time of `work`, the longest the loop went without running the ticker)."""
    longest = 0.0
    done = False

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    began = time.perf_counter()
    await work
    wall = time.perf_counter() - began
    done = True
    await task
    return wall, longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1000,10000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("/metrics scrape, on the loop: best of", args.repeat)
    print(f"{'partitions':>10} {'lines':>7} {'sync: held':>11} {'async: wall':>12} "
          f"{'async: longest hold':>20} {'ratio':>7}")
    for partitions in (int(p) for p in args.partitions.split(",")):
        metrics = BrokerMetrics(fake_server(partitions))
        counted(metrics, partitions)
        body, _ = metrics.exposition(None)
        lines = body.count(b"\n")
        sync = min(_timed(lambda m=metrics: m.exposition(None)) for _ in range(args.repeat))
        runs = [asyncio.run(longest_hold(metrics.exposition_async(None)))
                for _ in range(args.repeat)]
        wall = min(r[0] for r in runs)
        hold = min(r[1] for r in runs)
        print(f"{partitions:>10,} {lines:>7,} {sync * 1000:>9.1f} ms {wall * 1000:>9.1f} ms "
              f"{hold * 1000:>17.1f} ms {hold / sync:>6.2f}x")
    print()
    print("console history sample (every 5 s by default), every topic moving: median of",
          args.repeat)
    print(f"{'topics':>10} {'sample':>10} {'share of 5 s':>13}")
    for partitions in (int(p) for p in args.partitions.split(",")):
        topics = partitions // TOPIC_PARTITIONS
        stats, requests = s.BrokerTopicStats(), s.RequestMetrics()
        history = MetricsHistory(stats, requests)
        times = []
        for _ in range(args.repeat + 1):
            for i in range(topics):
                stats.counters(f"topic-{i:05d}")[s.BYTES_IN] += 100
            requests.record("Produce", 9, 1_000_000)
            began = time.perf_counter()
            asyncio.run(history.sample())
            times.append(time.perf_counter() - began)
        sample = statistics.median(times[1:])  # the first only sets the base
        print(f"{topics:>10,} {sample * 1000:>7.2f} ms {sample / 5 * 100:>12.3f}%")


def _timed(call: Any) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


if __name__ == "__main__":
    main()
