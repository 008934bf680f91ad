"""One request to one broker over a plain socket, for what librdkafka cannot send.

librdkafka has no DescribeLogDirs, and it refuses a broker config resource with an empty
name, which is how Kafka names the cluster-wide dynamic broker default. For those the CLI
encodes the request itself with Odradek's protocol codec (odradek.protocol) and sends it
here: a blocking socket, an ApiVersions handshake (KIP-511, answered in v0 by a broker that
does not know our version) so that the request goes out in the highest version both sides
know, then the request and its response. The broker's own InterBrokerClient is asyncio and
pipelined, more than a command that asks one question needs.

Every failure is a WireError (a CliError) that names the address, and the whole exchange,
connecting included, is bounded by one timeout. Only PLAINTEXT: a cluster that wants TLS
or SASL is refused before anything is sent (`require_plaintext`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any, TypeVar, cast

import odradek
from odradek.broker.inter_broker_client import choose_version
from odradek.cli.client import CliError
from odradek.protocol.api import API_VERSIONS
from odradek.protocol.api_keys import API_SPECS
from odradek.protocol.errors import ErrorCode
from odradek.protocol.exceptions import ProtocolError, UnsupportedVersionError
from odradek.protocol.framing import FrameDecoder, decode_response, encode_request
from odradek.protocol.message import Message
from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.api_versions_response import ApiVersionsResponse

CLIENT_ID = "odradek-cli"
CLIENT_SOFTWARE_NAME = "odradek-cli"

M = TypeVar("M", bound=Message)


class WireError(CliError):
    """A request that could not be sent or answered; the message names the broker."""


def require_plaintext(config: Mapping[str, Any], what: str) -> None:
    """Refuses, before anything is sent, a client configuration that asks for TLS or SASL:
    the requests sent here go over a plain socket."""
    protocol = str(config.get("security.protocol", "plaintext")).lower()
    if protocol != "plaintext":
        raise CliError(f"{what} sends its requests over a plain socket; "
                       f"security.protocol={config['security.protocol']} is not supported")


class BrokerSocket:
    """A blocking connection to one broker, every operation within one deadline."""

    def __init__(self, host: str, port: int, *, timeout: float, node_id: int | None = None,
                 client_id: str = CLIENT_ID) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.client_id = client_id
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
        """Opens the connection and learns the broker's API versions."""
        try:
            sock = socket.create_connection((self.host, self.port),
                                            timeout=self._remaining("connecting"))
        except TimeoutError:
            raise WireError(f"{self.name}: cannot connect within {self.timeout:g}s") from None
        except OSError as e:
            raise WireError(f"{self.name}: cannot connect: {e.strerror or e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
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
            raise WireError(f"{self.name}: {api} failed: {e.strerror or e}") from e
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
                raise WireError(f"{self.name} closed the connection before answering {api}")
            self._decoder.feed(data)
        return frame


def send_request(host: str, port: int, request: M, *, timeout: float,
                 node_id: int | None = None, max_version: int | None = None) -> Message:
    """Sends one request to the broker at host:port and returns its decoded response.

    Connecting, the ApiVersions handshake and the answer all fit in `timeout` seconds.
    Raises WireError, naming the address, when any of it fails.
    """
    with BrokerSocket(host, port, timeout=timeout, node_id=node_id) as broker:
        return broker.send(request, max_version)


def error_name(code: int) -> str:
    """Kafka's name for an error code (the number itself for one we do not know)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
