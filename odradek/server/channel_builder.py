"""Each listener's security, from the broker's settings (Kafka's ChannelBuilders): a TLS
context for SSL and SASL_SSL listeners, the SASL mechanisms and their JAAS options for
SASL_PLAINTEXT and SASL_SSL ones, and how a connection's principal is found.

Settings are read per listener, listener.name.<listener>.[<mechanism>.]<config> over the
base config, as Kafka does. Anything wrong (a missing keystore, a JAAS line that does not
parse, GSSAPI enabled) is an InvalidConfigError naming the setting, raised before the
listener binds.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.security.sasl import (
    ENABLED_MECHANISMS_SUPPORTED,
    SaslServer,
    create_sasl_server,
    validate_server_config,
)
from odradek.security.ssl_principal import SslPrincipalMapper
from odradek.server.authenticator import SaslServerAuthenticator
from odradek.server.config import BROKER_CONFIGS, BrokerConfig, Listener
from odradek.storage.errors import InvalidConfigError

if TYPE_CHECKING:  # TLS and SCRAM load with a listener that uses them
    from odradek.security.sasl.scram import ScramCredential
    from odradek.security.ssl_factory import SslConfigError
    from odradek.server.listener_tls import ReloadableSslContext

SSL_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SSL_CONFIGS = tuple(name for name in BROKER_CONFIGS if name.startswith("ssl."))
# The OAUTHBEARER validator's settings, read per listener and mechanism.
_MECHANISM_CONFIGS = (
    "sasl.server.callback.handler.class", "sasl.oauthbearer.jwks.endpoint.url",
    "sasl.oauthbearer.jwks.endpoint.refresh.ms", "sasl.oauthbearer.expected.audience",
    "sasl.oauthbearer.expected.issuer", "sasl.oauthbearer.sub.claim.name",
    "sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.clock.skew.seconds",
    "connections.max.reauth.ms",
)

CredentialLookup = Callable[[str, str], "ScramCredential | None"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's mechanisms, each with its JAAS options and settings."""

    listener: str
    mechanisms: tuple[str, ...]
    jaas_options: dict[str, dict[str, str]]
    configs: dict[str, dict[str, str | None]]
    failed_authentication_delay_ms: int
    max_receive_size: int
    credentials: CredentialLookup
    now_ms: Callable[[], int] = field(default=_now_ms)

    def new_server(self, mechanism: str, reauthenticating: bool = False) -> SaslServer:
        return create_sasl_server(mechanism, self.jaas_options[mechanism],
                                  self.configs[mechanism], self.credentials, self.now_ms,
                                  reauthenticating=reauthenticating)

    def max_reauth_ms(self, mechanism: str) -> int:
        return int(self.configs[mechanism]["connections.max.reauth.ms"] or 0)

    def authenticator(self) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(self.mechanisms, self.new_server, self.max_reauth_ms,
                                       self.now_ms)


@dataclass(frozen=True)
class ListenerSecurity:
    """What a listener's connections go through before their requests are served."""

    name: str
    protocol: str
    tls: ReloadableSslContext | None = None
    principal_mapper: SslPrincipalMapper | None = None  # SSL: a certificate's principal
    sasl: SaslSettings | None = None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context the listener binds with (it hands each handshake the current one)."""
        return None if self.tls is None else self.tls.bound


def listener_ssl_values(config: BrokerConfig, listener: Listener) -> dict[str, str | None]:
    """The ssl.* settings in force for a TLS listener, by base name."""
    values = config.listener_values(listener.name, SSL_CONFIGS)
    if listener.security_protocol == "SASL_SSL" and not config.listener_values(
            listener.name, ("ssl.client.auth",), listener_only=True):
        # KIP-684: a SASL_SSL listener asks for client certificates only when its own
        # listener.name.<l>.ssl.client.auth says so; SASL authenticates its clients.
        values["ssl.client.auth"] = "none"
    return values


def prepare_tls_reload(config: BrokerConfig, security: ListenerSecurity, listener: Listener
                       ) -> ssl.SSLContext | None:
    """The new context of a TLS listener whose keystore or truststore settings or files
    changed (None when they did not). Raises InvalidConfigError naming the setting."""
    from odradek.security.ssl_factory import SslConfigError

    assert security.tls is not None
    try:
        return security.tls.prepare(listener_ssl_values(config, listener))
    except SslConfigError as e:
        raise InvalidConfigError(f"listener {listener.name}: {e}",
                                 key=_prefixed(listener.name, e)) from e


def build_listener_security(config: BrokerConfig, listener: Listener,
                            credentials: CredentialLookup) -> ListenerSecurity:
    name, protocol = listener.name, listener.security_protocol
    tls = mapper = sasl = None
    if protocol in SSL_PROTOCOLS:
        from odradek.security.ssl_factory import SslConfigError
        from odradek.server.listener_tls import ReloadableSslContext

        values = listener_ssl_values(config, listener)
        try:
            tls = ReloadableSslContext(
                values, inter_broker=name == config.inter_broker_listener_name,
                allow_dn_changes=config.get("ssl.allow.dn.changes"),
                allow_san_changes=config.get("ssl.allow.san.changes"))
        except SslConfigError as e:
            raise InvalidConfigError(f"listener {name}: {e}", key=_prefixed(name, e)) from e
        if protocol == "SSL":
            rules = values["ssl.principal.mapping.rules"]
            try:
                mapper = SslPrincipalMapper.from_rules(rules)
            except ValueError as e:
                raise InvalidConfigError(f"ssl.principal.mapping.rules={rules}: {e}",
                                         key="ssl.principal.mapping.rules") from e
    if protocol in SASL_PROTOCOLS:
        sasl = _sasl_settings(config, name, credentials)
    return ListenerSecurity(name, protocol, tls, mapper, sasl)


def _prefixed(listener: str, error: SslConfigError) -> str:
    setting = getattr(error, "setting", None) or "ssl.keystore.location"
    return f"listener.name.{listener.lower()}.{setting}"


def _sasl_settings(config: BrokerConfig, listener: str,
                   credentials: CredentialLookup) -> SaslSettings:
    base = config.listener_values(listener, ("sasl.enabled.mechanisms",
                                             "connection.failed.authentication.delay.ms",
                                             "sasl.server.max.receive.size"))
    raw = base["sasl.enabled.mechanisms"] or ""
    mechanisms = tuple(m.strip() for m in raw.split(",") if m.strip())
    key = f"listener.name.{listener.lower()}.sasl.enabled.mechanisms"
    if not mechanisms:
        raise InvalidConfigError(f"{key} (or sasl.enabled.mechanisms) is empty: the SASL "
                                 f"listener {listener} needs at least one mechanism", key=key)
    unsupported = [m for m in mechanisms if m not in ENABLED_MECHANISMS_SUPPORTED]
    if unsupported:
        hint = (" (GSSAPI is Kafka's default; Odradek has no Kerberos)"
                if "GSSAPI" in unsupported else "")
        raise InvalidConfigError(
            f"listener {listener}: SASL mechanism {', '.join(unsupported)} is not supported"
            f"{hint}: set sasl.enabled.mechanisms to some of "
            f"{', '.join(ENABLED_MECHANISMS_SUPPORTED)}", key="sasl.enabled.mechanisms")
    from odradek.security.jaas import parse_jaas_config

    jaas: dict[str, dict[str, str]] = {}
    configs: dict[str, dict[str, str | None]] = {}
    for mechanism in mechanisms:
        values = config.listener_values(listener, ("sasl.jaas.config", *_MECHANISM_CONFIGS),
                                        mechanism)
        text = values.pop("sasl.jaas.config")
        where = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        if not text:
            raise InvalidConfigError(
                f"{where} is not set: the SASL listener {listener} needs a JAAS login module "
                f"for {mechanism} (Odradek reads no JAAS file)", key=where)
        try:
            module = parse_jaas_config(text)
        except ValueError as e:
            raise InvalidConfigError(f"{where}: {e}", key=where) from e
        try:  # e.g. OAUTHBEARER's JWKS is loaded now: bad settings stop the broker here
            validate_server_config(mechanism, module.options, values)
        except ValueError as e:
            raise InvalidConfigError(f"listener {listener}, {mechanism}: {e}",
                                     key=where) from e
        jaas[mechanism] = dict(module.options)
        configs[mechanism] = values
    return SaslSettings(
        listener, mechanisms, jaas, configs,
        int(base["connection.failed.authentication.delay.ms"] or 0),
        int(base["sasl.server.max.receive.size"] or 524288), credentials)
