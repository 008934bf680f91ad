"""SSLContext objects from Kafka's ssl.* settings, tried with real TLS handshakes over loopback
(asyncio on 127.0.0.1, port 0): each keystore and truststore form, client authentication,
certificate validity, hostname verification, protocols and cipher suites; and the settings
Kafka refuses, refused with the setting named."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.certs import (
    CertificateAuthority,
    Issued,
    inline_keystore_settings,
    inline_truststore_settings,
    name,
    one_line,
    write_pem_keystore,
    write_pem_truststore,
    write_pkcs12_keystore,
    write_pkcs12_truststore,
)

from odradek.security import ssl_factory
from odradek.security.ssl_factory import (
    SslConfigError,
    client_ssl_context,
    server_ssl_context,
    ssl_settings_fingerprint,
)
from odradek.security.ssl_principal import (
    SslPrincipalMapper,
    distinguished_name,
    ssl_principal_name,
)

pytestmark = pytest.mark.timeout(60)

Settings = Mapping[str, str | None]

# ---------------------------------------------------------------------------------------------
# A small PKI, made once for the module
# ---------------------------------------------------------------------------------------------


@dataclass
class Pki:
    ca: CertificateAuthority
    other_ca: CertificateAuthority  # unrelated: its certificates are not trusted
    server: Issued  # SANs localhost, 127.0.0.1
    client: Issued  # CN=alice,OU=eng,O=Odradek,C=US
    dir: Path
    files: dict[str, Path] = field(default_factory=dict)

    def server_settings(self, **extra: str | None) -> dict[str, str | None]:
        """A PEM-file keystore and truststore: the baseline every test varies."""
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.files["server.pem"]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.files["ca.pem"]),
            **extra,
        }

    def client_settings(self, **extra: str | None) -> dict[str, str | None]:
        return {
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.files["ca.pem"]),
            **extra,
        }

    def mtls_client_settings(self, **extra: str | None) -> dict[str, str | None]:
        return self.client_settings(
            **{
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(self.files["client.p12"]),
                "ssl.keystore.password": "client-pw",
                **extra,
            }
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority("Odradek Test CA")
    pki = Pki(
        ca=ca,
        other_ca=CertificateAuthority("Unrelated CA"),
        server=ca.issue("localhost"),
        client=ca.issue(
            subject=name(CN="alice", OU="eng", O="Odradek", C="US"), dns_names=(), ip_addresses=()
        ),
        dir=directory,
    )
    pki.files["server.pem"] = write_pem_keystore(directory / "server.pem", pki.server)
    pki.files["ca.pem"] = write_pem_truststore(directory / "ca.pem", ca)
    pki.files["client.p12"] = write_pkcs12_keystore(
        directory / "client.p12", pki.client, "client-pw"
    )
    return pki


# ---------------------------------------------------------------------------------------------
# One connection over loopback
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    echoed: bytes | None = None
    client_error: BaseException | None = None
    accepted: bool = False  # the server's handshake completed
    peer_certificate: bytes | None = None  # what the server saw of the client
    version: str | None = None
    cipher: str | None = None

    @property
    def ok(self) -> bool:
        return self.client_error is None and self.echoed == b"ping"


async def _exchange(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext, server_hostname: str | None
) -> Outcome:
    outcome = Outcome()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # called only once the server's side of the handshake has succeeded
        outcome.accepted = True
        ssl_object = writer.get_extra_info("ssl_object")
        outcome.peer_certificate = ssl_object.getpeercert(binary_form=True)
        outcome.version = ssl_object.version()
        outcome.cipher = ssl_object.cipher()[0]
        try:
            writer.write(await reader.read(4))
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(
        handle, "127.0.0.1", 0, ssl=server_context, ssl_handshake_timeout=10
    )
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                "127.0.0.1",
                port,
                ssl=client_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=10,
            ),
            timeout=15,
        )
        try:
            writer.write(b"ping")
            await writer.drain()
            # TLS 1.3: a server refusing the client's certificate says so after the client's
            # side of the handshake is done, so the refusal shows here
            outcome.echoed = await asyncio.wait_for(reader.read(4), timeout=10)
        finally:
            writer.close()
    except (ssl.SSLError, ssl.CertificateError, ConnectionError) as e:
        outcome.client_error = e
    finally:
        server.close()
        await server.wait_closed()
    return outcome


def connect(
    server_settings: Settings,
    client_settings: Settings,
    server_hostname: str | None = "localhost",
) -> Outcome:
    return asyncio.run(
        _exchange(
            server_ssl_context(server_settings),
            client_ssl_context(client_settings),
            server_hostname,
        )
    )


def assert_refused(outcome: Outcome) -> None:
    assert not outcome.ok, outcome
    assert outcome.echoed in (None, b""), outcome
    assert not outcome.accepted, outcome  # the server never got a connection either


# ---------------------------------------------------------------------------------------------
# Keystore and truststore forms
# ---------------------------------------------------------------------------------------------


def test_pem_file_keystore_serves(pki: Pki) -> None:
    outcome = connect(pki.server_settings(), pki.client_settings())
    assert outcome.ok, outcome
    assert outcome.version == "TLSv1.3"  # Kafka's default ssl.enabled.protocols: TLSv1.2,TLSv1.3
    assert outcome.peer_certificate is None  # ssl.client.auth defaults to none


def test_encrypted_pem_file_keystore_serves(pki: Pki, tmp_path: Path) -> None:
    path = write_pem_keystore(tmp_path / "enc.pem", pki.server, password="key-pw")
    assert "ENCRYPTED PRIVATE KEY" in path.read_text()
    settings = pki.server_settings(
        **{"ssl.keystore.location": str(path), "ssl.key.password": "key-pw"}
    )
    assert connect(settings, pki.client_settings()).ok


@pytest.mark.parametrize("password", [None, "key-pw"])
@pytest.mark.parametrize("folded", [False, True])
def test_inline_pem_keystore_and_truststore_serve(
    pki: Pki, password: str | None, folded: bool
) -> None:
    # KIP-651: the PEM text in the settings themselves, multi-line or folded onto one line
    keystore = inline_keystore_settings(pki.server, password=password)
    truststore = inline_truststore_settings(pki.ca)
    if folded:
        for key in ("ssl.keystore.key", "ssl.keystore.certificate.chain"):
            keystore[key] = one_line(keystore[key])
        truststore["ssl.truststore.certificates"] = one_line(
            truststore["ssl.truststore.certificates"]
        )
    assert connect(keystore, {**truststore}).ok


def test_pkcs12_keystore_serves(pki: Pki, tmp_path: Path) -> None:
    path = write_pkcs12_keystore(tmp_path / "server.p12", pki.server, "store-pw")
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(path),
        "ssl.keystore.password": "store-pw",
        "ssl.key.password": "store-pw",
    }
    assert connect(settings, pki.client_settings()).ok


def test_pkcs12_keystore_under_kafkas_default_type_jks(pki: Pki, tmp_path: Path) -> None:
    # ssl.keystore.type defaults to JKS; Java's JKS keystore type reads PKCS12 files too
    path = write_pkcs12_keystore(tmp_path / "server.p12", pki.server, "store-pw")
    settings = {"ssl.keystore.location": str(path), "ssl.keystore.password": "store-pw"}
    assert connect(settings, pki.client_settings()).ok


def test_rsa_keys_and_an_intermediate_ca(tmp_path: Path) -> None:
    root = CertificateAuthority("RSA Root", key_type="rsa")
    intermediate = root.intermediate("RSA Intermediate")
    server = intermediate.issue("localhost", key_type="rsa")
    assert server.intermediates == (intermediate.cert,)
    path = write_pkcs12_keystore(tmp_path / "rsa.p12", server, "pw")
    server_settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(path),
        "ssl.keystore.password": "pw",
    }
    # the server sends its intermediate; the client trusts the root only
    outcome = connect(server_settings, inline_truststore_settings(root))
    assert outcome.ok, outcome


def test_truststore_of_the_server_certificate_alone(pki: Pki) -> None:
    # Java trusts any truststore certificate as an anchor, not only self-signed roots
    assert connect(pki.server_settings(), inline_truststore_settings(pki.server.cert)).ok


@pytest.mark.parametrize("password", [None, "trust-pw"])
def test_pkcs12_truststore(pki: Pki, tmp_path: Path, password: str | None) -> None:
    path = write_pkcs12_truststore(tmp_path / "trust.p12", pki.other_ca, pki.ca, password=password)
    client = {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(path)}
    if password is not None:
        client["ssl.truststore.password"] = password
    assert connect(pki.server_settings(), client).ok


def test_keystore_without_memfd_uses_a_private_directory_then_removes_it(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(ssl_factory, "_USE_MEMFD", False)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    seen: list[tuple[int, int]] = []
    real_load = ssl.SSLContext.load_cert_chain

    def spying_load(self: ssl.SSLContext, certfile: str, *args: object, **kwargs: object) -> None:
        seen.append(
            (os.stat(os.path.dirname(certfile)).st_mode & 0o777, os.stat(certfile).st_mode & 0o777)
        )
        assert "ENCRYPTED PRIVATE KEY" in Path(certfile).read_text()  # never the plain key
        real_load(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spying_load)
    assert connect(inline_keystore_settings(pki.server), pki.client_settings()).ok
    assert seen == [(0o700, 0o600)]
    assert list(scratch.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Client authentication (ssl.client.auth) and the client's principal
# ---------------------------------------------------------------------------------------------


def test_client_auth_required_accepts_a_trusted_client_and_sees_its_dn(pki: Pki) -> None:
    outcome = connect(
        pki.server_settings(**{"ssl.client.auth": "required"}), pki.mtls_client_settings()
    )
    assert outcome.ok, outcome
    assert outcome.peer_certificate is not None
    assert distinguished_name(outcome.peer_certificate) == "CN=alice,OU=eng,O=Odradek,C=US"
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=eng,.*$/$1/U, DEFAULT")
    assert ssl_principal_name(outcome.peer_certificate, mapper) == "ALICE"


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_client_auth_required_refuses_a_client_without_certificate(pki: Pki, version: str) -> None:
    server = pki.server_settings(
        **{"ssl.client.auth": "required", "ssl.enabled.protocols": version}
    )
    assert_refused(connect(server, pki.client_settings()))


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_client_auth_required_refuses_a_client_of_another_ca(
    pki: Pki, tmp_path: Path, version: str
) -> None:
    stranger = pki.other_ca.issue(subject=name(CN="mallory"), dns_names=(), ip_addresses=())
    client = pki.client_settings(**inline_keystore_settings(stranger))
    server = pki.server_settings(
        **{"ssl.client.auth": "required", "ssl.enabled.protocols": version}
    )
    assert_refused(connect(server, client))


def test_client_auth_required_refuses_an_expired_client_certificate(pki: Pki) -> None:
    expired = pki.ca.issue(subject=name(CN="old"), dns_names=(), ip_addresses=(), expired=True)
    client = pki.client_settings(**inline_keystore_settings(expired))
    assert_refused(connect(pki.server_settings(**{"ssl.client.auth": "required"}), client))


def test_client_auth_requested(pki: Pki) -> None:
    server = pki.server_settings(**{"ssl.client.auth": "requested"})
    anonymous = connect(server, pki.client_settings())
    assert anonymous.ok, anonymous
    assert anonymous.peer_certificate is None
    mapper = SslPrincipalMapper.from_rules(None)
    assert ssl_principal_name(anonymous.peer_certificate, mapper) == "ANONYMOUS"
    known = connect(server, pki.mtls_client_settings())
    assert known.ok, known
    assert ssl_principal_name(known.peer_certificate, mapper) == "CN=alice,OU=eng,O=Odradek,C=US"


def test_client_auth_none_asks_for_no_certificate(pki: Pki) -> None:
    outcome = connect(
        pki.server_settings(**{"ssl.client.auth": "none"}), pki.mtls_client_settings()
    )
    assert outcome.ok, outcome
    assert outcome.peer_certificate is None


def test_server_verify_modes(pki: Pki) -> None:
    for value, mode in [
        (None, ssl.CERT_NONE),
        ("none", ssl.CERT_NONE),
        ("requested", ssl.CERT_OPTIONAL),
        ("required", ssl.CERT_REQUIRED),
    ]:
        settings = pki.server_settings(**{"ssl.client.auth": value})
        assert server_ssl_context(settings).verify_mode == mode


# ---------------------------------------------------------------------------------------------
# The server's certificate, seen by client_ssl_context
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["expired", "not_yet_valid"])
def test_client_refuses_a_server_certificate_out_of_its_validity(pki: Pki, when: str) -> None:
    server = pki.ca.issue("localhost", **{when: True})
    outcome = connect(inline_keystore_settings(server), pki.client_settings())
    assert_refused(outcome)
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)


def test_client_refuses_a_server_of_another_ca(pki: Pki) -> None:
    server = pki.other_ca.issue("localhost")
    assert_refused(connect(inline_keystore_settings(server), pki.client_settings()))


def test_hostname_verification(pki: Pki) -> None:
    server = pki.server_settings()
    # on by default (ssl.endpoint.identification.algorithm=https): DNS and IP SANs
    assert connect(server, pki.client_settings(), "localhost").ok
    assert connect(server, pki.client_settings(), "127.0.0.1").ok
    wrong = connect(server, pki.client_settings(), "broker.example.com")
    assert_refused(wrong)
    assert isinstance(wrong.client_error, ssl.SSLCertVerificationError)
    # "" turns it off; the chain is still verified
    off = pki.client_settings(**{"ssl.endpoint.identification.algorithm": ""})
    assert connect(server, off, "broker.example.com").ok
    assert client_ssl_context(off).verify_mode == ssl.CERT_REQUIRED
    assert client_ssl_context(off).check_hostname is False
    assert client_ssl_context(pki.client_settings()).check_hostname is True


def test_hostname_falls_back_to_the_cn_without_sans(pki: Pki) -> None:
    server = inline_keystore_settings(pki.ca.issue("localhost", dns_names=(), ip_addresses=()))
    assert connect(server, pki.client_settings(), "localhost").ok
    assert_refused(connect(server, pki.client_settings(), "127.0.0.1"))  # IPs need an IP SAN


def test_client_without_truststore_uses_the_system_cas(pki: Pki) -> None:
    context = client_ssl_context({})
    assert context.verify_mode == ssl.CERT_REQUIRED
    # our test CA is not a system CA
    assert_refused(connect(pki.server_settings(), {}))


# ---------------------------------------------------------------------------------------------
# Protocols and cipher suites
# ---------------------------------------------------------------------------------------------


def test_tls13_only_server_refuses_a_tls12_only_client(pki: Pki) -> None:
    server = pki.server_settings(**{"ssl.enabled.protocols": "TLSv1.3"})
    assert_refused(connect(server, pki.client_settings(**{"ssl.enabled.protocols": "TLSv1.2"})))
    assert connect(server, pki.client_settings()).version == "TLSv1.3"


def test_tls12_only_server(pki: Pki) -> None:
    server = pki.server_settings(**{"ssl.enabled.protocols": "TLSv1.2"})
    outcome = connect(server, pki.client_settings())
    assert outcome.ok and outcome.version == "TLSv1.2"
    assert_refused(connect(server, pki.client_settings(**{"ssl.enabled.protocols": "TLSv1.3"})))


def test_ssl_protocol_caps_a_client_not_a_server(pki: Pki) -> None:
    # Kafka: a client with ssl.protocol=TLSv1.2 does not use TLSv1.3 even when
    # ssl.enabled.protocols lists it (SslVersionsTransportLayerTest)
    tls13_server = pki.server_settings(**{"ssl.enabled.protocols": "TLSv1.3"})
    capped = pki.client_settings(**{"ssl.protocol": "TLSv1.2"})
    assert_refused(connect(tls13_server, capped))
    assert connect(pki.server_settings(), capped).version == "TLSv1.2"
    # a server's ssl.protocol caps nothing
    server = pki.server_settings(**{"ssl.protocol": "TLSv1.2"})
    assert connect(server, pki.client_settings()).version == "TLSv1.3"
    assert connect(server, pki.client_settings(**{"ssl.protocol": "TLS"})).version == "TLSv1.3"


def test_legacy_protocols_are_dropped_with_a_warning(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.security.ssl_factory"):
        context = client_ssl_context(
            pki.client_settings(**{"ssl.enabled.protocols": "TLSv1.1, TLSv1.2"})
        )
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert "TLSv1.1 is disabled" in caplog.text


def test_cipher_suite_restriction(pki: Pki) -> None:
    suite = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"  # our keys are EC
    server = pki.server_settings(**{"ssl.cipher.suites": suite})
    outcome = connect(server, pki.client_settings())
    # only TLS 1.2 suites listed: as in Java, TLS 1.3 has no suite left
    assert outcome.ok and outcome.version == "TLSv1.2"
    assert outcome.cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"
    other = pki.client_settings(**{"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"})
    assert_refused(connect(server, other))
    # OpenSSL's names are taken too, and Java's SSL_ prefix
    openssl_named = pki.client_settings(**{"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    assert connect(server, openssl_named).cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_tls13_cipher_suites_cannot_be_restricted(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="odradek.security.ssl_factory"):
        suites = "TLS_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
        server = pki.server_settings(**{"ssl.cipher.suites": suites})
        server_ssl_context(server)
    assert "cannot restrict TLS 1.3 cipher suites" in caplog.text
    # only TLS 1.3 suites listed: TLS 1.2 is off, as in Java
    tls13 = pki.server_settings(**{"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    assert server_ssl_context(tls13).minimum_version == ssl.TLSVersion.TLSv1_3
    assert connect(tls13, pki.client_settings()).version == "TLSv1.3"
    assert_refused(connect(tls13, pki.client_settings(**{"ssl.enabled.protocols": "TLSv1.2"})))


def test_java_only_cipher_suites_are_dropped_with_a_warning(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    suites = "SSL_RSA_WITH_RC4_128_SHA,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    with caplog.at_level(logging.WARNING, logger="odradek.security.ssl_factory"):
        server_ssl_context(pki.server_settings(**{"ssl.cipher.suites": suites}))
    assert "SSL_RSA_WITH_RC4_128_SHA is not available in OpenSSL" in caplog.text


# ---------------------------------------------------------------------------------------------
# Settings Kafka refuses: SslConfigError naming the setting
# ---------------------------------------------------------------------------------------------


def config_error(build: object, settings: Settings) -> SslConfigError:
    with pytest.raises(SslConfigError) as e:
        build(settings)  # type: ignore[operator]
    assert str(e.value).startswith(f"Invalid {e.value.setting}: ")
    return e.value


def test_server_without_keystore(pki: Pki) -> None:
    error = config_error(server_ssl_context, pki.client_settings())
    assert error.setting == "ssl.keystore.location"
    assert "needs a keystore" in str(error)


def test_wrong_pkcs12_password(pki: Pki) -> None:
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.files["client.p12"]),
        "ssl.keystore.password": "wrong",
    }
    assert config_error(server_ssl_context, settings).setting == "ssl.keystore.password"


def test_pkcs12_keystore_without_password(pki: Pki) -> None:
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.files["client.p12"]),
    }
    assert config_error(server_ssl_context, settings).setting == "ssl.keystore.password"


def test_wrong_pem_key_password(pki: Pki, tmp_path: Path) -> None:
    path = write_pem_keystore(tmp_path / "enc.pem", pki.server, password="right")
    settings = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(path)}
    error = config_error(server_ssl_context, {**settings, "ssl.key.password": "wrong"})
    assert error.setting == "ssl.key.password" and "cannot decrypt" in str(error)
    # Kafka: an encrypted PEM key needs ssl.key.password...
    error = config_error(server_ssl_context, settings)
    assert error.setting == "ssl.key.password" and "is encrypted" in str(error)
    # ...and a plain one must come without it
    plain = {**pki.server_settings(), "ssl.key.password": "x"}
    assert config_error(server_ssl_context, plain).setting == "ssl.key.password"


def test_jks_is_a_java_format(pki: Pki, tmp_path: Path) -> None:
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + bytes(64))
    for store_type in ("JKS", None, "PKCS12"):
        settings = {
            "ssl.keystore.type": store_type,
            "ssl.keystore.location": str(jks),
            "ssl.keystore.password": "pw",
        }
        error = config_error(server_ssl_context, settings)
        assert error.setting == "ssl.keystore.location"
        assert str(error) == (
            f"Invalid ssl.keystore.location: '{jks}' is a JKS keystore: JKS is a Java format "
            f"that Odradek cannot read. Convert it to PKCS12 with 'keytool -importkeystore "
            f"-srckeystore {jks} -destkeystore {tmp_path}/server.p12 -deststoretype PKCS12' "
            "and set ssl.keystore.type=PKCS12"
        )
    truststore = {"ssl.truststore.location": str(jks)}
    error = config_error(client_ssl_context, truststore)
    assert error.setting == "ssl.truststore.location"
    assert "set ssl.truststore.type=PKCS12" in str(error)
    jceks = {"ssl.keystore.type": "JCEKS", "ssl.keystore.location": str(jks)}
    error = config_error(server_ssl_context, jceks)
    assert error.setting == "ssl.keystore.type" and "JCEKS is a Java format" in str(error)


@pytest.mark.parametrize(
    ("extra", "setting", "message"),
    [
        ({"ssl.protocol": "TLSv9"}, "ssl.protocol", "unknown protocol"),
        ({"ssl.enabled.protocols": "TLSv1.4"}, "ssl.enabled.protocols", "unknown protocol"),
        ({"ssl.enabled.protocols": "tlsv1.2"}, "ssl.enabled.protocols", "case-sensitive"),
        ({"ssl.enabled.protocols": "TLSv1.2,"}, "ssl.enabled.protocols", "empty entry"),
        ({"ssl.enabled.protocols": "TLSv1.1,SSLv3"}, "ssl.enabled.protocols", "no usable"),
        ({"ssl.cipher.suites": "NOT-A-CIPHER"}, "ssl.cipher.suites", "unknown cipher suite"),
        (
            {"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols": "TLSv1.2"},
            "ssl.cipher.suites",
            "no suite for the enabled protocols",
        ),
        ({"ssl.client.auth": "REQUIRED"}, "ssl.client.auth", "one of: required, requested, none"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth", "String must be one of"),
        ({"ssl.keystore.type": "pem"}, "ssl.keystore.type", "spelled PEM"),
        ({"ssl.keystore.type": "BCFKS"}, "ssl.keystore.type", "unsupported type"),
        ({"ssl.keystore.password": "pw"}, "ssl.keystore.password", "cannot be used with PEM"),
        ({"ssl.truststore.password": "pw"}, "ssl.truststore.password", "cannot be used with PEM"),
        ({"ssl.keystore.location": "/nonexistent/k.pem"}, "ssl.keystore.location", "cannot read"),
        (
            {"ssl.truststore.location": "/nonexistent/t.pem"},
            "ssl.truststore.location",
            "cannot read",
        ),
        ({"ssl.keystore.key": "x"}, "ssl.keystore.certificate.chain", "must be set with"),
        ({"ssl.keystore.certificate.chain": "x"}, "ssl.keystore.key", "is not set"),
        ({"ssl.truststore.certificates": "x"}, "ssl.truststore.location", "not be set together"),
        ({"ssl.engine.factory.class": "com.example.Factory"}, "ssl.engine.factory.class", "Java"),
    ],
)
def test_bad_server_settings(pki: Pki, extra: dict[str, str], setting: str, message: str) -> None:
    error = config_error(server_ssl_context, pki.server_settings(**extra))
    assert error.setting == setting
    assert message in str(error)


@pytest.mark.parametrize(
    ("settings", "setting", "message"),
    [
        ({"ssl.keystore.password": "pw"}, "ssl.keystore.location", "is not set"),
        ({"ssl.truststore.password": "pw"}, "ssl.truststore.location", "is not set"),
        (
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.key": "x",
                "ssl.keystore.certificate.chain": "y",
            },
            "ssl.keystore.key",
            "only with ssl.keystore.type=PEM",
        ),
        (
            {"ssl.truststore.certificates": "x"},  # type defaults to JKS
            "ssl.truststore.certificates",
            "only with ssl.truststore.type=PEM",
        ),
        (
            {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "no pem here"},
            "ssl.truststore.certificates",
            "no PEM CERTIFICATE found",
        ),
        (
            {"ssl.endpoint.identification.algorithm": "dns"},
            "ssl.endpoint.identification.algorithm",
            "unknown",
        ),
        ({"ssl.protocol": "TLSv1.1"}, "ssl.protocol", "lets a client use none of"),
    ],
)
def test_bad_client_settings(settings: dict[str, str], setting: str, message: str) -> None:
    error = config_error(client_ssl_context, settings)
    assert error.setting == setting
    assert message in str(error)


def test_pem_key_forms_kafka_does_not_read(pki: Pki) -> None:
    chain = pki.server.chain_pem()
    traditional = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": pki.server.traditional_key_pem(),
        "ssl.keystore.certificate.chain": chain,
    }
    error = config_error(server_ssl_context, traditional)
    assert error.setting == "ssl.keystore.key" and "openssl pkcs8 -topk8" in str(error)
    two_keys = {**traditional, "ssl.keystore.key": pki.server.key_pem() + pki.client.key_pem()}
    assert "expected one private key, but found 2" in str(
        config_error(server_ssl_context, two_keys)
    )


def test_key_and_chain_that_do_not_match(pki: Pki) -> None:
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": pki.client.key_pem(),
        "ssl.keystore.certificate.chain": pki.server.chain_pem(),
    }
    error = config_error(server_ssl_context, settings)
    assert error.setting == "ssl.keystore.certificate.chain"
    assert "does not belong" in str(error)


def test_pem_file_under_a_binary_type(pki: Pki) -> None:
    settings = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(pki.files["server.pem"]),
        "ssl.keystore.password": "pw",
    }
    error = config_error(server_ssl_context, settings)
    assert error.setting == "ssl.keystore.type" and "set it to PEM" in str(error)


def test_java_only_settings_are_ignored(pki: Pki) -> None:
    settings = pki.server_settings(
        **{
            "ssl.provider": "SunJSSE",
            "ssl.keymanager.algorithm": "SunX509",
            "ssl.trustmanager.algorithm": "PKIX",
            "ssl.secure.random.implementation": "SHA1PRNG",
            "ssl.engine.factory.class": (
                "org.apache.kafka.common.security.ssl.DefaultSslEngineFactory"
            ),
        }
    )
    assert connect(settings, pki.client_settings()).ok


# ---------------------------------------------------------------------------------------------
# KIP-226 reload fingerprint
# ---------------------------------------------------------------------------------------------


def test_fingerprint(pki: Pki, tmp_path: Path) -> None:
    keystore = write_pem_keystore(tmp_path / "server.pem", pki.server, password="secret-pw")
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.key.password": "secret-pw",
    }
    first = ssl_settings_fingerprint(settings)
    assert first == ssl_settings_fingerprint(dict(settings))
    assert "secret-pw" not in first
    # a changed value
    assert ssl_settings_fingerprint({**settings, "ssl.client.auth": "required"}) != first
    # the file rewritten in place, same size, same mtime: its content still counts
    stat = keystore.stat()
    renewed = pki.ca.issue("localhost")
    write_pem_keystore(keystore, renewed, password="secret-pw")
    os.utime(keystore, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ssl_settings_fingerprint(settings) != first
    # a missing file
    keystore.unlink()
    assert ssl_settings_fingerprint(settings) != first
    # inline PEM values are values
    inline = inline_keystore_settings(pki.server)
    assert ssl_settings_fingerprint(inline) != ssl_settings_fingerprint(
        inline_keystore_settings(renewed)
    )


# ---------------------------------------------------------------------------------------------
# Stores made by Java's keytool (skipped where there is no JDK)
# ---------------------------------------------------------------------------------------------

KEYTOOL = shutil.which("keytool")


@pytest.mark.skipif(KEYTOOL is None, reason="no keytool (JDK) on this machine")
@pytest.mark.timeout(120)
def test_keytool_stores(pki: Pki, tmp_path: Path) -> None:
    assert KEYTOOL is not None
    common = ["-alias", "broker", "-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2"]
    dname = ["-dname", "CN=localhost,OU=ops,O=Odradek,C=US", "-ext", "SAN=dns:localhost"]
    p12 = tmp_path / "keytool.p12"
    jks = tmp_path / "keytool.jks"
    for path, store_type in ((p12, "PKCS12"), (jks, "JKS")):
        subprocess.run(
            [KEYTOOL, "-genkeypair", *common, *dname, "-keystore", str(path),
             "-storetype", store_type, "-storepass", "changeit", "-keypass", "changeit"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    server = {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(p12),
        "ssl.keystore.password": "changeit",
        "ssl.key.password": "changeit",
    }
    # keytool's self-signed certificate, trusted through the key entry of the same store
    client = {
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(p12),
        "ssl.truststore.password": "changeit",
    }
    assert connect(server, client).ok
    jks_settings = {**server, "ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks)}
    assert "keytool -importkeystore" in str(config_error(server_ssl_context, jks_settings))
