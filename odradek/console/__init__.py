"""The web console: a page for people on each broker's HTTP listener (http.listeners).

- routes.py: Console, the page and its JSON API (reads, and the writes behind a setting).
- cluster_client.py: ConsoleClient, what the console asks of the cluster over the Kafka
  protocol (sizes, offsets, records, groups, configs) and the writes it makes.
- history.py: MetricsHistory, the ring buffer of recent samples the charts draw.
- static/: the page, its script and style, and the vendored uPlot charts.

`console_for(server)` builds the whole for a started broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.console.cluster_client import LATEST, ConsoleClient
from odradek.console.history import MetricsHistory, total_lag
from odradek.console.routes import Console

if TYPE_CHECKING:
    from odradek.broker.inter_broker_security import InterBrokerSecurity
    from odradek.broker.kafka_server import KafkaServer

MAX_SAMPLED_GROUPS = 500  # the groups whose lag one history sample keeps


def console_for(server: KafkaServer, security: InterBrokerSecurity | None) -> Console:
    """The console of a broker whose components have started; its history sampling starts
    with it. `security`: how the console connects to the brokers (the inter-broker
    listener's TLS and SASL)."""
    config = server.config
    assert server.metadata_cache is not None
    client = ConsoleClient(server.metadata_cache, config.inter_broker_listener_name,
                           client_id=f"broker-{config.node_id}-console", security=security,
                           request_timeout_ms=config.get("request.timeout.ms"))

    async def group_lag() -> dict[str, int | None]:
        """The total lag of each group this broker coordinates: high watermarks of the
        partitions led here, the others' from their leaders."""
        coordinator, rm = server.group_coordinator, server.replica_manager
        if coordinator is None or rm is None:
            return {}
        groups = [g for g in list(coordinator.manager.groups.values())
                  if str(g.state) != "Dead" and g.offsets][:MAX_SAMPLED_GROUPS]
        committed = {g.group_id: {tp: c.offset for tp, c in list(g.offsets.items())}
                     for g in groups}
        wanted = {tp for offsets in committed.values() for tp in offsets}
        ends: dict[tuple[str, int], int] = {}
        for tp in wanted:
            partition = rm.partitions.get(tp)
            if partition is not None and partition.is_leader:
                ends[tp] = partition.high_watermark
        missing = wanted - set(ends)
        remote = await client.list_offsets(missing, LATEST) if missing else {}
        ends.update(remote)
        # /metrics' group lag takes them too (odradek/metrics/collectors.py).
        known = server.metrics.remote_high_watermarks
        known.clear()
        known.update(remote)
        return {group_id: total_lag(offsets, ends) for group_id, offsets in committed.items()}

    history = MetricsHistory(server.metrics.topic_stats, server.metrics.requests,
                             lag=group_lag,
                             interval_s=config.get("http.console.history.interval.ms") / 1000)
    history.start()
    return Console(server, client, history,
                   write_enabled=config.get("http.console.write.enabled"))
