"""How a broker secures its own connections to other brokers: TLS and SASL on the client side
of the inter-broker listener, as Kafka's broker takes them from its settings.

Kafka's broker connects to the others through the inter-broker listener
(inter.broker.listener.name, or security.inter.broker.protocol) with that listener's own
settings (ChannelBuilders.clientChannelBuilder with the listener's prefix): its keystore,
truststore and ssl.endpoint.identification.algorithm for TLS; for SASL the mechanism of
sasl.mechanism.inter.broker.protocol, with the username and password options of the
listener's JAAS login module for that mechanism (which also lists PLAIN's users):

    listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.\\
        PlainLoginModule required username="broker" password="broker-secret" \\
        user_broker="broker-secret" user_alice="alice-secret";
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from odradek.security.jaas import parse_jaas_config
from odradek.security.sasl import GSSAPI, OAUTHBEARER, PLAIN, SCRAM_SHA_256, SCRAM_SHA_512
from odradek.security.ssl_factory import (
    DEFAULT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
    SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
    SslConfigError,
    client_ssl_context,
)
from odradek.server.config import BrokerConfig
from odradek.storage.errors import InvalidConfigError

# The mechanisms a broker can authenticate to another broker with. OAUTHBEARER would need
# a token source (Kafka's login callback handler, e.g. an OAuth client): not yet.
INTER_BROKER_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
SSL_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
INTER_BROKER_MECHANISM_CONFIG = "sasl.mechanism.inter.broker.protocol"


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """TLS and/or SASL for the broker's connections to other brokers; None in their place
    (the default of BrokerConnection and InterBrokerClient) is PLAINTEXT.

    `ssl_context` is a client context (ssl_factory.client_ssl_context); `check_hostname`
    (ssl.endpoint.identification.algorithm=https) must agree with the context's own
    check_hostname, which is what OpenSSL acts on. With `sasl_mechanism`, the connection
    authenticates as `username` with `password` after ApiVersions (for OAUTHBEARER the
    password is a static token)."""

    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # never in a log line

    def __post_init__(self) -> None:
        if self.ssl_context is not None:
            if self.ssl_context.check_hostname != self.check_hostname:
                raise ValueError(
                    f"check_hostname={self.check_hostname} but the SSL context has "
                    f"check_hostname={self.ssl_context.check_hostname}: they must agree")
            if self.ssl_context.verify_mode != ssl.CERT_REQUIRED:
                raise ValueError("the SSL context must verify the broker's certificate "
                                 "(verify_mode CERT_REQUIRED), as Kafka always does")
        if self.sasl_mechanism is not None:
            # Imported here: the clients module is not needed for TLS-only security.
            from odradek.security.sasl.client import create_sasl_client

            if self.username is None or self.password is None:
                raise ValueError(f"SASL/{self.sasl_mechanism} needs a username and a password")
            create_sasl_client(self.sasl_mechanism, self.username, self.password)  # checks

    @property
    def security_protocol(self) -> str:
        """Kafka's name for what this is: SSL, SASL_PLAINTEXT or SASL_SSL (or PLAINTEXT)."""
        if self.sasl_mechanism is None:
            return "PLAINTEXT" if self.ssl_context is None else "SSL"
        return "SASL_PLAINTEXT" if self.ssl_context is None else "SASL_SSL"


def inter_broker_security(config: BrokerConfig) -> InterBrokerSecurity | None:
    """The security of this broker's connections to the others, from its inter-broker
    listener's settings; None when that listener is PLAINTEXT. Raises InvalidConfigError
    naming the setting when one is missing or cannot be used (e.g. GSSAPI, Kafka's default
    sasl.mechanism.inter.broker.protocol)."""
    name = config.inter_broker_listener_name
    listener = next((li for li in config.advertised_listeners if li.name == name), None)
    if listener is None:
        raise InvalidConfigError(
            f"the inter-broker listener {name} is not among advertised.listeners",
            key="inter.broker.listener.name")
    protocol = listener.security_protocol
    if protocol == "PLAINTEXT":
        return None
    prefix = f"listener.name.{name.lower()}."
    ssl_context = None
    check_hostname = True
    if protocol in SSL_PROTOCOLS:
        ssl_context, check_hostname = _client_tls(config, name, prefix)
    mechanism = username = password = None
    if protocol in SASL_PROTOCOLS:
        mechanism, username, password = _client_sasl(config, name, prefix)
    elif protocol not in SSL_PROTOCOLS:
        raise InvalidConfigError(
            f"the inter-broker listener {name} has security protocol {protocol}, which "
            "this broker cannot connect with", key="listener.security.protocol.map")
    return InterBrokerSecurity(ssl_context, check_hostname, mechanism, username, password)


def _client_tls(config: BrokerConfig, listener: str,
                prefix: str) -> tuple[ssl.SSLContext, bool]:
    # Imported here: channel_builder imports the server side, which need not load otherwise.
    from odradek.server.channel_builder import SSL_CONFIGS

    values = config.listener_values(listener, SSL_CONFIGS)
    try:
        context = client_ssl_context(values)
    except SslConfigError as e:
        setting = getattr(e, "setting", None) or "ssl.truststore.location"
        raise InvalidConfigError(
            f"the inter-broker listener {listener}, as this broker's client: {e}",
            key=prefix + setting) from e
    algorithm = values.get(SSL_ENDPOINT_IDENTIFICATION_ALGORITHM)
    if algorithm is None:
        algorithm = DEFAULT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM
    return context, bool(algorithm.strip())


def _client_sasl(config: BrokerConfig, listener: str, prefix: str) -> tuple[str, str, str]:
    mechanism = str(config.get(INTER_BROKER_MECHANISM_CONFIG) or "").strip()
    supported = ", ".join(INTER_BROKER_MECHANISMS)
    if mechanism == GSSAPI:
        raise InvalidConfigError(
            f"{INTER_BROKER_MECHANISM_CONFIG} is GSSAPI (Kafka's default, Kerberos), which "
            f"Odradek does not have: set it to one of {supported} for the SASL inter-broker "
            f"listener {listener}", key=INTER_BROKER_MECHANISM_CONFIG)
    if mechanism not in INTER_BROKER_MECHANISMS:
        why = (" (a broker has no OAUTHBEARER token source yet)"
               if mechanism == OAUTHBEARER else "")
        raise InvalidConfigError(
            f"{INTER_BROKER_MECHANISM_CONFIG}={mechanism} cannot be used between brokers"
            f"{why}: set it to one of {supported}", key=INTER_BROKER_MECHANISM_CONFIG)
    raw = config.listener_values(listener, ("sasl.enabled.mechanisms",))
    enabled = [m.strip() for m in (raw["sasl.enabled.mechanisms"] or "").split(",")]
    if mechanism not in enabled:
        # Kafka's KafkaConfig check, in its words.
        raise InvalidConfigError(
            f"{INTER_BROKER_MECHANISM_CONFIG} must be included in sasl.enabled.mechanisms "
            f"when SASL is used for inter-broker communication (listener {listener} enables "
            f"{', '.join(m for m in enabled if m) or 'none'})",
            key=INTER_BROKER_MECHANISM_CONFIG)
    where = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
    text = config.listener_values(listener, ("sasl.jaas.config",), mechanism)["sasl.jaas.config"]
    if not text:
        raise InvalidConfigError(
            f"{where} is not set: the broker authenticates to the others with the username "
            f"and password options of that login module", key=where)
    try:
        options = parse_jaas_config(text).options
    except ValueError as e:
        raise InvalidConfigError(f"{where}: {e}", key=where) from e
    missing = [o for o in ("username", "password") if not options.get(o)]
    if missing:
        raise InvalidConfigError(
            f"{where} has no {' and no '.join(missing)} option: the broker authenticates to "
            f"the others over the inter-broker listener {listener} with them, as Kafka's "
            "login modules take them (username=\"...\" password=\"...\")", key=where)
    return mechanism, options["username"], options["password"]
