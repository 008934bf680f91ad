"""The schema registry: Confluent's REST API over the _schemas topic."""
