"""SCRAM-SHA-256 / SCRAM-SHA-512 (odradek.security.sasl.scram).

Oracles: RFC 7677's SCRAM-SHA-256 test vector, kafka-python's SCRAM client (and its
AlterUserScramCredentials salted password), and a client written here straight from RFC 5802."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest
from kafka.admin._users import ScramMechanism as KafkaPythonScramMechanism
from kafka.admin._users import UserScramCredentialUpsertion
from kafka.net.sasl.scram import ScramClient

from odradek.security.sasl import SaslAuthenticationError, create_sasl_server
from odradek.security.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramSaslServer,
    credential_from_password,
    credential_from_salted_password,
    format_credential,
    parse_credential,
    salted_password,
    sasl_name,
    secure_random_string,
    username_from_sasl_name,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SALT = b"fixed-salt-for-tests"


def generic(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class Store:
    """A credential store: (user, mechanism) -> credential, counting look-ups."""

    def __init__(self, passwords: dict[str, str], iterations: int = 4096) -> None:
        self.credentials = {
            (user, mechanism): credential_from_password(mechanism, password, SALT, iterations)
            for user, password in passwords.items()
            for mechanism in MECHANISMS
        }
        self.lookups: list[tuple[str, str]] = []

    def __call__(self, user: str, mechanism: str) -> ScramCredential | None:
        self.lookups.append((user, mechanism))
        return self.credentials.get((user, mechanism))


USERS = {"alice": "alice-secret", "a,b=c": "comma-equals", "\u00e9mile": "p\u00e4ss"}


def server_for(mechanism: str, store: Store | None = None, **kwargs: object) -> ScramSaslServer:
    if kwargs:
        return ScramSaslServer(mechanism, store or Store(USERS), **kwargs)  # type: ignore[arg-type]
    server = create_sasl_server(mechanism, {}, {}, store or Store(USERS), lambda: 0)
    assert isinstance(server, ScramSaslServer)
    return server


class RfcClient:
    """The client side of RFC 5802, written independently of the server under test."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        nonce: str = "clientNonce0123456789",
        authzid: str | None = None,
        extensions: str = "",
    ) -> None:
        self.hash = HASHES[mechanism]
        self.password = password
        escaped = username.replace("=", "=3D").replace(",", "=2C")
        authz = "" if authzid is None else "a=" + authzid.replace("=", "=3D").replace(",", "=2C")
        self.gs2_header = f"n,{authz},"
        self.client_first_bare = f"n={escaped},r={nonce}{extensions}"
        self.nonce = nonce
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.client_first_bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None,
              channel_binding: str | None = None, extensions: str = "") -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        assert fields["r"].startswith(self.nonce)
        salt = base64.b64decode(fields["s"])
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = hashlib.new(self.hash, client_key).digest()
        cbind = channel_binding or base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={cbind},r={nonce or fields['r']}{extensions}"
        auth_message = f"{self.client_first_bare},{server_first.decode()},{without_proof}"
        signature = hmac.new(stored_key, auth_message.encode(), self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.hash).digest()
        self.server_signature = hmac.new(server_key, auth_message.encode(), self.hash).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def fail_message(server: ScramSaslServer, response: bytes) -> str:
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(response)
    return str(excinfo.value)


# --------------------------------------------------------------------------- RFC 7677 vector


def test_rfc7677_scram_sha256_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = credential_from_password("SCRAM-SHA-256", "pencil", salt, 4096)
    server = ScramSaslServer(
        "SCRAM-SHA-256",
        lambda user, mechanism: credential if user == "user" else None,
        nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    server_first = server.evaluate_response(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    server_final = server.evaluate_response(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.is_complete()
    assert server.authorization_id() == "user"
    assert server.session_expiration_ms() is None


# --------------------------------------------------------------------------- full exchanges


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_full_exchange_with_kafka_python_client(mechanism: str) -> None:
    store = Store(USERS)
    server = server_for(mechanism, store)
    client = ScramClient("alice", "alice-secret", mechanism)
    server_first = server.evaluate_response(client.first_message())
    assert not server.is_complete()
    client.process_server_first_message(server_first)  # raises on a bad server nonce
    server_final = server.evaluate_response(client.final_message())
    client.process_server_final_message(server_final)  # raises on a wrong server signature
    assert server.is_complete()
    assert server.authorization_id() == "alice"
    assert store.lookups == [("alice", mechanism)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user", ["alice", "a,b=c"])  # Kafka's saslname is ASCII (see below)
def test_full_exchange_with_rfc_client(mechanism: str, user: str) -> None:
    server = server_for(mechanism)
    client = RfcClient(mechanism, user, USERS[user])
    server_first = server.evaluate_response(client.first())
    assert re.fullmatch(
        rf"r={client.nonce}[0-9a-z]+,s={re.escape(base64.b64encode(SALT).decode())},i=4096",
        server_first.decode(),
    )
    assert server.evaluate_response(client.final(server_first)) == (
        b"v=" + base64.b64encode(client.server_signature)
    )
    assert server.authorization_id() == user  # =2C / =3D unescaped


def test_server_nonce_is_fresh_and_kafka_shaped() -> None:
    nonces = set()
    for _ in range(5):
        server = server_for("SCRAM-SHA-256")
        server_first = server.evaluate_response(RfcClient("SCRAM-SHA-256", "alice", "x").first())
        nonce = server_first.decode().split(",")[0][len("r=clientNonce0123456789"):]
        assert re.fullmatch(r"[0-9a-z]{1,26}", nonce)  # 130 random bits in base 36
        nonces.add(nonce)
    assert len(nonces) == 5


def test_iterations_above_the_minimum_are_used() -> None:
    server = server_for("SCRAM-SHA-512", Store(USERS, iterations=8192))
    client = RfcClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    assert server_first.endswith(b",i=8192")
    server.evaluate_response(client.final(server_first))
    assert server.is_complete()


# --------------------------------------------------------------------------- authzid


def test_authzid_equal_to_username() -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "a,b=c", "comma-equals", authzid="a,b=c")
    assert client.first().startswith(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,")
    server_first = server.evaluate_response(client.first())
    # The gs2 header with its authzid is what c= must carry.
    server.evaluate_response(client.final(server_first))
    assert server.authorization_id() == "a,b=c"


@pytest.mark.parametrize("known_user", [True, False])
def test_authzid_different_from_username(known_user: bool) -> None:
    server = server_for("SCRAM-SHA-256")
    user = "alice" if known_user else "nobody"
    client = RfcClient("SCRAM-SHA-256", user, "alice-secret", authzid="admin")
    assert fail_message(server, client.first()) == (
        "Authentication failed: Client requested an authorization id that is different from "
        "username"
    )
    assert not server.is_complete()


# --------------------------------------------------------------------------- bad credentials


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password(mechanism: str) -> None:
    server = server_for(mechanism)
    client = RfcClient(mechanism, "alice", "not-the-password")
    server_first = server.evaluate_response(client.first())
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(client.final(server_first))
    assert str(excinfo.value) == generic(mechanism)
    assert "Invalid client credentials" in str(excinfo.value.__cause__)  # for the broker's log
    assert not server.is_complete()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_looks_like_a_wrong_password(mechanism: str) -> None:
    store = Store(USERS)
    server = server_for(mechanism, store)
    client = RfcClient(mechanism, "mallory", "alice-secret")
    server_first = server.evaluate_response(client.first())
    # A challenge of the same shape as a real user's: nothing tells the user does not exist...
    assert re.fullmatch(
        rf"r={client.nonce}[0-9a-z]+,s=[A-Za-z0-9+/]+=*,i=4096", server_first.decode()
    )
    assert store.lookups == [("mallory", mechanism)]
    # ... and the same failure, at the same step, as a wrong password.
    assert fail_message(server, client.final(server_first)) == generic(mechanism)


def test_unknown_user_salt_is_stable_per_name() -> None:
    def salt_of(user: str) -> str:
        server = server_for("SCRAM-SHA-256")
        first = server.evaluate_response(RfcClient("SCRAM-SHA-256", user, "x").first())
        return first.decode().split(",s=")[1].split(",")[0]

    assert salt_of("mallory") == salt_of("mallory")  # a retry cannot spot a random salt
    assert salt_of("mallory") != salt_of("trudy")
    assert re.fullmatch(rb"[0-9a-z]+", base64.b64decode(salt_of("mallory")))  # Kafka's shape


def test_unknown_user_with_a_lucky_proof_still_fails() -> None:
    # Even a proof computed for the stand-in salt cannot match: its keys are random.
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "mallory", "")
    server_first = server.evaluate_response(client.first())
    assert fail_message(server, client.final(server_first)) == generic("SCRAM-SHA-256")


def test_credential_below_minimum_iterations_is_refused() -> None:
    store = Store(USERS, iterations=4095)
    server = server_for("SCRAM-SHA-256", store)
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(RfcClient("SCRAM-SHA-256", "alice", "alice-secret").first())
    assert str(excinfo.value) == generic("SCRAM-SHA-256")
    assert str(excinfo.value.__cause__) == (
        "Iterations 4095 is less than the minimum 4096 for SCRAM-SHA-256"
    )


def test_credential_lookup_failure_is_generic() -> None:
    def broken(_user: str, _mechanism: str) -> ScramCredential | None:
        raise OSError("metadata store unavailable")

    server = ScramSaslServer("SCRAM-SHA-512", broken)
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(b"n,,n=alice,r=abc")
    assert str(excinfo.value) == generic("SCRAM-SHA-512")
    assert str(excinfo.value.__cause__) == (
        "Authentication failed: Credentials could not be obtained"
    )


def test_reauthentication_wording() -> None:
    server = ScramSaslServer("SCRAM-SHA-256", Store(USERS), reauthenticating=True)
    assert fail_message(server, b"garbage") == (
        "Authentication failed during re-authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    server = create_sasl_server(
        "SCRAM-SHA-512", {}, {}, Store(USERS), lambda: 0, reauthenticating=True
    )
    assert "during re-authentication" in fail_message(server, b"garbage")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- tampering


@pytest.mark.parametrize(
    "tamper",
    [
        "drop_server_nonce",  # the client's nonce only
        "change_server_nonce",
        "append_to_nonce",
    ],
)
def test_tampered_nonce(tamper: str) -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    full_nonce = server_first.decode().split(",")[0][2:]
    nonce = {
        "drop_server_nonce": client.nonce,
        "change_server_nonce": full_nonce[:-1] + ("x" if full_nonce[-1] != "x" else "y"),
        "prefix_nonce": "evil" + full_nonce,
        "append_to_nonce": full_nonce + "evil",
    }[tamper]
    with pytest.raises(SaslAuthenticationError) as excinfo:
        # The proof is computed over the tampered nonce: only the nonce check can catch it.
        server.evaluate_response(client.final(server_first, nonce=nonce))
    assert str(excinfo.value) == generic("SCRAM-SHA-256")
    assert "Invalid client nonce" in str(excinfo.value.__cause__)


def test_a_nonce_with_more_in_front_is_accepted_as_kafka_accepts_it() -> None:
    # Kafka checks endsWith(): librdkafka before 2.6.1 (Debian's kcat) puts its own nonce
    # in front again, and logs in to Kafka; RFC 5802 would refuse it.
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    full_nonce = server_first.decode().split(",")[0][2:]
    final = server.evaluate_response(client.final(server_first, nonce=client.nonce + full_nonce))
    assert final.startswith(b"v=") and server.is_complete()


@pytest.mark.parametrize("cbind", ["eSws", "biws", "cD10bHMtdW5pcXVlLCw="])
def test_channel_binding_must_echo_the_gs2_header(cbind: str) -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret", authzid="alice")
    server_first = server.evaluate_response(client.first())  # gs2 header "n,a=alice,"
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(client.final(server_first, channel_binding=cbind))
    assert str(excinfo.value) == generic("SCRAM-SHA-256")
    assert "channel binding" in str(excinfo.value.__cause__)


def test_tampered_proof() -> None:
    server = server_for("SCRAM-SHA-512")
    client = RfcClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    final = client.final(server_first)
    without_proof, proof = final.rsplit(b",p=", 1)
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    assert fail_message(server, without_proof + b",p=" + base64.b64encode(bytes(raw))) == generic(
        "SCRAM-SHA-512"
    )


def test_proof_of_the_wrong_length() -> None:
    server = server_for("SCRAM-SHA-512")
    client = RfcClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    without_proof = client.final(server_first).rsplit(b",p=", 1)[0]
    assert fail_message(server, without_proof + b",p=" + base64.b64encode(b"x" * 32)) == generic(
        "SCRAM-SHA-512"
    )


def test_final_message_signed_for_another_server_first() -> None:
    # A replay: a valid final message from one exchange, sent in another.
    first_server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    stolen_final = client.final(first_server.evaluate_response(client.first()))
    second_server = server_for("SCRAM-SHA-256")
    second_server.evaluate_response(client.first())
    assert fail_message(second_server, stolen_final) == generic("SCRAM-SHA-256")


# --------------------------------------------------------------------------- malformed


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"n,,",
        b"n,,n=alice",  # no nonce
        b"n,,r=abc,n=alice",  # wrong order
        b"n,,n=,r=abc",  # empty name
        b"n,,n=alice,r=",  # empty nonce
        b"n,,n=alice,r=a,b",  # comma inside the nonce
        b"y,,n=alice,r=abc",  # client supports channel binding: Kafka's grammar refuses
        b"p=tls-unique,,n=alice,r=abc",  # channel binding requested
        b"n,a=,n=alice,r=abc",  # empty authzid
        b"n,,n=al=ice,r=abc",  # "=" must be =2C or =3D
        b"n,,n=al=2cice,r=abc",  # escapes are upper case
        b"n,,m=ext,n=alice,r=abc",  # mandatory extension: RFC 5802 says fail
        b"n,,n=alice,r=abc,1=x",  # extension names are letters
        b"n,,n=alice,r=abc,ext=",  # extension with no value
        b"n,,n=alice,r=a\x7fbc",  # DEL is not printable
        "n,,n=\u00e9mile,r=abc".encode(),  # Kafka's saslname is ASCII only (on the wire)
        b"n,,n=alice,r=abc\x00",
        b"n,,n=al\xffice,r=abc",  # not UTF-8
        b"n,,N=alice,r=abc",
    ],
)
def test_malformed_client_first(message: bytes) -> None:
    store = Store(USERS)
    server = server_for("SCRAM-SHA-256", store)
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(message)
    assert str(excinfo.value) == generic("SCRAM-SHA-256")
    assert excinfo.value.__cause__ is not None
    assert store.lookups == []  # nothing was looked up for a message we could not read
    # A failed exchange stays failed.
    assert fail_message(server, b"n,,n=alice,r=abc") == (
        "Unexpected challenge in Sasl server state FAILED"
    )


def test_utf8_user_names_on_the_wire_are_refused_as_kafka_does() -> None:
    # ...so a user like "émile" can use PLAIN or OAUTHBEARER but not SCRAM, exactly as in Kafka.
    server = server_for("SCRAM-SHA-256")
    assert fail_message(server, RfcClient("SCRAM-SHA-256", "\u00e9mile", "x").first()) == generic(
        "SCRAM-SHA-256"
    )


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"c=biws,r={nonce}",  # no proof
        b"c=biws,p=AAAA",  # no nonce
        b"r={nonce},c=biws,p=AAAA",  # wrong order
        b"c=biw,r={nonce},p=AAAA",  # bad base64 in the channel binding
        b"c=biws,r={nonce},p=AAA",  # bad base64 in the proof
        b"c=biws,r={nonce},p=AA!A",
        b"c=biws,r={nonce},p=",  # empty proof
        b"c=biws,r={nonce},p=AAAA,x=y",  # nothing may follow the proof
        b"c=biws,r={nonce},1=2,p=AAAA",
    ],
)
def test_malformed_client_final(message: bytes) -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    nonce = server_first.decode().split(",")[0][2:].encode()
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(message.replace(b"{nonce}", nonce))
    assert str(excinfo.value) == generic("SCRAM-SHA-256")
    assert not server.is_complete()


def test_client_final_extensions_are_covered_by_the_proof() -> None:
    # RFC 5802: client-final-message-without-proof includes its extensions, so the AuthMessage
    # uses the message verbatim: a client that signs one authenticates...
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    server_first = server.evaluate_response(client.first())
    server.evaluate_response(client.final(server_first, extensions=",ext=1"))
    assert server.is_complete()
    # ... and one slipped in after signing does not.
    server = server_for("SCRAM-SHA-256")
    server_first = server.evaluate_response(client.first())
    final = client.final(server_first)
    assert fail_message(server, final.replace(b",p=", b",ext=1,p=")) == generic("SCRAM-SHA-256")


def test_no_message_after_completion() -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient("SCRAM-SHA-256", "alice", "alice-secret")
    server.evaluate_response(client.final(server.evaluate_response(client.first())))
    assert server.is_complete()
    assert fail_message(server, b"n,,n=alice,r=abc") == (
        "Unexpected challenge in Sasl server state COMPLETE"
    )


# --------------------------------------------------------------------------- extensions


def test_tokenauth_extension_is_refused_clearly() -> None:
    store = Store(USERS)
    server = server_for("SCRAM-SHA-256", store)
    client = RfcClient("SCRAM-SHA-256", "tokenid", "hmac", extensions=",tokenauth=TRUE")
    assert fail_message(server, client.first()) == (
        "Token Authentication failed: delegation tokens are not supported by this broker"
    )
    assert store.lookups == []


def test_other_extensions_are_ignored_but_signed() -> None:
    server = server_for("SCRAM-SHA-256")
    client = RfcClient(
        "SCRAM-SHA-256", "alice", "alice-secret", extensions=",tokenauth=false,foo=bar"
    )
    server_first = server.evaluate_response(client.first())
    server.evaluate_response(client.final(server_first))
    assert server.is_complete()
    assert server.extensions == {"tokenauth": "false"}  # Kafka's SUPPORTED_EXTENSIONS only


# --------------------------------------------------------------------------- credentials


def test_mechanism_constants_match_kafka() -> None:
    assert MIN_ITERATIONS == 4096
    assert MAX_ITERATIONS == 16384
    for mechanism in MECHANISMS:
        assert SCRAM_MECHANISMS[mechanism].min_iterations == 4096
        assert SCRAM_MECHANISMS[mechanism].max_iterations == 16384
        assert SCRAM_MECHANISMS[mechanism].mechanism_name == mechanism
    # The wire type ids of AlterUserScramCredentials, as kafka-python knows them too.
    assert SCRAM_MECHANISMS["SCRAM-SHA-256"].type == KafkaPythonScramMechanism.SCRAM_SHA_256
    assert SCRAM_MECHANISMS["SCRAM-SHA-512"].type == KafkaPythonScramMechanism.SCRAM_SHA_512


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_credential_from_salted_password_matches_kafka_python_upsertion(mechanism: str) -> None:
    upsertion = UserScramCredentialUpsertion(
        "alice", mechanism, "alice-secret", iterations=4096, salt=SALT
    )
    from_salted = credential_from_salted_password(
        mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
    )
    assert from_salted == credential_from_password(mechanism, "alice-secret", SALT, 4096)
    assert salted_password(mechanism, "alice-secret", SALT, 4096) == upsertion.salted_password
    # ...and a client that only knows the password logs in against it.
    server = ScramSaslServer(mechanism, lambda user, mech: from_salted)
    client = ScramClient("alice", "alice-secret", mechanism)
    server_first = server.evaluate_response(client.first_message())
    client.process_server_first_message(server_first)
    client.process_server_final_message(server.evaluate_response(client.final_message()))
    assert server.is_complete()


def test_credential_from_password_rfc7677_keys() -> None:
    # StoredKey / ServerKey for the RFC 7677 vector (computed independently from its
    # SaltedPassword, "Client Key" and "Server Key").
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = credential_from_password("SCRAM-SHA-256", "pencil", salt, 4096)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, 4096)
    assert credential.stored_key == hashlib.sha256(
        hmac.new(salted, b"Client Key", "sha256").digest()
    ).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha256").digest()
    assert credential.iterations == 4096
    assert credential.salt == salt


def test_default_salt_is_random_and_kafka_shaped() -> None:
    first = credential_from_password("SCRAM-SHA-512", "pw")
    second = credential_from_password("SCRAM-SHA-512", "pw")
    assert first.salt != second.salt
    assert re.fullmatch(rb"[0-9a-z]{1,26}", first.salt)
    assert first.iterations == 4096


def test_credential_helpers_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="Requested mechanism 'SCRAM-SHA-1' is not supported"):
        credential_from_password("SCRAM-SHA-1", "pw", SALT)
    with pytest.raises(ValueError, match="Iterations must be positive"):
        credential_from_password("SCRAM-SHA-256", "pw", SALT, 0)


def test_format_credential_is_kafkas_string() -> None:
    credential = ScramCredential(b"salt", b"\x00\x01\x02", b"\xff\xfe", 4096)
    text = format_credential(credential)
    assert text == "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=4096"
    assert parse_credential(text) == credential


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_credential_round_trip(mechanism: str) -> None:
    credential = credential_from_password(mechanism, "secret", iterations=8192)
    assert parse_credential(format_credential(credential)) == credential


def test_parse_credential_is_lenient_where_kafka_is() -> None:
    # Any order, trailing commas (String.split drops them), padding optional (java.util.Base64).
    parsed = parse_credential("iterations=+4096,server_key=//4,stored_key=AAEC,salt=c2FsdA,,")
    assert parsed == ScramCredential(b"salt", b"\x00\x01\x02", b"\xff\xfe", 4096)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=",  # missing iterations
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=4096,extra=1",
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iter=4096",
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=many",
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=4096.0",
        "salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=99999999999",
        "salt=c2F*dA==,stored_key=AAEC,server_key=//4=,iterations=4096",  # bad base64
        "salt=c2FsdA==,stored_key=A,server_key=//4=,iterations=4096",
        ",salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=4096",  # leading empty
        "=x,salt=c2FsdA==,stored_key=AAEC,server_key=//4=,iterations=4096",
    ],
)
def test_parse_credential_errors(text: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_credential(text)
    assert str(excinfo.value) == f"Credentials not valid: {text}"


def test_sasl_name_escaping() -> None:
    assert sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert username_from_sasl_name("a=2Cb=3Dc") == "a,b=c"
    assert username_from_sasl_name(sasl_name("=2C,=3D")) == "=2C,=3D"
    with pytest.raises(ValueError, match="Invalid username: a=b"):
        username_from_sasl_name("a=b")


def test_secure_random_string_shape() -> None:
    values = {secure_random_string() for _ in range(20)}
    assert len(values) == 20
    assert all(re.fullmatch(r"[0-9a-z]{1,26}", v) for v in values)
