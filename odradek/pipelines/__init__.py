"""The classic pipelines on Spark, runnable with `odradek pipeline run NAME`.

Each pipeline is a function `run(spark, config)` that starts its streaming queries and
returns them (or, for the batch `reprocess`, returns its result), and has a seedable
generator of realistic input, `generate(bootstrap, topic, count, rate, seed, start)`. See
docs/pipelines.md. Importing this package does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.pipelines import activity, logs, mirror, reprocess, route
from odradek.pipelines.common import Record


@dataclass(frozen=True)
class Pipeline:
    name: str
    summary: str
    config: type
    run: Callable[[Any, Any], Any]
    generate: Callable[..., list[Record]]
    topic: str                  # where the generator writes by default: the input
    streaming: bool = True
    registry: bool = False      # its generator registers schemas (--schema-registry-url)


PIPELINES = {p.name: p for p in [
    Pipeline("activity", activity.SUMMARY, activity.ActivityConfig, activity.run,
             activity.generate, activity.TOPIC, registry=True),
    Pipeline("logs", logs.SUMMARY, logs.LogsConfig, logs.run, logs.generate, logs.TOPIC),
    Pipeline("reprocess", reprocess.SUMMARY, reprocess.ReprocessConfig, reprocess.run,
             reprocess.generate, reprocess.TOPIC, streaming=False),
    Pipeline("route", route.SUMMARY, route.RouteConfig, route.run, route.generate, route.TOPIC),
    Pipeline("mirror", mirror.SUMMARY, mirror.MirrorConfig, mirror.run, mirror.generate,
             mirror.TOPIC),
]}

__all__ = ["PIPELINES", "Pipeline", "Record"]
