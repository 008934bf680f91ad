"""The client quota managers (odradek/server/quota_manager.py) on an injected clock: Kafka's
Rate over quota.window.num samples, the precedence of quota entities, and the throttle
times of Kafka's QuotaUtils.throttleTime."""

from __future__ import annotations

import math

import pytest

from odradek.server.quota_manager import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    QuotaManagers,
    Rate,
    entity,
    throttle_time_ms,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def kafka_throttle(total: float, elapsed_ms: int, bound: float, samples: int = 11,
                   window_ms: int = 1000) -> int:
    """Kafka's formula written out: the rate over max(elapsed, (samples-1) windows)."""
    full = elapsed_ms // window_ms
    if full < samples - 1:
        elapsed_ms += (samples - 1 - full) * window_ms
    rate = total / (elapsed_ms / 1000)
    return max(0, math.floor((rate - bound) / bound * elapsed_ms + 0.5)) if rate > bound else 0


def test_rate_is_kafkas_windowed_sum_over_at_least_n_minus_1_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(1000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(100.0)
    rate.record(1000, 500)
    assert rate.measure(500) == pytest.approx(2000 / 10.5)
    # 15 s later every sample has expired: the rate is 0 again.
    assert rate.measure(15_500) == 0.0


def test_rate_after_more_than_n_windows_uses_the_time_elapsed() -> None:
    rate = Rate(samples=3, window_ms=1000)
    for t in range(0, 10_000, 100):  # 100 bytes every 100 ms: 1000 B/s
        rate.record(100, t)
    # Samples began at 7000, 8000, 9000 (the older ones replaced): 3000 bytes over the
    # 2.9 s since the oldest began.
    assert rate.window_size_ms(9_900) == 2_900
    assert rate.measure(9_900) == pytest.approx(3000 / 2.9)


def test_throttle_time_is_kafkas_formula() -> None:
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5_000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    clock = Clock()
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, clock=clock)
    manager.set_quota(entity(client_id="c"), 50.0)
    assert manager.record("ANONYMOUS", "c", 400) == 0  # 40 B/s over 10 s
    clock.now += 0.5
    # 1400 bytes over 10.5 s, against 50 B/s: (133.33 - 50) / 50 * 10500 = 17500 ms;
    # byte rate throttles are not bounded by the window (Kafka's ClientQuotaManager).
    assert manager.record("ANONYMOUS", "c", 1000) == kafka_throttle(1400, 500, 50) == 17_500


def test_request_percentage_throttle_is_bounded_by_the_window() -> None:
    clock = Clock()
    manager = ClientQuotaManager(REQUEST_PERCENTAGE, clock=clock)
    manager.set_quota(entity(user="alice"), 1.0)
    assert manager.record("alice", "x", 1000.0) == 1000


@pytest.mark.parametrize("samples,window_s", [(11, 1), (5, 2)])
def test_throttle_times_follow_kafka_over_a_steady_stream(samples: int, window_s: int) -> None:
    clock = Clock()
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples, window_s=window_s,
                                 clock=clock)
    manager.set_quota(entity(user=None), 1000.0)
    total = 0
    for step in range(8):
        total += 3000
        throttle = manager.record("bob", "app", 3000)
        elapsed = step * 300
        assert throttle == kafka_throttle(total, elapsed, 1000, samples, window_s * 1000)
        clock.now += 0.3


def test_precedence_of_quota_entities() -> None:
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE)
    ordered = [
        (entity(user="u", client_id="c"), 1.0),
        (entity(user="u", client_id=None), 2.0),
        (entity(user="u"), 3.0),
        (entity(user=None, client_id="c"), 4.0),
        (entity(user=None, client_id=None), 5.0),
        (entity(user=None), 6.0),
        (entity(client_id="c"), 7.0),
        (entity(client_id=None), 8.0),
    ]
    for on, value in ordered:
        manager.set_quota(on, value)
    # Each removed in turn reveals the next in Kafka's order.
    for on, value in ordered:
        assert manager.quota("u", "c") == value, on
        manager.set_quota(on, None)
    assert manager.quota("u", "c") is None
    assert not manager.enabled


def test_who_shares_a_rate() -> None:
    clock = Clock()
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, clock=clock)
    manager.set_quota(entity(user="alice"), 100.0)  # all of alice's client ids
    manager.set_quota(entity(client_id=None), 100.0)  # each other client id its own
    manager.record("alice", "one", 500)
    manager.record("alice", "two", 500)
    assert manager.rate("alice", "one") == manager.rate("alice", "two") == pytest.approx(100)
    manager.record("bob", "one", 500)
    manager.record("bob", "two", 200)
    assert manager.rate("bob", "one") == pytest.approx(50)
    assert manager.rate("bob", "two") == pytest.approx(20)
    assert manager.quota("bob", "two") == 100.0


def test_no_quota_records_nothing_and_unrecord_takes_back() -> None:
    clock = Clock()
    manager = ClientQuotaManager(CONSUMER_BYTE_RATE, clock=clock)
    assert manager.record("u", "c", 10**9) == 0
    assert manager.rate("u", "c") == 0
    assert manager.max_value_in_window("u", "c") == float("inf")
    manager.set_quota(entity(client_id="c"), 2048.0)
    assert manager.max_value_in_window("u", "c") == 2048.0 * 10  # 10 windows of 1 s
    assert manager.record("u", "c", 100_000) > 0
    manager.unrecord("u", "c", 100_000)
    assert manager.rate("u", "c") == 0
    assert manager.record("u", "c", 1000) == 0


def test_quota_managers_load_stored_configs() -> None:
    managers = QuotaManagers(samples=3, window_s=2)
    managers.load({entity(user="u"): {"producer_byte_rate": "1024",
                                      "request_percentage": "12.5"},
                   entity(client_id=None): {"consumer_byte_rate": "2048"}})
    assert managers.produce.quota("u", "c") == 1024.0
    assert managers.fetch.quota("u", "c") == 2048.0
    assert managers.request.quota("u", "c") == 12.5
    assert managers.produce.window_ms == 2000 and managers.produce.samples == 3
    managers.apply(entity(user="u"), None)
    assert managers.produce.quota("u", "c") is None
