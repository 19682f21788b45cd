"""On the stack's own Spark standalone cluster (`make test-cluster`): the apps run their tasks on its executors,
and an executor SIGKILLed during a CDC load loses nothing and writes nothing twice.

Skipped unless the stack runs a cluster (LAKE_SPARK_CLUSTER_WORKERS > 0); `make test-cluster` starts one and
runs this module with the CDC and events tests, unchanged.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_jobs.loadgen.cdc.runner import run as run_loadgen
from spark_jobs.settings import Settings, load_settings
from tests.integration.conftest import run_lake, wait_and_verify_cdc

pytestmark = pytest.mark.skipif(load_settings().spark_cluster_workers == 0,
                                reason="no Spark cluster in this stack (make test-cluster runs one)")


@pytest.fixture(scope="module")
def cluster(stack: Settings) -> Iterator[Settings]:
    run_lake("connectors", "apply")
    run_lake("stream", "start")
    yield stack


def _master_state(settings: Settings) -> dict:  # type: ignore[type-arg]
    from spark_jobs.stack.health import http_json

    state: dict = http_json(f"http://{settings.host}:{settings.spark_cluster_webui_port}/json/")  # type: ignore[type-arg]
    return state


def _executors(app_id: str) -> list[int]:
    """Pids of the executor JVMs the workers started for ``app_id``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and app_id.encode() in argv:
            pids.append(int(proc.name))
    return pids


def _app(settings: Settings, name: str, timeout: float = 300) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while True:
        apps = {a["name"]: a for a in _master_state(settings).get("activeapps", [])}
        if name in apps and int(apps[name].get("cores", 0)) > 0:
            app: dict = apps[name]  # type: ignore[type-arg]
            return app
        assert time.monotonic() < deadline, f"{name} not running on the cluster: {sorted(apps)}"
        time.sleep(2)


def test_apps_run_their_tasks_on_the_cluster(cluster: Settings) -> None:
    state = _master_state(cluster)
    assert len([w for w in state["workers"] if w["state"] == "ALIVE"]) == cluster.spark_cluster_workers, state
    for name in ("lake-stream", "lake-spark-connect"):
        app = _app(cluster, name)
        assert _executors(app["id"]), f"{name} ({app['id']}) has no executor process"
    wait_and_verify_cdc()


def test_executor_sigkilled_during_load_loses_nothing(cluster: Settings) -> None:
    app = _app(cluster, "lake-stream")
    load = threading.Thread(target=run_loadgen, kwargs={"settings": cluster, "rate": 300, "duration": 40,
                                                        "seed": 91}, daemon=True)
    load.start()
    time.sleep(random.Random(91).uniform(8, 15))
    pids = _executors(app["id"])
    assert pids, f"no executor of {app['id']} to kill"
    os.kill(pids[0], signal.SIGKILL)
    load.join()
    # The master starts a replacement executor; the lost tasks are re-run (the batch's cached records are
    # recomputed from Kafka), and every write of the batch is idempotent or position-guarded.
    wait_and_verify_cdc()
    assert _executors(_app(cluster, "lake-stream")["id"]), "no executor after the kill"
