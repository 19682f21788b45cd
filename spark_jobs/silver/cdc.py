"""CDC apply rules: Debezium PostgreSQL change events -> ordered, typed changes for silver (pure: DataFrame in,
DataFrame out). The write that applies them, the MERGE, is the table I/O's merge-by-position
(:mod:`spark_jobs.table_io.merge`: ``merge_plan``, ``apply_changes``, ``apply_changes_in_task``).

The rules, the MERGE statement and the Spark plan that applies a micro-batch::

    parsed   = parse_frame(kafka rows, silver schema, contract.keys)  # executors; rejects -> quarantine.cdc
    newest   = newest_changes(parsed changes, ..., delete markers)   # newest change per key
    plan     = merge_plan(contract.keys, silver_columns(...), toastable_columns(...))
    MERGE INTO silver.<table> t USING newest s ON plan.condition
      WHEN MATCHED AND plan.delete_condition THEN DELETE
      WHEN MATCHED AND plan.update_condition THEN UPDATE SET plan.update_set
      WHEN NOT MATCHED AND plan.insert_condition THEN INSERT plan.insert_values

Ordering (the source position)
------------------------------
``_pos = struct(_snapshot_rank, _commit_lsn, _change_lsn)``, compared
lexicographically; larger is newer. Never ``ts_ms``: wall-clock times tie and
can go backwards.

* ``_snapshot_rank`` is 0 for snapshot reads (``op = r``) and 1 for streamed
  changes, and it comes *first*, so a snapshot read always loses to any streamed
  change of the same key whatever the LSNs say. A snapshot read carries the LSN
  of the snapshot's start (or, for incremental snapshots, of the chunk's window),
  which says nothing about how it relates to a streamed change. Among snapshot
  reads (a re-snapshot) the later one wins.
* ``_commit_lsn`` is the first element of ``source.sequence``: the commit LSN of
  the last transaction Debezium saw commit before this event's transaction.
  pgoutput decodes whole transactions in commit order, so this value is constant
  inside a transaction and never decreases from one transaction to the next.
* ``_change_lsn`` is the second element (the change's own LSN, = ``source.lsn``).
  It orders the changes inside one transaction. It is *not* monotone across
  transactions: two transactions running concurrently interleave their WAL
  records, so a transaction that commits later can hold changes with lower LSNs
  than one that committed earlier. Ordering by the change LSN alone (or by
  ``ts_ms``) would apply them in the wrong order; (commit, change) does not.
* When ``sequence`` (or one of its elements) is missing, ``source.lsn`` stands
  in; a change with no position at all is rejected, it cannot be ordered.

A change applies only if its position is strictly greater than the row's, so
replays after a crash and duplicates re-sent by Connect are no-ops.

Applying a batch (on Spark)
---------------------------
``silver.<t>`` is one Delta table (deletion vectors and change data feed on), changed
only by the streaming app's MERGE, one per micro-batch and table, all in Spark tasks:

* :func:`parse_frame`: the Kafka records, parsed in the executors' Python workers
  (``mapInArrow`` over :func:`spark_jobs.silver.cdc_parse.parse_batches`);
* :func:`newest_changes`: per key, the newest change by position (then Kafka
  partition and offset), a TOAST placeholder filled from an earlier change of the
  key in the batch, and dropped when the key's delete marker is not older
  (``silver.<t>__deleted``: a re-sent change after a delete must not bring the key
  back, and silver no longer holds the row the MERGE's position guard needs);
* ``table_io.merge.merge``: ``merge_plan``'s statement. With deletion vectors an update or
  delete marks rows in a file instead of rewriting it, so a batch costs what it
  changes, not what the table holds; Delta's auto compaction folds them back in
  (``contracts.tables.AUTO_COMPACT``).

Added columns
-------------
A column added in PostgreSQL mid-stream shows up in the payload before the table
contract knows it. The parse never drops it: every payload column that is not
in the table's schema goes into ``_extra``, a JSON object string mapping column
name to the value's JSON text (strings unquoted, numbers and objects as written;
null when there are no extra columns). ``added_columns`` compares a payload's
fields with a schema; once the silver table is widened, the same raw records
are parsed again with the wider schema, so nothing is lost meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.types import StringType, StructType

from spark_jobs.silver.cdc_columns import POSITION_COLUMNS, SILVER_METADATA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


#: Debezium's stand-in for an unchanged TOASTed value it could not read from the WAL.
UNAVAILABLE_VALUE = "__debezium_unavailable_value"


def quote_ident(name: str) -> str:
    """Backtick-quote an identifier for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def silver_columns(table_schema: StructType) -> list[str]:
    """Columns a silver CDC table stores: the row image, then ``SILVER_METADATA_COLUMNS``."""
    return [*table_schema.names, *SILVER_METADATA_COLUMNS]


def toastable_columns(table_schema: StructType, key_columns: Sequence[str]) -> list[str]:
    """Default TOAST-able columns: non-key string columns (text, varchar, json, jsonb arrive as strings).

    Only these can hold ``UNAVAILABLE_VALUE``; a contract may list fewer.
    """
    return toastable_columns_of([(f.name, isinstance(f.dataType, StringType)) for f in table_schema.fields],
                                key_columns)


def toastable_columns_of(columns: Sequence[tuple[str, bool]], key_columns: Sequence[str]) -> list[str]:
    """:func:`toastable_columns` over (name, is a string column) pairs, in column order."""
    return [name for name, is_string in columns if is_string and name not in key_columns]


def added_columns(current: StructType | Sequence[str], incoming: Sequence[str]) -> list[str]:
    """Payload column names that ``current`` (a schema or its column names) lacks, in payload order, each once.

    Spark resolves names case-insensitively, so ``Note`` is not new if ``note`` exists.
    """
    known = {n.lower() for n in (current.names if isinstance(current, StructType) else current)}
    out: list[str] = []
    for name in incoming:
        if name.lower() not in known:
            known.add(name.lower())
            out.append(name)
    return out


def parse_frame(raw: DataFrame, silver: StructType, keys: Sequence[str]) -> DataFrame:
    """Kafka rows (key, value, topic, partition, offset, kafka_timestamp) of one table -> parsed rows, in Spark tasks.

    ``silver`` is the table's current schema; the rows are ``parse_output_schema(silver)``: a change has
    ``_error`` null, a reject its reason and raw record.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.silver.cdc_parse import parse_batches, parse_output_schema

    out = parse_output_schema(silver)
    arrow_silver, arrow_out, key_list = to_arrow_schema(silver), to_arrow_schema(out), list(keys)

    def parse(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        return parse_batches(iter(batches), arrow_silver, arrow_out, key_list)

    return raw.mapInArrow(parse, out)


def parse_tables_body(tables: Sequence[tuple[str, StructType, Sequence[str]]], unknown_topic: Callable[[str], str],
                      refused: Mapping[str, Collection[str]] | None = None
                      ) -> tuple[StructType, Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]]:
    """:func:`parse_tables_frame`'s output schema and ``mapInArrow`` body (for a caller that wraps the body:
    :func:`spark_jobs.table_io.land.parse_and_land_frame`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.silver.cdc_parse import parse_output_schema, parse_tables_batches, wide_output_schema

    out = wide_output_schema([silver for _, silver, _ in tables])
    arrow_out = to_arrow_schema(out)
    specs = {topic: (i, to_arrow_schema(silver), to_arrow_schema(parse_output_schema(silver)), list(keys))
             for i, (topic, silver, keys) in enumerate(tables)}

    refused_names = {topic: sorted(names) for topic, names in (refused or {}).items()}

    def parse(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return iter(parse_tables_batches(iter(batches), specs, arrow_out, unknown_topic, refused_names))

    return out, parse


def parse_tables_frame(raw: DataFrame, tables: Sequence[tuple[str, StructType, Sequence[str]]],
                       unknown_topic: Callable[[str], str],
                       refused: Mapping[str, Collection[str]] | None = None) -> DataFrame:
    """Kafka rows of every CDC topic -> parsed rows of every table, in one ``mapInArrow`` (one Spark job per batch
    instead of one per table). ``tables``: (topic, silver schema, keys); :func:`table_rows` selects one table's
    rows in :func:`parse_frame`'s shape. A record of another topic is a reject (``unknown_topic(topic)``), one
    carrying a column ``refused[topic]`` names too (PostgreSQL's table lacks it: not added to silver)."""
    out, parse = parse_tables_body(tables, unknown_topic, refused)
    return raw.mapInArrow(parse, out)


def table_rows(parsed: DataFrame, index: int, topic: str, silver: StructType) -> DataFrame:
    """Table ``index``'s rows of :func:`parse_tables_frame`'s output, in :func:`parse_frame`'s shape."""
    from pyspark.sql import functions as F

    from spark_jobs.silver.cdc_parse import PARSE_COLUMNS, wide_column

    return parsed.where(F.col("_topic") == topic).select(
        *[F.col(wide_column(index, j)).alias(f.name) for j, f in enumerate(silver.fields)],
        *[F.col(c) for c in PARSE_COLUMNS])


def newest_changes(changes: DataFrame, columns: Sequence[str], keys: Sequence[str], toastable: Sequence[str],
                   markers: DataFrame | None) -> DataFrame:
    """Parsed changes of one batch -> the MERGE source: per key the newest, TOAST-filled, not superseded.

    Per key, changes are ordered by position, then Kafka partition and offset; a ``toastable`` column of
    the newest change holding ``UNAVAILABLE_VALUE`` takes the last earlier value of the key that is not the
    placeholder (NULL counts), else keeps it (the MERGE then keeps the stored value). The change is dropped
    when ``markers`` (key + position rows of ``silver.<t>__deleted``) hold a delete of the key at a position
    not older. Returns ``columns`` (the silver table's). One window, one sort.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(quote_ident(c)) for c in [*POSITION_COLUMNS, "_partition", "_offset"]]
    by_key = Window.partitionBy(*[F.col(quote_ident(k)) for k in keys]).orderBy(*order)
    upto_here = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    frame = changes.select(
        *[F.col(quote_ident(c)) for c in columns], F.col("_partition"), F.col("_offset"),
        F.row_number().over(by_key).alias("_n"), F.count(F.lit(1)).over(whole).alias("_count"),
        *[F.last(F.when(~F.col(quote_ident(c)).eqNullSafe(UNAVAILABLE_VALUE),
                        F.struct(F.col(quote_ident(c)).alias("v"))), ignorenulls=True)
          .over(upto_here).alias(f"_fill_{c}") for c in toastable])
    newest = frame.where(F.col("_n") == F.col("_count")).select(
        *[F.when(F.col(quote_ident(f"_fill_{c}")).isNull(), F.col(quote_ident(c)))
          .otherwise(F.col(quote_ident(f"_fill_{c}")).getField("v"))
          .alias(c) if c in toastable else F.col(quote_ident(c)) for c in columns])
    if markers is None:
        return newest
    position = F.struct(*[F.col(quote_ident(c)) for c in POSITION_COLUMNS])
    latest = (markers.groupBy(*[F.col(quote_ident(k)) for k in keys]).agg(F.max(position).alias("_deleted_at")))
    return (newest.join(latest, on=list(keys), how="left")
            .where(F.col("_deleted_at").isNull() | (position > F.col("_deleted_at")))
            .select(*[F.col(quote_ident(c)) for c in columns]))
