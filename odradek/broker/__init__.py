"""The broker: request handlers over the ReplicaManager and the topic metadata."""
