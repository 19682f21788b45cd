"""The CDC bench (spark_jobs/bench/cdc.py): its figures helpers and its refusal to start without a connector."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.bench.cdc import percentile


def test_percentile_picks_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.95) == 95.0
    assert math.isnan(percentile([], 0.5))


@pytest.mark.parametrize("report", [
    [],  # nothing registered
    [{"name": "shop-postgres", "state": "FAILED", "tasks": ["FAILED"]}],
    [{"name": "shop-postgres", "state": "RUNNING", "tasks": []}],
    [{"name": "shop-postgres", "state": "RUNNING", "tasks": ["RUNNING", "FAILED"]}],
])
def test_bench_cdc_refuses_to_start_without_a_running_connector(monkeypatch: pytest.MonkeyPatch,
                                                                report: list[dict[str, Any]]) -> None:
    from spark_jobs.bench import cdc as bench
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import connectors

    monkeypatch.setattr(connectors, "status_report", lambda _settings: report)
    with pytest.raises(RuntimeError, match="lake connectors apply"):
        bench._require_running_connector(load_settings({}))


def test_bench_cdc_starts_with_a_running_connector(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.bench import cdc as bench
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import connectors

    asked: list[object] = []

    def report(settings: object) -> list[dict[str, Any]]:
        asked.append(settings)
        return [{"name": "shop-postgres", "state": "RUNNING", "tasks": ["RUNNING"]}]

    monkeypatch.setattr(connectors, "status_report", report)
    settings = load_settings({})
    bench._require_running_connector(settings)  # returns: no RuntimeError
    assert asked == [settings]


class _Recorder:
    """A fake of the CLI's bars (spark_jobs.cli.progress): records each phase and what it was told."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, Any]] = []

    @contextmanager
    def timed(self, description: str, seconds: float) -> Iterator[None]:
        self.phases.append((description, seconds))
        yield

    @contextmanager
    def remaining(self, description: str) -> Iterator[Callable[[int], None]]:
        told: list[int] = []
        self.phases.append((description, told))
        yield told.append


def _fake_services(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every service the CDC bench touches, faked; returns the timeouts ``lake stream wait`` was given."""
    import time

    from spark_jobs import session
    from spark_jobs.bench import cdc as bench
    from spark_jobs.loadgen.cdc import runner
    from spark_jobs.stack import stream_control as control

    waits: list[float] = []

    def wait(settings: object, timeout: float, progress: Callable[[int], None] | None = None) -> bool:
        waits.append(timeout)
        if progress is not None:
            progress(7)
            progress(0)
        return True

    spark = SimpleNamespace(sparkContext=SimpleNamespace(setLogLevel=lambda level: None))
    monkeypatch.setattr(bench, "_require_running_connector", lambda settings: None)
    monkeypatch.setattr(session, "build_session", lambda settings, name, **_: spark)
    monkeypatch.setattr(control, "wait", wait)
    monkeypatch.setattr(control, "start", lambda settings: None)
    monkeypatch.setattr(control, "stop", lambda settings: None)
    monkeypatch.setattr(runner, "run", lambda *a, **k: SimpleNamespace(total_changes=100, actual_rate=50.0))
    monkeypatch.setattr(bench, "_silver_heads", lambda spark: {"silver.orders": (3, 1_000.0)})
    monkeypatch.setattr(bench, "_total_end_offsets", lambda settings: 0)
    monkeypatch.setattr(bench, "_latencies", lambda spark, since: [1.0, 2.0])
    monkeypatch.setattr(bench, "_cdc_status", lambda settings: {})
    monkeypatch.setattr(bench, "_first_batch_start", lambda settings, after, timeout: 990.0)
    monkeypatch.setattr(bench, "_query_running", lambda settings, query, log_from, timeout: True)
    monkeypatch.setattr(bench._Driver, "pid", lambda self: None)
    monkeypatch.setattr(bench, "_silver_query_seconds", lambda spark: {"rows": 1, "best_s": 0.1, "runs_s": [0.1]})
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    return waits


def test_bench_cdc_shows_each_phase_on_the_bars_it_is_given(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    from spark_jobs.bench.cdc import Bars, bench_cdc
    from spark_jobs.settings import load_settings

    waits = _fake_services(monkeypatch)
    bars = _Recorder()
    caplog.set_level("INFO", logger="spark_jobs")
    result = bench_cdc(load_settings({}), rate=100, duration=30, backlog_seconds=20, seed=1, warmup=60,
                       bars=Bars(timed=bars.timed, remaining=bars.remaining))

    assert bars.phases == [
        ("bench cdc: catching up before measuring (records to apply)", [7, 0]),
        ("bench cdc: warm-up load", 60),
        ("bench cdc: catch-up after the warm-up (records to apply)", [7, 0]),
        ("bench cdc: steady load", 30),
        ("bench cdc: applying the steady load (records to apply)", [7, 0]),
        ("bench cdc: backlog build", 20),
        ("bench cdc: Debezium flushes the backlog into Kafka", 15),
        ("bench cdc: catch-up of the backlog (records to apply)", [7, 0]),
    ]
    assert waits == [900, 1800, 1800, 3600]
    # The log lines and figures are the bench's own, bars or not.
    assert [m.split(" {")[0] for m in caplog.messages] == [
        "bench: waiting until the stream is caught up before measuring",
        "bench: warm-up load at 100 changes/s for 60s (not measured)",
        "bench: steady load at 100 changes/s for 30s",
        "bench: steady",
        "bench: building a backlog for 20s with the stream stopped",
        "bench: catch-up",
        "bench: the backlog held 0 records, fewer than the 300,000 the catch-up target is measured over: its figure "
        "is mostly the stream's start; give more --backlog-seconds",
        "bench: SELECT count(*), sum(total) FROM silver.orders:",
        "bench: ratios"]
    assert result["steady"]["caught_up"] and result["catch_up"]["caught_up"]
    assert result["catch_up"]["backlog_below_target_minimum"] is True


def test_bench_cdc_runs_without_bars_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.bench.cdc import bench_cdc
    from spark_jobs.settings import load_settings

    _fake_services(monkeypatch)
    result = bench_cdc(load_settings({}), rate=100, duration=30, backlog_seconds=20, seed=1, warmup=0)
    assert result["steady"]["changes_committed"] == 100


def test_the_catch_up_cpu_window_opens_when_the_cdc_query_runs(tmp_path: Any) -> None:
    """The catch-up's CPU snapshot waits for the stream log's line that the CDC query runs (written after
    ``log_from``), not for its first committed batch: a backlog applied in one batch fell outside the window."""
    from spark_jobs.bench.cdc import _query_running
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control
    from spark_jobs.stack import supervisor

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path)})
    log = supervisor.log_path(settings, control.PROGRAM)
    log.parent.mkdir(parents=True, exist_ok=True)
    old = "lake stream: query lake_cdc (a1) running, 25.7 s after the start (its tables and start: 11.9 s)\n"
    log.write_text(old)
    assert _query_running(settings, "lake_cdc", 0, timeout=0) is True
    assert _query_running(settings, "lake_cdc", len(old), timeout=0) is False  # an earlier start's line
    with log.open("a") as f:
        f.write("lake stream: query lake_events (b2) running, 30.1 s after the start (its tables and start: 4.4 s)\n")
    assert _query_running(settings, "lake_cdc", len(old), timeout=0) is False
    with log.open("a") as f:
        f.write("lake stream: query lake_cdc (c3) running, 20.0 s after the start (its tables and start: 9.0 s)\n")
    assert _query_running(settings, "lake_cdc", len(old), timeout=0) is True
