"""SCD2 dimensions from the ordered CDC history (:func:`spark_jobs.gold.history.cdc_history`), not from silver.

Versions are cut by source position (``_snapshot_rank``, ``_commit_lsn``,
``_change_lsn``; see :mod:`spark_jobs.silver.cdc`), never by wall-clock time;
the business time (``updated_at``) only labels a version's ``valid_from``. So
the same history always gives the same versions and surrogate keys, whatever
order its rows arrive in.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from spark_jobs.gold.history import fill_toast
from spark_jobs.silver.cdc_columns import POSITION_COLUMNS

__all__ = ["CUSTOMER_TRACKED", "PRODUCT_TRACKED", "dim_customers", "dim_products", "scd2", "surrogate_key"]

CUSTOMER_TRACKED = ("email", "full_name", "country", "loyalty_tier")
PRODUCT_TRACKED = ("sku", "name", "price", "active")


def _same(a: Sequence[Column], b: Sequence[Column]) -> Column:
    out = F.lit(True)
    for x, y in zip(a, b, strict=True):
        out = out & x.eqNullSafe(y)
    return out


def scd2(history: DataFrame, keys: Sequence[str], tracked: Sequence[str], valid_from: str = "updated_at") -> DataFrame:
    """Change history -> SCD2 versions per key.

    In: rows of :func:`~spark_jobs.gold.history.cdc_history` (``op``, the key
    and ``tracked`` columns, the ``valid_from`` column, ``_snapshot_rank``,
    ``_commit_lsn``, ``_change_lsn``, ``_source_ts``), in any order.

    Rules, per key, in position order:

    * changes of one transaction (same ``_snapshot_rank`` and ``_commit_lsn``)
      count as its last one (highest ``_change_lsn``): a version is a committed state;
      an exact re-send is one change;
    * a version starts at the first change and at each change whose tracked
      values or deleted-ness (``op = d``) differ from the previous change's;
      a change of untracked columns only makes no version;
    * a delete makes a version with ``is_deleted`` (tracked values from the
      before image); a later insert of the key starts a new version; a
      primary-key change (delete old key + create new key) is exactly that;
    * snapshot reads (rank 0) come before streamed changes (rank 1), as in silver;
    * a TOAST placeholder left in a tracked column (no earlier value in the
      history) counts as NULL.

    Grain out: one row per (key, version). Columns: ``keys``, ``tracked``,
    ``valid_from`` timestamp (the version's first change's ``valid_from``
    column, its ``_source_ts`` when that is NULL), ``valid_to`` (the next
    version's ``valid_from``, NULL for the newest), ``is_current`` (newest and
    not deleted), ``is_deleted``, and the position of the version's first
    change: ``_snapshot_rank``, ``_commit_lsn``, ``_change_lsn``.
    """
    keys, tracked = list(keys), list(tracked)
    if not keys:
        raise ValueError("scd2: keys is empty; pass the dimension's natural key columns")
    overlap = [c for c in tracked if c in keys]
    if overlap:
        raise ValueError(f"scd2: tracked columns {overlap} are key columns; a key change is a delete + create")
    txn = Window.partitionBy(*keys, "_snapshot_rank", "_commit_lsn").orderBy(F.col("_change_lsn").desc())
    committed = (history.withColumn("_last", F.row_number().over(txn)).where(F.col("_last") == 1)
                 .select(*keys, *tracked, F.coalesce(F.col(valid_from).cast("timestamp"), F.col("_source_ts"))
                         .alias("_valid_from"), (F.col("op") == "d").alias("is_deleted"), *POSITION_COLUMNS))
    string_tracked = [f.name for f in committed.schema.fields if f.name in tracked and f.dataType.simpleString() == "string"]
    committed = fill_toast(committed, keys, string_tracked, list(POSITION_COLUMNS), unresolved=F.lit(None))

    by_position = Window.partitionBy(*keys).orderBy(*POSITION_COLUMNS)
    state = [F.col(c) for c in [*tracked, "is_deleted"]]
    previous = [F.lag(c).over(by_position) for c in [*tracked, "is_deleted"]]
    first = F.lag(F.lit(1)).over(by_position).isNull()
    versions = committed.withColumn("_new", first | ~_same(state, previous)).where(F.col("_new"))
    return versions.select(
        *keys, *tracked,
        F.col("_valid_from").alias("valid_from"),
        F.lead("_valid_from").over(by_position).alias("valid_to"),
        (F.lead(F.lit(1)).over(by_position).isNull() & ~F.col("is_deleted")).alias("is_current"),
        "is_deleted", *POSITION_COLUMNS,
    )


def surrogate_key(*natural: str) -> Column:
    """Deterministic bigint surrogate key of an :func:`scd2` version: xxhash64 of the natural key and its position."""
    return F.xxhash64(*[F.col(c) for c in natural], *[F.col(c) for c in POSITION_COLUMNS]).cast("bigint")


def dim_customers(history: DataFrame) -> DataFrame:
    """Customer dimension: :func:`cdc_history` of ``customers`` -> SCD2 versions.

    Grain: one row per customer version. Columns: ``customer_key`` bigint
    (:func:`surrogate_key`: stable across re-runs), ``customer_id`` bigint,
    ``email``, ``full_name``, ``country``, ``loyalty_tier``, ``valid_from``,
    ``valid_to`` timestamps, ``is_current``, ``is_deleted`` booleans. Tracked:
    ``CUSTOMER_TRACKED``; ``valid_from`` is ``updated_at``.
    """
    v = scd2(history, ["customer_id"], CUSTOMER_TRACKED)
    return v.select(
        surrogate_key("customer_id").alias("customer_key"), F.col("customer_id").cast("bigint"),
        *[F.col(c).cast("string") for c in CUSTOMER_TRACKED], *_version_columns())


def dim_products(history: DataFrame) -> DataFrame:
    """Product dimension: :func:`cdc_history` of ``products`` -> SCD2 versions.

    Grain: one row per product version. Columns: ``product_key`` bigint,
    ``product_id`` bigint, ``sku``, ``name``, ``price`` decimal(12,2),
    ``active`` boolean, ``valid_from``, ``valid_to``, ``is_current``,
    ``is_deleted``. Tracked: ``PRODUCT_TRACKED``; ``valid_from`` is
    ``updated_at`` (products have no ``created_at``).
    """
    v = scd2(history, ["product_id"], PRODUCT_TRACKED)
    return v.select(
        surrogate_key("product_id").alias("product_key"), F.col("product_id").cast("bigint"),
        F.col("sku").cast("string"), F.col("name").cast("string"), F.col("price").cast(DecimalType(12, 2)),
        F.col("active").cast("boolean"), *_version_columns())


def _version_columns() -> list[Column]:
    return [F.col("valid_from").cast("timestamp"), F.col("valid_to").cast("timestamp"),
            F.col("is_current").cast("boolean"), F.col("is_deleted").cast("boolean")]
