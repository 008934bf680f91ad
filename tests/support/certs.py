"""Test certificates made with `cryptography`: a CA, server and client certificates, and the
keystore and truststore forms Kafka's ssl.* settings take.

    ca = CertificateAuthority("Test CA")
    server = ca.issue("localhost")                      # SANs localhost and 127.0.0.1
    client = ca.issue(subject=name(CN="alice", O="Odradek"), dns_names=(), ip_addresses=())
    other_ca = CertificateAuthority("Unrelated CA")      # for "signed by another CA"

    write_pem_keystore(tmp_path / "server.pem", server, password="kp")  # key + chain, one file
    write_pkcs12_keystore(tmp_path / "server.p12", server, password="sp")
    write_pem_truststore(tmp_path / "ca.pem", ca)
    inline_keystore_settings(server, password="kp")   # KIP-651 ssl.keystore.key/certificate.chain

EC P-256 keys by default (fast to make); key_type="rsa" for RSA 2048.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ec", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

_DAY = dt.timedelta(days=1)

_NAME_OIDS = {
    "CN": NameOID.COMMON_NAME,
    "C": NameOID.COUNTRY_NAME,
    "L": NameOID.LOCALITY_NAME,
    "ST": NameOID.STATE_OR_PROVINCE_NAME,
    "O": NameOID.ORGANIZATION_NAME,
    "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
    "STREET": NameOID.STREET_ADDRESS,
    "DC": NameOID.DOMAIN_COMPONENT,
    "UID": NameOID.USER_ID,
    "EMAIL": NameOID.EMAIL_ADDRESS,
    "SERIALNUMBER": NameOID.SERIAL_NUMBER,
}


def name(**attributes: str) -> x509.Name:
    """An X.509 name from keyword attributes, most significant LAST as one writes a DN:
    ``name(CN="alice", OU="eng", O="Odradek", C="US")`` is the DN "CN=alice,OU=eng,O=Odradek,C=US"
    (encoded C first, as certificates are)."""
    rdns = [x509.NameAttribute(_NAME_OIDS[key], value) for key, value in attributes.items()]
    return x509.Name(list(reversed(rdns)))


def new_key(key_type: KeyType = "ec") -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _validity(expired: bool, not_yet_valid: bool, days: int) -> tuple[dt.datetime, dt.datetime]:
    now = _now()
    if expired:
        return now - 30 * _DAY, now - _DAY
    if not_yet_valid:
        return now + _DAY, now + 30 * _DAY
    return now - _DAY, now + days * _DAY


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


@dataclass
class Issued:
    """A certificate with its private key, and the CA certificates between it and the root
    (the root itself excluded, as a server sends it)."""

    cert: x509.Certificate
    key: PrivateKey
    intermediates: tuple[x509.Certificate, ...] = ()

    @property
    def der(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.DER)

    def cert_pem(self) -> str:
        return _pem(self.cert)

    def chain_pem(self) -> str:
        """The certificate then its intermediates: ssl.keystore.certificate.chain."""
        return "".join(_pem(c) for c in (self.cert, *self.intermediates))

    def key_pem(self, password: str | None = None) -> str:
        """The key as PKCS#8 PEM ("PRIVATE KEY", or "ENCRYPTED PRIVATE KEY" with a password):
        the only key form Kafka's PEM keystores read."""
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(password.encode())
            if password is not None
            else serialization.NoEncryption()
        )
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        ).decode("ascii")

    def traditional_key_pem(self) -> str:
        """The key as OpenSSL's traditional PEM ("RSA PRIVATE KEY" / "EC PRIVATE KEY"),
        which Kafka does not read: for the error path."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode("ascii")


@dataclass
class CertificateAuthority:
    """A self-signed root (or, with ``parent``, an intermediate) CA that issues certificates."""

    common_name: str = "Odradek Test CA"
    key_type: KeyType = "ec"
    parent: CertificateAuthority | None = None
    expired: bool = False
    cert: x509.Certificate = field(init=False)
    key: PrivateKey = field(init=False)

    def __post_init__(self) -> None:
        self.key = new_key(self.key_type)
        subject = name(CN=self.common_name, O="Odradek Tests")
        not_before, not_after = _validity(self.expired, False, 3650)
        issuer_name = self.parent.cert.subject if self.parent else subject
        signing_key = self.parent.key if self.parent else self.key
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
        )
        if self.parent:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.parent.key.public_key()),
                critical=False,
            )
        self.cert = builder.sign(signing_key, hashes.SHA256())

    @property
    def chain(self) -> tuple[x509.Certificate, ...]:
        """This CA's certificate and its parents' below the root: what a leaf it issues sends."""
        if self.parent is None:
            return ()
        return (self.cert, *self.parent.chain)

    def pem(self) -> str:
        return _pem(self.cert)

    def intermediate(self, common_name: str = "Odradek Intermediate CA") -> CertificateAuthority:
        return CertificateAuthority(common_name, key_type=self.key_type, parent=self)

    def issue(
        self,
        common_name: str | None = "localhost",
        *,
        subject: x509.Name | None = None,
        dns_names: Sequence[str] = ("localhost",),
        ip_addresses: Sequence[str] = ("127.0.0.1",),
        key_type: KeyType = "ec",
        expired: bool = False,
        not_yet_valid: bool = False,
        days: int = 365,
    ) -> Issued:
        """A certificate for both server and client use (Kafka brokers are both), with the
        SANs given (none when both are empty: then hostname checks fall back to the CN)."""
        if subject is None:
            subject = name(CN=common_name or "localhost", O="Odradek Tests")
        key = new_key(key_type)
        not_before, not_after = _validity(expired, not_yet_valid, days)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert, key, self.chain)


# ---------------------------------------------------------------------------------------------
# Keystores and truststores, in the forms Kafka's settings take
# ---------------------------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def write_pem_keystore(path: Path, issued: Issued, password: str | None = None) -> Path:
    """ssl.keystore.type=PEM at ssl.keystore.location: the PKCS#8 key (encrypted with
    ``password``, which goes in ssl.key.password) and the certificate chain, in one file."""
    return _write(path, (issued.key_pem(password) + issued.chain_pem()).encode("ascii"))


def write_pkcs12_keystore(
    path: Path, issued: Issued, password: str, *, alias: str = "kafka"
) -> Path:
    """ssl.keystore.type=PKCS12, protected by ``password`` (ssl.keystore.password)."""
    data = pkcs12.serialize_key_and_certificates(
        alias.encode(),
        issued.key,
        issued.cert,
        list(issued.intermediates) or None,
        serialization.BestAvailableEncryption(password.encode()),
    )
    return _write(path, data)


def write_pem_truststore(path: Path, *cas: CertificateAuthority | x509.Certificate) -> Path:
    """ssl.truststore.type=PEM at ssl.truststore.location: the trusted certificates."""
    return _write(path, trusted_pem(*cas).encode("ascii"))


def write_pkcs12_truststore(
    path: Path, *cas: CertificateAuthority | x509.Certificate, password: str | None
) -> Path:
    """ssl.truststore.type=PKCS12: certificates only; encrypted when ``password`` is set."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password is not None
        else serialization.NoEncryption()
    )
    certs = [_certificate(c) for c in cas]
    return _write(path, pkcs12.serialize_key_and_certificates(None, None, None, certs, encryption))


def trusted_pem(*cas: CertificateAuthority | x509.Certificate) -> str:
    return "".join(_pem(_certificate(c)) for c in cas)


def _certificate(ca: CertificateAuthority | x509.Certificate) -> x509.Certificate:
    return ca.cert if isinstance(ca, CertificateAuthority) else ca


def inline_keystore_settings(issued: Issued, password: str | None = None) -> dict[str, str]:
    """KIP-651's inline PEM keystore: ssl.keystore.key (PKCS#8, encrypted with
    ssl.key.password when ``password`` is set) and ssl.keystore.certificate.chain."""
    settings = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.key": issued.key_pem(password),
        "ssl.keystore.certificate.chain": issued.chain_pem(),
    }
    if password is not None:
        settings["ssl.key.password"] = password
    return settings


def inline_truststore_settings(*cas: CertificateAuthority | x509.Certificate) -> dict[str, str]:
    """KIP-651's inline PEM truststore: ssl.truststore.certificates."""
    return {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": trusted_pem(*cas)}


def one_line(pem: str) -> str:
    """A PEM value folded onto one line (blocks and base64 separated by spaces), as it can be
    written in a properties file; Kafka's PEM parser accepts it."""
    return " ".join(pem.split())
