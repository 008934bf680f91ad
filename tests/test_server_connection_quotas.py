"""Connection limits (Kafka's ConnectionQuotas): the accounting sans I/O, with a clock the
tests move, then the socket server's acceptors in process (the inter-broker listener's
exemption and the least recently used connections it closes, limits changed while
running). tests/compat/test_connection_quotas.py runs them in a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from odradek.protocol.framing import Request, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.server.config import BrokerConfig
from odradek.server.connection_quotas import (
    INT_MAX,
    ConnectionLimits,
    ConnectionQuotas,
    ListenerLimits,
    TooManyConnections,
    ip_key,
    parse_overrides,
)
from odradek.server.network import RequestContext, SocketServer
from odradek.storage.errors import InvalidConfigError

pytestmark = pytest.mark.timeout(60)
TIMEOUT = 10.0
LOOPS = ["asyncio", "uvloop"]  # uvloop where installed: the broker's loop then


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- settings ------------------------------------------------------------------------------


def test_overrides_parse_as_kafka() -> None:
    assert parse_overrides("") == {}
    assert parse_overrides("hostName:100,127.0.0.1:200") == {"hostName": 100,
                                                             "127.0.0.1": 200}
    # Blanks around commas and parts, a trailing comma, the count after the last colon.
    assert parse_overrides(" a : 1 , b:+2 ,::1:5,") == {"a": 1, "b": 2, "::1": 5}
    assert parse_overrides("a:1,a:3") == {"a": 3}  # the later wins
    for bad in ("a", "a:x", "a:", "a:99999999999", ",a:1", "[::1]:4", "a b:1", "a:1_0"):
        with pytest.raises(ValueError):
            parse_overrides(bad)


def test_addresses_are_compared_as_java_does() -> None:
    assert ip_key("127.0.0.1") == "127.0.0.1"
    assert ip_key("::ffff:127.0.0.1") == "127.0.0.1"  # IPv4-mapped: its IPv4 address
    assert ip_key("0:0:0:0:0:0:0:1") == "::1"
    assert ip_key("localhost") is None  # a host name
    assert ip_key("") is None


def test_limits_from_the_broker_settings() -> None:
    config = BrokerConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "max.connections": "10", "max.connection.creation.rate": "7",
        "max.connections.per.ip": "3", "max.connections.per.ip.overrides": "localhost:5",
        "listener.name.external.max.connections": "4"})
    limits = ConnectionLimits.from_config(config)
    assert limits == ConnectionLimits(
        3, {"localhost": 5}, 10, 7,
        {"PLAINTEXT": ListenerLimits(10, 7), "EXTERNAL": ListenerLimits(4, 7)}, "PLAINTEXT")
    assert limits.hostnames() == ["localhost"]
    # Dynamic updates, cluster-wide: the listener without its own takes the new value.
    config = config.with_dynamic({"max.connections": "20",
                                  "listener.name.external.max.connection.creation.rate": "2"},
                                 cluster_default=True)
    assert ConnectionLimits.from_config(config).listeners == {
        "PLAINTEXT": ListenerLimits(20, 7), "EXTERNAL": ListenerLimits(4, 2)}
    assert ConnectionLimits.from_config(BrokerConfig.default()).max_connections == INT_MAX


def test_settings_kafka_refuses_are_refused() -> None:
    for settings, says in [
        ({"max.connections.per.ip": "0"}, "can be set to zero only if "
                                          "max.connections.per.ip.overrides property is set"),
        ({"max.connections.per.ip.overrides": "a"}, "'a' is not host:count"),
        ({"max.connections.per.ip.overrides": "[::1]:2"}, "invalid address"),
        ({"max.connections": "-1"}, "max.connections=-1 is invalid"),
    ]:
        with pytest.raises(InvalidConfigError) as info:
            BrokerConfig.from_properties(settings)
        assert says in str(info.value)
        with pytest.raises(InvalidConfigError):  # and as dynamic updates
            BrokerConfig.default().with_dynamic(settings, cluster_default=True)
    c = BrokerConfig.from_properties({"max.connections.per.ip": "0",
                                      "max.connections.per.ip.overrides": "10.0.0.1:4"})
    assert c.get("max.connections.per.ip") == 0


# ---- the accounting ------------------------------------------------------------------------


def test_an_address_over_its_limit_is_refused_and_nothing_counted() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(
        max_connections_per_ip=2,
        max_connections_per_ip_overrides={"10.0.0.9": 0, "trusted.example": 3}))
    unresolved = quotas.configure(quotas.limits, {"trusted.example": "::ffff:10.0.0.7"})
    assert unresolved == []
    quotas.add_listener("PLAINTEXT")
    for _ in range(2):
        quotas.inc("PLAINTEXT", "10.0.0.1")
    with pytest.raises(TooManyConnections) as info:
        quotas.inc("PLAINTEXT", "10.0.0.1")
    assert (info.value.ip, info.value.limit) == ("10.0.0.1", 2)
    assert (quotas.counts, quotas.total, quotas.listener_counts) == (
        {"10.0.0.1": 2}, 2, {"PLAINTEXT": 2})
    quotas.dec("PLAINTEXT", "10.0.0.1")
    quotas.inc("PLAINTEXT", "10.0.0.1")  # a slot freed
    with pytest.raises(TooManyConnections):
        quotas.inc("PLAINTEXT", "10.0.0.9")  # override 0: never
    for _ in range(3):  # a host name's override: its address's
        quotas.inc("PLAINTEXT", "10.0.0.7")
    with pytest.raises(TooManyConnections):
        quotas.inc("PLAINTEXT", "10.0.0.7")
    for _ in range(3):
        quotas.dec("PLAINTEXT", "10.0.0.7")
    quotas.dec("PLAINTEXT", "10.0.0.1")
    quotas.dec("PLAINTEXT", "10.0.0.1")
    assert (quotas.counts, quotas.total, quotas.listener_counts) == ({}, 0, {"PLAINTEXT": 0})
    with pytest.raises(ValueError):
        quotas.dec("PLAINTEXT", "10.0.0.1")
    # A name that did not resolve is left out, and said so.
    limits = ConnectionLimits(max_connections_per_ip_overrides={"nowhere.invalid": 9})
    assert quotas.configure(limits, {"nowhere.invalid": None}) == ["nowhere.invalid"]


def test_broker_and_listener_limits() -> None:
    quotas = ConnectionQuotas(ConnectionLimits(
        max_connections=3, listeners={"EXTERNAL": ListenerLimits(max_connections=2)},
        inter_broker_listener="PLAINTEXT"))
    # One listener: the inter-broker one is not exempt (nothing to protect it from).
    quotas.add_listener("PLAINTEXT")
    assert not quotas.protected("PLAINTEXT")
    quotas.add_listener("EXTERNAL")
    assert quotas.protected("PLAINTEXT") and not quotas.protected("EXTERNAL")
    quotas.inc("EXTERNAL", "10.0.0.1")
    quotas.inc("EXTERNAL", "10.0.0.2")
    assert not quotas.slot_available("EXTERNAL")  # its own limit
    assert quotas.slot_available("PLAINTEXT")
    quotas.inc("PLAINTEXT", "10.0.0.3")
    assert quotas.excess() == 0
    # The broker-wide limit reached: the inter-broker listener still takes connections in
    # (up to its own limit, by default the broker-wide value), past it.
    assert quotas.slot_available("PLAINTEXT") and not quotas.slot_available("EXTERNAL")
    quotas.inc("PLAINTEXT", "10.0.0.3")
    assert quotas.excess() == 1
    quotas.inc("PLAINTEXT", "10.0.0.3")
    assert not quotas.slot_available("PLAINTEXT")  # 3: its own limit
    quotas.dec("EXTERNAL", "10.0.0.1")
    quotas.dec("EXTERNAL", "10.0.0.2")
    assert quotas.excess() == 0 and not quotas.slot_available("EXTERNAL")  # 3 in all
    quotas.dec("PLAINTEXT", "10.0.0.3")
    assert quotas.slot_available("EXTERNAL")
    # Lowered while over it: the excess is what the others' connections close for.
    quotas.configure(ConnectionLimits(max_connections=1, inter_broker_listener="PLAINTEXT"))
    assert quotas.excess() == 1
    assert not quotas.slot_available("PLAINTEXT")  # its own limit is 1 now, too


def test_creation_rates_throttle_the_acceptor() -> None:
    clock = Clock()
    # Two 1 s samples: the rate's window is at least 1 s, so 2 at once is 2/s.
    quotas = ConnectionQuotas(ConnectionLimits(
        max_connection_creation_rate=1, inter_broker_listener="PLAINTEXT",
        listeners={"PLAINTEXT": ListenerLimits(max_connection_creation_rate=INT_MAX),
                   "EXTERNAL": ListenerLimits(max_connection_creation_rate=INT_MAX)}),
        samples=2, window_s=1, clock=clock)
    quotas.add_listener("PLAINTEXT")
    quotas.add_listener("EXTERNAL")
    assert quotas.record_connection("EXTERNAL") == 0
    # (2 - 1) / 1 * 1000 ms, at most one window.
    assert quotas.record_connection("EXTERNAL") == 1000
    assert quotas.record_connection("EXTERNAL") == 1000  # bounded
    # The inter-broker listener is not in the broker-wide rate.
    assert quotas.record_connection("PLAINTEXT") == 0
    assert quotas.record_connection("PLAINTEXT") == 0
    clock.now += 5  # the samples expire
    assert quotas.record_connection("EXTERNAL") == 0
    # Kafka's default 11 samples: the first burst is ten windows' worth.
    clock.now += 100
    quotas = ConnectionQuotas(ConnectionLimits(max_connection_creation_rate=5), clock=clock)
    quotas.add_listener("PLAINTEXT")
    assert [quotas.record_connection("PLAINTEXT") for _ in range(51)] == [0] * 50 + [200]


def test_a_listeners_own_rate_and_a_zero_rate() -> None:
    clock = Clock()
    quotas = ConnectionQuotas(ConnectionLimits(
        inter_broker_listener="PLAINTEXT",
        listeners={"PLAINTEXT": ListenerLimits(max_connection_creation_rate=1),
                   "EXTERNAL": ListenerLimits(max_connection_creation_rate=0)}),
        samples=2, window_s=3, clock=clock)
    quotas.add_listener("PLAINTEXT")
    quotas.add_listener("EXTERNAL")
    # The inter-broker listener is held to its own rate: 2 in a 3 s window is under 1/s.
    assert quotas.record_connection("PLAINTEXT") == 0
    assert quotas.record_connection("PLAINTEXT") == 0
    assert quotas.record_connection("PLAINTEXT") == 0
    assert quotas.record_connection("PLAINTEXT") == 1000  # 4/3 per s: (4/3-1)/1 * 3000
    assert quotas.record_connection("EXTERNAL") == 3000  # rate 0: a whole window each


# ---- the acceptors, in process --------------------------------------------------------------


class Handler:
    def supports(self, api_key: int, api_version: int) -> bool:
        return True

    def unsupported_api_versions(self) -> Message:
        return ApiVersionsResponse()

    async def handle(self, request: Request, context: RequestContext) -> Message | None:
        return ApiVersionsResponse()


API_VERSIONS = encode_request(ApiVersionsRequest(), 3, 7)
Client = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def until(condition: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(TIMEOUT):
            while not condition():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def served(client: Client) -> bool:
    """Whether an ApiVersions request is answered (False: the broker closed)."""
    reader, writer = client
    writer.write(API_VERSIONS)
    try:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    return True


@contextlib.asynccontextmanager
async def serving(limits: ConnectionLimits) -> AsyncIterator[tuple[SocketServer, list[int]]]:
    server = SocketServer(Handler(), max_frame_size=1 << 20, connections_max_idle_ms=600_000,
                          connection_quotas=ConnectionQuotas())
    await server.set_connection_limits(limits)
    bound = await server.start([("PLAINTEXT", "127.0.0.1", 0), ("EXTERNAL", "127.0.0.1", 0)])
    try:
        yield server, [b.port for b in bound]
    finally:
        await server.stop()
    await until(lambda: server.quotas.total == 0 and not server.quotas.counts,
                "every slot given back")


def run(test: Callable[[], Awaitable[None]], loop: str) -> None:
    factory = None
    if loop == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(test(), 3 * TIMEOUT))


@pytest.mark.parametrize("loop", LOOPS)
def test_the_inter_broker_listener_closes_the_least_recently_used(loop: str) -> None:
    run(inter_broker_listener_past_the_limit, loop)


async def inter_broker_listener_past_the_limit() -> None:
    limits = ConnectionLimits(max_connections=2, inter_broker_listener="PLAINTEXT")
    async with serving(limits) as (server, (internal, external)):
        first = await asyncio.open_connection("127.0.0.1", external)
        second = await asyncio.open_connection("127.0.0.1", external)
        assert await served(first) and await served(second)  # the first is used least
        await until(lambda: server.quotas.total == 2, "both counted")
        # A third client waits in the backlog, unanswered.
        third = await asyncio.open_connection("127.0.0.1", external)
        third[1].write(API_VERSIONS)
        with pytest.raises(TimeoutError):  # a negative: only a bounded wait shows it
            await asyncio.wait_for(third[0].read(1), 0.3)
        assert server.quotas.total == 2
        # The inter-broker listener takes a connection in past the limit, and the least
        # recently used connection of the other closes for it.
        broker = await asyncio.open_connection("127.0.0.1", internal)
        assert await served(broker)
        assert not await served(first)
        assert await served(second)
        assert server.quotas.total == 2
        # Closing one lets the waiting client in, and it is answered.
        second[1].close()
        size = struct.unpack(">i", await third[0].readexactly(4))[0]
        await third[0].readexactly(size)
        for _, writer in (first, third, broker):
            writer.close()
        await until(lambda: server.quotas.total == 0, "all closed")


@pytest.mark.parametrize("loop", LOOPS)
def test_limits_changed_while_running(loop: str) -> None:
    run(limits_changed_while_running, loop)


async def limits_changed_while_running() -> None:
    limits = ConnectionLimits(max_connections_per_ip=1, inter_broker_listener="PLAINTEXT")
    async with serving(limits) as (server, (internal, external)):
        one = await asyncio.open_connection("127.0.0.1", external)
        assert await served(one)
        refused = await asyncio.open_connection("127.0.0.1", external)
        assert not await served(refused)  # closed at once, unread
        # Raised: a second connection from the address is served.
        server.update_connection_limits(ConnectionLimits(inter_broker_listener="PLAINTEXT",
                                                         max_connections_per_ip=2))
        await until(lambda: server.quotas.limits.max_connections_per_ip == 2, "updated")
        two = await asyncio.open_connection("127.0.0.1", external)
        assert await served(two)
        # max.connections lowered below the count: the least recently used closes.
        server.update_connection_limits(ConnectionLimits(inter_broker_listener="PLAINTEXT",
                                                         max_connections_per_ip=2,
                                                         max_connections=1))
        await until(lambda: server.quotas.limits.max_connections == 1, "updated")
        assert not await served(one)
        assert await served(two)
        # A host name's override: localhost is 127.0.0.1 (IPv4 first, as Java).
        server.update_connection_limits(ConnectionLimits(
            inter_broker_listener="PLAINTEXT", max_connections_per_ip_overrides={
                "localhost": 0}))
        await until(lambda: server.quotas.max_connections_for("127.0.0.1") == 0, "resolved")
        assert not await served(await asyncio.open_connection("127.0.0.1", internal))
        two[1].close()
