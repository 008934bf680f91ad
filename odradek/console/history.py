"""MetricsHistory: the broker's recent history for the console's charts.

A ring buffer of the last hour (by default), one sample every few seconds, each made from
the counters the request paths already keep (odradek/metrics/stats.py): bytes and records
in and out per topic, request rates and latency percentiles per API, and the lag of each
consumer group this broker coordinates. A sample holds rates, not counters, and only the
topics that moved in its interval, so a broker with many idle topics keeps little.

Sampling reads plain ints on the event loop, a few microseconds a topic; the group lag
asks the leaders of partitions not held here for their high watermarks (one ListOffsets
per leader) at most once a sample.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from odradek.metrics import stats as s

log = logging.getLogger(__name__)

TopicRates = tuple[float, float, float]  # bytes in, bytes out, records in: per second
# group id -> {(topic, partition): committed offset}, and the high watermarks it needs
LagSource = Callable[[], Awaitable[dict[str, int | None]]]


@dataclass(slots=True)
class Sample:
    t_ms: int
    topics: dict[str, TopicRates] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)  # API name -> per second
    latency_ms: dict[str, tuple[float, float]] = field(default_factory=dict)  # p50, p99
    lag: dict[str, int | None] = field(default_factory=dict)  # group id -> total lag


def quantile(q: float, bounds_ms: tuple[float, ...], counts: list[int]) -> float | None:
    """The q-quantile of a histogram's bucket counts (not cumulative; one more than the
    bounds, the last for +Inf), interpolated linearly inside its bucket as Prometheus'
    histogram_quantile does; None for no observations."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    running = 0
    for i, count in enumerate(counts):
        if running + count >= rank and count > 0:
            if i >= len(bounds_ms):
                return bounds_ms[-1]  # in +Inf: the highest finite bound
            lower = bounds_ms[i - 1] if i > 0 else 0.0
            return lower + (bounds_ms[i] - lower) * (rank - running) / count
        running += count
    return bounds_ms[-1]


class MetricsHistory:
    def __init__(self, topic_stats: s.BrokerTopicStats, requests: s.RequestMetrics, *,
                 lag: LagSource | None = None, interval_s: float = 5.0,
                 retention_s: float = 3600.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.topic_stats = topic_stats
        self.requests = requests
        self.lag = lag
        self.interval_s = interval_s
        self.clock = clock  # wall time in seconds (injected by tests)
        self.samples: deque[Sample] = deque(maxlen=max(1, int(retention_s / interval_s)))
        self._last: tuple[float, dict[str, list[int]],
                          dict[str, tuple[dict[int, int], list[int], int]]] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:  # a sample lost, never the sampler
                log.exception("console: a history sample failed")
            await asyncio.sleep(self.interval_s)

    async def sample(self) -> Sample | None:
        """Takes a sample: rates since the previous one (the first only sets the base)."""
        now = self.clock()
        topics = self.topic_stats.snapshot()
        requests = self.requests.snapshot()
        last, self._last = self._last, (now, topics, requests)
        lag = await self.lag() if self.lag is not None else {}
        if last is None:
            return None
        then, last_topics, last_requests = last
        elapsed = now - then
        if elapsed <= 0:
            return None
        sample = Sample(int(now * 1000), lag=lag)
        for topic, values in topics.items():
            before = last_topics.get(topic, [0] * s.TOPIC_COUNTERS)
            moved = (values[s.BYTES_IN] - before[s.BYTES_IN],
                     values[s.BYTES_OUT] - before[s.BYTES_OUT],
                     values[s.MESSAGES_IN] - before[s.MESSAGES_IN])
            if any(moved):
                sample.topics[topic] = (moved[0] / elapsed, moved[1] / elapsed,
                                        moved[2] / elapsed)
        for key, (versions, buckets, _) in requests.items():
            old_versions, old_buckets, _ = last_requests.get(key, ({}, [0] * len(buckets), 0))
            count = sum(versions.values()) - sum(old_versions.values())
            if count <= 0:
                continue
            name = str(key)  # Kafka's request name (FetchConsumer, FetchFollower...)
            sample.requests[name] = count / elapsed
            delta = [b - a for a, b in zip(old_buckets, buckets, strict=True)]
            p50 = quantile(0.5, self.requests.bounds_ms, delta)
            p99 = quantile(0.99, self.requests.bounds_ms, delta)
            if p50 is not None and p99 is not None:
                sample.latency_ms[name] = (p50, p99)
        self.samples.append(sample)
        return sample

    # ---- series for the charts -------------------------------------------------------------

    def broker_series(self) -> dict[str, object]:
        samples = list(self.samples)
        apis = sorted({name for sample in samples for name in sample.requests})
        latency_apis = sorted({name for sample in samples for name in sample.latency_ms})

        def total(index: int) -> list[float]:
            return [sum(rates[index] for rates in sample.topics.values()) for sample in samples]
        return {
            "interval_s": self.interval_s,
            "t": [sample.t_ms for sample in samples],
            "bytes_in": total(0), "bytes_out": total(1), "messages_in": total(2),
            "requests": {api: [sample.requests.get(api, 0.0) for sample in samples]
                         for api in apis},
            "latency_ms": {api: {
                "p50": [_at(sample.latency_ms.get(api), 0) for sample in samples],
                "p99": [_at(sample.latency_ms.get(api), 1) for sample in samples]}
                for api in latency_apis},
        }

    def topic_series(self, topic: str) -> dict[str, object]:
        samples = list(self.samples)
        zero = (0.0, 0.0, 0.0)
        return {"interval_s": self.interval_s, "t": [sample.t_ms for sample in samples],
                "bytes_in": [sample.topics.get(topic, zero)[0] for sample in samples],
                "bytes_out": [sample.topics.get(topic, zero)[1] for sample in samples],
                "messages_in": [sample.topics.get(topic, zero)[2] for sample in samples]}

    def group_series(self, group_id: str) -> dict[str, object]:
        samples = [sample for sample in self.samples if group_id in sample.lag]
        return {"interval_s": self.interval_s, "t": [sample.t_ms for sample in samples],
                "lag": [sample.lag[group_id] for sample in samples]}


def _at(pair: tuple[float, float] | None, index: int) -> float | None:
    return None if pair is None else round(pair[index], 3)


def total_lag(committed: dict[tuple[str, int], int],
              high_watermarks: dict[tuple[str, int], int]) -> int | None:
    """A group's lag: the sum over its partitions of high watermark less committed offset;
    None when no partition's high watermark is known."""
    lags = [max(0, high_watermarks[tp] - offset) for tp, offset in committed.items()
            if tp in high_watermarks]
    return sum(lags) if lags else None
