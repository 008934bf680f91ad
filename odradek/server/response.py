"""Responses as a list of parts: encoded bytes and file regions to send with sendfile.

A FetchResponse carries record batches that sit in segment files. Encoding copies them
into the response only when they are small; larger ones stay FileRegions that the
connection sends from the file (os.sendfile where the transport allows). The generated
encoders write `out += records`; ResponseOutput intercepts that for a FileRecords value
and remembers where the region goes instead of copying it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from odradek.protocol.api import ApiSpec
from odradek.protocol.message import Message
from odradek.protocol.messages.response_header import ResponseHeader
from odradek.protocol.primitives import INT32

# Regions below this size are copied into the response: a pread is cheaper than a
# sendfile round trip through the event loop for them.
SENDFILE_THRESHOLD = 64 * 1024


class FileRegion(Protocol):
    """A run of bytes in a file: storage's FileSlice is one."""

    @property
    def position(self) -> int: ...

    @property
    def length(self) -> int: ...

    def fileno(self) -> int: ...

    def read(self) -> bytes: ...


class FileRecords:
    """The records field of a fetched partition: regions of segment files, in order."""

    __slots__ = ("_size", "regions")

    def __init__(self, regions: Sequence[FileRegion]) -> None:
        self.regions = list(regions)
        self._size = sum(r.length for r in regions)

    def __len__(self) -> int:
        return self._size


Part = bytes | FileRegion


class ResponseOutput(bytearray):
    """The encoder's output buffer, with FileRecords kept aside as regions."""

    def __init__(self) -> None:
        super().__init__()
        self.deferred: list[tuple[int, FileRecords]] = []  # (position in self, records)

    def __iadd__(self, value):  # type: ignore[no-untyped-def, override, misc]
        if isinstance(value, FileRecords):
            if len(value) < SENDFILE_THRESHOLD:
                for region in value.regions:
                    super().__iadd__(region.read())
            else:
                self.deferred.append((len(self), value))
            return self
        return super().__iadd__(value)


def encode_response_parts(
    api: ApiSpec, body: Message, api_version: int, correlation_id: int
) -> list[Part]:
    """A whole response frame, size prefix included, as bytes and file regions."""
    out = ResponseOutput()
    out += b"\0\0\0\0"
    ResponseHeader(correlation_id=correlation_id).encode_into(
        out, api.response_header_version(api_version)
    )
    body.encode_into(out, api_version)
    size = len(out) - 4 + sum(len(records) for _, records in out.deferred)
    INT32.pack_into(out, 0, size)
    if not out.deferred:
        return [bytes(out)]
    parts: list[Part] = []
    start = 0
    view = memoryview(out)
    for position, records in out.deferred:
        parts.append(bytes(view[start:position]))
        parts.extend(records.regions)
        start = position
    parts.append(bytes(view[start:]))
    return parts
