"""Data files written by Spark tasks and committed once by the driver: Spark's own write pattern, with delta-rs.

A Spark write runs its tasks, each writing its data files, and the driver commits them all in one Delta commit.
Here a ``mapInArrow`` task that already holds the rows (the CDC parse holds every raw record of its Kafka range)
writes them as Parquet data files of a Delta table (:func:`write_files`) and returns each file's add action;
the driver collects those few rows and commits them once per batch (:meth:`DriverTable.commit_files_once`,
the batch's Delta transaction and marker). A task run again (a retry, a lost cache block recomputed) writes
new files; only the files of the collected add actions are committed, the others are never part of a version
and ``VACUUM`` removes them.

Why not Spark's append or one delta-rs task: the CDC batch's raw records are 10-18 KB each (before and after
images of TOASTed text), and either way every one of them was read from the cached batch and shipped to a writer
a second time after the parse (one task, 9-15 task-seconds a 100,000-record batch; docs/benchmarks.md).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import pyarrow as pa

    from spark_jobs.table_io.driver import TaskAppend

__all__ = ["FileTarget", "add_action", "file_stats", "file_target", "write_files"]

#: Column types whose min/max a data file's stats carry. Not timestamps: Delta keeps those to the millisecond and a
#: truncated maximum would let a reader skip a file holding a later microsecond; not binary (Delta keeps none).
_MIN_MAX_TYPES = ("int8", "int16", "int32", "int64", "date32[day]")
#: Delta's prefix length for string stats (``delta.dataSkippingStringPrefixLength``): longer values get none.
_STRING_STATS_MAX = 32


@dataclass(frozen=True)
class FileTarget:
    """A Delta table a Spark task writes data files to: its name, object-store ``uri`` and ``options`` (secrets: they
    travel in the task, over Spark's encrypted RPC; never printed), the Arrow ``schema`` of its columns in the
    table's order and its ``partition_by`` columns (each file holds one value of them, in its directory)."""

    name: str
    uri: str
    options: Mapping[str, str] = field(repr=False)
    schema: pa.Schema = field(repr=False)
    partition_by: tuple[str, ...] = ()


def _store(target: FileTarget) -> Any:
    from deltalake._internal import DeltaFileSystemHandler  # delta-rs's object store, as the table's own writes use it

    return DeltaFileSystemHandler(table_uri=target.uri, options=dict(target.options))


def _partition_dir(values: Mapping[str, str | None]) -> str:
    """Hive-style directory of one partition (its log values), as Delta and Spark name it (``ingest_date=2026-12-08``;
    NULL as Hive's default partition)."""
    return "/".join(f"{quote(name, safe='')}={quote('__HIVE_DEFAULT_PARTITION__' if v is None else v, safe='')}"
                    for name, v in values.items())


def file_stats(rows: pa.Table) -> str:
    """Delta's per-file statistics of ``rows`` (the file's own columns): ``numRecords``, ``nullCount`` of every
    column and ``minValues``/``maxValues`` of integer, date and short string columns (none for the others: a reader
    then scans the file, never skips it wrongly)."""
    import pyarrow.compute as pc

    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in rows.column_names:
        column = rows.column(name)
        nulls[name] = int(column.null_count)
        kind = str(column.type)
        if column.null_count == len(column) or not (kind in _MIN_MAX_TYPES or kind in ("string", "large_string")):
            continue
        low, high = pc.min_max(column).values()
        low_v, high_v = low.as_py(), high.as_py()
        if kind in ("string", "large_string") and (len(low_v) > _STRING_STATS_MAX or len(high_v) > _STRING_STATS_MAX):
            continue
        mins[name] = low_v.isoformat() if kind == "date32[day]" else low_v
        maxs[name] = high_v.isoformat() if kind == "date32[day]" else high_v
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      separators=(",", ":"))


def add_action(path: str, size: int, partition_values: Mapping[str, str | None], stats: str) -> str:
    """One add action as a JSON text (what a task returns to the driver)."""
    return json.dumps({"path": path, "size": size, "partitionValues": dict(partition_values),
                       "modificationTime": int(time.time() * 1000), "stats": stats}, separators=(",", ":"))


def write_files(target: FileTarget, rows: pa.Table) -> list[str]:
    """Write ``rows`` (the table's columns, any order) as Parquet data files of ``target``, one per value of its
    partition columns, not committed; returns their add actions (:func:`add_action`), for
    :meth:`~spark_jobs.table_io.driver.DriverTable.commit_files_once`."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if rows.num_rows == 0:
        return []
    rows = rows.select(target.schema.names).cast(target.schema)
    parts = list(target.partition_by)
    data_names = [n for n in target.schema.names if n not in parts]
    if parts:
        keys = rows.select(parts).group_by(parts).aggregate([]).to_pylist()
    else:
        keys = [{}]
    store = _store(target)
    adds: list[str] = []
    for key in keys:
        part = rows
        for name in parts:
            value = key[name]
            part = part.filter(pc.is_null(part[name]) if value is None else pc.equal(part[name], value))
        data = part.select(data_names)
        sink = pa.BufferOutputStream()
        dictionary = [n for n in data_names if not pa.types.is_binary(data.schema.field(n).type)]
        pq.write_table(data, sink, compression="snappy", use_dictionary=dictionary)
        body = sink.getvalue()
        values = {name: None if key[name] is None else str(key[name]) for name in parts}  # a date: YYYY-MM-DD
        directory = _partition_dir(values)
        path = f"{directory + '/' if directory else ''}part-{uuid.uuid4()}-c000.snappy.parquet"
        out = store.open_output_stream(path, None)
        out.write(body.to_pybytes())  # the object store takes bytes (one copy)
        out.close()
        adds.append(add_action(path, body.size, values, file_stats(data)))
    return adds


def file_target(table: TaskAppend) -> FileTarget:
    """:class:`FileTarget` of a table delta-rs writes (:func:`spark_jobs.table_io.driver.task_append`): its columns
    and partition columns as its log has them now."""
    opened = table.open()
    return FileTarget(table.name, table.uri, table.options, opened.arrow_schema,
                      tuple(opened.table.metadata().partition_columns))
