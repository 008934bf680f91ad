"""One request to one broker over the CLI's own socket, for what librdkafka cannot send.

librdkafka has no DescribeLogDirs, no DescribeClientQuotas or AlterClientQuotas, and it
refuses a broker config resource with an empty name, which is how Kafka names the
cluster-wide dynamic broker default. For those the CLI encodes the request itself with
Odradek's protocol codec (odradek.protocol) and sends it here: a blocking socket, an
ApiVersions handshake (KIP-511, answered in v0 by a broker that does not know our version)
so that the request goes out in the highest version both sides know, then the request and
its response. The broker's own InterBrokerClient is asyncio and pipelined, more than a
command that asks one question needs.

Security comes from the same client settings as every other command (`--command-config`,
`-X`): `broker_security()` reads librdkafka's names (security.protocol, ssl.ca.location,
ssl.certificate.location, ssl.key.location, ssl.key.password, sasl.mechanism,
sasl.username, sasl.password...) and the Java client's (ssl.truststore.*, ssl.keystore.*,
sasl.jaas.config), and gives what the broker's own inter-broker connections use: a TLS
context from odradek.security.ssl_factory and a SASL mechanism driven by the sans-I/O
clients of odradek.security.sasl.client (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512). The order
is Kafka's SaslClientAuthenticator's: TLS handshake, ApiVersions, SaslHandshake v1, then
SaslAuthenticate rounds until the mechanism's client is done (SCRAM checks the broker's
signature). OAUTHBEARER and GSSAPI are refused: they need a token source or Kerberos.

Every failure is a WireError (a CliError) that names the address, and the whole exchange,
connecting, TLS and SASL included, is bounded by one timeout.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import odradek
from odradek.broker.inter_broker_client import (
    MAX_SASL_ROUNDS,
    SASL_HANDSHAKE_VERSION,
    choose_version,
)
from odradek.cli.client import EXIT_USAGE, CliError
from odradek.protocol.api import API_VERSIONS
from odradek.protocol.api_keys import API_SPECS, ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError, UnsupportedVersionError
from odradek.protocol.framing import FrameDecoder, decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse
from odradek.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from odradek.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from odradek.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from odradek.security.sasl import (
    GSSAPI,
    OAUTHBEARER,
    PLAIN,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
)
from odradek.security.sasl.client import create_sasl_client

if TYPE_CHECKING:  # imported where used: it loads the TLS code, which PLAINTEXT never needs
    from odradek.broker.inter_broker_security import InterBrokerSecurity

CLIENT_ID = "odradek-cli"
CLIENT_SOFTWARE_NAME = "odradek-cli"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WIRE_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)

M = TypeVar("M", bound=Message)


class WireError(CliError):
    """A request that could not be sent or answered; the message names the broker."""


# ---- client settings -> TLS and SASL ------------------------------------------------------

def broker_security(config: Mapping[str, Any]) -> InterBrokerSecurity | None:
    """The TLS and SASL the client settings ask for (None for PLAINTEXT), in the shape the
    broker's inter-broker connections use. Raises CliError (a usage error) naming the
    setting that cannot be used, before anything is sent."""
    raw = config.get("security.protocol")
    protocol = str(raw or "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise CliError(f"security.protocol={raw} is not one of "
                       f"{', '.join(SECURITY_PROTOCOLS)}", EXIT_USAGE)
    if protocol == "PLAINTEXT":
        return None
    # Imported here: TLS needs cryptography, which the PLAINTEXT commands need not load.
    from odradek.broker.inter_broker_security import InterBrokerSecurity

    context, check_hostname = None, True
    if protocol in ("SSL", "SASL_SSL"):
        context, check_hostname = _tls(config)
    mechanism = username = password = None
    if protocol.startswith("SASL_"):
        mechanism, username, password = _sasl(config)
    try:
        return InterBrokerSecurity(context, check_hostname, mechanism, username, password)
    except ValueError as e:
        raise CliError(f"invalid client configuration: {e}", EXIT_USAGE) from e


def _setting(config: Mapping[str, Any], *names: str) -> tuple[str, str] | None:
    """(name, value) of the first of `names` that is set to something."""
    for name in names:
        value = config.get(name)
        if value is not None and str(value).strip():
            return name, str(value).strip()
    return None


def _sasl(config: Mapping[str, Any]) -> tuple[str, str, str]:
    found = _setting(config, "sasl.mechanism", "sasl.mechanisms")
    mechanism = found[1].upper() if found else GSSAPI  # librdkafka's default, as Java's
    if mechanism not in WIRE_MECHANISMS:
        why = {GSSAPI: " (Kerberos" + ("" if found else ", the default when "
                                       "sasl.mechanism is not set") + ")",
               OAUTHBEARER: " (it would need a token source)"}.get(mechanism, "")
        raise CliError(f"SASL mechanism {mechanism}{why} is not supported for the requests "
                       f"the CLI sends itself: use {', '.join(WIRE_MECHANISMS)}", EXIT_USAGE)
    username, password = config.get("sasl.username"), config.get("sasl.password")
    jaas = _setting(config, "sasl.jaas.config")
    if (username is None or password is None) and jaas is not None:
        # The Java client's form: the login module's username and password options.
        from odradek.security.jaas import parse_jaas_config

        try:
            options = parse_jaas_config(jaas[1]).options
        except ValueError as e:
            raise CliError(f"invalid sasl.jaas.config: {e}", EXIT_USAGE) from e
        username = options.get("username") if username is None else username
        password = options.get("password") if password is None else password
    if not username or password is None or password == "":
        raise CliError(f"SASL/{mechanism} needs sasl.username and sasl.password "
                       "(or a sasl.jaas.config with username and password)", EXIT_USAGE)
    return mechanism, str(username), str(password)


def _tls(config: Mapping[str, Any]) -> tuple[ssl.SSLContext, bool]:
    from odradek.security.ssl_factory import SslConfigError, client_ssl_context

    if str(config.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        raise CliError("enable.ssl.certificate.verification=false is not supported for the "
                       "requests the CLI sends itself: give the broker's CA with "
                       "ssl.ca.location", EXIT_USAGE)
    settings, origin = _ssl_settings(config)
    try:
        context = client_ssl_context(settings)
    except SslConfigError as e:
        # Name the setting the user wrote, not the Java one it was turned into.
        message = str(e).replace(f"Invalid {e.setting}:", f"Invalid "
                                 f"{origin.get(e.setting, e.setting)}:", 1)
        raise CliError(f"invalid client configuration: {message}", EXIT_USAGE) from e
    return context, context.check_hostname


# librdkafka's own TLS settings, which the Java-named ones below stand for.
_LIBRDKAFKA_SSL = ("ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
                   "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem")


def _ssl_settings(config: Mapping[str, Any]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The Java ssl.* settings client_ssl_context takes, from librdkafka's or Java's names,
    and for each Java name made here the librdkafka name it came from."""
    settings: dict[str, str | None] = {
        k: None if v is None else str(v) for k, v in config.items()
        if k.startswith("ssl.") and k not in _LIBRDKAFKA_SSL}
    origin: dict[str, str] = {}
    algorithm = settings.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.strip().lower() == "none":
        settings["ssl.endpoint.identification.algorithm"] = ""  # librdkafka's "none"

    # Java's store types default to JKS; a PEM file named without its type is read as PEM.
    for store in ("truststore", "keystore"):
        location = settings.get(f"ssl.{store}.location")
        if location and settings.get(f"ssl.{store}.type") is None and _is_pem(location):
            settings[f"ssl.{store}.type"] = "PEM"

    ca = _setting(config, "ssl.ca.location", "ssl.ca.pem")
    if ca is not None:
        if _setting(config, "ssl.truststore.location", "ssl.truststore.certificates"):
            raise CliError(f"{ca[0]} and ssl.truststore.* both name the CA: give one",
                           EXIT_USAGE)
        if ca[0] == "ssl.ca.pem":
            settings.update({"ssl.truststore.type": "PEM",
                             "ssl.truststore.certificates": ca[1]})
            origin["ssl.truststore.certificates"] = ca[0]
        elif ca[1] != "probe":  # "probe": the system's CAs, client_ssl_context's default
            settings.update({"ssl.truststore.type": "PEM",
                             "ssl.truststore.certificates": _ca_pem(ca[1])})
            origin["ssl.truststore.certificates"] = ca[0]

    certificate = _setting(config, "ssl.certificate.location", "ssl.certificate.pem")
    key = _setting(config, "ssl.key.location", "ssl.key.pem")
    if (certificate is None) != (key is None):
        have, need = (("ssl.certificate.location", "ssl.key.location") if key is None
                      else ("ssl.key.location", "ssl.certificate.location"))
        raise CliError(f"{have} needs {need} too (a client certificate and its key)",
                       EXIT_USAGE)
    if certificate is not None and key is not None:
        if _setting(config, "ssl.keystore.location", "ssl.keystore.key"):
            raise CliError(f"{certificate[0]} and ssl.keystore.* both name the client "
                           "certificate: give one", EXIT_USAGE)
        password = settings.get("ssl.key.password")
        settings.update({
            "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": _read_pem(*certificate),
            "ssl.keystore.key": _pkcs8(_read_pem(*key), password, key[0])})
        origin.update({"ssl.keystore.certificate.chain": certificate[0],
                       "ssl.keystore.key": key[0]})
    return settings, origin


def _read_pem(setting: str, value: str) -> str:
    """The PEM text of a *.location setting (a path) or of a *.pem one (the text)."""
    if setting.endswith(".pem"):
        return value
    try:
        return Path(value).read_text(encoding="ascii", errors="replace")
    except OSError as e:
        raise CliError(f"invalid client configuration: {setting}: cannot read {value}: "
                       f"{e.strerror or e}", EXIT_USAGE) from e


def _ca_pem(location: str) -> str:
    """ssl.ca.location's certificates: a PEM file, or a directory of them (librdkafka
    takes both)."""
    if not os.path.isdir(location):
        return _read_pem("ssl.ca.location", location)
    texts = [p.read_text(encoding="ascii", errors="replace")
             for p in sorted(Path(location).iterdir()) if p.is_file()]
    pem = "".join(t for t in texts if "-----BEGIN CERTIFICATE-----" in t)
    if not pem:
        raise CliError(f"invalid client configuration: ssl.ca.location: no PEM "
                       f"certificate in the directory {location}", EXIT_USAGE)
    return pem


def _is_pem(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip().startswith(b"-----BEGIN")
    except OSError:
        return False  # client_ssl_context says it cannot read it


def _pkcs8(pem: str, password: str | None, setting: str) -> str:
    """The key as PKCS#8, the only form Kafka's PEM keystores take: librdkafka (OpenSSL)
    also reads PKCS#1 and SEC1 keys, so a client's key may well be one."""
    if "-----BEGIN PRIVATE KEY-----" in pem or "-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem:
        return pem
    from cryptography.hazmat.primitives import serialization

    secret = password.encode() if password else None
    try:
        key = serialization.load_pem_private_key(pem.encode("ascii", "replace"), secret)
    except (ValueError, TypeError) as e:
        raise CliError(f"invalid client configuration: {setting}: cannot read the private "
                       f"key: {e}", EXIT_USAGE) from e
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(secret) if secret
        else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption).decode("ascii")


# ---- the connection -------------------------------------------------------------------------

class BrokerSocket:
    """A blocking connection to one broker, every operation within one deadline; over TLS
    and/or authenticated with SASL when `security` says so (see broker_security)."""

    def __init__(self, host: str, port: int, *, timeout: float, node_id: int | None = None,
                 client_id: str = CLIENT_ID,
                 security: InterBrokerSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.client_id = client_id
        self.security = security
        self.name = (f"{host}:{port}" if node_id is None
                     else f"broker {node_id} at {host}:{port}")
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._deadline = time.monotonic() + timeout
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._correlation_id = 0

    def __enter__(self) -> BrokerSocket:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _remaining(self, doing: str) -> float:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise WireError(f"{self.name}: no answer within {self.timeout:g}s ({doing})")
        return remaining

    def connect(self) -> None:
        """Opens the connection (TLS included), learns the broker's API versions and
        authenticates (SASL)."""
        try:
            sock = socket.create_connection((self.host, self.port),
                                            timeout=self._remaining("connecting"))
        except TimeoutError:
            raise WireError(f"{self.name}: cannot connect within {self.timeout:g}s") from None
        except OSError as e:
            raise WireError(f"{self.name}: cannot connect: {e.strerror or e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.security is not None and self.security.ssl_context is not None:
                sock = self._tls_handshake(sock, self.security.ssl_context)
            self._sock = sock
            self._exchange_api_versions()
            if self.security is not None and self.security.sasl_mechanism is not None:
                self._authenticate(self.security)
        except BaseException:
            sock.close()
            self._sock = None
            raise

    def _tls_handshake(self, sock: socket.socket, context: ssl.SSLContext) -> ssl.SSLSocket:
        sock.settimeout(self._remaining("TLS handshake"))
        try:
            # server_hostname always (SNI, as Java sends it); the context's check_hostname
            # (ssl.endpoint.identification.algorithm) decides whether it is checked.
            return context.wrap_socket(sock, server_hostname=self.host)
        except TimeoutError:
            raise WireError(f"{self.name}: no TLS handshake within {self.timeout:g}s") from None
        except ssl.SSLCertVerificationError as e:
            raise WireError(f"{self.name}: TLS handshake failed: the broker's certificate "
                            f"is not trusted: {e.verify_message} (see ssl.ca.location and "
                            "ssl.endpoint.identification.algorithm)") from e
        except (ssl.SSLError, OSError) as e:
            reason = getattr(e, "reason", None) or e.strerror or str(e) or type(e).__name__
            raise WireError(f"{self.name}: TLS handshake failed: {reason} (is it a TLS "
                            "listener?)") from e

    def _exchange_api_versions(self) -> None:
        request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                     client_software_version=odradek.__version__)
        version = API_SPECS[API_VERSIONS].max_version
        response = cast(ApiVersionsResponse, self._exchange(request, version))
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # KIP-511: the broker answered in v0 with its ranges; ask again in a version
            # both know (below v3 without the software name and version).
            peer = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            version = self._version(API_VERSIONS, peer, None)
            retry = request if version >= 3 else ApiVersionsRequest()
            response = cast(ApiVersionsResponse, self._exchange(retry, version))
        if response.error_code != ErrorCode.NONE:
            raise WireError(f"{self.name} refused ApiVersions v{version}: "
                            f"{error_name(response.error_code)}")
        self.api_versions = {k.api_key: (k.min_version, k.max_version)
                             for k in response.api_keys}

    def _authenticate(self, security: InterBrokerSecurity) -> None:
        """SaslHandshake v1 then SaslAuthenticate rounds (KIP-152), the mechanism's client
        (odradek.security.sasl.client) making each token."""
        mechanism = security.sasl_mechanism
        assert mechanism is not None and security.username is not None
        assert security.password is not None
        if self.api_versions.get(ApiKey.SASL_HANDSHAKE, (0, -1))[1] < SASL_HANDSHAKE_VERSION:
            raise WireError(f"{self.name} does not support SaslHandshake v1: it cannot "
                            "authenticate a client (is it a SASL listener?)")
        version = self._version(ApiKey.SASL_AUTHENTICATE, self.api_versions, 2)
        handshake = cast(SaslHandshakeResponse, self._exchange(
            SaslHandshakeRequest(mechanism=mechanism), SASL_HANDSHAKE_VERSION))
        if handshake.error_code != ErrorCode.NONE:
            enabled = ", ".join(handshake.mechanisms) or "none (is it a SASL listener?)"
            raise WireError(f"{self.name} refused SASL mechanism {mechanism} "
                            f"({error_name(handshake.error_code)}): the mechanisms it "
                            f"enables are {enabled}")
        failed = f"{self.name}: authentication with SASL/{mechanism} failed"
        try:
            client = create_sasl_client(mechanism, security.username, security.password)
            token: bytes | None = client.initial_response()
            for _ in range(MAX_SASL_ROUNDS):
                assert token is not None
                response = cast(SaslAuthenticateResponse, self._exchange(
                    SaslAuthenticateRequest(auth_bytes=token), version))
                if response.error_code != ErrorCode.NONE:
                    detail = f": {response.error_message}" if response.error_message else ""
                    raise WireError(f"{failed}: {error_name(response.error_code)}{detail}")
                token = client.evaluate_challenge(bytes(response.auth_bytes))
                if token is None:
                    return
        except SaslAuthenticationError as e:  # our client's verdict on the broker
            raise WireError(f"{failed}: {e}") from e
        except ValueError as e:  # credentials the mechanism cannot carry
            raise WireError(f"{failed}: {e}") from e
        raise WireError(f"{failed}: not complete after {MAX_SASL_ROUNDS} rounds")

    def send(self, request: M, max_version: int | None = None) -> Message:
        """Sends a request in the highest version both sides know (at most max_version)
        and returns the decoded response body."""
        if self._sock is None:
            self.connect()
        api_key: int = request.API_KEY  # type: ignore[attr-defined]
        return self._exchange(request, self._version(api_key, self.api_versions, max_version))

    def _version(self, api_key: int, peer: Mapping[int, tuple[int, int]],
                 max_version: int | None) -> int:
        try:
            return choose_version(api_key, peer, max_version)
        except UnsupportedVersionError as e:
            raise WireError(f"{self.name}: {e}") from e

    def _exchange(self, request: Message, version: int) -> Message:
        assert self._sock is not None
        api_key: int = request.API_KEY  # type: ignore[attr-defined]
        api = API_SPECS[api_key].name
        self._correlation_id += 1
        frame = encode_request(request, version, self._correlation_id, self.client_id)
        try:
            self._sock.settimeout(self._remaining(f"sending {api}"))
            self._sock.sendall(frame)
            response = self._read_frame(api)
            correlation_id, body = decode_response(response, api_key, version)
        except TimeoutError:
            raise WireError(f"{self.name}: no answer to {api} within "
                            f"{self.timeout:g}s") from None
        except OSError as e:
            raise WireError(f"{self.name}: {api} failed: {e.strerror or e}"
                            f"{self._hint()}") from e
        except ProtocolError as e:
            raise WireError(f"{self.name}: cannot decode its {api} response: {e}") from e
        if correlation_id != self._correlation_id:
            raise WireError(f"{self.name}: {api} answered with correlation id "
                            f"{correlation_id}, not {self._correlation_id}")
        return body

    def _read_frame(self, api: str) -> bytearray:
        assert self._sock is not None
        while (frame := self._decoder.next_frame()) is None:
            self._sock.settimeout(self._remaining(f"waiting for {api}"))
            data = self._sock.recv(65536)
            if not data:
                raise WireError(f"{self.name} closed the connection before answering "
                                f"{api}{self._hint()}")
            self._decoder.feed(data)
        return frame

    def _hint(self) -> str:
        """Why a broker may hang up: a listener that wants more than we do. A TLS one hangs
        up on our first bytes, a SASL one on the first request after ApiVersions."""
        tls = self.security is not None and self.security.ssl_context is not None
        sasl = self.security is not None and self.security.sasl_mechanism is not None
        if not self.api_versions:
            return "" if tls else " (is it a TLS listener? see security.protocol)"
        return "" if sasl else " (does the listener want SASL? see security.protocol)"


def send_request(host: str, port: int, request: M, *, timeout: float,
                 node_id: int | None = None, max_version: int | None = None,
                 security: InterBrokerSecurity | None = None) -> Message:
    """Sends one request to the broker at host:port and returns its decoded response.

    Connecting, TLS, the ApiVersions handshake, SASL and the answer all fit in `timeout`
    seconds. Raises WireError, naming the address, when any of it fails.
    """
    with BrokerSocket(host, port, timeout=timeout, node_id=node_id,
                      security=security) as broker:
        return broker.send(request, max_version)


def bootstrap_addresses(config: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(host, port) of each of the settings' bootstrap.servers; CliError for one that is
    not HOST:PORT."""
    out = []
    for item in str(config.get("bootstrap.servers") or "").split(","):
        if not item.strip():
            continue
        address = item.strip().rpartition("://")[2]
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise CliError(f"bootstrap server {item.strip()!r} is not HOST:PORT", EXIT_USAGE)
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise CliError("no bootstrap server: give --bootstrap-server", EXIT_USAGE)
    return out


def error_name(code: int) -> str:
    """Kafka's name for an error code (the number itself for one we do not know)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
