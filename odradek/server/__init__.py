"""The network layer: listeners, connections, framing and request dispatch."""
