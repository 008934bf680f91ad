"""FrameReader: a frame's buffer grows with the bytes that arrive, never to the size its
prefix announces before they do; frames come back whole however the bytes are split."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.protocol.exceptions import FrameTooLargeError
from odradek.protocol.framing import FrameReader, grow_buffer

MIB = 1024 * 1024
SCRATCH = FrameReader.SCRATCH_SIZE


def feed(reader: FrameReader, data: bytes, chunk: int) -> list[bytearray]:
    """Reads `data` as a transport would: into whatever get_buffer offers, `chunk` at most."""
    frames: list[bytearray] = []
    view = memoryview(data)
    while view:
        target = reader.get_buffer()
        assert len(target) > 0
        n = min(len(target), len(view), chunk)
        target[:n] = view[:n]
        del target  # as a transport releases the buffer before the next read
        view = view[n:]
        frames += reader.buffer_updated(n)
    return frames


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_a_size_prefix_alone_allocates_nothing() -> None:
    reader = FrameReader()
    assert reader.buffer_updated(0) == []
    target = reader.get_buffer()
    target[:4] = struct.pack(">i", 100 * MIB)
    del target
    assert reader.buffer_updated(4) == []
    assert (reader.held, reader.buffered, reader.announced) == (0, 4, 100 * MIB)
    assert reader.reading_large
    # The next bytes still go to the scratch the connection already has.
    assert len(reader.get_buffer()) == SCRATCH - 4
    assert reader.held == 0


def test_a_large_frame_grows_with_what_arrives() -> None:
    body = random.Random(1).randbytes(5 * MIB)
    reader = FrameReader()
    data = frame(body)
    received = 0
    steps = set()
    frames: list[bytearray] = []
    for start in range(0, len(data), 4096):
        piece = data[start : start + 4096]
        frames += feed(reader, piece, 4096)
        received += len(piece)
        if not frames:
            # Never more than GROWTH (and the last step) times what arrived, nor the scratch.
            assert reader.held <= max((FrameReader.GROWTH + 1) * received, SCRATCH)
            steps.add(reader.held)
    assert frames == [bytearray(body)]
    assert reader.held == 0 and reader.buffered == 0
    assert len(steps) >= 5  # it grew in steps, not at once


def test_a_stalled_large_frame_costs_about_what_was_sent() -> None:
    reader = FrameReader()
    sent = 300 * 1024
    assert feed(reader, frame(bytes(100 * MIB))[:sent], 65536) == []
    assert reader.buffered == sent
    assert sent < reader.held <= 3 * sent  # not the 100 MiB announced


@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536, 10 * MIB])
def test_frames_of_every_size_split_anywhere_come_back_whole(chunk: int) -> None:
    rng = random.Random(chunk)
    sizes = [0, 1, 100, SCRATCH - 5, SCRATCH - 4, SCRATCH - 3, SCRATCH, 3 * SCRATCH + 1,
             MIB, 2 * MIB + 3]
    if chunk == 1:
        sizes = [s for s in sizes if s < 3 * SCRATCH]  # one byte at a time is slow
    bodies = [rng.randbytes(size) for size in sizes]
    reader = FrameReader()
    got = feed(reader, b"".join(frame(b) for b in bodies), chunk)
    assert got == [bytearray(b) for b in bodies]
    assert all(isinstance(f, bytearray) for f in got)
    assert reader.buffered == 0 and reader.held == 0


def test_the_last_step_takes_the_whole_frame_instead_of_a_few_bytes() -> None:
    # 4 * 262128 falls 64 bytes short of 1 MiB: one more step for those bytes would be a
    # realloc (often a copy of the whole buffer); the reader takes the frame's size at once.
    reader = FrameReader()
    data = frame(bytes(MIB))
    capacities = []
    pos = 0
    while True:
        target = reader.get_buffer()
        capacities.append(reader.held)
        n = min(len(target), len(data) - pos)
        target[:n] = data[pos : pos + n]
        del target
        pos += n
        if reader.buffer_updated(n):
            break
    assert capacities[-1] == MIB
    assert all(c == 0 or c <= MIB for c in capacities)


def test_the_size_is_checked_before_anything_is_allocated() -> None:
    reader = FrameReader(max_frame_size=MIB)
    target = reader.get_buffer()
    target[:4] = struct.pack(">i", MIB + 1)
    del target
    with pytest.raises(FrameTooLargeError, match=r"limit of 1048576 bytes \(socket.request.max"):
        reader.buffer_updated(4)
    assert reader.held == 0


def test_the_refusal_names_the_setting_the_limit_comes_from() -> None:
    reader = FrameReader(max_frame_size=MIB)
    reader.limit_name = "sasl.server.max.receive.size"  # a SASL listener before auth
    target = reader.get_buffer()
    target[:4] = struct.pack(">i", MIB + 1)
    del target
    with pytest.raises(FrameTooLargeError, match=r"\(sasl.server.max.receive.size\)"):
        reader.buffer_updated(4)


def test_grow_buffer_in_place_or_by_copy() -> None:
    buffer = bytearray(b"abc")
    grown = grow_buffer(buffer, 1000)
    assert grown is buffer and len(grown) == 1000 and grown[:3] == b"abc"
    view = memoryview(grown)  # a live view forbids resizing: it copies instead
    copied = grow_buffer(grown, 2000)
    assert copied is not grown and len(copied) == 2000 and copied[:3] == b"abc"
    view.release()


def test_discard_gives_the_buffers_back() -> None:
    reader = FrameReader()
    feed(reader, frame(bytes(MIB))[: 200 * 1024], 65536)
    held = reader.held
    assert held > 0
    assert reader.discard() == SCRATCH + held
    assert reader.held == 0 and reader.buffered == 0
