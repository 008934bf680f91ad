"""/health/ready on each broker of a ZooKeeper cluster (the listener itself:
tests/compat/test_http_listener.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from support.cluster import Cluster
from support.wait import WAIT, wait_until


def readiness(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready",
                                    timeout=WAIT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_broker_of_a_cluster_is_ready(tmp_path: Path, connect: str) -> None:
    cluster = Cluster(tmp_path, connect, brokers=3,
                      settings={"http.listeners": "http://127.0.0.1:0"})
    try:
        cluster.start()
        ports = {i: b.http_port for i, b in cluster.brokers.items()}
        assert all(ports.values()) and len(set(ports.values())) == 3, ports
        for broker_id, port in ports.items():
            assert port is not None
            body = wait_until(lambda port=port: (r := readiness(port))[0] == 200 and r[1],
                              WAIT, f"broker {broker_id} ready")
            assert body["broker"] == broker_id and body["mode"] == "zookeeper", body
            assert set(body["checks"].values()) == {"ok"}, body
        # A broker that stops says it is not ready, while its listeners still serve.
        stopping = cluster.brokers[3]
        assert stopping.process is not None
        stopping.process.terminate()
        port = ports[3]
        assert port is not None
        seen = []

        def not_ready() -> bool:
            try:
                seen.append(readiness(port))
            except (OSError, ValueError):  # stopped already: the listener is gone
                return True
            return seen[-1][0] == 503

        wait_until(not_ready, WAIT, "broker 3 not ready")
        if seen and seen[-1][0] == 503:
            assert "listeners: the broker is shutting down" in seen[-1][1]["reasons"], seen[-1]
        stopping.stop()
    finally:
        for broker in cluster.brokers.values():
            broker.kill()
    text = cluster.logs()
    assert "Traceback" not in text, text
