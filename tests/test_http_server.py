"""The HTTP listener's settings, its readiness and its routes, in process (the broker's own
in tests/compat/test_http_listener.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from odradek.broker.health import broker_readiness
from odradek.cluster.metadata import PartitionState
from odradek.server.config import BrokerConfig, HttpListener, parse_http_listeners
from odradek.server.http_server import HttpLimits, HttpServer, Readiness
from odradek.storage.errors import InvalidConfigError

# ---- http.listeners ------------------------------------------------------------------------


def test_http_listeners_parsing() -> None:
    assert parse_http_listeners("") == ()
    assert parse_http_listeners(" , ") == ()
    assert parse_http_listeners("http://localhost:9644, HTTP://:0,http://[::1]:8080/") == (
        HttpListener("localhost", 9644), HttpListener("", 0), HttpListener("::1", 8080))
    assert str(HttpListener("::1", 8080)) == "http://[::1]:8080"
    assert HttpListener("", 0).bind_host is None
    assert parse_http_listeners("http://a:0,http://b:0") == (HttpListener("a", 0),
                                                           HttpListener("b", 0))
    for bad, why in [("localhost:9644", "is not http://host:port"),
                     ("http://localhost", "is not http://host:port"),
                     ("https://localhost:9644", "only http://"),
                     ("http://localhost:65536", "between 0 and 65535"),
                     ("http://a:80,http://b:80", "used twice"),
                     ("http://local host:80", "is not http://host:port")]:
        with pytest.raises(InvalidConfigError, match=why) as e:
            parse_http_listeners(bad)
        assert e.value.key == "http.listeners"


def test_http_listeners_setting() -> None:
    assert BrokerConfig.default().http_listeners == ()  # off unless set
    assert BrokerConfig.default().get("http.listeners") == ""
    config = BrokerConfig.from_properties({"http.listeners": "http://127.0.0.1:0, http://:9644"})
    assert config.http_listeners == (HttpListener("127.0.0.1", 0), HttpListener("", 9644))
    assert config.get("http.listeners") == "http://127.0.0.1:0,http://:9644"
    with pytest.raises(InvalidConfigError, match="a Kafka listener's"):
        BrokerConfig.from_properties({"listeners": "PLAINTEXT://localhost:9092",
                                      "http.listeners": "http://localhost:9092"})
    with pytest.raises(InvalidConfigError, match="Cannot update these configs dynamically"):
        BrokerConfig.default().with_dynamic({"http.listeners": "http://localhost:1"})


def test_registry_listeners_setting() -> None:
    assert BrokerConfig.default().registry_listener is None
    config = BrokerConfig.from_properties({"registry.listeners": "http://127.0.0.1:8081"})
    assert config.registry_listener == HttpListener("127.0.0.1", 8081)
    for value, why in (("http://a:1,http://b:2", "one address at most"),
                       ("localhost:8081", "is not http://host:port"),
                       ("http://localhost:9092", "another listener's")):
        with pytest.raises(InvalidConfigError, match=why) as refused:
            BrokerConfig.from_properties({"listeners": "PLAINTEXT://localhost:9092",
                                          "registry.listeners": value})
        assert "registry.listeners" in str(refused.value)
    with pytest.raises(InvalidConfigError, match="connects to a PLAINTEXT listener"):
        BrokerConfig.from_properties({
            "listeners": "SSL://localhost:9093",
            "ssl.keystore.location": "/nonexistent", "registry.listeners": "http://:8081"})


# ---- readiness -----------------------------------------------------------------------------


def fake_server(**changes: Any) -> SimpleNamespace:
    """What broker_readiness reads of a KafkaServer: a ready single node unless changed."""
    config = BrokerConfig.default()
    topics = {"t": SimpleNamespace(partitions={0: PartitionState([1], leader=1),
                                               1: PartitionState([2, 1], leader=2)})}

    def partition(tp: tuple[str, int]) -> Any:
        state = topics[tp[0]].partitions.get(tp[1])
        return None if state is None else SimpleNamespace(state=state)

    server = SimpleNamespace(
        config=config, stopping=False, socket_server=object(), bound=[object()],
        log_manager=SimpleNamespace(online_dirs=lambda: [Path("d")],
                                    config=SimpleNamespace(log_dirs=(Path("d"),))),
        replica_manager=SimpleNamespace(offline_partitions=set()),
        metadata_cache=SimpleNamespace(cluster_id="c1", brokers={1: object()},
                                       partition=partition),
        zk_store=None)
    for name, value in changes.items():
        setattr(server, name, value)
    return server


def test_readiness_of_a_ready_broker() -> None:
    readiness = broker_readiness(fake_server())  # type: ignore[arg-type]
    assert readiness.ready and readiness.reasons == []
    assert readiness.to_json() == {
        "status": "ready", "broker": 1, "cluster": "c1", "mode": "single node",
        "checks": {"listeners": "ok", "logs": "ok", "registered": "ok", "partitions": "ok"}}


@pytest.mark.parametrize(("changes", "check", "reason"), [
    ({"stopping": True}, "listeners", "shutting down"),
    ({"bound": []}, "listeners", "not bound"),
    ({"log_manager": None}, "logs", "not loaded"),
    ({"metadata_cache": SimpleNamespace(cluster_id="c1", brokers={}, partition=lambda tp: None)},
     "registered", "not published"),
    ({"zk_store": SimpleNamespace(broker_epoch=-1, registered=False)}, "registered",
     "not registered in ZooKeeper"),
    ({"zk_store": SimpleNamespace(broker_epoch=12, registered=False)}, "registered",
     "session is lost"),
])
def test_readiness_reasons(changes: dict[str, Any], check: str, reason: str) -> None:
    readiness = broker_readiness(fake_server(**changes))  # type: ignore[arg-type]
    assert not readiness.ready
    assert reason in (readiness.checks[check] or "")
    body = readiness.to_json()
    assert body["status"] == "not ready" and body["reasons"] == [
        f"{check}: {readiness.checks[check]}"]


def test_offline_partitions_count_only_where_led_here() -> None:
    server = fake_server()
    server.replica_manager.offline_partitions = {("t", 1)}  # led by broker 2
    assert broker_readiness(server).ready  # type: ignore[arg-type]
    server.replica_manager.offline_partitions = {("t", 0), ("t", 1)}
    readiness = broker_readiness(server)  # type: ignore[arg-type]
    assert readiness.checks["partitions"] == "1 partitions led here are offline: t-0"


# ---- the routes, in process ----------------------------------------------------------------


async def _requests(server: HttpServer, *paths: str, method: str = "GET"
                    ) -> list[tuple[int, str, str]]:
    host, port = (await server.start())[0]
    try:
        async with aiohttp.ClientSession() as session:
            answers = []
            for path in paths:
                async with session.request(method, f"http://{host}:{port}{path}") as response:
                    answers.append((response.status, response.content_type,
                                    await response.text()))
            return answers
    finally:
        await server.stop()


def test_routes() -> None:
    readiness = Readiness({"listeners": None, "registered": "not registered in ZooKeeper yet"},
                          {"broker": 3})
    async def metrics(_accept: str | None) -> tuple[bytes, str]:
        return b"m_total 1\n", "text/plain; version=0.0.4"

    server = HttpServer([HttpListener("127.0.0.1", 0)], lambda: readiness, metrics,
                        name="Odradek broker 3")
    index, live, ready, metrics, missing = asyncio.run(_requests(
        server, "/", "/health/live", "/health/ready", "/metrics", "/nothing"))
    assert index[0] == 200 and index[1] == "text/html" and 'href="/metrics"' in index[2]
    assert "Odradek broker 3" in index[2]
    assert live == (200, "text/plain", "ok\n")
    assert ready[0] == 503 and ready[1] == "application/json"
    assert json.loads(ready[2]) == {
        "status": "not ready", "broker": 3,
        "checks": {"listeners": "ok", "registered": "not registered in ZooKeeper yet"},
        "reasons": ["registered: not registered in ZooKeeper yet"]}
    assert metrics == (200, "text/plain", "m_total 1\n")
    assert missing[0] == 404


def test_no_metrics_is_404_and_only_get() -> None:
    server = HttpServer([HttpListener("127.0.0.1", 0)], lambda: Readiness({}))
    (metrics,) = asyncio.run(_requests(server, "/metrics"))
    assert metrics[0] == 404
    (posted,) = asyncio.run(_requests(server, "/health/live", method="DELETE"))
    assert posted[0] == 405


def test_a_port_in_use_fails_start() -> None:
    async def run() -> None:
        first = HttpServer([HttpListener("127.0.0.1", 0)], lambda: Readiness({}))
        _, port = (await first.start())[0]
        try:
            second = HttpServer([HttpListener("127.0.0.1", port)], lambda: Readiness({}))
            with pytest.raises(OSError):
                await second.start()
        finally:
            await first.stop()

    asyncio.run(run())


def test_a_response_the_client_does_not_read_is_dropped() -> None:
    big = b"x" * (64 << 20)  # far more than the sockets' buffers hold

    async def run() -> int:
        async def metrics(_accept: str | None) -> tuple[bytes, str]:
            return big, "text/plain"

        server = HttpServer([HttpListener("127.0.0.1", 0)], lambda: Readiness({}), metrics,
                            limits=HttpLimits(write_timeout_s=0.5))
        host, port = (await server.start())[0]
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            deadline = asyncio.get_running_loop().time() + 10
            while server.connection_count:  # not reading: dropped after 0.5 s
                assert asyncio.get_running_loop().time() < deadline, "never dropped"
                await asyncio.sleep(0.05)
            received = 0
            try:
                while chunk := await reader.read(1 << 20):
                    received += len(chunk)
            except ConnectionError:
                pass
            writer.close()
            return received
        finally:
            await server.stop()

    assert asyncio.run(run()) < len(big)
