"""CredentialCache: the SCRAM credentials SASL listeners check passwords against (Kafka's
CredentialCache), read from the metadata store's user configs (/config/users/<user> on
ZooKeeper) at start-up and again for each user whose config changes."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.security.sasl.scram import ScramCredential

log = logging.getLogger(__name__)

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class CredentialCache:
    def __init__(self) -> None:
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        return {m: c for (u, m), c in self._credentials.items() if u == user}

    def users(self) -> list[str]:
        return sorted({u for u, _ in self._credentials})

    def load(self, user_configs: Mapping[str, Mapping[str, str]]) -> None:
        """Replaces the whole cache."""
        self._credentials.clear()
        for user, configs in user_configs.items():
            self.update_user(user, configs)

    def update_user(self, user: str, configs: Mapping[str, str] | None) -> None:
        """A user's configs as stored now (None: none at all)."""
        from odradek.security.sasl.scram import parse_credential  # with SCRAM users only

        for mechanism in SCRAM_MECHANISMS:
            stored = (configs or {}).get(mechanism)
            if stored is None:
                self._credentials.pop((user, mechanism), None)
                continue
            try:
                self._credentials[(user, mechanism)] = parse_credential(stored)
            except ValueError as e:  # one bad entry must not lock every user out
                log.warning("ignoring the %s credential of user %r: %s", mechanism, user, e)
                self._credentials.pop((user, mechanism), None)
