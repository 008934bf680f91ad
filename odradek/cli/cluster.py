"""`odradek cluster`: a local cluster on loopback (`up`, `restart-broker`) and a cluster's
health (`status`).

`up` runs a private ZooKeeper (odradek.cluster.zookeeper_server, from Debian's package)
and N `odradek serve` brokers on it, each with its own data directory and log file under
--data-dir, prints the bootstrap address once every broker sees every other, and stops
them all on Ctrl-C or SIGTERM: the brokers one at a time, the controller last, each with
a controlled shutdown (stopped together, each would try to move its leaderships to
brokers that are leaving too), then ZooKeeper. A second Ctrl-C kills what is left.
Started again with the same --data-dir, it keeps its data; a lock in that directory keeps
a second `up` off it meanwhile. A failure ends it with one line on stderr (which broker,
its address, why, its log) and exit status 1, what it started stopped.

Each broker also has its HTTP listener (http.listeners: health checks and metrics,
docs/operations.md) on --http-port-base's ports (9644, 9645, ...; free ones with
--port-base 0), printed with it; --no-http leaves them off.

While it runs, it reports a broker that exits, and `restart-broker ID`, from another
terminal, asks it (through the Unix socket DIR/control.sock) to start that broker again
on its port and its log dir, as `kafka-server-start.sh` would with the broker's own
server.properties: the broker rejoins, and its replicas catch up and go back into the
ISRs. A broker still running is first stopped with a controlled shutdown (a rolling
restart, one broker at a time).

With --secure (odradek.cli.cluster_security), the brokers speak SASL_SSL with
SCRAM-SHA-512 only, to each other on an INTERNAL listener and to clients on a CLIENT one
(--port-base's ports), certificates from a private CA in DIR/security and an ACL
authorizer; `up` asks the brokers itself as the super user `admin`, whose librdkafka
settings it prints and writes to DIR/client.properties.

`status` asks any cluster (Odradek or Apache Kafka) through librdkafka: the cluster id,
the controller, the live brokers, and the partitions that are under-replicated (an ISR
smaller than the replica set) or offline (no leader); its exit status says whether some
partition is offline, for scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from odradek.cli.client import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    AdminCommand,
    CliError,
    command,
    common_options,
    describe_error,
    error_code,
    key_value,
    positive_int,
    wait_all,
)
from odradek.cli.cluster_security import (
    CLIENT_LISTENER,
    CLIENT_PROPERTIES,
    INTERNAL_LISTENER,
    Security,
    prepare,
)
from odradek.cli.output import print_json, print_table
from odradek.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperUnavailableError

START_TIMEOUT_S = 60.0  # for all the brokers to start and see each other
# For the registrations a broker stopped uncleanly left in ZooKeeper to go: the longest
# session the private ZooKeeper grants (ZooKeeperServer's max_session_timeout_ms), and some.
STALE_SESSION_TIMEOUT_S = 65.0
STOP_TIMEOUT_S = 60.0  # for one broker's controlled shutdown and stop, then SIGKILL
CHROOT = "/odradek"  # the brokers' znodes, under the private ZooKeeper's root
EXIT_OFFLINE = 3  # `cluster status`: some partition has no leader
CONTROL_SOCKET = "control.sock"  # in --data-dir: where `restart-broker` asks `up`
# `restart-broker`: the longest `up` may take between two lines of its answer (a
# controlled shutdown, a stale session's expiry, a start).
RESTART_ANSWER_TIMEOUT_S = STOP_TIMEOUT_S + STALE_SESSION_TIMEOUT_S + START_TIMEOUT_S

# What `up` sets for each broker itself: one value for every broker would break them.
PER_BROKER_SETTINGS = frozenset({"broker.id", "node.id", "listeners", "advertised.listeners",
                                 "log.dirs", "log.dir", "zookeeper.connect", "http.listeners"})
HTTP_PORT_BASE = 9644  # broker i's HTTP listener: 9644 + i - 1 (as scripts/start's 9644)

_LISTENING = re.compile(rb"(?<!http )listening on (\w+)://\S*:(\d+)")  # Kafka's
_HTTP_LISTENING = re.compile(rb"http listening on http://\S*:(\d+)")  # http.listeners
# The lines of a broker's log that say why it failed: an exception's, or an ERROR record.
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|\S+ \S+ ERROR )")
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = commands.add_parser("cluster", help="run a local cluster; show a cluster's health")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and N brokers on loopback, in the "
                            "foreground until Ctrl-C or SIGTERM (a second Ctrl-C kills them)")
    up.add_argument("--brokers", type=positive_int, default=3, metavar="N",
                    help="how many brokers (default 3)")
    up.add_argument("--data-dir", default="odradek-cluster", metavar="DIR",
                    help="ZooKeeper's and the brokers' data and logs (default "
                    "./odradek-cluster); kept between runs")
    up.add_argument("--port-base", type=_port, default=9092, metavar="PORT",
                    help="broker i listens on PORT+i-1 (default 9092); 0: free ports")
    up.add_argument("--zookeeper-port", type=_port, default=2181, metavar="PORT",
                    help="ZooKeeper's client port (default 2181); 0: a free port")
    up.add_argument("--http-port-base", type=_port, default=None, metavar="PORT",
                    help="broker i's HTTP listener (health, metrics) on PORT+i-1 (default "
                    f"{HTTP_PORT_BASE}, or free ports with --port-base 0); 0: free ports")
    up.add_argument("--no-http", action="store_true",
                    help="no HTTP listeners (http.listeners empty)")
    up.add_argument("--set", dest="settings", metavar="KEY=VALUE", action="append",
                    default=[], help="a broker setting for every broker (repeatable)")
    up.add_argument("--secure", action="store_true",
                    help="TLS and SCRAM-SHA-512 between the brokers and for clients, with "
                    "an ACL authorizer: certificates and users made in DIR/security, the "
                    f"client settings (the super user admin) in DIR/{CLIENT_PROPERTIES}")
    up.set_defaults(run=run_up)

    restart = actions.add_parser(
        "restart-broker", help="start broker ID of a running `cluster up` again, on its "
        "port and its data (stopped first, with a controlled shutdown, if it runs); "
        "returns once the cluster sees it")
    restart.add_argument("broker_id", type=positive_int, metavar="ID", help="its broker.id")
    restart.add_argument("--data-dir", default="odradek-cluster", metavar="DIR",
                         help="the --data-dir of the running `cluster up` (default "
                         "./odradek-cluster)")
    restart.set_defaults(run=run_restart_broker)

    status = actions.add_parser("status", parents=[common_options()],
                                help="brokers, controller, under-replicated and offline "
                                "partitions; exit status 3 when some partition is offline")
    status.set_defaults(run=run_status)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value} (0 to 65535)")
    return value


# ---- up --------------------------------------------------------------------------------------

def broker_settings(items: Iterable[str]) -> dict[str, str]:
    """The --set settings for every broker; the ones `up` sets per broker are refused."""
    settings: dict[str, str] = {}
    for item in items:
        key, value = key_value(item, "--set")
        if key in PER_BROKER_SETTINGS:
            raise CliError(f"--set {key}: `cluster up` sets it for each broker itself",
                           EXIT_USAGE)
        settings[key] = value.strip()
    return settings


def broker_ports(brokers: int, port_base: int) -> list[int]:
    """The port of brokers 1..N: port_base, port_base+1, ...; all 0 (free ports) for 0."""
    if port_base and port_base + brokers - 1 > 65535:
        raise CliError(f"--port-base {port_base}: {brokers} brokers would go past port 65535",
                       EXIT_USAGE)
    return [port_base + i if port_base else 0 for i in range(brokers)]


def http_ports(brokers: int, http_port_base: int | None, port_base: int,
               enabled: bool = True) -> list[int | None]:
    """The HTTP listener's port of brokers 1..N (None: none): http_port_base, +1, ...; by
    default 9644, +1, ..., or free ports (0) when the Kafka ports are free ones."""
    if not enabled:
        return [None] * brokers
    base = http_port_base if http_port_base is not None else (HTTP_PORT_BASE if port_base
                                                               else 0)
    if base and base + brokers - 1 > 65535:
        raise CliError(f"--http-port-base {base}: {brokers} brokers would go past port 65535",
                       EXIT_USAGE)
    ports: list[int | None] = [base + i if base else 0 for i in range(brokers)]
    return ports


def log_summary(text: str, lines: int = 15) -> str:
    """Why a broker failed, from its log: the lines of its exceptions and errors (the
    cause and what its shutdown then met), else the last `lines` lines."""
    all_lines = text.splitlines()
    errors = [line for line in all_lines if _ERROR_LINE.match(line)]
    return "\n".join((errors or all_lines)[-lines:])


def failure_cause(text: str) -> str:
    """Why a broker failed, in one line of its log: the first exception or ERROR line
    (the cause; later ones are what its shutdown met then), its port in use said plainly,
    else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any("[Errno 98]" in line or "address already in use" in line.lower()
           for line in lines):
        return "its port is in use (by another process?)"
    for line in lines:
        if line.startswith("odradek serve: "):
            return line.removeprefix("odradek serve: ")
        if _ERROR_LINE.match(line):
            # `2026-05-01 12:00:03,120 ERROR odradek.x: message` -> `message`
            return re.sub(r"^\S+ \S+ ERROR \S+: ", "", line)
    return lines[-1] if lines else "it logged nothing"


def stop_order(running: Sequence[int], controller: int | None) -> list[int]:
    """Broker ids in the order to stop them: one at a time by id, the controller last, so
    each controlled shutdown hands its leaderships to brokers that stay, and the
    controller moves at most once."""
    return sorted(running, key=lambda broker_id: (broker_id == controller, broker_id))


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM before the cluster was up."""


class _Signals:
    """SIGINT, SIGTERM and SIGHUP handler: the first asks `up` to stop, another one at least
    FORCE_AFTER_S later to hurry (closer, it is the same request delivered twice, say to
    a wrapper such as timeout(1) and to `up` itself)."""

    FORCE_AFTER_S = 1.0

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.first: float | None = None
        self.forced = False

    def __call__(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
        elif now - self.first >= self.FORCE_AFTER_S:
            self.forced = True
        self.stop.set()

    def check(self) -> None:
        if self.stop.is_set():
            raise _Interrupted


class _Pids:
    """DIR/pids: the processes a running `up` started, one `name pid` a line, removed
    once they are stopped. Left behind (`up` was killed), it names what may still run on
    the directory, which a second ZooKeeper or broker on the same data must not meet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pids: dict[str, int] = {}

    def check_none_left(self) -> None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        left = []
        for line in lines:
            name, _, pid = line.partition(" ")
            if pid.isdigit() and _runs_on(int(pid), self.path.parent):
                left.append(f"{name} (pid {pid})")
        if left:
            raise CliError(f"processes of an earlier `cluster up` on {self.path.parent} "
                           f"still run: {', '.join(left)}; stop them first (kill PID)")

    def add(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        self.path.write_text("".join(f"{n} {p}\n" for n, p in self.pids.items()),
                             encoding="utf-8")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _runs_on(pid: int, directory: Path) -> bool:
    """Whether process `pid` runs with `directory` in its command line (Linux's /proc):
    a pid reused by an unrelated process does not count."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return os.fsencode(directory) in cmdline


class _Broker:
    """One `odradek serve` process in a session of its own (a Ctrl-C in the terminal is
    for `up` to relay, in order). Its output is appended to DIR/broker-i.log, where the
    port it bound and its start are read from."""

    def __init__(self, broker_id: int, port: int, log_file: Path,
                 settings: Mapping[str, str], listener: str = "PLAINTEXT",
                 client: Mapping[str, str] | None = None) -> None:
        self.broker_id = broker_id
        self.requested_port = port  # 0: a free one
        self.http_port: int | None = None  # the one its HTTP listener bound, if it has one
        self.log_file = log_file
        self.listener = listener  # the clients' (and `up`'s)
        self.client = dict(client or {})  # librdkafka's settings to ask it, but the address
        self.port: int | None = None  # the one its client listener bound
        self.ports: dict[str, int] = {}  # each listener's
        self.reported = False  # its exit, once it exited
        self._up = False  # listening and started
        self._started = re.compile(rb"broker %d started" % broker_id)
        argv = [sys.executable, "-m", "odradek", "serve"]
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        # Started again on the same directory, the log goes on: this run's lines start here.
        self._offset = log_file.stat().st_size if log_file.exists() else 0
        with log_file.open("ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def address(self) -> str:
        port = self.port or self.requested_port
        return f"127.0.0.1:{port}" if port else "a free port on 127.0.0.1"

    def admin(self) -> AdminClient:
        """An admin client of this broker alone."""
        return AdminClient({**self.client, "bootstrap.servers": f"127.0.0.1:{self.port}",
                            "log_level": 0})

    def line(self) -> str:
        """What `up` prints of a started broker."""
        http = f", http://127.0.0.1:{self.http_port}" if self.http_port else ""
        return (f"broker {self.broker_id}: 127.0.0.1:{self.port}, pid {self.process.pid}, "
                f"log {self.log_file}{http}")

    def output(self) -> bytes:
        """What this run of the broker has logged so far."""
        try:
            with self.log_file.open("rb") as log:
                log.seek(self._offset)
                return log.read()
        except OSError:
            return b""

    def failure(self, when: str) -> str:
        """One line: which broker exited, on which port, with which status, why (from its
        log) and where its log is."""
        return (f"broker {self.broker_id} ({self.address}) exited with status "
                f"{self.process.returncode} {when}: "
                f"{failure_cause(self.output().decode('utf-8', 'replace'))}; see "
                f"{self.log_file}")

    def started(self) -> bool:
        """Whether it is listening and started; a CliError if it exited instead."""
        if not self.running:
            self.reported = True
            raise CliError(self.failure("while starting"))
        if self._up:
            return True
        text = self.output()
        # Every listener is bound before the broker says it started.
        self.ports = {m.group(1).decode(): int(m.group(2)) for m in _LISTENING.finditer(text)}
        http = _HTTP_LISTENING.search(text)
        self.http_port = int(http.group(1)) if http is not None else None
        self.port = self.ports.get(self.listener)
        self._up = self.port is not None and self._started.search(text) is not None
        return self._up

    def stop(self, signals: _Signals) -> bool:
        """SIGTERM (a controlled shutdown, then a clean stop); SIGKILL after STOP_TIMEOUT_S
        or on a second Ctrl-C. False when it had to be killed."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.running:
            if signals.forced or time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                return False
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(0.1)
        return True


def check_ports_free(ports: Iterable[int]) -> None:
    """Refuses at once a port something listens on already (the broker scripts/start runs
    on 9092, say), rather than start a cluster whose brokers cannot bind."""
    for port in ports:
        if not port:
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the broker
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                raise CliError(f"port {port} is in use (by another broker?): choose other "
                               "ports with --port-base and --zookeeper-port, or 0 for free "
                               "ones") from None


class _Cluster:
    """What a running `up` started: ZooKeeper and the brokers by id, each broker started
    (and started again) with the same settings, port and log dir."""

    def __init__(self, data_dir: Path, settings: Mapping[str, str],
                 zookeeper: ZooKeeperServer, pids: _Pids, signals: _Signals,
                 security: Security | None = None) -> None:
        self.data_dir = data_dir
        self.security = security
        self.settings = dict(settings)
        self.zookeeper = zookeeper
        self.pids = pids
        self.signals = signals
        self.connect = f"{zookeeper.connect_string}{CHROOT}"
        self.brokers: dict[int, _Broker] = {}
        self.http_ports: dict[int, int | None] = {}  # as asked, by broker id

    def start_broker(self, broker_id: int, port: int, internal_port: int = 0,
                     http_port: int | None = None) -> _Broker:
        """Broker `broker_id` on `port` (and, secure, its inter-broker listener on
        `internal_port`; its HTTP listener on `http_port`, None: none); 0: a free one."""
        log_file = self.data_dir / f"broker-{broker_id}.log"
        settings = {**self.settings, "listeners": f"PLAINTEXT://127.0.0.1:{port}"}
        listener, client = "PLAINTEXT", {}
        if self.security is not None:
            settings = {**self.security.broker_settings(broker_id, port, internal_port),
                        **self.settings}
            listener, client = CLIENT_LISTENER, self.security.client_config()
        if http_port is not None:
            settings["http.listeners"] = f"http://127.0.0.1:{http_port}"
        self.http_ports[broker_id] = http_port
        try:
            broker = _Broker(broker_id, port, log_file, {
                **settings, "broker.id": str(broker_id),
                "log.dirs": str(self.data_dir / f"broker-{broker_id}"),
                "zookeeper.connect": self.connect}, listener, client)
        except OSError as e:
            raise CliError(f"cannot start broker {broker_id}: {e.strerror or e} "
                           f"({log_file})") from e
        self.brokers[broker_id] = broker
        self.pids.add(f"broker-{broker_id}", broker.process.pid)
        return broker

    def running(self) -> list[_Broker]:
        return [b for b in self.brokers.values() if b.running]

    def report_exits(self) -> None:
        """Says once of each broker that exited which one, its status and its log."""
        for broker in self.brokers.values():
            if not broker.reported and not broker.running:
                broker.reported = True
                print(f"broker {broker.broker_id} exited with status "
                      f"{broker.process.returncode}; see {broker.log_file}; start it again "
                      f"with: odradek cluster restart-broker {broker.broker_id} --data-dir "
                      f"{self.data_dir}", flush=True)

    def restart(self, broker_id: int, say: Callable[[str], None]) -> _Broker:
        """Broker `broker_id` started again on its port and its log dir, stopped first
        (a controlled shutdown) if it runs; returns once every running broker sees it."""
        old = self.brokers[broker_id]
        if old.running:
            say(f"stopping broker {broker_id} (a controlled shutdown)")
            if not old.stop(self.signals):
                say(f"broker {broker_id} did not stop within {STOP_TIMEOUT_S:g}s: killed")
        old.reported = True  # its exit is this restart's, not news
        self.signals.check()
        # Killed, it left its registration in ZooKeeper until its session expires.
        _wait_for_stale_registrations(self.zookeeper, [broker_id], self.signals, say)
        for other in self.running():  # so that seeing it again means it is back
            _wait_gone(broker_id, other, self.signals)
        self.signals.check()
        say(f"starting broker {broker_id} on {old.address}")
        http_port = self.http_ports.get(broker_id)
        broker = self.start_broker(broker_id, old.port or old.requested_port,
                                   old.ports.get(INTERNAL_LISTENER, 0),
                                   None if http_port is None else old.http_port or http_port)
        deadline = time.monotonic() + START_TIMEOUT_S
        _wait_started([broker], deadline, self.signals)
        _wait_for_membership(self.running(), deadline, self.signals)
        return broker


class _Control:
    """DIR/control.sock, a Unix socket where `odradek cluster restart-broker` asks the
    running `up`. A request is one line, `restart-broker ID`; the answer is lines of
    `progress TEXT`, then `ok TEXT` or `error TEXT`. Requests wait in the socket's
    backlog until the cluster is up; `up` answers them one at a time."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CONTROL_SOCKET
        self.path.unlink(missing_ok=True)  # an earlier `up`'s, killed: the lock is ours
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _control_address(data_dir) as address:
                self.listener.bind(address)
            self.listener.listen(8)
        except OSError as e:
            self.listener.close()
            raise CliError(f"cannot listen on {self.path}: {e.strerror or e}") from e
        self.listener.setblocking(False)

    def requests(self) -> list[_Request]:
        """The requests waiting, read."""
        requests = []
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:  # none waiting (BlockingIOError), or closed
                return requests
            requests.append(_Request(connection))

    def close(self) -> None:
        """Requests still waiting find the connection closed."""
        self.listener.close()
        self.path.unlink(missing_ok=True)


class _Request:
    """One `restart-broker` request and its answer; the answer is lost, not an error,
    when the asker went away (its Ctrl-C stops its waiting, not the restart)."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.broker_id: int | None = None
        self.problem = ""
        connection.settimeout(5)
        data = b""
        with contextlib.suppress(OSError):
            while b"\n" not in data and len(data) < 256:
                chunk = connection.recv(256)
                if not chunk:
                    break
                data += chunk
        words = data.decode("utf-8", "replace").split()
        if len(words) == 2 and words[0] == "restart-broker" and words[1].isdigit():
            self.broker_id = int(words[1])
        else:
            self.problem = f"not a request: {data[:80]!r}"

    def answer(self, kind: str, text: str) -> None:
        with contextlib.suppress(OSError):
            self.connection.sendall(f"{kind} {text}\n".encode())

    def close(self) -> None:
        self.connection.close()


@contextlib.contextmanager
def _control_address(data_dir: Path) -> Iterator[str]:
    """The control socket's address: DIR/control.sock, or the same file reached through
    the directory's descriptor (/proc/self/fd/N/control.sock) where the path is longer
    than a Unix socket's address may be (108 bytes)."""
    path = data_dir / CONTROL_SOCKET
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{CONTROL_SOCKET}"
    finally:
        os.close(fd)


@command("cluster up")
def run_up(args: argparse.Namespace) -> int:
    settings = broker_settings(args.settings)
    ports = broker_ports(args.brokers, args.port_base)
    http = http_ports(args.brokers, args.http_port_base, args.port_base, not args.no_http)
    data_dir = Path(args.data_dir).resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        lock = (data_dir / ".lock").open("w")
    except OSError as e:
        raise CliError(f"cannot use {data_dir}: {e.strerror or e}") from e
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(f"another `odradek cluster up` runs on {data_dir}") from None
        check_ports_free([*ports, *(p for p in http if p), args.zookeeper_port])
        pids = _Pids(data_dir / "pids")
        pids.check_none_left()
        control = _Control(data_dir)
        signals = _Signals()
        previous = {sig: signal.signal(sig, signals) for sig in _SIGNALS}
        security = prepare(data_dir, range(1, len(ports) + 1)) if args.secure else None
        try:
            return _run_cluster(args, data_dir, ports, settings, signals, pids, control,
                                security, http)
        finally:  # every process it started has stopped
            control.close()
            pids.remove()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _run_cluster(args: argparse.Namespace, data_dir: Path, ports: list[int],
                 settings: dict[str, str], signals: _Signals, pids: _Pids,
                 control: _Control, security: Security | None = None,
                 http: Sequence[int | None] | None = None) -> int:
    zookeeper = ZooKeeperServer(data_dir / "zookeeper", args.zookeeper_port)
    try:
        zookeeper.start()
    except ZooKeeperUnavailableError as e:
        raise CliError(f"cannot start ZooKeeper: {e}") from e
    assert zookeeper.pid is not None
    pids.add("zookeeper", zookeeper.pid)
    cluster = _Cluster(data_dir, settings, zookeeper, pids, signals, security)
    code = 0
    try:
        signals.check()
        _wait_for_stale_registrations(zookeeper, range(1, len(ports) + 1), signals, _say)
        if security is not None:  # the brokers' own user first, as Kafka needs it
            security.create_users(cluster.connect)
        for broker_id, port in enumerate(ports, 1):
            cluster.start_broker(broker_id, port,
                                 http_port=http[broker_id - 1] if http is not None else None)
        brokers = list(cluster.brokers.values())
        deadline = time.monotonic() + START_TIMEOUT_S
        _wait_started(brokers, deadline, signals)
        _wait_for_membership(brokers, deadline, signals)
        print(f"zookeeper: {cluster.connect}, pid {zookeeper.pid}, log {zookeeper.log_file}",
              flush=True)
        for broker in brokers:
            print(broker.line(), flush=True)
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
        print(f"bootstrap: {bootstrap}", flush=True)
        if security is not None:
            _print_client_settings(security, data_dir / CLIENT_PROPERTIES, bootstrap)
        _watch(cluster, control, signals)
        control.close()  # a request from now on is told at once
        print("stopping", flush=True)
    except _Interrupted:
        print("odradek cluster up: interrupted while starting; stopping", file=sys.stderr,
              flush=True)
        code = EXIT_INTERRUPTED
    finally:
        try:
            killed = _stop_brokers(list(cluster.brokers.values()), signals)
        finally:
            zookeeper.stop()
    if killed:
        raise CliError(f"killed {_brokers(b.broker_id for b in killed)} before "
                       f"{'it' if len(killed) == 1 else 'they'} stopped cleanly; see "
                       f"{', '.join(str(b.log_file) for b in killed)}")
    return code


def _print_client_settings(security: Security, path: Path, bootstrap: str) -> None:
    """Writes DIR/client.properties and says what it holds and how to use it."""
    try:
        text = security.write_client_properties(path, bootstrap)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from e
    print(f"secure: SASL_SSL with {security.client_config()['sasl.mechanism']} on every "
          f"listener ({INTERNAL_LISTENER} between the brokers), ACLs on; client settings "
          f"(the super user admin) in {path}:", flush=True)
    for line in text.splitlines():
        if not line.startswith("#"):
            print(f"  {line}", flush=True)
    print(f"use them with: odradek topics list --command-config {path}  or  "
          f"kcat -F {path} -L", flush=True)


def _say(text: str) -> None:
    print(text, flush=True)


def _brokers(ids: Iterable[int]) -> str:
    """`broker 2` or `brokers 1, 3`."""
    listed = [str(i) for i in ids]
    return f"broker{'s' if len(listed) > 1 else ''} {', '.join(listed)}"


def _wait_for_stale_registrations(zookeeper: ZooKeeperServer, ids: Iterable[int],
                                  signals: _Signals, say: Callable[[str], None]) -> None:
    """Until the registrations of brokers that did not stop cleanly (killed, or their
    `up` was) have left ZooKeeper: their sessions, restored from ZooKeeper's data after
    a restart of it, expire after their timeout; a broker started before then would
    find its broker.id taken."""
    # Here: the other commands start faster without kazoo.
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from odradek.cluster.zookeeper import znodes

    client = KazooClient(hosts=zookeeper.connect_string, timeout=10)
    try:
        client.start(timeout=10)
    except KazooTimeoutError as e:
        raise CliError(f"cannot connect to ZooKeeper at {zookeeper.connect_string}") from e
    try:
        paths = {i: f"{CHROOT}{znodes.broker_path(i)}" for i in ids}
        stale = [i for i, path in paths.items() if client.exists(path) is not None]
        if not stale:
            return
        say(f"waiting for ZooKeeper to expire the session{'s' if len(stale) > 1 else ''} of "
            f"{_brokers(stale)}, which did not stop cleanly")
        deadline = time.monotonic() + STALE_SESSION_TIMEOUT_S
        while stale := [i for i in stale if client.exists(paths[i]) is not None]:
            signals.check()
            if time.monotonic() > deadline:
                raise CliError(f"{_brokers(stale)} still registered in ZooKeeper after "
                               f"{STALE_SESSION_TIMEOUT_S:g}s: does a broker of an earlier "
                               "run still run?")
            signals.stop.wait(0.2)
    except KazooException as e:
        raise CliError(f"ZooKeeper at {zookeeper.connect_string}: "
                       f"{type(e).__name__} {e}".rstrip()) from e
    finally:
        client.stop()
        client.close()


def _wait_started(brokers: list[_Broker], deadline: float, signals: _Signals) -> None:
    """Until every broker listens and has started; a CliError for the first one that
    exits meanwhile or is late."""
    while not all([broker.started() for broker in brokers]):
        signals.check()
        if time.monotonic() > deadline:
            late = next(b for b in brokers if not b.started())
            last = [line for line in late.output().decode("utf-8", "replace").splitlines()
                    if line.strip()][-1:]
            raise CliError(f"broker {late.broker_id} ({late.address}) did not start within "
                           f"{START_TIMEOUT_S:g}s (last logged: {last[0] if last else 'nothing'}"
                           f"); see {late.log_file}")
        signals.stop.wait(0.05)


def _wait_for_membership(brokers: list[_Broker], deadline: float, signals: _Signals) -> None:
    """Until every broker's Metadata lists every broker: the cluster is formed."""
    ids = {b.broker_id for b in brokers}
    for broker in brokers:
        admin = broker.admin()
        seen: set[int] = set()
        while True:
            broker.started()  # a CliError if it exited
            with contextlib.suppress(KafkaException):
                seen = set(admin.list_topics(timeout=2).brokers)
            if ids <= seen:
                break
            signals.check()
            if time.monotonic() > deadline:
                raise CliError(f"broker {broker.broker_id} ({broker.address}) sees brokers "
                               f"{sorted(seen)}, not {sorted(ids)}, after "
                               f"{START_TIMEOUT_S:g}s; see {broker.log_file}")
            signals.stop.wait(0.1)


def _watch(cluster: _Cluster, control: _Control, signals: _Signals) -> None:
    """Until Ctrl-C or SIGTERM: reports a broker that exits (killed on purpose, say, to
    watch a failover) once, and ZooKeeper's exit, and serves `restart-broker`."""
    zookeeper_exited = False
    while not signals.stop.wait(0.25):
        cluster.report_exits()
        if not zookeeper_exited and not cluster.zookeeper.is_running():
            zookeeper_exited = True
            print(f"ZooKeeper exited; see {cluster.zookeeper.log_file}", flush=True)
        for request in control.requests():
            try:
                _serve(cluster, request)
            except _Interrupted:
                request.answer("error", "`cluster up` is stopping")
                return
            finally:
                request.close()


def _serve(cluster: _Cluster, request: _Request) -> None:
    if request.broker_id is None:
        request.answer("error", request.problem)
        return
    broker_id = request.broker_id
    if broker_id not in cluster.brokers:
        request.answer("error", f"no broker {broker_id}: this cluster has "
                       f"{_brokers(sorted(cluster.brokers))}")
        return

    def say(text: str) -> None:
        print(text, flush=True)
        request.answer("progress", text)

    print(f"restarting broker {broker_id} (odradek cluster restart-broker)", flush=True)
    try:
        broker = cluster.restart(broker_id, say)
    except CliError as e:
        print(f"restarting broker {broker_id} failed: {e}", flush=True)
        request.answer("error", str(e))
        return
    print(broker.line(), flush=True)
    request.answer("ok", broker.line())


def _stop_brokers(brokers: list[_Broker], signals: _Signals) -> list[_Broker]:
    """Stops the running brokers in stop_order(), each once the next has seen the one
    before leave (the controller's news of it handled before that broker stops too);
    returns those that had to be killed."""
    by_id = {b.broker_id: b for b in brokers if b.running}
    order = [by_id[i] for i in stop_order(list(by_id), _controller(list(by_id.values())))]
    killed = []
    for position, broker in enumerate(order):
        if not broker.stop(signals):
            killed.append(broker)
        if position + 1 < len(order) and not signals.forced:
            _wait_gone(broker.broker_id, order[position + 1], signals)
    return killed


def _wait_gone(gone: int, broker: _Broker, signals: _Signals, timeout: float = 10.0) -> None:
    """Until `broker`'s Metadata no longer lists broker `gone`, for `timeout` at most."""
    if broker.port is None:
        return
    admin = broker.admin()
    deadline = time.monotonic() + timeout
    while broker.running and not signals.forced and time.monotonic() < deadline:
        with contextlib.suppress(KafkaException):
            if gone not in admin.list_topics(timeout=2).brokers:
                return
        time.sleep(0.05)


def _controller(brokers: list[_Broker]) -> int | None:
    """The controller's id, as the first broker that answers says; None if none does."""
    for broker in brokers:
        if broker.port is None:
            continue
        admin = broker.admin()
        try:
            controller: int = admin.list_topics(timeout=5).controller_id
        except KafkaException:
            continue
        return controller if controller >= 0 else None
    return None


# ---- restart-broker --------------------------------------------------------------------------

@command("cluster restart-broker")
def run_restart_broker(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    broker_id: int = args.broker_id
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with connection:
        try:
            with _control_address(data_dir) as address:
                connection.connect(address)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise CliError(f"no `odradek cluster up` runs on {data_dir}") from None
        except OSError as e:
            raise CliError(f"cannot reach the `cluster up` on {data_dir}: "
                           f"{e.strerror or e}") from e
        # Each line of the answer within a bound: the restart's own waits are bounded.
        connection.settimeout(RESTART_ANSWER_TIMEOUT_S)
        try:
            connection.sendall(f"restart-broker {broker_id}\n".encode())
            for line in connection.makefile("r", encoding="utf-8", errors="replace"):
                kind, _, text = line.rstrip("\n").partition(" ")
                if kind == "progress":
                    print(text, flush=True)
                elif kind == "ok":
                    print(text, flush=True)
                    return 0
                elif kind == "error":
                    raise CliError(text)
        except TimeoutError:
            raise CliError(f"no answer from the `cluster up` on {data_dir} within "
                           f"{RESTART_ANSWER_TIMEOUT_S:g}s; see its output") from None
        except OSError as e:
            raise CliError(f"the `cluster up` on {data_dir} went away: "
                           f"{e.strerror or e}") from e
    raise CliError(f"the `cluster up` on {data_dir} stopped before broker {broker_id} was "
                   "back")


# ---- status ----------------------------------------------------------------------------------

def partition_health(topics: Mapping[str, Any]
                     ) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """From librdkafka's topic metadata: how many partitions, and the rows of those
    under-replicated (a leader, but fewer replicas in sync than assigned) and offline
    (no leader)."""
    under_replicated: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    partitions = 0
    for name, topic in sorted(topics.items()):
        for p in sorted(topic.partitions.values(), key=lambda p: p.id):
            partitions += 1
            row = {"topic": name, "partition": p.id, "leader": p.leader if p.leader >= 0
                   else None, "replicas": list(p.replicas), "isr": list(p.isrs)}
            if p.leader < 0:
                offline.append(row)
            elif len(p.isrs) < len(p.replicas):
                under_replicated.append(row)
    return partitions, under_replicated, offline


@command("cluster status")
def run_status(args: argparse.Namespace) -> int:
    admin = AdminCommand(args)
    metadata = admin.metadata()
    cluster_id, controller, brokers = _describe_cluster(admin, metadata)
    partitions, under_replicated, offline = partition_health(metadata.topics)
    if args.json:
        print_json({"cluster_id": cluster_id, "controller": controller,
                    "brokers": brokers, "partitions": partitions,
                    "under_replicated": under_replicated, "offline": offline})
    else:
        _print_status(sys.stdout, cluster_id, controller, brokers, partitions,
                      under_replicated, offline)
    return EXIT_OFFLINE if offline else 0


def _describe_cluster(admin: AdminCommand, metadata: Any
                      ) -> tuple[str | None, int | None, list[dict[str, Any]]]:
    """The cluster id, the controller and the live brokers with their racks, through
    DescribeCluster; from the Metadata answer, without racks, where a broker does not
    speak DescribeCluster (Kafka before 2.8)."""
    described = admin.client.describe_cluster(request_timeout=admin.timeout)
    wait_all([described], admin.timeout, admin.client.poll, admin.errors)
    try:
        cluster = described.result()
    except KafkaException as e:
        if error_code(e) != KafkaError._UNSUPPORTED_FEATURE:
            raise CliError(admin.errors.explain(
                f"cannot describe the cluster: {describe_error(e)}")) from e
        controller = metadata.controller_id if metadata.controller_id >= 0 else None
        return metadata.cluster_id, controller, [
            {"id": b.id, "host": b.host, "port": b.port, "rack": None}
            for b in sorted(metadata.brokers.values(), key=lambda b: b.id)]
    controller = cluster.controller.id if cluster.controller is not None else None
    return cluster.cluster_id, controller, [
        {"id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
        for n in sorted(cluster.nodes, key=lambda n: n.id)]


def _print_status(out: TextIO, cluster_id: str | None, controller: int | None,
                  brokers: list[dict[str, Any]], partitions: int,
                  under_replicated: list[dict[str, Any]], offline: list[dict[str, Any]]
                  ) -> None:
    print(f"cluster {cluster_id or '-'}, controller: "
          f"{controller if controller is not None else 'none'}", file=out)
    print_table(["broker", "address", "rack"],
                [[b["id"] if b["id"] != controller else f"{b['id']} (controller)",
                  f"{b['host']}:{b['port']}", b["rack"]] for b in brokers], file=out)
    for title, rows in (("under-replicated", under_replicated), ("offline", offline)):
        if rows:
            print(f"\n{title} partitions:", file=out)
            print_table(["topic", "partition", "leader", "replicas", "isr"],
                        [[r["topic"], r["partition"], r["leader"], r["replicas"], r["isr"]]
                         for r in rows], file=out)
    print(f"\n{len(brokers)} brokers, {partitions} partitions: "
          f"{len(under_replicated)} under-replicated, {len(offline)} offline", file=out)
