"""A real ZooKeeper for the cluster tests: one private server for the whole session (a free
loopback port, a temporary directory), and a chroot of its own for each test, so tests
never see each other's znodes. Also a cluster of three broker processes in that chroot,
and a network namespace to cut a broker off in."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from support.cluster import Cluster, running
from support.netns import IsolatableHost
from zk_helpers import WAIT, StoreFactory, TcpProxy

from odradek.cluster.zookeeper import ZooKeeperMetadataStore
from odradek.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperUnavailableError


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperUnavailableError as e:
        pytest.fail(f"cannot run ZooKeeper (scripts/test installs it): {e}")
    yield server
    server.stop()
    # ZooKeeper met no error, but for one of ZooKeeper 3.8.0's own: a four-letter word's
    # socket closed before the database is loaded (the start-up probe) logs an NPE.
    errors = [line for line in server.log_file.read_text(errors="replace").splitlines()
              if " ERROR " in line and "Error closing a command socket" not in line]
    assert not errors, "\n".join(errors)


@pytest.fixture
def chroot(request: pytest.FixtureRequest) -> str:
    """A chroot of this test's own, e.g. /test_topics_round_trip-1a2b3c4d."""
    return f"/{request.node.name[:60]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")


@pytest.fixture
def connect(zookeeper: ZooKeeperServer, chroot: str) -> str:
    """zookeeper.connect for this test: the server and the test's chroot."""
    return f"{zookeeper.connect_string}{chroot}"


@pytest.fixture
def make_store(connect: str) -> Iterator[StoreFactory]:
    """Starts stores (one ZooKeeper session each) in the test's chroot; closes them after."""
    stores: list[ZooKeeperMetadataStore] = []

    def make(broker_id: int = 1, connect_string: str | None = None,
             **kwargs: Any) -> ZooKeeperMetadataStore:
        kwargs.setdefault("session_timeout_ms", 6_000)
        store = ZooKeeperMetadataStore(connect_string or connect, broker_id, **kwargs)
        stores.append(store)
        return store.start()

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def raw(zookeeper: ZooKeeperServer, chroot: str) -> Iterator[KazooClient]:
    """A plain kazoo client in the test's chroot, to read the znodes as an operator would."""
    top = KazooClient(hosts=zookeeper.connect_string)
    top.start(timeout=WAIT)
    top.ensure_path(chroot)
    top.stop()
    top.close()
    client = KazooClient(hosts=f"{zookeeper.connect_string}{chroot}")
    client.start(timeout=WAIT)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[TcpProxy]:
    p = TcpProxy((zookeeper.host, zookeeper.port))
    yield p
    p.close()


@pytest.fixture
def cluster(tmp_path: Path, connect: str) -> Iterator[Cluster]:
    yield from running(Cluster(tmp_path, connect, brokers=3))


@pytest.fixture(scope="module")
def shared_cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory,
                   request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One cluster of three brokers for the tests of a module that kill, pause or restart
    none of them (each uses topics of its own), in a chroot of the module's own: starting
    a cluster per test took longer than most of those tests."""
    chroot = f"/{request.module.__name__[:60]}-{uuid.uuid4().hex[:8]}"
    yield from running(Cluster(tmp_path_factory.mktemp("shared-cluster"),
                               f"{zookeeper.connect_string}{chroot}", brokers=3))


@pytest.fixture
def isolatable() -> Iterator[IsolatableHost]:
    try:
        host = IsolatableHost()
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.fail(f"network namespaces are needed (run as root with iproute2): {e}")
    yield host
    host.close()
