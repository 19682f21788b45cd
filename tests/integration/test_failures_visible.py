"""Failures are visible on the real stack (issue 20, item 7) and topics keep what the settings say (item 8).

Needs only PostgreSQL, MinIO, Kafka and Connect (``lake stack up connect``), so it also runs against a
second stack on another address (``LAKE_HOST=127.0.0.2``, every ``LAKE_*_PORT`` shifted, its own
``LAKE_STATE_DIR``).

- A Connect worker SIGKILLed after it ran past its start time comes back by itself, and ``lake stack status``
  counts the restart and shows the kill as its last exit.
- A connector whose task FAILED makes ``connect`` DOWN in ``lake stack status`` (exit 1), naming the connector,
  the task and the trace's first line.
- ``lake connectors status`` shows the replication slot's ``wal_status`` and ``safe_wal_size`` and warns
  below ``LAKE_SLOT_MIN_SAFE_WAL_MB``.
- The events topic and the CDC topics carry ``retention.ms`` / ``retention.bytes`` from the settings.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import connectors, health, supervisor
from tests.integration.lakehelpers import run_lake, shop_cursor, wait_until

BOGUS = "lake-test-failed-task"
BOGUS_SLOT = "lake_test_failed_task"


@pytest.fixture(scope="module")
def base() -> Iterator[Settings]:
    run_lake("stack", "up", "connect", timeout=900)
    run_lake("connectors", "apply", timeout=600)
    yield load_settings()


def _status() -> tuple[int, dict[str, object], str]:
    as_json = run_lake("stack", "status", "--json", check=False)
    text = run_lake("stack", "status", check=False)
    return as_json.returncode, json.loads(as_json.stdout), text.stdout


def test_a_killed_connect_worker_is_restarted_and_counted(base: Settings) -> None:
    info = supervisor.program_info(base, "connect") or {}
    assert info.get("statename") == "RUNNING", info
    before = supervisor.program_history(base).get("connect", supervisor.ProgramHistory()).restarts
    os.killpg(os.getpgid(int(info["pid"])), signal.SIGKILL)
    deadline = time.monotonic() + 180
    while True:  # supervisord alone must bring it back: a kill of a worker that had started is not a crash loop
        now = supervisor.program_info(base, "connect") or {}
        assert now.get("statename") not in {"FATAL", "BACKOFF", "STOPPED"}, now
        if now.get("statename") == "RUNNING" and now.get("pid") != info["pid"]:
            break
        assert time.monotonic() < deadline, f"connect not back after SIGKILL: {now}"
        time.sleep(1)
    _code, report, text = _status()
    prog = report["services"]["connect"]["programs"]["connect"]  # type: ignore[index]
    assert prog["restarts"] == before + 1 and prog["last_exit"] == "terminated by SIGKILL; not expected", prog
    assert any(line.split()[:1] == ["connect"] and line.endswith("terminated by SIGKILL; not expected")
               for line in text.splitlines()), text


def _drop_slot(settings: Settings) -> None:
    with shop_cursor(settings) as cur:
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s AND NOT active", (BOGUS_SLOT,))


def _tasks(settings: Settings) -> list[dict[str, object]]:
    try:
        return list(connectors.connector_status(settings, BOGUS).get("tasks", []))
    except connectors.ConnectorError:  # 404 until the worker has assigned the new connector
        return []


def test_a_failed_connector_task_makes_connect_down(base: Settings) -> None:
    secrets = base.state_dir / "secrets" / "postgres.properties"
    config = {"connector.class": health.DEBEZIUM_PG_CLASS, "tasks.max": "1",
              "database.hostname": base.pg_host, "database.port": str(base.pg_port),
              "database.dbname": base.pg_shop_db,
              "database.user": f"${{file:{secrets}:cdc.user}}", "database.password": f"${{file:{secrets}:cdc.password}}",
              "topic.prefix": "lake_test_failed", "plugin.name": "pgoutput", "slot.name": BOGUS_SLOT,
              # The task fails at start: no such publication and Debezium may not create one.
              "publication.name": "lake_test_no_such_publication", "publication.autocreate.mode": "disabled",
              "snapshot.mode": "no_data"}
    connectors._request(base, "PUT", f"/connectors/{BOGUS}/config", config)
    try:
        wait_until(lambda: any(t.get("state") == "FAILED" for t in _tasks(base)),
                   f"a FAILED task of {BOGUS}", 120, every=2)
        code, report, text = _status()
        assert code == 1 and report["ok"] is False
        assert report["services"]["connect"]["healthy"] is False  # type: ignore[index]
        [line] = [ln for ln in text.splitlines() if ln.startswith("connect ")]
        assert f"{BOGUS} task 0 FAILED: org.apache.kafka.connect.errors.ConnectException: Publication" in line, line
        assert f"/connectors/{BOGUS}/restart?includeTasks=true&onlyFailed=true" in line, line
    finally:
        connectors._request(base, "DELETE", f"/connectors/{BOGUS}")
        _drop_slot(base)
    wait_until(lambda: health.connect_with_tasks(base)[0], "Connect healthy again", 60)


def test_connectors_status_shows_the_slot_and_warns_when_it_can_fall_behind_little(base: Settings) -> None:
    proc = run_lake("connectors", "status", "--json")
    [row] = [r for r in json.loads(proc.stdout) if r["name"] == "shop-postgres"]
    assert row["wal_status"] in {"reserved", "extended"} and isinstance(row["safe_wal_size"], int), row
    assert row["warnings"] == [] and row["slot_lost"] is False, row
    # max_slot_wal_keep_size is 4GB: a threshold above it must warn, naming the setting; the exit stays 0.
    proc = run_lake("connectors", "status", env={"LAKE_SLOT_MIN_SAFE_WAL_MB": "8192"})
    assert "wal_status=" in proc.stdout and "safe_wal_size=" in proc.stdout, proc.stdout
    assert "WARNING: replication slot lakestream_shop can fall only" in proc.stdout, proc.stdout
    assert "LAKE_SLOT_MIN_SAFE_WAL_MB=8192" in proc.stdout, proc.stdout


def test_lake_topics_have_the_retention_of_the_settings(base: Settings) -> None:
    """events.clickstream exists after `up` with LAKE_KAFKA_EVENTS_RETENTION_*; the CDC topics Debezium made
    carry LAKE_KAFKA_CDC_RETENTION_* and are compacted; none keeps the broker's defaults."""
    from spark_jobs.kafka_topics import topic_configs, wanted_configs

    wanted = wanted_configs(base)
    current = topic_configs(base, wanted)
    assert set(current) == set(wanted), (current, wanted)  # the snapshot created every CDC topic
    # CDC topics compacted with LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS, the events topic deleted past its retention.
    assert {t: {k: current[t].get(k) for k in cfg} for t, cfg in wanted.items()} == wanted
