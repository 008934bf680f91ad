"""PySpark data source for Odradek topics: `spark.read.format("odradek")`.

Register it once per session with `register(spark)` (or
`spark.dataSource.register(OdradekDataSource)`). See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from .options import OdradekOptionError
from .ranges import OdradekDataLossError, OffsetRange
from .source import OdradekDataSource

__all__ = ["OdradekDataLossError", "OdradekDataSource", "OdradekOptionError", "OffsetRange",
           "register"]


def register(spark: Any) -> None:
    """Registers the `odradek` format with a SparkSession."""
    spark.dataSource.register(OdradekDataSource)
