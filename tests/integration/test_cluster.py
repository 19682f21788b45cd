"""On the stack's own Spark standalone cluster (`make test-cluster`): the apps run their tasks on its executors,
an executor SIGKILLed during a CDC load loses nothing and writes nothing twice, and the master accepts only the
stack's applications (an application without the stack's Spark secret, run as another OS user, is refused).

Skipped unless the stack runs a cluster (LAKE_SPARK_CLUSTER_WORKERS > 0); `make test-cluster` starts one and
runs this module with the CDC and events tests, unchanged.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spark_jobs.bench.proc_cpu import cluster_executors
from spark_jobs.settings import Settings, load_settings
from tests.integration.lakehelpers import (
    SALES_SQL,
    gold_backfill,
    lake_sql,
    load_in_background,
    process_cpu_seconds,
    shop_cursor,
    start_streaming,
    wait_and_verify_cdc,
    wait_until,
    write_history,
)

pytestmark = pytest.mark.skipif(load_settings().spark_cluster_workers == 0,
                                reason="no Spark cluster in this stack (make test-cluster runs one)")


@pytest.fixture(scope="module")
def cluster(stack: Settings) -> Iterator[Settings]:
    start_streaming()
    yield stack


def _master_state(settings: Settings) -> dict:  # type: ignore[type-arg]
    from spark_jobs.stack.health import http_json

    state: dict = http_json(f"http://{settings.host}:{settings.spark_cluster_webui_port}/json/")  # type: ignore[type-arg]
    return state


def _app(settings: Settings, name: str, timeout: float = 300) -> dict[str, Any]:
    def running() -> dict[str, Any] | None:
        apps = {a["name"]: a for a in _master_state(settings).get("activeapps", [])}
        return apps[name] if name in apps and int(apps[name].get("cores", 0)) > 0 else None

    return wait_until(running, f"{name} to run on the cluster", timeout, every=2,
                      detail=lambda: f"active apps {sorted(a['name'] for a in _master_state(settings).get('activeapps', []))}")


def test_apps_run_their_tasks_on_the_cluster(cluster: Settings) -> None:
    state = _master_state(cluster)
    assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == cluster.spark_cluster_workers, state
    for name in ("lake-stream", "lake-spark-connect"):
        app = _app(cluster, name)
        assert cluster_executors(app["id"]), f"{name} ({app['id']}) has no executor process"
    wait_and_verify_cdc()


def test_executor_sigkilled_during_load_loses_nothing(cluster: Settings) -> None:
    app = _app(cluster, "lake-stream")
    load = load_in_background(cluster, seed=91, seconds=40)
    time.sleep(random.Random(91).uniform(8, 15))
    pids = cluster_executors(app["id"])
    assert pids, f"no executor of {app['id']} to kill"
    os.kill(pids[0], signal.SIGKILL)
    load.join()
    # The master starts a replacement executor; the lost tasks are re-run (the batch's cached records are
    # recomputed from Kafka), and every write of the batch is idempotent or position-guarded.
    wait_and_verify_cdc()
    assert cluster_executors(_app(cluster, "lake-stream")["id"]), "no executor after the kill"


def test_gold_backfill_runs_on_the_cluster_and_equals_postgres(cluster: Settings) -> None:
    """The Airflow gold tasks, unchanged, on the cluster: their Spark Connect server's executors do the work,
    and the days' ``gold.fct_daily_sales`` equal PostgreSQL's figures."""
    connect = _app(cluster, "lake-spark-connect")
    executors = cluster_executors(connect["id"])
    assert executors, f"lake-spark-connect ({connect['id']}) has no executor process"
    write_history(2, orders_per_day=60, events_per_day=300, seeds=range(301, 330))
    wait_and_verify_cdc()
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=2), today - timedelta(days=1)]
    before = process_cpu_seconds(executors)
    states = gold_backfill(cluster, days, "completed")
    used = process_cpu_seconds(executors) - before
    assert set(states.values()) == {"success"}, states
    assert used > 1.0, f"the Spark Connect server's executors used {used:.2f} CPU s during the gold backfill"
    print(f"  gold backfill of {len(days)} days: {used:.1f} CPU s on the cluster's executors of lake-spark-connect")

    start = datetime(days[0].year, days[0].month, days[0].day, tzinfo=UTC)
    with shop_cursor(cluster) as cur:
        cur.execute(SALES_SQL, (start, start + timedelta(days=len(days))))
        expected = {(str(r[0]), r[1].strip()): (int(r[2]), r[4]) for r in cur.fetchall()}
    rows = lake_sql(f"SELECT order_date, currency, orders, revenue FROM gold.fct_daily_sales "
                    f"WHERE order_date >= DATE'{days[0]}' AND order_date <= DATE'{days[-1]}'", timeout=900)
    got = {(str(r["order_date"]), r["currency"].strip()): (int(r["orders"]), r["revenue"]) for r in rows}
    assert expected and set(got) == set(expected), (sorted(got), sorted(expected))
    for key, (orders, revenue) in expected.items():
        assert got[key][0] == orders and str(got[key][1]) == str(revenue), (key, got[key], (orders, revenue))


#: An application as a local user without the stack's secret would start it: its own (empty) Spark config dir, the
#: cluster's master URL, and either no authentication or a guessed secret. It prints REGISTERED and exits 0 only
#: if the master gave it executors and it ran a job on them.
_ATTACKER_APP = """
import sys
from pyspark.sql import SparkSession
master, name, secret = sys.argv[1], sys.argv[2], sys.argv[3]
builder = (SparkSession.builder.master(master).appName(name).config("spark.ui.enabled", "false")
           .config("spark.cores.max", "1").config("spark.executor.memory", "512m"))
if secret:
    builder = builder.config("spark.authenticate", "true").config("spark.authenticate.secret", secret)
spark = builder.getOrCreate()
spark.sparkContext.setLocalProperty("spark.job.description", "attacker")
print("REGISTERED", spark.range(10).count(), flush=True)
"""


def _run_as_nobody(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    home = tempfile.mkdtemp(prefix="lake-attacker-")
    os.chmod(home, 0o777)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "SPARK_CONF_DIR": home,
           "PYSPARK_PYTHON": sys.executable, "JAVA_HOME": os.environ.get("JAVA_HOME", "")}
    runner = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    try:
        return subprocess.run([*runner, "env", "-i", *[f"{k}={v}" for k, v in env.items() if v], *args],
                              capture_output=True, text=True, timeout=timeout, cwd=home)
    except subprocess.TimeoutExpired as exc:  # still waiting for executors: refused as well, the master decides
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return subprocess.CompletedProcess(args, -9, out, "timed out")


def test_the_master_refuses_an_application_without_the_stack_secret(cluster: Settings) -> None:
    """Issue 32, item 3: the standalone master accepts only the stack's applications. A raw RPC without the
    authentication handshake is refused on the master's and the workers' ports, and a real PySpark application
    run as the OS user ``nobody`` (no access to the stack's config) neither with authentication off nor with a
    guessed secret registers, gets an executor or runs a task."""
    from tests.integration.test_no_anonymous_port import _answers_unauthenticated_rpc

    ports = [cluster.spark_cluster_master_port,
             *[int(w["port"]) for w in _master_state(cluster)["workers"] if w["state"] == "ALIVE"]]
    assert len(ports) == 1 + cluster.spark_cluster_workers, ports
    for port in ports:
        assert not _answers_unauthenticated_rpc(cluster.host, port), (
            f"{cluster.host}:{port} answered a Spark RPC sent without the spark.authenticate handshake")

    master = f"spark://{cluster.host}:{cluster.spark_cluster_master_port}"
    names = {"none": f"attacker-{uuid.uuid4().hex[:8]}", "guessed": f"attacker-{uuid.uuid4().hex[:8]}"}
    procs = {kind: _run_as_nobody([sys.executable, "-c", _ATTACKER_APP, master, name,
                                   "" if kind == "none" else uuid.uuid4().hex], timeout=150)
             for kind, name in names.items()}
    for kind, proc in procs.items():
        assert "REGISTERED" not in proc.stdout and proc.returncode != 0, (kind, proc.stdout[-2000:],
                                                                          proc.stderr[-2000:])
    state = _master_state(cluster)
    seen = {a["name"] for key in ("activeapps", "completedapps") for a in state.get(key, [])}
    assert not seen & set(names.values()), f"the master registered {seen & set(names.values())}"
    assert {"lake-stream", "lake-spark-connect"} <= {a["name"] for a in state.get("activeapps", [])}, seen
