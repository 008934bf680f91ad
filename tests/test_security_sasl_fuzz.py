"""Fuzzing the SASL mechanism servers and SaslServerAuthenticator, sans I/O (hypothesis).

Whatever a client sends, a mechanism server answers with a challenge or raises
SaslAuthenticationError (never another exception, never a traceback in the log), and it
completes only for a credential that is valid: the oracles are RFC 4616 for PLAIN, a
RFC 5802 client for SCRAM, and the unsecured-JWS and signed-JWT rules for OAUTHBEARER.
SaslServerAuthenticator is driven as odradek/server/network.py drives it (ConnectionModel),
through random sequences of handshakes, tokens, other requests and clock ticks: nothing but
ApiVersions and SASL is served before authentication, a principal is only ever one whose
credential was presented, and re-authentication keeps the mechanism and the principal.

Hypothesis runs derandomized (tests/conftest.py), so a run is reproducible; every test is
bounded by its number of examples. tests/compat/test_security_fuzz.py does the same over the
wire against a broker process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.security.principal import KafkaPrincipal
from odradek.security.sasl import SaslAuthenticationError, create_sasl_server
from odradek.security.sasl.oauthbearer import (
    JwksKeyResolver,
    JwtValidator,
    OAuthBearerSaslServer,
    UnsecuredJwsValidator,
)
from odradek.security.sasl.scram import ScramCredential, credential_from_password
from odradek.server.authenticator import Outcome, SaslServerAuthenticator, SaslState

FUZZ = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
FEW = settings(FUZZ, max_examples=80)

PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SALT = b"fuzz-salt"
CREDENTIALS = {(SCRAM_USER, m): credential_from_password(m, SCRAM_PASSWORD, SALT, 4096)
               for m in SCRAM_HASHES}
NOW_MS = 1_800_000_000_000
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]


def generic(mechanism: str, stage: str = "authentication") -> str:
    return (f"Authentication failed during {stage} due to invalid credentials with SASL "
            f"mechanism {mechanism}")


def credentials(user: str, mechanism: str) -> ScramCredential | None:
    return CREDENTIALS.get((user, mechanism))


def new_server(mechanism: str, now_ms: Callable[[], int] = lambda: NOW_MS,
               reauthenticating: bool = False) -> Any:
    jaas = {f"user_{u}": p for u, p in PLAIN_USERS.items()} if mechanism == "PLAIN" else {}
    return create_sasl_server(mechanism, jaas, {}, credentials, now_ms,
                              reauthenticating=reauthenticating)


@pytest.fixture(autouse=True)
def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> Any:
    """Nothing a client sends makes a mechanism log an error or a traceback (the catch-all
    paths that mean "a bug of ours")."""
    caplog.set_level(logging.DEBUG)
    yield
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert not bad, [(r.levelname, r.getMessage()[:200]) for r in bad]


def evaluate(server: Any, token: bytes) -> bytes | SaslAuthenticationError:
    """The challenge, or the failure; any other exception fails the test."""
    try:
        return server.evaluate_response(token)
    except SaslAuthenticationError as e:
        assert not server.is_complete()
        return e


# ---- edits --------------------------------------------------------------------------------

edits = st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert", "delete", "dup"]),
                           st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
                 min_size=1, max_size=4)


def edit(data: bytes, changes: list[tuple[str, int, bytes]]) -> bytes:
    """Flipped bytes, cuts, insertions (of e.g. "," "=" NUL or bytes that are not UTF-8),
    deletions and repeated slices."""
    out = bytearray(data)
    for kind, where, extra in changes:
        i = where % (len(out) + 1)
        if kind == "flip" and out:
            out[i % len(out)] ^= extra[0] or 1
        elif kind == "cut":
            del out[i:]
        elif kind == "insert":
            out[i:i] = extra
        elif kind == "delete":
            del out[i:i + len(extra)]
        elif kind == "dup":
            out[i:i] = out[i:i + 1 + extra[0] % 16]
    return bytes(out)


special = st.sampled_from([b",", b"=", b"\0", b"\x01", b"=2C", b"=3D", b"\xff", b"\xc3\x28",
                           b"\xed\xa0\x80", b",m=x", b",tokenauth=true", b"a=alice,", b"n=", b"r="])
noise = st.one_of(st.binary(max_size=300), st.lists(special, max_size=20).map(b"".join))


# ---- PLAIN --------------------------------------------------------------------------------


def plain_valid(token: bytes) -> str | None:
    """RFC 4616 as Kafka reads it ([authzid] NUL user NUL password, new String(UTF-8)): the
    user it authenticates, or None."""
    parts = token.decode("utf-8", errors="replace").split("\0")
    if len(parts) != 3:
        return None
    authzid, user, password = parts
    ok = user and password and PLAIN_USERS.get(user) == password and authzid in ("", user)
    return user if ok else None


plain_tokens = st.one_of(
    noise,
    st.sampled_from([b"\0alice\0alice-secret", b"admin\0admin\0admin-secret",
                     b"alice\0alice\0alice-secret"]),
    st.tuples(st.sampled_from(["", "alice", "admin", "bob", "\0"]),
              st.sampled_from(["alice", "admin", "", "nobody", "alice\0"]),
              st.sampled_from([*PLAIN_USERS.values(), "", "guess", "alice-secret\0"]))
    .map(lambda t: "\0".join(t).encode()),
    st.tuples(st.sampled_from([b"\0alice\0alice-secret", b"admin\0admin\0admin-secret"]), edits)
    .map(lambda t: edit(*t)),
)


@FUZZ
@given(plain_tokens)
def test_plain_authenticates_exactly_the_valid_tokens(token: bytes) -> None:
    server = new_server("PLAIN")
    result = evaluate(server, token)
    user = plain_valid(token)
    event("valid" if user else "invalid")
    if user is None:
        assert isinstance(result, SaslAuthenticationError), token
        assert str(result).startswith(("Authentication failed", "Invalid SASL/PLAIN response"))
    else:
        assert result == b"" and server.is_complete() and server.authorization_id() == user


# ---- SCRAM --------------------------------------------------------------------------------

_SALTED = {m: hashlib.pbkdf2_hmac(h, SCRAM_PASSWORD.encode(), SALT, 4096)
           for m, h in SCRAM_HASHES.items()}


def scram_final(mechanism: str, first_bare: str, server_first: bytes,
                gs2: bytes = b"n,,", salted: bytes | None = None) -> bytes:
    """RFC 5802's client-final-message for bob, over the client-first-bare sent."""
    hash_name = SCRAM_HASHES[mechanism]
    nonce = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
    client_key = hmac.digest(salted or _SALTED[mechanism], b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c={base64.b64encode(gs2).decode()},r={nonce}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored_key, auth, hash_name),
                                        strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def server_first_ok(answer: bytes, nonce: bytes) -> None:
    attributes = answer.split(b",")
    assert attributes[0].startswith(b"r=" + nonce) and len(attributes[0]) > len(nonce) + 2
    assert attributes[1].startswith(b"s=") and attributes[2] == b"i=4096", answer


scram_mechanisms = st.sampled_from(list(SCRAM_HASHES))
nonces = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
                 min_size=1, max_size=40)
names = st.one_of(st.sampled_from([SCRAM_USER, "alice", "b=2Cob", "b=3Dob", "bob,", "=", ""]),
                  st.text(max_size=20))
first_messages = st.one_of(
    noise,
    st.tuples(st.sampled_from(["n,,", "y,,", "p=tls-unique,,", "n,a=bob,", "n,a=alice,",
                               "n,a=,", "n", ""]),
              st.sampled_from(["", "m=x,"]), names, nonces,
              st.lists(st.tuples(st.text(max_size=8), st.text(max_size=12)), max_size=3))
    .map(lambda t: (t[0] + t[1] + f"n={t[2]},r={t[3]}"
                    + "".join(f",{k}={v}" for k, v in t[4])).encode("utf-8", "surrogatepass")),
    st.tuples(st.just(b"n,,n=bob,r=abcdef"), edits).map(lambda t: edit(*t)),
)


@FUZZ
@given(scram_mechanisms, first_messages)
def test_scram_client_first_is_answered_or_refused(mechanism: str, first: bytes) -> None:
    server = new_server(mechanism)
    result = evaluate(server, first)
    assert not server.is_complete()
    event("answered" if isinstance(result, bytes) else "refused")
    if isinstance(result, bytes):
        nonce = first.decode().split(",r=", 1)[1].split(",")[0].encode()
        server_first_ok(result, nonce)
        # Whoever it names, a proof from the wrong password fails with the generic text.
        bare = first.decode().split(",", 2)[2]
        wrong = scram_final(mechanism, bare, result, salted=b"\0" * len(_SALTED[mechanism]))
        failure = evaluate(server, wrong)
        assert isinstance(failure, SaslAuthenticationError) and str(failure) == generic(mechanism)


@FUZZ
@given(scram_mechanisms, nonces, edits)
def test_a_damaged_client_final_never_authenticates(mechanism: str, nonce: str,
                                                    changes: list[tuple[str, int, bytes]]
                                                    ) -> None:
    server = new_server(mechanism)
    server_first = server.evaluate_response(f"n,,n=bob,r={nonce}".encode())
    final = scram_final(mechanism, f"n=bob,r={nonce}", server_first)
    damaged = edit(final, changes)
    assume(damaged != final)
    result = evaluate(server, damaged)
    assert isinstance(result, SaslAuthenticationError) and str(result) == generic(mechanism)
    # And the exchange is over: the valid final does not pass now.
    assert isinstance(evaluate(server, final), SaslAuthenticationError)


@FUZZ
@given(scram_mechanisms, nonces, st.sampled_from([b"", b",x=y", b",tokenauth=false"]),
       st.sampled_from(["n,,", "n,a=bob,"]))
def test_the_correct_exchange_authenticates_bob(mechanism: str, nonce: str, extension: bytes,
                                                gs2: str) -> None:
    server = new_server(mechanism)
    bare = f"n=bob,r={nonce}" + extension.decode()
    server_first = server.evaluate_response(gs2.encode() + bare.encode())
    final = scram_final(mechanism, bare, server_first, gs2.encode())
    assert server.evaluate_response(final).startswith(b"v=")
    assert server.is_complete() and server.authorization_id() == SCRAM_USER


@FEW
@given(scram_mechanisms, names.filter(lambda n: n != SCRAM_USER), st.text(max_size=12))
def test_an_unknown_user_fails_as_a_wrong_password_does(mechanism: str, user: str,
                                                        password: str) -> None:
    """No user enumeration: an unknown user gets a server-first of the same shape (the same
    stand-in salt every time) and the same failure as bob with a wrong password."""
    name = user.replace("=", "=3D").replace(",", "=2C")
    assume(name)
    answers = []
    for _ in range(2):
        server = new_server(mechanism)
        result = evaluate(server, f"n,,n={name},r=xyz".encode())
        if isinstance(result, SaslAuthenticationError):  # a name the grammar refuses
            assert str(result) == generic(mechanism)
            return
        server_first_ok(result, b"xyz")
        answers.append(result.split(b",")[1:])
        salt = base64.b64decode(result.split(b",")[1][2:])
        salted = hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], password.encode(), salt, 4096)
        failure = evaluate(server, scram_final(mechanism, f"n={name},r=xyz", result,
                                               salted=salted))
        assert isinstance(failure, SaslAuthenticationError) and str(failure) == generic(mechanism)
    assert answers[0] == answers[1]


# ---- OAUTHBEARER --------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def initial(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12)
claim_values = st.one_of(json_values, st.sampled_from(
    [NOW_MS / 1000 + 60, NOW_MS / 1000 - 60, 1e400, -1e400, "carol", "  ", "", ["a", "b"]]))
claims = st.dictionaries(st.sampled_from(["sub", "exp", "iat", "scope", "aud", "x"]),
                         claim_values, max_size=5)
headers = st.one_of(st.just({"alg": "none"}), st.dictionaries(
    st.sampled_from(["alg", "kid", "typ", "crit"]),
    st.one_of(st.sampled_from(["none", "None", "HS256", "RS256", "ES256", "idp-1"]), json_values),
    max_size=4))


def jws(header: Any, payload: Any, signature: bytes = b"") -> str:
    return ".".join([b64url(json.dumps(header).encode()), b64url(json.dumps(payload).encode()),
                     b64url(signature)])


plausible_claims = st.fixed_dictionaries(
    {"sub": st.sampled_from(["carol", " carol ", "", " ", "x" * 300]),
     "exp": st.sampled_from([NOW_MS / 1000 + 60, NOW_MS / 1000, NOW_MS // 1000 + 3600, 1e400])},
    optional={"iat": st.sampled_from([NOW_MS / 1000 - 10, NOW_MS / 1000 + 10, "now"]),
              "scope": st.one_of(st.text(max_size=10), st.lists(st.text(max_size=5))),
              "x": json_values})
oauth_messages = st.one_of(
    noise,
    st.tuples(headers, claims).map(lambda t: initial(jws(*t))),
    st.tuples(st.just({"alg": "none"}), plausible_claims).map(lambda t: initial(jws(*t))),
    st.tuples(st.just(initial(jws({"alg": "none"}, {"sub": "carol", "exp": NOW_MS / 1000 + 60}))),
              edits).map(lambda t: edit(*t)),
)


def oauth_outcome(server: OAuthBearerSaslServer, message: bytes) -> str:
    outcome = _oauth_outcome(server, message)
    event(outcome)
    return outcome


def _oauth_outcome(server: OAuthBearerSaslServer, message: bytes) -> str:
    result = evaluate(server, message)
    if isinstance(result, SaslAuthenticationError):
        return "failed"
    if result:
        challenge = json.loads(result)
        assert challenge["status"] in ("invalid_token", "insufficient_scope"), challenge
        assert not server.is_complete()
        failure = evaluate(server, b"\x01")
        assert isinstance(failure, SaslAuthenticationError) and str(failure) == result.decode()
        return "challenge"
    assert server.is_complete()
    return "authenticated"


@FUZZ
@given(oauth_messages)
def test_unsecured_jws_tokens_are_answered_or_refused(message: bytes) -> None:
    server = OAuthBearerSaslServer(UnsecuredJwsValidator(lambda: NOW_MS))
    if oauth_outcome(server, message) == "authenticated":
        token = server.token
        assert token is not None and token.principal_name.strip()
        assert token.claims.get("sub") == token.principal_name
        assert token.lifetime_ms > NOW_MS


class Idp:
    """An identity provider: its key, and its JWKS served from memory."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(ECAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = {"keys": [{**jwk, "kid": "idp-1", "use": "sig", "alg": "ES256"}]}

    def server(self) -> OAuthBearerSaslServer:
        resolver = JwksKeyResolver("memory", lambda _location: self.jwks)
        resolver.init(NOW_MS)
        return OAuthBearerSaslServer(JwtValidator(resolver, lambda: NOW_MS))


IDP = Idp()


@FUZZ
@given(st.one_of(
    st.tuples(headers, claims, st.binary(max_size=80)).map(lambda t: initial(jws(*t))),
    st.tuples(claims, st.sampled_from([{"kid": "idp-1"}, {}, {"kid": "other"}]))
    .map(lambda t: initial(jwt.encode(t[0], IDP.key, algorithm="ES256", headers=t[1]))),
    st.tuples(st.just(initial(jwt.encode({"sub": "erin", "iat": NOW_MS // 1000,
                                          "exp": NOW_MS // 1000 + 60}, IDP.key,
                                         algorithm="ES256", headers={"kid": "idp-1"}))),
              edits).map(lambda t: edit(*t)),
    noise,
))
def test_signed_jwts_are_answered_or_refused(message: bytes) -> None:
    server = IDP.server()
    if oauth_outcome(server, message) == "authenticated":
        token = server.token
        assert token is not None
        # Only the identity provider's signature lets a token in.
        compact = message.split(b"auth=Bearer ", 1)[1].split(b"\x01", 1)[0].decode()
        jwt.decode(compact, IDP.key.public_key(), algorithms=["ES256"],
                   options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                            "verify_aud": False, "verify_iss": False})
        assert token.lifetime_ms > NOW_MS - 30_000


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_claims_are_an_invalid_token() -> None:
    payload = '{"sub":"carol","exp":' + nested(5000) + "}"
    token = b64url(b'{"alg":"none"}') + "." + b64url(payload.encode()) + "."
    server = OAuthBearerSaslServer(UnsecuredJwsValidator(lambda: NOW_MS))
    assert json.loads(server.evaluate_response(initial(token))) == {"status": "invalid_token"}


def test_a_deeply_nested_jwt_header_is_an_invalid_token() -> None:
    """The signed-JWT validator reads the header before any signature is checked: PyJWT
    turns the RecursionError into an invalid header (compare the unsecured validator)."""
    token = (b64url(('{"alg":"ES256","x":' + nested(5000) + "}").encode()) + "."
             + b64url(b'{"sub":"erin"}') + "." + b64url(b"sig"))
    assert json.loads(IDP.server().evaluate_response(initial(token))) == {
        "status": "invalid_token"}


# ---- SaslServerAuthenticator, as the network layer drives it -------------------------------

SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
OTHER_APIS = [ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.CREATE_TOPICS,
              ApiKey.ALTER_USER_SCRAM_CREDENTIALS]


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS

    def __call__(self) -> int:
        return self.ms


class ConnectionModel:
    """One SASL connection as odradek/server/network.py handles it (KafkaConnection._process
    and _sasl_outcome): the authenticator decides, the model records what would be served.
    A SaslHandshake on an authenticated connection may begin a re-authentication before the
    session's expiry is checked, in the order of Kafka's SocketServer (network.py checks the
    expiry first: see test_reauthentication_after_the_session_expired_is_accepted in
    tests/compat/test_security_fuzz.py)."""

    def __init__(self, clock: Clock, max_reauth_ms: int) -> None:
        self.clock = clock
        self.auth = SaslServerAuthenticator(
            MECHANISMS, lambda m, again: new_server(m, clock, again),
            lambda _m: max_reauth_ms, clock)
        self.closed = False
        self.raw = False  # SaslHandshake v0 was answered: frames are bare tokens
        self.principal: KafkaPrincipal | None = None
        self.served: list[tuple[int, KafkaPrincipal | None]] = []
        self.challenge = b""  # the last SASL answer, for a client that follows the exchange
        self.reauthentications: list[int] = []

    def request(self, api_key: int, version: int = 1, body: Any = None) -> None:
        """A request frame (a bare token while self.raw: then `body` is its bytes)."""
        assert not self.closed
        auth = self.auth
        if self.raw:
            self._outcome(auth.raw_token(body if isinstance(body, bytes) else b"\0\0"))
            return
        if not auth.complete:
            if not auth.allows(api_key):
                self.closed = True
                return
        elif api_key == ApiKey.SASL_HANDSHAKE and auth.may_reauthenticate():
            self.reauthentications.append(self.clock.ms)
        elif auth.expired():
            self.closed = True
            return
        if api_key in SASL_APIS and not auth.complete:
            if api_key == ApiKey.SASL_HANDSHAKE:
                self._outcome(auth.handshake(version, body))
            else:
                self._outcome(auth.authenticate(version, body))
            return
        self.served.append((api_key, self.principal))  # the handler answers it

    def _outcome(self, outcome: Outcome) -> None:
        if outcome.close:
            self.closed = True
            return
        response = outcome.response
        if response is not None and hasattr(response, "auth_bytes"):
            self.challenge = bytes(response.auth_bytes)
            assert response.error_code == ErrorCode.NONE
        elif outcome.raw is not None:
            self.challenge = outcome.raw
        self.raw = self.auth.state is SaslState.RAW_TOKENS
        if self.auth.complete:
            self.principal = self.auth.principal


VALID = {
    "plain-alice": (b"\0alice\0alice-secret", "alice"),
    "plain-admin": (b"admin\0admin\0admin-secret", "admin"),
    "oauth-carol": (initial(jws({"alg": "none"}, {"sub": "carol", "exp": NOW_MS / 1000 + 30})),
                    "carol"),
}
token_choices = st.one_of(
    st.sampled_from([*VALID, "scram-first", "scram-final", "oauth-dummy"]),
    st.sampled_from([b"\0alice\0guess", b"\0mallory\0x", b"n,,n=alice,r=x"]),
    noise,
)
steps = st.lists(st.one_of(
    st.tuples(st.just("login"), st.sampled_from([0, 1, 2]),
              st.tuples(st.sampled_from(MECHANISMS), st.sampled_from(["good", "other", "bad"]))),
    st.tuples(st.just("handshake"), st.sampled_from([0, 1]),
              st.sampled_from([*MECHANISMS, "GSSAPI", "plain", ""])),
    st.tuples(st.just("token"), st.sampled_from([0, 1, 2]), token_choices),
    st.tuples(st.just("request"), st.just(1), st.sampled_from([ApiKey.API_VERSIONS,
                                                               *OTHER_APIS])),
    st.tuples(st.just("tick"), st.just(0), st.integers(0, 3000)),
), max_size=14)


@settings(FUZZ, max_examples=400)
@given(steps, st.sampled_from([0, 2500]))
def test_the_authenticator_serves_only_authenticated_principals(
        script: list[tuple[str, int, Any]], max_reauth_ms: int) -> None:
    clock = Clock()
    connection = ConnectionModel(clock, max_reauth_ms)
    proven: set[str] = set()  # users whose valid credential the client sent
    first: list[Any] = []  # the first principal and mechanism authenticated
    scram_nonce = "fuzznonce"
    for action, version, value in script:
        if connection.closed:
            break
        if action == "tick":
            clock.ms += value
            continue
        if action == "login":
            proven |= login(connection, version, *value)
            check_principal(connection, proven, first)
            continue
        if action == "handshake":
            connection.request(ApiKey.SASL_HANDSHAKE, version,
                               SaslHandshakeRequest(mechanism=value))
            continue
        if action == "request":
            connection.request(value, 1, encode_other(value))
            continue
        token: bytes
        if isinstance(value, bytes):
            token = value
        elif value in VALID:
            token, user = VALID[value]
            proven.add(user)
        elif value == "scram-first":
            token = f"n,,n=bob,r={scram_nonce}".encode()
        elif value == "scram-final":
            mechanism = connection.auth.mechanism or "SCRAM-SHA-256"
            challenge = connection.challenge
            if mechanism.startswith("SCRAM") and challenge.startswith(f"r={scram_nonce}".encode()):
                token = scram_final(mechanism, f"n=bob,r={scram_nonce}", challenge)
                proven.add(SCRAM_USER)
            else:
                token = b"c=biws,r=x,p=AAAA"
        else:
            token = b"\x01"
        connection.request(ApiKey.SASL_AUTHENTICATE, version,
                           token if connection.raw else SaslAuthenticateRequest(auth_bytes=token))
        check_principal(connection, proven, first)
    for api_key, principal in connection.served:
        if api_key != ApiKey.API_VERSIONS:
            assert principal is not None and principal.name in proven, connection.served
    event(f"ended {connection.auth.state.value}" + (" (closed)" if connection.closed else ""))
    if first:
        event(f"authenticated with {first[1]}")
        event(f"authenticated {len(connection.reauthentications)} time(s)")
        if any(api != ApiKey.API_VERSIONS for api, _ in connection.served):
            event("served after authentication")


def check_principal(connection: ConnectionModel, proven: set[str],
                    first: list[Any]) -> None:
    """Once authenticated, the principal is one whose credential was sent; re-authentication
    keeps it, and the mechanism (KIP-368)."""
    auth = connection.auth
    if not auth.complete:
        return
    assert connection.principal is not None
    assert connection.principal.name in proven, (connection.principal, proven)
    if not first:
        first.extend([connection.principal, auth.mechanism])
    assert [connection.principal, auth.mechanism] == first


def login(connection: ConnectionModel, version: int, mechanism: str, who: str) -> set[str]:
    """A whole exchange as a client library runs it (version 0: SaslHandshake v0 and bare
    tokens): as the right user ("good"), as another valid user ("other"), or with a wrong
    password or an expired token ("bad"). The users whose valid credentials were sent."""
    sent: set[str] = set()
    connection.request(ApiKey.SASL_HANDSHAKE, min(version, 1),
                       SaslHandshakeRequest(mechanism=mechanism))

    def token(data: bytes) -> None:
        if not connection.closed:
            connection.request(ApiKey.SASL_AUTHENTICATE, version, data if connection.raw
                               else SaslAuthenticateRequest(auth_bytes=data))

    if mechanism == "PLAIN":
        user = {"good": "alice", "other": "admin", "bad": "alice"}[who]
        password = "guess" if who == "bad" else PLAIN_USERS[user]
        token(f"\0{user}\0{password}".encode())
        if who != "bad":
            sent.add(user)
    elif mechanism == "OAUTHBEARER":
        user = "dave" if who == "other" else "carol"
        exp = connection.clock.ms / 1000 + (-5 if who == "bad" else 30)
        token(initial(jws({"alg": "none"}, {"sub": user, "exp": exp})))
        if who != "bad":
            sent.add(user)
        elif not connection.closed:
            token(b"\x01")
    else:
        nonce = "loginnonce"
        token(f"n,,n=bob,r={nonce}".encode())
        if not connection.closed and connection.challenge.startswith(f"r={nonce}".encode()):
            salted = None if who != "bad" else b"\0" * len(_SALTED[mechanism])
            token(scram_final(mechanism, f"n=bob,r={nonce}", connection.challenge, salted=salted))
            if who != "bad":
                sent.add(SCRAM_USER)
    return sent


def encode_other(api_key: int) -> bytes:
    """What a non-SASL request's frame is, when the connection takes it as a bare token."""
    return b"\0\x03\0\x01\0\0\0\x07\0\x01x" if api_key else b""


@FEW
@given(st.lists(st.sampled_from(["plain-alice", "plain-admin", "oauth-carol"]), min_size=2,
                max_size=5), st.lists(st.integers(1000, 2000), min_size=5, max_size=5))
def test_reauthentication_never_changes_the_principal(users: list[str],
                                                      gaps: list[int]) -> None:
    """Re-authenticating on a connection with a session lifetime: the same principal (and
    mechanism) goes on; anyone else closes the connection."""
    clock = Clock()
    connection = ConnectionModel(clock, 2500)
    first = VALID[users[0]][1]
    for name, gap in zip(users, gaps, strict=False):
        mechanism = "OAUTHBEARER" if name.startswith("oauth") else "PLAIN"
        connection.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
        if connection.closed:
            assert mechanism != connection.auth.mechanism or VALID[name][1] != first
            return
        connection.request(ApiKey.SASL_AUTHENTICATE, 2,
                           SaslAuthenticateRequest(auth_bytes=VALID[name][0]))
        if VALID[name][1] != first:
            assert connection.closed
            return
        assert not connection.closed and connection.principal == KafkaPrincipal.user(first)
        connection.request(ApiKey.METADATA, 1)
        assert connection.served[-1] == (ApiKey.METADATA, KafkaPrincipal.user(first))
        clock.ms += gap


def test_the_fuzzers_oracles_hold_for_real_clients() -> None:
    """The oracles above against what a client library sends: kafka-python's SCRAM client
    (and the PLAIN token every client sends) authenticate."""
    from kafka.net.sasl.scram import ScramClient

    for mechanism in SCRAM_HASHES:
        client = ScramClient(SCRAM_USER, SCRAM_PASSWORD, mechanism)
        server = new_server(mechanism)
        server_first = server.evaluate_response(client.first_message())
        client.process_server_first_message(server_first)
        client.process_server_final_message(server.evaluate_response(client.final_message()))
        assert server.is_complete() and server.authorization_id() == SCRAM_USER
        first_bare = client.first_message().decode().split(",", 2)[2]
        nonce = first_bare.split("r=", 1)[1]
        server = new_server(mechanism)
        server_first = server.evaluate_response(f"n,,n=bob,r={nonce}".encode())
        assert server.evaluate_response(scram_final(mechanism, f"n=bob,r={nonce}",
                                                    server_first)).startswith(b"v=")
    assert plain_valid(b"\0alice\0alice-secret") == "alice"
    assert plain_valid(b"alice\0alice\0alice-secret") == "alice"
    assert plain_valid(b"admin\0alice\0alice-secret") is None
