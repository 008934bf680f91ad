"""The private ZooKeeper server: its generated config, the signs it serves, pause and resume,
and clear errors when Java or the package is missing."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from zk_helpers import WAIT, StoreFactory

from odradek.cluster.zookeeper_server import (
    ZooKeeperServer,
    ZooKeeperUnavailableError,
    zookeeper_classpath,
)


def test_serves_on_loopback_with_its_own_config(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"
    assert zookeeper.four_letter_word("ruok") == "imok"
    srvr = zookeeper.four_letter_word("srvr")
    assert "Zookeeper version: 3." in srvr and "Mode: standalone" in srvr
    config = dict(line.split("=", 1) for line in zookeeper.config_file.read_text().splitlines())
    assert config["admin.enableServer"] == "false"
    assert config["4lw.commands.whitelist"] == "ruok,srvr,stat"
    assert config["clientPortAddress"] == "127.0.0.1"
    assert config["dataDir"] == str(zookeeper.data_dir)
    # Kafka's 18 s session timeout and the few seconds of fault tests are both granted.
    assert int(config["minSessionTimeout"]) <= 2_000
    assert int(config["maxSessionTimeout"]) >= 18_000
    assert (zookeeper.data_dir / "version-2").is_dir()
    assert "binding to port" in zookeeper.log_file.read_text()  # its log is in its directory
    # Four-letter words off the list are refused.
    assert "not in the whitelist" in zookeeper.four_letter_word("conf")


def test_classpath_has_the_server_and_its_dependencies() -> None:
    names = {p.name for p in zookeeper_classpath()}
    assert {"zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar"} <= names
    assert any(n.startswith("netty-") for n in names)


def test_pause_and_resume(zookeeper: ZooKeeperServer, make_store: StoreFactory) -> None:
    store = make_store(session_timeout_ms=10_000)
    session = store.session_id
    zookeeper.pause()
    try:
        with pytest.raises(OSError):  # frozen: a connection is accepted, never answered
            zookeeper.four_letter_word("ruok", timeout=0.5)
    finally:
        zookeeper.resume()
    assert zookeeper.four_letter_word("ruok") == "imok"
    assert store.topics() == {}
    assert store.session_id == session  # shorter than the session timeout: the same session


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path, java=str(tmp_path / "no-java"))
    with pytest.raises(ZooKeeperUnavailableError, match="needs Java"):
        server.start()


def test_missing_package_is_a_clear_error(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", jars_dir=tmp_path)
    with pytest.raises(ZooKeeperUnavailableError, match="apt-get install zookeeper"):
        server.start()


def test_a_taken_port_is_reported(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        server = ZooKeeperServer(tmp_path, port=taken.getsockname()[1], start_timeout=WAIT)
        with pytest.raises(ZooKeeperUnavailableError, match="Address already in use"):
            server.start()
    assert not server.is_running()


def test_kill_then_start_on_the_same_port(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path, force_sync=False) as server:
        port = server.port
        server.kill()
        assert not server.is_running()
        server.start()
        assert server.port == port
        assert server.four_letter_word("ruok") == "imok"
    assert not server.is_running()
