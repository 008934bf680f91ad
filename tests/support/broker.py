"""A real broker process on loopback for tests: `python -m odradek serve`.

The broker binds port 0 on its first start and the test reads the port it chose from its
log; a restart reuses that port, so clients can reconnect to the same address.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LISTENING = re.compile(r"listening on (\w+)://\S*:(\d+)")
_HTTP_LISTENING = re.compile(r"http listening on http://\S*:(\d+)")  # http.listeners
_STARTED = re.compile(r"broker \d+ started")


class BrokerProcess:
    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None,
                 port: int = 0, env: dict[str, str] | None = None, *,
                 host: str = "127.0.0.1", prefix: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.env = dict(env or {})
        self.port = port
        self.host = host
        self.prefix = prefix  # e.g. ("ip", "netns", "exec", name): run it elsewhere
        self.process: subprocess.Popen[str] | None = None
        self.log_lines: list[str] = []
        self.ports: dict[str, int] = {}  # each listener's bound port, by name
        self.http_ports: list[int] = []  # each HTTP listener's (http.listeners), in order
        self._started = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def http_port(self) -> int | None:
        """The port of the first HTTP listener, None without one (http.listeners)."""
        return self.http_ports[0] if self.http_ports else None

    def address(self, listener: str) -> str:
        """host:port of a listener by name (e.g. SASL_SSL)."""
        return f"{self.host}:{self.ports[listener]}"

    def argv(self) -> list[str]:
        settings = {"listeners": f"PLAINTEXT://{self.host}:{self.port}",
                    "log.dirs": str(self.data_dir), **self.settings}
        argv = [*self.prefix, sys.executable, "-m", "odradek", "serve"]
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        return argv

    def start(self, timeout: float = 60) -> BrokerProcess:
        argv = self.argv()
        self.log_lines = []
        self.http_ports = []
        self._started.clear()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        text=True, env=env)
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._started.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "".join(self.log_lines[-40:]))
        return self

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.log_lines.append(line)
            if (m := _HTTP_LISTENING.search(line)) is not None:
                self.http_ports.append(int(m.group(1)))
            elif (m := _LISTENING.search(line)) is not None:
                self.ports[m.group(1)] = int(m.group(2))
                if m.group(1) == "PLAINTEXT":
                    self.port = int(m.group(2))
            if _STARTED.search(line):
                self._started.set()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Signals the broker and waits for it; returns its exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, sig: int = signal.SIGTERM) -> BrokerProcess:
        self.stop(sig)
        return self.start()

    def log_text(self) -> str:
        return "".join(self.log_lines)
