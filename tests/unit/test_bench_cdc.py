"""The CDC bench (spark_jobs/bench_cdc.py): its figures helpers and its refusal to start without a connector."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spark_jobs.bench_cdc import percentile


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
    from spark_jobs import bench_cdc as bench
    from spark_jobs import connectors
    from spark_jobs.settings import load_settings

    monkeypatch.setattr(connectors, "status_report", lambda _settings: report)
    with pytest.raises(RuntimeError, match="lake connectors apply"):
        bench._require_running_connector(load_settings({}))


def test_bench_cdc_starts_with_a_running_connector(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs import bench_cdc as bench
    from spark_jobs import connectors
    from spark_jobs.settings import load_settings

    asked: list[object] = []

    def report(settings: object) -> list[dict[str, Any]]:
        asked.append(settings)
        return [{"name": "shop-postgres", "state": "RUNNING", "tasks": ["RUNNING"]}]

    monkeypatch.setattr(connectors, "status_report", report)
    settings = load_settings({})
    bench._require_running_connector(settings)  # returns: no RuntimeError
    assert asked == [settings]
