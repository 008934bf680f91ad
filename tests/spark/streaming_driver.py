"""A Spark streaming application of its own, for test_streaming_restart.py: the test SIGKILLs
it mid-batch and starts it again from its checkpoint.

    python streaming_driver.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT [--max-offsets N]
        [--available-now] [--slow-partition P --slow-ms MS] [--deadline S] [--sink-topic]

It starts its own SparkSession (local[2], PYSPARK_PYTHON = this interpreter), registers the
odradek format and runs readStream format odradek (startingOffsets earliest) -> writeStream
parquet to OUTPUT with CHECKPOINT, writing each record's partition, offset and value. With
--sink-topic, OUTPUT is a topic: the odradek sink writes each record's value to it (exactly
once, the sink's default).

--slow-partition P --slow-ms MS: the task that writes partition P's records of a micro-batch
pauses MS before it writes them, while the other partition's task writes its file at once.
So for most of each micro-batch, one Parquet file of the batch is on disk but the batch is not
committed (the file sink's _spark_metadata log does not list it yet, commits/N is missing):
a kill then is a kill in the middle of writing a batch.

Without --available-now the query runs until it is killed (or --deadline seconds pass: exit
status 3); with it, the query reads what is in the topic at its start and the program exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def slow_partition(partition: int, pause_ms: int) -> Any:
    """A mapInArrow function: passes batches through, pausing before the first one that holds
    records of `partition`."""
    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        paused = False
        for batch in batches:
            if not paused and batch.num_rows and pc.any(
                    pc.equal(batch.column("partition"), partition)).as_py():
                time.sleep(pause_ms / 1000)
                paused = True
            yield batch
    return run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "output", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--max-offsets", type=int, default=None)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--slow-partition", type=int, default=None)
    parser.add_argument("--slow-ms", type=int, default=0)
    parser.add_argument("--deadline", type=float, default=300)
    parser.add_argument("--sink-topic", action="store_true")
    args = parser.parse_args(argv)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("odradek-streaming-driver")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")
             # As the tests' own session (conftest.py's JIT_OPTIONS): C1 only, a faster start.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)

    reader = (spark.readStream.format("odradek")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic)
              .option("startingOffsets", "earliest"))
    if args.max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    df = reader.load().selectExpr("partition", "offset", "cast(value as string) as value")
    if args.slow_partition is not None:
        df = df.mapInArrow(slow_partition(args.slow_partition, args.slow_ms), df.schema)
    if args.sink_topic:
        writer = (df.select("value").writeStream.format("odradek")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("topic", args.output))
    else:
        writer = df.writeStream.format("parquet").option("path", args.output)
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print(f"started query {query.id}", flush=True)
    try:
        finished = query.awaitTermination(args.deadline)
    except Exception as e:   # StreamingQueryException: the query failed
        print(f"query failed: {e}", file=sys.stderr, flush=True)
        return 2
    if not finished:
        print(f"still running after {args.deadline} s", file=sys.stderr, flush=True)
        query.stop()
        return 3
    print(f"finished: {[p['numInputRows'] for p in query.recentProgress]}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
