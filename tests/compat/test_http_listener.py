"""The broker's HTTP listener (http.listeners) on a real broker process: the health
endpoints, /metrics, and hostile HTTP clients that must not slow the Kafka clients."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from support.broker import BrokerProcess
from support.wait import wait_until

from odradek.server.http_server import HttpLimits

TIMEOUT = 30.0
LIMITS = HttpLimits()  # the broker's


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("http-broker"), {
        "auto.create.topics.enable": "true", "num.partitions": "2",
        "http.listeners": "http://127.0.0.1:0"}).start()
    yield process
    process.stop()
    log = process.log_text()
    assert "Traceback" not in log, log  # whatever the HTTP clients did
    assert " ERROR " not in log, log


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, bytes]:
    """status, content type, body"""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_a_port_0_listener_binds_a_free_port(http_broker: BrokerProcess) -> None:
    port = http_broker.http_port
    assert port is not None and port > 0 and port != http_broker.port
    assert f"http listening on http://127.0.0.1:{port}" in http_broker.log_text()


def test_health_endpoints(http_broker: BrokerProcess) -> None:
    port = http_broker.http_port
    assert port is not None
    assert get(port, "/health/live") == (200, "text/plain; charset=utf-8", b"ok\n")
    status, content_type, body = get(port, "/health/ready")
    assert (status, content_type) == (200, "application/json; charset=utf-8"), body
    ready = json.loads(body)
    assert ready == {"status": "ready", "broker": 1, "cluster": ready["cluster"],
                     "mode": "single node", "checks": {"listeners": "ok", "logs": "ok",
                                                       "registered": "ok", "partitions": "ok"}}
    status, content_type, body = get(port, "/")  # the console's page
    assert status == 200 and content_type.startswith("text/html")
    for path in (b"health/ready", b"metrics"):  # relative: it may be served under a prefix
        assert b'href="%s"' % path in body
    assert get(port, "/health/ready", "HEAD")[0] == 200
    assert get(port, "/health/live", "POST")[0] in (405, 413)
    assert get(port, "/nothing/here")[0] == 404


def test_metrics(http_broker: BrokerProcess) -> None:
    port = http_broker.http_port
    assert port is not None
    status, content_type, body = get(port, "/metrics")
    if importlib.util.find_spec("odradek.metrics") is None:  # the metrics are not built yet
        assert status == 404
        return
    assert status == 200 and content_type.startswith("text/plain"), body[:200]
    assert b"# TYPE " in body


def test_no_http_listener_unless_set(broker: BrokerProcess) -> None:
    """The session's broker, started without http.listeners (the default: empty)."""
    assert broker.http_port is None
    assert "http listening" not in broker.log_text()


# ---- hostile clients -------------------------------------------------------------------


class LatencyProbe:
    """A confluent-kafka producer producing one record every `interval` (acks=all) while
    the hostile clients act, timing each acknowledgement."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.02) -> None:
        self.bootstrap, self.topic, self.interval = bootstrap, topic, interval
        self.samples: list[tuple[float, float]] = []  # (sent at, ack latency)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        assert self._ready.wait(TIMEOUT), f"the probe never got an ack: {self.errors}"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT)

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "linger.ms": 0, "message.timeout.ms": 20000,
                             "error_cb": lambda e: self.errors.append(f"error_cb: {e}")})
        n = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def acked(err: Any, _msg: Any, sent: float = sent) -> None:
                if err is not None:
                    self.errors.append(str(err))
                    return
                with self._lock:
                    self.samples.append((sent, time.monotonic() - sent))
                self._ready.set()

            producer.produce(self.topic, b"probe-%d" % n, on_delivery=acked)
            n += 1
            while (left := sent + self.interval - time.monotonic()) > 0:
                producer.poll(left)
        producer.flush(TIMEOUT)

    def latencies(self, since: float, until: float) -> list[float]:
        with self._lock:
            return sorted(lat for at, lat in self.samples if since <= at <= until)


async def half_request_lines(port: int, n: int) -> list[float]:
    """Clients that send half a request line and stall: how long until the broker closed
    each."""
    async def one() -> float:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health/rea")
        await writer.drain()
        start = time.monotonic()
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(reader.read(), LIMITS.keepalive_timeout_s + 20)
        writer.close()
        return time.monotonic() - start

    return await asyncio.gather(*(one() for _ in range(n)))


async def huge_headers(port: int, n: int, rounds: int) -> list[bytes]:
    """Clients that send a 1 MB header, again and again: what the broker answered (or
    b"reset" when it closed before the client read its answer)."""
    header = b"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * (1 << 20) + b"\r\n\r\n"

    async def one() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(header)
            await writer.drain()
            return await asyncio.wait_for(reader.readline(), TIMEOUT)
        except ConnectionError:
            return b"reset"
        finally:
            writer.close()

    answers = []
    for _ in range(rounds):
        answers += await asyncio.gather(*(one() for _ in range(n)))
    return answers


async def idle_keep_alive(port: int, n: int, hold_s: float) -> int:
    """Connections that each make one request and then sit idle, kept alive: how many
    were answered."""
    request = b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    connections = []
    answered = 0
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        connections.append((reader, writer))
    for reader, _ in connections:
        line = await asyncio.wait_for(reader.readline(), TIMEOUT)
        answered += line.startswith(b"HTTP/1.1 200")
    await asyncio.sleep(hold_s)
    for _, writer in connections:
        writer.close()
    return answered


def test_hostile_http_clients_do_not_slow_produce(http_broker: BrokerProcess) -> None:
    port = http_broker.http_port
    assert port is not None
    with LatencyProbe(http_broker.bootstrap, "http-probe") as probe:
        time.sleep(1)  # a baseline
        start = time.monotonic()

        async def hostile() -> tuple[list[float], list[bytes], int]:
            return await asyncio.gather(half_request_lines(port, 50),
                                        huge_headers(port, 10, 5),
                                        idle_keep_alive(port, 300, 3.0))

        stalled, answers, answered = asyncio.run(hostile())
        end = time.monotonic()
        # The broker still answers HTTP once they are gone.
        assert get(port, "/health/ready")[0] == 200
        time.sleep(0.5)
    assert not probe.errors, probe.errors
    latencies = probe.latencies(start, end)
    assert len(latencies) > 100, "the probe produced too little meanwhile"
    p99, worst = latencies[int(0.99 * (len(latencies) - 1))], latencies[-1]
    assert p99 < 0.5, f"p99 produce latency {p99:.3f} s (worst {worst:.3f} s) over " \
                      f"{len(latencies)} records while hostile HTTP clients acted"
    # Each stalled client was closed once its request had not arrived in time.
    assert all(LIMITS.keepalive_timeout_s - 1 < s < LIMITS.keepalive_timeout_s + 10
               for s in stalled), stalled
    # Each huge header was refused (400 or a closed connection), never served.
    assert all(a.startswith(b"HTTP/1.0 400") or a.startswith(b"HTTP/1.1 400")
               or a in (b"reset", b"") for a in answers), set(answers)
    assert answered == 300


def test_connections_beyond_the_limit_are_refused(http_broker: BrokerProcess) -> None:
    port = http_broker.http_port
    assert port is not None

    async def run() -> tuple[bytes, int]:
        held = [await asyncio.open_connection("127.0.0.1", port)
                for _ in range(LIMITS.max_connections)]
        try:
            # The broker counts a connection once it accepted it.
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            refused = await asyncio.wait_for(reader.readline(), TIMEOUT)
            writer.close()
        finally:
            for _, w in held:
                w.close()
        return refused, len(held)

    refused, held = asyncio.run(run())
    assert held == LIMITS.max_connections
    assert refused.startswith(b"HTTP/1.1 503"), refused
    # Once they are closed, the listener serves again.
    wait_until(lambda: get(port, "/health/live")[0] == 200, TIMEOUT, "served again")
