"""The SASL mechanism clients (odradek.security.sasl.client) against the broker's mechanism
servers (odradek.security.sasl): whole exchanges that succeed and that fail, and servers
that misbehave (a wrong or missing ServerSignature, a tampered nonce, too few iterations).

Oracles: RFC 7677's SCRAM-SHA-256 test vector, and kafka-python's SCRAM client, which must
send the same client-final message for the same nonce."""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
from typing import Any

import pytest
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from odradek.security.sasl import SaslAuthenticationError, SaslServer, create_sasl_server
from odradek.security.sasl.client import (
    OAuthBearerSaslClient,
    PlainSaslClient,
    SaslClient,
    ScramSaslClient,
    create_sasl_client,
)
from odradek.security.sasl.scram import (
    ScramCredential,
    ScramSaslServer,
    credential_from_password,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
PLAIN_USERS = {"user_alice": "alice-secret", "user_broker": "broker-secret"}
SALT = b"fixed-salt-for-tests"


def generic(mechanism: str) -> str:
    return ("Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism}")


def credentials(passwords: dict[str, str], iterations: int = 4096) -> Any:
    store = {(user, mechanism): credential_from_password(mechanism, password, SALT, iterations)
             for user, password in passwords.items() for mechanism in MECHANISMS}
    return lambda user, mechanism: store.get((user, mechanism))


def scram_server(mechanism: str, passwords: dict[str, str] | None = None) -> SaslServer:
    return create_sasl_server(mechanism, {}, {}, credentials(passwords or {"bob": "bob-secret"}),
                              lambda: 0)


def exchange(client: SaslClient, server: SaslServer) -> None:
    """Runs the whole exchange as the connection does: each token to the server, each
    challenge to the client, until the client is done."""
    token: bytes | None = client.initial_response()
    for _ in range(5):
        assert token is not None
        challenge = server.evaluate_response(token)
        token = client.evaluate_challenge(challenge)
        if token is None:
            return
    raise AssertionError("the exchange did not end")


# --------------------------------------------------------------------------- PLAIN


def test_plain_authenticates_against_the_plain_server() -> None:
    client = create_sasl_client("PLAIN", "broker", "broker-secret")
    assert isinstance(client, PlainSaslClient) and isinstance(client, SaslClient)
    server = create_sasl_server("PLAIN", PLAIN_USERS, {}, credentials({}), lambda: 0)
    assert not client.is_complete()
    exchange(client, server)
    assert client.is_complete() and server.is_complete()
    assert server.authorization_id() == "broker"


def test_plain_sends_an_empty_authzid_then_the_username_and_password() -> None:
    assert PlainSaslClient("broker", "pa ss").initial_response() == b"\x00broker\x00pa ss"


def test_plain_with_a_wrong_password_is_refused_by_the_server() -> None:
    client = PlainSaslClient("broker", "not-the-secret")
    server = create_sasl_server("PLAIN", PLAIN_USERS, {}, credentials({}), lambda: 0)
    with pytest.raises(SaslAuthenticationError,
                       match=r"^Authentication failed: Invalid username or password$"):
        exchange(client, server)
    assert not client.is_complete()


def test_plain_refuses_a_challenge_and_bad_credentials() -> None:
    client = PlainSaslClient("broker", "secret")
    with pytest.raises(SaslAuthenticationError, match="Unexpected challenge"):
        client.evaluate_challenge(b"")  # before the initial response
    client.initial_response()
    with pytest.raises(SaslAuthenticationError, match="single client message"):
        client.evaluate_challenge(b"more?")
    assert not client.is_complete()
    for username, password in (("", "x"), ("x", ""), ("a\x00b", "x")):
        with pytest.raises(ValueError):
            PlainSaslClient(username, password)


# --------------------------------------------------------------------------- SCRAM


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scram_authenticates_and_verifies_the_server(mechanism: str) -> None:
    client = create_sasl_client(mechanism, "bob", "bob-secret")
    assert isinstance(client, ScramSaslClient) and client.mechanism == mechanism
    server = scram_server(mechanism)
    exchange(client, server)
    assert client.is_complete() and server.is_complete()
    assert server.authorization_id() == "bob"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scram_escapes_the_username(mechanism: str) -> None:
    user = "b=o,b"
    client = ScramSaslClient(mechanism, user, "secret")
    assert client.initial_response().startswith(b"n,,n=b=3Do=2Cb,r=")
    client = ScramSaslClient(mechanism, user, "secret")
    server = scram_server(mechanism, {user: "secret"})
    exchange(client, server)
    assert server.authorization_id() == user


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [("bob", "wrong"), ("nobody", "bob-secret")])
def test_scram_with_a_wrong_password_or_unknown_user_fails(mechanism: str, user: str,
                                                           password: str) -> None:
    client = ScramSaslClient(mechanism, user, password)
    server = scram_server(mechanism)
    with pytest.raises(SaslAuthenticationError, match=f"^{re.escape(generic(mechanism))}$"):
        exchange(client, server)
    assert not client.is_complete()


def test_scram_nonces_are_fresh_and_random() -> None:
    nonces = set()
    for _ in range(20):
        first = ScramSaslClient("SCRAM-SHA-256", "bob", "x").initial_response().decode()
        match = re.fullmatch(r"n,,n=bob,r=([a-z0-9]+)", first)
        assert match is not None, first
        assert len(match[1]) >= 20  # 130 random bits in base 36
        nonces.add(match[1])
    assert len(nonces) == 20


def test_scram_rfc7677_test_vector() -> None:
    client = ScramSaslClient("SCRAM-SHA-256", "user", "pencil",
                             nonce_factory=lambda: "rOprNGfwEbeRWgbNEkqO")
    assert client.initial_response() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.evaluate_challenge(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,"
        b"i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.evaluate_challenge(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert client.is_complete()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scram_client_final_matches_kafka_python(mechanism: str) -> None:
    nonce = "fixednonce0123456789"
    ours = ScramSaslClient(mechanism, "bob", "bob-secret", nonce_factory=lambda: nonce)
    theirs = KafkaPythonScramClient("bob", "bob-secret", mechanism)
    theirs.nonce = nonce.encode()
    assert ours.initial_response() == theirs.first_message()
    server_first = f"r={nonce}servernonce,s={base64.b64encode(SALT).decode()},i=4096".encode()
    theirs.process_server_first_message(server_first)
    assert ours.evaluate_challenge(server_first) == theirs.final_message()
    server_final = b"v=" + base64.b64encode(theirs.server_signature)
    theirs.process_server_final_message(server_final)
    assert ours.evaluate_challenge(server_final) is None


def _scram_until_server_final(mechanism: str, server: SaslServer,
                              client: ScramSaslClient) -> bytes:
    client_final = client.evaluate_challenge(server.evaluate_response(client.initial_response()))
    assert client_final is not None
    return server.evaluate_response(client_final)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scram_a_server_without_the_server_key_cannot_pass_for_the_broker(
        mechanism: str) -> None:
    # A server that stole the StoredKey verifies the client's proof, but without the
    # ServerKey it cannot sign: the client must refuse it.
    real = credential_from_password(mechanism, "bob-secret", SALT, 4096)
    forged = ScramCredential(real.salt, real.stored_key, secrets.token_bytes(
        len(real.server_key)), real.iterations)
    server = ScramSaslServer(mechanism, lambda user, _m: forged if user == "bob" else None)
    client = ScramSaslClient(mechanism, "bob", "bob-secret")
    server_final = _scram_until_server_final(mechanism, server, client)
    assert server.is_complete()  # the server was fooled...
    with pytest.raises(SaslAuthenticationError,
                       match=r"^Invalid server signature in server final message$"):
        client.evaluate_challenge(server_final)  # ...the client is not
    assert not client.is_complete()


@pytest.mark.parametrize("server_final", [
    b"v=" + base64.b64encode(b"\x00" * 32),  # wrong signature
    b"v=",  # empty signature
    b"",  # nothing
    b"x=unexpected",  # not the grammar
])
def test_scram_a_wrong_server_final_fails(server_final: bytes) -> None:
    server = scram_server("SCRAM-SHA-256")
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret")
    real = _scram_until_server_final("SCRAM-SHA-256", server, client)
    assert real.startswith(b"v=") and real != server_final
    with pytest.raises(SaslAuthenticationError):
        client.evaluate_challenge(server_final)
    assert not client.is_complete()
    with pytest.raises(SaslAuthenticationError, match="Unexpected challenge"):
        client.evaluate_challenge(real)  # failed for good


def test_scram_a_tampered_server_final_signature_fails() -> None:
    server = scram_server("SCRAM-SHA-512")
    client = ScramSaslClient("SCRAM-SHA-512", "bob", "bob-secret")
    real = _scram_until_server_final("SCRAM-SHA-512", server, client)
    signature = bytearray(base64.b64decode(real[2:]))
    signature[0] ^= 1
    with pytest.raises(SaslAuthenticationError, match="Invalid server signature"):
        client.evaluate_challenge(b"v=" + base64.b64encode(bytes(signature)))


def test_scram_a_server_error_in_server_final_fails_with_it() -> None:
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret", nonce_factory=lambda: "abc")
    client.initial_response()
    client.evaluate_challenge(b"r=abcdef,s=" + base64.b64encode(SALT) + b",i=4096")
    with pytest.raises(SaslAuthenticationError,
                       match=r"^Sasl authentication using SCRAM-SHA-256 failed with error: "
                             r"invalid-proof$"):
        client.evaluate_challenge(b"e=invalid-proof")


@pytest.mark.parametrize("tamper", [
    # does not start with ours (its first character changed, whatever the random one was)
    lambda nonce: ("y" if nonce[0] == "x" else "x") + nonce[1:] + "server",
    lambda nonce: nonce,  # the server added nothing: a reflection, or a replay
    lambda nonce: nonce[:-1] + "server",  # ours cut short
])
def test_scram_a_tampered_server_nonce_fails_before_any_proof(tamper: Any) -> None:
    server = scram_server("SCRAM-SHA-256")
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret")
    first = client.initial_response()
    client_nonce = first.decode().rpartition("r=")[2]
    server_first = server.evaluate_response(first).decode()
    server_nonce = re.match(r"r=([^,]+),", server_first)[1]  # type: ignore[index]
    assert server_nonce.startswith(client_nonce)
    tampered = server_first.replace(f"r={server_nonce},", f"r={tamper(client_nonce)},")
    with pytest.raises(SaslAuthenticationError,
                       match=r"^Invalid server nonce: does not start with client nonce$"):
        client.evaluate_challenge(tampered.encode())
    assert not client.is_complete()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("iterations,message", [
    (4095, "Requested iterations 4095 is less than the minimum 4096"),
    (1, "Requested iterations 1 is less than the minimum 4096"),
    (0, "Requested iterations 0 is less than the minimum 4096"),
    (16385, "Requested iterations 16385 is more than the maximum 16384"),
    (10**9, "Requested iterations 1000000000 is more than the maximum 16384"),
])
def test_scram_iterations_outside_kafkas_bounds_fail(mechanism: str, iterations: int,
                                                     message: str) -> None:
    client = ScramSaslClient(mechanism, "bob", "bob-secret", nonce_factory=lambda: "abc")
    client.initial_response()
    salt = base64.b64encode(SALT).decode()
    with pytest.raises(SaslAuthenticationError, match=f"^{message} for {mechanism}$"):
        client.evaluate_challenge(f"r=abcdef,s={salt},i={iterations}".encode())


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("iterations", [4096, 16384])
def test_scram_the_bounds_themselves_are_accepted(mechanism: str, iterations: int) -> None:
    client = ScramSaslClient(mechanism, "bob", "bob-secret")
    credential = credential_from_password(mechanism, "bob-secret", SALT, iterations)
    exchange(client, ScramSaslServer(mechanism, lambda _u, _m: credential))
    assert client.is_complete()


@pytest.mark.parametrize("server_first", [
    b"m=ext,r=abcdef,s=c2FsdA==,i=4096",  # a mandatory extension: RFC 5802 says fail
    b"r=abcdef,s=,i=4096",  # no salt
    b"r=abcdef,s=c2FsdA=,i=4096",  # bad base64
    b"r=abcdef,s=c2FsdA==",  # no iterations
    b"r=abcdef,s=c2FsdA==,i=99999999999",  # more digits than an int
    b"s=c2FsdA==,r=abcdef,i=4096",  # out of order
    b"",
])
def test_scram_a_malformed_server_first_fails(server_first: bytes) -> None:
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret", nonce_factory=lambda: "abc")
    client.initial_response()
    with pytest.raises(SaslAuthenticationError):
        client.evaluate_challenge(server_first)
    assert not client.is_complete()


def test_scram_server_first_extensions_are_ignored() -> None:
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret", nonce_factory=lambda: "abc")
    client.initial_response()
    final = client.evaluate_challenge(b"r=abcdef,s=c2FsdA==,i=4096,x=future")
    assert final is not None and final.startswith(b"c=biws,r=abcdef,p=")


def test_scram_steps_out_of_order_fail() -> None:
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret")
    with pytest.raises(SaslAuthenticationError, match="Unexpected challenge"):
        client.evaluate_challenge(b"r=x,s=c2FsdA==,i=4096")
    client = ScramSaslClient("SCRAM-SHA-256", "bob", "bob-secret")
    client.initial_response()
    with pytest.raises(SaslAuthenticationError, match="Unexpected challenge"):
        client.initial_response()
    with pytest.raises(ValueError, match="username"):
        ScramSaslClient("SCRAM-SHA-256", "", "x")


# --------------------------------------------------------------------------- OAUTHBEARER


def unsecured_token(**claims: Any) -> str:
    def b64url(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    body = {"sub": "broker", "iat": now - 60, "exp": now + 3600, **claims}
    return f"{b64url({'alg': 'none'})}.{b64url(body)}."


def oauthbearer_server() -> SaslServer:
    return create_sasl_server("OAUTHBEARER", {}, {}, credentials({}),
                              lambda: time.time_ns() // 1_000_000)


def test_oauthbearer_with_a_static_token() -> None:
    token = unsecured_token()
    client = create_sasl_client("OAUTHBEARER", "", token)
    assert isinstance(client, OAuthBearerSaslClient)
    assert client.initial_response() == f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    client = create_sasl_client("OAUTHBEARER", "", token)
    server = oauthbearer_server()
    exchange(client, server)
    assert client.is_complete() and server.authorization_id() == "broker"


def test_oauthbearer_an_expired_token_gets_the_servers_error() -> None:
    client = OAuthBearerSaslClient(unsecured_token(exp=int(time.time()) - 10))
    server = oauthbearer_server()
    challenge = server.evaluate_response(client.initial_response())
    assert json.loads(challenge)["status"] == "invalid_token"
    assert client.evaluate_challenge(challenge) == b"\x01"  # RFC 7628's dummy response
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        server.evaluate_response(b"\x01")
    assert not client.is_complete()
    with pytest.raises(SaslAuthenticationError, match="invalid_token"):
        client.evaluate_challenge(challenge)  # a server that goes on anyway


def test_oauthbearer_refuses_what_is_not_a_token() -> None:
    for token in ("", "has space", "a\x01b"):
        with pytest.raises(ValueError, match="b64token"):
            OAuthBearerSaslClient(token)


# --------------------------------------------------------------------------- the factory


def test_create_sasl_client_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match=r"GSSAPI.*Kerberos"):
        create_sasl_client("GSSAPI", "broker", "x")
    with pytest.raises(ValueError, match="Unsupported SASL mechanism SCRAM-SHA-1"):
        create_sasl_client("SCRAM-SHA-1", "broker", "x")
