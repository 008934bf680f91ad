"""Memory is bounded whatever clients send (issue 14, part 3), against a real broker
process: size prefixes that announce 100 MiB and stall, frames sent half-way, the
broker-wide cap (queued.max.request.bytes) and the receive timeout
(socket.request.receive.timeout.ms). Meanwhile a real client is served, and once the
connections close the broker's memory goes back to where it was."""

from __future__ import annotations

import resource
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.broker import BrokerProcess
from support.wait import wait_until
from test_wire import Wire, produce_request

from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic

KIB = 1024
MIB = 1024 * KIB
STALLED_PREFIXES = 40  # connections that send only a size prefix of 100 MiB
HALF_SENT = 1000  # connections that send half of a 512 KiB frame
HALF_FRAME = 512 * KIB
DEFAULT_CAP = 256 * MIB  # queued.max.request.bytes by default


def rss(broker: BrokerProcess) -> int:
    """The broker process's resident memory in bytes (VmRSS)."""
    assert broker.process is not None
    for line in Path(f"/proc/{broker.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS")


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    return sock


def send_some(sock: socket.socket, data: bytes) -> int:
    """Sends what the socket takes now, without blocking; how much it took."""
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:])
    except BlockingIOError:
        pass
    return sent


def send_within(socks: list[socket.socket], data: bytes, seconds: float) -> int:
    """Sends `data` on each socket, as far as the broker reads it within `seconds`; the
    bytes sent in all."""
    left = {s: 0 for s in socks}
    deadline = time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        progress = False
        for sock in list(left):
            n = send_some(sock, data[left[sock]:])
            left[sock] += n
            progress |= n > 0
            if left[sock] == len(data):
                del left[sock]
        if not progress:
            time.sleep(0.01)
    return sum(left.values()) + (len(socks) - len(left)) * len(data)


@pytest.fixture
def enough_files() -> None:
    """Room for a thousand and more connections: the broker inherits the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * (STALLED_PREFIXES + HALF_SENT) + 512
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"needs {wanted} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@pytest.fixture
def broker(tmp_path: Path, request: pytest.FixtureRequest,
           enough_files: None) -> Iterator[BrokerProcess]:
    settings = getattr(request, "param", {})
    process = BrokerProcess(tmp_path / "data", settings).start()
    yield process
    assert process.stop() == 0
    assert "Traceback" not in process.log_text(), process.log_text()


def produce_latencies(producer: Producer, topic: str, count: int) -> list[float]:
    """Seconds from produce to acknowledgement of `count` records, one at a time."""
    latencies = []
    errors: list[object] = []
    for i in range(count):
        started = time.monotonic()
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: errors.append(err))
        assert producer.flush(30) == 0
        latencies.append(time.monotonic() - started)
    assert errors == [None] * count
    return latencies


def consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_stalled_and_half_sent_frames_cost_what_they_sent(broker: BrokerProcess) -> None:
    """The operator's report: 40 prefixes of 100 MiB took 4 GB and stalled clients for
    7-13 s; 1,000 half-sent frames raised RSS from 44 to 610 MB, and it stayed there."""
    topic = "bystander"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0})
    produce_latencies(producer, topic, 20)  # warm: topic, connections, buffers
    assert len(consume(broker.bootstrap, topic, 20)) == 20
    baseline = rss(broker)

    stalled = [connect(broker.port) for _ in range(STALLED_PREFIXES)]
    for sock in stalled:
        assert send_some(sock, struct.pack(">i", 100 * MIB)) == 4
    half = [connect(broker.port) for _ in range(HALF_SENT)]
    frame = struct.pack(">i", HALF_FRAME) + bytes(HALF_FRAME // 2)
    sent = send_within(half, frame, seconds=10)
    announced = STALLED_PREFIXES * 100 * MIB + HALF_SENT * HALF_FRAME  # 4.4 GiB
    under_attack = rss(broker)

    # A normal client is served meanwhile, and quickly: its requests fit the scratch
    # buffer every connection has, so they flow even with the cap reached.
    latencies = produce_latencies(producer, topic, 30)
    assert len(consume(broker.bootstrap, topic, 50)) == 50
    held = rss(broker)
    print(f"\nRSS baseline {baseline / MIB:.0f} MiB, under attack {under_attack / MIB:.0f} "
          f"MiB, after the client's turn {held / MIB:.0f} MiB; {sent / MIB:.0f} MiB sent of "
          f"{announced / MIB:.0f} MiB announced; produce latency max "
          f"{max(latencies) * 1000:.1f} ms, median {sorted(latencies)[15] * 1000:.1f} ms")
    # Bounded by the cap and the connections' scratch buffers, far below what was announced
    # (and below what was sent: the cap stopped reading the rest).
    bound = DEFAULT_CAP + (STALLED_PREFIXES + HALF_SENT) * 64 * KIB + 100 * MIB
    assert max(under_attack, held) - baseline < bound
    assert max(latencies) < 1.0

    for sock in stalled + half:
        sock.close()
    wait_until(lambda: rss(broker) < baseline + 50 * MIB, timeout=20,
               what=f"RSS back within 50 MiB of {baseline / MIB:.0f} MiB")
    print(f"RSS once they closed {rss(broker) / MIB:.0f} MiB")
    assert produce_latencies(producer, topic, 1)[0] < 1.0


@pytest.mark.parametrize("broker", [{"queued.max.request.bytes": str(4 * MIB),
                                     "message.max.bytes": str(8 * MIB)}], indirect=True)
def test_the_cap_stops_reading_and_resumes(broker: BrokerProcess) -> None:
    topic = "capped"
    wire = Wire(broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    # Three clients hold 1.5 MiB each of 2 MiB requests: more than the 4 MiB cap.
    holders = [connect(broker.port) for _ in range(3)]
    frame = struct.pack(">i", 2 * MIB) + bytes(3 * MIB // 2)
    send_within(holders, frame, seconds=5)
    wait_until(lambda: "wait for memory" in broker.log_text(), timeout=10,
               what="the cap to be reached")

    # A large request now waits for memory; small ones are still answered.
    big = produce_request(topic, [(b"k", bytes(MIB))])
    waiting = Wire(broker.port)
    waiting.send(big, 9)
    small = Wire(broker.port)
    assert small.call(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    waiting.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        waiting.sock.recv(1)  # not answered while the cap is held
    waiting.sock.settimeout(10)

    for sock in holders:
        sock.close()
    _, response = waiting.receive(big.API_KEY, 9)
    assert response.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    assert "connections read again" in broker.log_text()

    # With nothing else held, a request larger than the cap is still read and answered.
    larger = produce_request(topic, [(b"k", bytes(6 * MIB))])
    result = waiting.call(larger, 9).responses[0].partition_responses[0]  # type: ignore[attr-defined]
    assert result.error_code == 0
    for client in (wire, waiting, small):
        client.close()


@pytest.mark.parametrize("broker", [{"socket.request.receive.timeout.ms": "400"}],
                         indirect=True)
def test_a_request_that_stalls_is_dropped(broker: BrokerProcess) -> None:
    idle = Wire(broker.port)
    idle.call(ApiVersionsRequest(), 3)  # then nothing partial: it stays open
    stalled = Wire(broker.port)
    started = time.monotonic()
    stalled.sock.sendall(struct.pack(">i", MIB) + bytes(100 * KIB))
    assert stalled.closed_by_broker(timeout=10)
    assert time.monotonic() - started >= 0.4
    wait_until(lambda: "socket.request.receive.timeout.ms" in broker.log_text(), timeout=5)
    assert idle.call(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    idle.close()
