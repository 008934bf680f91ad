"""SaslServerAuthenticator: a SASL listener's connection from its first request to an
authenticated principal, and its re-authentications (KIP-152, KIP-368), sans I/O.

As Kafka's SaslServerAuthenticator: before authentication a connection may send ApiVersions
and SaslHandshake, then the mechanism's tokens in SaslAuthenticate requests (SaslHandshake
v1), or as bare size-prefixed frames without a Kafka header (v0, the legacy flow); any other
request closes it. A failed authentication answers SASL_AUTHENTICATION_FAILED with the
mechanism's message, and the connection closes. With connections.max.reauth.ms (or an
OAUTHBEARER token's expiry) the session has a lifetime: the client re-authenticates on the
same connection, with the same mechanism and principal, or the connection is closed at the
first request after it expired.

The connection (odradek/server/network.py) owns the I/O; this decides what to answer.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from odradek.security.principal import KafkaPrincipal
from odradek.security.sasl import SaslAuthenticationError, SaslServer

log = logging.getLogger(__name__)

MIN_REAUTH_INTERVAL_MS = 1000  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # SaslAuthenticate requests (handshake v1+)
    RAW_TOKENS = "raw tokens"  # bare size-prefixed tokens (handshake v0)
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True)
class Outcome:
    """What to do with a SASL request's answer: send `response` (a Kafka response, or for
    the legacy flow `raw` token bytes), then close the connection if `close`."""

    response: SaslHandshakeResponse | SaslAuthenticateResponse | None = None
    raw: bytes | None = None
    close: bool = False
    error: str = ""  # why it closes, for the log


class SaslServerAuthenticator:
    """One connection's SASL state.

    `new_server(mechanism, reauthenticating)` makes the mechanism's server
    (odradek/security/sasl);
    `max_reauth_ms(mechanism)` is connections.max.reauth.ms for it (0: no re-authentication
    is required); `now_ms` the wall clock, in ms since the epoch (token expiries are)."""

    def __init__(self, mechanisms: Sequence[str],
                 new_server: Callable[[str, bool], SaslServer],
                 max_reauth_ms: Callable[[str], int], now_ms: Callable[[], int]) -> None:
        self.mechanisms = list(mechanisms)
        self._new_server = new_server
        self._max_reauth_ms = max_reauth_ms
        self._now_ms = now_ms
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: KafkaPrincipal | None = None  # set once authenticated
        self.session_expires_ms: int | None = None  # None: the session never expires
        self.supports_reauthentication = False  # the client sent SaslAuthenticate v1+
        self._server: SaslServer | None = None
        self._reauthenticating = False
        self._previous: tuple[str, KafkaPrincipal] | None = None
        self._last_reauth_start_ms = 0

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def expired(self) -> bool:
        """The session's lifetime is over and it was not re-authenticated: Kafka closes the
        connection at its next request."""
        return (self.state is SaslState.COMPLETE and self.session_expires_ms is not None
                and self._now_ms() > self.session_expires_ms)

    def allows(self, api_key: int) -> bool:
        """Whether a request may be handled now: before authentication (and while
        re-authenticating) only ApiVersions and the SASL requests."""
        if self.state is SaslState.COMPLETE:
            return True
        if self.state is SaslState.HANDSHAKE:
            return api_key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE)
        return api_key == ApiKey.SASL_AUTHENTICATE and self.state is SaslState.AUTHENTICATE

    def refusal(self, api_name: str) -> str:
        stage = "handshake" if self.state is SaslState.HANDSHAKE else "authentication"
        return f"Unexpected Kafka request of type {api_name} during SASL {stage}."

    def may_reauthenticate(self) -> bool:
        """A SaslHandshake on an authenticated connection begins a re-authentication when
        the session has a lifetime (Kafka's maybeBeginServerReauthentication), at most once
        a second; otherwise it is answered as any request (ILLEGAL_SASL_STATE)."""
        if self.state is not SaslState.COMPLETE or self.session_expires_ms is None:
            return False
        now = self._now_ms()
        if self._last_reauth_start_ms and now - self._last_reauth_start_ms < (
                MIN_REAUTH_INTERVAL_MS):
            return False
        assert self.mechanism is not None and self.principal is not None
        self._last_reauth_start_ms = now
        self._previous = (self.mechanism, self.principal)
        self._reauthenticating = True
        self.state = SaslState.HANDSHAKE
        self._server = None
        return True

    # ---- the requests -----------------------------------------------------------------

    def handshake(self, version: int, request: SaslHandshakeRequest) -> Outcome:
        mechanism = request.mechanism
        enabled = list(self.mechanisms)
        if mechanism not in enabled:
            self.state = SaslState.FAILED
            return Outcome(SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled),
                close=True, error=f"Unsupported SASL mechanism {mechanism[:100]!r}")
        if self._previous is not None and mechanism != self._previous[0]:
            # Kafka answers the handshake, then fails the first token.
            self.state = SaslState.FAILED
            message = (f"SASL mechanism '{mechanism}' requested by client is not supported "
                       f"for re-authentication of mechanism '{self._previous[0]}'")
            return Outcome(SaslHandshakeResponse(mechanisms=enabled), close=True,
                           error=message)
        self.mechanism = mechanism
        self._server = self._new_server(mechanism, self._reauthenticating)
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.RAW_TOKENS
        return Outcome(SaslHandshakeResponse(mechanisms=enabled))

    def authenticate(self, version: int, request: SaslAuthenticateRequest) -> Outcome:
        if version > 0:
            self.supports_reauthentication = True
        try:
            challenge = self._evaluate(bytes(request.auth_bytes))
        except SaslAuthenticationError as e:
            return Outcome(SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(e)),
                close=True, error=str(e))
        lifetime = self._session_lifetime_ms() if self.complete else 0
        return Outcome(SaslAuthenticateResponse(auth_bytes=challenge,
                                                session_lifetime_ms=lifetime))

    def raw_token(self, token: bytes) -> Outcome:
        """A token of the legacy flow (SaslHandshake v0): the answer is bare bytes, and a
        failure can only close the connection."""
        try:
            challenge = self._evaluate(token)
        except SaslAuthenticationError as e:
            return Outcome(close=True, error=str(e))
        if self.complete:
            self._session_lifetime_ms()
        return Outcome(raw=challenge)

    # ---- internals --------------------------------------------------------------------

    def _evaluate(self, token: bytes) -> bytes:
        server = self._server
        assert server is not None and self.mechanism is not None
        try:
            challenge = server.evaluate_response(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        except Exception as e:  # a mechanism's bug must not look like success
            self.state = SaslState.FAILED
            log.exception("SASL mechanism %s failed on a client token", self.mechanism)
            raise SaslAuthenticationError(
                f"Authentication failed during {self._text()} due to invalid credentials "
                f"with SASL mechanism {self.mechanism}") from e
        if server.is_complete():
            principal = KafkaPrincipal.user(server.authorization_id())
            if self._previous is not None and principal != self._previous[1]:
                self.state = SaslState.FAILED
                old = self._previous[1]
                raise SaslAuthenticationError(
                    "Cannot change principals during re-authentication from "
                    f"{old.principal_type}.{old.name}: "
                    f"{principal.principal_type}.{principal.name}")
            self.principal = principal
            self.state = SaslState.COMPLETE
            self._reauthenticating = False
            self._previous = None
        return challenge

    def _text(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    def _session_lifetime_ms(self) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the shorter of
        connections.max.reauth.ms and the credential's remaining life; 0 when neither."""
        assert self._server is not None and self.mechanism is not None
        now = self._now_ms()
        credential_expires = self._server.session_expiration_ms()
        max_reauth = self._max_reauth_ms(self.mechanism)
        lifetimes = [max_reauth] if max_reauth > 0 else []
        if credential_expires is not None:
            lifetimes.append(credential_expires - now)
        if not lifetimes:
            self.session_expires_ms = None
            return 0
        lifetime = max(0, min(lifetimes))
        self.session_expires_ms = now + lifetime
        return lifetime
