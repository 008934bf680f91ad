"""Sans-I/O SASL mechanism servers, as Kafka's broker runs them (KIP-43, KIP-152, KIP-255).

The network layer feeds each SaslAuthenticate request's auth_bytes to
``SaslServer.evaluate_response`` and sends back what it returns; a
``SaslAuthenticationError`` ends the exchange, its ``str()`` being the error_message of the
SaslAuthenticate response (Kafka's wording). Where Kafka answers with its generic
"invalid credentials" text (its SaslException path: nothing that could tell an attacker which
part was wrong), the detailed reason is chained as ``__cause__`` for the broker's log.

Kafka's classes, for reference: org.apache.kafka.common.security.plain.internals.PlainSaslServer,
...scram.internals.ScramSaslServer, ...oauthbearer.internals.OAuthBearerSaslServer and the
SaslServerAuthenticator that drives them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from odradek.security.sasl.scram import ScramCredential

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = "GSSAPI"

# What a listener may enable (sasl.enabled.mechanisms). GSSAPI is Kafka's too, but Kerberos
# needs a KDC and a JGSS stack: we refuse it by name rather than pretend.
ENABLED_MECHANISMS_SUPPORTED = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER)

# (user name, mechanism) -> the stored SCRAM credential, or None when the user has none.
CredentialLookup = Callable[[str, str], "ScramCredential | None"]

# Kafka's config names for the server callback handler (per mechanism: "<mechanism lower>.").
SASL_SERVER_CALLBACK_HANDLER_CLASS = "sasl.server.callback.handler.class"


class SaslAuthenticationError(Exception):
    """Authentication failed; str(e) is the message sent to the client in SaslAuthenticate's
    error_message (Kafka's wording)."""


@runtime_checkable
class SaslServer(Protocol):
    mechanism: str

    def evaluate_response(self, response: bytes) -> bytes:
        """The next challenge (b"" when none); raises SaslAuthenticationError."""
        ...

    def is_complete(self) -> bool: ...

    def authorization_id(self) -> str:
        """The authenticated user name (principal "User:<this>"); valid once complete."""
        ...

    def session_expiration_ms(self) -> int | None:
        """OAUTHBEARER: the token's expiry (ms since the epoch) for KIP-368 re-authentication;
        None for the others."""
        ...


def invalid_credentials_message(mechanism: str, reauthenticating: bool = False) -> str:
    """What Kafka's SaslServerAuthenticator sends for any SaslException of a mechanism server:
    deliberately the same whatever went wrong (unknown user, wrong password, bad message)."""
    stage = "re-authentication" if reauthenticating else "authentication"
    return (
        f"Authentication failed during {stage} due to invalid credentials with SASL mechanism "
        f"{mechanism}"
    )


def config_value(configs: Mapping[str, str | None], mechanism: str, name: str) -> str | None:
    """A setting as Kafka's ConfigurationUtils.get reads it: the mechanism-prefixed form
    ("oauthbearer.sasl.oauthbearer.jwks.endpoint.url") wins over the plain one."""
    value = configs.get(f"{mechanism.lower()}.{name}")
    if value is None:
        value = configs.get(name)
    return value


def server_callback_handler_class(
    configs: Mapping[str, str | None], mechanism: str
) -> str | None:
    """The configured sasl.server.callback.handler.class for this mechanism, if any."""
    value = config_value(configs, mechanism, SASL_SERVER_CALLBACK_HANDLER_CLASS)
    if value is None or not value.strip():
        return None
    return value.strip()


def create_sasl_server(
    mechanism: str,
    jaas_options: Mapping[str, str],
    configs: Mapping[str, str | None],
    credentials: CredentialLookup,
    now_ms: Callable[[], int],
    *,
    reauthenticating: bool = False,
) -> SaslServer:
    """A fresh server for one authentication exchange of one connection.

    ``reauthenticating`` (KIP-368) only changes the wording of Kafka's generic failure message
    ("... during re-authentication ..."). Raises ValueError for a mechanism we do not support
    and for a configuration Kafka would refuse (the message says what is wrong)."""
    # Imported here: the mechanism modules import this package's base definitions.
    from odradek.security.sasl import oauthbearer, plain, scram

    if mechanism == PLAIN:
        return plain.create_server(jaas_options, configs)
    if mechanism in scram.SCRAM_MECHANISMS:
        return scram.create_server(
            mechanism, configs, credentials, reauthenticating=reauthenticating
        )
    if mechanism == OAUTHBEARER:
        return oauthbearer.create_server(
            jaas_options, configs, now_ms, reauthenticating=reauthenticating
        )
    if mechanism == GSSAPI:
        raise ValueError(
            "SASL mechanism GSSAPI (Kerberos) is not supported by this broker; supported "
            f"mechanisms are {', '.join(ENABLED_MECHANISMS_SUPPORTED)}"
        )
    raise ValueError(
        f"Unsupported SASL mechanism {mechanism}; supported mechanisms are "
        f"{', '.join(ENABLED_MECHANISMS_SUPPORTED)}"
    )


def validate_server_config(
    mechanism: str, jaas_options: Mapping[str, str], configs: Mapping[str, str | None]
) -> None:
    """Check a listener's mechanism settings once at start-up, as Kafka does when it configures
    the callback handlers (an OAUTHBEARER JWKS that cannot be loaded stops the broker there
    rather than failing every client later). Raises ValueError."""
    from odradek.security.sasl import oauthbearer, plain, scram

    if mechanism == PLAIN:
        plain.create_server(jaas_options, configs)
    elif mechanism in scram.SCRAM_MECHANISMS:
        scram.create_server(mechanism, configs, lambda _user, _mechanism: None)
    elif mechanism == OAUTHBEARER:
        oauthbearer.validate_config(jaas_options, configs)
    else:
        create_sasl_server(mechanism, jaas_options, configs, lambda _u, _m: None, lambda: 0)


def __getattr__(name: str) -> object:
    # Re-export the SCRAM credential type lazily (an eager import would be circular).
    if name in ("ScramCredential", "format_credential", "parse_credential"):
        from odradek.security.sasl import scram

        return getattr(scram, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
