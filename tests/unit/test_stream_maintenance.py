"""The streaming queries' table maintenance: when it runs and what it runs (a recording fake session)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from spark_jobs.streaming.common import Maintenance


class RecordingSpark:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def sql(self, statement: str) -> None:
        self.statements.append(statement)


def _maintenance(minutes: int, clock: list[float], monkeypatch: pytest.MonkeyPatch) -> tuple[Maintenance, Any]:
    monkeypatch.setattr("spark_jobs.streaming.common.time.monotonic", lambda: clock[0])
    spark = RecordingSpark()
    settings: Any = SimpleNamespace(stream_maintenance_minutes=minutes)
    return Maintenance(spark, settings, "lake_test", ["silver.a", "hot.b"]), spark  # type: ignore[arg-type]


def test_maintenance_runs_once_per_interval_on_every_owned_table(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    maintenance, spark = _maintenance(10, clock, monkeypatch)
    maintenance.run_if_due()
    assert spark.statements == []  # not before the first interval has passed
    clock[0] += 599
    maintenance.run_if_due()
    assert spark.statements == []
    clock[0] += 1
    maintenance.run_if_due()
    assert spark.statements == ["OPTIMIZE silver.a", "VACUUM silver.a", "OPTIMIZE hot.b", "VACUUM hot.b"]
    clock[0] += 10
    maintenance.run_if_due()
    assert len(spark.statements) == 4  # the interval starts again after a run


def test_maintenance_interval_zero_never_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    maintenance, spark = _maintenance(0, clock, monkeypatch)
    clock[0] += 10**9
    maintenance.run_if_due()
    assert spark.statements == []
