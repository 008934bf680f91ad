"""SaslServerAuthenticator, sans I/O: which requests a SASL connection may send before it is
authenticated, the handshake and token answers, failures, session lifetimes and
re-authentication (KIP-152, KIP-368), over a scripted mechanism."""

from __future__ import annotations

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.security.principal import KafkaPrincipal
from odradek.security.sasl import SaslAuthenticationError
from odradek.server.authenticator import SaslServerAuthenticator, SaslState


class OneStep:
    """A mechanism that takes "user:password" in one token; alice's password is "secret"."""

    mechanism = "PLAIN"

    def __init__(self, expires_ms: int | None = None) -> None:
        self.user: str | None = None
        self.expires_ms = expires_ms

    def evaluate_response(self, response: bytes) -> bytes:
        user, _, password = response.decode().partition(":")
        if password != "secret":
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        self.user = user
        return b""

    def is_complete(self) -> bool:
        return self.user is not None

    def authorization_id(self) -> str:
        assert self.user is not None
        return self.user

    def session_expiration_ms(self) -> int | None:
        return self.expires_ms


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def authenticator(clock: Clock, max_reauth_ms: int = 0, expires_ms: int | None = None,
                  ) -> SaslServerAuthenticator:
    return SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-256"],
                                   lambda mechanism, again: OneStep(expires_ms),
                                   lambda mechanism: max_reauth_ms, clock)


def authenticate(a: SaslServerAuthenticator, token: bytes = b"alice:secret",
                 mechanism: str = "PLAIN") -> tuple[int, int]:
    outcome = a.handshake(1, SaslHandshakeRequest(mechanism=mechanism))
    assert outcome.response is not None and not outcome.close
    outcome = a.authenticate(1, SaslAuthenticateRequest(auth_bytes=token))
    assert outcome.response is not None
    return outcome.response.error_code, outcome.response.session_lifetime_ms  # type: ignore[union-attr]


def test_only_the_handshake_is_served_before_authentication() -> None:
    a = authenticator(Clock())
    assert a.allows(ApiKey.API_VERSIONS) and a.allows(ApiKey.SASL_HANDSHAKE)
    assert not a.allows(ApiKey.METADATA) and not a.allows(ApiKey.SASL_AUTHENTICATE)
    assert a.refusal("Metadata") == (
        "Unexpected Kafka request of type Metadata during SASL handshake.")
    a.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert a.allows(ApiKey.SASL_AUTHENTICATE) and not a.allows(ApiKey.PRODUCE)
    assert not a.allows(ApiKey.SASL_HANDSHAKE)
    assert authenticate_token(a, b"alice:secret") == ErrorCode.NONE
    assert a.complete and a.principal == KafkaPrincipal.user("alice")
    assert a.allows(ApiKey.PRODUCE)


def authenticate_token(a: SaslServerAuthenticator, token: bytes) -> int:
    outcome = a.authenticate(1, SaslAuthenticateRequest(auth_bytes=token))
    assert outcome.response is not None
    return outcome.response.error_code


def test_an_unknown_mechanism_lists_the_enabled_ones_and_closes() -> None:
    a = authenticator(Clock())
    outcome = a.handshake(1, SaslHandshakeRequest(mechanism="GSSAPI"))
    assert outcome.close and outcome.response is not None
    assert outcome.response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert outcome.response.mechanisms == ["PLAIN", "SCRAM-SHA-256"]  # type: ignore[union-attr]
    assert a.state is SaslState.FAILED


def test_a_wrong_password_fails_with_the_mechanisms_message_and_closes() -> None:
    a = authenticator(Clock())
    a.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = a.authenticate(1, SaslAuthenticateRequest(auth_bytes=b"alice:guess"))
    assert outcome.close and outcome.response is not None
    assert outcome.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert outcome.response.error_message == (  # type: ignore[union-attr]
        "Authentication failed: Invalid username or password")
    assert not a.complete and a.principal is None


def test_the_legacy_flow_answers_bare_tokens() -> None:
    a = authenticator(Clock())
    assert not a.handshake(0, SaslHandshakeRequest(mechanism="PLAIN")).close
    assert a.state is SaslState.RAW_TOKENS
    outcome = a.raw_token(b"bob:secret")
    assert outcome.raw == b"" and not outcome.close
    assert a.principal == KafkaPrincipal.user("bob")
    failed = authenticator(Clock())
    failed.handshake(0, SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = failed.raw_token(b"bob:nope")
    assert outcome.close and outcome.raw is None and outcome.response is None


def test_without_a_lifetime_the_session_never_expires_nor_reauthenticates() -> None:
    clock = Clock()
    a = authenticator(clock)
    assert authenticate(a) == (ErrorCode.NONE, 0)
    clock.ms += 10**9
    assert not a.expired()
    assert not a.may_reauthenticate()  # the handshake then gets ILLEGAL_SASL_STATE


def test_connections_max_reauth_ms_and_the_tokens_expiry_bound_the_session() -> None:
    clock = Clock()
    a = authenticator(clock, max_reauth_ms=5000)
    assert authenticate(a) == (ErrorCode.NONE, 5000)
    clock.ms += 5000
    assert not a.expired()
    clock.ms += 1
    assert a.expired()
    # A token that expires sooner than connections.max.reauth.ms wins.
    b = authenticator(clock, max_reauth_ms=5000, expires_ms=clock.ms + 2000)
    assert authenticate(b) == (ErrorCode.NONE, 2000)
    c = authenticator(clock, expires_ms=clock.ms + 3000)
    assert authenticate(c) == (ErrorCode.NONE, 3000)


def test_reauthentication_keeps_the_mechanism_and_principal() -> None:
    clock = Clock()
    a = authenticator(clock, max_reauth_ms=5000)
    authenticate(a)
    clock.ms += 4000
    assert a.may_reauthenticate()
    assert not a.allows(ApiKey.PRODUCE)  # nothing else until it is done
    assert authenticate(a) == (ErrorCode.NONE, 5000)
    assert a.session_expires_ms == clock.ms + 5000
    # At most once a second.
    assert not a.may_reauthenticate()
    clock.ms += 1000
    assert a.may_reauthenticate()
    outcome = a.handshake(1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert outcome.close and "not supported for re-authentication" in outcome.error
    clock.ms += 1000
    b = authenticator(clock, max_reauth_ms=5000)
    authenticate(b)
    clock.ms += 1000
    assert b.may_reauthenticate()
    b.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = b.authenticate(1, SaslAuthenticateRequest(auth_bytes=b"mallory:secret"))
    assert outcome.close and outcome.response is not None
    assert outcome.response.error_message == (  # type: ignore[union-attr]
        "Cannot change principals during re-authentication from User.alice: User.mallory")


def test_a_mechanism_that_breaks_fails_the_authentication() -> None:
    class Broken(OneStep):
        def evaluate_response(self, response: bytes) -> bytes:
            raise IndexError("bug")

    a = SaslServerAuthenticator(["PLAIN"], lambda m, again: Broken(), lambda m: 0, Clock())
    a.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    outcome = a.authenticate(1, SaslAuthenticateRequest(auth_bytes=b"x"))
    assert outcome.close and outcome.response is not None
    assert outcome.response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert not a.complete
