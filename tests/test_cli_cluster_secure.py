"""`odradek cluster up --secure` (issue 17): TLS and SCRAM-SHA-512 between the brokers and
for clients. The certificates and users it makes, then the command run as an operator runs
it (ZooKeeper and three brokers, real processes): clients with the printed
client.properties produce and consume, a client without credentials is refused, a killed
broker comes back with `cluster restart-broker`, and the cluster stops cleanly."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from cryptography import x509
from support.wait import wait_until

from odradek.cli import cluster_security
from odradek.cli.client import read_properties
from odradek.security.jaas import parse_jaas_config

# ---- the files -------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _sans(path: Path) -> set[str]:
    data = path.read_bytes()
    cert = x509.load_pem_x509_certificate(data[data.index(b"-----BEGIN CERTIFICATE"):])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in names}


def test_prepare_makes_the_ca_certificates_and_passwords_once(tmp_path: Path) -> None:
    security = cluster_security.prepare(tmp_path, [1, 2], advertised_host="kafka.example")
    directory = tmp_path / "security"
    assert _mode(directory) == 0o700
    for name in ("ca.key", "broker-1.pem", "broker-2.pem", "credentials"):
        assert _mode(directory / name) == 0o600, name
    assert _sans(security.keystore(1)) == {"localhost", "127.0.0.1", "kafka.example"}
    ca = x509.load_pem_x509_certificate(security.ca_file.read_bytes())
    data = security.keystore(2).read_bytes()
    x509.load_pem_x509_certificate(data[data.index(b"-----BEGIN CERTIFICATE"):]
                                   ).verify_directly_issued_by(ca)
    assert set(security.passwords) == {"broker", "admin"}
    assert security.passwords["broker"] != security.passwords["admin"]
    assert all(len(p) >= 24 for p in security.passwords.values())

    # Started again: the same files; a broker added gets a certificate from the same CA.
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    again = cluster_security.prepare(tmp_path, [1, 2, 3], advertised_host="kafka.example")
    assert again.passwords == security.passwords
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.name in before} == before
    assert (directory / "broker-3.pem").exists()
    # Another advertised host: the certificates are made again, the CA kept.
    moved = cluster_security.prepare(tmp_path, [1], advertised_host="10.0.0.7")
    assert _sans(moved.keystore(1)) == {"localhost", "127.0.0.1", "10.0.0.7"}
    assert (directory / "ca.pem").read_bytes() == before["ca.pem"]


def test_broker_and_client_settings(tmp_path: Path) -> None:
    security = cluster_security.prepare(tmp_path, [1])
    settings = security.broker_settings(1, 9092, 0)
    assert settings["listeners"] == "CLIENT://127.0.0.1:9092,INTERNAL://127.0.0.1:0"
    assert settings["listener.security.protocol.map"] == "CLIENT:SASL_SSL,INTERNAL:SASL_SSL"
    assert settings["inter.broker.listener.name"] == "INTERNAL"
    assert settings["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert settings["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert settings["super.users"] == "User:broker;User:admin"
    login = parse_jaas_config(settings["listener.name.internal.scram-sha-512.sasl.jaas.config"])
    assert dict(login.options) == {"username": "broker",
                                   "password": security.passwords["broker"]}
    assert settings["ssl.keystore.location"] == str(security.keystore(1))
    path = tmp_path / "client.properties"
    security.write_client_properties(path, "127.0.0.1:9092")
    assert _mode(path) == 0o600
    assert read_properties(str(path)) == {
        "bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
        "sasl.password": security.passwords["admin"], "ssl.ca.location": str(security.ca_file)}


# ---- a secure cluster on loopback ------------------------------------------------------------

_PID = re.compile(r"^(zookeeper|broker \d+): .*, pid (\d+), log ")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ODRADEK_BOOTSTRAP"}
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True,
                          text=True, timeout=90, env=env)


class SecureUp:
    """`odradek cluster up --secure` in the background, its output read as it comes."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.process = subprocess.Popen(
            [sys.executable, "-m", "odradek", "cluster", "up", "--secure", "--brokers", "3",
             "--port-base", "0", "--zookeeper-port", "0", "--data-dir", str(data_dir),
             "--set", "zookeeper.session.timeout.ms=6000",
             "--set", "controlled.shutdown.retry.backoff.ms=300"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.pids: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(self._up, 120, "the client settings")
        self.pids = {m.group(1): int(m.group(2))
                     for m in map(_PID.match, self.lines) if m is not None}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def _up(self) -> bool:
        if self.process.poll() is not None:
            self._reader.join(5)
            raise AssertionError(f"cluster up exited {self.process.returncode}:\n"
                                 + "".join(self.lines))
        return any(line.startswith("use them with: ") for line in self.lines)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        finally:
            self._reader.join(5)
        return code

    def kill_leftovers(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def secure_up(tmp_path: Path) -> Iterator[SecureUp]:
    up = SecureUp(tmp_path / "secure")
    try:
        yield up
    finally:
        up.kill_leftovers()


def _produce(config: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer({**config, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert producer.flush(60) == 0 and not errors, errors


def _consume(config: dict[str, Any], topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    try:
        def done() -> bool:
            for m in consumer.consume(100, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
            return len(got) >= expected
        wait_until(done, 60, f"{expected} records of {topic}")
    finally:
        consumer.close()
    return got


def _status(properties: Path) -> dict[str, Any]:
    shown = odradek("cluster", "status", "--command-config", str(properties), "--json",
                    "--timeout", "20s")
    assert shown.returncode in (0, 3), shown
    answer: dict[str, Any] = json.loads(shown.stdout)
    return answer


def _healthy(properties: Path) -> bool:
    answer = _status(properties)
    return len(answer["brokers"]) == 3 and not (answer["under_replicated"] or answer["offline"])


@pytest.mark.timeout(300)
def test_a_secure_cluster_serves_clients_with_the_printed_settings(
        secure_up: SecureUp) -> None:
    up, data_dir = secure_up, secure_up.data_dir
    assert set(up.pids) == {"zookeeper", "broker 1", "broker 2", "broker 3"}, up.lines
    properties = data_dir / "client.properties"
    assert f"client settings (the super user admin) in {properties}:" in "".join(up.lines)
    assert _mode(properties) == 0o600
    config = read_properties(str(properties))
    printed = [line.strip() for line in up.lines if line.startswith("  ")]
    assert printed == [f"{k}={v}" for k, v in config.items()], up.lines
    bootstrap = next(line.split()[1] for line in up.lines if line.startswith("bootstrap: "))
    assert config["bootstrap.servers"] == bootstrap
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-512" and config["sasl.username"] == "admin"
    for i in (1, 2, 3):
        log = (data_dir / f"broker-{i}.log").read_text()
        assert re.search(r"listening on INTERNAL://127\.0\.0\.1:\d+", log), log
        assert "listening on PLAINTEXT" not in log

    # The odradek CLI and confluent-kafka with the file.
    created = odradek("topics", "create", "secured", "--partitions", "1",
                      "--replication-factor", "3", "--config", "min.insync.replicas=2",
                      "--command-config", str(properties))
    assert created.returncode == 0, created
    listed = odradek("topics", "list", "--command-config", str(properties))
    assert listed.returncode == 0 and "secured" in listed.stdout, listed
    users = odradek("users", "describe", "--json", "--command-config", str(properties))
    assert users.returncode == 0, users
    assert json.loads(users.stdout) == [  # what `up` wrote to /config/users
        {"user": user, "credentials": [{"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}
        for user in ("admin", "broker")], users
    first = [b"first-%d" % i for i in range(20)]
    _produce(config, "secured", first)
    assert _consume(config, "secured", 20) == first

    # Without credentials, or with a wrong password: refused.
    tls_only = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": config["ssl.ca.location"], "log_level": 0}
    wrong = {**config, "sasl.password": "not-the-password", "log_level": 0}
    plaintext = {"bootstrap.servers": bootstrap, "log_level": 0}
    for refused in (tls_only, wrong, plaintext):
        with pytest.raises(KafkaException):
            AdminClient(refused).list_topics(timeout=4)
    anonymous = odradek("cluster", "status", "--bootstrap-server", bootstrap, "--timeout", "4s")
    assert anonymous.returncode == 1, anonymous

    # `status` with the client settings; a killed broker back with `restart-broker`.
    wait_until(lambda: _healthy(properties), 60, "a full ISR over SASL_SSL")
    controller = _status(properties)["controller"]
    victim = next(i for i in (1, 2, 3) if i != controller)
    os.kill(up.pids[f"broker {victim}"], signal.SIGKILL)
    wait_until(lambda: any(f"broker {victim} exited with status -9" in line
                           for line in up.lines), 20, "the exit reported")
    second = [b"second-%d" % i for i in range(20)]
    _produce(config, "secured", second)  # min.insync.replicas=2 of the 2 left
    restarted = odradek("cluster", "restart-broker", str(victim), "--data-dir", str(data_dir))
    assert restarted.returncode == 0, (restarted, "".join(up.lines))
    shown = _PID.match(restarted.stdout.splitlines()[-1])
    assert shown is not None, restarted.stdout
    up.pids[f"broker {victim}"] = int(shown.group(2))
    wait_until(lambda: _healthy(properties), 60, f"broker {victim} back in the ISR")
    assert _consume(config, "secured", 40) == first + second

    # A rolling restart of a running broker: the same, after a controlled shutdown.
    rolled = odradek("cluster", "restart-broker", str(controller), "--data-dir", str(data_dir))
    assert rolled.returncode == 0, (rolled, "".join(up.lines))
    assert f"stopping broker {controller} (a controlled shutdown)" in rolled.stdout
    shown = _PID.match(rolled.stdout.splitlines()[-1])
    assert shown is not None, rolled.stdout
    up.pids[f"broker {controller}"] = int(shown.group(2))

    # (Before the stop: a LeaderAndIsr that meets a broker's replica fetchers already shut
    # down logs a traceback while the cluster stops, a shutdown race unrelated to security.)
    running = "".join((data_dir / f"broker-{i}.log").read_text() for i in (1, 2, 3))
    assert "Traceback" not in running

    assert up.stop() == 0, "".join(up.lines)
    assert up.lines[-1].strip() == "stopping", up.lines
    for name, pid in up.pids.items():
        assert wait_until(lambda pid=pid: not _alive(pid), 10, f"{name} gone")
    logs = "".join((data_dir / f"broker-{i}.log").read_text() for i in (1, 2, 3))
    assert "on listener INTERNAL: Authentication failed" not in logs
    assert "is Denied operation = CLUSTER_ACTION" not in logs
