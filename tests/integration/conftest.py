"""Integration tests talk to the real local stack; it is started if not up."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from spark_jobs.settings import REPO_ROOT, Settings, load_settings

LAKE = str(Path(sys.executable).parent / "lake")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    # Tests that stop and restart the shared stack go after every other test, whatever their file is called.
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


@pytest.fixture(scope="session")
def stack() -> Iterator[Settings]:
    # Through the `lake` command, as a user starts it: run by root, it switches to the service user first
    # (spark_jobs.stack.service_user), so nothing in the state dir is written by root.
    run_lake("stack", "up", timeout=900)
    yield load_settings()


def run_lake(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
             check: bool = True) -> subprocess.CompletedProcess[str]:
    # A test that opened a Spark Connect session has SPARK_CONNECT_MODE_ENABLED in its environment (pyspark
    # sets it); a `lake` child that inherited it could not build its own classic session.
    base = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    proc = subprocess.run([LAKE, *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})}, cwd=REPO_ROOT, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"lake {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def kill_program(settings: Settings, program: str) -> int:
    """SIGKILL a supervised program's whole process group (for the streaming app: the Python driver and its
    Spark JVM, as when a machine dies); returns the pid killed."""
    import signal

    from spark_jobs.stack import supervisor

    info = supervisor.program_info(settings, program)
    assert info and info["statename"] == "RUNNING", f"{program} not running: {info}"
    pid = int(info["pid"])
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    return pid


def wait_running(settings: Settings, program: str, old_pid: int, timeout: float = 120) -> None:
    """Wait until the supervisor runs ``program`` again under a new pid (starting it if it gave up)."""
    import time

    from spark_jobs.stack import supervisor

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = supervisor.program_info(settings, program) or {}
        if info.get("statename") == "RUNNING" and info.get("pid") != old_pid:
            return
        if info.get("statename") in {"EXITED", "FATAL", "BACKOFF", "STOPPED"}:
            supervisor.start_program(settings, program)
        time.sleep(1)
    raise AssertionError(f"{program} did not come back after SIGKILL")


def wait_and_verify_cdc(timeout: float = 900) -> None:
    """`lake stream wait` (every committed change applied), then `lake verify cdc`: silver equals PostgreSQL."""
    import json

    waited = run_lake("stream", "wait", "--timeout", str(timeout), check=False, timeout=timeout + 60)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-2000:]
    proc = run_lake("verify", "cdc", "--json", check=False, timeout=600)
    diffs = json.loads(proc.stdout)
    assert set(diffs) == {"silver.customers", "silver.products", "silver.orders", "silver.order_items"}
    bad = {t: lines[:10] for t, lines in diffs.items() if lines}
    assert not bad, json.dumps(bad, indent=1, ensure_ascii=False)


#: ``gold.fct_daily_sales`` computed in PostgreSQL from the shop's own tables for [%s, %s) (the tests' reference).
SALES_SQL = """
SELECT (o.placed_at AT TIME ZONE 'UTC')::date AS order_date, o.currency,
       count(*) AS orders,
       count(*) FILTER (WHERE o.status IN ('paid', 'shipped')) AS paid_orders,
       coalesce(sum(o.total) FILTER (WHERE o.status IN ('paid', 'shipped')), 0) AS revenue,
       coalesce(sum(o.total) FILTER (WHERE o.status = 'refunded'), 0) AS refunded_amount,
       count(*) FILTER (WHERE o.status = 'cancelled') AS cancelled_orders,
       coalesce(sum(i.units) FILTER (WHERE o.status IN ('paid', 'shipped')), 0) AS units,
       count(DISTINCT o.customer_id) AS customers
FROM orders o LEFT JOIN (SELECT order_id, sum(quantity) AS units FROM order_items GROUP BY order_id) i
  USING (order_id)
WHERE o.placed_at >= %s AND o.placed_at < %s
GROUP BY 1, 2 ORDER BY 1, 2
"""


def write_history(days: int, *, orders_per_day: int, events_per_day: int, seeds: range) -> int:
    """``lake loadgen history`` with the first seed of ``seeds`` whose id range is still free (the state dir may
    hold an earlier run's history); returns the seed."""
    for seed in seeds:
        proc = run_lake("loadgen", "history", "--days", str(days), "--seed", str(seed), "--orders-per-day",
                        str(orders_per_day), "--events-per-day", str(events_per_day), check=False, timeout=900)
        if proc.returncode == 0:
            return seed
        assert proc.returncode == 2 and "make clean" in proc.stderr + proc.stdout, proc.stderr[-2000:]
    pytest.fail(f"no free history seed in {seeds.start}..{seeds.stop - 1}")


def gold_backfill(settings: Settings, days: list[date], reprocess: str) -> dict[str, str]:
    """A backfill of ``lake_gold_daily`` over ``days`` through the REST API; waits for it, returns {day: state}."""
    from spark_jobs.airflow_api import GOLD_DAG, AirflowClient

    client = AirflowClient(settings)
    client.wait_for_dag(GOLD_DAG)
    client.unpause(GOLD_DAG)
    bf = client.backfill(GOLD_DAG, days[0], days[-1], reprocess=reprocess)
    return client.wait_backfill(GOLD_DAG, int(bf["id"]), days, timeout=2400)
