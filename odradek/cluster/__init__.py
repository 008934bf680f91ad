"""Cluster metadata: topics, partition assignments and states, configs, producer id blocks.

One interface (`MetadataStore`), two stores: the embedded single-node store here, and
ZooKeeper (zookeeper/), where an elected KafkaController runs a replicated cluster.
"""
