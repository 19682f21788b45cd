"""Helpers the integration tests share: running ``lake``, querying the lake and PostgreSQL, waiting on the
stack. Fixtures and collection hooks live in conftest.py; test modules import from here, not from each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

import psycopg2
import pytest

from spark_jobs.settings import REPO_ROOT, Settings

LAKE = str(Path(sys.executable).parent / "lake")
CHROMIUM = "/usr/bin/chromium"  # the browser the UI tests drive (Playwright, headless)

T = TypeVar("T")


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


def lake_output_dir(settings: Settings, name: str) -> Path:
    """A new folder for files a ``lake`` command writes (``--manifest``). Started by root, ``lake`` runs as the
    service user (spark_jobs.stack.service_user), who cannot write into pytest's private tmp dirs; the state
    dir is its own (``lake`` gives it what root created there)."""
    path = settings.state_dir / "test-output" / f"{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def lake_sql(query: str, timeout: float = 600) -> list[dict[str, Any]]:
    """``lake sql -e QUERY --format json`` (a Spark process of its own): one dict per result row."""
    out = run_lake("sql", "-e", query, "--format", "json", timeout=timeout).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def beeline(settings: Settings, query: str, *, user: str | None = None,
            password_file: Path | str | None = None) -> subprocess.CompletedProcess[str]:
    """``query`` through the Thrift server (JDBC) with pyspark's beeline, as the stack's Thrift user by default;
    csv2 output, so the last two words of stdout are the header and value of a one-cell result."""
    from spark_jobs.jars import pyspark_home
    from spark_jobs.stack.configs import THRIFT_USER, thrift_password_path

    return subprocess.run(
        [str(pyspark_home() / "bin" / "beeline"), "-u", f"jdbc:hive2://{settings.host}:{settings.thrift_port}/default",
         "-n", THRIFT_USER if user is None else user,
         "-w", str(thrift_password_path(settings) if password_file is None else password_file),
         "--outputformat=csv2", "-e", query],
        capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)


@contextmanager
def shop_cursor(settings: Settings) -> Iterator[Any]:
    """A cursor on the shop database; the transaction commits when the block ends, then the connection closes."""
    conn = psycopg2.connect(settings.pg_dsn(settings.pg_shop_db))
    try:
        with conn, conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def wait_until(check: Callable[[], T | None], what: str, timeout: float, every: float = 1.0,
               detail: Callable[[], object] | None = None) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail naming ``what`` (and ``detail()``,
    the state seen last) after ``timeout`` seconds. The outcome is the stack's state; the clock only bounds how
    long the test waits for it."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            seen = f": {detail()}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(every)
    return result


def load_in_background(settings: Settings, seed: int, seconds: float, rate: float = 300) -> threading.Thread:
    """The seeded CDC workload on the shop database in a daemon thread (join it to wait for the load's end)."""
    from spark_jobs.loadgen.cdc.runner import run as run_loadgen

    thread = threading.Thread(target=run_loadgen, kwargs={"settings": settings, "rate": rate, "duration": seconds,
                                                          "seed": seed}, daemon=True)
    thread.start()
    return thread


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` (gone ones count 0)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def running_info(settings: Settings, program: str, timeout: float = 120) -> dict[str, Any]:
    """``program``'s supervisor info once it is RUNNING (`lake stream start` returns while it is STARTING)."""
    from spark_jobs.stack import supervisor

    deadline = time.monotonic() + timeout
    while (info := supervisor.program_info(settings, program) or {}).get("statename") == "STARTING" \
            and time.monotonic() < deadline:
        time.sleep(1)
    assert info.get("statename") == "RUNNING", f"{program} not running: {info}"
    return info


def kill_program(settings: Settings, program: str) -> int:
    """SIGKILL a supervised program's whole process group once it is RUNNING (for the streaming app: the
    Python driver and its Spark JVM, as when a machine dies); returns the pid killed."""
    import signal

    pid = int(running_info(settings, program)["pid"])
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    return pid


def wait_running(settings: Settings, program: str, old_pid: int, timeout: float = 120) -> None:
    """Wait until the supervisor runs ``program`` again under a new pid (starting it if it gave up)."""
    from spark_jobs.stack import supervisor

    def restarted() -> bool:
        info = supervisor.program_info(settings, program) or {}
        if info.get("statename") == "RUNNING" and info.get("pid") != old_pid:
            return True
        if info.get("statename") in {"EXITED", "FATAL", "BACKOFF", "STOPPED"}:
            supervisor.start_program(settings, program)
        return False

    wait_until(restarted, f"{program} to come back after SIGKILL", timeout)


def start_streaming() -> None:
    """The CDC connector applied and the streaming app started (both idempotent)."""
    run_lake("connectors", "apply")
    run_lake("stream", "start")


def wait_stream(timeout: int = 900) -> None:
    """`lake stream wait`: every change committed so far is applied (fails naming what the command said)."""
    waited = run_lake("stream", "wait", "--timeout", str(timeout), check=False, timeout=timeout + 60)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr[-2000:]


def wait_and_verify_cdc(timeout: int = 900) -> None:
    """`lake stream wait` (every committed change applied), then `lake verify cdc`: silver equals PostgreSQL."""
    wait_stream(timeout)
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


def gold_backfill(settings: Settings, days: list[date], reprocess: str, timeout: float = 2400) -> dict[str, str]:
    """A backfill of ``lake_gold_daily`` over ``days`` through the REST API; waits for it (at most ``timeout``
    seconds), returns {day: state}."""
    from spark_jobs.stack.airflow_api import GOLD_DAG, AirflowClient

    client = AirflowClient(settings)
    client.wait_for_dag(GOLD_DAG)
    client.unpause(GOLD_DAG)
    bf = client.backfill(GOLD_DAG, days[0], days[-1], reprocess=reprocess)
    return client.wait_backfill(GOLD_DAG, int(bf["id"]), days, timeout=timeout)


_CONNECT: list[Any] = []


def connect_sql(query: str) -> list[dict[str, Any]]:
    """A query through the stack's Spark Connect server (one session per pytest process, no JVM start per query)."""
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    if not _CONNECT:
        _CONNECT.append(connect_session(load_settings()))
    return [r.asDict() for r in _CONNECT[0].sql(query).collect()]


def close_connect_session() -> None:
    """pyspark marks the whole process as Spark Connect (``SPARK_CONNECT_MODE_ENABLED``) once a Connect session
    exists, and every later classic session of this pytest process then fails with CONNECT_URL_NOT_SET: stop the
    session and clear the mark (a module fixture calls this when the module is done)."""
    import os

    for session in _CONNECT:
        session.stop()
    _CONNECT.clear()
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
        os.environ.pop(name, None)
