"""All table I/O: names, locations, database creation, idempotent writes.

Nobody else builds an ``s3a://`` path: a table's data lives under
``<warehouse>/<db>/<table>`` (DESIGN.md, "Contracts").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LAYERS = ("bronze", "silver", "hot", "gold", "serving", "quarantine", "ops", "replay")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLE = re.compile(r"^[a-z][a-z0-9_]*(__[a-z0-9_]+)*$")


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


def delta_version(spark: SparkSession, location: str) -> int | None:
    """The latest version of the Delta table at ``location`` (None: no table there). Reads the log, no data."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, location):
        return None
    row = DeltaTable.forPath(spark, location).history(1).select("version").first()
    return None if row is None else int(row[0])


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
