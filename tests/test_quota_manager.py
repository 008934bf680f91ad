"""The client quota managers (odradek/server/quota_manager.py) on an injected clock: Kafka's
Rate over quota.window.num samples, the precedence of quota entities, and the throttle
times of Kafka's QuotaUtils.throttleTime; request_percentage's RequestTimer (the event
loop's time running a request, not its waits); controller_mutation_rate's TokenBucket and
strict and permissive quotas, as Kafka's own tests of them."""

from __future__ import annotations

import asyncio
import math

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.server.quota_manager import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    UNBOUNDED_MUTATIONS,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
    QuotaManagers,
    Rate,
    RequestTimer,
    ThrottlingQuotaExceeded,
    TokenBucket,
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


def test_quota_managers_load_controller_mutation_rates_with_their_own_window() -> None:
    managers = QuotaManagers(samples=3, window_s=2, controller_samples=5,
                             controller_window_s=4)
    managers.load({entity(client_id=None): {"controller_mutation_rate": "2.5"}})
    assert managers.controller_mutation.quota("u", "c") == 2.5
    assert managers.controller_mutation.tokens("u", "c") == 2.5 * 5 * 4  # a full bucket
    assert managers.request.quota("u", "c") is None


def test_a_quota_of_zero_throttles_for_the_longest_time() -> None:
    manager = ClientQuotaManager(PRODUCER_BYTE_RATE, clock=Clock())
    manager.set_quota(entity(client_id="c"), 0.0)
    assert manager.record("u", "c", 1) == 2**31 - 1


# ---- request_percentage: RequestTimer --------------------------------------------------


class NanoClock:
    def __init__(self) -> None:
        self.ns = 10_000_000

    def __call__(self) -> int:
        return self.ns


@pytest.fixture
def nanos(monkeypatch: pytest.MonkeyPatch) -> NanoClock:
    clock = NanoClock()
    monkeypatch.setattr(RequestTimer, "clock_ns", staticmethod(clock))
    return clock


def request_manager(bound: float | None = None) -> ClientRequestQuotaManager:
    manager = ClientRequestQuotaManager(clock=Clock())
    manager.set_quota(entity(client_id=None), 1000.0)  # every client id's time recorded
    if bound is not None:
        manager.set_quota(entity(client_id="c"), bound)
    return manager


def test_a_request_counts_the_event_loops_time_running_it_not_its_waits(
        nanos: NanoClock) -> None:
    manager = request_manager(0.055)
    # Its frame was taken up 1 ms ago (decoding); its handler works 2 ms, waits while
    # another request takes 50 ms, then works 3 ms more.
    timer = manager.timer("u", "c", started_ns=nanos.ns - 1_000_000)
    gate = asyncio.Event()

    async def handler() -> str:
        nanos.ns += 2_000_000
        await gate.wait()
        nanos.ns += 3_000_000
        return "done"

    async def other_request() -> None:
        await asyncio.sleep(0)
        nanos.ns += 50_000_000
        gate.set()

    async def scenario() -> str:
        other = asyncio.ensure_future(other_request())
        result = await timer.run(handler())
        await other
        return result

    assert asyncio.run(scenario()) == "done"
    nanos.ns += 7_000_000  # the timer runs until paused: this counts too
    timer.pause()
    assert timer.elapsed_ns() == 13_000_000
    # 13 ms: 1.3 percent of a thread for a second, over Kafka's 10 s window: 0.13%;
    # Kafka's throttle time, 13.6 s, is capped at one sample window.
    throttle = timer.record()
    assert throttle_time_ms(0.13, 0.055, 10_000) == 13_636
    assert throttle == 1000
    assert manager.rate("u", "c") == pytest.approx(0.13)
    # Its response's encoding counts too, but what comes after the first recording does
    # not throttle it (Kafka's network thread time).
    timer.encoded(2_000_000)
    assert manager.rate("u", "c") == pytest.approx(0.15)
    assert timer.record() == 0


def test_request_throttle_times_follow_kafkas_formula_under_the_window(
        nanos: NanoClock) -> None:
    manager = request_manager(0.1)
    for _ in range(10):  # 1 ms each: 0.1% over the 10 s window after ten
        timer = manager.timer("u", "c", nanos.ns)
        nanos.ns += 1_000_000
        timer.pause()
        assert timer.record() == 0
    timer = manager.timer("u", "c", nanos.ns)
    nanos.ns += 500_000
    timer.pause()
    assert timer.record() == throttle_time_ms(0.105, 0.1, 10_000) == 500
    # Other client ids have their own rate; <default> here is generous.
    other = manager.timer("u", "other", nanos.ns)
    nanos.ns += 5_000_000
    assert other.record() == 0


def test_exempt_requests_are_recorded_apart_and_never_throttled(nanos: NanoClock) -> None:
    manager = request_manager(0.001)
    timer = manager.timer("u", "c", nanos.ns)
    nanos.ns += 100_000_000
    timer.pause()
    assert timer.record(exempt=True) == 0
    timer.encoded(10_000_000)
    assert manager.rate("u", "c") == 0
    assert manager.exempt_rate() == pytest.approx(11.0 / 10)
    # Without request quotas nothing is recorded, as in Kafka.
    idle = ClientRequestQuotaManager(clock=Clock())
    timer = idle.timer("u", "c", nanos.ns)
    nanos.ns += 100_000_000
    assert timer.record(exempt=True) == 0 and timer.record() == 0
    assert idle.exempt_rate() == 0


def test_a_timed_handler_is_cancelled_and_fails_as_when_awaited(nanos: NanoClock) -> None:
    manager = request_manager()
    cleaned = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(True)

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad request")

    async def scenario() -> None:
        task = asyncio.ensure_future(manager.timer("u", "c", nanos.ns).run(forever()))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(ValueError, match="bad request"):
            await manager.timer("u", "c", nanos.ns).run(failing())

    asyncio.run(scenario())
    assert cleaned == [True]


# ---- controller_mutation_rate: TokenBucket and quotas ------------------------------------


def test_token_bucket_is_kafkas() -> None:
    bucket = TokenBucket()
    now = 1_700_000_000_000
    assert bucket.measure(10, 10, now) == 100  # full at first: rate x samples x window
    bucket.record(90, 10, 10, now)
    bucket.record(90, 10, 10, now)
    assert bucket.measure(10, 10, now) == -80
    assert bucket.measure(10, 10, now + 5000) == -30  # 10 tokens a second
    assert bucket.measure(10, 10, now + 60_000) == 100  # never more than the burst


def mutation_manager(rate: float = 10.0) -> tuple[ControllerMutationQuotaManager, Clock]:
    """Kafka's tests' settings: 10 samples of 1 s, a rate of 10: 100 tokens."""
    clock = Clock()
    manager = ControllerMutationQuotaManager(samples=10, window_s=1, clock=clock)
    manager.set_quota(entity(user="ANONYMOUS", client_id="test-client"), rate)
    return manager, clock


def test_strict_controller_mutation_quota_as_kafka() -> None:
    manager, clock = mutation_manager()
    quota = manager.new_quota_for("ANONYMOUS", "test-client", strict=True)
    quota.record(90)  # 10 left: taken
    assert quota.throttle_time_ms() == 0
    quota.record(90)  # -80: taken all the same, the bucket was not below zero
    assert quota.throttle_time_ms() == 0
    with pytest.raises(ThrottlingQuotaExceeded) as refused:
        quota.record(90)
    assert refused.value.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert str(refused.value) == "The throttling quota has been exceeded."
    assert refused.value.throttle_ms == quota.throttle_time_ms() == 8000
    clock.now += 5
    assert quota.throttle_time_ms() == 3000  # less the time since


def test_permissive_controller_mutation_quota_as_kafka() -> None:
    manager, clock = mutation_manager()
    quota = manager.new_quota_for("ANONYMOUS", "test-client", strict=False)
    quota.record(90)
    assert quota.throttle_time_ms() == 0
    quota.record(90)
    assert quota.throttle_time_ms() == 8000
    quota.record(90)  # taken, whatever the bucket
    assert quota.throttle_time_ms() == 17_000
    clock.now += 5
    assert quota.throttle_time_ms() == 12_000


def test_controller_mutation_quota_manager_as_kafka() -> None:
    manager, clock = mutation_manager()
    tags = ("ANONYMOUS", "test-client")
    now = lambda: int(clock.now * 1000)  # noqa: E731
    for _ in range(10):  # under the rate: never throttled
        assert manager.record_mutation(tags, 10, now(), strict=True) == 0
        clock.now += 1
    assert manager.record_mutation(tags, 110, now(), strict=True) == 0  # 100 - 110
    assert manager.record_mutation(tags, 110, now(), strict=True) == 1000  # refused
    clock.now += 1
    assert manager.record_mutation(tags, 110, now(), strict=True) == 0  # back to 0


def test_controller_mutation_quotas_follow_kafkas_precedence() -> None:
    manager = ControllerMutationQuotaManager(samples=10, window_s=1, clock=Clock())
    assert manager.new_quota_for("bob", "app", strict=True) is UNBOUNDED_MUTATIONS
    manager.set_quota(entity(user="bob"), 1.0)  # all of bob's client ids: one bucket
    one = manager.new_quota_for("bob", "one", strict=True)
    one.record(11)  # 10 tokens: taken below zero
    with pytest.raises(ThrottlingQuotaExceeded):
        manager.new_quota_for("bob", "two", strict=True).record(0)  # even for nothing
    assert manager.tokens("bob", "three") == -1
    # Others are not held by bob's quota; the broker without any quota is unbounded.
    manager.new_quota_for("alice", "one", strict=True).record(1000)
    manager.clear_quotas()
    assert manager.new_quota_for("bob", "one", strict=True) is UNBOUNDED_MUTATIONS
    UNBOUNDED_MUTATIONS.record(10**9)
    assert UNBOUNDED_MUTATIONS.throttle_time_ms() == 0
