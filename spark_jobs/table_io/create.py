"""Creating the lake's Delta tables as the table registry declares them (location, partitioning, properties)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import lake_table, schema_of
from spark_jobs.settings import Settings
from spark_jobs.table_io import table_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


#: Properties a table's writer may turn on for good (the CDC stream enables deletion vectors on a silver table past
#: ``LAKE_CDC_TASK_MERGE_MAX_MB``): :func:`create_table` does not turn them off again.
TURNED_ON_BY_WRITER = frozenset({"delta.enableDeletionVectors"})


def properties_to_set(declared: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The ``declared`` table properties an existing table lacks or holds otherwise, except one its writer turned on
    for good (:data:`TURNED_ON_BY_WRITER`)."""
    return {k: v for k, v in declared.items()
            if current.get(k) != v and not (k in TURNED_ON_BY_WRITER and current.get(k) == "true")}


def create_table(spark: SparkSession, settings: Settings, name: str, schema: StructType | None = None,
                 exists: bool | None = None) -> None:
    """``CREATE TABLE IF NOT EXISTS`` a Delta table at its warehouse location, with the columns (unless ``schema``
    is given), partitioning and properties the table registry (:mod:`spark_jobs.contracts.tables`) declares;
    properties missing on a table that exists (one created by an older version) are set. ``exists``, when the
    caller listed the catalog: True skips the CREATE (a no-op on an existing table that still loads its snapshot),
    False the check of its properties."""
    from delta.tables import DeltaTable

    from spark_jobs.table_io.driver import log_metadata

    entry = lake_table(name)
    location = table_location(settings, name)
    if exists is not True:
        columns = schema_of(name) if schema is None else schema
        builder = (DeltaTable.createIfNotExists(spark).tableName(name).addColumns(columns)
                   .location(location))
        if entry.partitioned_by:
            builder = builder.partitionedBy(*entry.partitioned_by)
        for k, v in entry.properties.items():
            builder = builder.property(k, v)
        builder.execute()
    if entry.properties and exists is not False:
        current, _schema = log_metadata(settings, location)  # from the log: no Spark job
        missing = properties_to_set(entry.properties, current)
        if missing:
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ("
                      + ", ".join(f"'{k}' = '{v}'" for k, v in sorted(missing.items())) + ")")


def catalog_tables(spark: SparkSession, databases: Sequence[str]) -> set[str]:
    """``db.table`` names (tables and views) the catalog holds in ``databases``: one metastore call per database."""
    return {f"{db}.{r['tableName']}" for db in databases for r in spark.sql(f"SHOW TABLES IN {db}").collect()}


def create_tables(spark: SparkSession, settings: Settings, tables: Sequence[str], workers: int = 8) -> None:
    """:func:`create_table` for each of ``tables`` (registry names, created as declared), a few at once.

    A start of the streaming app ensures ~20 tables; an existing table's properties are read from its Delta log by
    delta-rs (no Spark snapshot load: docs/benchmarks.md, "Stream start"). The calls wait on MinIO and the
    metastore, not on CPU, so they overlap even on 2 cores.
    """
    from concurrent.futures import ThreadPoolExecutor

    existing = catalog_tables(spark, sorted({name.partition(".")[0] for name in tables}))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create-table") as pool:
        # list(): the first failure is raised here.
        list(pool.map(lambda name: create_table(spark, settings, name, exists=name in existing), tables))
