"""`odradek cluster`: a local cluster on loopback (`up`) and a cluster's health (`status`).

`up` runs a private ZooKeeper (odradek.cluster.zookeeper_server, from Debian's package)
and N `odradek serve` brokers on it, each with its own data directory and log file under
--data-dir, prints the bootstrap address once every broker sees every other, and stops
them all (brokers first, with a controlled shutdown each, then ZooKeeper) on Ctrl-C or
SIGTERM. Started again with the same --data-dir, it keeps its data.

`status` asks any cluster (Odradek or Apache Kafka) through librdkafka: the cluster id,
the controller, the live brokers, and the partitions that are under-replicated (an ISR
smaller than the replica set) or offline (no leader).
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from odradek.cli.client import (
    EXIT_FAILURE,
    AdminCommand,
    CliError,
    command,
    common_options,
    describe_error,
    key_value,
    positive_int,
    wait_all,
)
from odradek.cli.output import print_json, print_table
from odradek.cluster.zookeeper_server import ZooKeeperServer, ZooKeeperUnavailableError

_LISTENING = re.compile(r"listening on PLAINTEXT://[^:]*:(\d+)")
_STARTED = re.compile(r"broker \d+ started")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = commands.add_parser("cluster", help="run a local cluster; show a cluster's health")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start ZooKeeper and N brokers on loopback, in the "
                            "foreground until Ctrl-C")
    up.add_argument("--brokers", type=positive_int, default=3, metavar="N",
                    help="how many brokers (default 3)")
    up.add_argument("--data-dir", default="odradek-cluster", metavar="DIR",
                    help="ZooKeeper's and the brokers' data and logs (default "
                    "./odradek-cluster); kept between runs")
    up.add_argument("--port-base", type=int, default=9092, metavar="PORT",
                    help="broker i listens on PORT+i-1 (default 9092); 0: free ports")
    up.add_argument("--zookeeper-port", type=int, default=2181, metavar="PORT",
                    help="ZooKeeper's client port (default 2181); 0: a free port")
    up.add_argument("--set", dest="settings", metavar="KEY=VALUE", action="append",
                    default=[], help="a broker setting for every broker (repeatable)")
    up.set_defaults(run=run_up)

    status = actions.add_parser("status", parents=[common_options()],
                                help="brokers, controller, under-replicated and offline "
                                "partitions")
    status.set_defaults(run=run_status)


# ---- up --------------------------------------------------------------------------------------

class _Broker:
    """One `odradek serve` process; its stderr goes to a log file, which it is read from
    for the port it bound and its start."""

    def __init__(self, broker_id: int, data_dir: Path, settings: dict[str, str]) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.log_file = data_dir.with_suffix(".log")
        argv = [sys.executable, "-m", "odradek", "serve"]
        for key, value in settings.items():
            argv += ["--set", f"{key}={value}"]
        self._log: TextIO = self.log_file.open("a", encoding="utf-8")
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log,
                                        start_new_session=True)  # Ctrl-C is ours to relay
        self._offset = self._log.tell()
        self.port: int | None = None

    def wait_started(self, deadline: float) -> None:
        text = ""
        while time.monotonic() < deadline:
            text = self.log_file.read_text(encoding="utf-8", errors="replace")[self._offset:]
            if (m := _LISTENING.search(text)) is not None:
                self.port = int(m.group(1))
            if _STARTED.search(text) and self.port is not None:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        tail = "\n".join(text.splitlines()[-15:])
        raise CliError(f"broker {self.broker_id} did not start (log: {self.log_file}):\n{tail}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


@command("cluster up")
def run_up(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).absolute()
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = dict(key_value(s, "--set") for s in args.settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        zookeeper = ZooKeeperServer(data_dir / "zookeeper", args.zookeeper_port).start()
    except ZooKeeperUnavailableError as e:
        raise CliError(f"cannot start ZooKeeper: {e}") from e
    brokers: list[_Broker] = []
    try:
        for i in range(1, args.brokers + 1):
            port = 0 if args.port_base == 0 else args.port_base + i - 1
            brokers.append(_Broker(i, data_dir / f"broker-{i}", {
                "broker.id": str(i), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "log.dirs": str(data_dir / f"broker-{i}"),
                "zookeeper.connect": f"{zookeeper.connect_string}/odradek", **settings}))
        deadline = time.monotonic() + START_TIMEOUT_S
        for broker in brokers:
            broker.wait_started(deadline)
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
        _wait_for_membership(brokers, deadline)
        print(f"zookeeper: {zookeeper.connect_string}/odradek", flush=True)
        for broker in brokers:
            print(f"broker {broker.broker_id}: 127.0.0.1:{broker.port}, pid "
                  f"{broker.process.pid}, log {broker.log_file}", flush=True)
        print(f"bootstrap: {bootstrap}", flush=True)
        exited: set[int] = set()
        while not stop.wait(0.5):
            for broker in brokers:  # killed on purpose, say, to watch a failover: said once
                if broker.broker_id not in exited and broker.process.poll() is not None:
                    exited.add(broker.broker_id)
                    print(f"broker {broker.broker_id} exited with status "
                          f"{broker.process.returncode}; see {broker.log_file}", flush=True)
        print("stopping", flush=True)
    finally:
        threads = [threading.Thread(target=b.stop) for b in brokers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        zookeeper.stop()
    return 0


def _wait_for_membership(brokers: list[_Broker], deadline: float) -> None:
    """Until every broker's Metadata lists every broker: the cluster is formed."""
    ids = {b.broker_id for b in brokers}
    for broker in brokers:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}", "log_level": 0})
        while True:
            try:
                if set(admin.list_topics(timeout=2).brokers) == ids:
                    break
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise CliError(f"broker {broker.broker_id} does not see brokers {sorted(ids)}; "
                               f"see {broker.log_file}")
            time.sleep(0.1)


# ---- status ----------------------------------------------------------------------------------

@command("cluster status")
def run_status(args: argparse.Namespace) -> int:
    admin = AdminCommand(args)
    described = admin.client.describe_cluster(request_timeout=admin.timeout)
    wait_all([described], admin.timeout, admin.client.poll, admin.errors)
    try:
        cluster = described.result()
        metadata = admin.client.list_topics(timeout=admin.timeout)
    except KafkaException as e:
        raise CliError(admin.errors.explain(describe_error(e))) from e
    under_replicated: list[dict[str, Any]] = []
    offline: list[dict[str, Any]] = []
    partitions = 0
    for name, topic in sorted(metadata.topics.items()):
        for p in sorted(topic.partitions.values(), key=lambda p: p.id):
            partitions += 1
            row = {"topic": name, "partition": p.id, "leader": p.leader,
                   "replicas": list(p.replicas), "isr": list(p.isrs)}
            if p.leader < 0:
                offline.append(row)
            elif len(p.isrs) < len(p.replicas):
                under_replicated.append(row)
    controller = cluster.controller.id if cluster.controller is not None else None
    brokers = [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack}
               for n in sorted(cluster.nodes, key=lambda n: n.id)]
    if args.json:
        print_json({"cluster_id": cluster.cluster_id, "controller": controller,
                    "brokers": brokers, "partitions": partitions,
                    "under_replicated": under_replicated, "offline": offline})
    else:
        print(f"cluster {cluster.cluster_id}, controller: "
              f"{controller if controller is not None else 'none'}")
        print_table(["BROKER", "ADDRESS", "RACK"],
                    [[b["id"] if b["id"] != controller else f"{b['id']} (controller)",
                      f"{b['host']}:{b['port']}", b["rack"] or "-"] for b in brokers])
        for title, rows in (("under-replicated", under_replicated), ("offline", offline)):
            if rows:
                print(f"\n{title} partitions:")
                print_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
                            [[r["topic"], r["partition"], r["leader"],
                              ",".join(map(str, r["replicas"])), ",".join(map(str, r["isr"]))]
                             for r in rows])
        print(f"\n{len(brokers)} brokers, {partitions} partitions: "
              f"{len(under_replicated)} under-replicated, {len(offline)} offline")
    return EXIT_FAILURE if offline else 0
