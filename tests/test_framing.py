"""Frames and headers: which header version frames which API version, byte for byte."""

from __future__ import annotations

import pytest

from odradek.cli.main import main as odradek
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import DecodeError, EncodeError
from odradek.protocol.framing import (
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersion, ApiVersionsResponse
from odradek.protocol.messages.controlled_shutdown_request import ControlledShutdownRequest
from odradek.protocol.messages.fetch_request import FetchRequest, ForgottenTopic
from odradek.protocol.messages.metadata_request import MetadataRequest
from odradek.protocol.messages.metadata_response import MetadataResponse


def test_request_header_v1_and_v2_keep_a_classic_client_id() -> None:
    v1 = encode_request(MetadataRequest(topics=None), 8, correlation_id=5, client_id="app")
    # size, api key 3, version 8, correlation 5, INT16-prefixed client id, body
    assert v1[4:17] == b"\x00\x03\x00\x08\x00\x00\x00\x05\x00\x03app"
    v2 = encode_request(MetadataRequest(topics=None), 9, correlation_id=5, client_id="app")
    # Header v2 still writes the client id with an INT16 length, then an empty tag section.
    assert v2[4:18] == b"\x00\x03\x00\x09\x00\x00\x00\x05\x00\x03app\x00"
    assert decode_request(v2[4:]).header.client_id == "app"
    null_id = encode_request(MetadataRequest(topics=None), 9, correlation_id=5, client_id=None)
    assert null_id[12:14] == b"\xff\xff"


def test_controlled_shutdown_v0_uses_request_header_v0() -> None:
    frame = encode_request(ControlledShutdownRequest(broker_id=1), 0, correlation_id=2)
    assert frame[4:] == b"\x00\x07\x00\x00\x00\x00\x00\x02" + b"\x00\x00\x00\x01"
    header, _, body_start = decode_request_header(frame[4:])
    assert (header.correlation_id, body_start) == (2, 8)


def test_api_versions_responses_always_use_header_v0() -> None:
    body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    frame = encode_response(body, 3, correlation_id=77)
    # correlation id, then the flexible body at once: no tag section in the header.
    assert frame[4:10] == b"\x00\x00\x00\x4d\x00\x23"
    assert decode_response(frame[4:], ApiKey.API_VERSIONS, 3) == (77, body)


@pytest.mark.parametrize("sent_version", [1, 2, 3, 4])
def test_an_api_versions_answer_in_v0_decodes_whatever_version_was_sent(
        sent_version: int) -> None:
    """KIP-511: a broker that does not know the ApiVersions version it got answers in v0
    with UNSUPPORTED_VERSION and its ranges, so that the client can retry."""
    body = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=0, max_version=2),
        ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=8)])
    frame = encode_response(body, 0, correlation_id=9)
    assert decode_response(frame[4:], ApiKey.API_VERSIONS, sent_version) == (9, body)


def test_other_responses_that_do_not_decode_still_fail() -> None:
    frame = encode_response(MetadataResponse(), 8, correlation_id=1)
    with pytest.raises(DecodeError):
        decode_response(frame[4:], ApiKey.METADATA, 9)
    with pytest.raises(DecodeError):
        decode_response(b"\x00\x00\x00\x01\x00", ApiKey.API_VERSIONS, 0)


def test_flexible_responses_use_header_v1() -> None:
    flexible = encode_response(MetadataResponse(), 9, correlation_id=1)
    classic = encode_response(MetadataResponse(), 8, correlation_id=1)
    assert flexible[4:9] == b"\x00\x00\x00\x01\x00"  # correlation id + empty tag section
    assert decode_response(flexible[4:], ApiKey.METADATA, 9)[1] == MetadataResponse()
    assert decode_response(classic[4:], ApiKey.METADATA, 8)[1] == MetadataResponse()


def test_newer_api_versions_request_header_still_decodes() -> None:
    """KIP-511: a client may send an ApiVersions version we do not know; its header must
    still decode so that the broker can answer UNSUPPORTED_VERSION with its ranges."""
    frame = bytearray(encode_request(ApiVersionsRequest("c", "1"), 4, correlation_id=3)[4:])
    frame[2:4] = (API_SPECS[ApiKey.API_VERSIONS].max_version + 5).to_bytes(2, "big")
    header, api, _ = decode_request_header(frame)
    assert (api.name, header.correlation_id) == ("ApiVersions", 3)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["errors", "3"], "UNKNOWN_TOPIC_OR_PARTITION"), (["apis"], "ApiVersions"),
     (["decode", "0012000300000007000363", "6c690002780231", "00"], "client_software_name='x'")],
)
def test_cli(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert odradek(argv) == 0
    assert expected in capsys.readouterr().out


def test_cli_reports_undecodable_frames(capsys: pytest.CaptureFixture[str]) -> None:
    assert odradek(["decode", "0012000300"]) == 1
    assert "cannot decode" in capsys.readouterr().err


def test_a_field_the_version_lacks_must_keep_its_default_unless_ignorable() -> None:
    with pytest.raises(EncodeError, match="forgotten_topics_data exists only in versions 7"):
        FetchRequest(forgotten_topics_data=[ForgottenTopic(topic="t")]).encode(6)
    # max_bytes (3+) is ignorable: an older version drops it, as Kafka does.
    assert FetchRequest(max_bytes=5).encode(2) == FetchRequest().encode(2)
