"""The CDC apply (spark_jobs.silver.cdc_arrow): one named test per edge case, on real delta-rs tables.

Each test applies small inline Debezium batches through ``append_changes``,
the function the streaming app calls per table and batch, and reads silver
back the two ways it exists: the ``silver.<t>`` view's SQL (``current_view_sql``,
run by a local Spark over the base and changes tables) and, after a
``compact`` of every pending change, the base table. ``Lake.rows`` asserts
that the view before, the base after and the view after the compaction agree,
then returns them. The parse's own cases are in test_cdc_parse.py.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.driver_delta import DriverTable
from spark_jobs.silver.cdc import BATCH_COLUMN, UNAVAILABLE_VALUE, current_view_sql
from spark_jobs.silver.cdc_arrow import (
    DeleteIndex,
    append_changes,
    changes_table,
    compact,
    markers_table,
    merge_changes,
    newest_changes,
    parse_records,
    row_schema,
    toastable_of,
)
from tests.unit.test_cdc_parse import KEYS, ROWS, UTC_US, Record, change, raw, row, tombstone

SILVER = pa.schema([*ROWS, ("_op", pa.string()), ("_snapshot_rank", pa.int32()), ("_commit_lsn", pa.int64()),
                    ("_change_lsn", pa.int64()), ("_source_ts", UTC_US), ("_extra", pa.string())])
CHANGES = pa.schema([*SILVER, (BATCH_COLUMN, pa.int64())])
MARKERS = pa.schema([("id", pa.int32()), ("_snapshot_rank", pa.int32()), ("_commit_lsn", pa.int64()),
                     ("_change_lsn", pa.int64())])
SHOWN = ["id", "status", "notes", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"]


def _sorted_rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in table.to_pylist()), key=repr)


class Lake:
    """A local silver table (base, changes, delete markers), appended to and compacted as the streaming app does."""

    def __init__(self, path: Path, spark: Any) -> None:
        from deltalake import write_deltalake

        write_deltalake(str(path / "base"), SILVER.empty_table())
        write_deltalake(str(path / "changes"), CHANGES.empty_table(), partition_by=[BATCH_COLUMN],
                        configuration={"delta.enableChangeDataFeed": "true"})
        write_deltalake(str(path / "deleted"), MARKERS.empty_table())
        self.path = path
        self.spark = spark
        self.index = DeleteIndex()
        self.batch_id = 0
        self.offset = 0
        self.open()

    def open(self) -> None:
        self.base = DriverTable(None, "silver.orders__base", str(self.path / "base"))
        self.changes = DriverTable(None, "silver.orders__changes", str(self.path / "changes"))
        self.deleted = DriverTable(None, "silver.orders__deleted", str(self.path / "deleted"))

    def apply(self, records: list[Record], batch_id: int | None = None) -> Any:
        """Parse and append one batch (the next batch id unless given); returns what append_changes did."""
        parsed = parse_records(raw(records, self.offset), row_schema(self.changes.arrow_schema), KEYS)
        assert parsed.rejects == []
        self.offset += len(records)
        if batch_id is None:
            self.batch_id += 1
            batch_id = self.batch_id
        return append_changes(self.changes, self.deleted, self.index, parsed.changes, KEYS, "app", batch_id)

    def view(self) -> pa.Table:
        """The silver view's SQL over the current base and changes tables (a local Spark; no Delta jars needed)."""
        names = [f.name for f in self.base.arrow_schema]
        toastable = toastable_of(self.base.arrow_schema, KEYS)
        self.spark.createDataFrame(self.base.read()).createOrReplaceTempView("cdc_base")
        self.spark.createDataFrame(self.changes.read()).createOrReplaceTempView("cdc_changes")
        return self.spark.sql(current_view_sql("cdc_base", "cdc_changes", names, KEYS, toastable)).toArrow()

    def compact(self) -> Any:
        self.base.refresh()
        return compact(self.base, self.changes.read(), KEYS, "app", self.batch_id)

    def rows(self, columns: list[str] = SHOWN) -> list[tuple[Any, ...]]:
        """Silver's rows: the view before a compaction, the base after it and the view after it, all equal."""
        before = _sorted_rows(self.view(), columns)
        self.compact()
        compacted = _sorted_rows(self.base.read(), columns)
        assert compacted == before, "the compacted base differs from the view of the pending changes"
        assert _sorted_rows(self.view(), columns) == before, "the view changed with the compaction"
        return before

    def current(self) -> list[dict[str, Any]]:
        """Every column of silver's rows (after the same three-way check as ``rows``)."""
        self.rows(self.base.arrow_schema.names)
        rows: list[dict[str, Any]] = self.base.read().to_pylist()
        return rows

    def restart(self) -> None:
        """A new driver: the tables are reopened and the delete index is rebuilt from the markers."""
        self.open()
        self.index = DeleteIndex()
        self.index.add_table(self.deleted.read(), KEYS)


@pytest.fixture
def lake(tmp_path: Path, spark: Any) -> Lake:
    return Lake(tmp_path, spark)


def test_out_of_order_across_batches_older_change_is_ignored(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "shipped"), commit=300, lsn=310)])
    lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)])
    assert lake.rows() == [(1, "shipped", "n", "u", 1, 300, 310)]


def test_duplicate_event_is_applied_once(lake: Lake) -> None:
    event = change("c", {"id": 1}, after=row(1), commit=100, lsn=110)
    first = lake.apply([event, event])
    assert first.changes == 1
    before = lake.current()
    # Connect re-sends the same event after a restart: silver must not change.
    lake.apply([event])
    assert lake.current() == before
    assert lake.rows() == [(1, "new", "n", "c", 1, 100, 110)]


def test_replayed_batch_is_skipped_by_its_transaction(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)])
    version = lake.changes.table.version()
    again = lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)], batch_id=1)
    assert not again.written
    lake.changes.refresh()
    assert lake.changes.table.version() == version
    assert lake.rows() == [(1, "new", "n", "c", 1, 100, 110)]


def test_delete_then_reinsert_same_key(lake: Lake, tmp_path: Path, spark: Any) -> None:
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    deleted = change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)
    reinserted = change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)
    # Separate batches: the delete removes the row, the re-insert inserts it again.
    lake.apply([created])
    assert lake.apply([deleted, tombstone({"id": 1})]).deletes == 1
    assert lake.rows() == []
    lake.apply([reinserted])
    assert lake.rows() == [(1, "again", "n", "c", 1, 300, 310)]
    # One batch: the re-insert is the newest change.
    other = Lake(tmp_path / "one", spark)
    other.apply([created, deleted, tombstone({"id": 1}), reinserted])
    assert other.rows() == [(1, "again", "n", "c", 1, 300, 310)]


def test_resent_change_after_delete_is_dropped_by_the_delete_markers(lake: Lake) -> None:
    """Silver forgets a deleted row, the marker table does not: a re-sent older insert stays out, across restarts."""
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    lake.apply([created])
    lake.apply([change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)])
    lake.restart()
    assert len(lake.index) == 1
    other = change("c", {"id": 2}, after=row(2), commit=100, lsn=120)
    lake.apply([created, other])  # Connect re-sent the insert: key 1 stays deleted
    assert lake.rows() == [(2, "new", "n", "c", 1, 100, 120)]
    lake.apply([change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)])  # newer: applies
    assert lake.rows() == [(1, "again", "n", "c", 1, 300, 310), (2, "new", "n", "c", 1, 100, 120)]


def test_crash_between_silver_and_the_markers_loses_no_delete(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)])
    delete = [change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)]
    parsed = parse_records(raw(delete, 1), row_schema(lake.changes.arrow_schema), KEYS)
    # The driver dies after the append of batch 2, before its markers: simulate by an append-only apply.
    markers = lake.deleted
    lake.deleted = DriverTable(None, "scratch", str(lake.path / "deleted"))
    lake.deleted.write_once = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("killed"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):
        append_changes(lake.changes, lake.deleted, lake.index, parsed.changes, KEYS, "app", 2)
    lake.batch_id = 2
    assert lake.rows() == []
    # The replay of batch 2 skips the append and appends the marker.
    lake.deleted = markers
    lake.restart()
    replay = append_changes(lake.changes, lake.deleted, lake.index, parsed.changes, KEYS, "app", 2)
    assert (replay.written, replay.deletes) == (False, 1)
    assert lake.deleted.read(["id", "_commit_lsn"]).to_pylist() == [{"id": 1, "_commit_lsn": 200}]
    lake.batch_id = 2
    assert lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)]).changes == 0  # a re-send
    assert lake.rows() == []


def test_delete_older_than_row_is_ignored(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=300, lsn=310)])
    lake.apply([change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)])
    assert lake.rows() == [(1, "paid", "n", "u", 1, 300, 310)]


def test_delete_of_a_key_silver_never_had_inserts_nothing(lake: Lake) -> None:
    lake.apply([change("d", {"id": 9}, before={"id": 9}, commit=200, lsn=210)])
    assert lake.rows() == []


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
        one = Lake(tmp_path / f"one{i}", spark)
        one.apply(records)
        assert one.rows() == [(1, "paid", "n", "u", 1, 200, 210)]
    # A snapshot row in silver is replaced by a later re-snapshot.
    snap = Lake(tmp_path / "snap", spark)
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


def test_toast_placeholder_after_insert_in_the_same_batch(lake: Lake) -> None:
    lake.apply([
        change("c", {"id": 1}, after=row(1, "a", notes="long text"), commit=10, lsn=10),
        change("u", {"id": 1}, after=row(1, "b", notes=UNAVAILABLE_VALUE), commit=11, lsn=11),
        change("c", {"id": 2}, after=row(2, "x", notes=None), commit=12, lsn=12),  # a real NULL is a value too
        change("u", {"id": 2}, after=row(2, "y", notes=UNAVAILABLE_VALUE), commit=13, lsn=13),
        change("u", {"id": 3}, after=row(3, "z", notes=UNAVAILABLE_VALUE), commit=14, lsn=14),  # nothing earlier
    ])
    assert lake.rows(["id", "notes", "status"]) == [(1, "long text", "b"), (2, None, "y"), (3, UNAVAILABLE_VALUE, "z")]


def test_toast_placeholder_stored_for_a_key_first_seen_by_an_update(lake: Lake) -> None:
    """An update with the placeholder for a key silver lacks is stored as is; an older snapshot read of the key
    (it loses to the streamed change) must not fill it, neither pending nor after the compaction."""
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE), commit=200, lsn=210)])
    assert lake.rows(["id", "notes"]) == [(1, UNAVAILABLE_VALUE)]
    lake.apply([change("r", {"id": 1}, after=row(1, "new", notes="old text"), commit=None, lsn=500, snapshot="true")])
    assert lake.rows(["id", "status", "notes"]) == [(1, "paid", UNAVAILABLE_VALUE)]
    lake.apply([change("u", {"id": 1}, after=row(1, "shipped", notes="new text"), commit=300, lsn=310)])
    assert lake.rows(["id", "status", "notes"]) == [(1, "shipped", "new text")]


def test_added_column_flows_into_extra_then_into_its_own_column(lake: Lake) -> None:
    from deltalake.schema import Field, PrimitiveType

    lake.apply([change("c", {"id": 1}, after=row(1))])
    grown = [change("u", {"id": 1}, after=row(1, "paid", coupon="SPRING", discount="2.50"), commit=200, lsn=210)]
    parsed = parse_records(raw(grown), row_schema(lake.changes.arrow_schema), KEYS)
    assert parsed.extra_columns == ["coupon", "discount"]
    lake.apply(grown)
    assert lake.rows(["id", "status", "_extra"]) == [(1, "paid", '{"coupon":"SPRING","discount":"2.50"}')]
    # The app widens the table (ALTER TABLE ADD COLUMNS), reloads its schema and re-parses: the values are typed.
    for table in (lake.base, lake.changes):
        table.table.alter.add_columns([Field("coupon", PrimitiveType("string")),
                                       Field("discount", PrimitiveType("decimal(6,2)"))])
        table.reload_schema()
    lake.apply([change("u", {"id": 1}, after=row(1, "paid", coupon="SUMMER", discount="3.75"), commit=300, lsn=310)])
    assert lake.rows(["id", "coupon", "discount", "_extra"]) == [(1, "SUMMER", Decimal("3.75"), None)]


def test_interleaved_transactions_ordered_by_commit_not_change_lsn(tmp_path: Path, spark: Any) -> None:
    # T1 writes at LSN 180 and commits first; T2 began earlier, wrote at LSN 150, commits after T1.
    # T2's events carry T1's commit LSN (250) as last commit: by change LSN or ts_ms T1 would win.
    t1 = change("u", {"id": 1}, after=row(1, "from T1"), commit=100, lsn=180, ts_ms=1_709_290_000_900)
    t2 = change("u", {"id": 1}, after=row(1, "from T2"), commit=250, lsn=150, ts_ms=1_709_290_000_100)
    want = [(1, "from T2", "n", "u", 1, 250, 150)]
    for i, batches in enumerate(([[t1, t2]], [[t2, t1]], [[t2], [t1]])):
        lake = Lake(tmp_path / str(i), spark)
        for records in batches:
            lake.apply(records)
        assert lake.rows() == want


def test_changes_within_a_transaction_ordered_by_change_lsn(lake: Lake) -> None:
    lake.apply([change("u", {"id": 1}, after=row(1, "second"), commit=100, lsn=120),
                change("u", {"id": 1}, after=row(1, "first"), commit=100, lsn=110),
                change("c", {"id": 2}, after=row(2), commit=100, lsn=115)])
    assert lake.rows(["id", "status", "_change_lsn"]) == [(1, "second", 120), (2, "new", 115)]


def test_typed_values_and_source_time(lake: Lake) -> None:
    lake.apply([change("c", {"id": 1}, after=row(1, amount="1234.50", notes="äöü 東京 €"), commit=90, lsn=120)])
    got = lake.current()[0]
    assert got["amount"] == Decimal("1234.50")
    assert got["placed_at"] == datetime(2024, 3, 1, 10, 15, 30, 123456, tzinfo=UTC)
    assert got["notes"] == "äöü 東京 €"
    assert got["attrs"] == '{"gift": true}'
    assert got["_source_ts"] == datetime(2024, 3, 1, 10, 46, 40, tzinfo=UTC)


def _copy_on_write(table: DriverTable, deleted: DriverTable, index: DeleteIndex, records: list[Record],
                   offset: int, batch_id: int) -> None:
    """The reference: the per-batch MERGE into one table that merge-on-read replaced (same rules, no view)."""
    parsed = parse_records(raw(records, offset), row_schema(table.arrow_schema), KEYS)
    rows = row_schema(table.arrow_schema)
    toastable = toastable_of(table.arrow_schema, KEYS)
    newest = newest_changes(parsed.changes, rows, KEYS, toastable, index)
    if newest:
        merge_changes(table.table, changes_table(newest, table.arrow_schema), KEYS, toastable, "ref", "ref", batch_id)
        markers = markers_table(newest, rows, KEYS, deleted.arrow_schema)
        if markers.num_rows:
            deleted.write_once(markers, "ref", batch_id, "append")
            index.add_table(markers, KEYS)


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


@pytest.mark.parametrize("seed", range(6))
def test_merge_on_read_equals_the_per_batch_merge_on_random_runs(tmp_path: Path, spark: Any, seed: int) -> None:
    """Random logs cut into batches, with Connect-style re-sends (a contiguous run of the log again) and
    compactions at random points: the view, and the base after a final compaction, equal the reference."""
    from deltalake import write_deltalake

    rng = random.Random(seed)
    log = _random_log(rng, keys=6, transactions=60)
    write_deltalake(str(tmp_path / "ref"), SILVER.empty_table(), configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(str(tmp_path / "ref_deleted"), MARKERS.empty_table())
    ref = DriverTable(None, "ref", str(tmp_path / "ref"))
    ref_deleted = DriverTable(None, "ref_deleted", str(tmp_path / "ref_deleted"))
    ref_index = DeleteIndex()
    lake = Lake(tmp_path / "lake", spark)
    at = 0
    compactions = 0
    while at < len(log):
        end = min(len(log), at + rng.randint(1, 12))
        batch = log[at:end]
        if at and rng.random() < 0.3:  # a re-send: Connect restarts from an older offset
            batch = log[max(0, at - rng.randint(1, 8)):end]
        at = end
        offset = lake.offset
        lake.apply(batch)
        _copy_on_write(ref, ref_deleted, ref_index, batch, offset, lake.batch_id)
        if rng.random() < 0.25:
            lake.compact()
            compactions += 1
    columns = [f.name for f in SILVER if f.name not in ("_source_ts", "_extra")]
    want = _sorted_rows(ref.read(), columns)
    assert want, "the random log left no row: the comparison would prove nothing"
    assert lake.rows(columns) == want
