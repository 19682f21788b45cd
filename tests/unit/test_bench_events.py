"""The events bench (spark_jobs/bench/events.py): the producer rate it reports (no services)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.bench.events import _produced_per_second, busy


def test_produced_per_second_uses_the_loadgen_manifest_fields() -> None:
    manifest = {"total_sent": 100_000, "delivered": 99_000, "elapsed_with_flush_s": 20.0}
    assert _produced_per_second(manifest) == 4950.0


def test_produced_per_second_without_elapsed_is_nan_not_a_made_up_rate() -> None:
    assert math.isnan(_produced_per_second({"total_sent": 10}))


def test_busy_share_is_the_batches_running_time_over_the_span_they_cover() -> None:
    t0 = datetime(2026, 1, 1, 0, 0, 0)

    def row(start: float, seconds: float, commit: float, received: int) -> SimpleNamespace:
        return SimpleNamespace(received=received, batch_seconds=seconds, committed_at=t0 + timedelta(seconds=commit),
                               max_ingest_time=t0 + timedelta(seconds=start))

    # two batches of 2 s and 1 s over the 4 s from the first start to the last commit: busy 3 of 4 s
    got = busy([row(0, 2.0, 2.2, 10_000), row(3, 1.0, 4.0, 5_000)])
    assert got == {"busy_share": 0.75, "batch_us_per_record": 200.0}
    assert busy([]) == {}


def test_raw_ceiling_tells_the_records_still_to_read_after_each_fetch(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka

    from spark_jobs import kafka_auth
    from spark_jobs.bench import events as bench_events
    from spark_jobs.settings import load_settings

    class Message:
        def __init__(self, partition: int, offset: int) -> None:
            self._p, self._o = partition, offset

        def error(self) -> None:
            return None

        def partition(self) -> int:
            return self._p

        def offset(self) -> int:
            return self._o

    fetches = [[Message(0, o) for o in range(10, 15)] + [Message(1, 0)], [Message(0, o) for o in range(15, 20)]]

    class Consumer:
        def __init__(self, conf: dict[str, Any]) -> None:
            pass

        def assign(self, partitions: list[Any]) -> None:
            pass

        def consume(self, num_messages: int, timeout: float) -> list[Message]:
            return fetches.pop(0)

        def close(self) -> None:
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    monkeypatch.setattr(kafka_auth, "client_conf", lambda settings, principal: {})
    left: list[int] = []
    n, _rate = bench_events.raw_ceiling(load_settings({}), {0: (10, 19), 1: (0, 0)}, progress=left.append)
    assert n == 11
    assert left == [5, 0]


def test_bench_events_shows_its_catch_ups_and_raw_read_on_the_bars_it_is_given(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from spark_jobs import session
    from spark_jobs.bench import events as bench
    from spark_jobs.bench.cdc import Bars
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control
    from spark_jobs.stack import supervisor

    loads: list[tuple[float, float, str]] = []

    def loadgen(settings: object, rate: float, duration: float, seed: int, manifest: Path) -> dict[str, Any]:
        loads.append((rate, duration, manifest.name))
        return {"total_sent": 10, "delivered": 10, "elapsed_with_flush_s": 1.0, "offsets": {"0": [0, 9]}}

    def wait(settings: object, timeout: float, progress: Callable[[int], None] | None = None) -> bool:
        if progress is not None:
            progress(4)
            progress(0)
        return True

    def raw_ceiling(settings: object, ranges: dict[int, tuple[int, int]],
                    progress: Callable[[int], None] | None = None) -> tuple[int, float]:
        if progress is not None:
            progress(0)
        return 10, 100.0

    row = SimpleNamespace(received=10, batch_seconds=1.0, step_seconds={"hot": 0.5},
                          max_ingest_time=datetime(2026, 1, 1, 0, 0, 0), hot_committed_at=datetime(2026, 1, 1, 0, 0, 1),
                          committed_at=datetime(2026, 1, 1, 0, 0, 2), spark_jobs=1, delta_commits=4)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(setLogLevel=lambda level: None))
    monkeypatch.setattr(bench, "load_settings", lambda: load_settings({"LAKE_STATE_DIR": str(tmp_path)}))
    monkeypatch.setattr(session, "build_session", lambda settings, name, **_: spark)
    monkeypatch.setattr(bench, "_loadgen", loadgen)
    monkeypatch.setattr(bench, "raw_ceiling", raw_ceiling)
    monkeypatch.setattr(bench, "_ledger_rows", lambda spark, ranges: [row])
    monkeypatch.setattr(bench, "_hot_rows", lambda spark, ranges: [row])
    monkeypatch.setattr(bench, "freshness", lambda spark, ranges: [0.5])
    monkeypatch.setattr(bench, "_at_first_batch", lambda settings, log_from: {})
    monkeypatch.setattr(control, "wait", wait)
    monkeypatch.setattr(control, "start", lambda settings: None)
    monkeypatch.setattr(control, "stop", lambda settings: None)
    monkeypatch.setattr(supervisor, "log_path", lambda settings, program: tmp_path / "stream.log")
    monkeypatch.setattr(supervisor, "program_info", lambda settings, program: None)

    phases: list[tuple[str, list[int]]] = []

    @contextmanager
    def remaining(description: str) -> Iterator[Callable[[int], None]]:
        told: list[int] = []
        phases.append((description, told))
        yield told.append

    @contextmanager
    def timed(description: str, seconds: float) -> Iterator[None]:
        raise AssertionError("the loads are `lake loadgen events` runs with their own bar")
        yield

    results = bench.bench(rate=100, duration=5, backlog=1000, backlog_rate=500, seed=1, warmup=2, skip_steady=False,
                          skip_catchup=False, bars=Bars(timed=timed, remaining=remaining))
    assert phases == [
        ("bench events: catching up before the steady run (records to apply)", [4, 0]),
        ("bench events: catch-up after the warm-up (records to apply)", [4, 0]),
        ("bench events: applying the steady load (records to apply)", [4, 0]),
        ("bench events: raw ceiling (records to read)", [0]),
        ("bench events: catch-up of the backlog (records to apply)", [4, 0]),
    ]
    assert loads == [(100, 2, "warmup.json"), (100, 5, "steady.json"), (500, 2.0, "backlog.json")]
    assert results is not None and set(results) == {"steady", "catchup"}


def test_uptime_of_a_running_process_and_of_none() -> None:
    import os
    import time

    import psutil

    from spark_jobs.bench.events import _uptime

    mine = _uptime(os.getpid())
    assert mine is not None
    assert abs(mine - (time.time() - psutil.Process().create_time())) < 1.0
    assert _uptime(0) is None
