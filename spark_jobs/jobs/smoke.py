"""Smoke job: write a small Delta table ``ops.smoke`` through the shared catalog, read it back.

Grain: one row per (run_id, n). Columns: run_id string, n int, square long,
written_at timestamp. Re-running a run_id replaces its rows (idempotent).
Exit code 0 only if the rows read back from the catalog equal those written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TABLE = "ops.smoke"


def smoke_rows(spark: SparkSession, run_id: str, rows: int) -> DataFrame:
    """Pure: ``rows`` rows for ``run_id`` with n in [1, rows] and its square."""
    from pyspark.sql import functions as F

    return (spark.range(1, rows + 1).select(
        F.lit(run_id).alias("run_id"),
        F.col("id").cast("int").alias("n"),
        (F.col("id") * F.col("id")).alias("square"),
        F.current_timestamp().alias("written_at"),
    ))


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="smoke", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--run-id", default="manual__" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S"))
    parser.add_argument("--rows", type=int, default=10)
    args = parser.parse_args(list(argv))
    if args.rows < 1:
        parser.error("--rows must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from spark_jobs.session import build_session
    from spark_jobs.settings import load_settings
    from spark_jobs.table_io import replace_partition

    args = _parse(sys.argv[1:] if argv is None else argv)
    settings = load_settings()
    spark = build_session(settings, "lake-smoke")
    run_id = args.run_id.replace("'", "''")
    df = smoke_rows(spark, args.run_id, args.rows)
    replace_partition(df, settings, TABLE, f"run_id = '{run_id}'")
    back = spark.table(TABLE).where(f"run_id = '{run_id}'")
    got = sorted((r.n, r.square) for r in back.select("n", "square").collect())
    want = [(n, n * n) for n in range(1, args.rows + 1)]
    location = spark.sql(f"DESCRIBE DETAIL {TABLE}").select("location").first()
    print(f"smoke: wrote and read back {len(got)} rows of {TABLE} for run_id={args.run_id} "
          f"at {location[0] if location else '?'}", flush=True)
    if got != want:
        print(f"smoke: MISMATCH, expected {len(want)} rows n=1..{args.rows}, got {got[:5]}...", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
