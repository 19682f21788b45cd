"""The lake's table registry: every table once, with its grain, keys, partitioning, Delta properties and writer.

Schemas stay with the code that defines them (the CDC contracts in :mod:`spark_jobs.contracts.shop`, the event
contract, the hot views, the gold transforms); this registry says how each table is laid out and who may
write it (DESIGN.md: one writer per table). The streaming app creates its tables from here
(:func:`spark_jobs.streaming.common.create_table`), the gold jobs take their partition column from here, and
``tests/integration/test_table_registry.py`` checks the catalog of a running stack against it: no table
outside it, partitioning and properties as declared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from spark_jobs.contracts.shop import CDC_TABLES

#: Delta's auto compaction: a write that leaves ``spark.databricks.delta.autoCompact.minNumFiles`` (50) small
#: files in the partitions it touched bin-packs them in the same job (history: OPTIMIZE, auto=true). Bounded by
#: those files whatever the table's size, and run by the one writer (the hourly OPTIMIZE it replaced took
#: minutes, docs/benchmarks.md).
AUTO_COMPACT: Mapping[str, str] = MappingProxyType({"delta.autoOptimize.autoCompact": "true"})
#: CDC silver: the change data feed serves ``table_changes`` and streaming reads. Deletion vectors off: with them
#: each streaming MERGE ran 8 more Spark jobs ("Writing Deletion Vectors") and took longer on tables of this size
#: (docs/benchmarks.md, "Deletion vectors in the CDC MERGE"); the scheduled OPTIMIZE keeps files few and large.
SILVER_PROPS: Mapping[str, str] = MappingProxyType({"delta.enableDeletionVectors": "false",
                                                    "delta.enableChangeDataFeed": "true", **AUTO_COMPACT})
#: Hot tables get a version per batch: keep removed files 1 hour (readers of older versions, time travel) and
#: the log 1 day, instead of Delta's 7 and 30 days (~86,400 versions a day at one batch a second).
HOT_PROPS: Mapping[str, str] = MappingProxyType({"delta.deletedFileRetentionDuration": "interval 1 hours",
                                                 "delta.logRetentionDuration": "interval 1 days"})

#: Writers (DESIGN.md, single writer per table).
CDC_QUERY = "streaming app, query lake_cdc (Spark)"
EVENTS_QUERY = "streaming app, query lake_events (Spark)"
EVENTS_DRIVER = "streaming app, query lake_events (driver, delta-rs)"
HOT_DRIVER = "streaming app, query lake_events_hot (driver, delta-rs)"
GOLD_DAG = "Airflow lake_gold_daily (Spark Connect server)"
DQ_GATE = "data-quality gate (Airflow gold and lake_dq_streaming tasks, Spark Connect server)"
SMOKE = "lake job smoke / Airflow lake_smoke"
SERVING_DAG = "Airflow lake_gold_daily, task serving_watermark (Spark Connect server)"
REPLAY = "lake replay / Airflow lake_replay (its own driver; one replay at a time, the stream stopped for a switch)"


@dataclass(frozen=True)
class LakeTable:
    name: str
    grain: str
    writer: str
    keys: tuple[str, ...] = ()
    partitioned_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)


def _cdc_tables() -> list[LakeTable]:
    out = []
    for contract in CDC_TABLES.values():
        out += [
            LakeTable(contract.bronze, f"one row per Kafka record of {contract.topic}", CDC_QUERY,
                      ("topic", "partition", "offset"), ("ingest_date",), AUTO_COMPACT),
            LakeTable(contract.silver, f"one row per live row of PostgreSQL's {contract.table}", CDC_QUERY,
                      contract.keys, (), SILVER_PROPS),
            LakeTable(contract.deleted, f"one row per deleted key of {contract.table} (newest delete position)",
                      CDC_QUERY, contract.keys, (), AUTO_COMPACT),
        ]
    return out


_HOT = (("hot.sales_per_minute", "1-minute"), ("hot.active_users_5m", "5-minute"), ("hot.funnel_15m", "15-minute"))

TABLES: Mapping[str, LakeTable] = MappingProxyType({t.name: t for t in [
    *_cdc_tables(),
    LakeTable("quarantine.cdc", "one row per rejected CDC record (raw bytes, reason)", CDC_QUERY,
              ("topic", "partition", "offset"), (), AUTO_COMPACT),
    LakeTable("bronze.events__clickstream", "one row per Kafka record of events.clickstream", EVENTS_QUERY,
              ("topic", "partition", "offset"), ("ingest_date",), AUTO_COMPACT),
    LakeTable("silver.events", "one row per unique valid event", EVENTS_QUERY, ("event_id",), ("event_date",),
              AUTO_COMPACT),
    LakeTable("quarantine.events", "one row per rejected event (raw bytes, reason)", EVENTS_QUERY,
              ("topic", "partition", "offset"), (), AUTO_COMPACT),
    *[LakeTable(name, f"one row per {size} event-time window", HOT_DRIVER, ("window_start",), (), HOT_PROPS)
      for name, size in _HOT],
    LakeTable("ops.stream_events_ledger", "one row per events micro-batch", EVENTS_DRIVER, ("batch_id",)),
    LakeTable("ops.stream_hot_ledger", "one row per hot micro-batch (offsets, commit time, jobs, commits)",
              HOT_DRIVER, ("batch_id",), (), HOT_PROPS),
    LakeTable("gold.dim_customers", "one row per customer version (SCD2)", GOLD_DAG, ("customer_key",)),
    LakeTable("gold.dim_products", "one row per product version (SCD2)", GOLD_DAG, ("product_key",)),
    LakeTable("gold.fct_orders", "one row per order placed", GOLD_DAG, ("order_id",), ("order_date",)),
    LakeTable("gold.fct_daily_sales", "one row per order date and currency", GOLD_DAG, ("order_date", "currency"),
              ("order_date",)),
    LakeTable("gold.fct_daily_funnel", "one row per event date", GOLD_DAG, ("event_date",), ("event_date",)),
    LakeTable("ops.dq_results", "one row per expectation per validation", DQ_GATE,
              ("run_id", "table_name", "task_id", "expectation")),
    LakeTable("ops.smoke", "one row per n per smoke run", SMOKE, ("run_id", "n")),
    LakeTable("ops.serving_watermark", "one row per move of the serving layer's batch watermark", SERVING_DAG,
              ("seq",)),
    LakeTable("ops.replays", "one row per replay switch or rollback of a live table", REPLAY,
              ("replay_id", "table_name", "action")),
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
                             live.partitioned_by, live.properties)
    raise KeyError(f"{name} is not in the table registry (spark_jobs/contracts/tables.py): declare it there "
                   "with its grain, keys, partitioning, properties and writer")
