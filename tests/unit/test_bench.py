"""Figures helpers of the benchmarks (no services)."""

from __future__ import annotations

import math

from spark_jobs.bench import _percentile
from spark_jobs.bench_events import _produced_per_second


def test_produced_per_second_uses_the_loadgen_manifest_fields() -> None:
    manifest = {"total_sent": 100_000, "delivered": 99_000, "elapsed_with_flush_s": 20.0}
    assert _produced_per_second(manifest) == 4950.0


def test_produced_per_second_without_elapsed_is_nan_not_a_made_up_rate() -> None:
    assert math.isnan(_produced_per_second({"total_sent": 10}))


def test_percentile_picks_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert _percentile(values, 0.5) == 51.0
    assert _percentile(values, 0.95) == 95.0
    assert math.isnan(_percentile([], 0.5))
