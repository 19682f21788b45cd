"""All table I/O: names, locations, database creation, and every Delta write of the lake.

This package is the only code that writes Delta or imports a Delta engine (``make lint``'s import contract
"only table_io writes Delta"): the batch writes here (replace a day's partitions, replace a table, append,
overwrite, restore), table creation (:mod:`.create`), the stream's append-once (:mod:`.append`), the CDC
merge-by-position (:mod:`.merge`), the driver's delta-rs commits (:mod:`.driver`) and compaction and vacuum
(:mod:`.maintenance`).

Nobody else builds an ``s3a://`` path: a table's data lives under
``<warehouse>/<db>/<table>`` (DESIGN.md, "Contracts").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

LAYERS = ("bronze", "silver", "hot", "gold", "serving", "quarantine", "ops", "replay")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLE = re.compile(r"^[a-z][a-z0-9_]*(__[a-z0-9_]+)*$")


def require_write_mode(name: str, mode: str) -> None:
    """Refuse to write registry table ``name`` other than by its declared write mode (``mode``: the writer's).

    The stream's writers call it: append-once (:mod:`.append`, :mod:`.driver`), merge-by-position (:mod:`.merge`)
    and driver-upsert (:mod:`.driver`); :func:`publish` picks the batch write from the declared mode instead. A
    name the registry does not know (a unit test's temporary table) is not checked.
    """
    from spark_jobs.contracts.tables import lake_table

    try:
        declared = lake_table(name).write_mode
    except KeyError:
        return
    if declared != mode:
        raise ValueError(f"{name} is declared {declared} in the table registry (spark_jobs/contracts/tables.py); "
                         f"this writer writes {mode}")


def split_table(name: str) -> tuple[str, str]:
    """``"ops.smoke"`` -> ``("ops", "smoke")``, validating both parts."""
    db, sep, table = name.partition(".")
    if not sep or not _NAME.match(db) or not _TABLE.match(table):
        raise ValueError(f"table name {name!r} must be <database>.<table> in lower_snake_case")
    if db not in LAYERS:
        raise ValueError(f"database {db!r} of table {name!r} is not a lake layer ({', '.join(LAYERS)})")
    return db, table


def database_location(settings: Settings, db: str) -> str:
    return f"{settings.warehouse_uri}/{db}"


def table_location(settings: Settings, name: str) -> str:
    db, table = split_table(name)
    return f"{database_location(settings, db)}/{table}"


def checkpoint_location(settings: Settings, query: str) -> str:
    """Where a streaming query keeps its checkpoint (next to the warehouse, on the same store)."""
    if not _NAME.match(query):
        raise ValueError(f"query name {query!r} must be lower_snake_case")
    return f"s3a://{settings.s3_bucket}/checkpoints/{query}"


def ensure_database(spark: SparkSession, settings: Settings, db: str) -> None:
    if db not in LAYERS:
        raise ValueError(f"{db!r} is not a lake layer ({', '.join(LAYERS)})")
    if spark.catalog.databaseExists(db):  # a metastore lookup; CREATE ... IF NOT EXISTS also checks the store
        return
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{database_location(settings, db)}'")


def replace_partition(df: DataFrame, settings: Settings, name: str, predicate: str,
                      partition_by: list[str] | None = None) -> None:
    """Overwrite exactly the rows matching ``predicate`` (Delta ``replaceWhere``).

    Re-running with the same input gives the same table: the write is idempotent.
    The table is created (registered in the shared catalog, data at its
    canonical location) on first write.
    """
    db, _ = split_table(name)
    ensure_database(df.sparkSession, settings, db)
    writer = (df.write.format("delta").mode("overwrite").option("replaceWhere", predicate)
              .option("path", table_location(settings, name)))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.saveAsTable(name)


def _any_row(spark: SparkSession, name: str, predicate: str) -> bool:
    return bool(spark.table(name).where(predicate).limit(1).collect())


def has_rows(spark: SparkSession, name: str, predicate: str) -> bool:
    """Whether table ``name`` exists and holds a row matching ``predicate`` (a read, no commit)."""
    return spark.catalog.tableExists(name) and _any_row(spark, name, predicate)


def replace_or_append(df: DataFrame, settings: Settings, name: str, predicate: str) -> None:
    """:func:`replace_partition`, but a blind append while the table has no row matching ``predicate``.

    For tables many tasks write at once, each its own key (``ops.dq_results``): Delta checks a ``replaceWhere``
    against every file committed meanwhile, so on a table not partitioned by that key two tasks' first writes
    conflicted and retried (docs/benchmarks.md). A blind append reads nothing, so it never conflicts with
    another task's write; a re-run of the same key still replaces its rows. Safe only when one writer at a
    time owns a key (one Airflow task attempt).
    """
    spark = df.sparkSession
    if spark.catalog.tableExists(name) and not _any_row(spark, name, predicate):
        df.write.format("delta").mode("append").saveAsTable(name)
        return
    replace_partition(df, settings, name, predicate)


def replace_table(df: DataFrame, settings: Settings, name: str, metadata: str | None = None) -> None:
    """Overwrite the whole table with ``df`` in one Delta commit (readers see the old or the new version).

    For tables rebuilt from a complete input each run (SCD2 dimensions from the CDC history): the same
    input gives the same table, so re-runs are idempotent. Created and registered on first write.
    ``metadata`` becomes the commit's ``userMetadata``.
    """
    db, _ = split_table(name)
    ensure_database(df.sparkSession, settings, db)
    writer = (df.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
              .option("path", table_location(settings, name)))
    if metadata is not None:  # the commit's userMetadata (DESCRIBE HISTORY): what the table was built from
        writer = writer.option("userMetadata", metadata)
    writer.saveAsTable(name)


def overwrite_location(df: DataFrame, location: str, metadata: str) -> None:
    """Replace every row of the Delta table at ``location`` with ``df`` in one commit (``userMetadata`` =
    ``metadata``, shown by ``DESCRIBE HISTORY``): readers see the old or the new version, never a mix. The schema
    must be the table's (no ``overwriteSchema``)."""
    df.write.format("delta").mode("overwrite").option("userMetadata", metadata).save(location)


def restore_location(spark: SparkSession, location: str, version: int) -> None:
    """``RESTORE`` the Delta table at ``location`` to ``version`` (one commit; fails, naming Delta's reason, when
    the version's files were vacuumed)."""
    quoted = location.replace("`", "``")
    spark.sql(f"RESTORE TABLE delta.`{quoted}` TO VERSION AS OF {int(version)}")


def register_table(spark: SparkSession, settings: Settings, name: str) -> None:
    """Register the Delta table written at ``name``'s canonical location in the shared catalog (once)."""
    db, _ = split_table(name)
    ensure_database(spark, settings, db)
    location = table_location(settings, name).replace("'", "\\'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING DELTA LOCATION '{location}'")


def append_to(df: DataFrame, location: str) -> None:
    """Append ``df`` to the Delta table at ``location`` (a replay's shadows and markers, ``ops.replays``)."""
    df.write.format("delta").mode("append").save(location)


def create_empty_at(spark: SparkSession, location: str, schema: StructType, like: str, exists: bool) -> None:
    """Make the table at ``location`` an empty one with ``schema``, laid out as the registry's table ``like``
    (partitioning, properties). One that ``exists`` is emptied by one overwrite commit: Delta's ``createOrReplace``
    on a path kept the old rows (seen in the replay's unit tests)."""
    from delta.tables import DeltaTable

    from spark_jobs.contracts.tables import lake_table

    entry = lake_table(like)
    if exists:
        writer = (spark.createDataFrame([], schema).write.format("delta").mode("overwrite")
                  .option("overwriteSchema", "true"))
        if entry.partitioned_by:
            writer = writer.partitionBy(*entry.partitioned_by)
        writer.save(location)
        return
    builder = DeltaTable.create(spark).location(location).addColumns(schema)
    if entry.partitioned_by:
        builder = builder.partitionedBy(*entry.partitioned_by)
    for key, value in entry.properties.items():
        builder = builder.property(key, value)
    builder.execute()


def create_table_sql(spark: SparkSession, settings: Settings, name: str, schema: StructType, comment: str) -> None:
    """``CREATE TABLE IF NOT EXISTS`` ``name`` at its warehouse location, in plain SQL: for a session over Spark
    Connect, where delta-spark's ``DeltaTable`` builder is not available."""
    if spark.catalog.tableExists(name):
        return
    columns = ", ".join(f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
                        for f in schema.fields)
    # LOCATION and COMMENT take no parameter markers (Spark 4.1: "should have been blocked at the grammar level"):
    # literals, refused when they could end one.
    location = table_location(settings, name)
    for text in (location, comment):
        if "'" in text or "\\" in text:
            raise ValueError(f"{name}: {text!r} holds a quote or backslash; a table location or comment may not")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({columns}) USING delta LOCATION '{location}' COMMENT '{comment}'")


def insert_if_absent(spark: SparkSession, name: str, schema: StructType, row: Mapping[str, object], key: str,
                     computed: Mapping[str, str] | None = None) -> None:
    """Insert one row into ``name`` unless a row with its ``key`` is there (an insert-only MERGE: a re-run of the
    task that wrote it changes nothing). ``row``'s values are data, never SQL text (a one-row DataFrame of the
    columns' types in ``schema``); ``computed`` columns are SQL expressions (``current_timestamp()``)."""
    import uuid

    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType as Struct

    given = Struct([f for f in schema.fields if f.name in row])
    source = spark.createDataFrame([tuple(row[f.name] for f in given.fields)], given)
    for column, sql in (computed or {}).items():
        source = source.withColumn(column, F.expr(sql))
    view = f"_lake_insert_{uuid.uuid4().hex}"
    source.createOrReplaceTempView(view)  # session-scoped: works the same over Spark Connect
    try:
        spark.sql(f"MERGE INTO {name} t USING {view} s ON t.{key} = s.{key} WHEN NOT MATCHED THEN INSERT *")
    finally:
        spark.catalog.dropTempView(view)


def publish(df: DataFrame, settings: Settings, name: str, *, predicate: str | None = None,
            metadata: str | None = None) -> None:
    """Write a batch job's ``df`` as table ``name`` by its registry write mode (:mod:`spark_jobs.contracts.tables`):
    ``replace-partition`` replaces the rows ``predicate`` selects in its one partition column (a day's partitions),
    ``replace-table`` the whole table (``metadata``: the commit's ``userMetadata``). The streaming writes have
    their own objects, each refusing a table declared with another mode (:func:`require_write_mode`):
    :class:`.append.OnceAppender` and :meth:`.driver.DriverTable.write_once` (append-once), :mod:`.merge`
    (merge-by-position), :meth:`.driver.DriverTable.upsert_once` (driver-upsert)."""
    from spark_jobs.contracts.tables import REPLACE_PARTITION, REPLACE_TABLE, lake_table

    table = lake_table(name)
    if table.write_mode == REPLACE_PARTITION:
        if predicate is None:
            raise ValueError(f"{name} is written {REPLACE_PARTITION}: give the predicate of the partitions to replace")
        replace_partition(df, settings, name, predicate, list(table.partitioned_by))
    elif table.write_mode == REPLACE_TABLE:
        replace_table(df, settings, name, metadata)
    else:
        raise ValueError(f"{name} is written {table.write_mode} by its streaming writer, not published by a batch job")
