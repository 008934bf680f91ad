"""Odradek in other people's tests: a real Kafka-compatible broker, started in a fraction of
a second, without Docker or a JVM (docs/testing.md).

    from odradek.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:
        broker.create_topic("orders", partitions=3)
        app = MyApp(bootstrap_servers=broker.bootstrap_servers)
        ...
        assert [r.text for r in broker.consume("orders-out")] == ["..."]

The pytest plugin (odradek.testing.pytest_plugin, loaded by pytest through the package's
`pytest11` entry point) gives the fixtures `odradek_broker`, `odradek_broker_session`,
`odradek_cluster` and `bootstrap_servers`.
"""

from odradek.testing.broker import BrokerError, EmbeddedBroker, EmbeddedCluster, Record

__all__ = ["BrokerError", "EmbeddedBroker", "EmbeddedCluster", "Record"]
