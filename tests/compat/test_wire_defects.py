"""Two small defects of issue 14 (part 6), against a real broker process: Metadata v10/v11
naming a topic by id, and clients that hang up in the middle of a fetch response."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from support.broker import BrokerProcess
from test_wire import Wire, fetch_request, produce_request

from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import encode_request
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.metadata_response import MetadataResponse


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # asyncio's own loop: its loop.sendfile is what raised "Transport is closing".
    process = BrokerProcess(tmp_path_factory.mktemp("defects"),
                            env={"ODRADEK_EVENT_LOOP": "asyncio"}).start()
    yield process
    assert process.stop() == 0
    log = process.log_text()
    assert "Traceback" not in log and " ERROR " not in log, log


def metadata(wire: Wire, topics: list[MetadataRequestTopic], version: int) -> MetadataResponse:
    response = wire.call(MetadataRequest(topics=topics, allow_auto_topic_creation=False), version)
    assert isinstance(response, MetadataResponse)
    return response


def test_metadata_by_topic_id(broker: BrokerProcess) -> None:
    """Kafka 3.9: v10 and v11 carry topic ids but cannot answer a null name, so a topic
    asked by id (or with an id at all) is INVALID_REQUEST for every topic of the request,
    a null name answered as ""; from v12 a topic is looked up by its id, and an unknown id
    is UNKNOWN_TOPIC_ID. The connection stays open either way."""
    wire = Wire(broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name="by-id")],
                              allow_auto_topic_creation=True), 12)
    topic_id = metadata(wire, [MetadataRequestTopic(name="by-id")], 12).topics[0].topic_id
    unknown = uuid.uuid4()
    for version in (10, 11):
        for asked in ([MetadataRequestTopic(name=None, topic_id=unknown)],
                      [MetadataRequestTopic(name=None, topic_id=topic_id)],
                      [MetadataRequestTopic(name="by-id", topic_id=topic_id),
                       MetadataRequestTopic(name="other")]):
            response = metadata(wire, asked, version)
            assert [(t.error_code, t.name, t.topic_id, t.partitions) for t in response.topics] \
                == [(ErrorCode.INVALID_REQUEST, t.name or "", t.topic_id, []) for t in asked]
            assert response.brokers == []
        by_name = metadata(wire, [MetadataRequestTopic(name="by-id")], version).topics[0]
        assert (by_name.error_code, by_name.topic_id) == (0, topic_id)
    [missing] = metadata(wire, [MetadataRequestTopic(name=None, topic_id=unknown)], 12).topics
    assert (missing.error_code, missing.name, missing.topic_id) == (
        ErrorCode.UNKNOWN_TOPIC_ID, None, unknown)
    [found] = metadata(wire, [MetadataRequestTopic(name=None, topic_id=topic_id)], 12).topics
    assert (found.error_code, found.name, len(found.partitions)) == (0, "by-id", 1)
    assert wire.call(ApiVersionsRequest(), 3).error_code == 0  # type: ignore[attr-defined]
    wire.close()


def test_clients_that_hang_up_mid_fetch_are_not_errors(broker: BrokerProcess) -> None:
    """1,500 resets gave 141 ERROR tracebacks (RuntimeError: Transport is closing): a
    client that goes away is expected, logged at DEBUG."""
    topic = "resets"
    wire = Wire(broker.port)
    wire.call(MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=True), 12)
    for _ in range(6):  # 3 MB: regions of 64 KiB and more go out with sendfile
        records = [(b"k%d" % j, bytes([j % 251]) * 10_000) for j in range(50)]
        result = wire.call(produce_request(topic, records), 9)
        assert result.responses[0].partition_responses[0].error_code == 0  # type: ignore[attr-defined]
    fetch = encode_request(fetch_request(topic, 0, max_wait_ms=0), 11, 1, "resets")
    reset = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a RST
    for i in range(300):
        sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(fetch)
        if i % 3:
            sock.recv(1000)  # the response has begun: the reset lands mid-response
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
        sock.close()
    # Still serving, and (the fixture checks) nothing logged as an error.
    assert len(wire.call(fetch_request(topic, 0, max_wait_ms=0), 11)  # type: ignore[attr-defined]
               .responses[0].partitions[0].records) > 1_000_000
    wire.close()

