"""The streaming queries' table upkeep: when VACUUM runs and what it runs (a recording fake session), and Delta's
auto compaction plus VACUUM LITE on real local tables."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.contracts.tables import AUTO_COMPACT, LakeTable
from spark_jobs.table_io.create import create_table
from spark_jobs.table_io.maintenance import Maintenance


class RecordingSpark:
    def __init__(self, refuse_lite: bool = False) -> None:
        self.statements: list[str] = []
        self.refuse_lite = refuse_lite

    def sql(self, statement: str) -> None:
        self.statements.append(statement)
        if self.refuse_lite and statement.endswith(" LITE"):
            raise RuntimeError("[DELTA_CANNOT_VACUUM_LITE] VACUUM LITE cannot delete all eligible files ...")


def _maintenance(minutes: int, clock: list[float]) -> tuple[Maintenance, Any]:
    spark = RecordingSpark()
    settings: Any = SimpleNamespace(stream_maintenance_minutes=minutes, stream_compact_minutes=0)
    maintenance = Maintenance(spark, settings, "lake_test", ["silver.a", "hot.b"], clock=lambda: clock[0])  # type: ignore[arg-type]
    return maintenance, spark


def test_maintenance_runs_once_per_interval_on_every_owned_table() -> None:
    clock = [1000.0]
    maintenance, spark = _maintenance(10, clock)
    maintenance.run_if_due()
    assert spark.statements == []  # not before the first interval has passed
    clock[0] += 599
    maintenance.run_if_due()
    assert spark.statements == []
    clock[0] += 1
    maintenance.run_if_due()
    assert spark.statements == ["VACUUM silver.a LITE", "VACUUM hot.b LITE"]
    clock[0] += 10
    maintenance.run_if_due()
    assert len(spark.statements) == 2  # the interval starts again after a run


def test_compaction_runs_optimize_per_interval_recent_partitions_only_where_partitioned_by_day() -> None:
    clock = [0.0]
    spark = RecordingSpark()
    settings: Any = SimpleNamespace(stream_maintenance_minutes=0, stream_compact_minutes=10)
    maintenance = Maintenance(spark, settings, "lake_test", ["bronze.events__clickstream", "silver.orders"],  # type: ignore[arg-type]
                              clock=lambda: clock[0])
    clock[0] += 599
    maintenance.run_if_due()
    assert spark.statements == []
    clock[0] += 1
    maintenance.run_if_due()
    assert spark.statements == ["OPTIMIZE bronze.events__clickstream WHERE ingest_date >= date_sub(current_date(), 1)",
                                "OPTIMIZE silver.orders"]
    clock[0] += 10
    maintenance.run_if_due()
    assert len(spark.statements) == 2


def test_the_schedule_outlives_restarts_of_the_stream(tmp_path: Path) -> None:
    """A stream restarted more often than its compaction period still compacts on time: the periods count from the
    last run kept in the schedule file (before, each start reset them, and a day of benches never compacted)."""
    clock = [0.0]
    path = tmp_path / "maintenance" / "lake_test.json"
    settings: Any = SimpleNamespace(stream_maintenance_minutes=0, stream_compact_minutes=10)

    def start() -> tuple[Maintenance, RecordingSpark]:
        spark = RecordingSpark()
        return Maintenance(spark, settings, "lake_test", ["silver.orders"], clock=lambda: clock[0],  # type: ignore[arg-type]
                           schedule=path), spark

    first, spark = start()
    clock[0] = 599
    first.run_if_due()
    assert spark.statements == [] and path.is_file()
    second, spark = start()  # a restart at 599 s: still due at 600 s, counted from the first start
    clock[0] = 600
    second.run_if_due()
    assert spark.statements == ["OPTIMIZE silver.orders"]
    clock[0] = 700
    third, spark = start()  # a restart after the run: the next one is due 600 s after the run, not after the start
    clock[0] = 1199
    third.run_if_due()
    assert spark.statements == []
    clock[0] = 1200
    third.run_if_due()
    assert spark.statements == ["OPTIMIZE silver.orders"]


def test_an_unreadable_schedule_starts_its_periods_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from spark_jobs.table_io.maintenance import Schedule

    path = tmp_path / "s.json"
    path.write_text("{not json")
    clock = [100.0]
    schedule = Schedule(path, ("compact",), clock=lambda: clock[0])
    assert "unreadable" in caplog.text and str(path) in caplog.text
    assert not schedule.due("compact", 60)
    clock[0] = 160.0
    assert schedule.due("compact", 60)
    assert not schedule.due("compact", 0)  # a period of 0: never
    schedule.done("compact")
    assert Schedule(path, ("compact",), clock=lambda: clock[0]).last == {"compact": 160.0}  # written back


class BlockingSpark(RecordingSpark):
    """Records like RecordingSpark; a statement on a table in ``hold`` waits until ``release`` is set, and one on
    a table in ``fail`` raises."""

    def __init__(self, hold: tuple[str, ...] = (), fail: tuple[str, ...] = ()) -> None:
        import threading

        super().__init__()
        self.hold, self.fail = hold, fail
        self.release = threading.Event()
        self.threads: list[str] = []

    def sql(self, statement: str) -> None:
        import threading

        self.threads.append(threading.current_thread().name)
        self.statements.append(statement)
        table = statement.split()[1]
        if table in self.hold:
            assert self.release.wait(10), "the test never released the background statement"
        if table in self.fail:
            raise RuntimeError(f"[DELTA_CONCURRENT_DELETE_DELETE] {table}")


def test_append_only_tables_are_kept_up_in_the_background_and_merge_targets_between_batches() -> None:
    """With a background pool, the tables their writer only appends to (bronze, silver.events) are compacted in a
    thread while run_if_due returns; a MERGE target (silver.orders) is compacted in the caller, as before."""
    clock = [0.0]
    spark = BlockingSpark(hold=("bronze.events__clickstream",))
    settings: Any = SimpleNamespace(stream_maintenance_minutes=0, stream_compact_minutes=10)
    maintenance = Maintenance(spark, settings, "lake_test", ["bronze.events__clickstream", "silver.orders", "silver.events"],  # type: ignore[arg-type]
                              clock=lambda: clock[0], background_pool="archive")
    assert maintenance.background == ["bronze.events__clickstream", "silver.events"]
    assert maintenance.inline == ["silver.orders"]
    clock[0] = 600
    maintenance.run_if_due()  # returns with the background OPTIMIZE of bronze still held
    assert maintenance.running()
    assert "OPTIMIZE silver.orders" in spark.statements and "OPTIMIZE silver.events" not in spark.statements
    clock[0] = 1200
    maintenance.run_if_due()  # due again while the first background run holds: not doubled
    assert spark.statements.count("OPTIMIZE bronze.events__clickstream WHERE ingest_date >= date_sub(current_date(), 1)") == 1
    assert spark.statements.count("OPTIMIZE silver.orders") == 2
    spark.release.set()
    maintenance.wait(10)
    assert not maintenance.running()
    assert "OPTIMIZE silver.events" in spark.statements
    background = {t for t, st in zip(spark.threads, spark.statements, strict=True) if "silver.orders" not in st}
    assert background == {"lake_test-upkeep"}
    assert {t for t, st in zip(spark.threads, spark.statements, strict=True) if "silver.orders" in st} != background


def test_a_failed_background_upkeep_is_logged_and_tried_again_a_period_later(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    spark = BlockingSpark(fail=("silver.events",))
    settings: Any = SimpleNamespace(stream_maintenance_minutes=0, stream_compact_minutes=10)
    maintenance = Maintenance(spark, settings, "lake_test", ["silver.events"], clock=lambda: clock[0],  # type: ignore[arg-type]
                              background_pool="archive")
    clock[0] = 600
    maintenance.run_if_due()  # does not raise: the batch loop goes on
    maintenance.wait(10)
    assert "background upkeep of silver.events failed" in caplog.text and "DELTA_CONCURRENT_DELETE_DELETE" in caplog.text
    clock[0] = 1199
    maintenance.run_if_due()
    maintenance.wait(10)
    assert spark.statements == ["OPTIMIZE silver.events"]
    clock[0] = 1200
    maintenance.run_if_due()
    maintenance.wait(10)
    assert spark.statements == ["OPTIMIZE silver.events", "OPTIMIZE silver.events"]


def test_maintenance_interval_zero_never_runs() -> None:
    clock = [0.0]
    maintenance, spark = _maintenance(0, clock)
    clock[0] += 10**9
    maintenance.run_if_due()
    assert spark.statements == []


def test_a_refused_lite_vacuum_runs_full_once_and_other_errors_propagate() -> None:
    clock = [0.0]
    maintenance, _ = _maintenance(1, clock)
    maintenance.spark = spark = RecordingSpark(refuse_lite=True)  # type: ignore[assignment]
    clock[0] += 60
    maintenance.run_if_due()
    assert spark.statements == ["VACUUM silver.a LITE", "VACUUM silver.a FULL", "VACUUM hot.b LITE", "VACUUM hot.b FULL"]

    class Broken(RecordingSpark):
        def sql(self, statement: str) -> None:
            raise RuntimeError("[DELTA_TABLE_NOT_FOUND] silver.a")

    maintenance.spark = Broken()  # type: ignore[assignment]
    clock[0] += 60
    with pytest.raises(RuntimeError, match="DELTA_TABLE_NOT_FOUND"):
        maintenance.run_if_due()


def test_auto_compaction_and_vacuum_lite_on_real_tables(spark: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An owned table created by an older version gets auto compaction set; after enough small appends the
    write itself compacts the partition (history: OPTIMIZE, auto=true); VACUUM LITE then deletes the files
    compaction removed (retention 0 here, so the test need not wait 7 days)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, LongType, StructField, StructType

    monkeypatch.setattr("spark_jobs.table_io.create.table_location", lambda settings, name: str(tmp_path / name))
    schema = StructType([StructField("id", LongType()), StructField("d", DateType())])
    registry = {"default.upkeep_t": LakeTable("default.upkeep_t", "test", "test", partitioned_by=("d",))}
    monkeypatch.setattr("spark_jobs.table_io.create.lake_table", registry.__getitem__)
    create_table(spark, None, "default.upkeep_t", schema)  # type: ignore[arg-type]
    # The registry now declares auto compaction: create_table sets it on the table that exists.
    registry["default.upkeep_t"] = LakeTable("default.upkeep_t", "test", "test", partitioned_by=("d",),
                                             properties=AUTO_COMPACT)
    create_table(spark, None, "default.upkeep_t", schema)  # type: ignore[arg-type]
    props = spark.sql("SHOW TBLPROPERTIES default.upkeep_t").collect()
    assert {r.key: r.value for r in props}.get("delta.autoOptimize.autoCompact") == "true"
    spark.sql("ALTER TABLE default.upkeep_t SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    location = tmp_path / "default.upkeep_t"
    spark.conf.set("spark.databricks.delta.autoCompact.minNumFiles", "5")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        for i in range(6):
            (spark.range(1).select(F.lit(i).cast("bigint").alias("id"), F.lit("2026-11-25").cast("date").alias("d"))
             .write.format("delta").mode("append").save(str(location)))
        history = spark.sql("DESCRIBE HISTORY default.upkeep_t").collect()
        compactions = [h for h in history if h.operation == "OPTIMIZE"]
        assert compactions and compactions[0].operationParameters["auto"] == "true", [h.operation for h in history]
        assert sorted(r.id for r in spark.table("default.upkeep_t").collect()) == list(range(6))
        def data_files() -> int:
            return len([f for f in location.rglob("*.parquet") if "_delta_log" not in f.parts])

        files_before = data_files()
        clock = [0.0]
        settings: Any = SimpleNamespace(stream_maintenance_minutes=1, stream_compact_minutes=0)
        maintenance = Maintenance(spark, settings, "lake_test", ["default.upkeep_t"], clock=lambda: clock[0])
        clock[0] += 60
        maintenance.run_if_due()
        live = spark.sql("DESCRIBE DETAIL default.upkeep_t").head().numFiles
        assert data_files() == live < files_before
        assert sorted(r.id for r in spark.table("default.upkeep_t").collect()) == list(range(6))
    finally:
        spark.conf.unset("spark.databricks.delta.autoCompact.minNumFiles")
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
        spark.sql("DROP TABLE IF EXISTS default.upkeep_t")


def test_a_background_optimize_beside_appends_loses_no_row_and_conflicts_with_none(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The claim the background upkeep rests on, on a real Delta table: blind appends committed while an OPTIMIZE of
    the same table runs in the background thread neither fail nor are lost, and the OPTIMIZE commits (Delta 4.4's
    conflict check under WriteSerializable), with the stream's file-size settings (files under half the target
    packed, larger ones left alone)."""
    import time

    from pyspark.sql import functions as F

    from spark_jobs.contracts.tables import APPEND

    location = str(tmp_path / "bg_t")
    registry = {"default.bg_t": LakeTable("default.bg_t", "test", "test", write_mode=APPEND)}
    monkeypatch.setattr("spark_jobs.table_io.maintenance.TABLES", registry)

    def append(first: int, n: int = 50) -> None:
        (spark.range(first, first + n).select(F.col("id"), F.lit("x" * 200).alias("pad"))
         .coalesce(1).write.format("delta").mode("append").save(location))

    for i in range(40):  # 40 small files: an OPTIMIZE with something to do
        append(i * 50)
    spark.sql(f"CREATE TABLE default.bg_t USING DELTA LOCATION '{location}'")
    big = "spark.databricks.delta.optimize.maxFileSize"
    small = "spark.databricks.delta.optimize.minFileSize"
    spark.conf.set(big, str(1024 * 1024))
    spark.conf.set(small, str(512 * 1024))
    try:
        clock = [0.0]
        settings: Any = SimpleNamespace(stream_maintenance_minutes=0, stream_compact_minutes=1)
        maintenance = Maintenance(spark, settings, "lake_test", ["default.bg_t"], clock=lambda: clock[0],
                                  background_pool="archive")
        clock[0] = 60
        maintenance.run_if_due()
        beside = 0
        next_id = 40 * 50
        deadline = time.monotonic() + 120
        while maintenance.running() and time.monotonic() < deadline:
            append(next_id)
            next_id += 50
            beside += 1
        maintenance.wait(120)
        assert not maintenance.running()
        assert beside >= 1, "no append committed while the OPTIMIZE ran: the test showed nothing"
        assert "failed" not in caplog.text
        history = spark.sql("DESCRIBE HISTORY default.bg_t").collect()
        assert any(h.operation == "OPTIMIZE" for h in history), [h.operation for h in history]
        ids = sorted(r.id for r in spark.table("default.bg_t").select("id").collect())
        assert ids == list(range(next_id))
    finally:
        spark.conf.unset(big)
        spark.conf.unset(small)
        spark.sql("DROP TABLE IF EXISTS default.bg_t")


def test_a_query_started_with_its_own_conf_leaves_the_session_as_it_was(spark: Any, tmp_path: Any) -> None:
    """start_with_query_conf: the query gets its settings and pool, the session keeps its own afterwards."""
    from spark_jobs.streaming.common import start_with_query_conf

    before = spark.conf.get("spark.sql.shuffle.partitions")
    seen: dict[str, str] = {}

    def start() -> Any:
        seen["partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
        seen["pool"] = spark.sparkContext.getLocalProperty("spark.scheduler.pool")
        return (spark.readStream.format("rate").load().writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / "cp")).start())

    query = start_with_query_conf(spark, {"spark.sql.shuffle.partitions": "7"}, "hot", start)
    try:
        assert query.isActive and seen == {"partitions": "7", "pool": "hot"}
        assert spark.conf.get("spark.sql.shuffle.partitions") == before
    finally:
        query.stop()
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
