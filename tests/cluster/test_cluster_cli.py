"""`odradek cluster up` and `odradek cluster status`, run as an operator runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from support.wait import WAIT, wait_until


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True,
                          text=True, timeout=60)


def test_cluster_up_status_and_stop(tmp_path: Path) -> None:
    up = subprocess.Popen(
        [sys.executable, "-m", "odradek", "cluster", "up", "--brokers", "3", "--port-base",
         "0", "--zookeeper-port", "0", "--data-dir", str(tmp_path / "local"),
         "--set", "zookeeper.session.timeout.ms=6000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert up.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(up.stdout or []), daemon=True)
    reader.start()
    try:
        bootstrap = wait_until(lambda: next((line.split()[1] for line in lines
                                             if line.startswith("bootstrap: ")), None),
                               2 * WAIT, "the bootstrap address")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("events", 3, 3)])["events"].result(30)

        def healthy() -> dict | None:
            status = odradek("cluster", "status", "--bootstrap-server", bootstrap, "--json")
            shown = json.loads(status.stdout) if status.returncode == 0 else None
            return shown if shown and shown["partitions"] >= 3 and not (
                shown["under_replicated"] or shown["offline"]) else None

        shown = wait_until(healthy, WAIT, "a healthy cluster")
        assert [b["id"] for b in shown["brokers"]] == [1, 2, 3]
        assert shown["controller"] in (1, 2, 3)
        text = odradek("cluster", "status", "--bootstrap-server", bootstrap)
        assert "3 brokers" in text.stdout and "0 under-replicated, 0 offline" in text.stdout
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(90)
    reader.join(5)
    assert code == 0, "".join(lines)
    assert lines[-1].strip() == "stopping", lines
    # Every broker stopped cleanly: each left its clean-shutdown marker.
    for i in (1, 2, 3):
        assert (tmp_path / "local" / f"broker-{i}" / ".kafka_cleanshutdown").exists()
