"""The CDC apply on Spark (spark_jobs.silver.cdc): one named test per edge case, on real local Delta tables.

Each test sends small inline Debezium batches through what the streaming app runs per table and batch:
``parse_frame`` (the parse in Spark's Python workers) then the apply, each case with both engines the app has:
``apply_changes`` (newest change per key against the delete markers, Spark's MERGE into silver, the markers) and
``apply_changes_in_task`` (the newest change per key in Spark, then one task that checks the markers, MERGEs with
delta-rs and appends the markers), which the streaming app runs. The parse's own cases are in
test_silver_cdc_parse.py.
"""

from __future__ import annotations

import random
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.silver.cdc import (
    UNAVAILABLE_VALUE,
    newest_changes,
    parse_frame,
    parse_tables_frame,
    table_rows,
    toastable_columns,
)
from spark_jobs.table_io.driver import TaskAppend
from spark_jobs.table_io.merge import TaskTarget, apply_changes, apply_changes_in_task, merge_once
from tests.unit.cdc_records import KEYS, ORDERS, TOPIC, Record, change, raw, row, tombstone

OTHER_TOPIC = "shop.public.other"

SHOWN = ["id", "status", "notes", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"]

#: The two ways a batch is applied: Spark's MERGE (replay, and tables delta-rs cannot write) and delta-rs in a
#: Spark task (the streaming app).
ENGINES = ("spark", "task")


def _silver_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    # The key NOT NULL, as the app's contracts declare it (a writer must not put a null in it, even in the
    # change data feed).
    rows = [StructField(f.name, f.dataType, nullable=f.name not in KEYS) for f in ORDERS.fields]
    return StructType([*rows, StructField("_op", StringType()), StructField("_snapshot_rank", IntegerType()),
                       StructField("_commit_lsn", LongType()), StructField("_change_lsn", LongType()),
                       StructField("_source_ts", TimestampType()), StructField("_extra", StringType())])


def _markers_schema() -> Any:
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    return StructType([StructField("id", IntegerType()), StructField("_snapshot_rank", IntegerType()),
                       StructField("_commit_lsn", LongType()), StructField("_change_lsn", LongType())])


class Lake:
    """A local silver table (deletion vectors and change data feed on) and its delete markers, as the app keeps them."""

    def __init__(self, path: Path, spark: Any, engine: str = "spark") -> None:
        from delta.tables import DeltaTable

        self.spark, self.engine = spark, engine
        self.silver_path, self.deleted_path = str(path / "silver"), str(path / "deleted")
        # The app's silver tables have no deletion vectors (contracts.tables.SILVER_PROPS): delta-rs cannot write
        # them. Spark's MERGE is also run on a table with them (older lakes, replay shadows).
        (DeltaTable.create(spark).location(self.silver_path).addColumns(_silver_schema())
         .property("delta.enableDeletionVectors", str(engine == "spark").lower())
         .property("delta.enableChangeDataFeed", "true").execute())
        DeltaTable.create(spark).location(self.deleted_path).addColumns(_markers_schema()).execute()
        self.batch_id = 0
        self.offset = 0

    def parsed(self, records: list[Record]) -> Any:
        from delta.tables import DeltaTable

        schema = DeltaTable.forPath(self.spark, self.silver_path).toDF().schema
        # As the streaming app parses: every topic of the batch in one pass, then this table's rows.
        wide = parse_tables_frame(self.spark.createDataFrame(raw(records, self.offset)),
                                  [(OTHER_TOPIC, _markers_schema(), ["id"]), (TOPIC, schema, KEYS)], str)
        parsed = table_rows(wide, 1, TOPIC, schema)
        self.offset += len(records)
        assert parsed.where("_error IS NOT NULL").count() == 0
        return parsed.where("_error IS NULL")

    def append_markers(self, batch_id: int) -> Any:
        def append(rows: Any) -> None:
            (rows.write.format("delta").mode("append").option("txnAppId", "app:deleted")
             .option("txnVersion", batch_id).save(self.deleted_path))
        return append

    def apply(self, records: list[Record], batch_id: int | None = None, append_markers: Any = None) -> None:
        """Parse and apply one batch (the next batch id unless given), as ``CdcApp._table`` does."""

        if batch_id is None:
            self.batch_id += 1
            batch_id = self.batch_id
        changes = self.parsed(records)
        if self.engine == "task":
            assert append_markers is None, "a task's markers append cannot be replaced"
            self.applied = apply_changes_in_task(changes, self.schema(), KEYS, self.target(), batch_id)
            return
        markers = self.spark.read.format("delta").load(self.deleted_path)
        # The streaming app's setting: the MERGE reads the checkpointed source as it is.
        self.spark.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        try:
            apply_changes(self.spark, self.silver_path, changes, KEYS, markers,
                          append_markers or self.append_markers(batch_id), checkpoint=True)
        finally:
            self.spark.conf.unset("spark.databricks.delta.merge.materializeSource")

    def schema(self) -> Any:
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.spark, self.silver_path).toDF().schema

    def target(self) -> TaskTarget:
        return TaskTarget(TaskAppend("silver.orders", self.silver_path, {}),
                          TaskAppend("silver.orders__deleted", self.deleted_path, {}), "app")

    def current(self) -> list[dict[str, Any]]:
        return [r.asDict() for r in self.spark.read.format("delta").load(self.silver_path).collect()]

    def rows(self, columns: list[str] = SHOWN) -> list[tuple[Any, ...]]:
        return sorted((tuple(r[c] for c in columns) for r in self.current()), key=repr)

    def markers(self) -> list[tuple[Any, ...]]:
        return sorted(tuple(r) for r in self.spark.read.format("delta").load(self.deleted_path)
                      .select("id", "_commit_lsn").collect())


@pytest.fixture(params=ENGINES)
def lake(tmp_path: Path, spark: Any, request: pytest.FixtureRequest) -> Lake:
    return Lake(tmp_path, spark, request.param)


#: An edge case whose Spark's MERGE variant is `extended` (tests/README.md): 15-45 s each there on our 2 cores, and
#: both engines run the same statement (``merge_plan``) on the same newest change per key (``newest_changes``). The
#: core suite keeps Spark's MERGE for the cases where its side differs from the task's (its markers append and
#: commit order, the snapshot and TOAST conditions in Spark SQL, a widened table) and for a random run with re-sends.
ENGINES_SPARK_EXTENDED = ["task", pytest.param("spark", marks=pytest.mark.extended)]
SPARK_EXTENDED = pytest.mark.parametrize("lake", ENGINES_SPARK_EXTENDED, indirect=True)


@SPARK_EXTENDED
def test_out_of_order_across_batches_older_change_is_ignored(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "shipped"), commit=300, lsn=310)])
    lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)])
    assert lake.rows() == [(1, "shipped", "n", "u", 1, 300, 310)]


@SPARK_EXTENDED
def test_duplicate_event_is_applied_once(lake: Lake) -> None:
    event = change("c", {"id": 1}, after=row(1), commit=100, lsn=110)
    lake.apply([event, event])
    before = lake.current()
    # Connect re-sends the same event after a restart: silver must not change.
    lake.apply([event])
    assert lake.current() == before
    assert lake.rows() == [(1, "new", "n", "c", 1, 100, 110)]


def test_replayed_batch_changes_nothing_and_appends_its_markers_once(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110),
                change("c", {"id": 2}, after=row(2), commit=100, lsn=120)])
    batch = [change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210),
             change("d", {"id": 2}, before={"id": 2}, commit=200, lsn=220)]
    lake.apply(batch)
    after = lake.current()
    lake.apply(batch, batch_id=lake.batch_id)  # Spark replays the batch after a crash
    assert lake.current() == after
    assert lake.rows() == [(1, "paid", "n", "u", 1, 200, 210)]
    assert lake.markers() == [(2, 200)]


@SPARK_EXTENDED
def test_delete_then_reinsert_same_key(lake: Lake, tmp_path: Path, spark: Any) -> None:
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    deleted = change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)
    reinserted = change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)
    # Separate batches: the delete removes the row, the re-insert inserts it again.
    lake.apply([created])
    lake.apply([deleted, tombstone({"id": 1})])
    assert lake.rows() == []
    assert lake.markers() == [(1, 200)]
    lake.apply([reinserted])
    assert lake.rows() == [(1, "again", "n", "c", 1, 300, 310)]
    # One batch: the re-insert is the newest change.
    other = Lake(tmp_path / "one", spark, lake.engine)
    other.apply([created, deleted, tombstone({"id": 1}), reinserted])
    assert other.rows() == [(1, "again", "n", "c", 1, 300, 310)]


@SPARK_EXTENDED
def test_resent_change_after_delete_is_dropped_by_the_delete_markers(lake: Lake) -> None:
    """Silver forgets a deleted row, the marker table does not: a re-sent older insert stays out, across restarts."""
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    lake.apply([created])
    lake.apply([change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)])
    other = change("c", {"id": 2}, after=row(2), commit=100, lsn=120)
    lake.apply([created, other])  # Connect re-sent the insert: key 1 stays deleted
    assert lake.rows() == [(2, "new", "n", "c", 1, 100, 120)]
    lake.apply([change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)])  # newer: applies
    assert lake.rows() == [(1, "again", "n", "c", 1, 300, 310), (2, "new", "n", "c", 1, 100, 120)]


def test_crash_between_silver_and_the_markers_loses_no_delete(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)])
    delete = [change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)]

    def killed(rows: Any) -> None:
        raise RuntimeError("killed")

    # The driver (or the task) dies after the MERGE of batch 2, before its markers.
    if lake.engine == "task":
        from deltalake import DeltaTable as RsTable

        from spark_jobs.table_io.driver import DriverTable

        schema = lake.schema()
        toastable = toastable_columns(ORDERS, KEYS)
        source = newest_changes(lake.parsed(delete), schema.names, KEYS, toastable, None)
        silver = DriverTable(None, "silver.orders", lake.silver_path)
        assert merge_once(silver, source.toArrow(), KEYS, toastable, "app", 2) is not None
        assert RsTable(lake.silver_path).transaction_version("app:silver.orders") == 2
        lake.batch_id = 2
    else:
        with pytest.raises(RuntimeError, match="killed"):
            lake.apply(delete, append_markers=killed)
    assert lake.rows() == [] and lake.markers() == []
    # The replay of batch 2 re-applies a no-op MERGE and appends the marker.
    lake.offset -= 1
    lake.apply(delete, batch_id=lake.batch_id)
    assert lake.markers() == [(1, 200)]
    if lake.engine == "task":  # the replay's MERGE was skipped by its transaction, its markers appended
        assert (lake.applied["commits"], lake.applied["markers"]) == (1, 1)
    lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)])  # a re-send stays out
    assert lake.rows() == []


@SPARK_EXTENDED
def test_delete_older_than_row_is_ignored(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=300, lsn=310)])
    lake.apply([change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)])
    assert lake.rows() == [(1, "paid", "n", "u", 1, 300, 310)]


@SPARK_EXTENDED
def test_delete_of_a_key_silver_never_had_inserts_nothing(lake: Lake) -> None:
    lake.apply([change("d", {"id": 9}, before={"id": 9}, commit=200, lsn=210)])
    assert lake.rows() == []


@SPARK_EXTENDED
def test_primary_key_change_moves_the_row(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)])
    lake.apply([change("d", {"id": 1}, before={"id": 1}, commit=400, lsn=410), tombstone({"id": 1}),
                change("c", {"id": 2}, after=row(2, "new"), commit=400, lsn=410)])
    assert lake.rows() == [(2, "new", "n", "c", 1, 400, 410)]


def test_snapshot_read_loses_to_streamed_change(lake: Lake, tmp_path: Path, spark: Any) -> None:
    # The snapshot's LSN (500) is higher than the streamed update's, yet the streamed change wins.
    streamed = change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)
    snapshot = change("r", {"id": 1}, after=row(1, "stale"), commit=None, lsn=500, snapshot="true")
    lake.apply([streamed])
    lake.apply([snapshot])
    assert lake.rows() == [(1, "paid", "n", "u", 1, 200, 210)]
    for i, records in enumerate(([streamed, snapshot], [snapshot, streamed])):
        one = Lake(tmp_path / f"one{i}", spark, lake.engine)
        one.apply(records)
        assert one.rows() == [(1, "paid", "n", "u", 1, 200, 210)]
    # A snapshot row in silver is replaced by a later re-snapshot.
    snap = Lake(tmp_path / "snap", spark, lake.engine)
    snap.apply([snapshot])
    snap.apply([change("r", {"id": 1}, after=row(1, "resnap"), commit=None, lsn=600, snapshot="true")])
    assert snap.rows() == [(1, "resnap", "n", "r", 0, 600, 600)]


def test_toast_placeholder_keeps_target_value(lake: Lake) -> None:
    long_text = "x" * 5000
    lake.apply([change("c", {"id": 1}, after=row(1, "new", notes=long_text, attrs='{"a": 1}'), commit=100, lsn=110)])
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE, attrs=UNAVAILABLE_VALUE),
                       commit=200, lsn=210)])
    assert lake.rows(["id", "status", "notes", "attrs", "_commit_lsn"]) == [(1, "paid", long_text, '{"a": 1}', 200)]
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", notes="short now"), commit=300, lsn=310)])
    assert lake.rows(["notes"]) == [("short now",)]


@SPARK_EXTENDED
def test_toast_placeholder_after_insert_in_the_same_batch(lake: Lake) -> None:
    lake.apply([
        change("c", {"id": 1}, after=row(1, "a", notes="long text"), commit=10, lsn=10),
        change("u", {"id": 1}, after=row(1, "b", notes=UNAVAILABLE_VALUE), commit=11, lsn=11),
        change("c", {"id": 2}, after=row(2, "x", notes=None), commit=12, lsn=12),  # a real NULL is a value too
        change("u", {"id": 2}, after=row(2, "y", notes=UNAVAILABLE_VALUE), commit=13, lsn=13),
        change("u", {"id": 3}, after=row(3, "z", notes=UNAVAILABLE_VALUE), commit=14, lsn=14),  # nothing earlier
    ])
    assert lake.rows(["id", "notes", "status"]) == [(1, "long text", "b"), (2, None, "y"), (3, UNAVAILABLE_VALUE, "z")]


@SPARK_EXTENDED
def test_toast_placeholder_stored_for_a_key_first_seen_by_an_update(lake: Lake) -> None:
    """An update with the placeholder for a key silver lacks is stored as is; an older snapshot read of the key
    (it loses to the streamed change) must not fill it."""
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE), commit=200, lsn=210)])
    assert lake.rows(["id", "notes"]) == [(1, UNAVAILABLE_VALUE)]
    lake.apply([change("r", {"id": 1}, after=row(1, "new", notes="old text"), commit=None, lsn=500, snapshot="true")])
    assert lake.rows(["id", "status", "notes"]) == [(1, "paid", UNAVAILABLE_VALUE)]
    lake.apply([change("u", {"id": 1}, after=row(1, "shipped", notes="new text"), commit=300, lsn=310)])
    assert lake.rows(["id", "status", "notes"]) == [(1, "shipped", "new text")]


def test_added_column_flows_into_extra_then_into_its_own_column(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1))])
    grown = [change("u", {"id": 1}, after=row(1, "paid", coupon="SPRING", discount="2.50"), commit=200, lsn=210)]
    names = lake.parsed(grown).selectExpr("explode(_extra_names)").collect()
    assert [r[0] for r in names] == ["coupon", "discount"]
    lake.apply(grown)
    assert lake.rows(["id", "status", "_extra"]) == [(1, "paid", '{"coupon":"SPRING","discount":"2.50"}')]
    # The app widens the table (ALTER TABLE ADD COLUMNS) and parses again: the values are typed.
    lake.spark.sql(f"ALTER TABLE delta.`{lake.silver_path}` ADD COLUMNS (coupon STRING, discount DECIMAL(6,2))")
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", coupon="SUMMER", discount="3.75"), commit=300, lsn=310)])
    assert lake.rows(["id", "coupon", "discount", "_extra"]) == [(1, "SUMMER", Decimal("3.75"), None)]


@pytest.mark.parametrize("engine", ENGINES_SPARK_EXTENDED)
def test_interleaved_transactions_ordered_by_commit_not_change_lsn(tmp_path: Path, spark: Any, engine: str) -> None:
    # T1 writes at LSN 180 and commits first; T2 began earlier, wrote at LSN 150, commits after T1.
    # T2's events carry T1's commit LSN (250) as last commit: by change LSN or ts_ms T1 would win.
    t1 = change("u", {"id": 1}, after=row(1, "from T1"), commit=100, lsn=180, ts_ms=1_709_290_000_900)
    t2 = change("u", {"id": 1}, after=row(1, "from T2"), commit=250, lsn=150, ts_ms=1_709_290_000_100)
    want = [(1, "from T2", "n", "u", 1, 250, 150)]
    for i, batches in enumerate(([[t1, t2]], [[t2, t1]], [[t2], [t1]])):
        lake = Lake(tmp_path / str(i), spark, engine)
        for records in batches:
            lake.apply(records)
        assert lake.rows() == want


@SPARK_EXTENDED
def test_changes_within_a_transaction_ordered_by_change_lsn(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "second"), commit=100, lsn=120),
                change("u", {"id": 1}, after=row(1, "first"), commit=100, lsn=110),
                change("c", {"id": 2}, after=row(2), commit=100, lsn=115)])
    assert lake.rows(["id", "status", "_change_lsn"]) == [(1, "second", 120), (2, "new", 115)]


@SPARK_EXTENDED
def test_typed_values_and_source_time(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1, amount="1234.50", notes="äöü 東京 €"), commit=90, lsn=120)])
    got = lake.current()[0]
    assert got["amount"] == Decimal("1234.50")
    # Spark hands timestamps back naive, in the session time zone (UTC).
    assert got["placed_at"] == datetime(2024, 3, 1, 10, 15, 30, 123456)
    assert got["notes"] == "äöü 東京 €"
    assert got["attrs"] == '{"gift": true}'
    assert got["_source_ts"] == datetime(2024, 3, 1, 10, 46, 40)


def _postgres(log: list[Record]) -> dict[int, tuple[Any, ...]]:
    """The reference: the table PostgreSQL holds after ``log`` (in commit order), as silver shows it."""
    import json

    state: dict[int, tuple[Any, ...]] = {}
    for _, value in log:
        assert value is not None
        doc = json.loads(value)["payload"]
        op, source = doc["op"], doc["source"]
        commit, lsn = (json.loads(source["sequence"]) if source.get("sequence") else [source["lsn"]] * 2)
        if op == "d":
            state.pop(doc["before"]["id"], None)
            continue
        after = doc["after"]
        notes = after["notes"]
        if notes == UNAVAILABLE_VALUE and after["id"] in state:
            notes = state[after["id"]][2]
        state[after["id"]] = (after["id"], after["status"], notes, op, 1, int(commit), int(lsn))
    return state


def _random_log(rng: random.Random, keys: int, transactions: int) -> list[Record]:
    """A PostgreSQL-like change log: per key insert, updates (some leaving notes TOASTed), delete, re-insert."""
    log: list[Record] = []
    alive: dict[int, bool] = {}
    lsn = 1000
    for _ in range(transactions):
        commit = lsn
        for _ in range(rng.randint(1, 3)):
            lsn += 10
            k = rng.randrange(keys)
            status = rng.choice(["new", "paid", "shipped"])
            if not alive.get(k):
                log.append(change("c", {"id": k}, after=row(k, status, notes=rng.choice(["a" * 50, None, "b"])),
                                  commit=commit, lsn=lsn))
                alive[k] = True
            elif rng.random() < 0.2:
                log.append(change("d", {"id": k}, before={"id": k}, commit=commit, lsn=lsn))
                alive[k] = False
            else:
                notes = UNAVAILABLE_VALUE if rng.random() < 0.5 else rng.choice(["c" * 40, None, "d"])
                log.append(change("u", {"id": k}, after=row(k, status, notes=notes), commit=commit, lsn=lsn))
        lsn += 10
    return log


# The second seed on Spark's MERGE is `extended` (47 s on our 2 cores; the task engine runs three).
@pytest.mark.parametrize(("seed", "engine"), [(0, "spark"), pytest.param(1, "spark", marks=pytest.mark.extended),
                                              (0, "task"), (1, "task"), (2, "task")])
def test_random_runs_with_resends_end_as_postgresql(tmp_path: Path, spark: Any, seed: int, engine: str) -> None:
    """Random logs cut into batches, with Connect-style re-sends (a contiguous run of the log again):
    silver ends equal to the table the log leaves in PostgreSQL."""
    rng = random.Random(seed)
    log = _random_log(rng, keys=6, transactions=40)
    lake = Lake(tmp_path / "lake", spark, engine)
    at = 0
    while at < len(log):
        end = min(len(log), at + rng.randint(1, 24))  # each batch is a local MERGE (~4 s): few, varied batches
        batch = log[at:end]
        if at and rng.random() < 0.3:  # a re-send: Connect restarts from an older offset
            batch = log[max(0, at - rng.randint(1, 8)):end]
        at = end
        lake.apply(batch)
    want = sorted(_postgres(log).values(), key=repr)
    assert want, "the random log left no row: the comparison would prove nothing"
    assert lake.rows() == want


def test_a_record_that_cannot_be_parsed_is_a_reject_row_even_with_a_not_null_key(spark: Any) -> None:
    """The parse in Spark tasks hands rejects back as rows whose silver columns are null: the key too, which is
    NOT NULL in silver (a malformed record once crash-looped the stream with "Value at index is null")."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    silver = _silver_schema()
    silver = StructType([StructField("id", IntegerType(), False), *silver.fields[1:]])
    records = [(b'{"id": 1}', b"not json"), change("c", {"id": 2}, after=row(2))]
    parsed = parse_frame(spark.createDataFrame(raw(records)), silver, KEYS).collect()
    assert sorted((r["_offset"], r["id"], r["_value"], r["_error"] is not None) for r in parsed) == [
        (0, None, b"not json", True), (1, 2, None, False)]


def test_newest_change_with_a_backtick_in_a_toastable_column_name(spark: Any) -> None:
    """A PostgreSQL quoted identifier may hold a backtick (a poison record once widened silver with `we`ird`):
    the window and the TOAST fill quote it."""
    from spark_jobs.silver.cdc import newest_changes

    columns = ["id", "we`ird", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"]
    rows = [(1, "long", "c", 1, 10, 10, 0, 0), (1, UNAVAILABLE_VALUE, "u", 1, 11, 11, 0, 1)]
    frame = spark.createDataFrame(rows, [*columns, "_partition", "_offset"])
    got = newest_changes(frame, columns, ["id"], ["we`ird"], None).collect()
    assert [(r["id"], r["we`ird"], r["_op"]) for r in got] == [(1, "long", "u")]



def test_a_repeated_batch_reuses_its_compiled_code(tmp_path: Path, spark: Any) -> None:
    """Every batch of a table runs the same plans: once warm, a batch compiles no code (session.CODEGEN_CONF; with
    Spark's default cache of 100 classes one MERGE batch, ~97 classes, recompiled nearly all of them)."""
    lake = Lake(tmp_path, spark, "spark")
    metrics = lake.spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def batch(status: str, lsn: int) -> list[Record]:
        return [change("u", {"id": k}, after=row(k, status), commit=lsn, lsn=lsn + k) for k in range(5)]

    lake.apply([change("c", {"id": k}, after=row(k), commit=100, lsn=100 + k) for k in range(5)])
    lake.apply(batch("paid", 200))
    lake.apply(batch("shipped", 300))
    before = metrics.METRIC_COMPILATION_TIME().getCount()
    lake.apply(batch("paid", 400))
    assert metrics.METRIC_COMPILATION_TIME().getCount() == before
    assert {r[1] for r in lake.rows()} == {"paid"}


def test_one_parse_of_every_topic_gives_each_table_its_own_rows_and_rejects_unknown_topics(spark: Any) -> None:
    """The streaming app parses a batch's records of every topic in one ``mapInArrow``: each table's rows come back
    typed with its own schema, and a record of a topic no table has is a reject naming the topic."""
    import pyarrow as pa
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    other = StructType([StructField("id", IntegerType()), StructField("name", StringType()),
                        *_silver_schema().fields[-6:]])
    orders = raw([change("c", {"id": 1}, after=row(1, "paid")), (b'{"id": 9}', b"not json")])
    others = raw([change("c", {"id": 7}, after={"id": 7, "name": "x"})], first_offset=2)
    others = others.set_column(2, "topic", pa.array([OTHER_TOPIC], pa.string()))
    stray = raw([change("c", {"id": 5}, after=row(5))], first_offset=3)
    stray = stray.set_column(2, "topic", pa.array(["shop.public.nobody"], pa.string()))
    frame = spark.createDataFrame(pa.concat_tables([orders, others, stray]))
    wide = parse_tables_frame(frame, [(TOPIC, _silver_schema(), KEYS), (OTHER_TOPIC, other, ["id"])],
                              lambda t: f"no contract for {t}").persist()
    got_orders = [(r["id"], r["status"], r["_error"] is None) for r in
                  table_rows(wide, 0, TOPIC, _silver_schema()).orderBy("_offset").collect()]
    got_other = [(r["id"], r["name"], r["_topic"]) for r in table_rows(wide, 1, OTHER_TOPIC, other).collect()]
    stray_rows = wide.where("_topic = 'shop.public.nobody'").collect()
    assert got_orders == [(1, "paid", True), (None, None, False)]
    assert got_other == [(7, "x", OTHER_TOPIC)]
    assert [(r["_offset"], r["_error"]) for r in stray_rows] == [(3, "no contract for shop.public.nobody")]
    wide.unpersist()


def test_the_parse_lands_every_raw_record_in_bronze_and_reports_what_it_read(spark: Any, tmp_path: Path) -> None:
    """With a landing, the parse tasks write each topic's raw records as bronze data files (not committed) beside
    the parsed rows: the driver commits the add actions once, and the per-partition counts come from the tasks
    (tombstones included, which the parse drops). The parsed rows are the same as without a landing."""
    import json

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.contracts.lake_schemas import BRONZE
    from spark_jobs.table_io.driver import DriverTable
    from spark_jobs.table_io.land import LANDED, LANDED_SCHEMA, Landing, parse_and_land_frame
    from spark_jobs.table_io.task_files import FileTarget

    bronze_arrow = to_arrow_schema(BRONZE)
    uri = str(tmp_path / "bronze_orders")
    write_deltalake(uri, pa.Table.from_pylist([], schema=bronze_arrow), mode="error", partition_by=["ingest_date"])
    records = [change("c", {"id": 1}, after=row(1, "paid")), (b'{"id": 9}', b"not json"),
               change("d", {"id": 1}, before=row(1, "paid")), tombstone({"id": 1})]  # a delete and its tombstone
    frame = spark.createDataFrame(raw(records, first_offset=40)).repartition(2)
    ingest_us = 1_796_600_000_000_000
    landing = Landing({TOPIC: FileTarget("bronze.orders", uri, {}, bronze_arrow, ("ingest_date",))}, ingest_us)
    specs = [(TOPIC, _silver_schema(), KEYS)]
    wide = parse_and_land_frame(frame, specs, lambda t: f"no contract for {t}", None, landing).persist()
    plain = parse_tables_frame(frame, specs, lambda t: f"no contract for {t}")

    meta = [json.loads(r[LANDED]) for r in wide.where(f"{LANDED} IS NOT NULL").collect()]
    parsed = wide.where(f"{LANDED} IS NULL").drop(LANDED)
    assert parsed.orderBy("_offset").collect() == plain.orderBy("_offset").collect()
    reads = [m for m in meta if m["kind"] == "read"]
    assert sum(m["records"] for m in reads) == 4 and max(m["newest_offset"] for m in reads) == 43
    adds = [m["add"] for m in meta if m["kind"] == "add"]
    assert adds and DeltaTable(uri).to_pyarrow_table().num_rows == 0  # written, not committed
    assert DriverTable(None, "bronze.orders", uri=uri).commit_files_once(adds, "q", 3) is True
    landed = spark.read.format("delta").load(uri).orderBy("offset").collect()
    assert [(r["offset"], r["value"] is None) for r in landed] == [(40, False), (41, False), (42, False), (43, True)]
    assert [bytes(r["value"]) for r in landed[:3]] == [v for _k, v in records[:3]]
    assert {(r["ingest_time"].timestamp(), str(r["ingest_date"])) for r in landed} == {(ingest_us / 1e6, "2026-12-06")}
    as_spark = [r["m"].asDict() for r in spark.createDataFrame([(json.dumps(m),) for m in meta], ["j"]).selectExpr(
        f"from_json(j, '{LANDED_SCHEMA}') AS m").collect()]  # how the driver's summary reads them
    assert [{k: v for k, v in m.items() if v is not None} for m in as_spark] == meta
    wide.unpersist()
