"""Driver-side Delta commits (delta-rs): exactly once per batch id, refusal of tables it must not write."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_jobs.settings import load_settings
from spark_jobs.table_io.driver import (
    DriverDeltaError,
    DriverTable,
    TaskAppend,
    append_split_in_task,
    check_writable,
    delta_rs_uri,
    log_metadata,
    log_version,
    log_written_rows,
    storage_options,
    table_uri,
    writable_target,
)

SCHEMA = pa.schema([pa.field("window_start", pa.timestamp("us", tz="UTC"), nullable=False),
                    pa.field("orders", pa.int64())])


def _table(tmp_path: Path) -> DriverTable:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.Table.from_pylist([], schema=SCHEMA), mode="error")
    return DriverTable(None, "hot.t", uri=uri)


def test_write_once_skips_a_batch_already_committed(tmp_path: Path) -> None:
    table = _table(tmp_path)
    row = {"window_start": datetime(2026, 11, 22, 12, tzinfo=UTC), "orders": 3}
    assert DeltaTable(table.uri).transaction_version("q1:hot.t") is None
    assert table.write_once([row], "q1", 7, "append") is True
    assert table.write_once([row], "q1", 7, "append") is False  # the replay of batch 7
    assert table.write_once([row], "q1", 6, "append") is False  # older than what is committed
    assert table.write_once([{**row, "orders": 4}], "q1", 8, "overwrite") is True
    assert DeltaTable(table.uri).transaction_version("q1:hot.t") == 8
    assert table.write_once([row], "q2", 1, "append") is True  # another query has its own transaction
    rows = DeltaTable(table.uri).to_pyarrow_table().to_pylist()
    assert sorted(r["orders"] for r in rows) == [3, 4]


def test_a_batch_a_spark_append_wrote_is_found_by_its_marker_on_a_first_batch(tmp_path: Path) -> None:
    """A Spark append (OnceAppender) sets the transaction on a driver's first batch only, the userMetadata marker
    always: the first batch after a start also looks for the marker, later batches only for the transaction."""
    from deltalake import CommitProperties

    table = _table(tmp_path)
    row = {"window_start": datetime(2026, 11, 22, 12, tzinfo=UTC), "orders": 3}
    write_deltalake(table.uri, pa.Table.from_pylist([row], schema=SCHEMA), mode="append",
                    commit_properties=CommitProperties(custom_metadata={"userMetadata": "q1:hot.t:5"}))
    assert table.write_once([row], "q1", 5, "append", check_history=True) is False
    assert table.write_once([row], "q1", 6, "append", check_history=True) is True
    assert DeltaTable(table.uri).history(1)[0]["userMetadata"] == "q1:hot.t:6"  # what a Spark append would find
    assert table.write_once([row], "q1", 5, "append") is False  # below the transaction now
    assert len(DeltaTable(table.uri).to_pyarrow_table()) == 2


def test_split_append_writes_each_value_to_its_table_once_in_one_task(tmp_path: Path, spark: Any) -> None:
    """The CDC bronze appends: one task splits the batch by topic, each table gets its rows once; a topic with no
    target is left to the caller."""
    schema = pa.schema([pa.field("topic", pa.string()), pa.field("n", pa.int64())])
    tables = {}
    for topic in ("a", "b"):
        uri = str(tmp_path / topic)
        write_deltalake(uri, pa.Table.from_pylist([], schema=schema), mode="error")
        tables[topic] = TaskAppend(f"bronze.{topic}", uri, {})
    assert "options" not in repr(tables["a"])  # the object store's keys are never printed
    frame = spark.createDataFrame([(t, n) for n, t in enumerate("aabacab")], "topic string, n long").repartition(3)
    assert sorted(append_split_in_task(frame, "topic", tables, "q1", 4, check_history=False)) == ["bronze.a",
                                                                                                   "bronze.b"]
    assert append_split_in_task(frame, "topic", tables, "q1", 4, check_history=True) == []  # the batch's re-run
    assert append_split_in_task(frame.limit(0), "topic", tables, "q1", 5, check_history=False) == []  # no rows
    assert sorted(DeltaTable(tables["a"].uri).to_pyarrow_table().column("n").to_pylist()) == [0, 1, 3, 5]
    assert sorted(DeltaTable(tables["b"].uri).to_pyarrow_table().column("n").to_pylist()) == [2, 6]
    for target in tables.values():
        assert DeltaTable(target.uri).transaction_version(f"q1:{target.name}") == 4
        assert DeltaTable(target.uri).version() == 1  # one commit each: created, then the batch


def test_rows_are_cast_to_the_table_schema_and_a_bad_row_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        table.write_once([{"window_start": datetime(2026, 11, 22, tzinfo=UTC), "orders": "many"}], "q", 1, "append")
    assert DeltaTable(table.uri).transaction_version("q:hot.t") is None  # nothing half-written


def test_tables_with_features_the_driver_writer_does_not_promise_are_refused() -> None:
    check_writable("hot.x", SimpleNamespace(min_reader_version=1, min_writer_version=2,
                                            writer_features=None, reader_features=None))
    # Change data feed (writer 4, or 7 as Delta 4 creates it): delta-rs writes the feed's files itself.
    check_writable("silver.x", SimpleNamespace(min_reader_version=1, min_writer_version=4,
                                               writer_features=None, reader_features=None))
    check_writable("silver.x", SimpleNamespace(min_reader_version=1, min_writer_version=7, reader_features=None,
                                               writer_features=["appendOnly", "changeDataFeed", "invariants"]))
    with pytest.raises(DriverDeltaError, match="rowTracking"):
        check_writable("silver.x", SimpleNamespace(min_reader_version=1, min_writer_version=7, reader_features=None,
                                                   writer_features=["changeDataFeed", "rowTracking"]))
    with pytest.raises(DriverDeltaError, match=r"deletionVectors.*'Upgrading'"):
        check_writable("hot.x", SimpleNamespace(min_reader_version=3, min_writer_version=7,
                                                writer_features=["deletionVectors"],
                                                reader_features=["deletionVectors"]))
    with pytest.raises(DriverDeltaError, match="writer 5"):
        check_writable("hot.x", SimpleNamespace(min_reader_version=2, min_writer_version=5,
                                                writer_features=None, reader_features=None))


def test_missing_table_names_the_table_and_who_creates_it(tmp_path: Path) -> None:
    with pytest.raises(DriverDeltaError, match=r"(?s)hot.nope.*ensure_tables"):
        DriverTable(None, "hot.nope", uri=str(tmp_path / "nope"))


def test_uri_and_options_point_at_the_lake_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_S3_ACCESS_KEY", "lake-test-key")
    monkeypatch.setenv("LAKE_S3_SECRET_KEY", "lake-test-secret")
    settings = load_settings()
    assert table_uri(settings, "hot.funnel_15m") == f"s3://{settings.s3_bucket}/warehouse/hot/funnel_15m"
    assert delta_rs_uri("/tmp/lake/hot/t") == "/tmp/lake/hot/t"  # a local table (unit tests) keeps its path
    opts = storage_options(settings)
    assert opts["AWS_ACCESS_KEY_ID"] == "lake-test-key" and opts["AWS_ENDPOINT_URL"] == settings.s3_endpoint
    assert opts["AWS_ALLOW_HTTP"] == str(settings.s3_endpoint.startswith("http://")).lower()


def test_spark_reads_a_table_past_the_checkpoints_delta_rs_writes(tmp_path: Path, spark: Any) -> None:
    """The stream's tasks commit silver and bronze with delta-rs every batch, Spark reads them (gold, analysts,
    OPTIMIZE): past delta-rs's checkpoint (every delta.checkpointInterval commits) Spark still reads every row."""
    from delta.tables import DeltaTable as SparkTable

    uri = str(tmp_path / "t")
    (SparkTable.create(spark).location(uri).addColumn("id", "BIGINT", nullable=False).addColumn("v", "STRING")
     .property("delta.enableChangeDataFeed", "true").property("delta.checkpointInterval", "5").execute())
    table = DriverTable(None, "silver.t", uri=uri)
    for batch in range(1, 13):
        assert table.write_once(pa.table({"id": [batch], "v": [str(batch)]}), "q", batch, "append")
    checkpoints = sorted(p.name for p in (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints, "delta-rs wrote no checkpoint: the test would prove nothing"
    assert sorted(r["id"] for r in spark.read.format("delta").load(uri).collect()) == list(range(1, 13))
    assert spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").count() == 13


def test_a_table_with_deletion_vectors_is_left_to_spark(tmp_path: Path, spark: Any) -> None:
    """The streaming app writes a table in a task with delta-rs only when delta-rs can: a silver table of an older
    lake (deletion vectors) keeps Spark's MERGE and append."""
    from delta.tables import DeltaTable as SparkTable

    for name, vectors in (("old", "true"), ("new", "false")):
        (SparkTable.create(spark).location(str(tmp_path / name)).addColumn("id", "BIGINT", nullable=False)
         .property("delta.enableDeletionVectors", vectors).property("delta.enableChangeDataFeed", "true").execute())
    assert writable_target("silver.old", str(tmp_path / "old"), {}) is None
    target = writable_target("silver.new", str(tmp_path / "new"), {})
    assert target is not None and target.uri == str(tmp_path / "new")


def test_log_metadata_gives_what_spark_reads_and_refuses_a_missing_table(tmp_path: Path, spark: Any) -> None:
    """The stream's start reads its tables' properties and schemas from the Delta log with delta-rs (no Spark job):
    the answer equals Spark's for a table Spark created, deletion vectors, a decimal, a timestamp and a column
    added later included; a path with no table is refused naming it; an s3a:// location needs the settings."""
    from delta.tables import DeltaTable as SparkTable

    location = str(tmp_path / "t")
    (SparkTable.create(spark).location(location).addColumn("id", "BIGINT", nullable=False)
     .addColumn("total", "DECIMAL(12,2)").addColumn("at", "TIMESTAMP")
     .property("delta.enableDeletionVectors", "true").property("delta.enableChangeDataFeed", "true").execute())
    spark.sql(f"ALTER TABLE delta.`{location}` ADD COLUMNS (note STRING)")
    properties, schema = log_metadata(None, location)
    detail = SparkTable.forPath(spark, location).detail().head()
    assert detail is not None and properties == dict(detail["properties"])
    assert properties["delta.enableDeletionVectors"] == "true"
    assert schema == spark.read.format("delta").load(location).schema
    assert schema.names == ["id", "total", "at", "note"]
    with pytest.raises(DriverDeltaError, match=str(tmp_path / "none")):
        log_metadata(None, str(tmp_path / "none"))
    with pytest.raises(ValueError, match="settings"):
        log_metadata(None, "s3a://lake/warehouse/silver/t")


def test_log_version_and_written_rows_give_what_spark_s_history_says(tmp_path: Path, spark: Any) -> None:
    """The replay reads a table's version and the rows its newest write wrote from the Delta log with delta-rs: the
    same as Spark's ``DESCRIBE HISTORY``, the newest WRITE taken past a later OPTIMIZE; no table there is None."""
    from delta.tables import DeltaTable as SparkTable

    location = str(tmp_path / "t")
    assert log_version(None, location) is None
    spark.range(7).write.format("delta").save(location)
    spark.range(3).write.format("delta").mode("append").save(location)
    assert log_version(None, location) == 1
    assert log_written_rows(None, location) == 3
    SparkTable.forPath(spark, location).optimize().executeCompaction()
    newest = SparkTable.forPath(spark, location).history(1).head()
    assert newest is not None and newest["operation"] == "OPTIMIZE"
    assert log_version(None, location) == newest["version"] == 2
    assert log_written_rows(None, location) == 3
    (tmp_path / "empty").mkdir()
    assert log_version(None, str(tmp_path / "empty")) is None


def test_a_kept_table_is_brought_up_to_date_when_opened_again(tmp_path: Path) -> None:
    """TaskAppend.open() keeps the tables a Python worker opened: opened again, it has the commits, the widened
    schema and the protocol another writer made since (a table delta-rs may no longer write is refused)."""
    from deltalake import TableFeatures

    uri = str(tmp_path / "kept")
    first = pa.table({"k": pa.array([1], pa.int64())})
    write_deltalake(uri, first)
    target = TaskAppend("ut.kept", uri, {})
    opened = target.open()
    write_deltalake(uri, pa.table({"k": pa.array([2], pa.int64()), "wide": pa.array(["x"])}), mode="append",
                    schema_mode="merge")
    again = target.open()
    assert again is opened
    assert again.arrow_schema.names == ["k", "wide"]
    assert sorted(again.read()["k"].to_pylist()) == [1, 2]
    DeltaTable(uri).alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)
    with pytest.raises(DriverDeltaError):
        target.open()
