"""The CDC query's background compaction (spark_jobs.streaming.cdc.Compactor) on local delta-rs tables.

Its thread compacts without batches arriving, drops merged changes one
compaction late, and a failed compaction fails the query's next batch.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.compute as pc
import pytest

from spark_jobs.driver_delta import DriverTable
from spark_jobs.silver.cdc import BATCH_COLUMN
from spark_jobs.streaming import cdc as cdc_query
from tests.unit.test_cdc_arrow import SHOWN, Lake
from tests.unit.test_cdc_parse import KEYS, change, row

CONTRACT: Any = SimpleNamespace(table="orders", keys=KEYS, silver="silver.orders", base="silver.orders__base",
                                changes="silver.orders__changes")


@pytest.fixture
def lake(tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch) -> Lake:
    lake = Lake(tmp_path, spark)
    paths = {CONTRACT.base: tmp_path / "base", CONTRACT.changes: tmp_path / "changes"}
    monkeypatch.setattr(cdc_query, "DriverTable", lambda _settings, name: DriverTable(None, name, str(paths[name])))
    return lake


def _compactor(lake: Lake, rows_due: int) -> cdc_query.Compactor:
    settings: Any = SimpleNamespace(stream_compact_rows=rows_due, stream_compact_seconds=3600)
    compactor = cdc_query.Compactor(settings, {CONTRACT.changes: lake.changes})
    compactor.track(CONTRACT, pending=False)
    return compactor


def _until(check: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _batches(lake: Lake) -> list[int]:
    return sorted(set(lake.changes.read([BATCH_COLUMN]).column(BATCH_COLUMN).to_pylist()))


def test_compacts_without_further_batches_and_drops_merged_changes_one_compaction_late(lake: Lake) -> None:
    compactor = _compactor(lake, rows_due=1)
    done = lake.apply([change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)])
    compactor.appended("orders", done.changes)
    compactor.after_batch("app", lake.batch_id)
    # No batch follows: the thread compacts on its own.
    _until(lambda: compactor._merged["orders"] == [1], "the first compaction")
    assert lake.base.read(SHOWN).num_rows == 1
    assert _batches(lake) == [1], "merged changes are kept until the next compaction"

    done = lake.apply([change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)])
    compactor.appended("orders", done.changes)
    compactor.after_batch("app", lake.batch_id)
    _until(lambda: compactor._purged.get("orders") == 1, "the drop of batch 1's changes")
    assert _batches(lake) == [2]
    assert lake.base.read(["id", "status"]).to_pylist() == [{"id": 1, "status": "paid"}]
    assert lake.rows() == [(1, "paid", "n", "u", 1, 200, 210)]


def test_nothing_is_compacted_before_it_is_due(lake: Lake) -> None:
    compactor = _compactor(lake, rows_due=3)
    done = lake.apply([change("c", {"id": i}, after=row(i), commit=100, lsn=110 + i) for i in (1, 2)])
    compactor.appended("orders", done.changes)
    compactor.after_batch("app", lake.batch_id)
    time.sleep(2.5)  # the thread wakes every second: two looks at a table not due
    assert compactor._merged["orders"] == []
    assert lake.base.read().num_rows == 0
    done = lake.apply([change("c", {"id": 3}, after=row(3), commit=100, lsn=113)])
    compactor.appended("orders", done.changes)
    compactor.after_batch("app", lake.batch_id)
    _until(lambda: compactor._merged["orders"] == [2], "the compaction once 3 changes are pending")
    assert sorted(lake.base.read(["id"]).column("id").to_pylist()) == [1, 2, 3]
    assert pc.max(lake.changes.read([BATCH_COLUMN]).column(BATCH_COLUMN)).as_py() == 2


def test_a_failed_compaction_fails_the_next_batch_naming_the_table(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any) -> None:
        raise OSError("object store unreachable")

    monkeypatch.setattr(cdc_query, "compact", broken)
    compactor = _compactor(lake, rows_due=1)
    done = lake.apply([change("c", {"id": 1}, after=row(1), commit=100, lsn=110)])
    compactor.appended("orders", done.changes)
    compactor.after_batch("app", lake.batch_id)
    _until(lambda: compactor._error is not None, "the compaction error")
    with pytest.raises(RuntimeError, match=r"compaction of silver\.orders__changes .* into silver\.orders__base "
                                           r"failed: object store unreachable"):
        compactor.after_batch("app", lake.batch_id + 1)
    assert _batches(lake) == [1], "the pending change is kept"
