"""RegistryServer: the registry's HTTP listener, serving the REST API over a KafkaStore.

Run it alone with `odradek registry --bootstrap-server ... --listen http://HOST:PORT`
(a client of the cluster, as Confluent's registry is), or in a broker's process: the
single-node `scripts/start` runs one beside its broker on http://localhost:8081.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from odradek.registry.api import RegistryApi
from odradek.registry.kafka_store import TOPIC, KafkaStore

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "http://localhost:8081"  # Confluent's listeners default port


def parse_listen(address: str) -> tuple[str, int]:
    """http://HOST:PORT -> (host, port); ValueError for anything else."""
    parts = urlsplit(address)
    if parts.scheme != "http" or parts.port is None or parts.path not in ("", "/"):
        raise ValueError(f"{address!r} is not http://HOST:PORT")
    return parts.hostname or "0.0.0.0", parts.port


class RegistryServer:
    def __init__(self, client_config: Mapping[str, Any], listen: str = DEFAULT_LISTEN, *,
                 topic: str = TOPIC, replication_factor: int = 3) -> None:
        self.host, self.port = parse_listen(listen)
        self.store = KafkaStore(client_config, topic=topic,
                                replication_factor=replication_factor)
        self.bound: tuple[str, int] | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> tuple[str, int]:
        """Reads the topic to its end, then listens; raises OSError or StoreError."""
        await asyncio.to_thread(self.store.start)
        self._runner = web.AppRunner(RegistryApi(self.store).app(), access_log=None,
                                     handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        port = server.sockets[0].getsockname()[1] if server and server.sockets else self.port
        self.bound = (self.host, port)
        log.info("schema registry listening on http://%s:%d", self.host, port)
        return self.bound

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await asyncio.to_thread(self.store.close)
