"""SASL/OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer, with Kafka's two server
validators:

- OAuthBearerUnsecuredValidatorCallbackHandler, the default: unsecured JWS (alg "none", no
  signature), configured by the JAAS options unsecuredValidator*. For development only, as in
  Kafka: anybody can mint such a token.
- OAuthBearerValidatorCallbackHandler (KIP-768), when sasl.server.callback.handler.class names
  it: signed JWTs checked against the keys of a JWKS (sasl.oauthbearer.jwks.endpoint.url, a
  file:// or http(s) URL), with the expected audience / issuer, the sub and scope claim names
  and the clock skew of Kafka's sasl.oauthbearer.* settings.

A token that does not validate is answered, as RFC 7628 3.2.2 and Kafka do, with a JSON error
challenge ({"status":"invalid_token"}); the client then sends a lone %x01 and the exchange fails
with that JSON as the error message.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import os
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import jwt
from jwt.algorithms import get_default_algorithms

from odradek.security.sasl import (
    OAUTHBEARER,
    SaslAuthenticationError,
    config_value,
    invalid_credentials_message,
    server_callback_handler_class,
)

log = logging.getLogger(__name__)

UNSECURED_VALIDATOR_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
VALIDATOR_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
)
# The KIP-768 class under its first (3.1, since deprecated) package.
_DEPRECATED_VALIDATOR_CALLBACK_HANDLER = (
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler"
)

# Kafka's SaslConfigs names and defaults.
SASL_OAUTHBEARER_JWKS_ENDPOINT_URL = "sasl.oauthbearer.jwks.endpoint.url"
SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS = "sasl.oauthbearer.jwks.endpoint.refresh.ms"
SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS = "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"
SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS = (
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"
)
SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS = "sasl.oauthbearer.clock.skew.seconds"
SASL_OAUTHBEARER_EXPECTED_AUDIENCE = "sasl.oauthbearer.expected.audience"
SASL_OAUTHBEARER_EXPECTED_ISSUER = "sasl.oauthbearer.expected.issuer"
SASL_OAUTHBEARER_SCOPE_CLAIM_NAME = "sasl.oauthbearer.scope.claim.name"
SASL_OAUTHBEARER_SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"
DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS = 60 * 60 * 1000
DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS = 100
DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS = 10000
DEFAULT_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS = 30
DEFAULT_SASL_OAUTHBEARER_SCOPE_CLAIM_NAME = "scope"
DEFAULT_SASL_OAUTHBEARER_SUB_CLAIM_NAME = "sub"

# The unsecured validator's JAAS options.
PRINCIPAL_CLAIM_NAME_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_NAME_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION = "unsecuredValidatorAllowableClockSkewMs"

BYTE_CONTROL_A = b"\x01"
_INTERNAL_ERROR_ON_SERVER = (
    "Authentication could not be performed due to an internal error on the server"
)
_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)


# --------------------------------------------------------------------------- tokens


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    """Kafka's OAuthBearerToken: what a validated token says."""

    value: str
    principal_name: str
    lifetime_ms: int  # expiry, ms since the epoch
    start_time_ms: int | None  # "iat", when the token has one
    scope: frozenset[str]
    claims: Mapping[str, Any] = field(default_factory=dict)


class OAuthBearerValidationError(Exception):
    """A token that does not validate (Kafka's OAuthBearerValidationResult failure /
    ValidateException): the description is logged; the client sees only the RFC 7628 error
    status, and the scope Kafka adds for a missing required scope."""

    def __init__(
        self,
        description: str,
        *,
        scope: str | None = None,
        openid_configuration: str | None = None,
    ) -> None:
        super().__init__(description)
        self.description = description
        self.scope = scope
        self.openid_configuration = openid_configuration

    @property
    def status(self) -> str:
        return "insufficient_scope" if self.scope is not None else "invalid_token"


class TokenValidator(Protocol):
    def validate(self, token_value: str) -> OAuthBearerToken:
        """The validated token; raises OAuthBearerValidationError."""
        ...


def json_error_response(
    status: str, scope: str | None = None, openid_configuration: str | None = None
) -> str:
    """Kafka's OAuthBearerSaslServer.jsonErrorResponse, byte for byte (its ", " spacing too)."""
    response = f'{{"status":"{status}"'
    if scope is not None:
        response += f', "scope":"{scope}"'
    if openid_configuration is not None:
        response += f', "openid-configuration":"{openid_configuration}"'
    return response + "}"


# --------------------------------------------------------------------------- client message

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_CLIENT_INITIAL_RESPONSE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY}={_VALUE}\x01)*)\x01"
)
# Java's \w is ASCII-only.
_AUTH = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
AUTH_KEY = "auth"


class _OAuthBearerError(Exception):
    """Kafka's SaslException here: logged; the client gets the generic message."""


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    """Kafka's OAuthBearerClientInitialResponse: gs2 header, then %x01-separated key=value
    pairs ("auth=Bearer <token>" and SASL extensions), ending %x01%x01."""

    token_value: str
    authorization_id: str
    extensions: dict[str, str]

    @classmethod
    def parse(cls, response: bytes) -> ClientInitialResponse:
        message = response.decode("utf-8", errors="replace")
        match = _CLIENT_INITIAL_RESPONSE.fullmatch(message)
        if match is None:
            raise _OAuthBearerError("Invalid OAUTHBEARER client first message")
        properties: dict[str, str] = {}
        for pair in match["kvpairs"].split("\x01"):
            if pair:
                key, _, value = pair.partition("=")
                properties[key] = value
        auth = properties.pop(AUTH_KEY, None)
        if auth is None:
            raise _OAuthBearerError(
                "Invalid OAUTHBEARER client first message: 'auth' not specified"
            )
        auth_match = _AUTH.fullmatch(auth)
        if auth_match is None:
            raise _OAuthBearerError(
                "Invalid OAUTHBEARER client first message: invalid 'auth' format"
            )
        if auth_match["scheme"].lower() != "bearer":
            raise _OAuthBearerError(
                "Invalid scheme in OAUTHBEARER client first message: " + auth_match["scheme"]
            )
        authzid = match["authzid"] or ""
        return cls(
            token_value=auth_match["token"],
            authorization_id=authzid.replace("=2C", ",").replace("=3D", "="),
            extensions=properties,
        )


# --------------------------------------------------------------------------- server


class OAuthBearerSaslServer:
    """One OAUTHBEARER exchange."""

    mechanism = OAUTHBEARER

    def __init__(self, validator: TokenValidator, *, reauthenticating: bool = False) -> None:
        self._validator = validator
        self._reauthenticating = reauthenticating
        self._complete = False
        self._error_message: str | None = None
        self.token: OAuthBearerToken | None = None
        self.extensions: dict[str, str] = {}  # validated SASL extensions, once complete

    def evaluate_response(self, response: bytes) -> bytes:
        if response == BYTE_CONTROL_A and self._error_message is not None:
            # RFC 7628 3.2.3: the client's dummy response to our error challenge.
            log.debug("Received %%x01 response from client after it received our error")
            raise SaslAuthenticationError(self._error_message)
        self._error_message = None
        try:
            initial = ClientInitialResponse.parse(response)
        except _OAuthBearerError as e:
            log.debug("%s", e)
            raise self._generic_failure() from e
        return self._process(initial)

    def _process(self, initial: ClientInitialResponse) -> bytes:
        try:
            token = self._validator.validate(initial.token_value)
        except OAuthBearerValidationError as e:
            log.debug("OAUTHBEARER token validation failed: %s", e.description)
            self._error_message = json_error_response(
                e.status, e.scope, e.openid_configuration
            )
            return self._error_message.encode("utf-8")
        except Exception as e:
            # A broken validator (I/O, a bug): Kafka's handleCallbackError, a SaslException.
            log.warning("%s: %s", _INTERNAL_ERROR_ON_SERVER, e, exc_info=True)
            raise self._generic_failure() from e
        # RFC 7628 allows an authorization id, but it must be the token's principal.
        if initial.authorization_id and initial.authorization_id != token.principal_name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id "
                f"({initial.authorization_id}) that is different from the token's principal "
                f"name ({token.principal_name})"
            )
        # Both of Kafka's server validators accept every extension as valid.
        self.extensions = dict(initial.extensions)
        self.token = token
        self._complete = True
        log.debug("Successfully authenticate User=%s", token.principal_name)
        return b""

    def _generic_failure(self) -> SaslAuthenticationError:
        return SaslAuthenticationError(
            invalid_credentials_message(OAUTHBEARER, self._reauthenticating)
        )

    def is_complete(self) -> bool:
        return self._complete

    def authorization_id(self) -> str:
        if not self._complete or self.token is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self.token.principal_name

    def session_expiration_ms(self) -> int | None:
        return self.token.lifetime_ms if self._complete and self.token is not None else None


# --------------------------------------------------------------------------- unsecured JWS

_SCOPE_ITEM = re.compile(r"[\x23-\x5b\x5d-\x7e\x21]+")


def parse_scope(space_delimited_scope: str) -> list[str]:
    """OAuthBearerScopeUtils.parseScope: space-delimited scope items of RFC 6749 3.3."""
    items = []
    for item in space_delimited_scope.split(" "):
        if item:
            if not _SCOPE_ITEM.fullmatch(item):
                raise ValueError(f"Invalid scope value: {item}")
            items.append(item)
    return items


class UnsecuredJwsValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler with OAuthBearerUnsecuredJws and
    OAuthBearerValidationUtils."""

    def __init__(
        self,
        now_ms: Callable[[], int],
        *,
        principal_claim_name: str = "sub",
        scope_claim_name: str = "scope",
        required_scope: Iterable[str] = (),
        allowable_clock_skew_ms: int = 0,
    ) -> None:
        if allowable_clock_skew_ms < 0:
            raise ValueError(
                f"Allowable clock skew millis must not be negative: {allowable_clock_skew_ms}"
            )
        self._now_ms = now_ms
        self.principal_claim_name = principal_claim_name
        self.scope_claim_name = scope_claim_name
        self.required_scope = list(required_scope)
        self.allowable_clock_skew_ms = allowable_clock_skew_ms

    @classmethod
    def from_jaas_options(
        cls, jaas_options: Mapping[str, str], now_ms: Callable[[], int]
    ) -> UnsecuredJwsValidator:
        """The unsecuredValidator* JAAS options; ValueError for a value Kafka refuses."""
        principal = jaas_options.get(PRINCIPAL_CLAIM_NAME_OPTION)
        scope = jaas_options.get(SCOPE_CLAIM_NAME_OPTION)
        required = jaas_options.get(REQUIRED_SCOPE_OPTION)
        skew = jaas_options.get(ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION)
        skew_ms = 0
        if not _is_blank(skew):
            assert skew is not None
            skew_ms = _parse_java_int(
                _java_trim(skew), f"JAAS option {ALLOWABLE_CLOCK_SKEW_MILLIS_OPTION}"
            )
            if skew_ms < 0:
                raise ValueError(f"Allowable clock skew millis must not be negative: {skew}")
        try:
            required_scope = [] if _is_blank(required) else parse_scope(_java_trim(required or ""))
        except ValueError as e:
            raise ValueError(f"JAAS option {REQUIRED_SCOPE_OPTION}: {e}") from None
        return cls(
            now_ms,
            principal_claim_name="sub" if _is_blank(principal) else _java_trim(principal or ""),
            scope_claim_name="scope" if _is_blank(scope) else _java_trim(scope or ""),
            required_scope=required_scope,
            allowable_clock_skew_ms=skew_ms,
        )

    def validate(self, token_value: str) -> OAuthBearerToken:
        token = self._parse(token_value)
        now = self._now_ms()
        skew = self.allowable_clock_skew_ms
        claims = token.claims
        iat = None if claims.get("iat") is None else _double(claims["iat"])
        exp = _double(claims["exp"])  # _parse made sure it is a number
        if iat is not None and 1000 * iat > now + skew:
            raise OAuthBearerValidationError(
                f"The Issued At value ({iat:f} seconds) was after the indicated time "
                f"({now} ms) plus allowable clock skew ({skew} ms)"
            )
        if now - skew >= 1000 * exp:
            raise OAuthBearerValidationError(
                f"The indicated time ({now} ms) minus allowable clock skew ({skew} ms) was on or "
                f"after the Expiration Time value ({exp:f} seconds)"
            )
        if iat is not None and exp <= iat:
            raise OAuthBearerValidationError(
                f"The Expiration Time time ({exp:f} seconds) was not after the Issued At "
                f"time ({iat:f} seconds)"
            )
        for required in self.required_scope:
            if required not in token.scope:
                raise OAuthBearerValidationError(
                    f"The provided scope ({_java_collection(sorted(token.scope))}) was missing a "
                    f"required scope ({required}).  All required scope elements: "
                    f"{_java_collection(self.required_scope)}",
                    scope=_java_collection(self.required_scope),
                )
        log.debug("Successfully validated token with principal %s: %s", token.principal_name,
                  dict(claims))
        return token

    def _parse(self, compact: str) -> OAuthBearerToken:
        """OAuthBearerUnsecuredJws's constructor, in its order of checks."""
        if ".." in compact:
            raise OAuthBearerValidationError("Malformed compact serialization contains '..'")
        splits = _java_split(compact, ".")
        if compact.endswith("."):
            splits.append("")
        if len(splits) != 3:
            raise OAuthBearerValidationError(
                "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                "values"
            )
        header = _to_claims_map(splits[0])
        claims = _to_claims_map(splits[1])
        alg = header.get("alg")
        if alg is None:
            raise OAuthBearerValidationError("JWS header must have an Algorithm value")
        if _as_text(alg) != "none":
            raise OAuthBearerValidationError("Unsecured JWS must have 'none' for an algorithm")
        if splits[2]:
            raise OAuthBearerValidationError("Unsecured JWS must not contain a digital signature")
        scope = self._scope(claims)
        exp = _claim(claims, "exp", "Number")
        if exp is None:
            raise OAuthBearerValidationError("No expiration time in JWT")
        principal_name = _claim(claims, self.principal_claim_name, "String")
        if _is_blank(principal_name):
            raise OAuthBearerValidationError(
                f"No principal name in JWT claim: {self.principal_claim_name}"
            )
        iat = _claim(claims, "iat", "Number")
        return OAuthBearerToken(
            value=compact,
            principal_name=principal_name,
            lifetime_ms=_java_round_ms(exp),
            start_time_ms=None if iat is None else _java_round_ms(iat),
            scope=scope,
            claims=claims,
        )

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value = claims.get(self.scope_claim_name)
        if isinstance(value, str):
            # Kafka takes a string scope claim as ONE item (it does not split on spaces).
            return frozenset() if _is_blank(value) else frozenset({_java_trim(value)})
        items = _claim(claims, self.scope_claim_name, "List")
        if not items:
            return frozenset()
        return frozenset(_java_trim(item) for item in items if not _is_blank(item))


def _to_claims_map(split: str) -> dict[str, Any]:
    """OAuthBearerUnsecuredJws.toMap: base64 then JSON, values as Jackson gives them to Kafka
    (arrays of text, numbers, everything else as text)."""
    try:
        decoded = _b64decode_lenient(split)
    except ValueError:
        raise OAuthBearerValidationError("malformed Base64 URL encoded value") from None
    try:
        node = json.loads(decoded, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):  # e.g. [[[[...]]]] claims
        raise OAuthBearerValidationError("malformed JSON") from None
    if not isinstance(node, dict):
        return {}  # Jackson's fields() of a non-object: nothing
    return {key: _jackson_value(value) for key, value in node.items()}


def _jackson_value(value: Any) -> Any:
    if isinstance(value, list):
        return [_as_text(element) for element in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return _as_text(value)


def _as_text(value: Any) -> str:
    """Jackson's JsonNode.asText()."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return ""  # objects and arrays


def _claim(claims: Mapping[str, Any], name: str, java_type: str) -> Any:
    """OAuthBearerUnsecuredJws.claim(name, type): None when absent, the value when of the
    type, else a failure naming both types."""
    value = claims.get(name)
    if value is None:
        return None
    ok = {
        "String": isinstance(value, str),
        "Number": isinstance(value, (int, float)),
        "List": isinstance(value, list),
    }[java_type]
    if not ok:
        raise OAuthBearerValidationError(
            f"The '{name}' claim was not of type {java_type}: {_java_type_name(value)}"
        )
    return value


def _java_type_name(value: Any) -> str:
    if isinstance(value, str):
        return "String"
    if isinstance(value, list):
        return "ArrayList"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return "Integer"
        return "Long" if _LONG_MIN <= value <= _LONG_MAX else "BigInteger"
    return type(value).__name__


def _double(number: float) -> float:
    """Number.doubleValue(): a huge integer becomes an infinity, not an OverflowError."""
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _java_round_ms(seconds: float) -> int:
    """Math.round(seconds * 1000): half up, saturating at the long range."""
    product = _double(seconds) * 1000
    if math.isnan(product):
        return 0
    if product >= _LONG_MAX:
        return _LONG_MAX
    if product <= _LONG_MIN:
        return _LONG_MIN
    return math.floor(product + 0.5)


# --------------------------------------------------------------------------- signed JWT

_SIGNING_ALGORITHMS = frozenset(get_default_algorithms()) - {"none"}
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521", "ES256K": "secp256k1"}


def _key_type_for(alg: str) -> str | None:
    if alg.startswith(("RS", "PS")):
        return "RSA"
    if alg.startswith("ES"):
        return "EC"
    if alg.startswith("HS"):
        return "oct"
    if alg in ("EdDSA", "Ed25519", "Ed448"):
        return "OKP"
    return None


def _jwks_keys(document: Any) -> list[dict[str, Any]]:
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise ValueError("The JSON JWKS content does not include the keys member.")
    return [key for key in document["keys"] if isinstance(key, dict)]


class JwksKeyResolver:
    """The verification keys of a JWKS, as Kafka's JwksFileVerificationKeyResolver (a file is
    read once, at start-up) and RefreshingHttpsJwksVerificationKeyResolver (an http(s) JWKS is
    fetched at start-up and again every refresh_ms; a token whose key id is unknown makes it
    refresh early, at most once a minute per key id).

    With ``background`` (the broker's http(s) JWKS), a refresh that is due, or asked for by an
    unknown key id, runs on a thread of its own, one at a time, and the keys are swapped in
    when it is done: a slow or hostile identity provider never holds the event loop the
    authentications run on, and the token that asked fails now, as in Kafka (its
    RefreshingHttpsJwks refreshes on an executor). Without it, the refresh happens in the
    call that notices it."""

    MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
    MISSING_KEY_ID_CACHE_IN_FLIGHT_MS = 60000
    MISSING_KEY_ID_MAX_KEY_LENGTH = 1000

    def __init__(
        self,
        location: str,
        fetch: Callable[[str], Any],
        *,
        refresh_ms: int | None = None,
        retry_backoff_ms: int = DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS,
        background: bool = False,
    ) -> None:
        if refresh_ms is not None and refresh_ms <= 0:
            raise ValueError(
                "JWKS validation key refresh configuration value retryWaitMs value must be "
                "positive"
            )
        self.location = location
        self._fetch = fetch
        self._refresh_ms = refresh_ms  # None: never refreshed (a file)
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._lock = threading.RLock()
        self._keys: list[dict[str, Any]] = []
        self._key_cache: dict[tuple[int, str], jwt.PyJWK | None] = {}
        self._next_refresh_ms: int | None = None
        self._failed_refreshes = 0
        self._missing_key_ids: OrderedDict[str, int] = OrderedDict()
        self._background = background
        self._refreshing: threading.Thread | None = None

    def init(self, now_ms: int) -> None:
        """The first load; raises (OSError, ValueError, jwt.PyJWTError) when it fails."""
        with self._lock:
            self._load()
            if self._refresh_ms is not None:
                self._next_refresh_ms = now_ms + self._refresh_ms

    def _load(self) -> None:
        self._keys = _jwks_keys(self._fetch(self.location))
        self._key_cache = {}

    def refresh_if_due(self, now_ms: int) -> None:
        """The scheduled refresh; a failure keeps the keys we have and retries with Kafka's
        exponential backoff (retry.backoff.ms doubling up to retry.backoff.max.ms)."""
        with self._lock:
            if self._next_refresh_ms is None or now_ms < self._next_refresh_ms:
                return
            self._refresh(now_ms)

    def _refresh(self, now_ms: int) -> bool:
        """Call with the lock held. In the background: starts the fetch (unless one is
        running) and answers False; the keys change when it is done."""
        if self._background:
            if self._refreshing is None or not self._refreshing.is_alive():
                # Not again before the fetch is done (it moves this on when it ends).
                self._next_refresh_ms = None
                self._refreshing = threading.Thread(
                    target=self._fetch_in_background, args=(now_ms,),
                    name="jwks-refresh", daemon=True)
                self._refreshing.start()
            return False
        try:
            self._load()
        except Exception as e:
            self._refresh_failed(now_ms, e)
            return False
        self._refresh_done(now_ms)
        return True

    def _fetch_in_background(self, now_ms: int) -> None:
        """The fetch, off the lock (validations go on with the keys there are), then the
        keys swapped in under it."""
        try:
            document = self._fetch(self.location)
            keys = _jwks_keys(document)
        except Exception as e:
            with self._lock:
                self._refresh_failed(now_ms, e)
            return
        with self._lock:
            self._keys, self._key_cache = keys, {}
            self._refresh_done(now_ms)

    def _refresh_failed(self, now_ms: int, e: Exception) -> None:
        assert self._refresh_ms is not None
        backoff = min(self._retry_backoff_ms * 2**self._failed_refreshes,
                      self._retry_backoff_max_ms)
        self._failed_refreshes += 1
        self._next_refresh_ms = now_ms + max(backoff, 1)
        log.warning(
            "OAuth JWKS refresh of %s encountered an error; not updating local JWKS cache: %s",
            self.location, e,
        )

    def _refresh_done(self, now_ms: int) -> None:
        assert self._refresh_ms is not None
        self._failed_refreshes = 0
        self._next_refresh_ms = now_ms + self._refresh_ms
        for key in self._keys:
            self._missing_key_ids.pop(str(key.get("kid")), None)
        log.info("OAuth JWKS refresh of %s complete", self.location)

    def maybe_expedite_refresh(self, key_id: str, now_ms: int) -> bool:
        """A token named a key we do not have: refresh now unless we did so for that key id in
        the last minute (RefreshingHttpsJwks.maybeExpediteRefresh). True when refreshed."""
        with self._lock:
            if self._refresh_ms is None:
                return False
            if len(key_id) > self.MISSING_KEY_ID_MAX_KEY_LENGTH:
                log.warning("Key ID %s... was too long to cache", key_id[:50])
                return False
            next_check = self._missing_key_ids.get(key_id)
            if next_check is not None and next_check > now_ms:
                return False
            self._missing_key_ids[key_id] = now_ms + self.MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
            self._missing_key_ids.move_to_end(key_id)
            while len(self._missing_key_ids) > self.MISSING_KEY_ID_CACHE_MAX_ENTRIES:
                self._missing_key_ids.popitem(last=False)
            return self._refresh(now_ms)

    def candidate_keys(self, header: Mapping[str, Any], alg: str) -> list[jwt.PyJWK]:
        """The keys that may have signed a JWS with this header (jose4j's
        VerificationJwkSelector: key id, key type and curve, "use", "alg", "key_ops")."""
        kid = header.get("kid")
        key_type = _key_type_for(alg)
        with self._lock:
            keys = []
            for index, jwk in enumerate(self._keys):
                if kid is not None and jwk.get("kid") != kid:
                    continue
                if jwk.get("kty") != key_type or jwk.get("use", "sig") != "sig":
                    continue
                if jwk.get("alg", alg) != alg:
                    continue
                if alg in _EC_CURVES and jwk.get("crv", _EC_CURVES[alg]) != _EC_CURVES[alg]:
                    continue
                key_ops = jwk.get("key_ops")
                if isinstance(key_ops, list) and "verify" not in key_ops:
                    continue
                cache_key = (index, alg)
                if cache_key not in self._key_cache:
                    try:
                        self._key_cache[cache_key] = jwt.PyJWK(jwk, algorithm=alg)
                    except jwt.PyJWTError as e:
                        log.debug("Unusable JWK %s from %s: %s", jwk.get("kid"), self.location, e)
                        self._key_cache[cache_key] = None
                key = self._key_cache[cache_key]
                if key is not None:
                    keys.append(key)
            return keys


class JwtValidator:
    """Kafka's ValidatorAccessTokenValidator (jose4j's JwtConsumer with the JWKS's keys): a
    signed JWT whose exp and iat are required, with the expected audience and issuer."""

    def __init__(
        self,
        key_resolver: JwksKeyResolver,
        now_ms: Callable[[], int],
        *,
        clock_skew_seconds: int = DEFAULT_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS,
        expected_audiences: Iterable[str] | None = None,
        expected_issuer: str | None = None,
        scope_claim_name: str = DEFAULT_SASL_OAUTHBEARER_SCOPE_CLAIM_NAME,
        sub_claim_name: str = DEFAULT_SASL_OAUTHBEARER_SUB_CLAIM_NAME,
    ) -> None:
        self._key_resolver = key_resolver
        self._now_ms = now_ms
        self.clock_skew_seconds = clock_skew_seconds
        self.expected_audiences = sorted(set(expected_audiences)) if expected_audiences else None
        self.expected_issuer = expected_issuer
        self.scope_claim_name = scope_claim_name
        self.sub_claim_name = sub_claim_name

    def validate(self, token_value: str) -> OAuthBearerToken:
        token = _serialized_jwt(token_value)
        try:
            claims = self._verify(token)
        except OAuthBearerValidationError as e:
            raise OAuthBearerValidationError(
                f"Could not validate the access token: {e.description}"
            ) from None
        return self._to_token(token, claims)

    def _verify(self, token: str) -> dict[str, Any]:
        """jose4j's JwtConsumer.process: signature, then the registered claims."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise OAuthBearerValidationError(f"Invalid JWS header: {e}") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in _SIGNING_ALGORITHMS:
            # AlgorithmConstraints.DISALLOW_NONE, and what no key of ours could verify anyway.
            raise OAuthBearerValidationError(
                f"'{alg}' is not a permitted algorithm for a signed JWT"
            )
        now_ms = self._now_ms()
        self._key_resolver.refresh_if_due(now_ms)
        keys = self._key_resolver.candidate_keys(header, alg)
        kid = header.get("kid")
        if not keys and isinstance(kid, str) and self._key_resolver.maybe_expedite_refresh(
            kid, now_ms
        ):
            keys = self._key_resolver.candidate_keys(header, alg)
        if not keys:
            raise OAuthBearerValidationError(
                "Unable to find a suitable verification key for JWS w/ header "
                f"{json.dumps(header)} from JWKs obtained from {self._key_resolver.location}"
            )
        claims: dict[str, Any] | None = None
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key=key.key,
                    algorithms=[alg],
                    audience=self.expected_audiences,
                    issuer=self.expected_issuer,
                    # The times are checked below against the injected clock, like jose4j.
                    options={
                        "verify_exp": False,
                        "verify_nbf": False,
                        "verify_iat": False,
                        "verify_sub": False,
                        "verify_jti": False,
                    },
                )
                break
            except jwt.InvalidSignatureError:
                continue  # another key with the same id / type may be the one
            except jwt.PyJWTError as e:
                raise OAuthBearerValidationError(str(e)) from None
        if claims is None:
            raise OAuthBearerValidationError("JWS signature is invalid")
        self._check_times(claims, now_ms)
        return claims

    def _check_times(self, claims: Mapping[str, Any], now_ms: int) -> None:
        """jose4j's NumericDateValidator: whole seconds, exp and iat required."""
        exp = _numeric_date(claims, "exp")
        iat = _numeric_date(claims, "iat")
        nbf = _numeric_date(claims, "nbf")
        if exp is None:
            raise OAuthBearerValidationError("No Expiration Time (exp) claim present.")
        if iat is None:
            raise OAuthBearerValidationError("No Issued At (iat) claim present.")
        now = now_ms // 1000
        skew = self.clock_skew_seconds
        if now - skew >= exp:
            raise OAuthBearerValidationError(
                f"The JWT is no longer valid - the evaluation time {now} is on or after the "
                f"Expiration Time (exp={exp}) claim value (even when providing {skew} seconds "
                "of leeway to account for clock skew)."
            )
        if nbf is not None and now + skew < nbf:
            raise OAuthBearerValidationError(
                f"The JWT is not yet valid as the evaluation time {now} is before the Not "
                f"Before (nbf={nbf}) claim time (even when providing {skew} seconds of leeway "
                "to account for clock skew)."
            )

    def _to_token(self, token: str, claims: Mapping[str, Any]) -> OAuthBearerToken:
        """The rest of ValidatorAccessTokenValidator.validate (ClaimValidationUtils)."""
        scope_raw = claims.get(self.scope_claim_name)
        if isinstance(scope_raw, str):
            scope_items: list[Any] = [scope_raw]
        elif isinstance(scope_raw, list):
            scope_items = scope_raw
        else:
            scope_items = []
        sub_raw = claims.get(self.sub_claim_name)
        if sub_raw is not None and not isinstance(sub_raw, str):
            raise OAuthBearerValidationError(
                f"Could not extract the '{self.sub_claim_name}' claim from the access token"
            )
        scope: set[str] = set()
        for item in scope_items:
            if not isinstance(item, str):
                raise OAuthBearerValidationError(
                    f"{self.scope_claim_name} value must be a string: {item!r}"
                )
            item = _validate_string(self.scope_claim_name, item)
            if item in scope:
                raise OAuthBearerValidationError(
                    f"{self.scope_claim_name} value must not contain duplicates - {item} already "
                    "present"
                )
            scope.add(item)
        exp_s = _numeric_date(claims, "exp")
        iat_s = _numeric_date(claims, "iat")
        assert exp_s is not None and iat_s is not None  # _check_times required both
        if exp_s < 0:
            raise OAuthBearerValidationError(
                f'exp value must be non-negative; value given was "{exp_s * 1000}"'
            )
        if iat_s < 0:
            raise OAuthBearerValidationError(
                f'iat value must be null or non-negative; value given was "{iat_s * 1000}"'
            )
        subject = _validate_string(self.sub_claim_name, sub_raw)
        return OAuthBearerToken(
            value=token,
            principal_name=subject,
            lifetime_ms=exp_s * 1000,
            start_time_ms=iat_s * 1000,
            scope=frozenset(scope),
            claims=dict(claims),
        )


def _serialized_jwt(token: str | None) -> str:
    """Kafka's SerializedJwt: three non-blank dot-separated sections."""
    token = _java_trim(token or "")
    if not token:
        raise OAuthBearerValidationError(
            "Empty JWT provided; expected three sections (header, payload, and signature)"
        )
    splits = _java_split(token, ".")
    if len(splits) != 3:
        raise OAuthBearerValidationError(
            f"Malformed JWT provided ({token}); expected three sections (header, payload, and "
            f"signature), but {len(splits)} sections provided"
        )
    for section, name in zip(splits, ("header", "payload", "signature"), strict=True):
        if not _java_trim(section):
            raise OAuthBearerValidationError(
                "Malformed JWT provided; expected at least three sections (header, payload, and "
                f"signature), but {name} section missing"
            )
    return token


def _numeric_date(claims: Mapping[str, Any], name: str) -> int | None:
    """jose4j's getNumericDateClaimValue: a JSON number, as whole seconds (long truncation)."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OAuthBearerValidationError(
            f"The value of the '{name}' claim is not the expected type ({value!r} - not a number)"
        )
    if isinstance(value, float):
        if not math.isfinite(value):
            raise OAuthBearerValidationError(f"{value} is unreasonable for a NumericDate")
        value = int(value)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OAuthBearerValidationError(f"{value} is unreasonable for a NumericDate")
    return value


def _validate_string(name: str, value: str | None) -> str:
    if value is None:
        raise OAuthBearerValidationError(f"{name} value must be non-null")
    if not value:
        raise OAuthBearerValidationError(f"{name} value must be non-empty")
    value = _java_trim(value)
    if not value:
        raise OAuthBearerValidationError(f"{name} value must not contain only whitespace")
    return value


# --------------------------------------------------------------------------- JWKS sources


def fetch_jwks_file(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def fetch_jwks_http(url: str) -> Any:
    """One GET of an http(s) JWKS (PyJWT's client: urllib, certificates from the system)."""
    client = jwt.PyJWKClient(url, cache_jwk_set=False, cache_keys=False, timeout=10)
    return client.fetch_data()


_RESOLVERS: dict[tuple[str, int, int, int], JwksKeyResolver] = {}
_RESOLVERS_LOCK = threading.Lock()


def clear_jwks_cache() -> None:
    """Forget every loaded JWKS (the next authentication or start-up check loads it again):
    after a listener's OAuth settings change, and between tests."""
    with _RESOLVERS_LOCK:
        _RESOLVERS.clear()


def _shared_key_resolver(
    configs: Mapping[str, str | None], now_ms: int
) -> JwksKeyResolver:
    """One resolver per JWKS location and refresh settings for the whole broker, as Kafka's
    OAuthBearerValidatorCallbackHandler.VERIFICATION_KEY_RESOLVER_CACHE."""
    name = SASL_OAUTHBEARER_JWKS_ENDPOINT_URL
    url = _validate_string_config(configs, name, required=True)
    assert url is not None
    parsed = urllib.parse.urlsplit(url)
    if not parsed.scheme:
        raise ValueError(
            f"The OAuth configuration option {name} contains a URL ({url}) that is malformed: "
            f"no protocol: {url}"
        )
    protocol = parsed.scheme.lower()
    if protocol not in ("http", "https", "file"):
        raise ValueError(
            f"The OAuth configuration option {name} contains a URL ({url}) that contains an "
            f'invalid protocol ({protocol}); only "http", "https", and "file" protocol are '
            "supported"
        )
    if protocol == "file":
        # Kafka takes the URI's raw path (no percent-decoding), made absolute.
        path = os.path.abspath(parsed.path)
        if not os.path.exists(path):
            raise ValueError(
                f"The OAuth configuration option {name} contains a file ({path}) that doesn't "
                "exist"
            )
        if not os.access(path, os.R_OK):
            raise ValueError(
                f"The OAuth configuration option {name} contains a file ({path}) that doesn't "
                "have read permission"
            )
        if os.path.isdir(path):
            raise ValueError(
                f"The OAuth configuration option {name} references a directory ({path}), not a "
                "file"
            )
        key = (path, 0, 0, 0)
        refresh_ms: int | None = None
        backoff_ms = backoff_max_ms = 0
        location = path
        fetch: Callable[[str], Any] = fetch_jwks_file
    else:
        refresh_ms = _long_config(
            configs,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS,
            DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS,
            minimum=0,
        )
        backoff_ms = _long_config(
            configs,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS,
            DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MS,
        )
        backoff_max_ms = _long_config(
            configs,
            SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS,
            DEFAULT_SASL_OAUTHBEARER_JWKS_ENDPOINT_RETRY_BACKOFF_MAX_MS,
        )
        key = (url, refresh_ms, backoff_ms, backoff_max_ms)
        location = url
        fetch = fetch_jwks_http
    with _RESOLVERS_LOCK:
        resolver = _RESOLVERS.get(key)
        if resolver is not None:
            return resolver
        resolver = JwksKeyResolver(
            location,
            fetch,
            refresh_ms=refresh_ms,
            retry_backoff_ms=backoff_ms,
            retry_backoff_max_ms=backoff_max_ms,
            background=refresh_ms is not None,  # http(s): off the event loop
        )
        try:
            resolver.init(now_ms)
        except Exception as e:
            # Not cached: the next attempt tries again.
            raise ValueError(
                "The OAuth validator configuration encountered an error when initializing the "
                f"VerificationKeyResolver: could not load the JWKS from {location}: {e}"
            ) from e
        _RESOLVERS[key] = resolver
        return resolver


# --------------------------------------------------------------------------- factory


def create_validator(
    jaas_options: Mapping[str, str],
    configs: Mapping[str, str | None],
    now_ms: Callable[[], int],
) -> TokenValidator:
    """The validator Kafka's broker would configure for this listener's OAUTHBEARER."""
    handler = server_callback_handler_class(configs, OAUTHBEARER)
    if handler is None or handler == UNSECURED_VALIDATOR_CALLBACK_HANDLER:
        return UnsecuredJwsValidator.from_jaas_options(jaas_options, now_ms)
    if handler in (VALIDATOR_CALLBACK_HANDLER, _DEPRECATED_VALIDATOR_CALLBACK_HANDLER):
        return create_jwt_validator(configs, now_ms)
    raise ValueError(
        f"sasl.server.callback.handler.class {handler} is not supported for OAUTHBEARER: use "
        f"{VALIDATOR_CALLBACK_HANDLER} (signed JWTs checked against a JWKS) or leave it unset "
        "(unsecured JWS, for development only)"
    )


def create_jwt_validator(
    configs: Mapping[str, str | None], now_ms: Callable[[], int]
) -> JwtValidator:
    """Kafka's AccessTokenValidatorFactory + VerificationKeyResolverFactory for the broker."""
    audience_value = config_value(configs, OAUTHBEARER, SASL_OAUTHBEARER_EXPECTED_AUDIENCE)
    audiences = None
    if audience_value is not None and audience_value.strip():
        # ConfigDef's LIST type: comma-separated, blanks around the commas ignored.
        audiences = re.split(r"\s*,\s*", audience_value.strip())
    skew = _int_config(
        configs, SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS, DEFAULT_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS
    )
    issuer = _validate_string_config(configs, SASL_OAUTHBEARER_EXPECTED_ISSUER, required=False)
    scope_claim = _validate_string_config(
        configs,
        SASL_OAUTHBEARER_SCOPE_CLAIM_NAME,
        required=True,
        default=DEFAULT_SASL_OAUTHBEARER_SCOPE_CLAIM_NAME,
    )
    sub_claim = _validate_string_config(
        configs,
        SASL_OAUTHBEARER_SUB_CLAIM_NAME,
        required=True,
        default=DEFAULT_SASL_OAUTHBEARER_SUB_CLAIM_NAME,
    )
    assert scope_claim is not None and sub_claim is not None
    resolver = _shared_key_resolver(configs, now_ms())
    return JwtValidator(
        resolver,
        now_ms,
        clock_skew_seconds=skew,
        expected_audiences=audiences,
        expected_issuer=issuer,
        scope_claim_name=scope_claim,
        sub_claim_name=sub_claim,
    )


def create_server(
    jaas_options: Mapping[str, str],
    configs: Mapping[str, str | None],
    now_ms: Callable[[], int],
    *,
    reauthenticating: bool = False,
) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(
        create_validator(jaas_options, configs, now_ms), reauthenticating=reauthenticating
    )


def validate_config(jaas_options: Mapping[str, str], configs: Mapping[str, str | None]) -> None:
    """Start-up check: builds the validator (and so loads the JWKS); raises ValueError."""
    create_validator(jaas_options, configs, lambda: int(time.time() * 1000))


# --------------------------------------------------------------------------- small helpers


def _validate_string_config(
    configs: Mapping[str, str | None], name: str, *, required: bool, default: str | None = None
) -> str | None:
    """ConfigurationUtils.validateString: trimmed; blank is an error when required."""
    value = config_value(configs, OAUTHBEARER, name)
    if value is None:
        value = default
    if value is None:
        if required:
            raise ValueError(f"The OAuth configuration option {name} value must be non-null")
        return None
    value = value.strip()
    if not value:
        if required:
            raise ValueError(
                f"The OAuth configuration option {name} value must not contain only whitespace"
            )
        return None
    return value


def _long_config(
    configs: Mapping[str, str | None], name: str, default: int, *, minimum: int | None = None
) -> int:
    value = config_value(configs, OAUTHBEARER, name)
    number = default if value is None or not value.strip() else _parse_java_long(value, name)
    if minimum is not None and number < minimum:
        raise ValueError(f"The OAuth configuration option {name} value must be at least {minimum}")
    return number


def _int_config(configs: Mapping[str, str | None], name: str, default: int) -> int:
    value = config_value(configs, OAUTHBEARER, name)
    if value is None or not value.strip():
        return default
    return _parse_java_int(value.strip(), name)


def _parse_java_int(text: str, what: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(2**31) <= int(text) < 2**31:
        raise ValueError(f'{what}: For input string: "{text}"')
    return int(text)


def _parse_java_long(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not _LONG_MIN <= int(text) <= _LONG_MAX:
        raise ValueError(f'{what}: For input string: "{text}"')
    return int(text)


def _java_trim(text: str) -> str:
    # String.trim(): every char <= U+0020 at either end.
    return text.strip("".join(chr(c) for c in range(0x21)))


def _is_blank(text: str | None) -> bool:
    return text is None or not _java_trim(text)


def _java_split(text: str, separator: str) -> list[str]:
    # String.split drops trailing empty strings (but keeps a lone "" for empty input).
    parts = text.split(separator)
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def _java_collection(items: Iterable[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _b64decode_lenient(text: str) -> bytes:
    # Base64url as RFC 7515 says (Kafka's own decoder wants the basic alphabet: both accepted).
    text = text.replace("-", "+").replace("_", "/")
    if len(text) % 4:
        text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise ValueError(str(e)) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")
