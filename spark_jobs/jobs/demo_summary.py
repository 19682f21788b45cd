"""The end of ``make demo``: what the lake now holds, read through the stack's Spark Connect server.

Prints rows per table of every layer, the gold daily sales of the demo's days, the age of the newest
closed hot-table window, and where to look next. Reads only.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click

LAYERS = ("bronze", "silver", "hot", "gold", "quarantine", "ops")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("first", required=False, default="")
@click.argument("last", required=False, default="")
def main(first: str, last: str) -> None:
    """Print what the lake holds; with FIRST and LAST (YYYY-MM-DD), also gold.fct_daily_sales of those days."""
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    settings = load_settings()
    spark = connect_session(settings)
    click.echo("\n==> rows per layer")
    for db in LAYERS:
        names = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {db}").collect() if not r.isTemporary)
        for name in names:
            if name.endswith("__deleted"):
                continue  # the silver view's parts; silver.<t> is what analysts query
            try:
                n = spark.table(f"{db}.{name}").count()
            except Exception as exc:  # noqa: BLE001 - a summary line, not a failure of the demo
                click.echo(f"  {db}.{name:<34} unreadable: {str(exc).splitlines()[0][:100]}")
                continue
            click.echo(f"  {db}.{name:<34} {n:>10,}")
    if first and last:
        click.echo(f"\n==> gold.fct_daily_sales {first} .. {last}")
        rows = spark.sql(f"SELECT order_date, currency, orders, paid_orders, revenue, refunded_amount, "
                         f"cancelled_orders, units, customers FROM gold.fct_daily_sales "
                         f"WHERE order_date BETWEEN DATE'{first}' AND DATE'{last}' ORDER BY order_date, currency")
        click.echo("  order_date  cur  orders  paid  revenue      refunded   cancelled  units  customers")
        for r in rows.collect():
            click.echo(f"  {r.order_date}  {r.currency:<3}  {r.orders:>6}  {r.paid_orders:>4}  {r.revenue!s:>11}  "
                       f"{r.refunded_amount!s:>9}  {r.cancelled_orders:>9}  {r.units:>5}  {r.customers:>9}")
    newest = spark.sql("SELECT max(window_end) AS w FROM hot.sales_per_minute WHERE window_end <= current_timestamp()")
    w = newest.first()
    if w and w.w is not None:
        end = w.w if w.w.tzinfo else w.w.replace(tzinfo=UTC)
        click.echo(f"\n==> newest closed hot window: hot.sales_per_minute ends {end.isoformat()} "
                   f"({(datetime.now(UTC) - end).total_seconds():.0f} s ago)")


if __name__ == "__main__":
    main(prog_name="python -m spark_jobs.jobs.demo_summary")
