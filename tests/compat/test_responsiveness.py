"""A real broker stays responsive while admin work runs (issue 14, part 4).

A probe sends ApiVersions over its own connection every 20 ms and times each round trip
while an admin client creates a topic of 2,000 partitions and deletes it, and a Metadata
request auto-creates 50 topics of 20 partitions. Before the fix the creation held the
event loop for seconds (log placement quadratic in the partitions, each partition's
files and fsyncs on the loop) and the deletion for longer (a cleaner checkpoint rewritten,
walking every log, for each partition), so every round trip meanwhile waited that long.
The bound is generous (1 s, where the broker now answers within milliseconds) so that a
loaded CI machine does not fail it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker import BrokerProcess
from test_wire import Wire

from odradek.protocol.messages.api_versions_request import ApiVersionsRequest
from odradek.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from odradek.protocol.messages.metadata_response import MetadataResponse

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 2000
AUTO_TOPICS, AUTO_PARTITIONS = 50, 20
BOUND_S = 1.0


class Probe(threading.Thread):
    """ApiVersions round trips, one every 20 ms: (sent at, seconds to the answer)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            wire = Wire(self.port)
            wire.sock.settimeout(60)
            try:
                while not self.stop.is_set():
                    sent = time.monotonic()
                    wire.call(ApiVersionsRequest(client_software_name="probe",
                                                 client_software_version="1"), 3)
                    self.samples.append((sent, time.monotonic() - sent))
                    time.sleep(0.02)
            finally:
                wire.close()
        except BaseException as e:  # the test reports it
            self.error = e

    def slowest(self, start: float, end: float) -> tuple[int, float]:
        """How many round trips overlapped [start, end), and the slowest of them."""
        inside = [rtt for sent, rtt in self.samples if sent < end and sent + rtt > start]
        return len(inside), max(inside, default=0.0)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", {
        "auto.create.topics.enable": "true", "num.partitions": str(AUTO_PARTITIONS)}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


def test_the_broker_answers_while_thousands_of_partitions_come_and_go(
        broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    probe = Probe(broker.port)
    probe.start()
    began = time.monotonic()
    steps: list[tuple[str, float, float]] = []

    def step(name: str, work: object) -> None:
        start = time.monotonic()
        for future in work.values():  # type: ignore[attr-defined]
            future.result(60)
        steps.append((name, start, time.monotonic()))

    try:
        time.sleep(0.3)
        step(f"create a topic of {PARTITIONS} partitions",
             admin.create_topics([NewTopic("big", PARTITIONS, 1)], request_timeout=60))
        step("delete it", admin.delete_topics(["big"], request_timeout=60))

        names = [f"auto-{i}" for i in range(AUTO_TOPICS)]
        start = time.monotonic()
        wire = Wire(broker.port)
        wire.sock.settimeout(60)
        try:
            response = wire.call(MetadataRequest(
                topics=[MetadataRequestTopic(name=n) for n in names],
                allow_auto_topic_creation=True), 9)
        finally:
            wire.close()
        assert isinstance(response, MetadataResponse)
        assert {t.name: len(t.partitions) for t in response.topics} == dict.fromkeys(
            names, AUTO_PARTITIONS)
        steps.append((f"auto-create {AUTO_TOPICS} topics", start, time.monotonic()))
        step(f"delete {AUTO_TOPICS} topics", admin.delete_topics(names, request_timeout=60))
        time.sleep(0.3)
    finally:
        probe.stop.set()
        probe.join(60)
    assert probe.error is None, probe.error
    figures = [(name, end - start, *probe.slowest(start, end)) for name, start, end in steps]
    report = "\n".join(f"{name}: {seconds:.2f} s, {count} round trips, slowest "
                       f"{slowest * 1000:.0f} ms" for name, seconds, count, slowest in figures)
    for _, _, count, slowest in figures:
        assert count >= 1 and slowest < BOUND_S, report
    assert time.monotonic() - began < 60, report
