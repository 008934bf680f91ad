"""Python ``ssl.SSLContext`` objects from Kafka's ``ssl.*`` settings.

The behaviour follows Kafka 3.9's DefaultSslEngineFactory and SslFactory (and KIP-651 for PEM):
the same settings, the same defaults, the same combinations refused. Where Java and Python's
``ssl`` (OpenSSL) cannot do the same thing, the difference is said at the spot:

- Keystores: PKCS12 and PEM (a file with key and chain, or KIP-651's inline
  ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``). JKS and JCEKS are Java formats:
  a clear error says to convert them with keytool. As in Java (keystore.type.compat), a PKCS12
  file also loads under the type JKS, which is Kafka's default type.
- PEM keys are PKCS#8 only, RSA, DSA or EC, encrypted exactly when ``ssl.key.password`` is set,
  as Kafka's PemStore requires.
- ``ssl.cipher.suites`` takes Java/IANA names (mapped to OpenSSL's) or OpenSSL names. Python
  cannot restrict TLS 1.3 suites: a list naming only TLS 1.2 suites turns TLS 1.3 off (no
  TLS 1.3 suite is enabled, as in Java), one naming only TLS 1.3 suites turns TLS 1.2 off, and
  a list naming some but not all of OpenSSL's TLS 1.3 suites logs a warning.
- Java-only settings (ssl.provider, ssl.keymanager.algorithm, ssl.trustmanager.algorithm,
  ssl.secure.random.implementation) are ignored.

``ssl.SSLContext.load_cert_chain`` reads only files, and only PEM: every keystore is parsed
here, then its key (re-encrypted with a one-time random password, so its plain form never
leaves this process's memory) and chain are handed to OpenSSL through an anonymous memory file
(memfd) or, where there is none, a 0600 file in a private 0700 directory deleted right after.

For KIP-226 reloads, ssl_settings_fingerprint() changes when a value or a store file changes.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
import logging
import os
import re
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.lazy_modules import lazy_module

# Loaded when a TLS setting is first read, not with every broker.
x509 = lazy_module("cryptography.x509")
serialization = lazy_module("cryptography.hazmat.primitives.serialization")
dsa = lazy_module("cryptography.hazmat.primitives.asymmetric.dsa")
ec = lazy_module("cryptography.hazmat.primitives.asymmetric.ec")
rsa = lazy_module("cryptography.hazmat.primitives.asymmetric.rsa")

__all__ = [
    "SslConfigError",
    "client_ssl_context",
    "keystore_certificate",
    "reload_client_context",
    "server_ssl_context",
    "ssl_settings_fingerprint",
]

log = logging.getLogger(__name__)

# Kafka's setting names (SslConfigs, BrokerSecurityConfigs)
SSL_PROTOCOL = "ssl.protocol"
SSL_PROVIDER = "ssl.provider"
SSL_CIPHER_SUITES = "ssl.cipher.suites"
SSL_ENABLED_PROTOCOLS = "ssl.enabled.protocols"
SSL_KEYSTORE_TYPE = "ssl.keystore.type"
SSL_KEYSTORE_LOCATION = "ssl.keystore.location"
SSL_KEYSTORE_PASSWORD = "ssl.keystore.password"
SSL_KEY_PASSWORD = "ssl.key.password"
SSL_KEYSTORE_KEY = "ssl.keystore.key"
SSL_KEYSTORE_CERTIFICATE_CHAIN = "ssl.keystore.certificate.chain"
SSL_TRUSTSTORE_TYPE = "ssl.truststore.type"
SSL_TRUSTSTORE_LOCATION = "ssl.truststore.location"
SSL_TRUSTSTORE_PASSWORD = "ssl.truststore.password"
SSL_TRUSTSTORE_CERTIFICATES = "ssl.truststore.certificates"
SSL_KEYMANAGER_ALGORITHM = "ssl.keymanager.algorithm"
SSL_TRUSTMANAGER_ALGORITHM = "ssl.trustmanager.algorithm"
SSL_ENDPOINT_IDENTIFICATION_ALGORITHM = "ssl.endpoint.identification.algorithm"
SSL_SECURE_RANDOM_IMPLEMENTATION = "ssl.secure.random.implementation"
SSL_ENGINE_FACTORY_CLASS = "ssl.engine.factory.class"
SSL_CLIENT_AUTH = "ssl.client.auth"

# Kafka's defaults
DEFAULT_SSL_PROTOCOL = "TLSv1.3"
DEFAULT_SSL_ENABLED_PROTOCOLS = "TLSv1.2,TLSv1.3"
DEFAULT_SSL_KEYSTORE_TYPE = "JKS"
DEFAULT_SSL_TRUSTSTORE_TYPE = "JKS"
DEFAULT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM = "https"
DEFAULT_SSL_CLIENT_AUTH = "none"
PEM_TYPE = "PEM"

# Java-only knobs with no OpenSSL meaning: accepted and ignored.
_JAVA_ONLY = (
    SSL_PROVIDER,
    SSL_KEYMANAGER_ALGORITHM,
    SSL_TRUSTMANAGER_ALGORITHM,
    SSL_SECURE_RANDOM_IMPLEMENTATION,
)
_KAFKA_ENGINE_FACTORIES = (
    "org.apache.kafka.common.security.ssl.DefaultSslEngineFactory",
    "org.apache.kafka.common.security.ssl.CommonNameLoggingSslEngineFactory",
)


class SslConfigError(ValueError):
    """A bad ssl.* setting, with a message naming it: the broker refuses to start on it."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"Invalid {setting}: {message}")
        self.setting = setting


# ---------------------------------------------------------------------------------------------
# Reading the settings as Kafka's ConfigDef does
# ---------------------------------------------------------------------------------------------


def _get(settings: Mapping[str, str | None], name: str) -> str | None:
    """A setting's value, trimmed as ConfigDef trims strings and passwords; None when unset."""
    value = settings.get(name)
    return None if value is None else str(value).strip()


def _list(settings: Mapping[str, str | None], name: str, default: str | None) -> list[str]:
    """A LIST setting: comma separated, spaces around commas ignored; "" is the empty list."""
    value = _get(settings, name)
    if value is None:
        value = default
    if not value:
        return []
    items = re.split(r"\s*,\s*", value)
    if "" in items:
        # Java would refuse the empty name when it builds the first SSLEngine
        raise SslConfigError(name, f"{value!r} has an empty entry")
    return items


def _check_engine_factory(settings: Mapping[str, str | None]) -> None:
    factory = _get(settings, SSL_ENGINE_FACTORY_CLASS)
    if factory and factory not in _KAFKA_ENGINE_FACTORIES:
        raise SslConfigError(
            SSL_ENGINE_FACTORY_CLASS,
            f"{factory} is a Java class; Odradek has only Kafka's default SSL engine factory",
        )
    for name in _JAVA_ONLY:
        if _get(settings, name):
            log.debug("%s applies to Java's JSSE only: ignored", name)


# ---------------------------------------------------------------------------------------------
# PEM, as Kafka's PemParser reads it
# ---------------------------------------------------------------------------------------------


def _pem_pattern(label: str) -> re.Pattern[str]:
    """Kafka's PemParser regex: BEGIN line (any text before the label on it), optional
    "Name: value" header lines, base64 with any whitespace, END line. Java's '.' stops at line
    terminators and its \\s is ASCII, hence the explicit class and re.ASCII."""
    dot = "[^\\n\\r\\x85\\u2028\\u2029]"
    name = label.replace(" ", "\\s+")
    begin_or_end = "-+{}\\s*" + dot + "*{}[^-]*-+\\s+"
    params = "\\s*[^\\r\\n]*:[^\\r\\n]*[\\r\\n]+"
    return re.compile(
        begin_or_end.format("BEGIN", name)
        + f"((?:{params})*)"
        + "([a-zA-Z0-9/+=\\s]*)"
        + begin_or_end.format("END", name),
        re.ASCII,
    )


_CERTIFICATE_PEM = _pem_pattern("CERTIFICATE")
_PRIVATE_KEY_PEM = _pem_pattern("PRIVATE KEY")


@dataclass(frozen=True)
class _PemEntry:
    der: bytes
    headers: str  # e.g. "Proc-Type: 4,ENCRYPTED", which marks OpenSSL's traditional format


def _pem_entries(pem: str, pattern: re.Pattern[str], setting: str, what: str) -> list[_PemEntry]:
    entries = []
    for m in pattern.finditer(pem + "\n"):  # the last newline may be left out of a value
        try:
            der = base64.b64decode(re.sub(r"\s", "", m.group(2)), validate=True)
        except (binascii.Error, ValueError):
            raise SslConfigError(setting, f"a PEM {what} block has invalid base64") from None
        entries.append(_PemEntry(der, m.group(1).strip()))
    if not entries:
        raise SslConfigError(setting, f"no PEM {what} found (expected -----BEGIN {what}-----)")
    return entries


def _pem_certificates(pem: str, setting: str) -> list[x509.Certificate]:
    certs = []
    for entry in _pem_entries(pem, _CERTIFICATE_PEM, setting, "CERTIFICATE"):
        try:
            certs.append(x509.load_der_x509_certificate(entry.der))
        except ValueError as e:
            raise SslConfigError(setting, f"a PEM certificate cannot be read: {e}") from None
    return certs


def _der_tags(der: bytes) -> list[int]:
    """The tags of the elements inside a DER SEQUENCE (empty if it is not one)."""
    if len(der) < 2 or der[0] != 0x30:
        return []
    pos = 1
    length = der[pos]
    pos += 1
    if length & 0x80:
        pos += length & 0x7F
    tags = []
    while pos < len(der) and len(tags) < 3:
        tags.append(der[pos])
        pos += 1
        if pos >= len(der):
            break
        length = der[pos]
        pos += 1
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(der[pos : pos + count], "big")
            pos += count
        pos += length
    return tags


_CONVERT_KEY = "convert it with: openssl pkcs8 -topk8 -in key.pem -out key-pkcs8.pem"


def _pem_private_key(
    pem: str, key_password: str | None, setting: str
) -> rsa.RSAPrivateKey | dsa.DSAPrivateKey | ec.EllipticCurvePrivateKey:
    """Kafka's PemStore.privateKey: exactly one PKCS#8 key, encrypted (EncryptedPrivateKeyInfo)
    when ssl.key.password is set and plain when it is not; RSA, DSA or EC."""
    entries = _pem_entries(pem, _PRIVATE_KEY_PEM, setting, "PRIVATE KEY")
    if len(entries) != 1:
        raise SslConfigError(setting, f"expected one private key, but found {len(entries)}")
    entry = entries[0]
    if "Proc-Type" in entry.headers:
        raise SslConfigError(
            setting,
            f"the key is in OpenSSL's traditional encrypted form, not PKCS#8: {_CONVERT_KEY}",
        )
    tags = _der_tags(entry.der)
    encrypted = tags[:2] == [0x30, 0x04]  # EncryptedPrivateKeyInfo: AlgorithmIdentifier, data
    if not encrypted and tags[:2] != [0x02, 0x30]:  # PrivateKeyInfo: version, AlgorithmIdentifier
        raise SslConfigError(
            setting,
            "the private key is not PKCS#8 (a PKCS#1 'RSA PRIVATE KEY' or SEC1 'EC PRIVATE KEY'?); "
            f"Kafka reads PKCS#8 keys only: {_CONVERT_KEY}",
        )
    if encrypted and key_password is None:
        raise SslConfigError(
            SSL_KEY_PASSWORD, f"the private key in {setting} is encrypted: set {SSL_KEY_PASSWORD}"
        )
    if not encrypted and key_password is not None:
        raise SslConfigError(
            SSL_KEY_PASSWORD,
            f"is set but the private key in {setting} is not encrypted (Kafka decrypts a PEM key "
            f"with {SSL_KEY_PASSWORD} and reads a plain one only without it)",
        )
    try:
        key = serialization.load_der_private_key(
            entry.der, key_password.encode() if key_password is not None else None
        )
    except ValueError:
        if encrypted:
            raise SslConfigError(
                SSL_KEY_PASSWORD, f"cannot decrypt the private key in {setting}: wrong password?"
            ) from None
        raise SslConfigError(setting, "the private key cannot be read") from None
    except TypeError as e:
        raise SslConfigError(setting, f"the private key cannot be read: {e}") from None
    if not isinstance(key, rsa.RSAPrivateKey | dsa.DSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise SslConfigError(
            setting, f"Kafka's PEM keystores take RSA, DSA or EC keys, not {type(key).__name__}"
        )
    return key


# ---------------------------------------------------------------------------------------------
# Keystores and truststores (DefaultSslEngineFactory.createKeystore / createTruststore)
# ---------------------------------------------------------------------------------------------

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.serialization import pkcs12

    _PrivateKey = pkcs12.PKCS12PrivateKeyTypes  # RSA, DSA, EC, Ed25519, Ed448


@dataclass(frozen=True)
class _KeyMaterial:
    chain: list[x509.Certificate]  # our certificate first
    key: _PrivateKey


def _read_file(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslConfigError(setting, f"cannot read {path!r}: {e.strerror or e}") from None


def _check_store_type(store_type: str, type_setting: str, path: str) -> None:
    upper = store_type.upper()
    if upper == PEM_TYPE and store_type != PEM_TYPE:
        # Kafka compares "PEM" case-sensitively and would then look for a Java "pem" KeyStore
        raise SslConfigError(type_setting, f"{store_type!r}: Kafka's PEM type is spelled PEM")
    if upper == "JCEKS":
        raise SslConfigError(type_setting, _java_format_message("JCEKS", path, type_setting))
    if upper not in ("PKCS12", "JKS", PEM_TYPE):
        raise SslConfigError(
            type_setting, f"unsupported type {store_type!r}: Odradek reads PKCS12 and PEM stores"
        )


def _java_format_message(kind: str, path: str, type_setting: str) -> str:
    target = os.path.splitext(path)[0] + ".p12"
    return (
        f"{path!r} is a {kind} keystore: {kind} is a Java format that Odradek cannot read. "
        f"Convert it to PKCS12 with 'keytool -importkeystore -srckeystore {path} "
        f"-destkeystore {target} -deststoretype PKCS12' and set {type_setting}=PKCS12"
    )


def _load_pkcs12(
    data: bytes,
    store_type: str,
    path: str,
    password: str | None,
    setting_names: tuple[str, str, str],
) -> tuple[_PrivateKey | None, list[x509.Certificate]]:
    """A PKCS12 file, also under the type JKS (Java's keystore.type.compat reads PKCS12 files
    whatever of the two types is set). Real JKS/JCEKS content gets the keytool advice."""
    type_setting, location_setting, password_setting = setting_names
    if data[:4] == b"\xfe\xed\xfe\xed":
        raise SslConfigError(location_setting, _java_format_message("JKS", path, type_setting))
    if data[:4] == b"\xce\xce\xce\xce":
        raise SslConfigError(location_setting, _java_format_message("JCEKS", path, type_setting))
    if data.lstrip()[:10] == b"-----BEGIN":
        raise SslConfigError(
            type_setting, f"{path!r} is a PEM file but the type is {store_type}: set it to PEM"
        )
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12

        store = pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
    except ValueError:
        if password is None:
            raise SslConfigError(
                password_setting,
                f"is not set and {path!r} cannot be read without a password (or is not PKCS12)",
            ) from None
        raise SslConfigError(
            password_setting, f"cannot open {path!r}: wrong password, or not a PKCS12 file"
        ) from None
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    return store.key, certs


def _ordered_chain(
    leaf: x509.Certificate, others: list[x509.Certificate]
) -> list[x509.Certificate]:
    """Leaf, then its issuers in order (PKCS12 keeps its extra certificates unordered)."""
    chain = [leaf]
    rest = [c for c in others if c != leaf]
    while rest:
        issuer = next((c for c in rest if c.subject == chain[-1].issuer), None)
        if issuer is None or chain[-1].issuer == chain[-1].subject:
            break
        chain.append(issuer)
        rest.remove(issuer)
    return chain + rest


def _load_keystore(settings: Mapping[str, str | None]) -> _KeyMaterial | None:
    store_type = _get(settings, SSL_KEYSTORE_TYPE)
    if store_type is None:
        store_type = DEFAULT_SSL_KEYSTORE_TYPE
    path = _get(settings, SSL_KEYSTORE_LOCATION)
    password = _get(settings, SSL_KEYSTORE_PASSWORD)
    key_password = _get(settings, SSL_KEY_PASSWORD)
    private_key = _get(settings, SSL_KEYSTORE_KEY)
    chain = _get(settings, SSL_KEYSTORE_CERTIFICATE_CHAIN)

    if private_key is not None:  # KIP-651 inline PEM
        if store_type != PEM_TYPE:
            raise SslConfigError(
                SSL_KEYSTORE_KEY,
                f"can be set only with {SSL_KEYSTORE_TYPE}=PEM, but the type is {store_type}",
            )
        if chain is None:
            raise SslConfigError(
                SSL_KEYSTORE_CERTIFICATE_CHAIN, f"must be set with {SSL_KEYSTORE_KEY}"
            )
        if path is not None:
            raise SslConfigError(
                SSL_KEYSTORE_LOCATION, f"must not be set together with {SSL_KEYSTORE_KEY}"
            )
        if password is not None:
            raise SslConfigError(
                SSL_KEYSTORE_PASSWORD,
                f"cannot be used with PEM; only {SSL_KEY_PASSWORD} (the key's password) can",
            )
        key = _pem_private_key(private_key, key_password, SSL_KEYSTORE_KEY)
        certs = _pem_certificates(chain, SSL_KEYSTORE_CERTIFICATE_CHAIN)
        return _KeyMaterial(certs, key)
    if chain is not None:
        raise SslConfigError(
            SSL_KEYSTORE_KEY, f"is not set, but {SSL_KEYSTORE_CERTIFICATE_CHAIN} is"
        )
    if path is not None:
        _check_store_type(store_type, SSL_KEYSTORE_TYPE, path)
    if store_type == PEM_TYPE and path is not None:
        if password is not None:
            raise SslConfigError(
                SSL_KEYSTORE_PASSWORD,
                f"cannot be used with PEM; only {SSL_KEY_PASSWORD} (the key's password) can",
            )
        text = _read_file(path, SSL_KEYSTORE_LOCATION).decode("utf-8", errors="replace")
        key = _pem_private_key(text, key_password, SSL_KEYSTORE_LOCATION)
        certs = _pem_certificates(text, SSL_KEYSTORE_LOCATION)
        return _KeyMaterial(certs, key)
    if path is None and password is not None:
        raise SslConfigError(SSL_KEYSTORE_LOCATION, f"is not set, but {SSL_KEYSTORE_PASSWORD} is")
    if path is not None and password is None:
        raise SslConfigError(
            SSL_KEYSTORE_PASSWORD, f"must be set with {SSL_KEYSTORE_LOCATION} ({path})"
        )
    if path is None:
        return None  # a client without a keystore (no mutual TLS)
    assert password is not None
    if key_password is not None and key_password != password:
        # Java decrypts the key entry with ssl.key.password; OpenSSL's PKCS12 (and keytool's
        # -importkeystore) protect everything with one password, so a different one is wrong
        # for a PKCS12 we can read.
        raise SslConfigError(
            SSL_KEY_PASSWORD,
            f"differs from {SSL_KEYSTORE_PASSWORD}: a PKCS12 keystore read here has one password "
            "for the store and its key",
        )
    data = _read_file(path, SSL_KEYSTORE_LOCATION)
    names = (SSL_KEYSTORE_TYPE, SSL_KEYSTORE_LOCATION, SSL_KEYSTORE_PASSWORD)
    pkey, certs = _load_pkcs12(data, store_type, path, password, names)
    if pkey is None or not certs:
        raise SslConfigError(
            SSL_KEYSTORE_LOCATION, f"{path!r} holds no private key with its certificate"
        )
    return _KeyMaterial(_ordered_chain(certs[0], certs[1:]), pkey)


def _load_truststore(settings: Mapping[str, str | None]) -> list[x509.Certificate] | None:
    store_type = _get(settings, SSL_TRUSTSTORE_TYPE)
    if store_type is None:
        store_type = DEFAULT_SSL_TRUSTSTORE_TYPE
    path = _get(settings, SSL_TRUSTSTORE_LOCATION)
    password = _get(settings, SSL_TRUSTSTORE_PASSWORD)
    inline = _get(settings, SSL_TRUSTSTORE_CERTIFICATES)

    if inline is not None:  # KIP-651 inline PEM
        if store_type != PEM_TYPE:
            raise SslConfigError(
                SSL_TRUSTSTORE_CERTIFICATES,
                f"can be set only with {SSL_TRUSTSTORE_TYPE}=PEM, but the type is {store_type}",
            )
        if path is not None:
            raise SslConfigError(
                SSL_TRUSTSTORE_LOCATION,
                f"must not be set together with {SSL_TRUSTSTORE_CERTIFICATES}",
            )
        if password is not None:
            raise SslConfigError(SSL_TRUSTSTORE_PASSWORD, "cannot be used with PEM")
        return _pem_certificates(inline, SSL_TRUSTSTORE_CERTIFICATES)
    if path is not None:
        _check_store_type(store_type, SSL_TRUSTSTORE_TYPE, path)
    if store_type == PEM_TYPE and path is not None:
        if password is not None:
            raise SslConfigError(SSL_TRUSTSTORE_PASSWORD, "cannot be used with PEM")
        text = _read_file(path, SSL_TRUSTSTORE_LOCATION).decode("utf-8", errors="replace")
        return _pem_certificates(text, SSL_TRUSTSTORE_LOCATION)
    if path is None and password is not None:
        raise SslConfigError(
            SSL_TRUSTSTORE_LOCATION, f"is not set, but {SSL_TRUSTSTORE_PASSWORD} is"
        )
    if path is None:
        return None
    data = _read_file(path, SSL_TRUSTSTORE_LOCATION)
    names = (SSL_TRUSTSTORE_TYPE, SSL_TRUSTSTORE_LOCATION, SSL_TRUSTSTORE_PASSWORD)
    # Java trusts the certificate entries and each key entry's certificate; so do we.
    _, certs = _load_pkcs12(data, store_type, path, password, names)
    if not certs:
        raise SslConfigError(SSL_TRUSTSTORE_LOCATION, f"{path!r} holds no certificate")
    return certs


# ---------------------------------------------------------------------------------------------
# Loading into OpenSSL
# ---------------------------------------------------------------------------------------------

_USE_MEMFD = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open holding ``data``, gone when the block ends."""
    if _USE_MEMFD:
        fd = os.memfd_create("odradek-ssl", os.MFD_CLOEXEC)
        try:
            with open(fd, "wb", closefd=False) as f:
                f.write(data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    directory = tempfile.mkdtemp(prefix="odradek-ssl-")  # mode 0700
    try:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with open(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _load_key_material(context: ssl.SSLContext, material: _KeyMaterial, setting: str) -> None:
    one_time = secrets.token_urlsafe(32).encode()
    data = material.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time),
    ) + b"".join(_pem(c) for c in material.chain)
    try:
        with _private_file(data) as path:
            context.load_cert_chain(path, password=one_time)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
            raise SslConfigError(
                setting, "the private key does not belong to the first certificate of the chain"
            ) from None
        raise SslConfigError(setting, f"OpenSSL refused the key and chain: {e}") from None


def _load_trust(
    context: ssl.SSLContext,
    trusted: list[x509.Certificate] | None,
    purpose: ssl.Purpose,
    setting: str,
) -> None:
    if trusted is None:
        # Java falls back to the JVM's default truststore (cacerts); ours is the system's.
        context.load_default_certs(purpose)
    else:
        pem = b"".join(_pem(c) for c in trusted).decode("ascii")
        try:
            context.load_verify_locations(cadata=pem)
        except ssl.SSLError as e:
            raise SslConfigError(setting, f"OpenSSL refused a certificate: {e}") from None
    # Java's PKIX trusts any truststore certificate as an anchor, a leaf or intermediate too;
    # OpenSSL wants a self-signed root unless told otherwise.
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN


# ---------------------------------------------------------------------------------------------
# Protocols and cipher suites
# ---------------------------------------------------------------------------------------------

_PROTOCOL_VERSIONS = {
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
}
# Known to Java but disabled there by jdk.tls.disabledAlgorithms (and by OpenSSL 3's security
# level), or a Java-only pseudo protocol: dropped with a warning.
_LEGACY_PROTOCOLS = ("TLSv1.1", "TLSv1", "SSLv3", "SSLv2Hello")
# ssl.protocol: Java SSLContext algorithm names (case-insensitive) -> the highest version a
# client of that context offers (None: no cap). Kafka documents that a client with
# ssl.protocol=TLSv1.2 does not use TLSv1.3 even when ssl.enabled.protocols lists it; a
# server is not capped (SslVersionsTransportLayerTest).
_SSL_CONTEXT_PROTOCOLS: dict[str, ssl.TLSVersion | None] = {
    "TLS": None,
    "SSL": None,
    "TLSV1.3": None,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1": ssl.TLSVersion.TLSv1,
    "SSLV3": ssl.TLSVersion.SSLv3,
}

# TLS 1.3 suites have the same names in Java and OpenSSL.
_TLS13_SUITES = (
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
)
# Java/IANA names of TLS 1.2 suites -> OpenSSL names (`openssl ciphers -stdname`, PSK and
# SRP suites left out: Java has none).
_IANA_TO_OPENSSL = {
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA": "DHE-DSS-AES128-SHA",
    "TLS_DHE_DSS_WITH_AES_128_CBC_SHA256": "DHE-DSS-AES128-SHA256",
    "TLS_DHE_DSS_WITH_AES_128_GCM_SHA256": "DHE-DSS-AES128-GCM-SHA256",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA": "DHE-DSS-AES256-SHA",
    "TLS_DHE_DSS_WITH_AES_256_CBC_SHA256": "DHE-DSS-AES256-SHA256",
    "TLS_DHE_DSS_WITH_AES_256_GCM_SHA384": "DHE-DSS-AES256-GCM-SHA384",
    "TLS_DHE_DSS_WITH_ARIA_128_GCM_SHA256": "DHE-DSS-ARIA128-GCM-SHA256",
    "TLS_DHE_DSS_WITH_ARIA_256_GCM_SHA384": "DHE-DSS-ARIA256-GCM-SHA384",
    "TLS_DHE_DSS_WITH_CAMELLIA_128_CBC_SHA": "DHE-DSS-CAMELLIA128-SHA",
    "TLS_DHE_DSS_WITH_CAMELLIA_128_CBC_SHA256": "DHE-DSS-CAMELLIA128-SHA256",
    "TLS_DHE_DSS_WITH_CAMELLIA_256_CBC_SHA": "DHE-DSS-CAMELLIA256-SHA",
    "TLS_DHE_DSS_WITH_CAMELLIA_256_CBC_SHA256": "DHE-DSS-CAMELLIA256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CCM": "DHE-RSA-AES128-CCM",
    "TLS_DHE_RSA_WITH_AES_128_CCM_8": "DHE-RSA-AES128-CCM8",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CCM": "DHE-RSA-AES256-CCM",
    "TLS_DHE_RSA_WITH_AES_256_CCM_8": "DHE-RSA-AES256-CCM8",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_ARIA_128_GCM_SHA256": "DHE-RSA-ARIA128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_ARIA_256_GCM_SHA384": "DHE-RSA-ARIA256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA": "DHE-RSA-CAMELLIA128-SHA",
    "TLS_DHE_RSA_WITH_CAMELLIA_128_CBC_SHA256": "DHE-RSA-CAMELLIA128-SHA256",
    "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA": "DHE-RSA-CAMELLIA256-SHA",
    "TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA256": "DHE-RSA-CAMELLIA256-SHA256",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_DH_anon_WITH_AES_128_CBC_SHA": "ADH-AES128-SHA",
    "TLS_DH_anon_WITH_AES_128_CBC_SHA256": "ADH-AES128-SHA256",
    "TLS_DH_anon_WITH_AES_128_GCM_SHA256": "ADH-AES128-GCM-SHA256",
    "TLS_DH_anon_WITH_AES_256_CBC_SHA": "ADH-AES256-SHA",
    "TLS_DH_anon_WITH_AES_256_CBC_SHA256": "ADH-AES256-SHA256",
    "TLS_DH_anon_WITH_AES_256_GCM_SHA384": "ADH-AES256-GCM-SHA384",
    "TLS_DH_anon_WITH_CAMELLIA_128_CBC_SHA": "ADH-CAMELLIA128-SHA",
    "TLS_DH_anon_WITH_CAMELLIA_128_CBC_SHA256": "ADH-CAMELLIA128-SHA256",
    "TLS_DH_anon_WITH_CAMELLIA_256_CBC_SHA": "ADH-CAMELLIA256-SHA",
    "TLS_DH_anon_WITH_CAMELLIA_256_CBC_SHA256": "ADH-CAMELLIA256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM": "ECDHE-ECDSA-AES128-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8": "ECDHE-ECDSA-AES128-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM": "ECDHE-ECDSA-AES256-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8": "ECDHE-ECDSA-AES256-CCM8",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_ARIA_128_GCM_SHA256": "ECDHE-ECDSA-ARIA128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_ARIA_256_GCM_SHA384": "ECDHE-ECDSA-ARIA256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CAMELLIA_128_CBC_SHA256": "ECDHE-ECDSA-CAMELLIA128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_CAMELLIA_256_CBC_SHA384": "ECDHE-ECDSA-CAMELLIA256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_NULL_SHA": "ECDHE-ECDSA-NULL-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_ARIA_128_GCM_SHA256": "ECDHE-ARIA128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_ARIA_256_GCM_SHA384": "ECDHE-ARIA256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CAMELLIA_128_CBC_SHA256": "ECDHE-RSA-CAMELLIA128-SHA256",
    "TLS_ECDHE_RSA_WITH_CAMELLIA_256_CBC_SHA384": "ECDHE-RSA-CAMELLIA256-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_NULL_SHA": "ECDHE-RSA-NULL-SHA",
    "TLS_ECDH_anon_WITH_AES_128_CBC_SHA": "AECDH-AES128-SHA",
    "TLS_ECDH_anon_WITH_AES_256_CBC_SHA": "AECDH-AES256-SHA",
    "TLS_ECDH_anon_WITH_NULL_SHA": "AECDH-NULL-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_CCM": "AES128-CCM",
    "TLS_RSA_WITH_AES_128_CCM_8": "AES128-CCM8",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_256_CCM": "AES256-CCM",
    "TLS_RSA_WITH_AES_256_CCM_8": "AES256-CCM8",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_ARIA_128_GCM_SHA256": "ARIA128-GCM-SHA256",
    "TLS_RSA_WITH_ARIA_256_GCM_SHA384": "ARIA256-GCM-SHA384",
    "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA": "CAMELLIA128-SHA",
    "TLS_RSA_WITH_CAMELLIA_128_CBC_SHA256": "CAMELLIA128-SHA256",
    "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA": "CAMELLIA256-SHA",
    "TLS_RSA_WITH_CAMELLIA_256_CBC_SHA256": "CAMELLIA256-SHA256",
    "TLS_RSA_WITH_NULL_MD5": "NULL-MD5",
    "TLS_RSA_WITH_NULL_SHA": "NULL-SHA",
    "TLS_RSA_WITH_NULL_SHA256": "NULL-SHA256",
}
_IANA_NAME = re.compile(r"(?:TLS|SSL)_[A-Za-z0-9_]+")


@dataclass(frozen=True)
class _Versions:
    minimum: ssl.TLSVersion
    maximum: ssl.TLSVersion


def _enabled_versions(settings: Mapping[str, str | None], client: bool) -> _Versions:
    protocol = _get(settings, SSL_PROTOCOL)
    if protocol is None:
        protocol = DEFAULT_SSL_PROTOCOL
    if protocol.upper() not in _SSL_CONTEXT_PROTOCOLS:
        raise SslConfigError(
            SSL_PROTOCOL,
            f"unknown protocol {protocol!r}: use TLSv1.3 (the default), TLSv1.2 or TLS",
        )
    names = _list(settings, SSL_ENABLED_PROTOCOLS, DEFAULT_SSL_ENABLED_PROTOCOLS)
    if not names:  # an empty list: the SSLContext's defaults, which are Kafka's
        names = DEFAULT_SSL_ENABLED_PROTOCOLS.split(",")
    enabled = []
    for name in names:
        if name in _PROTOCOL_VERSIONS:
            enabled.append(_PROTOCOL_VERSIONS[name])
        elif name in _LEGACY_PROTOCOLS:
            log.warning(
                "%s: %s is disabled (as in Java's jdk.tls.disabledAlgorithms) and ignored",
                SSL_ENABLED_PROTOCOLS,
                name,
            )
        else:
            raise SslConfigError(
                SSL_ENABLED_PROTOCOLS,
                f"unknown protocol {name!r}: the names are TLSv1.2 and TLSv1.3 (case-sensitive)",
            )
    if not enabled:
        raise SslConfigError(
            SSL_ENABLED_PROTOCOLS,
            f"{','.join(names)} leaves no usable protocol: enable TLSv1.2 or TLSv1.3",
        )
    cap = _SSL_CONTEXT_PROTOCOLS[protocol.upper()]
    if client and cap is not None:
        enabled = [v for v in enabled if v <= cap]
        if not enabled:
            raise SslConfigError(
                SSL_PROTOCOL,
                f"{protocol} lets a client use none of {SSL_ENABLED_PROTOCOLS}={','.join(names)}",
            )
    return _Versions(min(enabled), max(enabled))


def _apply_protocols_and_suites(
    context: ssl.SSLContext, settings: Mapping[str, str | None], client: bool
) -> None:
    versions = _enabled_versions(settings, client)
    minimum, maximum = versions.minimum, versions.maximum
    suites = _list(settings, SSL_CIPHER_SUITES, None)
    if suites:
        tls13, tls12 = _split_suites(suites)
        if not tls12:
            # Only TLS 1.3 suites: Java has nothing to negotiate TLS 1.2 with.
            minimum = max(minimum, ssl.TLSVersion.TLSv1_3)
        elif not tls13:
            # Only TLS 1.2 suites: Java can't negotiate TLS 1.3 (none of its suites is enabled).
            maximum = min(maximum, ssl.TLSVersion.TLSv1_2)
        if minimum > maximum:
            raise SslConfigError(
                SSL_CIPHER_SUITES,
                f"{','.join(suites)} has no suite for the enabled protocols "
                f"({_version_name(versions.minimum)}..{_version_name(versions.maximum)})",
            )
        if tls12:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise SslConfigError(
                    SSL_CIPHER_SUITES, f"none of {','.join(suites)} is available in this OpenSSL"
                ) from None
            enabled = {c["name"] for c in context.get_ciphers()}
            missing = [s for s in tls12 if s in _openssl_cipher_names() and s not in enabled]
            if missing:
                log.warning("%s: not available in OpenSSL, ignored: %s", SSL_CIPHER_SUITES, missing)
        if tls13 and maximum >= ssl.TLSVersion.TLSv1_3:
            openssl_tls13 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"}
            if not openssl_tls13 <= set(tls13):
                log.warning(
                    "%s: Python's ssl cannot restrict TLS 1.3 cipher suites; OpenSSL's %s stay "
                    "enabled for TLS 1.3",
                    SSL_CIPHER_SUITES,
                    sorted(openssl_tls13),
                )
    context.minimum_version = minimum
    context.maximum_version = maximum


@functools.cache
def _openssl_cipher_names() -> frozenset[str]:
    """Every cipher name this OpenSSL knows (an entry of ssl.cipher.suites may also be an
    OpenSSL cipher string such as HIGH)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    return frozenset(c["name"] for c in probe.get_ciphers())


def _version_name(version: ssl.TLSVersion) -> str:
    return {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}.get(
        version, version.name
    )


def _split_suites(suites: list[str]) -> tuple[list[str], list[str]]:
    """(TLS 1.3 suites, OpenSSL names of the TLS 1.2 ones) from Java/IANA or OpenSSL names."""
    tls13: list[str] = []
    tls12: list[str] = []
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for suite in suites:
        if suite in _TLS13_SUITES:
            tls13.append(suite)
        elif suite == "TLS_EMPTY_RENEGOTIATION_INFO_SCSV":
            continue  # a Java signalling value; OpenSSL always sends the extension
        elif _IANA_NAME.fullmatch(suite):
            name = _IANA_TO_OPENSSL.get("TLS_" + suite[4:] if suite.startswith("SSL_") else suite)
            if name is None:
                # Java knows suites OpenSSL 3 dropped (3DES, RC4, DES, export, Kerberos...)
                log.warning("%s: %s is not available in OpenSSL, ignored", SSL_CIPHER_SUITES, suite)
            else:
                tls12.append(name)
        else:
            try:
                probe.set_ciphers(suite)
            except ssl.SSLError:
                raise SslConfigError(
                    SSL_CIPHER_SUITES,
                    f"unknown cipher suite {suite!r}: use Java/IANA names such as "
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (or OpenSSL names)",
                ) from None
            tls12.append(suite)
    if not tls13 and not tls12:
        raise SslConfigError(SSL_CIPHER_SUITES, f"none of {','.join(suites)} is available")
    return tls13, tls12


# ---------------------------------------------------------------------------------------------
# The contexts
# ---------------------------------------------------------------------------------------------

_CLIENT_AUTH_MODES = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


def server_ssl_context(settings: Mapping[str, str | None]) -> ssl.SSLContext:
    """The context of a listener: its keystore (required), its truststore (or the system's CAs)
    to verify clients, ssl.client.auth (required -> CERT_REQUIRED, requested -> CERT_OPTIONAL,
    none -> CERT_NONE), ssl.enabled.protocols and ssl.cipher.suites. Raises SslConfigError.

    The client's certificate, when it sent one, is ``ssl_object.getpeercert(binary_form=True)``
    (see odradek.security.ssl_principal for its principal)."""
    _check_engine_factory(settings)
    client_auth = _get(settings, SSL_CLIENT_AUTH)
    if client_auth is None:
        client_auth = DEFAULT_SSL_CLIENT_AUTH
    if client_auth not in _CLIENT_AUTH_MODES:  # KafkaConfig's ValidString: case-sensitive
        raise SslConfigError(
            SSL_CLIENT_AUTH, f"{client_auth!r}: String must be one of: required, requested, none"
        )
    keystore = _load_keystore(settings)
    truststore = _load_truststore(settings)
    if keystore is None:
        raise SslConfigError(
            SSL_KEYSTORE_LOCATION,
            f"a TLS listener needs a keystore: set {SSL_KEYSTORE_LOCATION} (with "
            f"{SSL_KEYSTORE_TYPE} and {SSL_KEYSTORE_PASSWORD}), or {SSL_KEYSTORE_KEY} and "
            f"{SSL_KEYSTORE_CERTIFICATE_CHAIN}",
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols_and_suites(context, settings, client=False)
    _load_key_material(context, keystore, _keystore_setting(settings))
    context.verify_mode = _CLIENT_AUTH_MODES[client_auth]
    if context.verify_mode != ssl.CERT_NONE or truststore is not None:
        _load_trust(context, truststore, ssl.Purpose.CLIENT_AUTH, _truststore_setting(settings))
    return context


def client_ssl_context(settings: Mapping[str, str | None]) -> ssl.SSLContext:
    """The context of a connection to a broker (inter-broker, or our CLI): the truststore (or
    the system's CAs, as Java uses its default truststore), an optional keystore for mutual
    TLS, and hostname verification per ssl.endpoint.identification.algorithm ("https" by
    default; "" turns it off). With it on, pass ``server_hostname=<the host connected to>``
    when wrapping: a name is checked against the DNS SANs (the CN without any), an IP address
    against the IP SANs, as Java does. Raises SslConfigError."""
    _check_engine_factory(settings)
    algorithm = _get(settings, SSL_ENDPOINT_IDENTIFICATION_ALGORITHM)
    if algorithm is None:
        algorithm = DEFAULT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM
    if algorithm and algorithm.upper() not in ("HTTPS", "LDAP", "LDAPS"):
        raise SslConfigError(
            SSL_ENDPOINT_IDENTIFICATION_ALGORITHM,
            f"unknown algorithm {algorithm!r}: https (the default) checks the server's host "
            "name, an empty value turns the check off",
        )
    keystore = _load_keystore(settings)
    truststore = _load_truststore(settings)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols_and_suites(context, settings, client=True)
    if keystore is not None:
        _load_key_material(context, keystore, _keystore_setting(settings))
    _load_trust(context, truststore, ssl.Purpose.SERVER_AUTH, _truststore_setting(settings))
    context.check_hostname = bool(algorithm)
    context.verify_mode = ssl.CERT_REQUIRED  # Java always verifies the server's chain
    return context


def keystore_certificate(settings: Mapping[str, str | None]) -> x509.Certificate | None:
    """The keystore's own certificate (the first of its chain), None without a keystore.
    Raises SslConfigError."""
    keystore = _load_keystore(settings)
    return None if keystore is None else keystore.chain[0]


def reload_client_context(context: ssl.SSLContext, settings: Mapping[str, str | None]) -> None:
    """Loads a client context's keystore and truststore again, in place, for connections
    made from now on (KIP-226: the inter-broker client's side of a listener's reload). A
    new key and chain replace the old ones; new trusted certificates are added, but OpenSSL
    cannot forget one: a certificate taken out of the truststore stays trusted by this
    context until the process restarts. Raises SslConfigError, the context unchanged."""
    keystore = _load_keystore(settings)
    truststore = _load_truststore(settings)
    if keystore is not None:
        _load_key_material(context, keystore, _keystore_setting(settings))
    _load_trust(context, truststore, ssl.Purpose.SERVER_AUTH, _truststore_setting(settings))


def _keystore_setting(settings: Mapping[str, str | None]) -> str:
    if _get(settings, SSL_KEYSTORE_KEY) is not None:
        return SSL_KEYSTORE_CERTIFICATE_CHAIN
    return SSL_KEYSTORE_LOCATION


def _truststore_setting(settings: Mapping[str, str | None]) -> str:
    if _get(settings, SSL_TRUSTSTORE_CERTIFICATES) is not None:
        return SSL_TRUSTSTORE_CERTIFICATES
    return SSL_TRUSTSTORE_LOCATION


def ssl_settings_fingerprint(settings: Mapping[str, str | None]) -> str:
    """A digest that changes when any ssl.* value changes or the keystore/truststore file at
    its location is changed (content, size, mtime or inode): for KIP-226 dynamic reload, build
    new contexts when it differs from the one taken with the current contexts (Kafka's
    SslFactory.shouldBeRebuilt compares the configs and the files' modification times).
    Values are hashed, so the digest holds no password. A missing file hashes as missing."""
    digest = hashlib.sha256()
    for name in sorted(k for k in settings if k.startswith("ssl.")):
        value = settings[name]
        digest.update(f"{name}\0{'' if value is None else value}\0".encode())
    for name in (SSL_KEYSTORE_LOCATION, SSL_TRUSTSTORE_LOCATION):
        path = _get(settings, name)
        if not path:
            continue
        try:
            st = os.stat(path)
            with open(path, "rb") as f:
                content = hashlib.sha256(f.read()).hexdigest()
            digest.update(f"{name}\0{st.st_mtime_ns}:{st.st_size}:{st.st_ino}:{content}\0".encode())
        except OSError:
            digest.update(f"{name}\0missing\0".encode())
    return digest.hexdigest()
