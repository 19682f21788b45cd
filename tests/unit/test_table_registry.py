"""The table registry (spark_jobs/contracts/tables.py) as the one declaration of a table: what is derived from it,
what it refuses, and the README's "How to add a table" done for a throwaway gold table in a temp registry."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType, ModuleType, SimpleNamespace
from typing import Any, cast

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DateType, LongType, StructField, StructType

from spark_jobs.contracts import tables as registry
from spark_jobs.contracts.tables import (
    DQ_GATE_CHECK,
    GOLD_DAG,
    REPLACE_PARTITION,
    REPLACE_TABLE,
    TABLES,
    LakeTable,
    gold_steps,
)

REPO = Path(__file__).resolve().parents[2]
START, END = datetime(2026, 11, 19, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)

# --- the throwaway table: one declaration, its transform, its suite's business rules (and this test) ---------

THROWAWAY_SCHEMA = StructType([StructField("order_date", DateType()), StructField("big_orders", LongType(), False)])
THROWAWAY = LakeTable("gold.fct_throwaway", "one row per order date", GOLD_DAG, ("order_date",), ("order_date",),
                      write_mode=REPLACE_PARTITION, reads=("gold.fct_orders",),
                      transform="tests.unit.test_table_registry:fct_throwaway", dq=DQ_GATE_CHECK,
                      schema=THROWAWAY_SCHEMA)
THROWAWAY_SUITE = """\
table: gold.fct_throwaway
row_keys: [order_date]
expectations:
- name: big_orders_not_negative
  type: expect_column_values_to_be_between
  kwargs: {column: big_orders, min_value: 0}
  severity: block
"""


def fct_throwaway(read: Callable[[str], DataFrame], start: datetime, end: datetime) -> DataFrame:
    """Orders of 100 or more per day."""
    orders = read("gold.fct_orders")
    return (orders.where((F.col("order_date") >= F.lit(start.date())) & (F.col("order_date") < F.lit(end.date()))
                         & (F.col("total") >= 100))
            .groupBy("order_date").agg(F.count(F.lit(1)).alias("big_orders")))


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The registry with the throwaway table added, and the modules that derive their lists from it re-imported
    under it (and again without it afterwards)."""
    derived = ("spark_jobs.jobs.gold", "spark_jobs.stack.bootstrap", "spark_jobs.bench.dq", "spark_jobs.quality.checks")
    monkeypatch.setattr(registry, "TABLES", MappingProxyType({**TABLES, THROWAWAY.name: THROWAWAY}))
    modules = {name: importlib.reload(importlib.import_module(name)) for name in derived}
    try:
        yield modules
    finally:
        monkeypatch.undo()
        for name in derived:
            importlib.reload(importlib.import_module(name))


def _load_dag(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", REPO / "dags" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def test_a_gold_table_added_to_the_registry_is_built_scheduled_pooled_checked_and_benched(
        throwaway: dict[str, ModuleType], spark: Any, tmp_path: Path) -> None:
    gold = throwaway["spark_jobs.jobs.gold"]
    # The gold job: a step after what it reads, replaced by its date partition.
    assert gold.STEPS[-1] == "fct_throwaway" and gold.PARTITION["fct_throwaway"] == "order_date"
    # The DAG: its task, after fct_orders, in its own pool, with its Asset; the serving watermark after it.
    dag = _load_dag("lake_gold_daily")
    task = dag.get_task("fct_throwaway")
    assert task.upstream_task_ids == {"fct_orders"}
    assert task.pool == "gold_fct_throwaway" and [o.name for o in task.outlets] == ["gold.fct_throwaway"]
    assert "fct_throwaway" in dag.get_task("serving_watermark").upstream_task_ids
    # The pool `lake stack up` creates, and the DQ bench's list.
    assert "gold_fct_throwaway" in throwaway["spark_jobs.stack.bootstrap"].GOLD_POOLS
    assert "gold.fct_throwaway" in throwaway["spark_jobs.bench.dq"].GOLD
    # Not a live table: the streaming DQ DAG leaves it to its gate.
    assert "gold.fct_throwaway" not in throwaway["spark_jobs.quality.checks"].LIVE_TABLES
    # compute(): the declared transform over what it declares it reads, checked against its schema.
    orders = spark.createDataFrame([(datetime(2026, 11, 19).date(), 150.0), (datetime(2026, 11, 19).date(), 5.0),
                                    (datetime(2026, 11, 20).date(), 500.0)], "order_date date, total double")
    lake = SimpleNamespace(table=lambda name: {"gold.fct_orders": orders}[name])
    rows = gold.compute(lake, "fct_throwaway", gold.Interval(START, END)).collect()
    assert [(r["order_date"].isoformat(), r["big_orders"]) for r in rows] == [("2026-11-19", 1)]
    # Its suite: the business rule from its file, the column and type checks from its registry schema.
    from spark_jobs.quality.suites import load_suite

    (tmp_path / "gold.fct_throwaway.yml").write_text(THROWAWAY_SUITE)
    suite = load_suite("gold.fct_throwaway", tmp_path)
    assert [e.name for e in suite.expectations] == ["columns", "type:order_date", "type:big_orders",
                                                    "big_orders_not_negative"]
    assert suite.expectations[0].kwargs == {"column_set": ["order_date", "big_orders"], "exact_match": True}
    assert suite.expectations[1].kwargs == {"column": "order_date", "type_": "DateType"}


def test_a_transform_that_drifts_from_its_declared_schema_is_refused(throwaway: dict[str, ModuleType],
                                                                     spark: Any) -> None:
    gold = throwaway["spark_jobs.jobs.gold"]
    orders = spark.createDataFrame([(datetime(2026, 11, 19).date(), 150.0)], "order_date date, total double")
    frame = fct_throwaway(lambda name: orders, START, END).withColumn("big_orders", F.col("big_orders").cast("int"))
    with pytest.raises(gold.RunParamError, match=r"missing or other type: big_orders bigint; not declared: "
                                                 r"big_orders int\)"):
        gold.conform(frame, THROWAWAY)


def reads_undeclared(read: Callable[[str], DataFrame], start: datetime, end: datetime) -> DataFrame:
    return read("silver.orders")  # not in its reads


def test_a_transform_reading_an_undeclared_table_is_refused(throwaway: dict[str, ModuleType],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    gold = throwaway["spark_jobs.jobs.gold"]
    sloppy = dataclasses.replace(THROWAWAY, transform="tests.unit.test_table_registry:reads_undeclared")
    monkeypatch.setattr(registry, "TABLES", MappingProxyType({**TABLES, sloppy.name: sloppy}))
    with pytest.raises(ValueError, match="reads silver.orders, which its registry entry does not declare "
                                         r"\(reads: gold.fct_orders\): add it there"):
        gold.compute(SimpleNamespace(table=lambda name: None), "fct_throwaway", gold.Interval(START, END))


def test_gold_tables_must_be_declared_after_what_they_read() -> None:
    early = LakeTable("gold.fct_early", "x", GOLD_DAG, write_mode=REPLACE_TABLE, reads=("gold.fct_orders",),
                      transform="m:f")
    with pytest.raises(ValueError, match=r"gold.fct_early reads gold.fct_orders, declared after it"):
        gold_steps({early.name: early, **TABLES})
    typo = LakeTable("gold.fct_typo", "x", GOLD_DAG, write_mode=REPLACE_TABLE, reads=("bronze.shop__customers",),
                     transform="m:f")
    with pytest.raises(ValueError, match=r"reads bronze\.shop__customers, which the registry does not declare"):
        gold_steps({**TABLES, typo.name: typo})
    with pytest.raises(ValueError, match="needs its transform"):
        gold_steps({"gold.bare": LakeTable("gold.bare", "x", GOLD_DAG, write_mode=REPLACE_TABLE)})


def test_declarations_name_their_mistakes() -> None:
    with pytest.raises(ValueError, match="write_mode 'upsert' is not one of append-once"):
        LakeTable("gold.x", "x", GOLD_DAG, write_mode="upsert")
    with pytest.raises(ValueError, match="replace-partition needs exactly one partition column"):
        LakeTable("gold.x", "x", GOLD_DAG, write_mode=REPLACE_PARTITION)
    with pytest.raises(ValueError, match="is not 'module:function'"):
        LakeTable("gold.x", "x", GOLD_DAG, write_mode=REPLACE_TABLE, transform="spark_jobs.gold.steps.fct_orders")


def test_every_table_declares_its_columns_and_every_live_table_its_freshness_slo() -> None:
    assert [t.name for t in TABLES.values() if t.schema is None] == []
    live = registry.live_tables()
    assert registry.freshness_slos() == {t: (300 if t.startswith("hot.") else 900) for t in live}
    with pytest.raises(ValueError, match=r"silver.x: a table the live checks validate .* declares its "
                                         r"freshness_slo_seconds \(> 0\), and only such a table does"):
        LakeTable("silver.x", "x", GOLD_DAG, dq=registry.DQ_LIVE)
    with pytest.raises(ValueError, match="and only such a table does"):
        LakeTable("gold.x", "x", GOLD_DAG, write_mode=REPLACE_TABLE, freshness_slo_seconds=60)
    with pytest.raises(KeyError, match=r"quarantine\.dq_gold_x declares no schema"):
        registry.schema_of("quarantine.dq_gold_x")


def test_ops_smoke_is_written_as_declared(spark: Any) -> None:
    from spark_jobs.jobs.smoke import smoke_rows

    written = smoke_rows(spark, "r1", 3).schema
    assert [(f.name, f.dataType, f.nullable) for f in written.fields] == [
        (f.name, f.dataType, f.nullable) for f in registry.schema_of("ops.smoke").fields]


def test_every_gold_transform_returns_its_declared_schema(spark: Any) -> None:
    """The registry's gold schemas are what the transforms return, on inputs laid out as the lake's tables."""
    from spark_jobs.contracts.shop import CDC_TABLES, silver_schema
    from spark_jobs.contracts.tables import schema_of
    from spark_jobs.jobs.gold import conform

    frames: dict[str, DataFrame] = {"silver.events": spark.createDataFrame([], TABLES["silver.events"].schema)}
    for contract in CDC_TABLES.values():
        frames[contract.bronze] = spark.createDataFrame([], schema_of(contract.bronze))
        frames[contract.silver] = spark.createDataFrame([], silver_schema(contract))
    from spark_jobs.jobs.gold import Interval, compute

    lake = SimpleNamespace(table=frames.__getitem__)
    for table in gold_steps():
        # Through compute(): each transform reads only what its entry declares (the names must be the lake's).
        frame = compute(cast(Any, lake), table.short, Interval(START, END))
        conform(frame, table)  # raises naming the difference
        frames[table.name] = frame


def test_silver_events_is_created_as_the_check_outputs_it(spark: Any) -> None:
    from spark_jobs.contracts.tables import schema_of
    from spark_jobs.silver.clickstream import checked_schema, valid_events

    ingest_time = schema_of("bronze.events__clickstream")["ingest_time"]
    empty = spark.createDataFrame([], StructType([*checked_schema().fields, ingest_time]))
    written = StructType([*valid_events(empty).schema.fields, StructField("_late", BooleanType()),
                          StructField("_batch_id", LongType())])
    declared = TABLES["silver.events"].schema
    assert declared is not None
    assert [(f.name, f.dataType) for f in declared.fields] == [(f.name, f.dataType) for f in written.fields]


def test_every_writer_refuses_a_table_declared_with_another_write_mode(tmp_path: Path) -> None:
    """The registry's write mode decides: the append-once, driver-upsert and merge-by-position writers refuse a
    table declared otherwise before writing anything; names outside the registry (tests' tables) pass."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from spark_jobs.table_io import require_write_mode
    from spark_jobs.table_io.append import OnceAppender
    from spark_jobs.table_io.driver import DriverTable
    from spark_jobs.table_io.merge import merge_once

    assert TABLES["silver.orders__deleted"].write_mode == registry.APPEND  # markers are appended
    require_write_mode("bronze.shop__public__orders", registry.APPEND)
    require_write_mode("default.scratch", registry.DRIVER_UPSERT)
    with pytest.raises(ValueError, match=r"silver\.orders is declared merge-by-position .*; this writer writes "
                                         r"append-once"):
        OnceAppender(cast(Any, None)).append(cast(Any, None), "silver.orders", "app", 1)
    write_deltalake(str(tmp_path), pa.table({"window_start": pa.array([1], pa.int64())}))
    hot = DriverTable(None, "hot.sales_per_minute", uri=str(tmp_path))
    with pytest.raises(ValueError, match=r"hot\.sales_per_minute is declared driver-upsert .* writes append-once"):
        hot.write_once([{"window_start": 2}], "app", 1, "append")
    ledger = DriverTable(None, "ops.stream_hot_ledger", uri=str(tmp_path))
    with pytest.raises(ValueError, match=r"ops\.stream_hot_ledger is declared append-once .* writes driver-upsert"):
        ledger.upsert_once([{"window_start": 2}], "window_start", "app", 1)
    with pytest.raises(ValueError, match=r"hot\.sales_per_minute is declared driver-upsert .* merge-by-position"):
        merge_once(hot, pa.table({"window_start": [3]}), ["window_start"], [], "app", 1)
    assert hot.read().num_rows == 1  # nothing was written
