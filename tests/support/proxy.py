"""A TCP proxy for Kafka connections that loses chosen responses, to force retries.

Clients talk to the proxy (the broker advertises it); requests pass through unchanged.
When `drop_produce_every` is n, the response to every n-th Produce request is swallowed
and both sides of that connection are closed, as if the network failed after the broker
wrote the records: the producer must retry a batch the broker already has.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

_PRODUCE = 0


class KafkaProxy:
    def __init__(self, drop_produce_every: int = 0) -> None:
        self.drop_produce_every = drop_produce_every
        self.upstream: tuple[str, int] | None = None
        self.produce_requests = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            assert self.upstream is not None, "set proxy.upstream before clients connect"
            server = socket.create_connection(self.upstream)
            doomed: set[int] = set()  # correlation ids whose responses are lost
            threading.Thread(target=self._requests, args=(client, server, doomed),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(server, client, doomed),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, doomed: set[int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, correlation_id = struct.unpack_from(">h2xi", frame, 4)
                if api_key == _PRODUCE and self.drop_produce_every:
                    with self._lock:
                        self.produce_requests += 1
                        if self.produce_requests % self.drop_produce_every == 0:
                            doomed.add(correlation_id)
                server.sendall(frame)
        except OSError:
            pass
        _close(client, server)

    def _responses(self, server: socket.socket, client: socket.socket, doomed: set[int]) -> None:
        try:
            while (frame := _read_frame(server)) is not None:
                (correlation_id,) = struct.unpack_from(">i", frame, 4)
                if correlation_id in doomed:
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(frame)
        except OSError:
            pass
        _close(client, server)


def _read_frame(sock: socket.socket) -> bytes | None:
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    body = _read_exactly(sock, size)
    return None if body is None else head + body


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()
