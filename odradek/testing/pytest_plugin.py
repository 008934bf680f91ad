"""The pytest plugin of odradek.testing (entry point `pytest11`: loaded wherever Odradek is
installed, nothing started until a test asks for a fixture).

Fixtures:
- `odradek_broker`: a fresh broker for one test (settings from `@pytest.mark.odradek(...)`).
- `odradek_broker_session`: one broker for the whole session, shared by the tests.
- `bootstrap_servers`: the session broker's address; use `odradek_topic` for names.
- `odradek_topic`: a topic name no other test uses (prefixed with the test's name), so tests
  sharing the session broker do not see each other's records.
- `odradek_cluster`: a 3-broker cluster on a private ZooKeeper, for one module (skipped when
  ZooKeeper is not installed).

Options: `--odradek-mode thread|process` (ini `odradek_mode`): where brokers run. A failing
test that used a broker gets the tail of that broker's log in its report.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator

import pytest

from odradek.testing.broker import EmbeddedBroker, EmbeddedCluster

LOG_TAIL_LINES = 60


def _rewrite_this_module_only() -> None:
    """pytest rewrites the asserts of every module of a plugin's distribution (installed from
    a wheel): of the whole broker here. Its modules would then be compiled by pytest's
    rewriter instead of loaded from the bytecode pip wrote, again in every session where
    bytecode is not written (PYTHONDONTWRITEBYTECODE, read-only site-packages): about 2 s
    more per session with a broker. Only this module's asserts are for tests. pytest has
    no public way to unmark a package; its hook's set is left alone if it is not there."""
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        if (type(finder).__name__ == "AssertionRewritingHook" and isinstance(marked, set)
                and "odradek" in marked):
            marked.discard("odradek")
            marked.add(__name__)


_rewrite_this_module_only()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("odradek", "Odradek embedded brokers")
    group.addoption("--odradek-mode", choices=("thread", "process"), default=None,
                    help="run the fixtures' brokers on a thread of this process (default) or "
                         "as child processes")
    parser.addini("odradek_mode", "thread or process: where the fixtures' brokers run",
                  default="thread")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "odradek(settings=None, **settings): Kafka settings (Kafka's names) for "
        "the test's odradek_broker, e.g. @pytest.mark.odradek({'num.partitions': 3})")


def _mode(config: pytest.Config) -> str:
    return str(config.getoption("--odradek-mode") or config.getini("odradek_mode"))


def _settings(request: pytest.FixtureRequest) -> dict[str, object]:
    settings: dict[str, object] = {}
    for marker in reversed(list(request.node.iter_markers("odradek"))):
        for given in marker.args:
            settings.update(given)
        settings.update(marker.kwargs)
    return settings


@pytest.fixture
def odradek_broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    """A broker of its own for this test, removed with its data afterwards."""
    with EmbeddedBroker(_settings(request), mode=_mode(request.config)) as broker:
        yield broker


@pytest.fixture(scope="session")
def odradek_broker_session(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    """One broker for the session (per xdist worker): cheap, shared; keep tests apart with
    odradek_topic."""
    with EmbeddedBroker(mode=_mode(request.config)) as broker:
        yield broker


@pytest.fixture
def bootstrap_servers(odradek_broker_session: EmbeddedBroker) -> str:
    return odradek_broker_session.bootstrap_servers


@pytest.fixture
def odradek_topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own: its name and a random part."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:180]
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def odradek_cluster(request: pytest.FixtureRequest) -> Iterator[EmbeddedCluster]:
    """Three brokers on a private ZooKeeper, for the tests of one module."""
    from odradek.cluster.zookeeper_server import ZooKeeperUnavailableError

    cluster = EmbeddedCluster(mode=_mode(request.config))
    try:
        cluster.start()
    except ZooKeeperUnavailableError as e:
        cluster.close()
        pytest.skip(f"odradek_cluster needs ZooKeeper: {e}")
    except BaseException:
        cluster.close()
        raise
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    report = yield
    if report.failed and report.when in ("setup", "call"):
        # The brokers among the test's fixtures (those it asked for, and theirs).
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, EmbeddedBroker | EmbeddedCluster):
                report.sections.append((f"odradek log ({value.bootstrap_servers})",
                                        value.log_tail(LOG_TAIL_LINES)))
    return report
