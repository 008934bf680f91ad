"""RegistryServer: the registry's HTTP listener, serving the REST API over a KafkaStore.

Run it alone with `odradek registry --bootstrap-server ... --listen http://HOST:PORT`
(a client of the cluster, as Confluent's registry is), or in a broker's process: the
single-node `scripts/start` runs one beside its broker on http://localhost:8081.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from odradek.registry.api import RegistryApi
from odradek.registry.election import DEFAULT_GROUP, PrimaryElection
from odradek.registry.kafka_store import TOPIC, KafkaStore

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "http://localhost:8081"  # Confluent's listeners default port
ELECTION_TIMEOUT_S = 30.0


def parse_listen(address: str) -> tuple[str, int]:
    """http://HOST:PORT -> (host, port); ValueError for anything else."""
    parts = urlsplit(address)
    if parts.scheme != "http" or parts.port is None or parts.path not in ("", "/"):
        raise ValueError(f"{address!r} is not http://HOST:PORT")
    return parts.hostname or "0.0.0.0", parts.port


class RegistryServer:
    def __init__(self, client_config: Mapping[str, Any], listen: str = DEFAULT_LISTEN, *,
                 topic: str = TOPIC, replication_factor: int = 3,
                 advertised_url: str | None = None, group: str = DEFAULT_GROUP,
                 session_timeout_ms: int = 10_000) -> None:
        self.host, self.port = parse_listen(listen)
        if advertised_url is not None:
            parse_listen(advertised_url)  # checked now, not once listening
        self.client_config = dict(client_config)
        self.advertised_url = advertised_url
        self.group = group
        self.session_timeout_ms = session_timeout_ms
        self.store = KafkaStore(client_config, topic=topic,
                                replication_factor=replication_factor)
        self.bound: tuple[str, int] | None = None
        self.election: PrimaryElection | None = None
        self._api: RegistryApi | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> tuple[str, int]:
        """Reads the topic to its end, then listens; raises OSError or StoreError."""
        await asyncio.to_thread(self.store.start)
        sock = socket.create_server((self.host, self.port), reuse_port=False)
        port = sock.getsockname()[1]
        url = self.advertised_url or (
            f"http://{self.host if self.host not in ('0.0.0.0', '::') else socket.getfqdn()}"
            f":{port}")
        # Elected among the registries of this cluster (election.py); writes that reach
        # another are forwarded to the primary.
        self.election = PrimaryElection(self.client_config, self.store.topic, url,
                                        group=self.group,
                                        session_timeout_ms=self.session_timeout_ms)
        self._api = RegistryApi(self.store, self.election)
        self._runner = web.AppRunner(self._api.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        self.election.start()
        # Serving once the first election is over (as Confluent's registry waits for its
        # leader election): a write then finds its primary.
        if not await asyncio.to_thread(self.election.changed.wait, ELECTION_TIMEOUT_S):
            log.warning("registry: no election result within %g s; serving anyway",
                        ELECTION_TIMEOUT_S)
        await web.SockSite(self._runner, sock).start()
        self.bound = (self.host, port)
        log.info("schema registry listening on http://%s:%d (advertised as %s)", self.host,
                 port, url)
        return self.bound

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._api is not None:
            await self._api.close()
        if self.election is not None:
            await asyncio.to_thread(self.election.close)
        await asyncio.to_thread(self.store.close)
