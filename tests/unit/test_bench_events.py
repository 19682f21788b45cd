"""The events bench (spark_jobs/bench_events.py): the producer rate it reports (no services)."""

from __future__ import annotations

import math

from spark_jobs.bench_events import _produced_per_second


def test_produced_per_second_uses_the_loadgen_manifest_fields() -> None:
    manifest = {"total_sent": 100_000, "delivered": 99_000, "elapsed_with_flush_s": 20.0}
    assert _produced_per_second(manifest) == 4950.0


def test_produced_per_second_without_elapsed_is_nan_not_a_made_up_rate() -> None:
    assert math.isnan(_produced_per_second({"total_sent": 10}))
