"""Fixtures of the Spark tests: one SparkSession (local[2]) for the whole run, one broker
process per module. Helpers to make topics and records are in support/spark.py.

Spark's start-up takes seconds, so every Spark test in the run shares the `spark` session;
each test uses topics of its own.
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

from odradek.spark import register


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker"),
                            {"auto.create.topics.enable": "false"}).start()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text(), process.log_text()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("odradek-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
