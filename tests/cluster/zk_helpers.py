"""Helpers of the cluster tests: waiting for callbacks (always bounded), and a TCP proxy
that partitions a client from ZooKeeper. Conditions are waited for with
support.wait.wait_until."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from odradek.cluster.zookeeper import ZooKeeperMetadataStore

T = TypeVar("T")
WAIT = 20.0  # seconds: the bound of every wait for ZooKeeper to do something

# The make_store fixture: make_store(broker_id=1, connect_string=None, **store_options).
StoreFactory = Callable[..., ZooKeeperMetadataStore]


class Recorder(Generic[T]):
    """Collects the values a callback (a watch, a session listener) is called with, on
    whatever thread, and waits, bounded, until they satisfy a condition."""

    def __init__(self) -> None:
        self.values: list[T] = []
        self._changed = threading.Condition()

    def __call__(self, value: T) -> None:
        with self._changed:
            self.values.append(value)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[T]], bool], timeout: float = WAIT) -> list[T]:
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.values), timeout):
                raise AssertionError(f"not seen within {timeout} s; seen: {self.values}")
            return list(self.values)

    def wait_value(self, value: T, timeout: float = WAIT) -> list[T]:
        return self.wait_for(lambda values: value in values, timeout)

    @property
    def last(self) -> T:
        return self.values[-1]


class TcpProxy:
    """A TCP proxy to ZooKeeper that can be cut: its connections closed and new ones
    refused, a network partition between a client and the server, healed at will."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._cut = False
        self._closed = False
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            connections, self._connections = self._connections, []
        for s in connections:
            _close(s)

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._connections += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    _close(source)
    _close(sink)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()
