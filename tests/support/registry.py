"""A real schema registry process for tests: `python -m odradek registry`, on a free port
it reads from the registry's log."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

_LISTENING = re.compile(r"schema registry listening on http://\S*:(\d+)")


class RegistryProcess:
    def __init__(self, bootstrap: str, *extra: str) -> None:
        self.bootstrap = bootstrap
        self.extra = extra
        self.port: int | None = None
        self.process: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self._listening = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> RegistryProcess:
        self._listening.clear()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "odradek", "registry", "--bootstrap-server",
             self.bootstrap, "--listen", "http://127.0.0.1:0", "--replication-factor", "1",
             *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._listening.wait(timeout):
            self.stop(signal.SIGKILL)
            raise AssertionError(f"the registry did not start: {self.log_text()}")
        return self

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.log_lines.append(line)
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                self._listening.set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def log_text(self) -> str:
        return "".join(self.log_lines)

    def call(self, method: str, path: str, body: Any = None, *,
             raw: bytes | None = None) -> tuple[int, Any]:
        """(status, the JSON answer) of a REST call."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def running_registry(bootstrap: str, *extra: str) -> Iterator[RegistryProcess]:
    """A registry process for a fixture: started, yielded, stopped, and its log free of
    tracebacks."""
    process = RegistryProcess(bootstrap, *extra).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def module_fixtures(name: str) -> tuple[Any, Any, Any]:
    """The fixtures `broker`, `registry` and `client` (a SchemaRegistryClient) of a test
    module that works against a registry of its own: assign them at module level,
    `broker, registry, client = module_fixtures("registry-json")`."""
    import pytest
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from support.broker import BrokerProcess

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        process = BrokerProcess(tmp_path_factory.mktemp(name),
                                {"auto.create.topics.enable": "true",
                                 "group.initial.rebalance.delay.ms": "0"}).start()
        yield process
        process.stop()

    @pytest.fixture(scope="module")
    def registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
        yield from running_registry(broker.bootstrap)

    @pytest.fixture
    def client(registry: RegistryProcess) -> SchemaRegistryClient:
        return SchemaRegistryClient({"url": registry.url})

    return broker, registry, client
