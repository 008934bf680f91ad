"""A network namespace for fault tests: a broker run in it can be cut off from everything."""

from __future__ import annotations

import os
import subprocess


class IsolatableHost:
    """A network namespace joined to this one by a veth pair: a process run in it
    (`prefix`) reaches this side at `outside` and is reached at `inside`; taking the link
    down partitions it from everything, as a cut cable does (packets vanish, no resets)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}"
        self.namespace = f"odr-ns-{tag}"
        self.link = f"odr-v{tag}"
        self.outside, self.inside = "10.77.0.1", "10.77.0.2"
        self.prefix = ("ip", "netns", "exec", self.namespace)
        self._ip("netns", "add", self.namespace)
        try:
            self._ip("link", "add", self.link, "type", "veth", "peer", "name", self.link + "p")
            self._ip("link", "set", self.link + "p", "netns", self.namespace)
            self._ip("addr", "add", f"{self.outside}/24", "dev", self.link)
            self._ip("link", "set", self.link, "up")
            for args in (("addr", "add", f"{self.inside}/24", "dev", self.link + "p"),
                         ("link", "set", self.link + "p", "up"), ("link", "set", "lo", "up")):
                self._ip("-n", self.namespace, *args)
        except Exception:
            self.close()
            raise

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)

    def cut(self) -> None:
        self._ip("link", "set", self.link, "down")

    def heal(self) -> None:
        self._ip("link", "set", self.link, "up")

    def close(self) -> None:
        subprocess.run(["ip", "link", "del", self.link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True, timeout=10)
