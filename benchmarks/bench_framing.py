"""The broker's receive path for large requests: what growing a frame's buffer with the
bytes that arrive costs, next to sizing it from the size prefix (the old FrameReader).

Run: .venv/bin/python benchmarks/bench_framing.py [--reps N] [--megabytes MB]

A sender process writes frames of one size over TCP loopback as fast as it can; this
process reads them as the broker does (FrameReader.get_buffer / recv_into /
buffer_updated, glibc's malloc tuned as `odradek serve` tunes it) and counts its own CPU
time (thread_time) per MB and its reads per frame, in three ways:

- prefix: the buffer sized from the prefix at once (bytearray(size)), as before issue 14;
- steps: the buffer doubled with what has arrived, with no hint;
- hint: as the broker reads, the steps sized for what already waits in the socket
  (FIONREAD), so a request that streams in gets its full buffer in one step.

CPU per MB is the figure to compare: wall time on loopback mostly measures the sender.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import statistics
import struct
import time

from odradek.protocol.framing import FrameReader
from odradek.server.allocator import keep_large_buffers_in_heap
from odradek.server.network import _bytes_waiting

SIZES = (16 * 1024, 200_000, 1024 * 1024, 4 * 1024 * 1024)


class PrefixSized(FrameReader):
    """The old FrameReader's large frames: bytearray(size), zero-filled, as soon as the
    prefix has arrived."""

    def buffer_updated(self, nbytes: int) -> list[bytearray]:
        frames = super().buffer_updated(nbytes)
        if self._large is None and self.reading_large and self._end - self._start >= 4:
            size, body = self.announced, self._start + 4
            large = bytearray(size)
            large[: self._end - body] = self._scratch[body : self._end]
            self._large, self._size, self._filled = large, size, self._end - body
            self._start = self._end = 0
        return frames


def _send(sock: socket.socket, payload: bytes, count: int) -> None:
    for _ in range(count):
        sock.sendall(payload)


def measure(reader: FrameReader, hint: bool, size: int, megabytes: int) -> tuple[float, float]:
    """(receiver CPU in us per MB, reads per frame)."""
    server = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server.getsockname())
    receiver, _ = server.accept()
    server.close()
    count = max(1, megabytes * 1_000_000 // size)
    payload = struct.pack(">i", size) + bytes(size)
    process = mp.get_context("fork").Process(target=_send, args=(sender, payload, count))
    process.start()
    got = reads = 0
    started = time.thread_time()
    while got < count:
        buffer = reader.get_buffer()
        n = receiver.recv_into(buffer)
        del buffer
        reads += 1
        got += len(reader.buffer_updated(n))
        if hint and reader.may_allocate:
            reader.next_allocation(_bytes_waiting(receiver.fileno()))
    cpu = time.thread_time() - started
    process.join()
    sender.close()
    receiver.close()
    return cpu / (count * size / 1e6) * 1e6, reads / count


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="runs of each (default 5)")
    parser.add_argument("--megabytes", type=int, default=600, help="MB per run (600)")
    args = parser.parse_args()
    print(f"malloc tuned as the broker's: {keep_large_buffers_in_heap()}")
    ways = (("prefix", PrefixSized, False), ("steps", FrameReader, False),
            ("hint", FrameReader, True))
    results: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for _ in range(args.reps):  # interleaved, so that a busy moment hits all alike
        for size in SIZES:
            for name, cls, hint in ways:
                results.setdefault((size, name), []).append(
                    measure(cls(), hint, size, args.megabytes))
    print(f"{'frame':>9} {'reader':>7} {'CPU us/MB min':>14} {'median':>7} {'reads/frame':>12}")
    for size in SIZES:
        for name, _, _ in ways:
            runs = results[(size, name)]
            cpu = [r[0] for r in runs]
            print(f"{size:>9} {name:>7} {min(cpu):>14.1f} {statistics.median(cpu):>7.1f} "
                  f"{statistics.median(r[1] for r in runs):>12.1f}")


if __name__ == "__main__":
    main()
