"""Contracts for the CDC tables captured from the shop database.

Schema types mirror PostgreSQL: bigint -> long, integer -> int,
numeric(p,s) -> decimal(p,s), timestamptz -> timestamp (UTC), text/char/jsonb
-> string (jsonb kept as its JSON text). A column added in PostgreSQL later is
added to the silver table by the streaming app; the table's schema then is the
contract's superset (see spark_jobs.streaming.app).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

TOPIC_PREFIX = "shop"
TOPIC_PATTERN = r"shop\.public\..+"


@dataclass(frozen=True)
class CdcTable:
    """One captured table: its topic, primary key and row schema."""

    table: str
    keys: tuple[str, ...]
    schema: StructType

    def __post_init__(self) -> None:
        missing = [k for k in self.keys if k not in self.schema.names]
        if not self.keys or missing:
            raise ValueError(f"contract {self.table}: key columns {list(self.keys)} must be non-empty schema columns")

    @property
    def topic(self) -> str:
        return f"{TOPIC_PREFIX}.public.{self.table}"

    @property
    def bronze(self) -> str:
        return "bronze." + self.topic.replace(".", "__")

    @property
    def silver(self) -> str:
        """One row per key, as PostgreSQL has it (MERGEd per micro-batch, ``spark_jobs.silver.cdc``)."""
        return f"silver.{self.table}"

    @property
    def deleted(self) -> str:
        """Side table of deleted keys and the position of their delete (stale re-sends must not resurrect them)."""
        return f"silver.{self.table}__deleted"


def _schema(*cols: tuple[str, DataType, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in cols])


TS = TimestampType()
S = StringType()

CUSTOMERS = CdcTable("customers", ("customer_id",), _schema(
    ("customer_id", LongType(), False), ("email", S, True), ("full_name", S, True), ("country", S, True),
    ("loyalty_tier", S, True), ("profile", S, True), ("notes", S, True), ("created_at", TS, True),
    ("updated_at", TS, True)))
PRODUCTS = CdcTable("products", ("product_id",), _schema(
    ("product_id", LongType(), False), ("sku", S, True), ("name", S, True), ("description", S, True),
    ("price", DecimalType(12, 2), True), ("attributes", S, True), ("active", BooleanType(), True),
    ("updated_at", TS, True)))
ORDERS = CdcTable("orders", ("order_id",), _schema(
    ("order_id", LongType(), False), ("customer_id", LongType(), True), ("status", S, True), ("currency", S, True),
    ("total", DecimalType(14, 2), True), ("shipping", S, True), ("note", S, True), ("placed_at", TS, True),
    ("updated_at", TS, True)))
ORDER_ITEMS = CdcTable("order_items", ("order_id", "line_no"), _schema(
    ("order_id", LongType(), False), ("line_no", IntegerType(), False), ("product_id", LongType(), True),
    ("quantity", IntegerType(), True), ("unit_price", DecimalType(12, 2), True), ("discount", DecimalType(5, 4), True)))

CDC_TABLES: dict[str, CdcTable] = {t.topic: t for t in (CUSTOMERS, PRODUCTS, ORDERS, ORDER_ITEMS)}

#: Columns a silver CDC table stores next to the row image (order: op, position (most significant first), source
#: time, unknown payload keys), with their types; ``spark_jobs.silver.cdc_columns`` names them.
SILVER_METADATA = StructType([
    StructField("_op", S), StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
    StructField("_change_lsn", LongType()), StructField("_source_ts", TS), StructField("_extra", S)])
#: The position columns among them (a delete marker keeps its key and these).
POSITION_FIELDS = ("_snapshot_rank", "_commit_lsn", "_change_lsn")


def silver_schema(contract: CdcTable) -> StructType:
    """``silver.<table>`` as created: the contract's columns, then :data:`SILVER_METADATA`."""
    return StructType([*contract.schema.fields, *SILVER_METADATA.fields])


def deleted_schema(contract: CdcTable) -> StructType:
    """``silver.<table>__deleted`` (delete markers): the key columns and the position."""
    return StructType([*[contract.schema[k] for k in contract.keys], *[SILVER_METADATA[c] for c in POSITION_FIELDS]])
