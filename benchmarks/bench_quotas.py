"""What request_percentage (KIP-124) costs a produce: the broker's time per small produce
request with no request quota set, and with one in force (a <default> client-id
request_percentage of 100000: every request timed and recorded, none throttled).

Run: .venv/bin/python benchmarks/bench_quotas.py [--requests N] [--rounds N]
     (about a minute)

Two measurements, the modes alternating round by round so both see the same machine:

- in-process: a KafkaServer in this process (asyncio), and a produce request (v9, acks=1,
  one batch of 100 records of 100 B) taken through KafkaConnection._process's steps:
  decode, KafkaApis.handle, encode (with the timer told of it). Best round per mode.
- end to end: `python -m odradek serve` (asyncio), a raw-socket client keeping 16 of those
  requests in flight, the broker's CPU time (utime + stime) per request from /proc.
  Median round per mode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

from odradek.broker.kafka_server import KafkaServer
from odradek.protocol.framing import (
    Request,
    decode_request_header,
    decode_response,
    encode_request,
)
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_client_quotas_request as alter
from odradek.protocol.messages import create_topics_request as create_topics
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.records import build_record_batch
from odradek.server.config import BrokerConfig
from odradek.server.network import RequestContext
from odradek.server.quota_manager import entity
from odradek.server.response import encode_response_parts

TOPIC = "quota-bench"
IN_FLIGHT = 16
QUOTA = 100000.0  # percent of a thread: never reached


def produce_frame() -> bytes:
    batch = build_record_batch([(None, b"v" * 100)] * 100,
                               base_timestamp=int(time.time() * 1000))
    return encode_request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
        TopicProduceData(name=TOPIC, partition_data=[
            PartitionProduceData(index=0, records=batch)])]), 9, 7, "bench")


def create_topic_frame() -> bytes:
    return encode_request(create_topics.CreateTopicsRequest(
        topics=[create_topics.CreatableTopic(name=TOPIC, num_partitions=1,
                                             replication_factor=1)],
        timeout_ms=30_000), 7, 1, "bench-admin")


# ---- in-process ---------------------------------------------------------------------------


async def process(apis: Any, frame: bytes) -> None:
    """KafkaConnection._process's steps for a request frame (without its size)."""
    started = time.perf_counter_ns()
    header, api, pos = decode_request_header(frame)
    version = header.request_api_version
    body, _ = api.request_class.decode_from(memoryview(frame), pos, version)
    context = RequestContext(1, "127.0.0.1", 1, "PLAINTEXT", header, frame_size=len(frame),
                             started_ns=started)
    response = await apis.handle(Request(header, api, body), context)
    assert response is not None
    timer = context.timer
    began = time.perf_counter_ns()
    encode_response_parts(api, response, version, header.correlation_id)
    if timer is not None:
        timer.encoded(time.perf_counter_ns() - began)


async def in_process(requests: int, rounds: int) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="bench-quotas-")
    server = KafkaServer(BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data}))
    await server.startup()
    try:
        assert server.socket_server is not None and server.quotas is not None
        apis = server.socket_server.handler
        await process(apis, create_topic_frame()[4:])
        frame = produce_frame()[4:]
        for _ in range(1000):  # warm up
            await process(apis, frame)
        best = {"off": float("inf"), "on": float("inf")}
        for i in range(rounds):
            for mode in ("off", "on") if i % 2 else ("on", "off"):
                server.quotas.load({} if mode == "off" else {
                    entity(client_id=None): {"request_percentage": str(QUOTA)}})
                began = time.perf_counter()
                for _ in range(requests):
                    await process(apis, frame)
                best[mode] = min(best[mode], (time.perf_counter() - began) / requests * 1e6)
        return best
    finally:
        await server.shutdown()
        shutil.rmtree(data, ignore_errors=True)


# ---- end to end ---------------------------------------------------------------------------


class Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def frame(self) -> bytes:
        while True:
            if len(self.buffer) >= 4:
                (size,) = struct.unpack(">i", self.buffer[:4])
                if len(self.buffer) >= 4 + size:
                    frame, self.buffer = self.buffer[4:4 + size], self.buffer[4 + size:]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the broker")
            self.buffer += chunk

    def call(self, body: Message, version: int) -> Any:
        self.sock.sendall(encode_request(body, version, 1, "bench-admin"))
        return decode_response(self.frame(), body.API_KEY, version)[1]  # type: ignore[attr-defined]


def broker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def set_quota(admin: Connection, value: float | None) -> None:
    response = admin.call(alter.AlterClientQuotasRequest(entries=[alter.EntryData(
        entity=[alter.EntityData(entity_type="client-id", entity_name=None)],
        ops=[alter.OpData(key="request_percentage", value=value or 0.0,
                          remove=value is None)])]), 1)
    assert [e.error_code for e in response.entries] == [0], response


def cpu_per_request(connection: Connection, frame: bytes, pid: int, requests: int) -> float:
    before = broker_cpu_s(pid)
    sent = answered = 0
    while answered < requests:
        while sent < requests and sent - answered < IN_FLIGHT:
            connection.sock.sendall(frame)
            sent += 1
        connection.frame()
        answered += 1
    return (broker_cpu_s(pid) - before) / requests * 1e6


def end_to_end(requests: int, rounds: int) -> dict[str, float]:
    data = tempfile.mkdtemp(prefix="bench-quotas-")
    broker = subprocess.Popen(
        [sys.executable, "-m", "odradek", "serve", "--set", "listeners=PLAINTEXT://127.0.0.1:0",
         "--set", f"log.dirs={data}"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, env=dict(os.environ, ODRADEK_EVENT_LOOP="asyncio"))
    try:
        assert broker.stderr is not None
        port = 0
        for line in broker.stderr:
            if "listening on" in line:
                port = int(line.rsplit(":", 1)[1].split()[0])
            if "started" in line and port:
                break
        admin = Connection(port)
        admin.sock.sendall(create_topic_frame())
        admin.frame()
        connection = Connection(port)
        frame = produce_frame()
        cpu_per_request(connection, frame, broker.pid, requests)  # warm up
        per_mode: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(rounds):
            for mode in ("off", "on") if i % 2 else ("on", "off"):
                set_quota(admin, None if mode == "off" else QUOTA)
                per_mode[mode].append(cpu_per_request(connection, frame, broker.pid,
                                                      requests))
        return {mode: statistics.median(values) for mode, values in per_mode.items()}
    finally:
        broker.terminate()
        broker.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds per mode")
    options = parser.parse_args()
    os.environ["ODRADEK_EVENT_LOOP"] = "asyncio"
    for name, figures in (
            ("in-process handling", asyncio.run(in_process(options.requests, options.rounds))),
            ("broker CPU, end to end", end_to_end(options.requests, options.rounds))):
        off, on = figures["off"], figures["on"]
        print(f"{name}: {off:.1f} us per produce request without a request quota, "
              f"{on:.1f} us with one ({on - off:+.1f} us, {(on - off) / off * 100:+.1f}%)")


if __name__ == "__main__":
    main()
