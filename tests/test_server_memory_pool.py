"""The socket server's memory accounting in process (queued.max.request.bytes): every byte
reserved for a request is given back, whatever the clients do, so the cap never shrinks;
connections wait for memory and read again; a request larger than the cap is admitted."""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from odradek.protocol.framing import Request, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.server.network import RequestContext, SocketServer

MIB = 1024 * 1024
TIMEOUT = 10.0  # no wait in a test is longer
LOOPS = ["asyncio", "uvloop"]  # uvloop where installed: the broker's loop then

pytestmark = pytest.mark.timeout(60)


def run(test: Callable[[], Awaitable[None]], loop: str) -> None:
    factory = None
    if loop == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(test(), 3 * TIMEOUT))


class Handler:
    """Answers ApiVersions; takes produce requests without an answer (as acks=0)."""

    def __init__(self) -> None:
        self.produced: list[int] = []  # sizes of the record sets received

    def supports(self, api_key: int, api_version: int) -> bool:
        return True

    def unsupported_api_versions(self) -> Message:
        return ApiVersionsResponse()

    async def handle(self, request: Request, context: RequestContext) -> Message | None:
        if isinstance(request.body, ProduceRequest):
            self.produced.append(len(request.body.topic_data[0].partition_data[0].records))
            return None
        return ApiVersionsResponse()


def produce_frame(size: int) -> bytes:
    data = PartitionProduceData(index=0, records=bytes(size))
    body = ProduceRequest(acks=0, timeout_ms=1000, topic_data=[
        TopicProduceData(name="t", partition_data=[data])])
    return encode_request(body, 9, 1)


API_VERSIONS = encode_request(ApiVersionsRequest(), 3, 7)


async def until(condition: Callable[[], object], what: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.005)
    assert condition(), what


@contextlib.asynccontextmanager
async def serving(**settings: int) -> AsyncIterator[tuple[SocketServer, int]]:
    server = SocketServer(Handler(), max_frame_size=100 * MIB,
                          connections_max_idle_ms=600_000, **settings)
    [bound] = await server.start([("PLAINTEXT", "127.0.0.1", 0)])
    try:
        yield server, bound.port
    finally:
        await server.stop()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(API_VERSIONS)
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    await reader.readexactly(size)


def assert_all_given_back(server: SocketServer) -> None:
    pool = server.pool
    assert (pool.held, pool.whole, pool.waiting, pool.waiting_held, pool.exempt) == (
        0, 0, {}, 0, None)


@pytest.mark.parametrize("loop", LOOPS)
def test_whatever_clients_do_every_byte_is_given_back(loop: str) -> None:
    run(whatever_clients_do, loop)


async def whatever_clients_do() -> None:
    async with serving(queued_max_request_bytes=3 * MIB) as (server, port):
        rng = random.Random(14)
        writers = []

        async def whole_requests() -> None:  # small and large, pipelined
            reader, writer = await connect(port)
            writers.append(writer)
            for _ in range(rng.randrange(1, 5)):
                writer.write(produce_frame(rng.choice([10, 50_000, 300_000, 2 * MIB])))
            await api_versions(reader, writer)  # answered after the produces: all handled

        # Many at once, more than the cap: they wait for memory in turn, and all finish.
        await asyncio.gather(*(whole_requests() for _ in range(12)))
        assert server.pool.waits > 0
        for i in range(30):  # then requests that never finish: they hold memory
            _, writer = await connect(port)
            writers.append(writer)
            if i % 3 == 0:  # a large request cut short
                frame = produce_frame(rng.randrange(100_000, 4 * MIB))
                writer.write(frame[: rng.randrange(4, 500_000)])
            elif i % 3 == 1:  # a prefix alone
                writer.write(struct.pack(">i", 90 * MIB))
            else:  # a small request cut short
                writer.write(API_VERSIONS[: rng.randrange(1, len(API_VERSIONS))])
            await writer.drain()
        await until(lambda: len(server.connections) == 42, "all connected")
        await until(lambda: sum(c.reader.buffered > 0 for c in server.connections) == 30,
                    "the partial requests arrived")
        for writer in writers:
            writer.close()
        await until(lambda: not server.connections, "all closed")
        assert_all_given_back(server)


@pytest.mark.parametrize("loop", LOOPS)
def test_connections_wait_for_memory_then_read_again(loop: str) -> None:
    run(wait_for_memory, loop)


async def wait_for_memory() -> None:
    async with serving(queued_max_request_bytes=2 * MIB) as (server, port):
        holders = []
        for _ in range(3):  # 1.5 MiB each of 2 MiB requests: more than the cap
            _, writer = await connect(port)
            writer.write(produce_frame(2 * MIB)[: 3 * MIB // 2])
            holders.append(writer)
        await until(lambda: len(server.pool.waiting) == 2, "connections waiting for memory")
        # Each step is reserved before it is read. When every partial frame waits, the
        # first in line reads on past the cap (here in vain: its client has stalled), so
        # the pool holds at most the cap and that one frame.
        assert server.pool.held <= 2 * MIB + 2 * MIB
        small_reader, small_writer = await connect(port)
        await api_versions(small_reader, small_writer)  # small requests still flow

        handler = server.handler
        assert isinstance(handler, Handler)
        _, writer = await connect(port)
        writer.write(produce_frame(MIB))
        await asyncio.sleep(0.2)
        assert handler.produced == []  # it waits behind the others
        for holder in holders:
            holder.close()
        await until(lambda: handler.produced, "the waiting request read and handled")
        # Alone, a request three times the cap is admitted.
        writer.write(produce_frame(6 * MIB))
        await until(lambda: len(handler.produced) == 2, "the large request handled")
        assert handler.produced[1] == 6 * MIB
        writer.close()
        small_writer.close()
        await until(lambda: not server.connections, "all closed")
        assert_all_given_back(server)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_stalled_request_is_dropped_and_freed(loop: str) -> None:
    run(stalled_request, loop)


async def stalled_request() -> None:
    async with serving(queued_max_request_bytes=64 * MIB,
                         request_receive_timeout_ms=200) as (server, port):
        reader, writer = await connect(port)
        writer.write(produce_frame(MIB)[:300_000])
        await until(lambda: server.pool.held > 0, "the partial request held")
        idle_reader, idle_writer = await connect(port)
        await api_versions(idle_reader, idle_writer)
        async with asyncio.timeout(TIMEOUT):
            assert await reader.read() == b""  # closed by the server
        assert_all_given_back(server)
        await api_versions(idle_reader, idle_writer)  # nothing partial: not dropped
        idle_writer.close()
        writer.close()
