"""A real cluster for tests: broker processes on loopback coordinated by a real ZooKeeper.

Each broker is a `python -m odradek serve` process (support.broker.BrokerProcess) with its
own data directory, broker.id and port, and zookeeper.connect naming the test's chroot.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient

from support.broker import BrokerProcess
from support.wait import WAIT, wait_until


class Cluster:
    def __init__(self, directory: Path, zookeeper_connect: str, brokers: int = 3,
                 settings: dict[str, str] | None = None, host: str = "127.0.0.1") -> None:
        self.directory = directory
        self.zookeeper_connect = zookeeper_connect
        common = {"zookeeper.connect": zookeeper_connect,
                  "zookeeper.session.timeout.ms": "6000",
                  **(settings or {})}
        self.brokers: dict[int, BrokerProcess] = {
            i: BrokerProcess(directory / f"broker-{i}", {**common, "broker.id": str(i)},
                             host=host)
            for i in range(1, brokers + 1)}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.port)

    def start(self) -> Cluster:
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(BrokerProcess.start, self.brokers.values()))
        self.wait_for_brokers(set(self.brokers))
        return self

    def stop(self) -> None:
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.stop() if b.process and b.process.poll() is None
                          else None, self.brokers.values()))

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def pause(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        process = self.brokers[broker_id].process
        assert process is not None
        process.send_signal(signal.SIGCONT)

    def admin(self, broker_id: int | None = None) -> AdminClient:
        bootstrap = (self.brokers[broker_id].bootstrap if broker_id is not None
                     else self.bootstrap)
        return AdminClient({"bootstrap.servers": bootstrap})

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items()
                if b.process is not None and b.process.poll() is None]

    def wait_for_brokers(self, ids: set[int], timeout: float = WAIT) -> None:
        """Until every live broker's metadata lists exactly `ids`."""
        def agreed() -> bool:
            for i in self.live():
                try:
                    metadata = self.admin(i).list_topics(timeout=2)
                except Exception:
                    return False
                if set(metadata.brokers) != ids:
                    return False
            return True

        wait_until(agreed, timeout, f"brokers {sorted(ids)} in every broker's metadata")

    def partitions(self, topic: str, broker_id: int | None = None
                   ) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr) as a broker's Metadata shows it."""
        metadata = self.admin(broker_id).list_topics(topic, timeout=5)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            return {}
        return {p: (m.leader, list(m.replicas), list(m.isrs))
                for p, m in found.partitions.items()}

    def logs(self) -> str:
        return "".join(f"---- broker {i}\n{b.log_text()}" for i, b in self.brokers.items())


def running(c: Cluster) -> Iterator[Cluster]:
    """A started cluster for a fixture to yield: its logs shown if it fails to start, its
    brokers killed after the test, and no traceback in their logs."""
    try:
        c.start()
    except Exception:
        c.stop()
        print(c.logs())  # shown with the failure
        raise
    yield c
    for broker in c.brokers.values():
        broker.kill()
    text = c.logs()
    assert "Traceback" not in text, text
