"""Bad input to the codec: truncated, oversized, random and mutated bytes raise the codec's
own errors, never IndexError or struct.error, never hang, and never allocate what a lying
length field claims."""

from __future__ import annotations

import contextlib
import random
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from message_values import SPECS, ValueMaker

from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.codegen.spec import MessageSpec
from odradek.protocol.exceptions import (
    DecodeError,
    FrameTooLargeError,
    ProtocolError,
    UnsupportedVersionError,
)
from odradek.protocol.framing import (
    FrameDecoder,
    decode_request,
    encode_request,
)
from odradek.protocol.messages.metadata_response import MetadataResponse
from odradek.protocol.messages.produce_request import ProduceRequest

API_MESSAGES = [s for s in SPECS if s.type in ("request", "response")]
# The lowest, the highest and a flexible version of each: where layouts differ most.
FUZZ_CASES = sorted(
    {(spec.name, v) for spec in API_MESSAGES
     for v in (spec.valid_versions.low, spec.valid_versions.high,
               max(spec.flexible_versions.low, spec.valid_versions.low))
     if v in spec.versions}
)
BY_NAME = {spec.name: spec for spec in SPECS}
FUZZ = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


def _valid_bytes(spec: MessageSpec, version: int, seed: int = 0) -> tuple[type, bytes]:
    value = ValueMaker(spec, version, seed).struct(spec.struct)
    return type(value), value.encode(version)


def _decode_or_protocol_error(cls: type, data: bytes, version: int) -> None:
    with contextlib.suppress(ProtocolError):
        cls.decode(data, version)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "version"), FUZZ_CASES, ids=[f"{n}-v{v}" for n, v in FUZZ_CASES])
def test_every_truncation_is_a_decode_error(name: str, version: int) -> None:
    cls, data = _valid_bytes(BY_NAME[name], version)
    for end in range(len(data)):
        with pytest.raises(DecodeError):
            cls.decode(data[:end], version)


@pytest.mark.parametrize(("name", "version"), FUZZ_CASES, ids=[f"{n}-v{v}" for n, v in FUZZ_CASES])
def test_random_and_mutated_bytes(name: str, version: int) -> None:
    cls, data = _valid_bytes(BY_NAME[name], version)

    @FUZZ
    @given(st.binary(max_size=300), st.data())
    def check(noise: bytes, draw: st.DataObject) -> None:
        _decode_or_protocol_error(cls, noise, version)
        mutated = bytearray(data)
        for _ in range(draw.draw(st.integers(1, 4))):
            if mutated:
                i = draw.draw(st.integers(0, len(mutated) - 1))
                mutated[i] = draw.draw(st.integers(0, 255))
        _decode_or_protocol_error(cls, bytes(mutated), version)

    check()


def test_wrong_version_is_an_unsupported_version_error() -> None:
    with pytest.raises(UnsupportedVersionError):
        MetadataResponse().encode(99)
    with pytest.raises(UnsupportedVersionError):
        MetadataResponse.decode(b"", -1)


@pytest.mark.parametrize(
    "lie",
    [
        b"\x7f\xff\xff\xff",  # INT32 array length 2^31-1 (non-flexible versions)
        b"\xff\xff\xff\xff\x0f",  # compact length 2^32-1 (flexible versions)
    ],
)
def test_lying_lengths_allocate_nothing(lie: bytes) -> None:
    tracemalloc.start()
    try:
        for version in (0, 12):
            for body in (lie, b"\x00\x00\x00\x00" + lie, lie * 4):
                with pytest.raises(DecodeError):
                    MetadataResponse.decode(body, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_frame_size_is_refused_before_the_frame_arrives() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\x00\x00\x04\x01")  # 1025 bytes announced, none sent
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed(b"\xff\xff\xff\xfe")  # negative size
    # The default limit is socket.request.max.bytes: 100 MiB.
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().feed((100 * 1024 * 1024 + 1).to_bytes(4, "big"))


def test_frames_split_anywhere_come_back_whole() -> None:
    body = ProduceRequest(acks=-1, timeout_ms=1000)
    frames = [encode_request(body, v, correlation_id=v, client_id="c") for v in (3, 9, 11)]
    stream = b"".join(frames)
    rng = random.Random(7)
    for _ in range(20):
        decoder = FrameDecoder()
        out = []
        pos = 0
        while pos < len(stream):
            step = rng.randint(1, 9)
            decoder.feed(stream[pos : pos + step])
            pos += step
            while (frame := decoder.next_frame()) is not None:
                out.append(decode_request(frame))
        assert [r.correlation_id for r in out] == [3, 9, 11]
        assert all(r.body == body for r in out)
        assert decoder.buffered == 0


@FUZZ
@given(st.binary(max_size=200))
def test_random_request_frames(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)


def test_unknown_api_key_and_version() -> None:
    with pytest.raises(DecodeError, match="unknown API key"):
        decode_request(b"\x03\xe7\x00\x00\x00\x00\x00\x01\x00\x00")
    frame = encode_request(ProduceRequest(), 9, correlation_id=1)[4:]
    too_new = frame[:2] + (API_SPECS[ApiKey.PRODUCE].max_version + 1).to_bytes(2, "big") + frame[4:]
    with pytest.raises(UnsupportedVersionError, match="Produce v12"):
        decode_request(too_new)
