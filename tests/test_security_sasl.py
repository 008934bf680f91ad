"""The SASL server factory and SASL/PLAIN (odradek.security.sasl, ...sasl.plain).

kafka-python's PLAIN client is the independent oracle for the client message."""

from __future__ import annotations

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain

from odradek.security.sasl import (
    ENABLED_MECHANISMS_SUPPORTED,
    SaslAuthenticationError,
    SaslServer,
    create_sasl_server,
    invalid_credentials_message,
    validate_server_config,
)
from odradek.security.sasl import plain as plain_module
from odradek.security.sasl.oauthbearer import OAuthBearerSaslServer
from odradek.security.sasl.plain import PlainSaslServer
from odradek.security.sasl.scram import ScramSaslServer

JAAS = {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
        "user_alice": "alice-secret", "user_\u00e9mile": "p\u00e4ss"}


def no_credentials(_user: str, _mechanism: str) -> None:
    return None


def plain_server(jaas: dict[str, str] | None = None) -> SaslServer:
    return create_sasl_server("PLAIN", JAAS if jaas is None else jaas, {}, no_credentials,
                              lambda: 0)


def fail_message(server: SaslServer, response: bytes) -> str:
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(response)
    return str(excinfo.value)


# --------------------------------------------------------------------------- factory


def test_enabled_mechanisms() -> None:
    assert ENABLED_MECHANISMS_SUPPORTED == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                            "OAUTHBEARER")


@pytest.mark.parametrize(
    ("mechanism", "server_type"),
    [
        ("PLAIN", PlainSaslServer),
        ("SCRAM-SHA-256", ScramSaslServer),
        ("SCRAM-SHA-512", ScramSaslServer),
        ("OAUTHBEARER", OAuthBearerSaslServer),
    ],
)
def test_create_each_mechanism(mechanism: str, server_type: type) -> None:
    server = create_sasl_server(mechanism, {}, {}, no_credentials, lambda: 0)
    assert isinstance(server, server_type)
    assert isinstance(server, SaslServer)  # the Protocol the network layer relies on
    assert server.mechanism == mechanism
    assert not server.is_complete()
    assert server.session_expiration_ms() is None


def test_gssapi_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="GSSAPI \\(Kerberos\\) is not supported"):
        create_sasl_server("GSSAPI", {}, {}, no_credentials, lambda: 0)


@pytest.mark.parametrize("mechanism", ["plain", "SCRAM-SHA-1", "DIGEST-MD5", ""])
def test_unsupported_mechanisms(mechanism: str) -> None:
    # Mechanism names are case-sensitive in Kafka (sasl.enabled.mechanisms, SaslHandshake).
    with pytest.raises(ValueError, match=f"Unsupported SASL mechanism {mechanism}"):
        create_sasl_server(mechanism, {}, {}, no_credentials, lambda: 0)


@pytest.mark.parametrize(
    ("mechanism", "handler"),
    [
        ("PLAIN", "com.example.LdapPlainCallbackHandler"),
        ("SCRAM-SHA-256", "com.example.ScramHandler"),
        ("OAUTHBEARER", "com.example.OAuthHandler"),
    ],
)
def test_custom_java_callback_handlers_are_refused(mechanism: str, handler: str) -> None:
    for key in (
        f"{mechanism.lower()}.sasl.server.callback.handler.class",
        "sasl.server.callback.handler.class",
    ):
        with pytest.raises(ValueError, match=f"{handler} is not supported for {mechanism}"):
            create_sasl_server(mechanism, {}, {key: handler}, no_credentials, lambda: 0)
        with pytest.raises(ValueError, match=f"{handler} is not supported"):
            validate_server_config(mechanism, {}, {key: handler})


def test_kafkas_own_default_handlers_are_accepted_by_name() -> None:
    plain_handler = "org.apache.kafka.common.security.plain.internals.PlainServerCallbackHandler"
    server = create_sasl_server(
        "PLAIN", JAAS, {"plain.sasl.server.callback.handler.class": plain_handler},
        no_credentials, lambda: 0,
    )
    assert server.evaluate_response(b"\x00alice\x00alice-secret") == b""
    scram_handler = "org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler"
    assert isinstance(
        create_sasl_server("SCRAM-SHA-512", {}, {"sasl.server.callback.handler.class":
                                                 scram_handler}, no_credentials, lambda: 0),
        ScramSaslServer,
    )
    validate_server_config("PLAIN", JAAS, {})
    validate_server_config("SCRAM-SHA-256", {}, {})
    validate_server_config("OAUTHBEARER", {}, {})
    with pytest.raises(ValueError, match="GSSAPI"):
        validate_server_config("GSSAPI", {}, {})


def test_generic_message_is_kafkas() -> None:
    assert invalid_credentials_message("SCRAM-SHA-256") == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    assert invalid_credentials_message("OAUTHBEARER", reauthenticating=True) == (
        "Authentication failed during re-authentication due to invalid credentials with SASL "
        "mechanism OAUTHBEARER"
    )


def test_scram_credential_reexported_from_the_package() -> None:
    from odradek.security import sasl
    from odradek.security.sasl import scram

    assert sasl.ScramCredential is scram.ScramCredential
    assert sasl.parse_credential is scram.parse_credential
    with pytest.raises(AttributeError):
        sasl.NoSuchThing  # noqa: B018


# --------------------------------------------------------------------------- PLAIN


def test_plain_with_kafka_python_client() -> None:
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    server = plain_server()
    response = client.auth_bytes()
    assert response == b"alice\x00alice\x00alice-secret"  # authzid = authcid, as Kafka's client
    assert server.evaluate_response(response) == b""
    client.receive(b"")
    assert client.is_authenticated()
    assert server.is_complete()
    assert server.authorization_id() == "alice"
    assert server.session_expiration_ms() is None


def test_plain_without_authzid() -> None:
    server = plain_server()
    assert server.evaluate_response(b"\x00admin\x00admin-secret") == b""
    assert server.authorization_id() == "admin"


def test_plain_utf8_user_and_password() -> None:
    server = plain_server()
    server.evaluate_response("\x00\u00e9mile\x00p\u00e4ss".encode())
    assert server.authorization_id() == "\u00e9mile"


def test_plain_username_and_password_options_are_not_users() -> None:
    # "username"/"password" are the broker's own client credentials, not an entry "user_...".
    server = plain_server({"username": "admin", "password": "admin-secret"})
    assert fail_message(server, b"\x00admin\x00admin-secret") == (
        "Authentication failed: Invalid username or password"
    )


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00bob\x00alice-secret", "Authentication failed: Invalid username or password"),
        (b"\x00alice\x00alice-secreT", "Authentication failed: Invalid username or password"),
        (b"\x00alice\x00alice-secret ", "Authentication failed: Invalid username or password"),
        (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"\x00\x00", "Authentication failed: username not specified"),
        (
            b"admin\x00alice\x00alice-secret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"alice\x00alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00alice\x00alice-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"a\x00b\x00c\x00d\x00e\x00f", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\x00alice\x00\xff\xfe", "Authentication failed: Invalid username or password"),
    ],
)
def test_plain_failures_with_kafkas_messages(response: bytes, message: str) -> None:
    server = plain_server()
    assert fail_message(server, response) == message
    assert not server.is_complete()
    with pytest.raises(RuntimeError, match="has not completed"):
        server.authorization_id()


def test_plain_wrong_password_checked_before_authzid() -> None:
    # Kafka checks the password first: a wrong password never learns about the authzid rule.
    server = plain_server()
    assert fail_message(server, b"admin\x00alice\x00nope") == (
        "Authentication failed: Invalid username or password"
    )


def test_plain_password_comparison_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = plain_module.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(plain_module.hmac, "compare_digest", spy)
    server = plain_server()
    server.evaluate_response(b"\x00alice\x00alice-secret")
    assert calls == [(b"alice-secret", b"alice-secret")]
