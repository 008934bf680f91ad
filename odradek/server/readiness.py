"""What /health/ready answers, apart from the HTTP server that serves it (the broker
computes it without importing aiohttp)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the broker is ready: each check's name with None when it passes, else why
    not; `details` are shown beside them (broker id, cluster id...)."""

    checks: Mapping[str, str | None]
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return all(reason is None for reason in self.checks.values())

    @property
    def reasons(self) -> list[str]:
        return [f"{name}: {reason}" for name, reason in self.checks.items() if reason is not None]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": "ready" if self.ready else "not ready",
                                **self.details,
                                "checks": {name: reason or "ok"
                                           for name, reason in self.checks.items()}}
        if not self.ready:
            body["reasons"] = self.reasons
        return body
