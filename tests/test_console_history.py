"""MetricsHistory, the console's ring buffer of recent samples: rates from the broker's
counters over an injected clock, latency percentiles from histogram deltas, and the
series the charts draw."""

from __future__ import annotations

import asyncio

import pytest

from odradek.console.history import MetricsHistory, quantile, total_lag
from odradek.metrics import stats as s

BOUNDS = (1.0, 10.0, 100.0)


def test_quantile_interpolates_inside_the_bucket() -> None:
    # 10 observations in (1, 10], none elsewhere: the median is halfway through it.
    assert quantile(0.5, BOUNDS, [0, 10, 0, 0]) == pytest.approx(5.5)
    assert quantile(0.99, BOUNDS, [0, 10, 0, 0]) == pytest.approx(9.91)
    # 50 below 1 ms, 50 in (10, 100]: p50 is the top of the first, p99 near 100.
    assert quantile(0.5, BOUNDS, [50, 0, 50, 0]) == pytest.approx(1.0)
    assert quantile(0.99, BOUNDS, [50, 0, 50, 0]) == pytest.approx(98.2)
    assert quantile(0.5, BOUNDS, [0, 0, 0, 4]) == 100.0  # +Inf: the last finite bound
    assert quantile(0.5, BOUNDS, [0, 0, 0, 0]) is None


def test_total_lag() -> None:
    committed = {("t", 0): 5, ("t", 1): 10, ("u", 0): 3}
    assert total_lag(committed, {("t", 0): 8, ("t", 1): 10}) == 3  # u-0: not known
    assert total_lag(committed, {("t", 0): 4}) == 0  # never below 0 (a truncated log)
    assert total_lag(committed, {}) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_samples_are_rates_since_the_previous_one() -> None:
    topics, requests, clock = s.BrokerTopicStats(), s.RequestMetrics(BOUNDS), Clock()
    lags = iter([{"g": 7}, {"g": 4}, {"g": None}, {"g": 2}])

    async def lag() -> dict[str, int | None]:
        return next(lags)

    history = MetricsHistory(topics, requests, lag=lag, interval_s=5, retention_s=10,
                             clock=clock)

    async def run() -> None:
        assert await history.sample() is None  # the first sets the base
        counters = topics.counters("orders")
        counters[s.BYTES_IN] += 5_000
        counters[s.MESSAGES_IN] += 50
        counters[s.BYTES_OUT] += 10_000
        topics.counters("idle")
        for _ in range(10):
            requests.record("Produce", 9, 5_000_000)  # 5 ms: in (1, 10]
        clock.now += 5
        first = await history.sample()
        assert first is not None and first.t_ms == 1_005_000
        assert first.topics == {"orders": (1_000.0, 2_000.0, 10.0)}  # idle: not kept
        assert first.requests == {"Produce": 2.0}
        assert first.latency_ms["Produce"][0] == pytest.approx(5.5)
        assert first.lag == {"g": 4}
        clock.now += 5  # nothing moved
        assert (await history.sample()) is not None
        clock.now += 5  # the ring holds 10 s / 5 s = 2 samples: the first goes
        await history.sample()

    asyncio.run(run())
    assert len(history.samples) == 2
    series = history.broker_series()
    assert series["t"] == [1_010_000, 1_015_000]
    assert series["bytes_in"] == [0, 0]
    # Only what moved within the hour kept: the Produce requests went with the first.
    assert series["requests"] == {} and series["latency_ms"] == {}
    assert history.group_series("g") == {"interval_s": 5, "t": [1_010_000, 1_015_000],
                                         "lag": [None, 2]}


def test_series_of_a_topic_and_a_group() -> None:
    topics, requests, clock = s.BrokerTopicStats(), s.RequestMetrics(BOUNDS), Clock()
    values = iter([{}, {"g": 3}, {}])

    async def lag() -> dict[str, int | None]:
        return next(values)

    history = MetricsHistory(topics, requests, lag=lag, interval_s=1, clock=clock)

    async def run() -> None:
        await history.sample()
        topics.counters("t")[s.BYTES_IN] += 100
        clock.now += 2
        await history.sample()
        clock.now += 2
        await history.sample()

    asyncio.run(run())
    assert history.topic_series("t") == {"interval_s": 1, "t": [1_002_000, 1_004_000],
                                         "bytes_in": [50.0, 0.0], "bytes_out": [0.0, 0.0],
                                         "messages_in": [0.0, 0.0]}
    # A group's series holds only the samples that measured it.
    assert history.group_series("g") == {"interval_s": 1, "t": [1_002_000], "lag": [3]}
    assert history.group_series("other") == {"interval_s": 1, "t": [], "lag": []}
