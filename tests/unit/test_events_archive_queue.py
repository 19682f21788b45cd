"""The events query's archive queue (own code, Spark stubbed): back-pressure, grouping, failure surfacing."""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.streaming import events as ev


class _Table:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write_once(self, rows: list[dict[str, Any]], app_id: str, batch_id: int, mode: str) -> bool:
        self.rows.extend(rows)
        return True


class _Spark:
    class sparkContext:
        @staticmethod
        def setLocalProperty(key: str, value: str) -> None:
            pass


def _app(max_rows: int, run_dir: Path) -> ev.EventsApp:
    app = ev.EventsApp.__new__(ev.EventsApp)
    app.spark = _Spark()  # type: ignore[assignment]
    app.settings = SimpleNamespace(run_dir=run_dir)  # type: ignore[assignment]
    app._jobs = deque()
    app._queued_rows = 0
    app._max_queued_rows = max_rows
    app._cond = threading.Condition()
    app.archive_error = None
    app._archiver = None
    app._stopping = False
    app.driver_tables = {ev.ARCHIVE_LOG: _Table()}  # type: ignore[dict-item]
    app._record_archived = lambda group, seconds: None  # type: ignore[method-assign]
    return app


def _job(batch_id: int, rows: int) -> ev.ArchiveJob:
    tables = {name: pa.table({"batch": [batch_id] * (rows if name != ev.QUARANTINE else 0)})
              for name in (ev.BRONZE, ev.SILVER, ev.QUARANTINE)}
    return ev.ArchiveJob(batch_id, tables, rows, 0, {"0": [batch_id, batch_id]})


def test_waiting_batches_are_archived_together_and_the_hot_path_waits_when_the_queue_is_full(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gate = threading.Event()
    calls: list[dict[str, set[int]]] = []

    def slow_archive(tables: Any, rows: dict[str, dict[int, pa.Table]], app_id: str) -> None:
        calls.append({name: {b for b, t in batches.items() if t.num_rows} for name, batches in rows.items()})
        gate.wait(10)

    monkeypatch.setattr(ev, "write_archive", slow_archive)
    app = _app(max_rows=100, run_dir=tmp_path)
    jobs = [_job(i, 40) for i in range(4)]
    app._enqueue(jobs[0], "q")  # taken by the archive at once, which then blocks on the gate
    time.sleep(0.2)
    app._enqueue(jobs[1], "q")  # 80 rows queued
    blocked = threading.Thread(target=app._enqueue, args=(jobs[2], "q"), daemon=True)  # 120 > 100: must wait
    blocked.start()
    time.sleep(0.3)
    assert blocked.is_alive() and len(app._jobs) == 2
    gate.set()
    blocked.join(5)
    assert not blocked.is_alive()
    assert app.drain(timeout=10)
    later = [c[ev.BRONZE] for c in calls[1:]]
    assert calls[0][ev.BRONZE] == {0}  # alone: nothing else was waiting when it started
    # batches 1 and 2 waited together; each lands exactly once (together, or 2 after 1 if it came late)
    assert later in ([{1, 2}], [{1}, {2}])
    assert all(c[ev.SILVER] == c[ev.BRONZE] and c[ev.QUARANTINE] == set() for c in calls)
    logged = app.driver_tables[ev.ARCHIVE_LOG].rows  # type: ignore[attr-defined]
    assert sum(r["records"] for r in logged) == 120 and logged[-1]["last_batch"] == 2


def test_an_archive_failure_is_raised_to_the_hot_path_and_keeps_the_batch_queued(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(tables: Any, rows: Any, app_id: str) -> None:
        raise OSError("s3a://lake/warehouse/silver/events: connection refused")

    monkeypatch.setattr(ev, "write_archive", broken)
    app = _app(max_rows=100, run_dir=tmp_path)
    job = _job(5, 10)
    app._enqueue(job, "q")
    deadline = time.monotonic() + 5
    while app.archive_error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(app.archive_error, OSError)
    assert list(app._jobs) == [job]  # not dropped: the restart lands it from Kafka
    with pytest.raises(RuntimeError, match="re-read from Kafka at the next start") as info:
        app._raise_archive_error()
    assert "connection refused" in str(info.value.__cause__)


def test_the_failpoint_file_holds_the_archive_until_removed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    landed: list[int] = []
    monkeypatch.setattr(ev, "write_archive", lambda tables, rows, app_id: landed.extend(rows[ev.BRONZE]))
    hold = tmp_path / "failpoints" / ev.ARCHIVE_HOLD_FAILPOINT
    hold.parent.mkdir()
    hold.touch()
    app = _app(max_rows=100, run_dir=tmp_path)
    app._enqueue(_job(1, 10), "q")
    time.sleep(0.5)
    assert landed == [] and len(app._jobs) == 1
    hold.unlink()
    assert app.drain(timeout=10)
    assert landed == [1]


def test_a_failure_before_the_write_still_reaches_the_hot_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Whatever fails in the archive thread is raised to the hot path (a silent death would block it forever)."""
    app = _app(max_rows=100, run_dir=tmp_path)

    def broken_hold() -> None:
        raise PermissionError(f"{tmp_path}/failpoints: permission denied")

    monkeypatch.setattr(app, "_hold_if_asked", broken_hold)
    app._enqueue(_job(1, 10), "q")
    deadline = time.monotonic() + 5
    while app.archive_error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(RuntimeError, match="archive thread failed"):
        app._raise_archive_error()
