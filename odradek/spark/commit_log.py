"""The exactly-once sink's commit log: which micro-batch's transactions it is committing or
has committed, kept next to Spark's own logs in the query's checkpoint.

    <checkpointLocation>/odradek-sink/<batchId>.json
        {"version": 1, "batch": 7, "state": "committing" | "committed",
         "transactions": [["<prefix>-0", 4001, 12], ...]}   # id, producer id, epoch

"committing" is written before the first EndTxn and "committed" after the last, so a driver
that dies between them leaves a record that the next run completes before any task starts
(a task's init_transactions would abort the transaction instead). A micro-batch at or below
the last committed one is a replay: Spark had not yet recorded the batch when the driver
died, and the sink must not write it again.

Files go through pyarrow's filesystems, so a checkpoint on HDFS, S3 or GCS works as a local
one does; each record is written to a temporary name and moved into place.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

from .transactions import ProducerHandle

DIRECTORY = "odradek-sink"
VERSION = 1
RETAIN = 100   # records kept, as Spark keeps spark.sql.streaming.minBatchesToRetain


@dataclass(frozen=True)
class CommitRecord:
    batch: int
    committed: bool
    transactions: tuple[ProducerHandle, ...]

    def to_json(self) -> bytes:
        return json.dumps({
            "version": VERSION, "batch": self.batch,
            "state": "committed" if self.committed else "committing",
            "transactions": [[h.transactional_id, h.producer_id, h.producer_epoch]
                             for h in self.transactions]}).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> CommitRecord:
        try:
            record = json.loads(data)
            if record["version"] != VERSION:
                raise ValueError(f"version {record['version']}, this reads {VERSION}")
            return cls(int(record["batch"]), record["state"] == "committed",
                       tuple(ProducerHandle(str(t), int(p), int(e))
                             for t, p, e in record["transactions"]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"the odradek sink's commit record {where} is unreadable: "
                             f"{e}") from None


class CommitLog:
    def __init__(self, checkpoint_location: str) -> None:
        from pyarrow import fs

        if "://" in checkpoint_location:
            self.fs, root = fs.FileSystem.from_uri(checkpoint_location)
        else:
            self.fs, root = fs.LocalFileSystem(), os.path.abspath(
                checkpoint_location.removeprefix("file:"))
        self.directory = f"{root.rstrip('/')}/{DIRECTORY}"

    def _batches(self) -> list[int]:
        from pyarrow import fs

        selector = fs.FileSelector(self.directory, allow_not_found=True)
        return sorted(int(info.base_name[:-5]) for info in self.fs.get_file_info(selector)
                      if info.base_name.endswith(".json") and info.base_name[:-5].isdigit())

    def path(self, batch: int) -> str:
        return f"{self.directory}/{batch}.json"

    def latest(self) -> CommitRecord | None:
        batches = self._batches()
        if not batches:
            return None
        path = self.path(batches[-1])
        with self.fs.open_input_stream(path) as stream:
            return CommitRecord.from_json(stream.read(), path)

    def write(self, record: CommitRecord) -> None:
        self.fs.create_dir(self.directory, recursive=True)
        temporary = f"{self.directory}/.{record.batch}.{uuid.uuid4().hex}.tmp"
        stream: Any
        with self.fs.open_output_stream(temporary) as stream:
            stream.write(record.to_json())
        self.fs.move(temporary, self.path(record.batch))
        for old in self._batches()[:-RETAIN]:
            self.fs.delete_file(self.path(old))
