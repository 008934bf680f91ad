"""SASL/OAUTHBEARER (odradek.security.sasl.oauthbearer): Kafka's unsecured validator (tokens
built by hand here) and its JWKS validator (tokens signed here with `cryptography` keys through
PyJWT, the JWKS written to a temporary file or served on loopback). kafka-python's OAUTHBEARER
client is the oracle for the client message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from odradek.security.sasl import SaslAuthenticationError, create_sasl_server
from odradek.security.sasl import oauthbearer as oauth
from odradek.security.sasl.oauthbearer import (
    JwksKeyResolver,
    JwtValidator,
    OAuthBearerSaslServer,
    OAuthBearerValidationError,
    UnsecuredJwsValidator,
    clear_jwks_cache,
    json_error_response,
    parse_scope,
)

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
GENERIC = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism OAUTHBEARER"
)
INVALID_TOKEN = '{"status":"invalid_token"}'


def clock(now_ms: int = NOW_MS) -> Callable[[], int]:
    return lambda: now_ms


def no_credentials(_user: str, _mechanism: str) -> None:
    return None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured(claims: dict[str, Any], header: dict[str, Any] | None = None,
              signature: str = "") -> str:
    header = {"alg": "none"} if header is None else header
    return (
        f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        f".{signature}"
    )


def claims(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"sub": "alice", "iat": NOW_S - 60, "exp": NOW_S + 3600}
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def initial(token: str, authzid: str = "", extensions: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}{extensions}\x01\x01".encode()


def unsecured_server(
    jaas: dict[str, str] | None = None, now_ms: int = NOW_MS, **kwargs: Any
) -> OAuthBearerSaslServer:
    server = create_sasl_server("OAUTHBEARER", jaas or {}, {}, no_credentials, clock(now_ms),
                                **kwargs)
    assert isinstance(server, OAuthBearerSaslServer)
    return server


def rejected_with(server: OAuthBearerSaslServer, response: bytes) -> str:
    """The RFC 7628 failure flow: JSON challenge, the client's %x01, then the failure."""
    challenge = server.evaluate_response(response)
    assert not server.is_complete()
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(b"\x01")
    assert str(excinfo.value) == challenge.decode()
    return challenge.decode()


def generic_failure(server: OAuthBearerSaslServer, response: bytes) -> BaseException | None:
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(response)
    assert str(excinfo.value) == GENERIC
    return excinfo.value.__cause__


@pytest.fixture(autouse=True)
def _fresh_jwks_cache() -> Iterator[None]:
    clear_jwks_cache()
    yield
    clear_jwks_cache()


# =========================================================================== unsecured JWS


class Provider(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict[str, str]) -> None:
        super().__init__()
        self._token = token
        self._extensions = extensions

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


def test_unsecured_with_kafka_python_client() -> None:
    token = unsecured(claims(scope=["read", "write"]))
    client = SaslMechanismOAuth(
        sasl_oauth_token_provider=Provider(token, {"traceId": "abc 123", "logicalCluster": "lc1"})
    )
    server = unsecured_server()
    assert server.evaluate_response(client.auth_bytes()) == b""
    client.receive(b"")
    assert client.is_authenticated()
    assert server.is_complete()
    assert server.authorization_id() == "alice"
    assert server.session_expiration_ms() == (NOW_S + 3600) * 1000
    assert server.extensions == {"traceId": "abc 123", "logicalCluster": "lc1"}
    assert server.token is not None
    assert server.token.scope == {"read", "write"}
    assert server.token.start_time_ms == (NOW_S - 60) * 1000


def test_unsecured_failure_with_kafka_python_client() -> None:
    client = SaslMechanismOAuth(
        sasl_oauth_token_provider=Provider(unsecured(claims(exp=NOW_S - 1)), {})
    )
    server = unsecured_server()
    challenge = server.evaluate_response(client.auth_bytes())
    assert challenge == INVALID_TOKEN.encode()
    client.receive(challenge)
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(client.auth_bytes())  # kafka-python's answer: %x01
    assert str(excinfo.value) == INVALID_TOKEN


def test_fractional_exp_and_iat_are_rounded_to_ms() -> None:
    server = unsecured_server()
    server.evaluate_response(initial(unsecured(claims(exp=NOW_S + 10.25, iat=NOW_S - 0.75))))
    assert server.session_expiration_ms() == NOW_MS + 10250
    assert server.token is not None and server.token.start_time_ms == NOW_MS - 750


def test_huge_exp_saturates_like_javas_math_round() -> None:
    server = unsecured_server()
    server.evaluate_response(initial(unsecured(claims(exp=10**400))))
    assert server.session_expiration_ms() == 2**63 - 1
    assert rejected_with(unsecured_server(), initial(unsecured(claims(exp=-(10**400))))) == (
        INVALID_TOKEN
    )


def test_iat_is_optional() -> None:
    server = unsecured_server()
    server.evaluate_response(initial(unsecured(claims(iat=None))))
    assert server.is_complete()
    assert server.token is not None and server.token.start_time_ms is None


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_scheme_is_case_insensitive(scheme: str) -> None:
    server = unsecured_server()
    token = unsecured(claims())
    server.evaluate_response(f"n,,\x01auth={scheme}  {token}\x01\x01".encode())
    assert server.authorization_id() == "alice"


def test_standard_and_url_base64_alphabets() -> None:
    # The claims below encode to base64 with "+" and "/" (Kafka's own decoder) and so to
    # base64url with "-" and "_" (the JWS standard): both are accepted.
    payload = json.dumps(claims(note="\xfb\xff\xfe>>>???")).encode()
    standard = base64.b64encode(payload).decode().rstrip("=")
    url = b64url(payload)
    assert ("+" in standard or "/" in standard) and ("-" in url or "_" in url)
    header = b64url(b'{"alg":"none"}')
    for encoded in (standard, url):
        server = unsecured_server()
        assert server.evaluate_response(initial(f"{header}.{encoded}.")) == b""
        assert server.authorization_id() == "alice"


def test_principal_claim_name_option() -> None:
    jaas = {"unsecuredValidatorPrincipalClaimName": " client_id "}
    server = unsecured_server(jaas)
    server.evaluate_response(initial(unsecured(claims(sub=None, client_id="svc-1"))))
    assert server.authorization_id() == "svc-1"
    server = unsecured_server(jaas)
    assert rejected_with(server, initial(unsecured(claims()))) == INVALID_TOKEN


def test_clock_skew_option() -> None:
    token = unsecured(claims(exp=NOW_S - 1))
    assert rejected_with(unsecured_server(), initial(token)) == INVALID_TOKEN
    server = unsecured_server({"unsecuredValidatorAllowableClockSkewMs": "1001"})
    server.evaluate_response(initial(token))
    assert server.is_complete()
    # exp exactly at now minus the skew is expired ("on or after").
    server = unsecured_server({"unsecuredValidatorAllowableClockSkewMs": "1000"})
    assert rejected_with(server, initial(token)) == INVALID_TOKEN


def test_iat_in_the_future() -> None:
    token = unsecured(claims(iat=NOW_S + 5))
    assert rejected_with(unsecured_server(), initial(token)) == INVALID_TOKEN
    server = unsecured_server({"unsecuredValidatorAllowableClockSkewMs": "5000"})
    server.evaluate_response(initial(token))
    assert server.is_complete()


@pytest.mark.parametrize(
    ("token_claims", "description"),
    [
        (claims(exp=None), "No expiration time in JWT"),
        (claims(exp="soon"), "The 'exp' claim was not of type Number: String"),
        (claims(exp=[1]), "The 'exp' claim was not of type Number: ArrayList"),
        (claims(sub=None), "No principal name in JWT claim: sub"),
        (claims(sub="  "), "No principal name in JWT claim: sub"),
        (claims(sub=42), "The 'sub' claim was not of type String: Integer"),
        (claims(iat="then"), "The 'iat' claim was not of type Number: String"),
        (claims(exp=NOW_S), "The indicated time (1700000000000 ms) minus allowable clock skew"),
        (claims(iat=NOW_S + 100, exp=NOW_S + 50), "The Issued At value"),
        (claims(iat=NOW_S - 10, exp=NOW_S - 10.5), "The indicated time"),
        (claims(scope=7), "The 'scope' claim was not of type List: Integer"),
    ],
)
def test_invalid_claims(token_claims: dict[str, Any], description: str) -> None:
    validator = UnsecuredJwsValidator(clock())
    with pytest.raises(OAuthBearerValidationError) as excinfo:
        validator.validate(unsecured(token_claims))
    assert str(excinfo.value).startswith(description)
    assert excinfo.value.status == "invalid_token"
    assert rejected_with(unsecured_server(), initial(unsecured(token_claims))) == INVALID_TOKEN


def test_exp_not_after_iat() -> None:
    # Only reachable with a clock skew: iat and exp both within it.
    validator = UnsecuredJwsValidator(clock(), allowable_clock_skew_ms=10_000)
    with pytest.raises(OAuthBearerValidationError, match="was not after the Issued At time"):
        validator.validate(unsecured(claims(iat=NOW_S + 5, exp=NOW_S + 5)))
    validator.validate(unsecured(claims(iat=NOW_S + 5, exp=NOW_S + 6)))


def test_jackson_text_conversion_of_claims() -> None:
    # Kafka reads non-number, non-array claims with Jackson's asText(): a boolean "sub" is the
    # principal "true" there, and here.
    server = unsecured_server()
    server.evaluate_response(initial(unsecured(claims(sub=True))))
    assert server.authorization_id() == "true"


@pytest.mark.parametrize(
    ("token", "description"),
    [
        (unsecured(claims(), header={"alg": "HS256"}), "Unsecured JWS must have 'none'"),
        (unsecured(claims(), header={"typ": "JWT"}), "JWS header must have an Algorithm value"),
        (unsecured(claims(), signature="c2ln"), "Unsecured JWS must not contain a digital sig"),
        (unsecured(claims()) + "x.y", "Unsecured JWS compact serializations must have 3"),
        (unsecured(claims()).rsplit(".", 2)[0] + ".", "Unsecured JWS compact serializations"),
        ("a..b", "Malformed compact serialization contains '..'"),
        (b64url(b'{"alg":"none"}') + ".e30xA.", "malformed Base64 URL encoded value"),
        (b64url(b'{"alg":"none"}') + ".e3~x.", "malformed Base64 URL encoded value"),
        (b64url(b'{"alg":"none"}') + "." + b64url(b"{not json") + ".", "malformed JSON"),
        (b64url(b'{"alg":"none"}') + "." + b64url(b"[1, 2]") + ".", "No expiration time"),
        (b64url(b'{"alg":"none"}') + "." + b64url(b'{"exp":NaN}') + ".", "malformed JSON"),
    ],
)
def test_malformed_unsecured_tokens(token: str, description: str) -> None:
    with pytest.raises(OAuthBearerValidationError) as excinfo:
        UnsecuredJwsValidator(clock()).validate(token)
    assert str(excinfo.value).startswith(description)
    assert rejected_with(unsecured_server(), initial(token)) == INVALID_TOKEN


# --------------------------------------------------------------------------- scope


def test_required_scope_present() -> None:
    jaas = {"unsecuredValidatorRequiredScope": " read  write "}  # space-delimited, as Kafka
    server = unsecured_server(jaas)
    server.evaluate_response(initial(unsecured(claims(scope=["write", " read ", "admin"]))))
    assert server.is_complete()
    assert server.token is not None and server.token.scope == {"read", "write", "admin"}


def test_required_scope_missing_is_insufficient_scope() -> None:
    jaas = {"unsecuredValidatorRequiredScope": "read write"}
    server = unsecured_server(jaas)
    response = initial(unsecured(claims(scope=["read"])))
    assert rejected_with(server, response) == (
        '{"status":"insufficient_scope", "scope":"[read, write]"}'
    )
    with pytest.raises(OAuthBearerValidationError) as excinfo:
        UnsecuredJwsValidator(clock(), required_scope=["read", "write"]).validate(
            unsecured(claims(scope=["read"]))
        )
    assert excinfo.value.status == "insufficient_scope"
    assert str(excinfo.value) == (
        "The provided scope ([read]) was missing a required scope (write).  All required scope "
        "elements: [read, write]"
    )


def test_string_scope_claim_is_one_item_as_in_kafka() -> None:
    jaas = {"unsecuredValidatorRequiredScope": "read"}
    server = unsecured_server(jaas)
    server.evaluate_response(initial(unsecured(claims(scope=" read "))))
    assert server.is_complete()
    server = unsecured_server(jaas)
    assert rejected_with(server, initial(unsecured(claims(scope="read write")))).startswith(
        '{"status":"insufficient_scope"'
    )
    server = unsecured_server(jaas)
    assert rejected_with(server, initial(unsecured(claims()))).startswith(
        '{"status":"insufficient_scope"'
    )


def test_scope_claim_name_option() -> None:
    jaas = {"unsecuredValidatorScopeClaimName": "scp", "unsecuredValidatorRequiredScope": "x"}
    server = unsecured_server(jaas)
    server.evaluate_response(initial(unsecured(claims(scp=["x"], scope=["y"]))))
    assert server.is_complete()


def test_parse_scope() -> None:
    assert parse_scope("  a b  c ") == ["a", "b", "c"]
    with pytest.raises(ValueError, match='Invalid scope value: a"b'):
        parse_scope('a"b')


@pytest.mark.parametrize(
    ("jaas", "message"),
    [
        ({"unsecuredValidatorAllowableClockSkewMs": "-1"}, "must not be negative: -1"),
        ({"unsecuredValidatorAllowableClockSkewMs": "1s"}, 'For input string: "1s"'),
        ({"unsecuredValidatorAllowableClockSkewMs": "9999999999"}, "For input string"),
        ({"unsecuredValidatorRequiredScope": "a\\b"}, "Invalid scope value: a\\\\b"),
    ],
)
def test_bad_jaas_options(jaas: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        unsecured_server(jaas)


def test_blank_jaas_options_mean_defaults() -> None:
    jaas = {
        "unsecuredValidatorPrincipalClaimName": " ",
        "unsecuredValidatorScopeClaimName": "",
        "unsecuredValidatorRequiredScope": "  ",
        "unsecuredValidatorAllowableClockSkewMs": " ",
    }
    server = unsecured_server(jaas)
    server.evaluate_response(initial(unsecured(claims())))
    assert server.authorization_id() == "alice"


# --------------------------------------------------------------------------- the exchange


def test_error_flow_then_retry_with_a_good_token() -> None:
    # Kafka only fails on the %x01; any other message after the error is a new attempt.
    server = unsecured_server()
    assert server.evaluate_response(initial(unsecured(claims(exp=NOW_S - 5)))) == (
        INVALID_TOKEN.encode()
    )
    assert server.evaluate_response(initial(unsecured(claims()))) == b""
    assert server.is_complete()


def test_control_a_without_a_pending_error_is_malformed() -> None:
    assert generic_failure(unsecured_server(), b"\x01") is not None


def test_authzid() -> None:
    server = unsecured_server()
    server.evaluate_response(initial(unsecured(claims()), authzid="alice"))
    assert server.authorization_id() == "alice"
    server = unsecured_server()
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(initial(unsecured(claims()), authzid="admin"))
    assert str(excinfo.value) == (
        "Authentication failed: Client requested an authorization id (admin) that is different "
        "from the token's principal name (alice)"
    )
    assert not server.is_complete()


@pytest.mark.parametrize(
    ("response", "cause"),
    [
        (b"", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01\x01", "'auth' not specified"),
        (b"n,,\x01foo=bar\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Bearer abc\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,auth=Bearer abc\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"y,,\x01auth=Bearer abc\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,a=,\x01auth=Bearer abc\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Basic abc\x01\x01", "Invalid scheme in OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer a*b\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer ab=c\x01\x01", "invalid 'auth' format"),
        (b"n,,\x01auth=Bearer abc\x01ext1=x\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer abc\x01ext=\x01\x01", "Invalid OAUTHBEARER client first message"),
        (b"n,,\x01auth=Bearer abc\x01ext=\xc3\xa9\x01\x01", "Invalid OAUTHBEARER client first"),
    ],
)
def test_malformed_client_messages(response: bytes, cause: str) -> None:
    server = unsecured_server()
    assert cause in str(generic_failure(server, response))
    assert not server.is_complete()


def test_reauthentication_wording() -> None:
    server = unsecured_server(reauthenticating=True)
    with pytest.raises(SaslAuthenticationError) as excinfo:
        server.evaluate_response(b"junk")
    assert str(excinfo.value) == (
        "Authentication failed during re-authentication due to invalid credentials with SASL "
        "mechanism OAUTHBEARER"
    )


def test_broken_validator_is_an_internal_error() -> None:
    class Broken:
        def validate(self, token_value: str) -> oauth.OAuthBearerToken:
            raise RuntimeError("boom")

    server = OAuthBearerSaslServer(Broken())
    cause = generic_failure(server, initial("abc"))
    assert isinstance(cause, RuntimeError)


def test_json_error_response_format() -> None:
    assert json_error_response("invalid_token") == '{"status":"invalid_token"}'
    assert json_error_response("insufficient_scope", "[a]", "https://x/.well-known") == (
        '{"status":"insufficient_scope", "scope":"[a]", '
        '"openid-configuration":"https://x/.well-known"}'
    )


def test_not_complete_before_success() -> None:
    server = unsecured_server()
    with pytest.raises(RuntimeError, match="has not completed"):
        server.authorization_id()
    assert server.session_expiration_ms() is None


# =========================================================================== signed JWTs


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str | None = "rsa-1", **extra: str) -> dict[str, Any]:
    jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    if kid is not None:
        jwk["kid"] = kid
    jwk.update(extra)
    return jwk


def ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str | None = None) -> dict[str, Any]:
    jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    if kid is not None:
        jwk["kid"] = kid
    return jwk


def signed(key: Any, token_claims: dict[str, Any], alg: str = "RS256",
           kid: str | None = "rsa-1") -> str:
    headers = {"kid": kid} if kid is not None else None
    return jwt.encode(token_claims, key, algorithm=alg, headers=headers)


def jwt_claims(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "sub": "alice",
        "iat": NOW_S - 60,
        "exp": NOW_S + 3600,
        "aud": "kafka",
        "iss": "https://issuer.example",
        "scope": ["produce", "consume"],
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
              ) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [rsa_jwk(rsa_key), ec_jwk(ec_key, kid="ec-1")]}))
    return path


def secured_configs(jwks: Path | str, **extra: str) -> dict[str, str | None]:
    configs: dict[str, str | None] = {
        "sasl.server.callback.handler.class": VALIDATOR,
        "sasl.oauthbearer.jwks.endpoint.url": jwks if isinstance(jwks, str) else jwks.as_uri(),
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": "https://issuer.example",
    }
    configs.update(extra)
    return configs


def secured_server(configs: dict[str, str | None], now_ms: int = NOW_MS
                   ) -> OAuthBearerSaslServer:
    server = create_sasl_server("OAUTHBEARER", {}, configs, no_credentials, clock(now_ms))
    assert isinstance(server, OAuthBearerSaslServer)
    return server


def test_signed_rs256_token(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    server = secured_server(secured_configs(jwks_file))
    token = signed(rsa_key, jwt_claims())
    assert server.evaluate_response(initial(token, extensions="\x01traceId=t1")) == b""
    assert server.is_complete()
    assert server.authorization_id() == "alice"
    assert server.session_expiration_ms() == (NOW_S + 3600) * 1000
    assert server.token is not None
    assert server.token.scope == {"produce", "consume"}
    assert server.token.start_time_ms == (NOW_S - 60) * 1000
    assert server.extensions == {"traceId": "t1"}


def test_signed_es256_token_without_kid(jwks_file: Path, ec_key: ec.EllipticCurvePrivateKey
                                        ) -> None:
    server = secured_server(secured_configs(jwks_file))
    server.evaluate_response(initial(signed(ec_key, jwt_claims(), alg="ES256", kid=None)))
    assert server.authorization_id() == "alice"


def test_other_rsa_algorithms_with_the_same_key(jwks_file: Path, rsa_key: rsa.RSAPrivateKey
                                                ) -> None:
    for alg in ("RS384", "RS512", "PS256"):
        server = secured_server(secured_configs(jwks_file))
        server.evaluate_response(initial(signed(rsa_key, jwt_claims(), alg=alg)))
        assert server.is_complete(), alg


def test_mechanism_prefixed_configs_and_deprecated_class(jwks_file: Path,
                                                         rsa_key: rsa.RSAPrivateKey) -> None:
    configs: dict[str, str | None] = {
        "oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.secured."
            "OAuthBearerValidatorCallbackHandler",
        "oauthbearer.sasl.oauthbearer.jwks.endpoint.url": jwks_file.as_uri(),
        "sasl.oauthbearer.jwks.endpoint.url": "file:///nonexistent",  # the prefixed one wins
        "oauthbearer.sasl.oauthbearer.sub.claim.name": "client_id",
        "sasl.oauthbearer.expected.audience": None,  # None: Kafka's default (no check)
    }
    server = secured_server(configs)
    server.evaluate_response(
        initial(signed(rsa_key, jwt_claims(aud=None, iss=None, sub=None, client_id=" svc ")))
    )
    assert server.authorization_id() == "svc"  # trimmed, as ClaimValidationUtils


def test_expiry_and_default_clock_skew(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    # Default sasl.oauthbearer.clock.skew.seconds is 30.
    ok = secured_server(secured_configs(jwks_file))
    ok.evaluate_response(initial(signed(rsa_key, jwt_claims(exp=NOW_S - 29))))
    assert ok.is_complete()
    expired = secured_server(secured_configs(jwks_file))
    assert rejected_with(expired, initial(signed(rsa_key, jwt_claims(exp=NOW_S - 30)))) == (
        INVALID_TOKEN
    )
    strict = secured_server(
        secured_configs(jwks_file, **{"sasl.oauthbearer.clock.skew.seconds": "0"})
    )
    assert rejected_with(strict, initial(signed(rsa_key, jwt_claims(exp=NOW_S)))) == INVALID_TOKEN


@pytest.mark.parametrize(
    "token_claims",
    [
        jwt_claims(exp=None),
        jwt_claims(iat=None),  # jose4j's setRequireIssuedAt
        jwt_claims(exp="tomorrow"),
        jwt_claims(exp=True),
        jwt_claims(nbf=NOW_S + 31),
        jwt_claims(aud="other"),
        jwt_claims(aud=["other", "another"]),
        jwt_claims(aud=None),
        jwt_claims(iss="https://evil.example"),
        jwt_claims(iss=None),
        jwt_claims(sub=None),
        jwt_claims(sub=""),
        jwt_claims(sub="   "),
        jwt_claims(sub=7),
        jwt_claims(scope=["a", " a"]),  # duplicates once trimmed
        jwt_claims(scope=["a", ""]),
        jwt_claims(scope=["a", 1]),
    ],
)
def test_invalid_signed_claims(jwks_file: Path, rsa_key: rsa.RSAPrivateKey,
                               token_claims: dict[str, Any]) -> None:
    server = secured_server(secured_configs(jwks_file))
    # The JWKS validator only ever says invalid_token (never insufficient_scope).
    assert rejected_with(server, initial(signed(rsa_key, token_claims))) == INVALID_TOKEN


def test_negative_exp_is_invalid(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    # Not expired for a clock before 1970, but ClaimValidationUtils wants exp >= 0.
    validator = oauth.create_jwt_validator(secured_configs(jwks_file), clock(-100_000))
    with pytest.raises(OAuthBearerValidationError, match="exp value must be non-negative"):
        validator.validate(signed(rsa_key, jwt_claims(exp=-5, iat=-10)))


def test_accepted_claim_variants(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    variants = [
        jwt_claims(aud=["other", "kafka"]),
        jwt_claims(nbf=NOW_S + 30),  # within the clock skew
        jwt_claims(iat=NOW_S + 3000),  # jose4j does not check a future iat by default
        jwt_claims(scope="produce consume"),
        jwt_claims(scope=None),
        jwt_claims(exp=NOW_S + 10.9, jti=5),
    ]
    for token_claims in variants:
        server = secured_server(secured_configs(jwks_file))
        assert server.evaluate_response(initial(signed(rsa_key, token_claims))) == b"", (
            token_claims
        )
    # A string scope claim is one item, as Kafka's ValidatorAccessTokenValidator takes it.
    server = secured_server(secured_configs(jwks_file))
    server.evaluate_response(initial(signed(rsa_key, jwt_claims(scope="produce consume"))))
    assert server.token is not None and server.token.scope == {"produce consume"}
    # Fractional exp: jose4j keeps whole seconds.
    server = secured_server(secured_configs(jwks_file))
    server.evaluate_response(initial(signed(rsa_key, jwt_claims(exp=NOW_S + 10.9))))
    assert server.session_expiration_ms() == (NOW_S + 10) * 1000


def test_audience_list_config(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    configs = secured_configs(jwks_file, **{"sasl.oauthbearer.expected.audience": "a , kafka"})
    server = secured_server(configs)
    server.evaluate_response(initial(signed(rsa_key, jwt_claims(aud="kafka"))))
    assert server.is_complete()
    server = secured_server(configs)
    assert rejected_with(server, initial(signed(rsa_key, jwt_claims(aud="b")))) == INVALID_TOKEN


def test_scope_and_sub_claim_name_configs(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    configs = secured_configs(
        jwks_file,
        **{"sasl.oauthbearer.scope.claim.name": " scp ",
           "sasl.oauthbearer.sub.claim.name": "azp"},
    )
    server = secured_server(configs)
    server.evaluate_response(initial(signed(rsa_key, jwt_claims(azp="svc", scp=["x"]))))
    assert server.authorization_id() == "svc"
    assert server.token is not None and server.token.scope == {"x"}


def test_bad_signatures(jwks_file: Path, rsa_key: rsa.RSAPrivateKey,
                        other_rsa_key: rsa.RSAPrivateKey) -> None:
    forged = signed(other_rsa_key, jwt_claims())  # same kid, wrong key
    header, payload, signature = signed(rsa_key, jwt_claims()).split(".")
    tampered_payload = b64url(json.dumps(jwt_claims(sub="admin")).encode())
    public_pem = rsa_key.public_key().public_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PublicFormat.SubjectPublicKeyInfo,
    )
    hs_header = b64url(json.dumps({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}).encode())
    hs_body = b64url(json.dumps(jwt_claims()).encode())
    confused = f"{hs_header}.{hs_body}." + b64url(
        hmac.new(public_pem, f"{hs_header}.{hs_body}".encode(), hashlib.sha256).digest()
    )
    tokens = [
        forged,
        f"{header}.{tampered_payload}.{signature}",
        f"{header}.{payload}.{signature[:-4]}AAAA",
        confused,  # algorithm confusion: HMAC keyed with the RSA public key
        unsecured(jwt_claims()),  # alg none is never accepted here...
        unsecured(jwt_claims(), signature="c2ln"),  # ...not even with a signature section
        signed(rsa_key, jwt_claims(), kid="unknown-kid"),
        signed(other_rsa_key, jwt_claims(), kid=None),  # no kid: no key of ours verifies it
    ]
    for token in tokens:
        server = secured_server(secured_configs(jwks_file))
        assert rejected_with(server, initial(token)) == INVALID_TOKEN, token


def test_malformed_jwts(jwks_file: Path) -> None:
    validator = oauth.create_jwt_validator(secured_configs(jwks_file), clock())
    cases = {
        "   ": "Empty JWT provided",
        "a.b": "Malformed JWT provided (a.b); expected three sections",
        "a.b.c.d": "but 4 sections provided",
        "a.b.": "but 2 sections provided",
        ".b.c": "but header section missing",
        "a.b.c": "Could not validate the access token",
    }
    for token, message in cases.items():
        with pytest.raises(OAuthBearerValidationError) as excinfo:
            validator.validate(token)
        assert message in str(excinfo.value), token


def test_jwks_file_is_loaded_once(jwks_file: Path, rsa_key: rsa.RSAPrivateKey,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    real = oauth.fetch_jwks_file

    def counting(path: str) -> Any:
        loads.append(path)
        return real(path)

    monkeypatch.setattr(oauth, "fetch_jwks_file", counting)
    for _ in range(5):
        server = secured_server(secured_configs(jwks_file))
        server.evaluate_response(initial(signed(rsa_key, jwt_claims())))
        assert server.is_complete()
    assert loads == [str(jwks_file)]
    # A key added to the file is not seen (Kafka reads a JWKS file once) until the cache is
    # cleared, e.g. when the listener is reconfigured.
    clear_jwks_cache()
    secured_server(secured_configs(jwks_file))
    assert len(loads) == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sasl.oauthbearer.jwks.endpoint.url": None},
         "The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url value must be "
         "non-null"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "  "}, "must not contain only whitespace"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://host/jwks"},
         'contains an invalid protocol (ftp); only "http", "https", and "file" protocol are '
         "supported"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "jwks.json"}, "that is malformed"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "file:///no/such/jwks.json"},
         "contains a file (/no/such/jwks.json) that doesn't exist"),
        ({"sasl.oauthbearer.clock.skew.seconds": "thirty"}, 'For input string: "thirty"'),
        ({"sasl.oauthbearer.sub.claim.name": " "},
         "sasl.oauthbearer.sub.claim.name value must not contain only whitespace"),
        ({"sasl.oauthbearer.jwks.endpoint.url": "https://127.0.0.1:1/jwks",
          "sasl.oauthbearer.jwks.endpoint.refresh.ms": "-1"},
         "sasl.oauthbearer.jwks.endpoint.refresh.ms value must be at least 0"),
    ],
)
def test_config_errors(jwks_file: Path, extra: dict[str, str | None], message: str) -> None:
    configs = secured_configs(jwks_file)
    configs.update(extra)
    with pytest.raises(ValueError) as excinfo:
        secured_server(configs)
    assert message in str(excinfo.value)
    with pytest.raises(ValueError):
        oauth.validate_config({}, configs)


def test_jwks_directory_and_bad_content(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="references a directory"):
        secured_server(secured_configs(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_text('{"not_keys": []}')
    with pytest.raises(ValueError) as excinfo:
        secured_server(secured_configs(bad))
    assert str(excinfo.value).startswith(
        "The OAuth validator configuration encountered an error when initializing the "
        "VerificationKeyResolver"
    )
    bad.write_text("{")
    with pytest.raises(ValueError, match="initializing the VerificationKeyResolver"):
        secured_server(secured_configs(bad))
    # A failed load is not cached: fixed, it works.
    bad.write_text('{"keys": []}')
    assert isinstance(secured_server(secured_configs(bad)), OAuthBearerSaslServer)


def test_validate_config_loads_the_jwks(jwks_file: Path) -> None:
    oauth.validate_config({}, secured_configs(jwks_file))
    from odradek.security.sasl import validate_server_config

    validate_server_config("OAUTHBEARER", {}, secured_configs(jwks_file))
    with pytest.raises(ValueError, match="doesn't exist"):
        validate_server_config(
            "OAUTHBEARER", {}, secured_configs("file:///no/such/file.json")
        )


# --------------------------------------------------------------------------- JWKS refresh


class FakeJwksEndpoint:
    def __init__(self, keys: list[dict[str, Any]]) -> None:
        self.keys = keys
        self.fetches = 0
        self.fail = False

    def __call__(self, url: str) -> Any:
        self.fetches += 1
        if self.fail:
            raise OSError("connection refused")
        return {"keys": list(self.keys)}


def test_http_jwks_refresh_schedule(rsa_key: rsa.RSAPrivateKey) -> None:
    endpoint = FakeJwksEndpoint([rsa_jwk(rsa_key)])
    resolver = JwksKeyResolver("https://idp/jwks", endpoint, refresh_ms=60_000,
                               retry_backoff_ms=100, retry_backoff_max_ms=300)
    resolver.init(NOW_MS)
    assert endpoint.fetches == 1
    resolver.refresh_if_due(NOW_MS + 59_999)
    assert endpoint.fetches == 1  # not on every authentication
    resolver.refresh_if_due(NOW_MS + 60_000)
    assert endpoint.fetches == 2
    # A failing refresh keeps the keys and retries with a doubling, capped backoff.
    endpoint.fail = True
    start = NOW_MS + 120_000
    resolver.refresh_if_due(start)
    assert endpoint.fetches == 3
    assert len(resolver.candidate_keys({"kid": "rsa-1"}, "RS256")) == 1
    resolver.refresh_if_due(start + 99)
    assert endpoint.fetches == 3
    resolver.refresh_if_due(start + 100)
    assert endpoint.fetches == 4
    resolver.refresh_if_due(start + 100 + 199)
    assert endpoint.fetches == 4
    resolver.refresh_if_due(start + 100 + 200)
    assert endpoint.fetches == 5
    resolver.refresh_if_due(start + 300 + 300)  # capped at retry.backoff.max.ms
    assert endpoint.fetches == 6
    endpoint.fail = False
    resolver.refresh_if_due(start + 900)
    assert endpoint.fetches == 7
    resolver.refresh_if_due(start + 900 + 59_999)
    assert endpoint.fetches == 7  # back on the normal schedule


def test_unknown_kid_expedites_a_refresh_once_a_minute(rsa_key: rsa.RSAPrivateKey,
                                                       other_rsa_key: rsa.RSAPrivateKey) -> None:
    endpoint = FakeJwksEndpoint([rsa_jwk(rsa_key)])
    resolver = JwksKeyResolver("https://idp/jwks", endpoint, refresh_ms=3_600_000)
    now = [NOW_MS]
    resolver.init(now[0])
    validator = JwtValidator(resolver, lambda: now[0])
    # The identity provider rotates in a new key...
    endpoint.keys.append(rsa_jwk(other_rsa_key, kid="rsa-2"))
    token = signed(other_rsa_key, jwt_claims(aud=None, iss=None), kid="rsa-2")
    assert validator.validate(token).principal_name == "alice"  # fetched on demand
    assert endpoint.fetches == 2
    # A kid that stays unknown does not hammer the endpoint.
    bogus = signed(other_rsa_key, jwt_claims(aud=None, iss=None), kid="nope")
    for _ in range(3):
        with pytest.raises(OAuthBearerValidationError, match="Unable to find a suitable"):
            validator.validate(bogus)
    assert endpoint.fetches == 3
    now[0] += 60_000
    with pytest.raises(OAuthBearerValidationError):
        validator.validate(bogus)
    assert endpoint.fetches == 4
    assert not resolver.maybe_expedite_refresh("k" * 1001, now[0] + 10**9)
    assert endpoint.fetches == 4


def test_file_resolver_never_refreshes(rsa_key: rsa.RSAPrivateKey) -> None:
    endpoint = FakeJwksEndpoint([rsa_jwk(rsa_key)])
    resolver = JwksKeyResolver("/tmp/jwks.json", endpoint)
    resolver.init(NOW_MS)
    resolver.refresh_if_due(NOW_MS + 10**12)
    assert not resolver.maybe_expedite_refresh("other", NOW_MS)
    assert endpoint.fetches == 1
    with pytest.raises(ValueError, match="must be positive"):
        JwksKeyResolver("https://x", endpoint, refresh_ms=0)


def test_key_selection(rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> None:
    keys = [
        rsa_jwk(rsa_key, kid="enc", use="enc"),
        rsa_jwk(rsa_key, kid="rs512-only", alg="RS512"),
        rsa_jwk(rsa_key, kid="sign-only", key_ops=["sign"]),  # type: ignore[arg-type]
        rsa_jwk(rsa_key, kid="good"),
        ec_jwk(ec_key, kid="ec"),
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not a key",
    ]
    resolver = JwksKeyResolver("f", FakeJwksEndpoint(keys))  # type: ignore[arg-type]
    resolver.init(0)

    def kids(header: dict[str, Any], alg: str) -> list[str | None]:
        return [key.key_id for key in resolver.candidate_keys(header, alg)]

    assert kids({"kid": "enc"}, "RS256") == []
    assert kids({"kid": "rs512-only"}, "RS256") == []
    assert kids({"kid": "rs512-only"}, "RS512") == ["rs512-only"]
    assert kids({"kid": "sign-only"}, "RS256") == []
    assert kids({"kid": "good"}, "RS256") == ["good"]
    assert kids({}, "RS256") == ["good"]  # no kid: every usable key of the right type
    assert kids({}, "ES256") == ["ec"]
    assert kids({}, "ES384") == []  # wrong curve
    assert kids({"kid": "broken"}, "RS256") == []
    assert kids({}, "HS256") == []


def test_http_jwks_endpoint_on_loopback(rsa_key: rsa.RSAPrivateKey) -> None:
    body = json.dumps({"keys": [rsa_jwk(rsa_key)]}).encode()
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/oauth2/jwks"
        for _ in range(3):
            server = secured_server(secured_configs(url))
            server.evaluate_response(initial(signed(rsa_key, jwt_claims())))
            assert server.authorization_id() == "alice"
        assert requests == ["/oauth2/jwks"]  # once, then cached until refresh.ms
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
