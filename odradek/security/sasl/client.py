"""Sans-I/O SASL mechanism clients: what a broker sends when it authenticates to another broker
over a SASL inter-broker listener (Kafka's PlainSaslClient, ScramSaslClient and
OAuthBearerSaslClient under its SaslClientAuthenticator).

The network layer sends ``initial_response()`` in the first SaslAuthenticate request, feeds
each response's auth_bytes to ``evaluate_challenge`` and sends what it returns, until it
returns None: the exchange is complete, and the server has proven itself where the mechanism
can (SCRAM's ServerSignature). A ``SaslAuthenticationError`` ends the exchange; a broker's
SASL_AUTHENTICATION_FAILED answer ends it too, with the broker's message.

Each client is used for one exchange: re-authentication (KIP-368) makes a new one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from odradek.security.sasl import (
    GSSAPI,
    OAUTHBEARER,
    PLAIN,
    SaslAuthenticationError,
)
from odradek.security.sasl.scram import (
    _ALPHA,
    _BASE64,
    _PRINTABLE,
    _VALUE,
    SCRAM_MECHANISMS,
    salted_password,
    sasl_name,
    scram_mechanism,
    secure_random_string,
)

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)


@runtime_checkable
class SaslClient(Protocol):
    mechanism: str

    def initial_response(self) -> bytes:
        """The first token, sent in the first SaslAuthenticate request."""
        ...

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        """The next token for the server's challenge; None once the exchange is complete.
        Raises SaslAuthenticationError."""
        ...

    def is_complete(self) -> bool: ...


def create_sasl_client(mechanism: str, username: str, password: str) -> SaslClient:
    """A fresh client for one exchange. OAUTHBEARER takes a static token as `password`
    (`username` is not sent: the token names the principal). Raises ValueError for a
    mechanism we have no client for, or credentials it cannot carry."""
    if mechanism == PLAIN:
        return PlainSaslClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramSaslClient(mechanism, username, password)
    if mechanism == OAUTHBEARER:
        return OAuthBearerSaslClient(password)
    if mechanism == GSSAPI:
        raise ValueError("SASL mechanism GSSAPI (Kerberos) is not supported; supported "
                         f"mechanisms are {', '.join(SUPPORTED_MECHANISMS)}")
    raise ValueError(f"Unsupported SASL mechanism {mechanism}; supported mechanisms are "
                     f"{', '.join(SUPPORTED_MECHANISMS)}")


def _unexpected(mechanism: str, state: str) -> SaslAuthenticationError:
    # Kafka's IllegalSaslStateException wording.
    return SaslAuthenticationError(f"Unexpected challenge in Sasl client state {state} "
                                   f"({mechanism})")


# --------------------------------------------------------------------------- PLAIN


class PlainSaslClient:
    """RFC 4616: one message, ``authzid NUL authcid NUL passwd`` with an empty authzid (as
    Kafka's PlainLoginModule sends it); the server answers nothing but success or failure."""

    mechanism = PLAIN

    def __init__(self, username: str, password: str) -> None:
        if not username or not password:
            raise ValueError("SASL/PLAIN needs a username and a password")
        if "\x00" in username or "\x00" in password:
            raise ValueError("SASL/PLAIN credentials cannot contain NUL")
        self._message: bytes | None = f"\x00{username}\x00{password}".encode()
        self._state = "INITIAL"

    def initial_response(self) -> bytes:
        if self._state != "INITIAL" or self._message is None:
            raise _unexpected(self.mechanism, self._state)
        message, self._message = self._message, None  # the password is not kept around
        self._state = "SENT"
        return message

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state != "SENT":
            raise _unexpected(self.mechanism, self._state)
        if challenge:
            self._state = "FAILED"
            raise SaslAuthenticationError("Unexpected SASL/PLAIN challenge from the server: "
                                          "PLAIN has a single client message")
        self._state = "COMPLETE"
        return None

    def is_complete(self) -> bool:
        return self._state == "COMPLETE"


# --------------------------------------------------------------------------- SCRAM

# Kafka's ScramMessages grammar for the server's messages (RFC 5802 section 7).
_SERVER_FIRST = re.compile(
    rf"(?P<reserved>m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),"
    rf"i=(?P<iterations>[0-9]{{1,10}})(?:,{_ALPHA}={_VALUE})*"
)
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>{_VALUE})|v=(?P<signature>{_BASE64}))(?:,{_ALPHA}={_VALUE})*"
)
# c= of client-final without channel binding: base64 of the gs2 header "n,,".
_CHANNEL_BINDING = base64.b64encode(b"n,,").decode("ascii")

_SEND_CLIENT_FIRST = "SEND_CLIENT_FIRST_MESSAGE"
_RECEIVE_SERVER_FIRST = "RECEIVE_SERVER_FIRST_MESSAGE"
_RECEIVE_SERVER_FINAL = "RECEIVE_SERVER_FINAL_MESSAGE"
_COMPLETE = "COMPLETE"
_FAILED = "FAILED"


class ScramSaslClient:
    """RFC 5802 / RFC 7677 without channel binding, as Kafka's ScramSaslClient: client-first
    (a fresh random nonce), client-final with the ClientProof, then the server's signature
    checked, so a server that does not hold the user's ServerKey cannot pass for the broker.

    The server's nonce must extend ours, and its iteration count lie within Kafka's bounds
    for the mechanism: at least 4096 (what Kafka's client demands; fewer would make a stolen
    exchange cheap to brute-force) and at most 16384 (what Kafka stores; a rogue server could
    otherwise make us spend seconds of CPU on one login)."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce_factory: Callable[[], str] = secure_random_string) -> None:
        self._scram = scram_mechanism(mechanism)
        self.mechanism = mechanism
        if not username:
            raise ValueError(f"SASL/{mechanism} needs a username")
        self._username = username
        self._password: str | None = password
        self._nonce_factory = nonce_factory  # injectable so RFC 7677's vector can be replayed
        self._state = _SEND_CLIENT_FIRST
        self._client_nonce = ""
        self._client_first_bare = ""
        self._server_signature: bytes | None = None

    def initial_response(self) -> bytes:
        if self._state != _SEND_CLIENT_FIRST:
            raise _unexpected(self.mechanism, self._state)
        self._client_nonce = self._nonce_factory()
        self._client_first_bare = f"n={sasl_name(self._username)},r={self._client_nonce}"
        self._state = _RECEIVE_SERVER_FIRST
        return ("n,," + self._client_first_bare).encode("utf-8")

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        try:
            if self._state == _RECEIVE_SERVER_FIRST:
                response = self._client_final(challenge)
                self._state = _RECEIVE_SERVER_FINAL
                return response
            if self._state == _RECEIVE_SERVER_FINAL:
                self._verify_server_final(challenge)
                self._state = _COMPLETE
                return None
            raise _unexpected(self.mechanism, self._state)
        except SaslAuthenticationError:
            self._state = _FAILED
            self._password = None
            self._server_signature = None
            raise

    def _client_final(self, challenge: bytes) -> bytes:
        message = _text(challenge)
        match = _SERVER_FIRST.fullmatch(message)
        if match is None:
            raise SaslAuthenticationError(f"Invalid SCRAM server first message format: "
                                          f"{message[:200]!r}")
        if match["reserved"]:
            # RFC 5802: "m=" is a mandatory extension nobody defines; the client MUST fail.
            raise SaslAuthenticationError(
                "Unsupported mandatory extension in SCRAM server first message")
        nonce = match["nonce"]
        if not nonce.startswith(self._client_nonce) or len(nonce) == len(self._client_nonce):
            # The server must add its own part to ours: a server replaying an old exchange
            # (or a peer reflecting ours) cannot.
            raise SaslAuthenticationError(
                "Invalid server nonce: does not start with client nonce")
        salt = base64.b64decode(match["salt"])
        if not salt:
            raise SaslAuthenticationError("Invalid SCRAM server first message: empty salt")
        iterations = int(match["iterations"])
        if iterations < self._scram.min_iterations:
            raise SaslAuthenticationError(
                f"Requested iterations {iterations} is less than the minimum "
                f"{self._scram.min_iterations} for {self.mechanism}")
        if iterations > self._scram.max_iterations:
            raise SaslAuthenticationError(
                f"Requested iterations {iterations} is more than the maximum "
                f"{self._scram.max_iterations} for {self.mechanism}")
        password, self._password = self._password, None
        assert password is not None
        hash_name = self._scram.hash_name
        salted = salted_password(self.mechanism, password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        stored_key = hashlib.new(hash_name, client_key).digest()
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = ",".join((self._client_first_bare, message, without_proof)).encode()
        client_signature = hmac.digest(stored_key, auth_message, hash_name)
        proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", hash_name)
        self._server_signature = hmac.digest(server_key, auth_message, hash_name)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def _verify_server_final(self, challenge: bytes) -> None:
        message = _text(challenge)
        match = _SERVER_FINAL.fullmatch(message)
        if match is None:
            raise SaslAuthenticationError(f"Invalid SCRAM server final message format: "
                                          f"{message[:200]!r}")
        if match["error"] is not None:
            raise SaslAuthenticationError(
                f"Sasl authentication using {self.mechanism} failed with error: "
                f"{match['error']}")
        expected, self._server_signature = self._server_signature, None
        assert expected is not None
        try:
            signature = base64.b64decode(match["signature"], validate=True)
        except binascii.Error:
            signature = b""
        if not hmac.compare_digest(signature, expected):
            raise SaslAuthenticationError("Invalid server signature in server final message")

    def is_complete(self) -> bool:
        return self._state == _COMPLETE


def _text(challenge: bytes) -> str:
    # Java's new String(bytes, UTF_8); anything non-ASCII then fails the grammar anyway.
    return bytes(challenge).decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- OAUTHBEARER

# RFC 6750's b64token: what may follow "Bearer " in the auth key.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class OAuthBearerSaslClient:
    """RFC 7628 with a static token, as Kafka's OAuthBearerSaslClient sends it:
    ``n,,%x01auth=Bearer <token>%x01%x01``. A server that refuses the token answers with a
    JSON error challenge; the client answers %x01 and the server then fails the exchange
    with that error."""

    mechanism = OAUTHBEARER

    def __init__(self, token: str) -> None:
        if not _B64TOKEN.fullmatch(token):
            raise ValueError("an OAUTHBEARER token is a b64token (RFC 6750): letters, digits "
                             "and -._~+/ then any =")
        self._token = token
        self._state = "INITIAL"
        self.error: str | None = None  # the server's JSON error challenge, if it sent one

    def initial_response(self) -> bytes:
        if self._state != "INITIAL":
            raise _unexpected(self.mechanism, self._state)
        self._state = "SENT"
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode("ascii")

    def evaluate_challenge(self, challenge: bytes) -> bytes | None:
        if self._state == "SENT":
            if not challenge:
                self._state = "COMPLETE"
                return None
            self.error = _text(challenge)
            self._state = "ERROR_RECEIVED"
            return b"\x01"  # RFC 7628 3.2.3: the dummy response after an error
        if self._state == "ERROR_RECEIVED":
            self._state = "FAILED"
            raise SaslAuthenticationError(
                f"Sasl authentication using OAUTHBEARER failed with error: {self.error}")
        raise _unexpected(self.mechanism, self._state)

    def is_complete(self) -> bool:
        return self._state == "COMPLETE"
