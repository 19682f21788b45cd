"""Data files written by tasks, committed once by the driver (``spark_jobs.table_io.task_files``)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.table_io.driver import DriverTable
from spark_jobs.table_io.task_files import FileTarget, file_stats, write_files

SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
                    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
                    pa.field("kafka_timestamp", pa.timestamp("us", tz="UTC")),
                    pa.field("ingest_time", pa.timestamp("us", tz="UTC")), pa.field("ingest_date", pa.date32())])


def _rows(offsets: range, day: date = date(2026, 12, 8), partition: int = 0) -> pa.Table:
    t = datetime(2026, 12, 8, 1, 2, 3, 456789, tzinfo=UTC)
    return pa.Table.from_pylist([{"key": b"k%d" % o, "value": b"v" * 5000 if o % 2 else None, "topic": "shop.public.t",
                                  "partition": partition, "offset": o, "kafka_timestamp": t, "ingest_time": t,
                                  "ingest_date": day} for o in offsets], schema=SCHEMA)


def _bronze(tmp_path: Path) -> tuple[DriverTable, FileTarget]:
    uri = str(tmp_path / "bronze")
    write_deltalake(uri, pa.Table.from_pylist([], schema=SCHEMA), mode="error", partition_by=["ingest_date"])
    return DriverTable(None, "bronze.t", uri=uri), FileTarget("bronze.t", uri, {}, SCHEMA, ("ingest_date",))


def test_files_written_by_tasks_are_one_commit_of_every_row(tmp_path: Path) -> None:
    table, target = _bronze(tmp_path)
    adds = [*write_files(target, _rows(range(0, 30))),  # "task" 1
            *write_files(target, _rows(range(30, 50), day=date(2026, 12, 9), partition=1)),  # "task" 2: another day
            *write_files(target, _rows(range(50, 50)))]  # an empty task writes nothing
    assert len(adds) == 2
    assert table.commit_files_once(adds, "q", 4) is True
    got = DeltaTable(table.uri).to_pyarrow_table()
    assert got.num_rows == 50
    assert sorted(got.column("offset").to_pylist()) == list(range(50))
    assert got.sort_by("offset").to_pylist() == _rows(range(0, 30)).to_pylist() + _rows(
        range(30, 50), day=date(2026, 12, 9), partition=1).to_pylist()
    assert DeltaTable(table.uri).transaction_version("q:bronze.t") == 4
    assert {tuple(sorted(p.items())) for p in DeltaTable(table.uri).partitions()} == {
        (("ingest_date", "2026-12-08"),), (("ingest_date", "2026-12-09"),)}


def test_a_batch_already_committed_is_not_committed_again(tmp_path: Path) -> None:
    table, target = _bronze(tmp_path)
    assert table.commit_files_once(write_files(target, _rows(range(10))), "q", 1) is True
    again = write_files(target, _rows(range(10)))  # the batch run again after a crash: new files
    assert table.commit_files_once(again, "q", 1) is False
    assert table.commit_files_once(again, "q", 0) is False
    assert DeltaTable(table.uri).to_pyarrow_table().num_rows == 10
    assert table.commit_files_once(write_files(target, _rows(range(10, 12))), "q", 2) is True
    assert DeltaTable(table.uri).to_pyarrow_table().num_rows == 12


def test_stats_are_exact_where_given_and_absent_where_they_could_mislead() -> None:
    rows = _rows(range(7, 12)).drop_columns(["ingest_date"])
    stats = json.loads(file_stats(rows))
    assert stats["numRecords"] == 5
    assert stats["minValues"] == {"topic": "shop.public.t", "partition": 0, "offset": 7}
    assert stats["maxValues"] == {"topic": "shop.public.t", "partition": 0, "offset": 11}
    assert stats["nullCount"] == {"key": 0, "value": 2, "topic": 0, "partition": 0, "offset": 0, "kafka_timestamp": 0,
                                  "ingest_time": 0}
    long_topic = rows.set_column(2, "topic", pa.array(["t" * 40] * 5))
    assert "topic" not in json.loads(file_stats(long_topic))["minValues"]


def test_spark_reads_the_committed_files_and_skips_by_their_stats(tmp_path: Path, spark: Any) -> None:
    table, target = _bronze(tmp_path)
    assert table.commit_files_once([*write_files(target, _rows(range(0, 100))),
                                    *write_files(target, _rows(range(100, 200), partition=1))], "q", 0)
    frame = spark.read.format("delta").load(table.uri)
    assert frame.count() == 200
    assert frame.where("partition = 1 AND offset >= 150").count() == 50
    got = frame.where("offset = 33").collect()[0]
    assert (bytes(got["key"]), got["ingest_date"], got["kafka_timestamp"].microsecond) == (b"k33", date(2026, 12, 8),
                                                                                         456789)


def test_a_target_of_other_columns_is_refused(tmp_path: Path) -> None:
    _table, target = _bronze(tmp_path)
    with pytest.raises(KeyError):
        write_files(target, _rows(range(3)).drop_columns(["topic"]))
