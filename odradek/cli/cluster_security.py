"""`odradek cluster up --secure`: TLS and SCRAM-SHA-512 between the brokers and for clients.

Everything lives in DIR/security/ (0700), made on the first `up --secure` and reused when
the cluster is started again on the same directory:

- ca.pem and ca.key: a private CA (EC P-256, ten years);
- broker-i.pem: broker i's PKCS#8 key and certificate (SANs localhost, 127.0.0.1 and the
  host the cluster advertises), the PEM keystore `ssl.keystore.location` takes; made again
  when it no longer names those hosts, expires within a month, or another CA signed it;
- credentials: the SCRAM users' passwords (the brokers' user `broker` and `admin`), random
  from `secrets`, one `user=password` a line.

Keys and passwords are 0600. The users are written to ZooKeeper's /config/users (as
`kafka-configs.sh --zookeeper --alter --add-config SCRAM-SHA-512=[password=...]` does)
before the brokers start, and DIR/client.properties holds the librdkafka settings of
`admin`, a super user.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.cli.client import CliError

if TYPE_CHECKING:  # imported where used: every `odradek` command imports this module
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

MECHANISM = "SCRAM-SHA-512"
CLIENT_LISTENER = "CLIENT"  # clients' listener, on --port-base
INTERNAL_LISTENER = "INTERNAL"  # the brokers' own
BROKER_USER = "broker"
ADMIN_USER = "admin"
USERS = (BROKER_USER, ADMIN_USER)
CLIENT_PROPERTIES = "client.properties"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required"
_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class Security:
    """The files and passwords of a secure cluster's data directory."""

    directory: Path  # DIR/security
    ca_file: Path
    passwords: Mapping[str, str]
    hosts: tuple[str, ...]  # what each broker's certificate names

    def keystore(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}.pem"

    def broker_settings(self, broker_id: int, client_port: int, internal_port: int
                        ) -> dict[str, str]:
        """Broker `broker_id`'s listeners and its TLS, SASL and authorizer settings."""
        internal = INTERNAL_LISTENER.lower()
        client = CLIENT_LISTENER.lower()
        mechanism = MECHANISM.lower()
        return {
            "listeners": f"{CLIENT_LISTENER}://127.0.0.1:{client_port},"
                         f"{INTERNAL_LISTENER}://127.0.0.1:{internal_port}",
            "listener.security.protocol.map":
                f"{CLIENT_LISTENER}:SASL_SSL,{INTERNAL_LISTENER}:SASL_SSL",
            "inter.broker.listener.name": INTERNAL_LISTENER,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore(broker_id)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_file),
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            # The broker's own login on the inter-broker listener; the users it accepts
            # are ZooKeeper's, on both listeners.
            f"listener.name.{internal}.{mechanism}.sasl.jaas.config":
                f'{_SCRAM_LOGIN} username="{BROKER_USER}" '
                f'password="{self.passwords[BROKER_USER]}";',
            f"listener.name.{client}.{mechanism}.sasl.jaas.config": f"{_SCRAM_LOGIN};",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": ";".join(f"User:{user}" for user in USERS),
        }

    def client_config(self, bootstrap: str = "") -> dict[str, str]:
        """librdkafka's settings for `admin`, with `bootstrap` if given."""
        config = {"bootstrap.servers": bootstrap} if bootstrap else {}
        return {**config, "security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
                "sasl.username": ADMIN_USER, "sasl.password": self.passwords[ADMIN_USER],
                "ssl.ca.location": str(self.ca_file)}

    def write_client_properties(self, path: Path, bootstrap: str) -> str:
        """DIR/client.properties (0600: it holds a password); returns its text."""
        text = "".join([
            "# odradek cluster up --secure: the super user admin over SASL_SSL (librdkafka)\n",
            *(f"{k}={v}\n" for k, v in self.client_config(bootstrap).items())])
        _write_private(path, text.encode())
        return text

    def create_users(self, connect: str) -> list[str]:
        """Writes each user's SCRAM-SHA-512 credential to ZooKeeper's /config/users under
        `connect` (a chroot included) unless a credential for its password is there
        already; returns the users written."""
        # Here: the other commands start faster without kazoo.
        from odradek.cluster.zookeeper.store import ZooKeeperMetadataStore
        from odradek.security.sasl.scram import (
            credential_from_password,
            format_credential,
            parse_credential,
        )

        store = ZooKeeperMetadataStore(connect, 0, session_timeout_ms=10_000)
        try:
            store.start()
        except Exception as e:
            raise CliError(f"cannot connect to ZooKeeper at {connect}: "
                           f"{type(e).__name__} {e}".rstrip()) from e
        try:
            existing = store.user_configs()
            changes: dict[str, dict[str, str | None]] = {}
            for user in USERS:
                password = self.passwords[user]
                current = existing.get(user, {}).get(MECHANISM)
                if current is not None:
                    try:
                        stored = parse_credential(current)
                    except ValueError:
                        stored = None
                    if stored is not None and credential_from_password(
                            MECHANISM, password, stored.salt, stored.iterations) == stored:
                        continue
                changes[user] = {MECHANISM: format_credential(
                    credential_from_password(MECHANISM, password))}
            if changes:
                store.alter_user_configs(changes)
            return sorted(changes)
        finally:
            store.close()


def prepare(data_dir: Path, broker_ids: Iterable[int], advertised_host: str = "127.0.0.1"
            ) -> Security:
    """DIR/security with the CA, each broker's certificate and the users' passwords, made
    where missing (or, for a certificate, no longer right) and kept otherwise."""
    directory = data_dir / "security"
    hosts = tuple(dict.fromkeys(["localhost", "127.0.0.1", advertised_host]))
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        ca_cert, ca_key = _certificate_authority(directory)
        for broker_id in broker_ids:
            _broker_keystore(directory / f"broker-{broker_id}.pem", broker_id, hosts,
                             ca_cert, ca_key)
        passwords = _passwords(directory / "credentials")
    except OSError as e:
        raise CliError(f"cannot make the certificates and users in {directory}: "
                       f"{e.strerror or e}") from e
    return Security(directory, directory / "ca.pem", passwords, hosts)


def _write_private(path: Path, data: bytes) -> None:
    """`data` to `path`, readable by its owner only, replacing it at once."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate_authority(directory: Path
                           ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_file, key_file = directory / "ca.pem", directory / "ca.key"
    if cert_file.exists() and key_file.exists():
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        key = serialization.load_pem_private_key(key_file.read_bytes(), None)
        if isinstance(key, ec.EllipticCurvePrivateKey) and \
                cert.not_valid_after_utc > _now() + 30 * _DAY:
            return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Odradek"),
                         x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"odradek cluster CA {secrets.token_hex(4)}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _DAY).not_valid_after(_now() + 3650 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write_private(key_file, _key_pem(key))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _san_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _keystore_fits(path: Path, hosts: tuple[str, ...], ca_cert: x509.Certificate) -> bool:
    """Whether `path` holds a key and a certificate from this CA that names `hosts` and
    stays valid for a month."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        data = path.read_bytes()
        cert = x509.load_pem_x509_certificate(data[data.index(b"-----BEGIN CERTIFICATE"):])
        serialization.load_pem_private_key(data, None)
        cert.verify_directly_issued_by(ca_cert)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # unreadable, not ours, not a certificate: made again
        return False
    return (set(_san_names(hosts)) <= set(sans)
            and cert.not_valid_after_utc > _now() + 30 * _DAY)


def _broker_keystore(path: Path, broker_id: int, hosts: tuple[str, ...],
                     ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if _keystore_fits(path, hosts, ca_cert):
        return
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Odradek"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"broker-{broker_id}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - _DAY).not_valid_after(_now() + 825 * _DAY)
            .add_extension(x509.SubjectAlternativeName(_san_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(path, _key_pem(key) + cert.public_bytes(serialization.Encoding.PEM))


def _passwords(path: Path) -> dict[str, str]:
    passwords: dict[str, str] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            user, sep, password = line.partition("=")
            if sep and user.strip() in USERS and password.strip():
                passwords[user.strip()] = password.strip()
    if set(passwords) != set(USERS):
        for user in USERS:
            passwords.setdefault(user, secrets.token_urlsafe(24))
        _write_private(path, "".join(f"{u}={passwords[u]}\n" for u in USERS).encode())
    os.chmod(path, 0o600)
    return passwords
