"""Fixtures of the Spark tests: one SparkSession (local[2]) for the whole run, one broker
process per module (and a schema registry process beside it for the tests that ask for
`registry`). Helpers to make topics and records are in support/spark.py.

Spark's start-up takes seconds, so every Spark test in the run shares the `spark` session;
each test uses topics of its own. Its JVM compiles with the client compiler only (JIT_OPTIONS):
the tests' queries are small and short, and on two cores the server compiler's work cost
more than it gained (a session's start and first queries took about twice as long).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from support.broker import BrokerProcess
from support.registry import RegistryProcess, running_registry

from odradek.spark import register

# For a test JVM: C1 only, no C2 (the results are the same; only the JIT's work differs).
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker"),
                            {"auto.create.topics.enable": "false"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture(scope="module")
def registry(broker: BrokerProcess) -> Iterator[RegistryProcess]:
    """A schema registry process on the module's broker (started by the tests that ask)."""
    yield from running_registry(broker.bootstrap)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("odradek-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.extraJavaOptions", JIT_OPTIONS)
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
