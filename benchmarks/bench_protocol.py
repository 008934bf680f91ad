"""Codec speed on this machine, next to the machine's own limits measured in the same run.

Run: .venv/bin/python benchmarks/bench_protocol.py

Targets (issue 2): decoding a small request (ApiVersions, Heartbeat) and encoding its
response under 20 us together; a MetadataResponse for 1,000 partitions encoded in under
5 ms; a ProduceRequest with a 1 MiB batch decoded without copying the batch.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from odradek.protocol.api_keys import API_SPECS
from odradek.protocol.framing import decode_request, encode_request, encode_response
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from odradek.protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from odradek.protocol.messages.heartbeat_request import HeartbeatRequest
from odradek.protocol.messages.heartbeat_response import HeartbeatResponse
from odradek.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from odradek.protocol.messages.produce_request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)


def per_call(fn: Callable[[], object], min_seconds: float = 0.5) -> float:
    """Seconds per call: the best of five timed rounds, each at least min_seconds / 5."""
    fn()
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds / 5:
            break
        n *= 2
    best = elapsed / n
    for _ in range(4):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def row(name: str, seconds: float, target: str = "", note: str = "") -> None:
    shown = f"{seconds * 1e6:9.2f} us" if seconds < 1e-3 else f"{seconds * 1e3:9.3f} ms"
    print(f"  {name:<58} {shown}  {target:<12} {note}")


def machine_limits(size: int) -> float:
    """Memory copy speed of a buffer of `size` bytes, in seconds per copy."""
    data = bytearray(size)
    return per_call(lambda: bytes(data))


def bench_small_requests() -> None:
    print("small request -> response (decode request frame + encode response frame)")
    versions = ApiVersionsResponse(
        api_keys=[ApiVersion(api_key=s.api_key, min_version=s.min_version,
                             max_version=s.max_version) for s in API_SPECS.values()]
    )
    frame = encode_request(ApiVersionsRequest("librdkafka", "2.6.0"), 3, 1, "rdkafka")[4:]

    def api_versions() -> None:
        request = decode_request(frame)
        encode_response(versions, request.api_version, request.correlation_id)

    row("ApiVersions v3 (response lists all 88 APIs)", per_call(api_versions), "< 20 us")
    hb_frame = encode_request(HeartbeatRequest("group-1", 7, "member-1-uuid", None), 4, 9, "c")[4:]
    hb_response = HeartbeatResponse()

    def heartbeat() -> None:
        request = decode_request(hb_frame)
        encode_response(hb_response, request.api_version, request.correlation_id)

    row("Heartbeat v4", per_call(heartbeat), "< 20 us")


def bench_metadata() -> None:
    print("MetadataResponse v12, 1,000 partitions (10 topics x 100, 3 replicas)")
    brokers = [MetadataResponseBroker(node_id=i, host=f"broker-{i}", port=9092) for i in range(3)]
    topics = [
        MetadataResponseTopic(
            name=f"topic-{t}",
            topic_id=uuid.uuid4(),
            partitions=[
                MetadataResponsePartition(
                    partition_index=p, leader_id=p % 3, leader_epoch=5,
                    replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2],
                )
                for p in range(100)
            ],
        )
        for t in range(10)
    ]
    response = MetadataResponse(brokers=brokers, cluster_id="odradek", controller_id=0,
                                topics=topics)
    encoded = response.encode(12)
    row("encode", per_call(lambda: response.encode(12)), "< 5 ms", f"{len(encoded)} bytes")
    row("decode", per_call(lambda: MetadataResponse.decode(encoded, 12)))


def bench_fetch_header() -> None:
    print("FetchResponse v16 header, 100 partitions (records sent apart, by sendfile)")
    response = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic_id=uuid.uuid4(),
                partitions=[
                    PartitionData(partition_index=p, high_watermark=1_000_000 + p,
                                  last_stable_offset=1_000_000 + p, log_start_offset=0)
                    for p in range(100)
                ],
            )
        ]
    )
    encoded = response.encode(16)
    row("encode", per_call(lambda: response.encode(16)), "", f"{len(encoded)} bytes")
    row("decode", per_call(lambda: FetchResponse.decode(encoded, 16)))


def bench_produce() -> None:
    print("ProduceRequest v11 carrying one 1 MiB batch")
    batch = bytes(range(256)) * 4096
    request = ProduceRequest(
        acks=-1, timeout_ms=30000,
        topic_data=[TopicProduceData(name="events", partition_data=[
            PartitionProduceData(index=0, records=batch)])],
    )
    frame = bytearray(encode_request(request, 11, 1, "producer")[4:])
    view = memoryview(frame)

    def decode() -> None:
        decoded = decode_request(view)
        records = decoded.body.topic_data[0].partition_data[0].records  # type: ignore[attr-defined]
        assert isinstance(records, memoryview)  # a view into the frame: not copied

    copy = machine_limits(len(frame))
    row("decode from the frame (batch stays in place)", per_call(decode), "",
        "no copy of the batch")
    row("encode", per_call(lambda: request.encode(11)), "",
        "copies the batch into the new frame")
    row("machine: one memory copy of the frame", copy)


def main() -> None:
    bench_small_requests()
    bench_metadata()
    bench_fetch_header()
    bench_produce()


if __name__ == "__main__":
    main()
