"""Figures helpers of the benchmarks (no services)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spark_jobs.bench_cdc import percentile
from spark_jobs.bench_events import _produced_per_second


def test_produced_per_second_uses_the_loadgen_manifest_fields() -> None:
    manifest = {"total_sent": 100_000, "delivered": 99_000, "elapsed_with_flush_s": 20.0}
    assert _produced_per_second(manifest) == 4950.0


def test_produced_per_second_without_elapsed_is_nan_not_a_made_up_rate() -> None:
    assert math.isnan(_produced_per_second({"total_sent": 10}))


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

    monkeypatch.setattr(connectors, "status_report",
                        lambda _settings: [{"name": "shop-postgres", "state": "RUNNING", "tasks": ["RUNNING"]}])
    bench._require_running_connector(load_settings({}))
