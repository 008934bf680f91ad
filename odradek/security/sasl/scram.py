"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer, plus Kafka's
credential helpers (ScramFormatter, ScramCredentialUtils, ScramMechanism).

A credential is what the broker stores per user and mechanism (never the password):
salt, StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
"Server Key") and the iteration count.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from odradek.security.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    CredentialLookup,
    SaslAuthenticationError,
    invalid_credentials_message,
    server_callback_handler_class,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """Kafka's internals.ScramMechanism: the hash, the wire type id of
    AlterUserScramCredentials / DescribeUserScramCredentials, and the iteration bounds."""

    mechanism_name: str
    hash_name: str  # hashlib's name
    type: int
    min_iterations: int
    max_iterations: int


SCRAM_MECHANISMS: dict[str, ScramMechanism] = {
    SCRAM_SHA_256: ScramMechanism(SCRAM_SHA_256, "sha256", 1, 4096, 16384),
    SCRAM_SHA_512: ScramMechanism(SCRAM_SHA_512, "sha512", 2, 4096, 16384),
}
# The server refuses a stored credential below the minimum; AlterUserScramCredentials refuses
# an upsertion outside [min, max] ("Too few iterations" / "Too many iterations"). Both
# mechanisms share the bounds in Kafka (ScramControlManager.MAX_ITERATIONS is one int too); the
# per-mechanism values are SCRAM_MECHANISMS[name].min_iterations / .max_iterations.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096  # kafka-configs' default for --add-config 'SCRAM-SHA-256=[...]'

# ScramLoginModule.TOKEN_AUTH_CONFIG: the client-first extension naming a delegation token.
TOKEN_AUTH_CONFIG = "tokenauth"
SUPPORTED_EXTENSIONS = frozenset({TOKEN_AUTH_CONFIG})
SCRAM_SERVER_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.scram.internals.ScramServerCallbackHandler"
)


def scram_mechanism(mechanism: str) -> ScramMechanism:
    try:
        return SCRAM_MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(
            f"Requested mechanism '{mechanism}' is not supported. Supported mechanisms are "
            f"'{', '.join(SCRAM_MECHANISMS)}'."
        ) from None


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def format_credential(credential: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString (what ZooKeeper-mode brokers persist)."""
    return (
        f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
        f"server_key={_b64(credential.server_key)},iterations={credential.iterations}"
    )


_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def parse_credential(text: str) -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString; ValueError("Credentials not valid: ...")
    for anything else."""
    error = ValueError(f"Credentials not valid: {text}")
    props: dict[str, str] = {}
    for token in _java_split(text, ","):
        index = token.find("=")
        if index <= 0:
            raise error
        props[token[:index]] = token[index + 1 :]
    if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
        raise error
    iterations = props["iterations"]
    if not _JAVA_INT.fullmatch(iterations) or not -(2**31) <= int(iterations) < 2**31:
        raise error
    try:
        return ScramCredential(
            salt=_b64decode(props["salt"]),
            stored_key=_b64decode(props["stored_key"]),
            server_key=_b64decode(props["server_key"]),
            iterations=int(iterations),
        )
    except ValueError:
        raise error from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802, which is PBKDF2-HMAC with one block.
    Kafka's Normalize is plain UTF-8 (no SASLprep), and so is ours."""
    if iterations < 1:
        raise ValueError(f"Iterations must be positive, got {iterations}")
    return hashlib.pbkdf2_hmac(
        scram_mechanism(mechanism).hash_name, password.encode("utf-8"), salt, iterations
    )


def credential_from_salted_password(
    mechanism: str, salted_password: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """What the controller stores for an AlterUserScramCredentials upsertion (which carries the
    salted password, never the password): ScramFormatter.generateCredential."""
    hash_name = scram_mechanism(mechanism).hash_name
    client_key = hmac.digest(salted_password, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", hash_name)
    return ScramCredential(salt, stored_key, server_key, iterations)


def credential_from_password(
    mechanism: str, password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """A credential as kafka-configs makes one; the salt defaults to a fresh random one in
    Kafka's shape (the ASCII of a 130-bit random number in base 36)."""
    if salt is None:
        salt = secure_random_string().encode("ascii")
    return credential_from_salted_password(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def secure_random_string() -> str:
    """Kafka's ScramFormatter.secureRandomString: new BigInteger(130, random).toString(36)."""
    return _base36(secrets.randbits(130))


def sasl_name(username: str) -> str:
    """ScramFormatter.saslName: "=" -> "=3D", "," -> "=2C" (RFC 5802 saslname)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """ScramFormatter.username: the inverse of sasl_name; a "=" not starting =2C / =3D is
    invalid."""
    username = name.replace("=2C", ",")
    if "=" in username.replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return username.replace("=3D", "=")


# --------------------------------------------------------------------------- messages

# Kafka's ScramMessages grammar (Java's [a&&[^b]] classes spelt out).
_ALPHA = r"[A-Za-z]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # \x01-\x7F but ","
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"  # \x21-\x7E but ","
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # but "," and "=", or the escapes
_B64 = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_B64}{{4}})*(?:{_B64}{{3}}=|{_B64}{{2}}==)?"
_RESERVED = rf"(?P<reserved>m={_VALUE},)?"
_EXTENSIONS = rf"(?:,{_ALPHA}={_VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>{_RESERVED}n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})"
    rf",p=(?P<proof>{_BASE64})"
)


class _ScramError(Exception):
    """Kafka's SaslException inside the SCRAM server: logged, never shown to the client."""


@dataclass(frozen=True, slots=True)
class ClientFirstMessage:
    gs2_header: str
    authorization_id: str  # "" when the gs2 header has none
    sasl_name: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare, verbatim: part of the AuthMessage

    @classmethod
    def parse(cls, message: str) -> ClientFirstMessage:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            # Also what "y,," and "p=tls-unique,," (channel binding) come to: Kafka's grammar
            # only has "n" in the gs2 header.
            raise _ScramError(f"Invalid SCRAM client first message format: {message}")
        if match["reserved"]:
            # RFC 5802: "m=" is a mandatory extension nobody defines; the server MUST fail.
            raise _ScramError(f"Unsupported mandatory extension in client first message: {message}")
        extensions: dict[str, str] = {}
        for element in match["extensions"][1:].split(",") if match["extensions"] else ():
            key, _, value = element.partition("=")
            extensions[key] = value
        authzid = match["authzid"]
        return cls(
            gs2_header=match["gs2"],
            authorization_id=username_from_sasl_name(authzid) if authzid else "",
            sasl_name=match["saslname"],
            nonce=match["nonce"],
            extensions=extensions,
            bare=match["bare"],
        )

    def token_authenticated(self) -> bool:
        # ScramExtensions.tokenAuthenticated: Java's Boolean.parseBoolean, case-insensitive.
        return self.extensions.get(TOKEN_AUTH_CONFIG, "").lower() == "true"


@dataclass(frozen=True, slots=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof, verbatim

    @classmethod
    def parse(cls, message: str) -> ClientFinalMessage:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise _ScramError(f"Invalid SCRAM client final message format: {message}")
        return cls(
            channel_binding=base64.b64decode(match["channel"]),
            nonce=match["nonce"],
            proof=base64.b64decode(match["proof"]),
            without_proof=match["without_proof"],
        )


# --------------------------------------------------------------------------- server

_RECEIVE_CLIENT_FIRST_MESSAGE = "RECEIVE_CLIENT_FIRST_MESSAGE"
_RECEIVE_CLIENT_FINAL_MESSAGE = "RECEIVE_CLIENT_FINAL_MESSAGE"
_COMPLETE = "COMPLETE"
_FAILED = "FAILED"

# A per-process key for the stand-in salts of unknown users (see _unknown_user_credential).
_UNKNOWN_USER_SALT_KEY = secrets.token_bytes(32)


class ScramSaslServer:
    """One SCRAM exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        credentials: CredentialLookup,
        *,
        reauthenticating: bool = False,
        nonce_factory: Callable[[], str] = secure_random_string,
    ) -> None:
        self._scram = scram_mechanism(mechanism)
        self.mechanism = mechanism
        self._credentials = credentials
        self._reauthenticating = reauthenticating
        self._nonce_factory = nonce_factory  # injectable so the RFC 7677 vector can be replayed
        self._state = _RECEIVE_CLIENT_FIRST_MESSAGE
        self._client_first: ClientFirstMessage | None = None
        self._server_first: str | None = None
        self._nonce: str | None = None
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._authorization_id: str | None = None
        self.extensions: dict[str, str] = {}

    def evaluate_response(self, response: bytes) -> bytes:
        try:
            if self._state == _RECEIVE_CLIENT_FIRST_MESSAGE:
                challenge = self._receive_client_first(response)
                self._state = _RECEIVE_CLIENT_FINAL_MESSAGE
                return challenge
            if self._state == _RECEIVE_CLIENT_FINAL_MESSAGE:
                challenge = self._receive_client_final(response)
                self._clear_credentials()
                self._state = _COMPLETE
                return challenge
            # Kafka's IllegalSaslStateException.
            raise SaslAuthenticationError(
                f"Unexpected challenge in Sasl server state {self._state}"
            )
        except _ScramError as e:
            self._fail()
            log.debug("SASL/%s authentication failed: %s", self.mechanism, e)
            raise SaslAuthenticationError(
                invalid_credentials_message(self.mechanism, self._reauthenticating)
            ) from e
        except SaslAuthenticationError:
            self._fail()
            raise

    def _receive_client_first(self, response: bytes) -> bytes:
        client_first = ClientFirstMessage.parse(_to_message(response))
        unsupported = set(client_first.extensions) - SUPPORTED_EXTENSIONS
        if unsupported:
            log.debug("Unsupported SCRAM extensions will be ignored: %s", sorted(unsupported))
        if client_first.token_authenticated():
            # Kafka would look the token up in its delegation token cache; we have none.
            raise SaslAuthenticationError(
                "Token Authentication failed: delegation tokens are not supported by this broker"
            )
        username = username_from_sasl_name(client_first.sasl_name)
        if client_first.authorization_id and client_first.authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        try:
            credential = self._credentials(username, self.mechanism)
        except Exception as e:
            raise _ScramError("Authentication failed: Credentials could not be obtained") from e
        if credential is None:
            # Kafka fails right here. We answer with a stand-in challenge instead and fail the
            # final step with the very same message as a wrong password, so that a client cannot
            # tell an unknown user from a bad password by where the exchange stops (RFC 5802 9).
            credential = _unknown_user_credential(self.mechanism, username)
            self._known_user = False
        else:
            self._known_user = True
            if credential.iterations < self._scram.min_iterations:
                raise _ScramError(
                    f"Iterations {credential.iterations} is less than the minimum "
                    f"{self._scram.min_iterations} for {self.mechanism}"
                )
        self._client_first = client_first
        self._credential = credential
        self._authorization_id = username
        self.extensions = {
            k: v for k, v in client_first.extensions.items() if k in SUPPORTED_EXTENSIONS
        }
        self._nonce = client_first.nonce + self._nonce_factory()
        self._server_first = (
            f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        )
        return self._server_first.encode("ascii")

    def _receive_client_final(self, response: bytes) -> bytes:
        assert self._client_first is not None and self._credential is not None
        assert self._server_first is not None
        client_final = ClientFinalMessage.parse(_to_message(response))
        if client_final.channel_binding != self._client_first.gs2_header.encode("utf-8"):
            # RFC 5802: without channel binding, c= carries the gs2 header ("biws" for "n,,").
            raise _ScramError("Invalid channel binding in the final client message.")
        # As Kafka's ScramSaslServer: the nonce must end with the one the server sent (RFC
        # 5802 wants it whole, but librdkafka before 2.6.1, Debian's kcat among them, puts
        # more in front). It is in the AuthMessage the proof covers: nothing is weakened.
        if not client_final.nonce.endswith(self._nonce):
            raise _ScramError("Invalid client nonce in the final client message.")
        auth_message = ",".join(
            (self._client_first.bare, self._server_first, client_final.without_proof)
        ).encode("utf-8")
        hash_name = self._scram.hash_name
        stored_key = self._credential.stored_key
        client_signature = hmac.digest(stored_key, auth_message, hash_name)
        if len(client_final.proof) != len(client_signature):
            raise _ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(client_signature, client_final.proof, strict=True))
        computed_stored_key = hashlib.new(hash_name, client_key).digest()
        if not hmac.compare_digest(computed_stored_key, stored_key) or not self._known_user:
            raise _ScramError("Invalid client credentials")
        server_signature = hmac.digest(self._credential.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(server_signature)

    def _clear_credentials(self) -> None:
        self._credential = None
        self._client_first = None
        self._server_first = None

    def _fail(self) -> None:
        self._clear_credentials()
        self._state = _FAILED

    def is_complete(self) -> bool:
        return self._state == _COMPLETE

    def authorization_id(self) -> str:
        if self._state != _COMPLETE or self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def session_expiration_ms(self) -> int | None:
        return None  # only delegation tokens expire, and we have none


def _unknown_user_credential(mechanism: str, username: str) -> ScramCredential:
    # The same salt every time for a name (a random one would give the user away on a second
    # try), in the shape of Kafka's salts; the keys are random: no proof can match them.
    digest = hmac.digest(_UNKNOWN_USER_SALT_KEY, f"{mechanism}\x00{username}".encode(), "sha256")
    salt = _base36(int.from_bytes(digest[:17], "big") >> 6).encode("ascii")
    size = hashlib.new(SCRAM_MECHANISMS[mechanism].hash_name).digest_size
    return ScramCredential(salt, secrets.token_bytes(size), secrets.token_bytes(size), 4096)


def create_server(
    mechanism: str,
    configs: Mapping[str, str | None],
    credentials: CredentialLookup,
    *,
    reauthenticating: bool = False,
) -> ScramSaslServer:
    handler = server_callback_handler_class(configs, mechanism)
    if handler is not None and handler != SCRAM_SERVER_CALLBACK_HANDLER:
        raise ValueError(
            f"sasl.server.callback.handler.class {handler} is not supported for {mechanism}: "
            "this broker checks SCRAM credentials against its own credential store "
            f"({SCRAM_SERVER_CALLBACK_HANDLER})"
        )
    return ScramSaslServer(mechanism, credentials, reauthenticating=reauthenticating)


# --------------------------------------------------------------------------- helpers


def _to_message(response: bytes) -> str:
    # Java's new String(bytes, UTF_8); anything non-ASCII then fails Kafka's grammar anyway.
    return response.decode("utf-8", errors="replace")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    # java.util.Base64's basic decoder: strict alphabet, padding optional.
    if len(text) % 4:
        text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise ValueError(str(e)) from None


def _java_split(text: str, separator: str) -> list[str]:
    # String.split drops trailing empty strings (but keeps a lone "" for empty input).
    parts = text.split(separator)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(number: int) -> str:
    if number == 0:
        return "0"
    digits = []
    while number:
        number, rest = divmod(number, 36)
        digits.append(_DIGITS36[rest])
    return "".join(reversed(digits))
