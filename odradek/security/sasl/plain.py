"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer with its default PlainServerCallbackHandler:
the users are the JAAS options ``user_<name>="<password>"`` of the listener's PlainLoginModule."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from odradek.security.sasl import (
    PLAIN,
    SaslAuthenticationError,
    server_callback_handler_class,
)

JAAS_USER_PREFIX = "user_"
PLAIN_SERVER_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler"
)


class PlainSaslServer:
    """One PLAIN exchange: a single client message, ``[authzid] NUL authcid NUL passwd``."""

    mechanism = PLAIN

    def __init__(self, jaas_options: Mapping[str, str]) -> None:
        self._jaas_options = jaas_options
        self._complete = False
        self._authorization_id: str | None = None

    def evaluate_response(self, response: bytes) -> bytes:
        # Java's new String(bytes, UTF_8): malformed input becomes U+FFFD, never an error.
        tokens = _extract_tokens(response.decode("utf-8", errors="replace"))
        authorization_id_from_client, username, password = tokens

        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        if not self._authenticate(username, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authorization_id_from_client and authorization_id_from_client != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._authorization_id = username
        self._complete = True
        return b""

    def _authenticate(self, username: str, password: str) -> bool:
        expected = self._jaas_options.get(JAAS_USER_PREFIX + username)
        if expected is None:
            return False
        # Constant time, as Kafka's Utils.isEqualConstantTime: no timing oracle on the password.
        return hmac.compare_digest(password.encode("utf-8"), expected.encode("utf-8"))

    def is_complete(self) -> bool:
        return self._complete

    def authorization_id(self) -> str:
        if not self._complete or self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def session_expiration_ms(self) -> int | None:
        return None


def _extract_tokens(message: str) -> tuple[str, str, str]:
    """Kafka's PlainSaslServer.extractTokens: split on NUL, at most 4 pieces, exactly 3 wanted."""
    tokens: list[str] = []
    start = 0
    for _ in range(4):
        end = message.find("\x00", start)
        if end == -1:
            tokens.append(message[start:])
            break
        tokens.append(message[start:end])
        start = end + 1
    if len(tokens) != 3:
        raise SaslAuthenticationError(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
        )
    return tokens[0], tokens[1], tokens[2]


def create_server(
    jaas_options: Mapping[str, str], configs: Mapping[str, str | None]
) -> PlainSaslServer:
    handler = server_callback_handler_class(configs, PLAIN)
    if handler is not None and handler != PLAIN_SERVER_CALLBACK_HANDLER:
        raise ValueError(
            f"sasl.server.callback.handler.class {handler} is not supported for PLAIN: this "
            "broker checks PLAIN passwords against the JAAS options user_<name>=\"<password>\" "
            f"({PLAIN_SERVER_CALLBACK_HANDLER})"
        )
    return PlainSaslServer(jaas_options)
