"""Client quota requests over a plain socket, as kafka-configs.sh sends them (neither
confluent-kafka 2.x nor kafka-python has AlterClientQuotas or DescribeClientQuotas), and any
other request whose exact version a test wants to choose."""

from __future__ import annotations

import socket
import struct
from typing import Any

from odradek.protocol.framing import decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages import alter_client_quotas_request as alter
from odradek.protocol.messages import describe_client_quotas_request as describe
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic


class Wire:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def call(self, body: Message, version: int = 1, client_id: str = "quota-admin") -> Any:
        self.correlation += 1
        self.sock.sendall(encode_request(body, version, self.correlation, client_id))
        (size,) = struct.unpack(">i", self._exactly(4))
        got, response = decode_response(self._exactly(size), body.API_KEY,  # type: ignore[attr-defined]
                                        version)
        assert got == self.correlation
        return response

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "closed by the broker"
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


def alter_quotas(wire: Wire, entity: dict[str, str | None], ops: dict[str, float | None],
                 validate_only: bool = False, version: int = 1) -> tuple[int, str | None]:
    response = wire.call(alter.AlterClientQuotasRequest(entries=[alter.EntryData(
        entity=[alter.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()],
        ops=[alter.OpData(key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()])],
        validate_only=validate_only), version)
    (entry,) = response.entries
    return entry.error_code, entry.error_message


def describe_quotas(wire: Wire, components: list[describe.ComponentData] | None = None,
                    strict: bool = False, version: int = 1) -> dict[tuple[Any, ...], Any]:
    response = wire.call(describe.DescribeClientQuotasRequest(
        components=components or [], strict=strict), version)
    assert response.error_code == 0, response.error_message
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def existing(bootstrap: str, names: list[str]) -> set[str]:
    """Which of the topics exist, by Metadata v12 (never creating one)."""
    wire = Wire(bootstrap)
    try:
        response = wire.call(MetadataRequest(
            topics=[MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False), 12)
    finally:
        wire.close()
    return {t.name for t in response.topics if t.error_code == 0}
