"""The stack's services are real, healthy, scoped and idempotent to start."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from spark_jobs import kafka_auth
from spark_jobs.settings import REPO_ROOT, SECRET_NAMES, Settings
from spark_jobs.stack import health
from tests.integration.lakehelpers import run_lake, shop_cursor

SERVICES = {"postgres", "kafka", "connect", "minio", "thrift", "spark-connect", "dq-docs", "airflow"}


def test_status_json_reports_every_service_healthy_without_secrets(stack: Settings) -> None:
    proc = run_lake("stack", "status", "--json")
    report = json.loads(proc.stdout)
    assert set(report["services"]) == SERVICES
    for name, svc in report["services"].items():
        assert set(svc) == {"healthy", "pid", "endpoint", "log", "programs"}, name
        assert svc["healthy"] is True, name
        assert isinstance(svc["pid"], int) and svc["pid"] > 0, name
        assert Path(svc["log"]).exists(), name
        for prog_name, prog in svc["programs"].items():
            assert prog["state"] in {"RUNNING", "STARTING"} and isinstance(prog["uptime_s"], int), prog_name
            assert isinstance(prog["restarts"], int), prog_name
    assert report["ok"] is True and proc.returncode == 0
    assert report["stream"]["state"] in {"RUNNING", "STARTING", "STOPPED", "EXITED"}, report["stream"]
    assert report["disk"]["free_mb"] > 0
    for secret in SECRET_NAMES:
        assert getattr(stack, secret) not in proc.stdout


def test_second_up_is_a_noop(stack: Settings) -> None:
    before = json.loads(run_lake("stack", "status", "--json").stdout)["services"]
    proc = run_lake("stack", "up")
    assert proc.stdout.count("already running") == len(SERVICES), proc.stdout
    after = json.loads(run_lake("stack", "status", "--json").stdout)["services"]
    assert {k: v["pid"] for k, v in before.items()} == {k: v["pid"] for k, v in after.items()}


def test_kafka_round_trip_and_connect_has_debezium(stack: Settings) -> None:
    assert health.kafka(stack) == (True, "produce/consume round trip ok")
    plugins = health.http_json(f"{stack.connect_url}/connector-plugins",
                               headers=kafka_auth.connect_rest_headers(stack))
    assert health.DEBEZIUM_PG_CLASS in {p["class"] for p in plugins}


def test_postgres_has_logical_wal_and_a_non_superuser_cdc_role(stack: Settings) -> None:

    with shop_cursor(stack) as cur:
        cur.execute("SHOW wal_level")
        assert cur.fetchone() == ("logical",)
        cur.execute("SELECT rolsuper, rolreplication, rolcanlogin FROM pg_roles WHERE rolname = %s",
                    (stack.cdc_user,))
        assert cur.fetchone() == (False, True, True)
        cur.execute("SELECT datname FROM pg_database WHERE datname IN ('shop', 'airflow', 'metastore')")
        assert {r[0] for r in cur.fetchall()} == {"shop", "airflow", "metastore"}


def test_minio_lake_keys_are_scoped_to_the_bucket(stack: Settings) -> None:
    from botocore.exceptions import ClientError

    s3 = health.s3_client(stack)
    key = f"tests/{uuid.uuid4().hex}"
    s3.put_object(Bucket=stack.s3_bucket, Key=key, Body=b"x")
    assert s3.get_object(Bucket=stack.s3_bucket, Key=key)["Body"].read() == b"x"
    s3.delete_object(Bucket=stack.s3_bucket, Key=key)
    with pytest.raises(ClientError, match="AccessDenied"):
        s3.create_bucket(Bucket=f"other-{uuid.uuid4().hex[:8]}")
    root = health.s3_client(stack, stack.minio_root_user, stack.minio_root_password)
    assert stack.s3_bucket in {b["Name"] for b in root.list_buckets()["Buckets"]}
    assert stack.minio_root_user != stack.s3_access_key


def test_no_metastore_service_listens(stack: Settings) -> None:
    assert not stack.metastore_uri  # every Spark process reaches PostgreSQL's metastore database itself
    assert not health.port_open(stack.host, 19083)


def test_no_secret_is_committed(stack: Settings) -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    text = "\n".join((REPO_ROOT / f).read_text(errors="replace") for f in tracked.stdout.split()
                     if (REPO_ROOT / f).is_file())
    for secret in SECRET_NAMES:
        assert getattr(stack, secret) not in text, secret
    # No well-known default credential in anything that configures a service.
    config_files = [f for f in tracked.stdout.split() if f.startswith(("infra/", "connectors/", "spark_jobs/", "dags/"))
                    or f == ".env.example"]
    for name in config_files:
        body = (REPO_ROOT / name).read_text(errors="replace")
        # Case-sensitive: the credential literal, not the minio-py class MinioAdmin.
        assert not re.search(r"(?<![A-Za-z])minioadmin(?![A-Za-z])", body), name


def test_port_taken_by_another_program_is_a_clear_error(stack: Settings, tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind((stack.host, 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        env = {"LAKE_STATE_DIR": str(tmp_path / "st"), "LAKE_HOST": stack.host, "LAKE_PG_PORT": str(port)}
        try:
            proc = run_lake("stack", "up", "postgres", env=env, check=False, timeout=120)
        finally:
            run_lake("stack", "down", env=env, check=False, timeout=120)
    assert proc.returncode == 2
    assert f"port {port} on {stack.host} is taken by pid" in proc.stderr
    assert "set LAKE_PG_PORT to a free port" in proc.stderr
