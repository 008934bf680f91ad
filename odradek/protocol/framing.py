"""Size-prefixed frames and the request/response headers that open them, sans I/O.

Every Kafka request and response travels as an INT32 size followed by that many bytes:
a header (whose version follows from the API and its version) and the body. The size is
checked against socket.request.max.bytes as soon as its four bytes arrive, before any
buffer is allocated for the frame; and a frame's buffer then grows with the bytes that
arrive, never to the size its prefix claims before they do.
"""

from __future__ import annotations

import ctypes
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from odradek.protocol.api import API_VERSIONS, ApiSpec
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


def frame_size(prefix: Buffer, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
               limit_name: str = "socket.request.max.bytes") -> int:
    """The size announced by a frame's 4-byte prefix, refused if negative or too large;
    the message names the setting the limit comes from."""
    (size,) = INT32.unpack_from(prefix, 0)
    if size < 0 or size > max_frame_size:
        raise FrameTooLargeError(
            f"frame of {size} bytes is larger than the limit of {max_frame_size} bytes"
            f" ({limit_name})"
        )
    return size


def _resize_in_place() -> Callable[[bytearray, int], int] | None:
    """CPython's PyByteArray_Resize: realloc, so a buffer grows without being zero-filled
    first and, where the heap has room after it (or it is mmapped), without being copied."""
    try:
        resize = ctypes.pythonapi.PyByteArray_Resize
    except (AttributeError, ValueError):  # not CPython
        return None
    resize.argtypes = [ctypes.py_object, ctypes.c_ssize_t]
    resize.restype = ctypes.c_int
    return resize  # type: ignore[no-any-return]


_PyByteArray_Resize = _resize_in_place()


def grow_buffer(buffer: bytearray, size: int) -> bytearray:
    """`buffer` grown to `size` bytes; the bytes past its old length are undefined (the
    caller fills them). In place when nothing holds a view of it, else a copy."""
    if _PyByteArray_Resize is not None:
        try:
            _PyByteArray_Resize(buffer, size)
            return buffer
        except BufferError:  # a memoryview of it is still alive: copy instead
            pass
    grown = bytearray(size)
    grown[: len(buffer)] = buffer
    return grown


class FrameReader:
    """Splits a byte stream into frames, reading into buffers it hands out (the shape of
    asyncio.BufferedProtocol): `get_buffer()` says where the next bytes go, and
    `buffer_updated(n)` returns the frames they completed.

    Small frames gather in one scratch buffer and come back as copies. A frame larger
    than the scratch moves, once the scratch is full, to a buffer of its own that grows
    geometrically (GROWTH times what has arrived, up to the frame's size) as its bytes
    arrive, and the rest of it is read straight there: a 1 MiB produce request is not
    copied again once it has its buffer, and a client that announces 100 MiB and stalls
    costs only about what it sent, never what it announced. A caller that knows how many
    bytes are already waiting in the socket (FIONREAD) says so to `next_allocation`, and
    the buffer is sized for them at once: a request that streams in gets its full buffer
    in one step and one read. Buffers are allocated or grown in `get_buffer`, when the
    next bytes are about to be read, so a caller that stops reading stops the growth.
    Frames are bytearrays, so a request's record batches can be given offsets in place.
    """

    SCRATCH_SIZE = 64 * 1024
    GROWTH = 2  # each step of a frame's buffer: this times what has arrived

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self.limit_name = "socket.request.max.bytes"  # the setting max_frame_size is
        self._scratch = bytearray(self.SCRATCH_SIZE)
        self._start = 0  # the first byte not yet returned in a frame
        self._end = 0  # the end of what has been read into the scratch
        self._large: bytearray | None = None  # a frame being read into its own buffer
        self._size = 0  # that frame's size, as its prefix announced it
        self._filled = 0  # how much of it has arrived
        self._planned = 0  # the frame's next buffer size, as next_allocation() chose it

    def get_buffer(self) -> memoryview:
        large = self._large
        if large is not None:
            if self._filled == len(large):  # full, and the frame is not: grow it
                capacity = self._planned or self._capacity(self._size, self._filled)
                self._planned = 0
                large = self._large = grow_buffer(large, capacity)
            return memoryview(large)[self._filled :]
        if self._planned or (self._start == 0 and self._end == len(self._scratch)):
            return self._move_out()  # a frame larger than the scratch: its own buffer
        if self._end == len(self._scratch):  # move the partial frame to the front
            pending = self._end - self._start
            self._scratch[:pending] = self._scratch[self._start : self._end]
            self._start, self._end = 0, pending
        return memoryview(self._scratch)[self._end :]

    def _move_out(self) -> memoryview:
        scratch = self._scratch
        size = self.announced  # checked when it arrived
        body = self._start + 4
        arrived = self._end - body
        capacity = self._planned or self._capacity(size, arrived)
        self._planned = 0
        large = self._large = grow_buffer(bytearray(), capacity)
        large[:arrived] = memoryview(scratch)[body : self._end]
        self._size, self._filled = size, arrived
        self._start = self._end = 0
        return memoryview(large)[arrived:]

    def _capacity(self, size: int, arrived: int) -> int:
        """The next buffer of a frame of `size` bytes of which `arrived` have."""
        capacity = arrived * self.GROWTH
        # A last step smaller than what has arrived would cost a realloc (often a copy of
        # the whole frame) for a few bytes: take the frame's size at once instead.
        if size - capacity < arrived:
            return size
        return capacity

    def next_allocation(self, waiting: int = 0) -> int:
        """How many bytes the next `get_buffer()` allocates (a frame's buffer created or
        grown), 0 if none: a caller that bounds memory reserves them first, or stops
        reading. `waiting`: bytes known to have arrived and not yet read (the socket's
        receive queue); the buffer is sized for them too, so a frame that streams in needs
        fewer steps, and one larger than the scratch leaves it before the scratch fills."""
        self._planned = 0
        large = self._large
        if large is not None:
            if self._filled < len(large):
                return 0
            self._planned = self._capacity(self._size, self._filled + waiting)
            return self._planned - len(large)
        if self._end - self._start < 4 or not self.reading_large:
            return 0
        arrived = self._end - self._start - 4
        room = len(self._scratch) - self._end
        # Out of the scratch once it is full, or as soon as it could not take what waits.
        if (self._start == 0 and not room) or waiting > room:
            self._planned = self._capacity(self.announced, arrived + waiting)
        return self._planned

    def buffer_updated(self, nbytes: int) -> list[bytearray]:
        """The frames completed by `nbytes` more bytes in the last buffer given out.
        Raises FrameTooLargeError for a size beyond the limit, before reading the frame."""
        if self._large is not None:
            self._filled += nbytes
            if self._filled < self._size:
                return []
            frame, self._large = self._large, None
            return [frame]
        self._end += nbytes
        frames = []
        scratch = self._scratch
        while self._end - self._start >= 4:
            size = frame_size(memoryview(scratch)[self._start : self._start + 4],
                              self.max_frame_size, self.limit_name)
            body = self._start + 4
            if self._end - body < size:
                break  # the rest comes later (a frame larger than the scratch moves out)
            frames.append(scratch[body : body + size])
            self._start = body + size
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def discard(self) -> int:
        """Drops the frame being read and the buffers, for a reader that is done (its
        connection closed); returns how many bytes of buffers that gave up."""
        freed = len(self._scratch) + self.held
        self._scratch = bytearray()
        self._large = None
        self._start = self._end = self._size = self._filled = self._planned = 0
        return freed

    @property
    def buffered(self) -> int:
        """Bytes received that are not yet part of a returned frame, size prefixes included."""
        if self._large is not None:
            return 4 + self._filled
        return self._end - self._start

    @property
    def held(self) -> int:
        """Bytes allocated for the frame being read beyond the scratch (its own buffer)."""
        large = self._large
        return 0 if large is None else len(large)

    @property
    def may_allocate(self) -> bool:
        """Whether the next `get_buffer()` may allocate: a frame larger than the scratch is
        in it, or its own buffer is full (then ask `next_allocation`)."""
        large = self._large
        if large is not None:
            return self._filled == len(large)
        return self.reading_large

    @property
    def reading_large(self) -> bool:
        """Whether the frame being read is larger than the scratch, so that reading on
        allocates (or grows) a buffer of its own."""
        return self._large is not None or self.announced + 4 > len(self._scratch)

    @property
    def announced(self) -> int:
        """The size announced by the frame being read, or 0 when none has begun."""
        if self._large is not None:
            return self._size
        if self._end - self._start >= 4:
            return int(INT32.unpack_from(self._scratch, self._start)[0])
        return 0


class FrameDecoder:
    """A FrameReader for callers that receive bytes objects: feed them, take whole frames."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._reader = FrameReader(max_frame_size)
        self._frames: deque[bytearray] = deque()

    def feed(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        while view:
            target = self._reader.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            self._frames.extend(self._reader.buffer_updated(n))

    def next_frame(self) -> bytearray | None:
        """The next complete frame without its size prefix, or None until one is complete."""
        return self._frames.popleft() if self._frames else None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return self._reader.buffered + sum(len(f) + 4 for f in self._frames)


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
    knows the API and version, which the response itself does not repeat. An ApiVersions
    response may come back in v0 instead (KIP-511): check its error code."""
    api = api_spec(api_key)
    header, pos = ResponseHeader.decode_from(frame, 0, api.response_header_version(api_version))
    body_bytes = memoryview(frame)[pos:]
    try:
        body = api.response_class.decode(body_bytes, api_version)
    except DecodeError:
        # KIP-511: a broker that does not know the ApiVersions version it was sent answers
        # in v0 (UNSUPPORTED_VERSION and its ranges); Kafka's ApiVersionsResponse.parse falls
        # back to v0 the same way, so the client can retry with a version both know.
        if api.api_key != API_VERSIONS or api_version == 0:
            raise
        body = api.response_class.decode(body_bytes, 0)
    return header.correlation_id, body
