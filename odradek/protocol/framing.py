"""Size-prefixed frames and the request/response headers that open them, sans I/O.

Every Kafka request and response travels as an INT32 size followed by that many bytes:
a header (whose version follows from the API and its version) and the body. The size is
checked against socket.request.max.bytes as soon as its four bytes arrive, before any
buffer is allocated for the frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.api import ApiSpec
from odradek.protocol.api_keys import API_SPECS
from odradek.protocol.exceptions import (
    DecodeError,
    FrameTooLargeError,
    UnsupportedVersionError,
)
from odradek.protocol.message import Message
from odradek.protocol.messages.request_header import RequestHeader
from odradek.protocol.messages.response_header import ResponseHeader
from odradek.protocol.primitives import INT32, Buffer

DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # socket.request.max.bytes
_API_KEY_AND_VERSION = struct.Struct(">hh")


def frame_size(prefix: Buffer, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> int:
    """The size announced by a frame's 4-byte prefix, refused if negative or too large."""
    (size,) = INT32.unpack_from(prefix, 0)
    if size < 0 or size > max_frame_size:
        raise FrameTooLargeError(
            f"frame of {size} bytes is larger than the limit of {max_frame_size} bytes"
            " (socket.request.max.bytes)"
        )
    return size


class FrameDecoder:
    """Splits a byte stream into frames. Feed it what the socket gives; take whole frames.

    Frames come back as bytearrays of their own, so a request's record batches can be
    given offsets in place without another copy.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._next_size: int | None = None

    def feed(self, data: Buffer) -> None:
        self._buffer += data
        if self._next_size is None and len(self._buffer) >= 4:
            # Check the announced size now, not when (if ever) the whole frame arrives.
            self._next_size = frame_size(self._buffer, self.max_frame_size)

    def next_frame(self) -> bytearray | None:
        """The next complete frame without its size prefix, or None until one is complete."""
        size = self._next_size
        if size is None or len(self._buffer) < 4 + size:
            return None
        frame = self._buffer[4 : 4 + size]
        del self._buffer[: 4 + size]
        self._next_size = None
        if len(self._buffer) >= 4:
            self._next_size = frame_size(self._buffer, self.max_frame_size)
        return frame

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buffer)


def _frame(build: bytearray) -> bytes:
    INT32.pack_into(build, 0, len(build) - 4)
    return bytes(build)


# ---- requests -----------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """A decoded request: its header, its API and its body."""

    header: RequestHeader
    api: ApiSpec
    body: Message

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id


def api_spec(api_key: int) -> ApiSpec:
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise DecodeError(f"unknown API key {api_key}")
    return spec


def encode_request(
    body: Message, api_version: int, correlation_id: int, client_id: str | None = None
) -> bytes:
    """A whole request frame, size prefix included."""
    api = api_spec(body.API_KEY)  # type: ignore[attr-defined]
    header = RequestHeader(
        request_api_key=api.api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = bytearray(4)
    header.encode_into(out, api.request_header_version(api_version))
    body.encode_into(out, api_version)
    return _frame(out)


def decode_request_header(frame: Buffer) -> tuple[RequestHeader, ApiSpec, int]:
    """The header of a request frame (without its size prefix), its API, and where the body
    starts. The header decodes even when the version is unknown to the API, so that the
    caller can answer it (KIP-511: ApiVersions with UNSUPPORTED_VERSION)."""
    if len(frame) < _API_KEY_AND_VERSION.size:
        raise DecodeError(f"request frame of {len(frame)} bytes is too short for a header")
    api_key, api_version = _API_KEY_AND_VERSION.unpack_from(frame, 0)
    api = api_spec(api_key)
    # A version beyond the ones we know may be a newer flexible one: read its header as v2,
    # which is what any client sending a flexible version uses.
    header_version = api.request_header_version(min(api_version, api.max_version))
    if api_version > api.max_version and api.first_flexible_version is not None:
        header_version = 2
    header, pos = RequestHeader.decode_from(frame, 0, header_version)
    return header, api, pos


def decode_request(frame: Buffer) -> Request:
    """A whole request frame (without its size prefix): header and body."""
    header, api, pos = decode_request_header(frame)
    version = header.request_api_version
    if not api.is_valid(version):
        raise UnsupportedVersionError(
            f"{api.name} v{version} is not supported (valid: {api.min_version}-{api.max_version})"
        )
    body = api.request_class.decode(memoryview(frame)[pos:], version)
    return Request(header, api, body)


# ---- responses ----------------------------------------------------------------------------


def encode_response(body: Message, api_version: int, correlation_id: int) -> bytes:
    """A whole response frame, size prefix included."""
    api = api_spec(body.API_KEY)  # type: ignore[attr-defined]
    out = bytearray(4)
    ResponseHeader(correlation_id=correlation_id).encode_into(
        out, api.response_header_version(api_version)
    )
    body.encode_into(out, api_version)
    return _frame(out)


def decode_response(frame: Buffer, api_key: int, api_version: int) -> tuple[int, Message]:
    """A response frame (without its size prefix) to a request the caller sent: the caller
    knows the API and version, which the response itself does not repeat."""
    api = api_spec(api_key)
    header, pos = ResponseHeader.decode_from(frame, 0, api.response_header_version(api_version))
    body = api.response_class.decode(memoryview(frame)[pos:], api_version)
    return header.correlation_id, body
