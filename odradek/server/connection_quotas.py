"""Connection limits: Kafka's ConnectionQuotas (SocketServer.scala), sans I/O.

What the broker's acceptors ask before a connection is served, and what they count:

- max.connections.per.ip, max.connections.per.ip.overrides: a connection from an address
  that has its maximum already is refused (closed at once, unread);
- max.connections (broker-wide) and listener.name.<l>.max.connections (per listener, by
  default the broker-wide value, as Kafka reads listener configs with the prefix over the
  base): at the limit the listener's acceptor stops accepting until a connection closes.
  The inter-broker listener is exempt from the broker-wide limit (not from its own) when
  there is more than one listener; a connection it takes past the limit makes the other
  listeners close their least recently used connections (`excess`);
- max.connection.creation.rate, broker-wide (the inter-broker listener exempt) and per
  listener (KIP-612): a connection accepted past the rate delays the acceptor, by Kafka's
  QuotaUtils throttle time, at most one quota window (quota.window.size.seconds).

Addresses are compared as Java's InetAddress does: by the address, an IPv4-mapped IPv6
address as its IPv4 one. An override's host name stands for the address it resolves to;
resolving is I/O, so the caller passes those addresses in (`configure`).
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.server.quota_manager import Rate, throttle_time_ms

if TYPE_CHECKING:
    from odradek.server.config import BrokerConfig

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
_LIMITS = ("max.connections", "max.connection.creation.rate")
_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern
_JAVA_INT = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt takes


def parse_overrides(raw: str) -> dict[str, int]:
    """max.connections.per.ip.overrides as Kafka reads it (Csv.parseCsvMap, then each count
    an int): "host:count,host2:count", blanks around the commas and each part ignored, the
    count after the last colon (so an IPv6 address is written bare: "::1:5"). Raises
    ValueError saying what is wrong."""
    if not raw:
        return {}
    entries = re.split(r"\s*,\s*", raw)
    while entries and not entries[-1]:  # Java's String.split drops trailing empty strings
        entries.pop()
    overrides: dict[str, int] = {}
    for entry in entries:
        host, colon, count = entry.rpartition(":")
        host, count = host.strip(), count.strip()
        if not colon:
            raise ValueError(f"{entry!r} is not host:count")
        if not _JAVA_INT.fullmatch(count) or not INT_MIN <= int(count) <= INT_MAX:
            raise ValueError(f"the count of {host!r} ({count!r}) is not an int")
        if not _VALID_HOST.fullmatch(host):
            raise ValueError(f"it contains an invalid address: {host!r}")
        overrides[host] = int(count)
    return overrides


def ip_key(address: str) -> str | None:
    """The address as connections from it are counted, or None when `address` is no IP
    address (a host name): an IPv4-mapped IPv6 address is its IPv4 address, as in Java."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    max_connections: int = INT_MAX
    max_connection_creation_rate: int = INT_MAX


@dataclass(frozen=True)
class ConnectionLimits:
    """The connection limits in force, from the broker's settings."""

    max_connections_per_ip: int = INT_MAX
    # host name or IP address (as given) -> its limit
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    max_connections: int = INT_MAX
    max_connection_creation_rate: int = INT_MAX
    listeners: Mapping[str, ListenerLimits] = field(default_factory=dict)
    inter_broker_listener: str | None = None

    def listener(self, name: str) -> ListenerLimits:
        """A listener's limits; one without its own has the broker-wide values."""
        limits = self.listeners.get(name)
        if limits is None:
            return ListenerLimits(self.max_connections, self.max_connection_creation_rate)
        return limits

    def hostnames(self) -> list[str]:
        """The overrides' hosts that are names, to be resolved."""
        return [h for h in self.max_connections_per_ip_overrides if ip_key(h) is None]

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ConnectionLimits:
        """The limits of the broker's settings in force (static and dynamic); the overrides
        were validated with the settings."""
        listeners = {}
        for listener in config.listeners:
            values = config.listener_values(listener.name, _LIMITS)
            listeners[listener.name] = ListenerLimits(
                int(values["max.connections"] or INT_MAX),
                int(values["max.connection.creation.rate"] or INT_MAX))
        return cls(
            max_connections_per_ip=config.get("max.connections.per.ip"),
            max_connections_per_ip_overrides=parse_overrides(
                config.get("max.connections.per.ip.overrides") or ""),
            max_connections=config.get("max.connections"),
            max_connection_creation_rate=config.get("max.connection.creation.rate"),
            listeners=listeners,
            inter_broker_listener=config.inter_broker_listener_name,
        )


class TooManyConnections(Exception):
    def __init__(self, ip: str, limit: int) -> None:
        super().__init__(f"{ip} has {limit} connections already")
        self.ip = ip
        self.limit = limit


class ConnectionQuotas:
    """The connections counted per address, per listener and in all; the connection
    creation rates (Kafka's Rate, over quota.window.num windows of
    quota.window.size.seconds). `clock` gives seconds."""

    def __init__(self, limits: ConnectionLimits | None = None, *, samples: int = 11,
                 window_s: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = window_s * 1000  # Kafka: one quota window at most
        self.limits = ConnectionLimits()
        self.counts: dict[str, int] = {}  # by address
        self.listener_counts: dict[str, int] = {}
        self.total = 0
        self._overrides: dict[str, int] = {}  # by address
        self._broker_rate = Rate(samples, self.window_ms)
        self._listener_rates: dict[str, Rate] = {}
        self.configure(limits or ConnectionLimits())

    def configure(self, limits: ConnectionLimits,
                  resolved: Mapping[str, str | None] | None = None) -> list[str]:
        """Puts `limits` in force. `resolved` gives the address of each override's host
        name (None: it did not resolve); returns the overrides' hosts left out for want
        of an address."""
        overrides: dict[str, int] = {}
        unresolved = []
        for host, count in limits.max_connections_per_ip_overrides.items():
            ip = ip_key(host)
            if ip is None:
                address = (resolved or {}).get(host)
                ip = None if address is None else ip_key(address)
            if ip is None:
                unresolved.append(host)
            else:
                overrides[ip] = count
        self.limits = limits
        self._overrides = overrides
        return unresolved

    def add_listener(self, name: str) -> None:
        self.listener_counts.setdefault(name, 0)
        self._listener_rates.setdefault(name, Rate(self.samples, self.window_ms))

    def max_connections_for(self, ip: str) -> int:
        return self._overrides.get(ip, self.limits.max_connections_per_ip)

    def protected(self, listener: str) -> bool:
        """Whether the listener is exempt from the broker-wide limits: the inter-broker
        listener, when there are others."""
        return listener == self.limits.inter_broker_listener and len(self.listener_counts) > 1

    # ---- accepting ----------------------------------------------------------------------

    def record_connection(self, listener: str) -> int:
        """A connection accepted on the listener, in the creation rates (Kafka's
        recordConnectionAndGetThrottleTimeMs): how long, in ms, the acceptor waits before
        it takes the connection in (0: at once), the longer of the broker-wide and the
        listener's throttle times."""
        now = int(self.clock() * 1000)
        throttle = 0
        if not self.protected(listener):
            throttle = self._record(self._broker_rate, self.limits.max_connection_creation_rate,
                                    now)
        rate = self._listener_rates.get(listener)
        if rate is not None:
            bound = self.limits.listener(listener).max_connection_creation_rate
            throttle = max(throttle, self._record(rate, bound, now))
        return throttle

    def _record(self, rate: Rate, bound: int, now_ms: int) -> int:
        rate.record(1.0, now_ms)
        value = rate.measure(now_ms)
        if value <= bound:
            return 0
        if bound <= 0:  # Kafka's throttle time is infinite, then bounded
            return self.max_throttle_ms
        return max(0, min(throttle_time_ms(value, bound, rate.window_size_ms(now_ms)),
                          self.max_throttle_ms))

    def slot_available(self, listener: str) -> bool:
        """Whether the listener may take a connection in now (Kafka's
        connectionSlotAvailable): under its own limit, and under the broker-wide one
        unless it is exempt."""
        if self.listener_counts.get(listener, 0) >= self.limits.listener(listener).max_connections:
            return False
        return self.protected(listener) or self.total < self.limits.max_connections

    def inc(self, listener: str, ip: str) -> None:
        """Counts a connection taken in from `ip` (an ip_key). Raises TooManyConnections,
        counting nothing, when the address has its maximum already."""
        count = self.counts.get(ip, 0)
        limit = self.max_connections_for(ip)
        if count >= limit:
            raise TooManyConnections(ip, limit)
        self.counts[ip] = count + 1
        self.total += 1
        if listener in self.listener_counts:
            self.listener_counts[listener] += 1

    def dec(self, listener: str, ip: str) -> None:
        """A connection counted by `inc` closed."""
        count = self.counts.get(ip, 0)
        if count <= 0:
            raise ValueError(f"no connection from {ip} is counted")
        if count == 1:
            del self.counts[ip]
        else:
            self.counts[ip] = count - 1
        self.total -= 1
        if self.listener_counts.get(listener, 0) > 0:
            self.listener_counts[listener] -= 1

    def excess(self) -> int:
        """How many connections over max.connections are counted (an exempt listener took
        them in, or the limit was lowered): as many of the other listeners' least recently
        used connections are to close (Kafka's maxConnectionsExceeded)."""
        return max(0, self.total - self.limits.max_connections)
