"""The smoke job end to end: Spark -> Delta on MinIO -> shared catalog -> other processes."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack.services import airflow_env, base_env
from tests.integration.lakehelpers import beeline, lake_sql, run_lake


def _rows(stack: Settings, run_id: str) -> list[dict[str, Any]]:
    return lake_sql(f"SELECT n, square FROM ops.smoke WHERE run_id = '{run_id}' ORDER BY n")


def test_smoke_job_writes_delta_table_seen_by_other_processes(stack: Settings) -> None:
    run_id = f"it_{uuid.uuid4().hex[:8]}"
    out = run_lake("job", "smoke", "--run-id", run_id, "--rows", "7").stdout
    assert f"wrote and read back 7 rows of ops.smoke for run_id={run_id}" in out
    assert f"at s3a://{stack.s3_bucket}/warehouse/ops/smoke" in out
    # A second, independent Spark process reads it through the shared metastore.
    assert _rows(stack, run_id) == [{"n": n, "square": n * n} for n in range(1, 8)]
    # Re-running the same run id replaces its rows: idempotent.
    run_lake("job", "smoke", "--run-id", run_id, "--rows", "7")
    assert len(_rows(stack, run_id)) == 7
    # The Thrift server (JDBC clients) sees the same table.
    jdbc = beeline(stack, f"SELECT count(*) AS c FROM ops.smoke WHERE run_id = '{run_id}'")
    assert jdbc.returncode == 0, jdbc.stderr[-2000:]
    assert jdbc.stdout.split()[-2:] == ["c", "7"], jdbc.stdout


def test_lake_sql_reports_bad_sql_clearly(stack: Settings) -> None:
    proc = run_lake("sql", "-e", "SELECT * FROM ops.no_such_table", check=False)
    assert proc.returncode == 1
    assert "error in statement: SELECT * FROM ops.no_such_table" in proc.stderr
    assert "TABLE_OR_VIEW_NOT_FOUND" in proc.stderr


def _airflow_env(stack: Settings) -> dict[str, str]:
    return {**os.environ, **base_env(stack), **airflow_env(stack)}


@pytest.mark.extended  # the same DAG is triggered through the REST API below
def test_lake_smoke_dag_passes_under_airflow_dags_test(stack: Settings) -> None:
    proc = subprocess.run(["airflow", "dags", "test", "lake_smoke"], env=_airflow_env(stack), cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "wrote and read back 10 rows of ops.smoke" in out, out[-4000:]
    assert "state=success" in out or "success" in out.lower()


def _api(stack: Settings, method: str, path: str, token: str | None, body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(f"{stack.airflow_url}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


def test_lake_smoke_dag_triggered_through_the_rest_api(stack: Settings) -> None:
    token = _api(stack, "POST", "/auth/token", None,
                 {"username": stack.airflow_admin_user, "password": stack.airflow_admin_password})["access_token"]
    deadline = time.monotonic() + 180
    while True:  # the dag-processor may not have parsed the file yet
        try:
            _api(stack, "PATCH", "/api/v2/dags/lake_smoke", token, {"is_paused": False})
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(3)
    run = _api(stack, "POST", "/api/v2/dags/lake_smoke/dagRuns", token, {"logical_date": None, "conf": {"rows": 3}})
    run_id = run["dag_run_id"]
    deadline = time.monotonic() + 900
    state = run["state"]
    while state not in {"success", "failed"} and time.monotonic() < deadline:
        time.sleep(5)
        state = _api(stack, "GET", f"/api/v2/dags/lake_smoke/dagRuns/{run_id}", token)["state"]
    if state != "success":
        from spark_jobs.stack.airflow_api import AirflowClient

        log = AirflowClient(stack).task_log("lake_smoke", run_id, "write_and_read_back", try_number=1)
        pytest.fail(f"dag run {run_id} ended {state}; first try's log (all under {stack.log_dir}/airflow-tasks):\n"
                    + "\n".join(log.splitlines()[:60]))
    assert _rows(stack, run_id) == [{"n": n, "square": n * n} for n in range(1, 4)]


def test_default_credentials_are_refused(stack: Settings) -> None:
    import urllib.error

    for password in ("admin", "airflow", ""):
        try:
            _api(stack, "POST", "/auth/token", None, {"username": stack.airflow_admin_user, "password": password})
        except urllib.error.HTTPError as exc:
            assert exc.code in {400, 401, 403, 422}
        else:
            raise AssertionError(f"Airflow accepted the password {password!r}")
