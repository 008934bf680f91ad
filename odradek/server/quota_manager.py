"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-599): Kafka's quota managers, sans I/O.

A quota is set on an entity: a user, a client id, or both, each a name or <default>
(`None` here, null on the wire). A request of user U from client id C is held to the
first of these that sets the quota's key, as Kafka's DefaultQuotaCallback does:

    /config/users/U/clients/C, /config/users/U/clients/<default>, /config/users/U,
    /config/users/<default>/clients/C, /config/users/<default>/clients/<default>,
    /config/users/<default>, /config/clients/C, /config/clients/<default>

and clients that share the entity that matched share its rate (a user's quota is all of
the user's client ids'; a quota of <default> client ids is each client id's own).

Rates are Kafka's Rate over a SampledStat: quota.window.num samples of
quota.window.size.seconds each, the rate's window being the time since the oldest sample
began, at least (num - 1) windows. A value is recorded, then the rate checked; over the
bound, the throttle time is Kafka's QuotaUtils.throttleTime:
round((rate - bound) / bound * window_ms) — unbounded for the byte rates, at most one
sample window for request_percentage (ClientRequestQuotaManager).

request_percentage (KIP-124) is measured in percent of one thread's time, as Kafka's: a
request's time in nanoseconds x 100 / 10^9, over the rate's window. Kafka measures the
time in request handler threads and network threads; a broker here is one event loop,
and RequestTimer measures the event loop's wall time spent running the request: decoding
it, each step of its handler's coroutine (not the time it waits: on the disk in a
worker thread, on ZooKeeper, on replicas, in a long poll), and encoding its response.
Work done in worker threads (down-conversion, ZooKeeper calls) and the socket's reads and
writes are not counted.

controller_mutation_rate (KIP-599) is Kafka's ControllerMutationQuotaManager: partitions
created or deleted per second, over a TokenBucket of controller.quota.window.num x
controller.quota.window.size.seconds x the rate tokens. A strict quota (CreateTopics v6+,
CreatePartitions v3+, DeleteTopics v5+) refuses a topic while the bucket is below zero
(THROTTLING_QUOTA_EXCEEDED); a permissive one (older versions) takes every topic; both
throttle for the time the bucket needs to come back to zero.
"""

from __future__ import annotations

import math
import time
import types
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import KafkaError

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
              CONTROLLER_MUTATION_RATE)
USER = "user"
CLIENT_ID = "client-id"

# An entity as on the wire: (entity type, name or None for <default>) pairs, users first.
Entity = tuple[tuple[str, str | None], ...]

_INACTIVE_SENSOR_S = 3600.0  # Kafka's InactiveSensorExpirationTimeSeconds
_MAX_THROTTLE_MS = 2**31 - 1  # throttle_time_ms is an int32 (a quota of 0: never again)
NANOS_TO_PERCENT = 100 / 1e9  # Kafka's NanosToPercentagePerSecond

T = TypeVar("T")


_ABSENT: Any = object()


def entity(user: str | None = _ABSENT, client_id: str | None = _ABSENT) -> Entity:
    """The entity of a user and/or a client id (None: <default>; omitted: not part)."""
    parts: list[tuple[str, str | None]] = []
    if user is not _ABSENT:
        parts.append((USER, user))
    if client_id is not _ABSENT:
        parts.append((CLIENT_ID, client_id))
    return tuple(parts)


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


@dataclass(slots=True)
class Rate:
    """Kafka's Rate(WindowedSum) with its MetricConfig's samples and time window."""

    samples: int
    window_ms: int
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0
    last_record_ms: int = 0
    # The samples' sum and oldest start, kept as they change: measuring (every request
    # with a request quota) then needs no pass over the samples.
    _total: float = 0.0
    _oldest: int = 0

    def record(self, value: float, now_ms: int) -> None:
        samples = self._samples
        if not samples:
            samples.append(_Sample(now_ms))
            self._oldest = now_ms
        sample = samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:  # complete: advance
            self._current = current = (self._current + 1) % self.samples
            if current >= len(samples):
                samples.append(_Sample(now_ms))
            else:
                samples[current] = _Sample(now_ms)
            sample = samples[current]
            self._resum()
        sample.value += value
        self._total += value
        self.last_record_ms = now_ms

    def unrecord(self, value: float, now_ms: int) -> None:
        """Takes a value recorded back (Kafka records its negation)."""
        self.record(-value, now_ms)

    def _resum(self) -> None:
        self._total = sum(s.value for s in self._samples)
        self._oldest = min(s.start_ms for s in self._samples)

    def window_size_ms(self, now_ms: int) -> int:
        return self.measure_over(now_ms)[1]

    def measure(self, now_ms: int) -> float:
        """Per second."""
        return self.measure_over(now_ms)[0]

    def measure_over(self, now_ms: int) -> tuple[float, int]:
        """The rate per second and the window it is over, in ms."""
        samples = self._samples
        if not samples:
            samples.append(_Sample(now_ms))
            self._oldest = now_ms
        expire = self.samples * self.window_ms
        if now_ms - self._oldest >= expire:  # Kafka's purgeObsoleteSamples
            for sample in samples:
                if now_ms - sample.start_ms >= expire:
                    sample.start_ms, sample.value = now_ms, 0.0
            self._resum()
        window_ms = self.window_ms
        elapsed = now_ms - self._oldest
        full = elapsed // window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * window_ms
        elapsed = max(elapsed, 1)
        return self._total / (elapsed / 1000.0), elapsed


@dataclass(slots=True)
class _Resolved:
    tags: tuple[str, str]
    bound: float | None
    # The sum within the bound whatever the rate's window (at least (samples - 1)
    # windows): below it, a rate needs no measuring (most requests' case).
    safe_total: float = 0.0
    sensor: Rate | None = None


def throttle_time_ms(value: float, bound: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long until the rate is back to the bound if
    nothing more is recorded (Java's Math.round: half up)."""
    if bound <= 0:  # a quota of 0 lets nothing through (Kafka divides by zero)
        return _MAX_THROTTLE_MS
    return min(math.floor((value - bound) / bound * window_ms + 0.5), _MAX_THROTTLE_MS)


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket: `rate` tokens a second, at most `burst_s` seconds' worth
    (samples x window) held, taken by what is recorded and possibly below zero. Its first
    measure finds it full (Kafka's starts empty at time 0)."""

    tokens: float = 0.0
    last_update_ms: int = 0

    def _refill(self, rate: float, burst: float, now_ms: int) -> None:
        self.tokens = min(burst, self.tokens + rate * (now_ms - self.last_update_ms) / 1000)
        self.last_update_ms = now_ms

    def measure(self, rate: float, burst_s: float, now_ms: int) -> float:
        self._refill(rate, rate * burst_s, now_ms)
        return self.tokens

    def record(self, value: float, rate: float, burst_s: float, now_ms: int) -> None:
        burst = rate * burst_s
        self._refill(rate, burst, now_ms)
        self.tokens = min(burst, self.tokens - value)


def token_throttle_time_ms(tokens: float, rate: float) -> int:
    """Kafka's ControllerMutationQuotaManager.throttleTimeMs: how long until a bucket
    below zero is back to zero."""
    if tokens >= 0:
        return 0
    if rate <= 0:
        return _MAX_THROTTLE_MS
    return min(math.floor(-tokens / rate * 1000 + 0.5), _MAX_THROTTLE_MS)


class ClientQuotaManager:
    """One quota type's (produce: producer_byte_rate, fetch: consumer_byte_rate, request:
    request_percentage) entities' quotas and clients' rates."""

    def __init__(self, key: str, *, samples: int = 11, window_s: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.clock = clock  # seconds
        self.quotas: dict[Entity, float] = {}
        self._sensors: dict[tuple[str, str], Rate] = {}
        self._last_expiry_ms = 0
        # (user, client id) -> its metric tags, bound and sensor: resolved once per quota
        # change, not per request.
        self._resolved: dict[tuple[str, str], _Resolved] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.quotas)

    def set_quota(self, on: Entity, value: float | None) -> None:
        self._resolved.clear()
        if value is None:
            self.quotas.pop(on, None)
        else:
            self.quotas[on] = float(value)

    def clear_quotas(self) -> None:
        self.quotas.clear()
        self._resolved.clear()

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """The metric tags a request counts in, and their bound (cached)."""
        found = self._resolved.get((user, client_id)) or self._resolve(user, client_id)
        return found.tags, found.bound

    def _resolve(self, user: str, client_id: str) -> _Resolved:
        if len(self._resolved) >= 10_000:  # many client ids: start over
            self._resolved.clear()
        tags = self.metric_tags(user, client_id)
        bound = self.quota_limit(tags)
        safe = 0.0 if bound is None else bound * max((self.samples - 1) * self.window_ms, 1) / 1000
        found = self._resolved[(user, client_id)] = _Resolved(tags, bound, safe)
        return found

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ---- Kafka's DefaultQuotaCallback ---------------------------------------------------

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Whose rate a request counts in: (user or "", client id or "")."""
        q = self.quotas
        if (((USER, user), (CLIENT_ID, client_id)) in q
                or ((USER, user), (CLIENT_ID, None)) in q):
            return user, client_id
        if ((USER, user),) in q:
            return user, ""
        if (((USER, None), (CLIENT_ID, client_id)) in q
                or ((USER, None), (CLIENT_ID, None)) in q):
            return user, client_id
        if ((USER, None),) in q:
            return user, ""
        return "", client_id

    def quota_limit(self, tags: tuple[str, str]) -> float | None:
        user, client_id = tags
        q = self.quotas
        if user and client_id:
            candidates: Iterable[Entity] = (
                ((USER, user), (CLIENT_ID, client_id)), ((USER, user), (CLIENT_ID, None)),
                ((USER, None), (CLIENT_ID, client_id)), ((USER, None), (CLIENT_ID, None)))
        elif user:
            candidates = (((USER, user),), ((USER, None),))
        elif client_id:
            candidates = (((CLIENT_ID, client_id),), ((CLIENT_ID, None),))
        else:
            return None
        for candidate in candidates:
            if candidate in q:
                return q[candidate]
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound a request of the user and client id is held to (None: none)."""
        if not self.quotas:
            return None
        return self.resolve(user, client_id)[1]

    # ---- recording --------------------------------------------------------------------

    def _client(self, user: str, client_id: str, now_ms: int) -> _Resolved:
        """The user's and client id's tags, bound and sensor; idle sensors expire."""
        if now_ms - self._last_expiry_ms >= 60_000:
            self._last_expiry_ms = now_ms
            idle = int(_INACTIVE_SENSOR_S * 1000)
            for old in [t for t, r in self._sensors.items() if now_ms - r.last_record_ms > idle]:
                del self._sensors[old]
            self._resolved.clear()  # it holds sensors
        found = self._resolved.get((user, client_id)) or self._resolve(user, client_id)
        if found.sensor is None:
            sensor = self._sensors.get(found.tags)
            if sensor is None:
                sensor = self._sensors[found.tags] = Rate(self.samples, self.window_ms,
                                                          last_record_ms=now_ms)
            found.sensor = sensor
        return found

    def record(self, user: str, client_id: str, value: float,
               now_ms: int | None = None) -> int:
        """Records `value` (bytes, or percent of a thread's time) for the user and client
        id; the throttle time in ms (0: within its quota)."""
        if not self.quotas:
            return 0
        now = self._now_ms() if now_ms is None else now_ms
        return self._record(self._client(user, client_id, now), value, now)

    def _record(self, client: _Resolved, value: float, now_ms: int) -> int:
        sensor = client.sensor
        assert sensor is not None
        sensor.record(value, now_ms)
        bound = client.bound
        if bound is None or sensor._total <= client.safe_total:
            return 0
        rate, window_ms = sensor.measure_over(now_ms)
        if rate <= bound:
            return 0
        throttle = throttle_time_ms(rate, bound, window_ms)
        if self.key == REQUEST_PERCENTAGE:
            throttle = min(throttle, self.window_ms)
        return max(throttle, 0)

    def unrecord(self, user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        if not self.quotas:
            return
        now = self._now_ms() if now_ms is None else now_ms
        sensor = self._client(user, client_id, now).sensor
        assert sensor is not None
        sensor.unrecord(value, now)

    def rate(self, user: str, client_id: str, now_ms: int | None = None) -> float:
        now = self._now_ms() if now_ms is None else now_ms
        sensor = self._sensors.get(self.metric_tags(user, client_id))
        return 0.0 if sensor is None else sensor.measure(now)

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """Kafka's getMaxValueInQuotaWindow: the most a fetch may read at once, the quota
        over (quota.window.num - 1) windows."""
        bound = self.quota(user, client_id)
        if bound is None:
            return float("inf")
        return bound * (self.samples - 1) * self.window_ms / 1000


class ClientRequestQuotaManager(ClientQuotaManager):
    """request_percentage (Kafka's ClientRequestQuotaManager): the event-loop time of
    requests, in percent of one thread; throttles are at most one sample window. The time
    of exempt requests (served inter-broker requests, followers' fetches, acks=0
    produces) is kept apart (Kafka's exemptSensor), never throttled."""

    def __init__(self, *, samples: int = 11, window_s: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(REQUEST_PERCENTAGE, samples=samples, window_s=window_s, clock=clock)
        self.exempt = Rate(samples, self.window_ms)

    def timer(self, user: str, client_id: str, started_ns: int) -> RequestTimer:
        """A timer for a request whose frame was taken up at `started_ns`
        (time.perf_counter_ns): it runs from then on."""
        return RequestTimer(self, user, client_id, started_ns)

    def exempt_rate(self, now_ms: int | None = None) -> float:
        """The exempt requests' time, in percent of a thread."""
        return self.exempt.measure(self._now_ms() if now_ms is None else now_ms)


class RequestTimer:
    """One request's event-loop time (see the module's doc): it runs from when its frame
    was taken up, pauses while the handler's coroutine waits (`run`), and is recorded once
    the handler is done, or earlier by a handler that decides on it (a fetch is answered
    empty when throttled): that time throttles. What comes after — the rest of the
    handler, the response's encoding (`encoded`) — is recorded without throttling, as
    Kafka records its network threads' time."""

    __slots__ = ("_client_id", "_counted", "_manager", "_now_ms", "_ns", "_sensor",
                 "_since", "_user", "exempt")
    clock_ns: Callable[[], int] = staticmethod(time.perf_counter_ns)

    def __init__(self, manager: ClientRequestQuotaManager, user: str, client_id: str,
                 started_ns: int) -> None:
        self._manager = manager
        self._user = user
        self._client_id = client_id
        self._ns = 0  # the steps done
        self._since = started_ns  # when the running step began; -1: waiting
        self._counted = 0  # what was recorded
        self._sensor: Rate | None = None  # where it was recorded, once it was
        self._now_ms = 0
        self.exempt = False

    @property
    def recorded(self) -> bool:
        return self._sensor is not None

    def elapsed_ns(self) -> int:
        running = 0 if self._since < 0 else self.clock_ns() - self._since
        return self._ns + running

    def pause(self) -> None:
        if self._since >= 0:
            self._ns += self.clock_ns() - self._since
            self._since = -1

    def resume(self) -> None:
        if self._since < 0:
            self._since = self.clock_ns()

    def run(self, awaitable: Awaitable[T]) -> Awaitable[T]:
        """Awaits `awaitable`, the timer paused while it waits."""
        steps = awaitable.__await__()
        return _timed(self, steps, steps.send, None)

    def run_rest(self, steps: Generator[Any, Any, T], signal: Any) -> Awaitable[T]:
        """Awaits the rest of an awaitable's `steps`, which gave `signal` (the future it
        waits on) when first sent None: a caller saves a generator when most complete
        at once."""
        return _timed(self, steps, None, signal)

    def record(self, *, exempt: bool = False) -> int:
        """Records the time not recorded yet; the first time, the throttle time in ms (0
        for an exempt request)."""
        nanos = self.elapsed_ns()
        value = (nanos - self._counted) * NANOS_TO_PERCENT
        self._counted = nanos
        manager = self._manager
        if not manager.quotas:  # as Kafka: nothing kept while no request quota is set
            return 0
        sensor = self._sensor
        if sensor is not None:  # recorded before: not throttled on
            sensor.record(value, self._now_ms)
            return 0
        now = self._now_ms = int(manager.clock() * 1000)
        if exempt:
            self.exempt = True
            self._sensor = manager.exempt
            manager.exempt.record(value, now)
            return 0
        client = manager._resolved.get((self._user, self._client_id))
        if client is None or client.sensor is None or now - manager._last_expiry_ms >= 60_000:
            client = manager._client(self._user, self._client_id, now)
        self._sensor = client.sensor
        return manager._record(client, value, now)

    def encoded(self, nanos: int) -> None:
        """The response took `nanos` to encode: counted, not throttled on."""
        sensor = self._sensor
        if sensor is not None and self._since < 0:  # recorded, paused: the usual case
            self._ns += nanos
            self._counted += nanos
            if self._manager.quotas:
                sensor.record(nanos * NANOS_TO_PERCENT, self._now_ms)
            return
        if self._since >= 0:
            self.pause()  # never paused after its handler: the running step covers it
        else:
            self._ns += nanos
        self.record(exempt=self.exempt)


@types.coroutine
def _timed(timer: RequestTimer, steps: Generator[Any, Any, T],
           first: Callable[[Any], Any] | None, signal: Any) -> Generator[Any, Any, T]:
    """Drives `steps` as `await` would, `timer` paused while it is suspended: what is
    counted is the time the event loop spends running it. `first`: the first step to
    take (steps.send), or None if it was taken and gave `signal`."""
    if first is not None:
        try:
            signal = first(None)
        except StopIteration as done:
            return cast(T, done.value)
    while True:
        timer.pause()
        try:
            value, error = (yield signal), None
        except GeneratorExit:
            close = getattr(steps, "close", None)
            if close is not None:
                close()
            raise
        except BaseException as e:  # cancellation, thrown into the awaitable
            value, error = None, e
        timer.resume()
        try:
            signal = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as done:
            return cast(T, done.value)


class ControllerMutationQuota:
    """The controller mutation quota of one request (Kafka's Strict and Permissive
    ControllerMutationQuota): `record` the partitions a topic's change mutates before
    making it."""

    __slots__ = ("_manager", "_recorded_ms", "_tags", "_throttle_ms", "strict")

    def __init__(self, manager: ControllerMutationQuotaManager | None,
                 tags: tuple[str, str], strict: bool) -> None:
        self._manager = manager
        self._tags = tags
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_ms = 0

    @property
    def bounded(self) -> bool:
        return self._manager is not None

    def record(self, permits: float) -> None:
        """Strict: refused (ThrottlingQuotaExceeded) while the bucket is below zero, else
        taken whatever it leaves; permissive: always taken, throttled once below zero."""
        manager = self._manager
        if manager is None:
            return
        now = manager._now_ms()
        throttle = manager.record_mutation(self._tags, permits, now, strict=self.strict)
        if throttle > 0:
            self._throttle_ms, self._recorded_ms = throttle, now
            if self.strict:
                raise ThrottlingQuotaExceeded(throttle)

    def throttle_time_ms(self) -> int:
        """The last throttle time, less the time since it was recorded."""
        if self._manager is None or self._throttle_ms <= 0:
            return 0
        return max(0, self._throttle_ms - (self._manager._now_ms() - self._recorded_ms))


class ThrottlingQuotaExceeded(KafkaError):
    error_code = ErrorCode.THROTTLING_QUOTA_EXCEEDED

    def __init__(self, throttle_ms: int) -> None:
        super().__init__("The throttling quota has been exceeded.")
        self.throttle_ms = throttle_ms


UNBOUNDED_MUTATIONS = ControllerMutationQuota(None, ("", ""), strict=False)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """controller_mutation_rate (Kafka's ControllerMutationQuotaManager): per user and
    client id (Kafka's precedence), a TokenBucket of partitions."""

    def __init__(self, *, samples: int = 11, window_s: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, samples=samples, window_s=window_s,
                         clock=clock)
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._burst_s = samples * window_s

    def new_quota_for(self, user: str, client_id: str, *,
                      strict: bool) -> ControllerMutationQuota:
        """The request's quota: strict from the API's version that may refuse
        (Kafka's newQuotaFor), unbounded while no controller_mutation_rate is set."""
        if not self.quotas:
            return UNBOUNDED_MUTATIONS
        return ControllerMutationQuota(self, self.resolve(user, client_id)[0], strict)

    def record_mutation(self, tags: tuple[str, str], permits: float, now_ms: int, *,
                        strict: bool) -> int:
        """Kafka's Sensor.checkQuotas and record over the tags' bucket: the throttle time
        if the bucket is (strict: was, and nothing is taken) below zero."""
        bound = self.quota_limit(tags)
        if bound is None:
            return 0
        bucket = self._buckets.get(tags)
        if bucket is None:
            bucket = self._buckets[tags] = TokenBucket()
        if now_ms - self._last_expiry_ms >= 60_000:  # idle buckets are full: forgotten
            self._last_expiry_ms = now_ms
            idle = int(_INACTIVE_SENSOR_S * 1000)
            for old in [t for t, b in self._buckets.items()
                        if now_ms - b.last_update_ms > idle and t != tags]:
                del self._buckets[old]
        if strict:
            tokens = bucket.measure(bound, self._burst_s, now_ms)
            if tokens < 0:
                return token_throttle_time_ms(tokens, bound)
            bucket.record(permits, bound, self._burst_s, now_ms)
            return 0
        bucket.record(permits, bound, self._burst_s, now_ms)
        return token_throttle_time_ms(bucket.tokens, bound)

    def tokens(self, user: str, client_id: str, now_ms: int | None = None) -> float | None:
        """The tokens left to the user and client id (None: no quota)."""
        tags = self.metric_tags(user, client_id)
        bound = self.quota_limit(tags)
        if bound is None:
            return None
        now = self._now_ms() if now_ms is None else now_ms
        return self._buckets.setdefault(tags, TokenBucket()).measure(bound, self._burst_s, now)


class QuotaManagers:
    """The broker's client quota managers, fed the stored quota configs."""

    def __init__(self, *, samples: int = 11, window_s: int = 1,
                 controller_samples: int = 11, controller_window_s: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=samples,
                                          window_s=window_s, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples,
                                        window_s=window_s, clock=clock)
        self.request = ClientRequestQuotaManager(samples=samples, window_s=window_s,
                                                 clock=clock)
        # controller.quota.window.num and controller.quota.window.size.seconds.
        self.controller_mutation = ControllerMutationQuotaManager(
            samples=controller_samples, window_s=controller_window_s, clock=clock)
        self._by_key: dict[str, ClientQuotaManager] = {
            m.key: m for m in (self.produce, self.fetch, self.request,
                               self.controller_mutation)}

    def apply(self, on: Entity, configs: Mapping[str, str] | None) -> None:
        """The entity's quota configs as stored now (None or {}: none)."""
        configs = configs or {}
        for key, manager in self._by_key.items():
            value = configs.get(key)
            try:
                manager.set_quota(on, None if value is None else float(value))
            except ValueError:
                manager.set_quota(on, None)

    def load(self, stored: Mapping[Entity, Mapping[str, str]]) -> None:
        for manager in self._by_key.values():
            manager.clear_quotas()
        for on, configs in stored.items():
            self.apply(on, configs)
