"""What the protocol knows of each API: its versions, and which headers frame it.

The table itself (`API_SPECS`, `ApiKey`) is generated into odradek/protocol/api_keys.py
from the JSON specs; this module holds the logic over one entry. Message classes are
imported on first use, so a process that speaks five APIs does not load ninety modules.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

from odradek.protocol.message import Message

CONTROLLED_SHUTDOWN = 7
API_VERSIONS = 18


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    name: str  # Kafka's name: "Produce", "ApiVersions", ...
    min_version: int
    max_version: int
    deprecated_versions: tuple[int, int] | None  # inclusive range, or None
    first_flexible_version: int | None
    latest_version_unstable: bool
    listeners: tuple[str, ...]  # "broker", "controller", "zkBroker"
    request_module: str
    response_module: str

    def is_valid(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_deprecated(self, version: int) -> bool:
        low_high = self.deprecated_versions
        return low_high is not None and low_high[0] <= version <= low_high[1]

    def is_flexible(self, version: int) -> bool:
        first = self.first_flexible_version
        return first is not None and version >= first

    def request_header_version(self, version: int) -> int:
        if self.is_flexible(version):
            return 2
        # ControlledShutdown v0 predates the client id (Kafka's ApiKeys.requestHeaderVersion).
        if self.api_key == CONTROLLED_SHUTDOWN and version == 0:
            return 0
        return 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0, so that a client that sent a version
        # the broker does not know can still read the error and the supported ranges.
        if self.api_key == API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0

    @property
    def request_class(self) -> type[Message]:
        return _load(self.request_module, self.name + "Request")

    @property
    def response_class(self) -> type[Message]:
        return _load(self.response_module, self.name + "Response")


@functools.cache  # hot: every request asks for its class
def _load(module: str, name: str) -> type[Message]:
    cls: type[Message] = getattr(importlib.import_module(f"{__package__}.messages.{module}"), name)
    return cls
