"""The broker's Prometheus metrics, named as the Prometheus JMX exporter's standard Kafka
rules name Kafka's MBeans (docs/operations.md, "Metrics").

- stats.py: what the hot paths count, as plain Python ints (BrokerTopicStats,
  RequestMetrics): no locks, no prometheus_client objects on the request path.
- collectors.py: prometheus_client collectors that read those counters and the broker's
  state (partitions, logs, purgatories, controller, groups) when scraped; no threads.
- broker_metrics.py: BrokerMetrics, one broker's registry and its exposition.

stats.py imports nothing of ours, so the broker and server layers can use it; the
collectors read the broker's components without importing them.
"""
