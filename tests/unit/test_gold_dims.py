"""SCD2 dimensions from the CDC history: versions by source position, one named test per CDC edge case."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.testing import assertDataFrameEqual

from spark_jobs.contracts.shop import CUSTOMERS, PRODUCTS
from spark_jobs.gold.dims import dim_customers, dim_products, scd2
from spark_jobs.silver.cdc import UNAVAILABLE_VALUE

TRACKED = ["email", "full_name", "country", "loyalty_tier"]
HISTORY = StructType([StructField("op", StringType()), *CUSTOMERS.schema.fields,
                      StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
                      StructField("_change_lsn", LongType()), StructField("_source_ts", TimestampType())])


def t(hour: int, minute: int = 0, day: int = 1) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=UTC)


def naive(when: datetime | None) -> datetime | None:
    return None if when is None else when.astimezone(UTC).replace(tzinfo=None)


def ch(op: str, cid: int, commit: int, change: int, updated: datetime | None, *, email: str = "a@x",
       name: str = "Ana", country: str | None = "DE", tier: str | None = "gold", notes: str | None = "n",
       rank: int = 1) -> tuple[Any, ...]:
    """One customers history row (as cdc_history gives it)."""
    return (op, cid, email, name, country, tier, None, notes, t(0), updated, rank, commit, change, updated or t(23))


def history(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, HISTORY)


def versions(frame: Any) -> list[tuple[Any, ...]]:
    """(customer_id, email, loyalty_tier, valid_from, valid_to, is_current, is_deleted, _commit_lsn, _change_lsn)
    per version, by key and position."""
    rows = frame.orderBy("customer_id", "_snapshot_rank", "_commit_lsn", "_change_lsn").select(
        "customer_id", "email", "loyalty_tier", "valid_from", "valid_to", "is_current", "is_deleted", "_commit_lsn",
        "_change_lsn").collect()
    return [tuple(r) for r in rows]


def v(cid: int, email: str, tier: str | None, start: datetime, end: datetime | None, current: bool, deleted: bool,
      commit: int, change: int) -> tuple[Any, ...]:
    return (cid, email, tier, naive(start), naive(end), current, deleted, commit, change)


def run(spark: Any, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return versions(scd2(history(spark, rows), ["customer_id"], TRACKED))


def test_scd2_output_columns_and_exact_rows(spark: Any) -> None:
    rows = [ch("c", 1, 100, 110, t(10)), ch("u", 1, 200, 210, t(11), tier="silver")]
    out = scd2(history(spark, rows), ["customer_id"], TRACKED)
    schema = StructType([
        StructField("customer_id", LongType(), False), *[StructField(c, StringType()) for c in TRACKED],
        StructField("valid_from", TimestampType()), StructField("valid_to", TimestampType()),
        StructField("is_current", BooleanType()), StructField("is_deleted", BooleanType()),
        StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
        StructField("_change_lsn", LongType())])
    expected = spark.createDataFrame([
        (1, "a@x", "Ana", "DE", "gold", t(10), t(11), False, False, 1, 100, 110),
        (1, "a@x", "Ana", "DE", "silver", t(11), None, True, False, 1, 200, 210),
    ], schema)
    assertDataFrameEqual(out, expected, checkRowOrder=False)


def test_two_changes_in_one_transaction_make_one_version(spark: Any) -> None:
    got = run(spark, [
        ch("c", 1, 100, 110, t(10)),
        ch("u", 1, 200, 210, t(11), tier="silver"),  # overwritten later in the same transaction
        ch("u", 1, 200, 220, t(11, 1), tier="platinum"),
        ch("u", 1, 300, 310, t(12), tier="bronze"),  # a transaction that changes and changes back: no version
        ch("u", 1, 300, 320, t(12, 1), tier="platinum"),
    ])
    assert got == [v(1, "a@x", "gold", t(10), t(11, 1), False, False, 100, 110),
                   v(1, "a@x", "platinum", t(11, 1), None, True, False, 200, 220)]


def test_delete_then_reinsert_of_the_same_key(spark: Any) -> None:
    got = run(spark, [
        ch("c", 1, 100, 110, t(10)),
        ch("d", 1, 200, 210, t(11)),  # before image; updated_at = the delete's business time
        ch("c", 1, 300, 310, t(12), email="new@x", tier=None),
    ])
    assert got == [v(1, "a@x", "gold", t(10), t(11), False, False, 100, 110),
                   v(1, "a@x", "gold", t(11), t(12), False, True, 200, 210),
                   v(1, "new@x", None, t(12), None, True, False, 300, 310)]


def test_delete_last_leaves_no_current_version(spark: Any) -> None:
    got = run(spark, [ch("c", 1, 100, 110, t(10)), ch("d", 1, 200, 210, t(11))])
    assert got == [v(1, "a@x", "gold", t(10), t(11), False, False, 100, 110),
                   v(1, "a@x", "gold", t(11), None, False, True, 200, 210)]


def test_change_of_an_untracked_column_only_makes_no_version(spark: Any) -> None:
    got = run(spark, [ch("c", 1, 100, 110, t(10)), ch("u", 1, 200, 210, t(11), notes="long notes"),
                      ch("u", 1, 300, 310, t(12), tier="silver")])
    assert got == [v(1, "a@x", "gold", t(10), t(12), False, False, 100, 110),
                   v(1, "a@x", "silver", t(12), None, True, False, 300, 310)]


def test_primary_key_change_is_delete_old_key_and_create_new_key(spark: Any) -> None:
    got = run(spark, [
        ch("c", 1, 100, 110, t(10)),
        ch("d", 1, 200, 210, t(11)),  # UPDATE customers SET customer_id = 2 WHERE customer_id = 1
        ch("c", 2, 200, 220, t(11)),
    ])
    assert got == [v(1, "a@x", "gold", t(10), t(11), False, False, 100, 110),
                   v(1, "a@x", "gold", t(11), None, False, True, 200, 210),
                   v(2, "a@x", "gold", t(11), None, True, False, 200, 220)]


def test_changes_arriving_out_of_commit_order(spark: Any) -> None:
    # Transactions A (commit position 200) and B (commit position 300) ran concurrently: B's change has a
    # lower LSN than A's, yet B committed later and holds the newer state. updated_at also disagrees.
    rows = [
        ch("c", 1, 100, 110, t(10)),
        ch("u", 1, 200, 260, t(11, 30), tier="silver"),
        ch("u", 1, 300, 250, t(11), tier="platinum"),
        ch("u", 1, 400, 410, t(12), tier="bronze"),
    ]
    expected = [v(1, "a@x", "gold", t(10), t(11, 30), False, False, 100, 110),
                v(1, "a@x", "silver", t(11, 30), t(11), False, False, 200, 260),
                v(1, "a@x", "platinum", t(11), t(12), False, False, 300, 250),
                v(1, "a@x", "bronze", t(12), None, True, False, 400, 410)]
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert shuffled != rows
    assert run(spark, shuffled) == expected
    assert run(spark, list(reversed(rows))) == expected


def test_duplicate_resend_is_one_change(spark: Any) -> None:
    rows = [ch("c", 1, 100, 110, t(10)), ch("u", 1, 200, 210, t(11), tier="silver")]
    assert run(spark, [*rows, *rows, rows[0]]) == run(spark, rows) == [
        v(1, "a@x", "gold", t(10), t(11), False, False, 100, 110),
        v(1, "a@x", "silver", t(11), None, True, False, 200, 210)]


def test_snapshot_read_then_streamed_change(spark: Any) -> None:
    # The snapshot read carries the snapshot's LSN (higher than the streamed change's): rank decides.
    got = run(spark, [
        ch("r", 1, 900, 900, t(9), rank=0),
        ch("u", 1, 100, 110, t(10), tier="silver"),
        ch("r", 2, 900, 900, t(9), rank=0),
        ch("u", 2, 120, 130, t(10, 30), notes="untracked only"),
    ])
    assert got == [v(1, "a@x", "gold", t(9), t(10), False, False, 900, 900),
                   v(1, "a@x", "silver", t(10), None, True, False, 100, 110),
                   v(2, "a@x", "gold", t(9), None, True, False, 900, 900)]


def test_toast_placeholder_in_a_tracked_column_keeps_the_previous_value(spark: Any) -> None:
    got = run(spark, [ch("c", 1, 100, 110, t(10)), ch("u", 1, 200, 210, t(11), email=UNAVAILABLE_VALUE),
                      ch("u", 2, 300, 310, t(12), email=UNAVAILABLE_VALUE)])
    assert got == [v(1, "a@x", "gold", t(10), None, True, False, 100, 110),
                   (2, None, "gold", naive(t(12)), None, True, False, 300, 310)]


def test_valid_from_falls_back_to_the_source_time(spark: Any) -> None:
    got = run(spark, [ch("d", 1, 100, 110, None)])
    assert got == [v(1, "a@x", "gold", t(23), None, False, True, 100, 110)]


def test_scd2_refuses_bad_arguments(spark: Any) -> None:
    frame = history(spark, [])
    with pytest.raises(ValueError, match="keys is empty"):
        scd2(frame, [], TRACKED)
    with pytest.raises(ValueError, match="key change"):
        scd2(frame, ["customer_id"], ["customer_id", "email"])


def test_dim_customers_columns_and_stable_surrogate_key(spark: Any) -> None:
    rows = [ch("c", 1, 100, 110, t(10)), ch("u", 1, 200, 210, t(11), tier="silver"), ch("c", 2, 100, 120, t(10))]
    out = dim_customers(history(spark, rows))
    assert out.columns == ["customer_key", "customer_id", "email", "full_name", "country", "loyalty_tier",
                           "valid_from", "valid_to", "is_current", "is_deleted"]
    assert [f.dataType.simpleString() for f in out.schema.fields] == [
        "bigint", "bigint", "string", "string", "string", "string", "timestamp", "timestamp", "boolean", "boolean"]
    # Every row here starts a version: its key is the hash of the customer id and the row's position.
    hashed = history(spark, rows).select(
        "customer_id", "loyalty_tier", F.xxhash64("customer_id", "_snapshot_rank", "_commit_lsn", "_change_lsn"))
    expected = {(r[0], r[1]): r[2] for r in hashed.collect()}
    got = {(r.customer_id, r.loyalty_tier): (r.customer_key, r.is_current) for r in out.collect()}
    assert got == {(1, "gold"): (expected[1, "gold"], False), (1, "silver"): (expected[1, "silver"], True),
                   (2, "gold"): (expected[2, "gold"], True)}
    assert len(set(expected.values())) == 3
    again = dim_customers(history(spark, list(reversed(rows))))
    assertDataFrameEqual(again, out)


def test_dim_products_tracks_price_and_active(spark: Any) -> None:
    schema = StructType([StructField("op", StringType()), *PRODUCTS.schema.fields,
                         StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
                         StructField("_change_lsn", LongType()), StructField("_source_ts", TimestampType())])

    def p(op: str, commit: int, updated: datetime, price: str, active: bool = True, desc: str = "d") -> tuple[Any, ...]:
        return (op, 10, "SKU-10", "Kaffee", desc, Decimal(price), None, active, updated, 1, commit, commit + 1, updated)

    out = dim_products(spark.createDataFrame([
        p("c", 100, t(10), "18.90"), p("u", 200, t(11), "18.90", desc="longer text"),
        p("u", 300, t(12), "19.90"), p("u", 400, t(13), "19.90", active=False)], schema))
    assert out.columns == ["product_key", "product_id", "sku", "name", "price", "active", "valid_from", "valid_to",
                           "is_current", "is_deleted"]
    assert out.schema["price"].dataType.simpleString() == "decimal(12,2)"
    got = sorted((r.valid_from, r.price, r.active, r.valid_to, r.is_current) for r in out.collect())
    assert got == [(naive(t(10)), Decimal("18.90"), True, naive(t(12)), False),
                   (naive(t(12)), Decimal("19.90"), True, naive(t(13)), False),
                   (naive(t(13)), Decimal("19.90"), False, None, True)]
