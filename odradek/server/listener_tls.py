"""A TLS listener's keystore and truststore, reloaded while it stays bound (KIP-226).

Kafka rebuilds a listener's SslFactory when one of SslConfigs.RECONFIGURABLE_CONFIGS changes
through AlterConfigs (`listener.name.<listener>.ssl.keystore.location`, ...), or when the
same settings are sent again and a keystore or truststore file changed on disk (an operator
or cert-manager replaced it in place). Before it switches it checks, as SslFactory does:

- the keystore's certificate keeps its distinguished name and subject alternative names
  (the new SANs include the old), unless ssl.allow.dn.changes / ssl.allow.san.changes;
- a keystore or truststore is neither added to nor removed from a listener that had none;
- on the inter-broker listener, the old and the new stores complete a TLS handshake with
  each other both ways, so that brokers rolled one by one keep talking.

The listener is bound once with an asyncio server and one SSLContext. That context's SNI
callback, which OpenSSL calls for every ClientHello (with or without a server name), moves
each new handshake onto the current context, which carries the keystore and truststore;
connections already up keep theirs. Settings that Kafka does not reconfigure (ssl.client.auth,
protocols, cipher suites) are the bound context's and are refused dynamically in config.py.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping

from odradek.security.ssl_factory import (
    SslConfigError,
    client_ssl_context,
    keystore_certificate,
    server_ssl_context,
    ssl_settings_fingerprint,
    x509,
)

log = logging.getLogger(__name__)

SSL_ALLOW_DN_CHANGES = "ssl.allow.dn.changes"
SSL_ALLOW_SAN_CHANGES = "ssl.allow.san.changes"
_HANDSHAKE_ROUNDS = 10  # a TLS 1.2 or 1.3 handshake takes 2 or 3 flights each way


class ReloadableSslContext:
    """The TLS of one listener: `bound` goes to the listener's server once; `prepare` and
    `install` replace what new handshakes use."""

    def __init__(self, values: Mapping[str, str | None], *, inter_broker: bool = False,
                 allow_dn_changes: bool = False, allow_san_changes: bool = False) -> None:
        self.inter_broker = inter_broker
        self.allow_dn_changes = allow_dn_changes
        self.allow_san_changes = allow_san_changes
        self.values = dict(values)
        self.fingerprint = ssl_settings_fingerprint(values)
        self.bound = server_ssl_context(values)
        self.current = self.bound
        self.bound.sni_callback = self._select

    def _select(self, ssl_object: ssl.SSLObject, _server_name: str | None,
                context: ssl.SSLContext) -> None:
        current = self.current
        if current is not context:
            ssl_object.context = current

    def prepare(self, values: Mapping[str, str | None]) -> ssl.SSLContext | None:
        """The context for `values` when they or their files differ from the current ones
        (None when nothing changed), checked as Kafka's SslFactory checks a reconfiguration.
        Raises SslConfigError."""
        if ssl_settings_fingerprint(values) == self.fingerprint:
            return None
        context = server_ssl_context(values)  # the new stores load, or SslConfigError
        self._check_keystore(values)
        self._check_truststore(values)
        if self.inter_broker:
            _check_handshakes(self.values, values)
        return context

    def install(self, context: ssl.SSLContext, values: Mapping[str, str | None]) -> None:
        """New handshakes use `context` from now on."""
        self.current = context
        self.values = dict(values)
        self.fingerprint = ssl_settings_fingerprint(values)

    def _check_keystore(self, values: Mapping[str, str | None]) -> None:
        old, new = keystore_certificate(self.values), keystore_certificate(values)
        if old is None or new is None:  # a TLS listener always has one (server_ssl_context)
            return
        if not self.allow_dn_changes and old.subject != new.subject:
            raise SslConfigError(
                "ssl.keystore.location",
                f"Keystore DistinguishedName does not match: existing={{DN={_dn(old)}}}, "
                f"new={{DN={_dn(new)}}} (set {SSL_ALLOW_DN_CHANGES}=true to allow it)")
        old_sans, new_sans = _sans(old), _sans(new)
        if not self.allow_san_changes and not old_sans <= new_sans:
            raise SslConfigError(
                "ssl.keystore.location",
                f"Keystore SubjectAltNames do not match: existing={{SAN={sorted(old_sans)}}}, "
                f"new={{SAN={sorted(new_sans)}}} (set {SSL_ALLOW_SAN_CHANGES}=true to allow it)")

    def _check_truststore(self, values: Mapping[str, str | None]) -> None:
        had = _has_truststore(self.values)
        has = _has_truststore(values)
        if not had and has:
            raise SslConfigError("ssl.truststore.location",
                                 "Cannot add SSL truststore to an existing listener for which "
                                 "no truststore was configured.")


def _has_truststore(values: Mapping[str, str | None]) -> bool:
    return bool(values.get("ssl.truststore.location") or values.get("ssl.truststore.certificates"))


def _dn(certificate: x509.Certificate) -> str:
    return certificate.subject.rfc4514_string()


def _sans(certificate: x509.Certificate) -> set[str]:
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return set()
    return {f"{type(n).__name__}:{n.value}" for n in names.value}


def _check_handshakes(old: Mapping[str, str | None], new: Mapping[str, str | None]) -> None:
    """Kafka's SslEngineValidator: the old stores' server accepts the new stores' client and
    the new server the old client, each presenting its keystore (mutual TLS), host names not
    checked. Raises SslConfigError."""
    for server_values, client_values, what in ((old, new, "the current keystore's server "
                                                "and the new keystore's client"),
                                               (new, old, "the new keystore's server and "
                                                "the current keystore's client")):
        server = server_ssl_context({**server_values, "ssl.client.auth": "required"})
        client = client_ssl_context({**client_values,
                                     "ssl.endpoint.identification.algorithm": ""})
        try:
            _handshake(server, client)
        except ssl.SSLError as e:
            raise SslConfigError(
                "ssl.keystore.location",
                f"Validation of dynamic config update of SSLFactory failed: {what} cannot "
                f"complete a handshake ({e.reason or e}): brokers with the old and the new "
                "stores could not talk to each other") from None


def _handshake(server_context: ssl.SSLContext, client_context: ssl.SSLContext) -> None:
    """A whole TLS handshake between two contexts in memory."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(to_server, to_client, server_side=True)
    client = client_context.wrap_bio(to_client, to_server, server_side=False)
    done = {server: False, client: False}
    for _ in range(_HANDSHAKE_ROUNDS):
        for side in (client, server):
            if not done[side]:
                try:
                    side.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        if all(done.values()):
            # TLS 1.3: the server checks the client's certificate on its last flight, which
            # the client reads with its first data.
            client.write(b"\0")
            server.read(1)
            return
    raise ssl.SSLError("the handshake did not complete")
