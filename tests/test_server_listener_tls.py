"""ReloadableSslContext: a listener's keystore and truststore replaced while the listener
keeps its bound context (KIP-226), with Kafka's SslFactory checks; handshakes in memory."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from support.certs import CertificateAuthority, Issued, write_pem_keystore, write_pem_truststore

from odradek.security.ssl_factory import SslConfigError
from odradek.server.listener_tls import ReloadableSslContext


def keystore(d: Path, name: str, issued: Issued) -> dict[str, str | None]:
    return {"ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(write_pem_keystore(d / f"{name}.pem", issued))}


def truststore(d: Path, name: str, *cas: CertificateAuthority) -> dict[str, str | None]:
    return {"ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(write_pem_truststore(d / f"{name}.pem", *cas))}


def served_serial(server_context: ssl.SSLContext, ca: CertificateAuthority) -> int:
    """The serial of the certificate a client is shown in a handshake with the context."""
    client_context = ssl.create_default_context(cadata=ca.pem())
    client_context.check_hostname = False
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(to_server, to_client, server_side=True)
    client = client_context.wrap_bio(to_client, to_server)
    for _ in range(10):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
    der = client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_new_handshakes_use_the_installed_context(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    first, second = ca.issue(), ca.issue()
    original = keystore(tmp_path, "first", first)
    tls = ReloadableSslContext(original)
    assert served_serial(tls.bound, ca) == first.cert.serial_number
    assert tls.prepare(dict(original)) is None  # same settings, same file
    values = keystore(tmp_path, "second", second)
    context = tls.prepare(values)
    assert context is not None
    assert served_serial(tls.bound, ca) == first.cert.serial_number  # prepared, not installed
    tls.install(context, values)
    assert served_serial(tls.bound, ca) == second.cert.serial_number
    assert tls.prepare(values) is None


def test_a_file_changed_in_place_is_a_change(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    values = keystore(tmp_path, "server", ca.issue())
    tls = ReloadableSslContext(values)
    assert tls.prepare(values) is None
    renewed = ca.issue()
    keystore(tmp_path, "server", renewed)
    context = tls.prepare(values)
    assert context is not None
    tls.install(context, values)
    assert served_serial(tls.bound, ca) == renewed.cert.serial_number


def test_kafkas_checks(tmp_path: Path) -> None:
    ca = CertificateAuthority()
    values = keystore(tmp_path, "server", ca.issue())
    tls = ReloadableSslContext(values)
    with pytest.raises(SslConfigError, match="Keystore DistinguishedName does not match"):
        tls.prepare(keystore(tmp_path, "renamed", ca.issue("other")))
    with pytest.raises(SslConfigError, match="Keystore SubjectAltNames do not match"):
        tls.prepare(keystore(tmp_path, "fewer", ca.issue(dns_names=())))
    with pytest.raises(SslConfigError, match="Cannot add SSL truststore"):
        tls.prepare({**values, **truststore(tmp_path, "trust", ca)})
    # ssl.allow.dn.changes / ssl.allow.san.changes lift the first two.
    lenient = ReloadableSslContext(values, allow_dn_changes=True, allow_san_changes=True)
    assert lenient.prepare(keystore(tmp_path, "renamed", ca.issue("other",
                                                                  dns_names=()))) is not None


def test_the_inter_broker_listener_must_still_talk_to_brokers_not_yet_rolled(
        tmp_path: Path) -> None:
    ca, other = CertificateAuthority("Old CA"), CertificateAuthority("New CA")
    values = {**keystore(tmp_path, "server", ca.issue()), **truststore(tmp_path, "t", ca)}
    tls = ReloadableSslContext({**values, "ssl.client.auth": "required"}, inter_broker=True)
    # A certificate of a CA the other brokers do not trust yet: refused.
    with pytest.raises(SslConfigError, match="cannot complete a handshake"):
        tls.prepare({**values, **keystore(tmp_path, "new", other.issue())})
    # First every broker trusts both CAs, then the certificates move to the new CA.
    both = {**values, **truststore(tmp_path, "both", ca, other)}
    context = tls.prepare(both)
    assert context is not None
    tls.install(context, both)
    moved = {**both, **keystore(tmp_path, "new", other.issue())}
    assert tls.prepare(moved) is not None
