"""One partition's log on disk in Kafka's format, and the manager of all of a broker's logs."""
