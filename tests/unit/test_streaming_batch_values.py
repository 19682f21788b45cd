"""Per-batch values kept out of Spark's generated code (streaming.common.batch_constant, batch_time), and a batch's
time read back as Spark recorded it (batch_timestamp_ms)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spark_jobs.streaming.common import batch_constant, batch_time, batch_timestamp_ms
from spark_jobs.streaming.engine import codegen_compiles


def _frame(spark: Any, value: Any) -> Any:
    from pyspark.sql import functions as F

    return spark.range(1000).select((F.col("id") * 3).alias("x"), value.alias("v"))


def _compiles_of_new_values(spark: Any, column: Any) -> int:
    """Compilations Spark ran for the same plan with three new per-batch values, once the first one compiled."""
    from pyspark.sql import functions as F

    _frame(spark, column(1_000)).agg(F.sum("x"), F.max("v")).collect()
    before = codegen_compiles(spark)
    for value in (1_001, 1_002, 1_003):
        _frame(spark, column(value)).agg(F.sum("x"), F.max("v")).collect()
    return codegen_compiles(spark) - before


def test_batch_constant_has_the_value_and_compiles_once(spark: Any) -> None:
    from pyspark.sql import functions as F

    assert [r.v for r in _frame(spark, batch_constant(2**40 + 7)).limit(2).collect()] == [2**40 + 7] * 2
    assert dict(_frame(spark, batch_constant(5)).dtypes)["v"] == "bigint"
    millis = 1_796_677_014_801
    got = _frame(spark, batch_time(millis)).select("v").first()[0]
    assert got.astimezone(UTC) == datetime.fromtimestamp(millis / 1000, UTC)
    # A literal compiles again for every value (what the stream did every batch); the batch constant does not.
    assert _compiles_of_new_values(spark, lambda v: F.lit(v).cast("bigint")) >= 3
    assert _compiles_of_new_values(spark, batch_constant) == 0


def test_batch_timestamp_is_sparks_batch_time(spark: Any, tmp_path: Path) -> None:
    """The value current_timestamp() has in the batch, from the running query and from the offsets file alike."""
    from pyspark.sql import functions as F

    seen: list[tuple[int, int, int]] = []
    checkpoint = str(tmp_path / "cp")

    def process(frame: Any, batch_id: int) -> None:
        stamped = frame.agg(F.max("t")).first()[0]
        if stamped is not None:
            seen.append((batch_id, int(stamped.timestamp() * 1000),
                         batch_timestamp_ms(spark, "batch-time-test", batch_id, checkpoint)))

    source = spark.readStream.format("rate").option("rowsPerSecond", 50).load().withColumn("t", F.current_timestamp())
    query = (source.writeStream.queryName("batch-time-test").foreachBatch(process)
             .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        query.stop()
    assert len(seen) >= 2
    for _batch, stamped, read in seen:
        assert read == stamped
    # The query stopped: the offsets file gives the same value.
    batch, stamped, _read = seen[-1]
    assert batch_timestamp_ms(spark, "batch-time-test", batch, checkpoint) == stamped
