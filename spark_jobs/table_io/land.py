"""The CDC parse tasks land the raw records in bronze as they parse them: each record is read from Kafka and
shipped to Python once per batch.

:func:`parse_and_land_frame` is :func:`spark_jobs.silver.cdc.parse_tables_frame` with the landing:
:func:`land_and_parse` wraps the parse's ``mapInArrow`` body (:func:`spark_jobs.silver.cdc.parse_tables_body`):
for every Arrow batch of raw Kafka rows it writes each topic's rows as data files of its ``bronze.<topic>`` table
(:func:`spark_jobs.table_io.task_files.write_files`, not committed), then yields the parsed rows. Beside them it
yields a few *landed* rows (column :data:`LANDED`, every other column NULL): one per data file written (its add
action, for the driver's one commit per table) and one per Kafka partition the task read (records and the newest
offset, what the batch's progress and ``lake stream status`` report). Parsed rows have :data:`LANDED` NULL.

Before, the batch's raw rows were cached in the JVM and a single task shipped all of them to Python again to
append bronze (9-15 task-seconds a 100,000-record batch of 10-18 KB records, the longest task of a catch-up batch;
docs/benchmarks.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.table_io.task_files import FileTarget, write_files

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = ["LANDED", "LANDED_SCHEMA", "Landing", "land_and_parse", "landed_row", "parse_and_land_frame"]

#: The column of a landed row (a JSON object; NULL on every parsed row).
LANDED = "_landed"
#: Spark DDL of a landed row's JSON: ``kind`` "add" (``table``, ``add``: the add action) or "read" (``topic``,
#: ``partition``, ``records``, ``newest_offset``).
LANDED_SCHEMA = ("kind STRING, table STRING, add STRING, topic STRING, partition INT, records BIGINT, "
                 "newest_offset BIGINT")


@dataclass(frozen=True)
class Landing:
    """Where the parse lands each topic's raw records (``targets``: topic -> its bronze table) and the batch's
    ingest time (``ingest_us``: microseconds since the epoch; bronze's ``ingest_time`` and ``ingest_date``)."""

    targets: Mapping[str, FileTarget]
    ingest_us: int


def landed_row(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


def _bronze_rows(rows: pa.RecordBatch, ingest_us: int) -> pa.Table:
    """Raw Kafka rows -> bronze columns (``ingest_time`` and ``ingest_date`` the batch's)."""
    import pyarrow as pa

    n = rows.num_rows
    ingest = datetime.fromtimestamp(ingest_us / 1_000_000, UTC)
    table = pa.Table.from_batches([rows])
    return table.append_column("ingest_time", pa.array([ingest_us] * n, pa.int64()).cast(
        pa.timestamp("us", tz="UTC"))).append_column("ingest_date", pa.array([ingest.date()] * n, pa.date32()))


def land_and_parse(batches: Iterator[pa.RecordBatch], land: Landing,
                   parse: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
                   out: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The parse's ``mapInArrow`` body with bronze landed first (module docstring). ``out``: the parse's Arrow
    schema plus :data:`LANDED` last; ``parse``: the parse over batches of raw rows, yielding ``out`` without it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    read: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [records, newest offset]

    def landed(texts: list[str]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([*[pa.nulls(len(texts), f.type) for f in list(out)[:-1]],
                                           pa.array(texts, pa.string())], schema=out)

    for batch in batches:
        if batch.num_rows == 0:
            continue
        counts = pa.Table.from_batches([batch.select(["topic", "partition", "offset"])]).group_by(
            ["topic", "partition"]).aggregate([("offset", "count"), ("offset", "max")])
        for r in counts.to_pylist():
            seen = read.setdefault((r["topic"], int(r["partition"])), [0, -1])
            seen[0] += int(r["offset_count"])
            seen[1] = max(seen[1], int(r["offset_max"]))
        adds: list[str] = []
        topics = batch.column("topic")
        for topic in pc.unique(topics).to_pylist():
            target = land.targets.get(topic) if topic is not None else None
            if target is not None:
                rows = batch.filter(pc.equal(topics, topic))
                adds += [landed_row(kind="add", table=target.name, add=a)
                         for a in write_files(target, _bronze_rows(rows, land.ingest_us))]
        for part in parse(iter([batch])):
            yield pa.RecordBatch.from_arrays([*part.columns, pa.nulls(part.num_rows, pa.string())], schema=out)
        if adds:
            yield landed(adds)
    if read:
        yield landed([landed_row(kind="read", topic=t, partition=p, records=n, newest_offset=o)
                      for (t, p), (n, o) in sorted(read.items())])


def parse_and_land_frame(raw: DataFrame, tables: Sequence[tuple[str, StructType, Sequence[str]]],
                         unknown_topic: Callable[[str], str], refused: Mapping[str, Collection[str]] | None,
                         land: Landing) -> DataFrame:
    """:func:`spark_jobs.silver.cdc.parse_tables_frame`'s rows (``_landed`` NULL) plus the landed rows, its tasks
    landing every raw record in its topic's bronze table (module docstring)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField
    from pyspark.sql.types import StructType as _StructType

    from spark_jobs.silver.cdc import parse_tables_body

    out, parse = parse_tables_body(tables, unknown_topic, refused)
    with_landed = _StructType([*out.fields, StructField(LANDED, StringType(), True)])
    arrow_landed = to_arrow_schema(with_landed)

    def parse_and_land(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return land_and_parse(iter(batches), land, parse, arrow_landed)

    return raw.mapInArrow(parse_and_land, with_landed)
