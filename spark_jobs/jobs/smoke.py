"""Smoke job: write a small Delta table ``ops.smoke`` through the shared catalog, read it back.

Grain: one row per (run_id, n). Columns: run_id string, n int, square long,
written_at timestamp. Re-running a run_id replaces its rows (idempotent).
Exit code 0 only if the rows read back from the catalog equal those written.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

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


def run_predicate(run_id: str) -> str:
    """The Delta ``replaceWhere`` predicate of one run's rows. Delta takes it as SQL text only (no parameter
    markers), so the run id is a string literal quoted by :func:`spark_jobs.quality.store.sql_string`."""
    from spark_jobs.quality.store import sql_string

    return "run_id = " + sql_string(run_id)


def _positive(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if value < 1:
        raise click.BadParameter(f"--rows must be >= 1, got {value}")
    return value


@click.command("smoke", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--run-id", default=None, help="rows to replace  [default: manual__<UTC time>]")
@click.option("--rows", type=int, default=10, show_default=True, callback=_positive, help="rows n=1..N to write")
def command(run_id: str | None, rows: int) -> int:
    """Write and read back ops.smoke through the shared catalog; exit 1 on a mismatch.

    Run as `lake job smoke`, and by the lake_smoke DAG (spark-submit of this file).
    """
    return main(run_id or "manual__" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S"), rows)


def main(run_id: str, rows: int) -> int:
    """Write ``rows`` rows for ``run_id``, read them back through the catalog; 0 only if they are equal."""
    from pyspark.sql import functions as F

    from spark_jobs.session import build_session
    from spark_jobs.settings import load_settings
    from spark_jobs.table_io import replace_partition

    settings = load_settings()
    spark = build_session(settings, "lake-smoke", short_lived=True)
    df = smoke_rows(spark, run_id, rows)
    replace_partition(df, settings, TABLE, run_predicate(run_id))
    back = spark.table(TABLE).where(F.col("run_id") == F.lit(run_id))
    got = sorted((r.n, r.square) for r in back.select("n", "square").collect())
    want = [(n, n * n) for n in range(1, rows + 1)]
    location = spark.sql(f"DESCRIBE DETAIL {TABLE}").select("location").first()
    log.info("smoke: wrote and read back %d rows of %s for run_id=%s at %s", len(got), TABLE, run_id,
             location[0] if location else "?")
    if got != want:
        log.error("smoke: MISMATCH, expected %d rows n=1..%d, got %s...", len(want), rows, got[:5])
        return 1
    return 0


if __name__ == "__main__":  # spark-submit spark_jobs/jobs/smoke.py --run-id ID --rows N
    from spark_jobs import logs

    logs.setup()
    try:
        raise SystemExit(command.main(prog_name="smoke", standalone_mode=False))
    except click.ClickException as exc:  # a bad option: Click's message, exit 2
        exc.show()
        raise SystemExit(exc.exit_code) from None
