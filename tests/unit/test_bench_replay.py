"""``lake bench replay``'s stream side: which ledger batches count as the stream's catch-up."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from spark_jobs.bench.replay import catch_up_records, stream_events_rate


def test_only_batches_of_a_backlog_count_as_catch_up(spark: Any, tmp_path: Path) -> None:
    """Steady batches of a loaded stream (here 25,000 and 60,000 records, slow per record) are not its catch-up:
    counting them made the replay's ratio look better than it was."""
    settings: Any = SimpleNamespace(events_max_offsets_per_trigger=200_000)
    backlog = catch_up_records(settings)
    assert backlog == 100_000
    rows = [(0, 0, 0.5), (1, 25_000, 5.0), (2, 60_000, 10.0), (3, 120_000, 8.0), (4, 200_000, 12.0)]
    location = str(tmp_path / "ledger")
    (spark.createDataFrame(rows, "batch_id long, received long, batch_seconds double")
     .write.format("delta").save(location))
    rate = stream_events_rate(spark, location, backlog)
    assert rate["catch_up_batches"] == {"batches": 2, "records": 320_000, "seconds": 20.0, "records_per_s": 16_000.0}
    assert rate["all_batches"]["batches"] == 4 and rate["all_batches"]["records"] == 405_000
