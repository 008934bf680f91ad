"""One real broker process for the compatibility tests of a session, on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.broker import BrokerProcess


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"),
                            {"auto.create.topics.enable": "true"}).start()
    yield process
    process.stop()
    log = process.log_text()
    # Whatever the tests did, the broker never met an error it did not expect.
    assert "Traceback" not in log, log


@pytest.fixture
def fresh_broker(tmp_path) -> Iterator[BrokerProcess]:  # type: ignore[no-untyped-def]
    """A broker of the test's own, for tests that stop, kill or restart it."""
    process = BrokerProcess(tmp_path / "data").start()
    yield process
    process.kill()
