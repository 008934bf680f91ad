"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219): Kafka's ClientQuotaManager, sans I/O.

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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
USER = "user"
CLIENT_ID = "client-id"

# An entity as on the wire: (entity type, name or None for <default>) pairs, users first.
Entity = tuple[tuple[str, str | None], ...]

_INACTIVE_SENSOR_S = 3600.0  # Kafka's InactiveSensorExpirationTimeSeconds


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

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:  # complete: advance
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                self._samples[self._current] = _Sample(now_ms)
            sample = self._samples[self._current]
        sample.value += value
        self.last_record_ms = now_ms

    def unrecord(self, value: float, now_ms: int) -> None:
        """Takes a value recorded back (Kafka records its negation)."""
        self.record(-value, now_ms)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire:
                sample.start_ms, sample.value = now_ms, 0.0

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(s.start_ms for s in self._samples)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(value: float, bound: float, window_ms: int) -> int:
    """Kafka's QuotaUtils.throttleTime: how long until the rate is back to the bound if
    nothing more is recorded (Java's Math.round: half up)."""
    return math.floor((value - bound) / bound * window_ms + 0.5)


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

    @property
    def enabled(self) -> bool:
        return bool(self.quotas)

    def set_quota(self, on: Entity, value: float | None) -> None:
        if value is None:
            self.quotas.pop(on, None)
        else:
            self.quotas[on] = float(value)

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
        return self.quota_limit(self.metric_tags(user, client_id))

    # ---- recording --------------------------------------------------------------------

    def _sensor(self, tags: tuple[str, str], now_ms: int) -> Rate:
        if now_ms - self._last_expiry_ms >= 60_000:
            self._last_expiry_ms = now_ms
            idle = int(_INACTIVE_SENSOR_S * 1000)
            for old in [t for t, r in self._sensors.items() if now_ms - r.last_record_ms > idle]:
                del self._sensors[old]
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = Rate(self.samples, self.window_ms,
                                                last_record_ms=now_ms)
        return sensor

    def record(self, user: str, client_id: str, value: float,
               now_ms: int | None = None) -> int:
        """Records `value` (bytes, or percent of a thread's time) for the user and client
        id; the throttle time in ms (0: within its quota)."""
        if not self.quotas:
            return 0
        now = self._now_ms() if now_ms is None else now_ms
        tags = self.metric_tags(user, client_id)
        sensor = self._sensor(tags, now)
        sensor.record(value, now)
        bound = self.quota_limit(tags)
        if bound is None:
            return 0
        rate = sensor.measure(now)
        if rate <= bound:
            return 0
        throttle = throttle_time_ms(rate, bound, sensor.window_size_ms(now))
        if self.key == REQUEST_PERCENTAGE:
            throttle = min(throttle, self.window_ms)
        return max(throttle, 0)

    def unrecord(self, user: str, client_id: str, value: float,
                 now_ms: int | None = None) -> None:
        if not self.quotas:
            return
        now = self._now_ms() if now_ms is None else now_ms
        self._sensor(self.metric_tags(user, client_id), now).unrecord(value, now)

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


class QuotaManagers:
    """The broker's three client quota managers, fed the stored quota configs."""

    def __init__(self, *, samples: int = 11, window_s: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples=samples,
                                          window_s=window_s, clock=clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples=samples,
                                        window_s=window_s, clock=clock)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE, samples=samples,
                                          window_s=window_s, clock=clock)
        self._by_key = {m.key: m for m in (self.produce, self.fetch, self.request)}

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
            manager.quotas.clear()
        for on, configs in stored.items():
            self.apply(on, configs)
