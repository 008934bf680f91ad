"""The broker's client for requests to other brokers, against real broker processes:
the ApiVersions handshake, round trips, pipelining, brokers that are down, stopped,
restarted or paused; and, without a broker, version selection, the reconnect backoff and
the inter-broker APIs' framing."""

from __future__ import annotations

import asyncio
import random
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from support.broker import BrokerProcess

from odradek.broker.inter_broker_client import (
    BrokerConnection,
    DisconnectedError,
    InterBrokerClient,
    RequestBuilder,
    RequestTimeoutError,
    check_version,
    choose_version,
    reconnect_backoff_ms,
)
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import UnsupportedVersionError
from odradek.protocol.framing import (
    FrameDecoder,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from odradek.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from odradek.protocol.messages.create_topics_response import CreateTopicsResponse
from odradek.protocol.messages.fetch_request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ReplicaState,
)
from odradek.protocol.messages.fetch_response import FetchResponse
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.metadata_response import MetadataResponse
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from odradek.protocol.messages.produce_response import ProduceResponse
from odradek.protocol.messages.vote_request import VoteRequest
from odradek.protocol.records import build_record_batch, decode_records, iter_batch_headers

HOST = "127.0.0.1"
TEST_TIMEOUT_S = 20  # no test waits longer than this for its coroutine
T = TypeVar("T")

pytestmark = pytest.mark.timeout(60)


def run(test: Callable[[], Awaitable[T]], loop: str = "asyncio") -> T:
    """Runs an async test body, bounded, on asyncio's loop or uvloop (the broker's)."""
    factory = None
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(asyncio.wait_for(test(), TEST_TIMEOUT_S))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker the tests only talk to."""
    process = BrokerProcess(tmp_path_factory.mktemp("inter-broker")).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own, which it stops, restarts or pauses."""
    process = BrokerProcess(tmp_path / "data").start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.process.send_signal(signal.SIGCONT)  # a test that failed paused may leave it
    process.kill()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture
def dead_port() -> Iterator[int]:
    """A port nobody listens on: bound but not listening, so no one else takes it."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        yield sock.getsockname()[1]


def create_topic(name: str, partitions: int = 1) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10_000)


def produce(topic: str, values: list[bytes]) -> ProduceRequest:
    batch = build_record_batch([(None, v) for v in values],
                               base_timestamp=int(time.time() * 1000))
    return ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=batch)])])


def fetch(topic_id: Any, max_wait_ms: int = 0, min_bytes: int = 0,
          max_bytes: int = 1 << 20) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        topics=[FetchTopic(topic_id=topic_id, partitions=[FetchPartition(
                            partition=0, fetch_offset=0, partition_max_bytes=max_bytes)])])


def values_of(response: Message) -> list[bytes | None]:
    data = bytes(cast(FetchResponse, response).responses[0].partitions[0].records or b"")
    return [r.value for pos, h in iter_batch_headers(data) for r in decode_records(data, pos, h)]


async def topic_with_records(client: InterBrokerClient, topic: str,
                             values: list[bytes]) -> Any:
    """Creates a topic, appends `values`, and returns its topic id."""
    created = cast(CreateTopicsResponse, await client.send(1, create_topic(topic)))
    assert created.topics[0].error_code == ErrorCode.NONE, created
    if values:
        produced = cast(ProduceResponse, await client.send(1, produce(topic, values)))
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    metadata = cast(MetadataResponse, await client.send(
        1, MetadataRequest(topics=[MetadataRequestTopic(name=topic)])))
    return metadata.topics[0].topic_id


def client_for(broker: BrokerProcess, **settings: Any) -> InterBrokerClient:
    return InterBrokerClient({1: (HOST, broker.port)}, client_id="broker-2-test",
                             rng=random.Random(7), **settings)


# ---- against a broker -----------------------------------------------------------------------


def test_handshake_keeps_the_brokers_version_ranges(broker: BrokerProcess) -> None:
    async def test() -> None:
        connection = BrokerConnection(HOST, broker.port)
        await connection.connect()
        assert connection.connected
        assert connection.api_versions[ApiKey.API_VERSIONS] == (0, 4)
        assert connection.api_versions[ApiKey.METADATA][1] == API_SPECS[ApiKey.METADATA].max_version
        assert ApiKey.VOTE not in connection.api_versions  # a KRaft API: never served
        assert connection.version_for(ApiKey.FETCH) == API_SPECS[ApiKey.FETCH].max_version
        connection.close()
        await connection.wait_closed()
        assert not connection.connected
        with pytest.raises(DisconnectedError, match="closed locally"):
            await connection.send(MetadataRequest(topics=[]))

    run(test)


def test_metadata_produce_and_fetch_round_trips(broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(broker)
        try:
            topic_id = await topic_with_records(client, "round-trip", [b"a", b"b", b"c"])
            # The highest version both know (Fetch v13+ names topics by id)...
            response = await client.send(1, fetch(topic_id))
            assert values_of(response) == [b"a", b"b", b"c"]
            # ...or the one asked for (v11 names topics).
            older = FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic="round-trip", partitions=[
                FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])])
            assert values_of(await client.send(1, older, api_version=11)) == [b"a", b"b", b"c"]
            # A builder fills in the body for the version chosen: a consumer's fetch here
            # (replica id -1), as the broker does not serve follower fetches yet.
            built: list[int] = []

            def build(version: int) -> Message:
                built.append(version)
                return fetch(topic_id)

            response = await client.send(1, RequestBuilder(ApiKey.FETCH, build, max_version=16))
            assert built == [16] and values_of(response) == [b"a", b"b", b"c"]
        finally:
            await client.close()

    run(test)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_pipelined_requests_complete_in_order(broker: BrokerProcess, loop: str) -> None:
    async def test() -> None:
        client = client_for(broker)
        try:
            topic_id = await topic_with_records(client, f"pipelined-{loop}", [b"x" * 100] * 5)
            connection = await client.connection(1)
            requests: list[Message] = [
                [MetadataRequest(topics=[MetadataRequestTopic(name=f"pipelined-{loop}")]),
                 fetch(topic_id), ApiVersionsRequest()][i % 3] for i in range(300)]
            tasks = [asyncio.create_task(connection.send(r)) for r in requests]
            await asyncio.sleep(0)  # every task has written its request and now waits
            assert connection.in_flight == len(requests)
            responses = await asyncio.gather(*tasks)
            for request, response in zip(requests, responses, strict=True):
                assert response.API_KEY == request.API_KEY  # type: ignore[attr-defined]
                if isinstance(response, FetchResponse):
                    assert len(values_of(response)) == 5
            assert connection.in_flight == 0 and connection.connected
        finally:
            await client.close()

    run(test, loop)


def test_an_api_the_broker_lacks_fails_before_sending(broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(broker)
        try:
            with pytest.raises(UnsupportedVersionError, match="does not support Vote"):
                await client.send(1, VoteRequest())
            with pytest.raises(UnsupportedVersionError, match=r"Metadata v99 is not supported"):
                await client.send(1, MetadataRequest(), api_version=99)
            with pytest.raises(TypeError, match="not a request"):
                await client.send(1, MetadataResponse())
            # Nothing was sent: the connection still works.
            assert isinstance(await client.send(1, MetadataRequest(topics=[])), MetadataResponse)
        finally:
            await client.close()

    run(test)


def test_a_response_beyond_the_frame_limit_closes_the_connection(broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(broker)
        small = client_for(broker, max_frame_size=4096)
        try:
            topic_id = await topic_with_records(client, "large", [b"v" * 20_000])
            connection = await small.connection(1)
            big, behind = (asyncio.create_task(connection.send(r))
                           for r in (fetch(topic_id), MetadataRequest(topics=[])))
            for task in (big, behind):
                with pytest.raises(DisconnectedError, match="larger than the limit of 4096"):
                    await task
            assert not connection.connected
        finally:
            await client.close()
            await small.close()

    run(test)


def test_a_cancelled_request_leaves_the_connection_working(broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(broker)
        try:
            topic_id = await topic_with_records(client, "cancelled", [])
            connection = await client.connection(1)
            long_poll = asyncio.create_task(connection.send(fetch(topic_id, 300, 1)))
            await asyncio.sleep(0.05)
            long_poll.cancel()
            # Its answer still comes first, and is dropped; the next one is this one's.
            response = await connection.send(MetadataRequest(topics=[]))
            assert isinstance(response, MetadataResponse)
            assert long_poll.cancelled() and connection.connected
        finally:
            await client.close()

    run(test)


def test_update_endpoints_and_close(broker: BrokerProcess, dead_port: int) -> None:
    async def test() -> None:
        client = InterBrokerClient({1: (HOST, dead_port)}, rng=random.Random(1))
        with pytest.raises(DisconnectedError, match="cannot connect"):
            await client.send(1, MetadataRequest(topics=[]))
        # The broker "moved": no backoff for a new address.
        client.update_endpoints({1: (HOST, broker.port)})
        assert isinstance(await client.send(1, MetadataRequest(topics=[])), MetadataResponse)
        topic_id = await topic_with_records(client, "long-poll", [])
        # close() fails a request in flight (a long poll on an empty partition) at once.
        long_poll = asyncio.create_task(client.send(1, fetch(topic_id, 10_000, 1)))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await client.close()
        with pytest.raises(ConnectionError):
            await long_poll
        assert time.monotonic() - started < 1
        with pytest.raises(DisconnectedError, match="client is closed"):
            await client.send(1, MetadataRequest(topics=[]))
        # A broker that left the set is not reachable through the client any more.
        other = InterBrokerClient({1: (HOST, broker.port)})
        await other.send(1, MetadataRequest(topics=[]))
        other.update_endpoints({})
        with pytest.raises(DisconnectedError, match="no endpoint known for broker 1"):
            await other.send(1, MetadataRequest(topics=[]))
        await other.close()

    run(test)


# ---- brokers that are down, stopped, restarted or paused -----------------------------------


def test_a_port_nobody_listens_on_fails_fast_and_backs_off(dead_port: int) -> None:
    async def test() -> None:
        with pytest.raises(DisconnectedError, match="cannot connect"):
            await BrokerConnection(HOST, dead_port).connect()
        client = InterBrokerClient({3: (HOST, dead_port)}, rng=random.Random(3))
        waits = []
        for _ in range(4):
            started = time.monotonic()
            with pytest.raises(DisconnectedError, match="cannot connect"):
                await client.send(3, MetadataRequest(topics=[]))
            waits.append(time.monotonic() - started)
        assert waits[0] < 1
        # Each attempt waited for the backoff of the one before: 50, 100, 200 ms +-20%.
        for attempt, waited in enumerate(waits[1:]):
            assert 0.8 * 0.05 * 2**attempt - 0.01 <= waited < 0.05 * 2**attempt + 1.5
        await client.close()

    run(test)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_broker_stopped_with_requests_in_flight_fails_them(own_broker: BrokerProcess,
                                                             sig: int) -> None:
    async def test() -> None:
        client = client_for(own_broker)
        try:
            topic_id = await topic_with_records(client, "stopped", [])
            connection = await client.connection(1)
            # A long poll the broker holds, and requests queued behind it.
            requests = [fetch(topic_id, 10_000, 1)] + [MetadataRequest(topics=[])] * 10
            tasks = [asyncio.create_task(connection.send(r)) for r in requests]
            await asyncio.sleep(0.2)
            started = time.monotonic()
            await asyncio.to_thread(own_broker.stop, sig)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert time.monotonic() - started < 10
            failures = [r for r in results if isinstance(r, BaseException)]
            assert failures and all(isinstance(f, DisconnectedError) for f in failures), results
            assert not connection.connected
            with pytest.raises(DisconnectedError, match="cannot connect"):
                await client.send(1, MetadataRequest(topics=[]))
        finally:
            await client.close()

    run(test)


def test_the_client_reconnects_after_a_restart(own_broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(own_broker)
        try:
            await client.send(1, MetadataRequest(topics=[]))
            first = await client.connection(1)
            await asyncio.to_thread(own_broker.stop)
            with pytest.raises(DisconnectedError):
                await client.send(1, MetadataRequest(topics=[]))
            assert not client.is_connected(1)
            await asyncio.to_thread(own_broker.start)  # the same port again
            started = time.monotonic()
            response = await client.send(1, MetadataRequest(topics=[]))
            assert isinstance(response, MetadataResponse)
            assert time.monotonic() - started < 3  # a backoff of at most a second, then up
            assert client.is_connected(1) and await client.connection(1) is not first
        finally:
            await client.close()

    run(test)


def test_a_paused_broker_times_requests_out(own_broker: BrokerProcess) -> None:
    async def test() -> None:
        client = client_for(own_broker, connection_setup_timeout_ms=500)
        assert own_broker.process is not None
        try:
            await client.send(1, create_topic("paused"))
            connection = await client.connection(1)
            own_broker.process.send_signal(signal.SIGSTOP)
            try:
                # More than the socket buffers hold: the last ones wait to be written.
                large = produce("paused", [b"p" * (1 << 20)])
                behind = [asyncio.create_task(connection.send(large)) for _ in range(32)]
                await asyncio.sleep(0.2)
                assert 0 < connection.in_flight < len(behind)
                started = time.monotonic()
                with pytest.raises(RequestTimeoutError, match="no answer within 400 ms"):
                    await client.send(1, MetadataRequest(topics=[]), timeout_ms=400)
                assert 0.35 <= time.monotonic() - started < 3
                # The connection is closed with it: what was queued on it fails at once.
                for task in behind:
                    with pytest.raises(DisconnectedError, match="got no answer"):
                        await task
                assert not connection.connected
                # A new connection is accepted (by the kernel) but never answered: a short
                # send gives up first, a longer one shares the attempt until its setup
                # timeout.
                started = time.monotonic()
                with pytest.raises(RequestTimeoutError, match="no connection to broker 1"):
                    await client.send(1, MetadataRequest(topics=[]), timeout_ms=200)
                with pytest.raises(DisconnectedError, match="no answer within 500 ms"):
                    await client.send(1, MetadataRequest(topics=[]))
                assert 0.45 <= time.monotonic() - started < 4
            finally:
                own_broker.process.send_signal(signal.SIGCONT)
            response = await client.send(1, MetadataRequest(topics=[]), timeout_ms=10_000)
            assert isinstance(response, MetadataResponse)
        finally:
            await client.close()

    run(test)


# ---- a peer that breaks the protocol ------------------------------------------------------


class _BadPeer:
    """Not a broker: a loopback peer that answers ApiVersions v4 in v0 with
    UNSUPPORTED_VERSION (a broker that knows only v0-2), then ApiVersions v2, then answers
    every other request with the wrong correlation id. It shows what no real broker does."""

    def __init__(self) -> None:
        self.api_versions_seen: list[int] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ranges = [ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=2),
                  ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12)]
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                header, _, _ = decode_request_header(frame)
                version = header.request_api_version
                if header.request_api_key == ApiKey.API_VERSIONS:
                    self.api_versions_seen.append(version)
                    error = ErrorCode.UNSUPPORTED_VERSION if version > 2 else ErrorCode.NONE
                    writer.write(encode_response(ApiVersionsResponse(
                        error_code=error, api_keys=ranges), min(version, 0 if error else 2),
                        header.correlation_id))
                else:
                    writer.write(encode_response(MetadataResponse(), version,
                                                 header.correlation_id + 1))
        writer.close()


def test_an_older_api_versions_and_a_wrong_correlation_id() -> None:
    async def test() -> None:
        peer = _BadPeer()
        server = await asyncio.start_server(peer.serve, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            connection = BrokerConnection(HOST, port)
            await connection.connect()
            # KIP-511: v4 refused in v0, then v2, the highest both know.
            assert peer.api_versions_seen == [4, 2]
            assert connection.version_for(ApiKey.METADATA) == 12
            first, second = (asyncio.create_task(connection.send(MetadataRequest(topics=[])))
                             for _ in range(2))
            for task in (first, second):
                with pytest.raises(DisconnectedError, match="correlation id mismatch"):
                    await task
            assert not connection.connected
        finally:
            server.close()
            await server.wait_closed()

    run(test)


# ---- without a broker ----------------------------------------------------------------------


def test_choose_version_takes_the_highest_both_support() -> None:
    ours = API_SPECS[ApiKey.METADATA].max_version
    assert choose_version(ApiKey.METADATA, {ApiKey.METADATA: (0, ours + 5)}) == ours
    assert choose_version(ApiKey.METADATA, {ApiKey.METADATA: (4, 7)}) == 7
    assert choose_version(ApiKey.METADATA, {ApiKey.METADATA: (4, 12)}, max_version=9) == 9
    with pytest.raises(UnsupportedVersionError, match="does not support LeaderAndIsr"):
        choose_version(ApiKey.LEADER_AND_ISR, {ApiKey.METADATA: (0, 12)})
    with pytest.raises(UnsupportedVersionError, match="no version of Metadata"):
        choose_version(ApiKey.METADATA, {ApiKey.METADATA: (ours + 1, ours + 3)})
    with pytest.raises(UnsupportedVersionError, match="no version of Metadata"):
        choose_version(ApiKey.METADATA, {ApiKey.METADATA: (5, 12)}, max_version=4)
    with pytest.raises(UnsupportedVersionError, match="unknown API key 999"):
        choose_version(999, {999: (0, 1)})


def test_an_unstable_latest_version_is_never_chosen() -> None:
    spec = next(s for s in API_SPECS.values() if s.latest_version_unstable)
    peer = {spec.api_key: (spec.min_version, spec.max_version)}
    assert choose_version(spec.api_key, peer) == spec.max_version - 1


def test_check_version() -> None:
    check_version(ApiKey.FETCH, 12, {ApiKey.FETCH: (4, 17)})
    for version, peer in ((3, (4, 17)), (18, (4, 18))):
        with pytest.raises(UnsupportedVersionError, match=f"Fetch v{version} is not supported"):
            check_version(ApiKey.FETCH, version, {ApiKey.FETCH: peer})
    with pytest.raises(UnsupportedVersionError, match="the broker's none"):
        check_version(ApiKey.FETCH, 12, {})


def test_reconnect_backoff_doubles_up_to_the_maximum_with_jitter() -> None:
    rng = random.Random(5)
    for failures, base in [(0, 50), (1, 100), (2, 200), (3, 400), (4, 800), (5, 1000),
                           (40, 1000), (10_000, 1000)]:
        for _ in range(50):
            assert 0.8 * base <= reconnect_backoff_ms(failures, rng) <= 1.2 * base
    assert reconnect_backoff_ms(3, rng, initial_ms=100, max_ms=100) <= 120


def test_a_fetch_builder_names_the_follower_in_each_version() -> None:
    """Fetch moved the follower's id from ReplicaId (v0-14) to ReplicaState (v15+)."""

    def follower_fetch(version: int) -> Message:
        if version >= 15:
            return FetchRequest(replica_state=ReplicaState(replica_id=2, replica_epoch=7))
        return FetchRequest(replica_id=2)

    builder = RequestBuilder(ApiKey.FETCH, follower_fetch)
    for version in (4, 14, 15, 17):
        request = decode_request(encode_request(builder.build(version), version, 1)[4:])
        body = cast(FetchRequest, request.body)
        replica = body.replica_state.replica_id if version >= 15 else body.replica_id
        assert replica == 2


INTER_BROKER_APIS = [ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA,
                     ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION,
                     ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.FETCH, ApiKey.API_VERSIONS,
                     ApiKey.METADATA]


@pytest.mark.parametrize("api_key", INTER_BROKER_APIS, ids=lambda k: API_SPECS[k].name)
def test_inter_broker_apis_frame_in_every_version(api_key: int) -> None:
    spec = API_SPECS[api_key]
    for version in range(spec.min_version, spec.max_version + 1):
        request = spec.request_class()
        decoded = decode_request(encode_request(request, version, 41, "controller-1")[4:])
        assert (decoded.body, decoded.correlation_id) == (request, 41)
        response = spec.response_class()
        frame = encode_response(response, version, 42)
        assert decode_response(frame[4:], api_key, version) == (42, response)
