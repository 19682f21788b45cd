"""The lake's table registry: every table once, with its grain, keys, partitioning, Delta properties, writer and
write mode; a gold table also with the tables it reads and its transform.

Every table's columns are declared here or by the contract it comes from (the CDC contracts in
:mod:`spark_jobs.contracts.shop`, the event contract, the hot views; bronze, quarantine and ops tables in
:mod:`spark_jobs.contracts.lake_schemas`; gold below), with how it is laid out, who may write it (one writer per
table) and, for a table the live checks validate, its freshness SLO. Writers take a table's columns from here
(:func:`schema_of`). Derived from it: the streaming app's table DDL
(:func:`spark_jobs.table_io.create.create_table`); the gold steps, their order and partition columns
(:mod:`spark_jobs.jobs.gold`), the gold DAG's tasks, dependencies and Assets, its Airflow pools, ``lake gold build
--tables``, the DQ and bench table lists (:func:`gold_steps`, :func:`live_tables`). ``tests/integration/
test_table_registry.py`` checks the catalog of a running stack against it: no table outside it, partitioning and
properties as declared.

Adding a gold table: one :class:`LakeTable` here (``reads``, ``transform``, ``write_mode``), its transform (a
function ``(read, start, end) -> DataFrame`` in :mod:`spark_jobs.gold.steps`), its suite
(``expectations/<db>.<table>.yml``) and a test of the transform.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.contracts import lake_schemas
from spark_jobs.contracts.clickstream import silver_schema as events_silver_schema
from spark_jobs.contracts.shop import CDC_TABLES, CUSTOMERS, PRODUCTS, deleted_schema, silver_schema
from spark_jobs.hot.windows import HOT_VIEWS, hot_schema

#: Delta's auto compaction: a write that leaves ``spark.databricks.delta.autoCompact.minNumFiles`` (50) small
#: files in the partitions it touched bin-packs them in the same job (history: OPTIMIZE, auto=true). Bounded by
#: those files whatever the table's size, and run by the one writer (the hourly OPTIMIZE it replaced took
#: minutes, docs/benchmarks.md).
AUTO_COMPACT: Mapping[str, str] = MappingProxyType({"delta.autoOptimize.autoCompact": "true"})
#: The stream's append-only tables (bronze, quarantine, delete markers, ``silver.events``) get a commit per batch:
#: a Delta checkpoint every 50 commits instead of Delta's 10. Each checkpoint is two or three Spark jobs in the batch
#: that writes it (bronze and silver.events reached theirs in the same events batch: +2-3 s in every tenth batch;
#: docs/benchmarks.md). A reader replays at most 49 small JSON commits after a checkpoint.
STREAM_APPEND: Mapping[str, str] = MappingProxyType({**AUTO_COMPACT, "delta.checkpointInterval": "50"})
#: CDC silver: the change data feed serves ``table_changes`` and streaming reads. Deletion vectors off: with them
#: each streaming MERGE ran 8 more Spark jobs ("Writing Deletion Vectors") and took longer on tables of this size
#: (docs/benchmarks.md, "Deletion vectors in the CDC MERGE"); the scheduled OPTIMIZE keeps files few and large.
SILVER_PROPS: Mapping[str, str] = MappingProxyType({"delta.enableDeletionVectors": "false",
                                                    "delta.enableChangeDataFeed": "true", **AUTO_COMPACT})
#: Hot tables get a version per batch: keep removed files 1 hour (readers of older versions, time travel) and
#: the log 1 day, instead of Delta's 7 and 30 days (~86,400 versions a day at one batch a second).
HOT_PROPS: Mapping[str, str] = MappingProxyType({"delta.deletedFileRetentionDuration": "interval 1 hours",
                                                 "delta.logRetentionDuration": "interval 1 days"})

#: Freshness SLOs (seconds) of the live tables: silver's newest applied change, a hot table's newest closed window
#: past its length (checked every few minutes by lake_dq_streaming, severity warn).
SILVER_FRESHNESS_S = 900
HOT_FRESHNESS_S = 300

#: Writers (DESIGN.md, single writer per table).
CDC_QUERY = "streaming app, query lake_cdc (Spark)"
EVENTS_QUERY = "streaming app, query lake_events (Spark)"
EVENTS_DRIVER = "streaming app, query lake_events (driver, delta-rs)"
HOT_DRIVER = "streaming app, query lake_events (driver, delta-rs)"
GOLD_DAG = "Airflow lake_gold_daily (Spark Connect server)"
DQ_GATE = "data-quality gate (Airflow gold and lake_dq_streaming tasks, Spark Connect server)"
SMOKE = "lake job smoke / Airflow lake_smoke"
SERVING_DAG = "Airflow lake_gold_daily, task serving_watermark (Spark Connect server)"
REPLAY = "lake replay / Airflow lake_replay (its own driver; one replay at a time, the stream stopped for a switch)"


#: How a table's writer writes it (``write_mode``).
APPEND = "append-once"  # each record once, idempotent per batch (bronze, silver.events, quarantine, ledgers)
MERGE_BY_POSITION = "merge-by-position"  # newest change per key wins by its source position (silver CDC)
DRIVER_UPSERT = "driver-upsert"  # small aggregate rows upserted from the driver with delta-rs (hot windows)
REPLACE_PARTITION = "replace-partition"  # the run's interval of partitions replaced (replaceWhere: gold facts)
REPLACE_TABLE = "replace-table"  # the whole table overwritten (gold SCD2 dimensions)
WRITE_MODES = (APPEND, MERGE_BY_POSITION, DRIVER_UPSERT, REPLACE_PARTITION, REPLACE_TABLE)

#: Data-quality checks: ``live`` tables are validated by the lake_dq_streaming DAG (a recent window, warn-only);
#: ``gate`` tables by the task that writes them, before the write (block rules fail it and publish nothing).
DQ_LIVE = "live"
DQ_GATE_CHECK = "gate"


@dataclass(frozen=True)
class LakeTable:
    name: str
    grain: str
    writer: str
    keys: tuple[str, ...] = ()
    partitioned_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    write_mode: str = APPEND
    #: Lake tables a batch transform reads (gold); the gold tables among them are its steps' dependencies.
    reads: tuple[str, ...] = ()
    #: ``module:function`` of a gold table's transform, ``(read, start, end) -> DataFrame``.
    transform: str = ""
    #: Which data-quality check validates it (``expectations/<name>.yml``): :data:`DQ_LIVE`, :data:`DQ_GATE_CHECK`
    #: or none.
    dq: str = ""
    #: Columns and types as created (a gold transform's output must match it; a suite's column and type checks
    #: are derived from it). None only for tables whose columns are not fixed (a DQ gate's quarantine is the
    #: validated table's columns plus the failed rules).
    schema: StructType | None = None
    #: The freshness SLO of a :data:`DQ_LIVE` table, in seconds (its suite's ``{freshness_slo_seconds}``): a silver
    #: table's newest applied change must be younger; a hot table's newest closed window must have ended less than
    #: its length plus this ago. ``LAKE_DQ_FRESHNESS_TABLES`` overrides it per installation.
    freshness_slo_seconds: int = 0

    def __post_init__(self) -> None:
        if self.write_mode not in WRITE_MODES:
            raise ValueError(f"{self.name}: write_mode {self.write_mode!r} is not one of {', '.join(WRITE_MODES)}")
        if self.write_mode == REPLACE_PARTITION and len(self.partitioned_by) != 1:
            raise ValueError(f"{self.name}: {REPLACE_PARTITION} needs exactly one partition column (the interval's "
                             f"date), not {self.partitioned_by}")
        if self.transform and ":" not in self.transform:
            raise ValueError(f"{self.name}: transform {self.transform!r} is not 'module:function'")
        if (self.dq == DQ_LIVE) != (self.freshness_slo_seconds > 0):
            raise ValueError(f"{self.name}: a table the live checks validate (dq={DQ_LIVE!r}) declares its "
                             f"freshness_slo_seconds (> 0), and only such a table does (dq={self.dq!r}, "
                             f"freshness_slo_seconds={self.freshness_slo_seconds})")

    @property
    def layer(self) -> str:
        """The database: bronze, silver, hot, gold, quarantine, ops."""
        return self.name.partition(".")[0]

    @property
    def columns_may_widen(self) -> bool:
        """A silver CDC table gains the columns PostgreSQL's table gains: its declared columns are a subset."""
        return self.layer == "silver" and self.write_mode == MERGE_BY_POSITION

    @property
    def short(self) -> str:
        """The name without its database (a gold table's step, task and pool name)."""
        return self.name.partition(".")[2]


def _cdc_tables() -> list[LakeTable]:
    out = []
    for contract in CDC_TABLES.values():
        out += [
            LakeTable(contract.bronze, f"one row per Kafka record of {contract.topic}", CDC_QUERY,
                      ("topic", "partition", "offset"), ("ingest_date",), STREAM_APPEND, schema=lake_schemas.BRONZE),
            LakeTable(contract.silver, f"one row per live row of PostgreSQL's {contract.table}", CDC_QUERY,
                      contract.keys, (), SILVER_PROPS, MERGE_BY_POSITION, dq=DQ_LIVE, schema=silver_schema(contract),
                      freshness_slo_seconds=SILVER_FRESHNESS_S),
            # Delete markers, appended after the MERGE: a key's newest marker hides its older changes.
            LakeTable(contract.deleted, f"one row per applied delete of {contract.table} (key, source position)",
                      CDC_QUERY, contract.keys, (), STREAM_APPEND, APPEND, schema=deleted_schema(contract)),
        ]
    return out


BIGINT, STRING, DATE, TIMESTAMP, BOOLEAN, DOUBLE = LongType(), StringType(), DateType(), TimestampType(), BooleanType(), \
    DoubleType()
MONEY = DecimalType(18, 2)
#: An SCD2 dimension's version columns.
_SCD2 = (("valid_from", TIMESTAMP), ("valid_to", TIMESTAMP), ("is_current", BOOLEAN), ("is_deleted", BOOLEAN))


def _gold_schema(*columns: tuple[str, DataType] | tuple[str, DataType, bool]) -> StructType:
    """A gold table's columns as its transform outputs them (``(name, type)`` nullable, or ``(name, type, False)``)."""
    return StructType([StructField(c[0], c[1], c[2] if len(c) == 3 else True) for c in columns])


#: Where the gold transforms are (``(read, start, end) -> DataFrame`` each).
_GOLD_STEPS = "spark_jobs.gold.steps"


TABLES: Mapping[str, LakeTable] = MappingProxyType({t.name: t for t in [
    *_cdc_tables(),
    LakeTable("quarantine.cdc", "one row per rejected CDC record (raw bytes, reason)", CDC_QUERY,
              ("topic", "partition", "offset"), (), STREAM_APPEND, schema=lake_schemas.QUARANTINE),
    LakeTable("bronze.events__clickstream", "one row per Kafka record of events.clickstream", EVENTS_QUERY,
              ("topic", "partition", "offset"), ("ingest_date",), STREAM_APPEND, schema=lake_schemas.BRONZE),
    LakeTable("silver.events", "one row per unique valid event", EVENTS_QUERY, ("event_id",), ("event_date",),
              STREAM_APPEND, dq=DQ_LIVE, schema=events_silver_schema(), freshness_slo_seconds=SILVER_FRESHNESS_S),
    LakeTable("quarantine.events", "one row per rejected event (raw bytes, reason)", EVENTS_QUERY,
              ("topic", "partition", "offset"), (), STREAM_APPEND, schema=lake_schemas.QUARANTINE),
    # The hot tables as the speed layer defines them (name, window, metrics: spark_jobs.hot.windows).
    *[LakeTable(view.table, f"one row per {view.minutes}-minute event-time window", HOT_DRIVER, ("window_start",),
                (), HOT_PROPS, DRIVER_UPSERT, dq=DQ_LIVE, schema=hot_schema(view),
                freshness_slo_seconds=HOT_FRESHNESS_S)
      for view in HOT_VIEWS],
    LakeTable("ops.stream_events_ledger", "one row per events micro-batch", EVENTS_DRIVER, ("batch_id",),
              schema=lake_schemas.EVENTS_LEDGER),
    LakeTable("ops.stream_hot_ledger", "one row per hot micro-batch (offsets, commit time, jobs, commits)",
              HOT_DRIVER, ("batch_id",), (), HOT_PROPS, schema=lake_schemas.HOT_LEDGER),
    # Gold, in build order (a table after every gold table it reads; gold_steps() checks it).
    LakeTable("gold.dim_customers", "one row per customer version (SCD2)", GOLD_DAG, ("customer_key",),
              write_mode=REPLACE_TABLE, reads=(CUSTOMERS.bronze,), transform=_GOLD_STEPS + ":dim_customers",
              dq=DQ_GATE_CHECK,
              schema=_gold_schema(("customer_key", BIGINT, False), ("customer_id", BIGINT), ("email", STRING),
                           ("full_name", STRING), ("country", STRING), ("loyalty_tier", STRING), *_SCD2)),
    LakeTable("gold.dim_products", "one row per product version (SCD2)", GOLD_DAG, ("product_key",),
              write_mode=REPLACE_TABLE, reads=(PRODUCTS.bronze,), transform=_GOLD_STEPS + ":dim_products",
              dq=DQ_GATE_CHECK,
              schema=_gold_schema(("product_key", BIGINT, False), ("product_id", BIGINT), ("sku", STRING), ("name", STRING),
                           ("price", DecimalType(12, 2)), ("active", BOOLEAN), *_SCD2)),
    LakeTable("gold.fct_orders", "one row per order placed", GOLD_DAG, ("order_id",), ("order_date",),
              write_mode=REPLACE_PARTITION, reads=("silver.orders", "silver.order_items", "gold.dim_customers"),
              transform=_GOLD_STEPS + ":fct_orders", dq=DQ_GATE_CHECK,
              schema=_gold_schema(("order_id", BIGINT, False), ("customer_id", BIGINT), ("customer_key", BIGINT),
                           ("status", STRING), ("currency", STRING), ("total", DecimalType(14, 2)),
                           ("item_count", BIGINT, False), ("units", BIGINT, False),
                           ("items_amount", DecimalType(14, 2)), ("placed_at", TIMESTAMP), ("order_date", DATE))),
    LakeTable("gold.fct_daily_sales", "one row per order date and currency", GOLD_DAG, ("order_date", "currency"),
              ("order_date",), write_mode=REPLACE_PARTITION, reads=("gold.fct_orders",),
              transform=_GOLD_STEPS + ":fct_daily_sales", dq=DQ_GATE_CHECK,
              schema=_gold_schema(("order_date", DATE), ("currency", STRING), ("orders", BIGINT, False),
                           ("paid_orders", BIGINT, False), ("revenue", MONEY), ("refunded_amount", MONEY),
                           ("cancelled_orders", BIGINT, False), ("units", BIGINT, False), ("customers", BIGINT, False))),
    LakeTable("gold.fct_daily_funnel", "one row per event date", GOLD_DAG, ("event_date",), ("event_date",),
              write_mode=REPLACE_PARTITION, reads=("silver.events",),
              transform=_GOLD_STEPS + ":fct_daily_funnel", dq=DQ_GATE_CHECK,
              schema=_gold_schema(("event_date", DATE), ("sessions_viewed", BIGINT, False),
                           ("sessions_carted", BIGINT, False), ("sessions_checked_out", BIGINT, False),
                           ("sessions_purchased", BIGINT, False), ("purchases", BIGINT, False), ("view_to_cart", DOUBLE),
                           ("cart_to_checkout", DOUBLE), ("checkout_to_purchase", DOUBLE), ("view_to_purchase", DOUBLE))),
    LakeTable("ops.dq_results", "one row per expectation per validation", DQ_GATE,
              ("run_id", "table_name", "task_id", "expectation"), schema=lake_schemas.DQ_RESULTS),
    LakeTable("ops.smoke", "one row per n per smoke run", SMOKE, ("run_id", "n"), schema=lake_schemas.SMOKE),
    LakeTable("ops.serving_watermark", "one row per move of the serving layer's batch watermark", SERVING_DAG,
              ("seq",), schema=lake_schemas.SERVING_WATERMARK),
    LakeTable("ops.replays", "one row per replay switch or rollback of a live table", REPLAY,
              ("replay_id", "table_name", "action"), schema=lake_schemas.REPLAYS),
]})

#: ``quarantine.dq_<layer>_<table>``: rows a data-quality gate held back, one table per validated table.
DQ_QUARANTINE_PREFIX = "quarantine.dq_"
#: ``replay.<db>__<table>``: a replay's shadow of ``<db>.<table>``, laid out as that table (spark_jobs.replay).
REPLAY_PREFIX = "replay."


def lake_table(name: str) -> LakeTable:
    """The registry entry of ``name`` (a DQ quarantine table gets its generic entry); unknown names are an error."""
    if name in TABLES:
        return TABLES[name]
    if name.startswith(DQ_QUARANTINE_PREFIX):
        return LakeTable(name, "one row per row a data-quality gate held back", DQ_GATE)
    if name.startswith(REPLAY_PREFIX) and "__" in name:
        db, _, table = name.removeprefix(REPLAY_PREFIX).partition("__")
        live = TABLES.get(f"{db}.{table}")
        if live is not None:
            return LakeTable(name, f"{live.grain} (replayed shadow of {live.name})", REPLAY, live.keys,
                             live.partitioned_by, live.properties, live.write_mode, schema=live.schema)
    raise KeyError(f"{name} is not in the table registry (spark_jobs/contracts/tables.py): declare it there "
                   "with its grain, keys, partitioning, properties and writer")


def schema_of(name: str) -> StructType:
    """The declared columns of registry table ``name`` (what its writer creates and writes)."""
    schema = lake_table(name).schema
    if schema is None:
        raise KeyError(f"{name} declares no schema in the table registry (spark_jobs/contracts/tables.py)")
    return schema


def freshness_slos(tables: Mapping[str, LakeTable] | None = None) -> dict[str, int]:
    """Each live table's freshness SLO in seconds, as declared."""
    return {t.name: t.freshness_slo_seconds for t in (TABLES if tables is None else tables).values()
            if t.freshness_slo_seconds}


def gold_steps(tables: Mapping[str, LakeTable] | None = None) -> list[LakeTable]:
    """The gold tables in build order: declaration order, checked to put each after the gold tables it reads."""
    gold = [t for t in (TABLES if tables is None else tables).values() if t.layer == "gold"]
    known = TABLES if tables is None else tables
    seen: set[str] = set()
    for table in gold:
        if not table.transform:
            raise ValueError(f"{table.name}: a gold table needs its transform ('module:function')")
        unknown = [r for r in table.reads if r not in known]
        if unknown:
            raise ValueError(f"{table.name} reads {', '.join(unknown)}, which the registry does not declare")
        later = [r for r in table.reads if r.startswith("gold.") and r not in seen]
        if later:
            raise ValueError(f"{table.name} reads {', '.join(later)}, declared after it (or not at all): declare the "
                             "gold tables in build order")
        seen.add(table.name)
    return gold


def gold_dependencies(table: LakeTable) -> tuple[str, ...]:
    """The gold tables ``table`` reads (their steps run before its own)."""
    return tuple(r for r in table.reads if r.startswith("gold."))


def live_tables(tables: Mapping[str, LakeTable] | None = None) -> tuple[str, ...]:
    """Tables the lake_dq_streaming DAG validates (:data:`DQ_LIVE`), in declaration order."""
    return tuple(t.name for t in (TABLES if tables is None else tables).values() if t.dq == DQ_LIVE)
