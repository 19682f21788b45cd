"""``lake connectors status``: what the replication slot's ``wal_status`` / ``safe_wal_size`` make it say."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs import kafka_auth
from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack.connectors import format_bytes, slot_warnings

MB = 1024 * 1024


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_SLOT_MIN_SAFE_WAL_MB": "512"})


def test_a_reserved_slot_with_room_is_quiet(settings: Settings) -> None:
    assert slot_warnings(settings, "shop-postgres", {"exists": True, "wal_status": "reserved",
                                                     "safe_wal_size": 4000 * MB}) == []
    assert slot_warnings(settings, "shop-postgres", {"exists": True, "wal_status": "reserved",
                                                     "safe_wal_size": None}) == []  # max_slot_wal_keep_size=-1


def test_a_lost_slot_says_changes_were_missed_and_how_to_resnapshot(settings: Settings) -> None:
    [warning] = slot_warnings(settings, "shop-postgres", {"exists": True, "wal_status": "lost", "safe_wal_size": None})
    assert "lakestream_shop is LOST" in warning and "never reach silver" in warning
    assert f"{settings.connect_url}/connectors/shop-postgres/offsets" in warning
    assert "pg_drop_replication_slot('lakestream_shop')" in warning and "lake verify cdc" in warning


def test_an_unreserved_slot_warns_before_it_is_lost(settings: Settings) -> None:
    [warning] = slot_warnings(settings, "shop-postgres", {"exists": True, "wal_status": "unreserved",
                                                          "safe_wal_size": -5 * MB})
    assert "unreserved" in warning and "next checkpoint" in warning and "restart?includeTasks=true" in warning


def test_low_safe_wal_size_warns_with_the_threshold_setting(settings: Settings) -> None:
    [warning] = slot_warnings(settings, "shop-postgres", {"exists": True, "wal_status": "extended",
                                                          "safe_wal_size": 100 * MB})
    assert "only 100MB further behind" in warning and "LAKE_SLOT_MIN_SAFE_WAL_MB=512" in warning
    off = load_settings({"LAKE_STATE_DIR": str(settings.state_dir), "LAKE_SLOT_MIN_SAFE_WAL_MB": "0"})
    assert slot_warnings(off, "shop-postgres", {"exists": True, "wal_status": "extended",
                                                "safe_wal_size": 100 * MB}) == []


def test_a_missing_slot_or_unreachable_postgres_is_named(settings: Settings) -> None:
    assert "does not exist" in slot_warnings(settings, "c", {"exists": False, "wal_status": None})[0]
    assert f"{settings.pg_host}:{settings.pg_port}" in slot_warnings(settings, "c", {"error": "OperationalError: x"})[0]
    assert format_bytes(None) == "unlimited" and format_bytes(512 * MB) == "512MB"


@pytest.mark.parametrize("var", ["LAKE_KAFKA_EVENTS_RETENTION_MS", "LAKE_KAFKA_CDC_RETENTION_BYTES"])
def test_retention_settings_are_minus_one_or_positive(tmp_path: Path, var: str) -> None:
    assert load_settings({"LAKE_STATE_DIR": str(tmp_path), var: "-1"})
    with pytest.raises(ValueError, match=f"{var}=0 must be -1"):
        load_settings({"LAKE_STATE_DIR": str(tmp_path), var: "0"})


def test_cdc_topics_are_created_with_the_retention_settings(tmp_path: Path) -> None:
    from spark_jobs.stack.connectors import CONNECTORS_DIR, load_connector

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_CDC_RETENTION_MS": "86400000",
                              "LAKE_KAFKA_CDC_RETENTION_BYTES": "-1"})
    _name, config = load_connector(CONNECTORS_DIR / "shop-postgres.json", settings)
    assert config["topic.creation.default.retention.ms"] == "86400000"
    assert config["topic.creation.default.retention.bytes"] == "-1"


def test_cdc_topics_are_compacted_with_the_lag_of_the_settings(tmp_path: Path) -> None:
    from spark_jobs.kafka_topics import wanted_configs
    from spark_jobs.stack.connectors import CONNECTORS_DIR, load_connector

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS": "3600000"})
    _name, config = load_connector(CONNECTORS_DIR / "shop-postgres.json", settings)
    assert config["topic.creation.default.cleanup.policy"] == "compact"
    assert config["topic.creation.default.min.compaction.lag.ms"] == "3600000"
    assert config["tombstones.on.delete"] == "true"  # compaction ends a deleted key with its tombstone
    wanted = wanted_configs(settings)
    assert wanted["shop.public.orders"]["cleanup.policy"] == "compact"
    assert wanted["shop.public.orders"]["min.compaction.lag.ms"] == "3600000"
    assert wanted["events.clickstream"]["cleanup.policy"] == "delete"  # events keep a bounded retention


def test_an_unassigned_or_paused_task_is_named_with_what_to_do(settings: Settings) -> None:
    from spark_jobs.stack.connectors import state_warnings

    running = {"connector": {"state": "RUNNING"}, "tasks": [{"id": 0, "state": "RUNNING"}]}
    assert state_warnings(settings, "shop-postgres", running) == []
    unassigned = {"connector": {"state": "RUNNING"},
                  "tasks": [{"id": 0, "state": "UNASSIGNED", "worker_id": "127.0.0.1:18083"}]}
    [warning] = state_warnings(settings, "shop-postgres", unassigned)
    assert warning.startswith("shop-postgres task 0 is UNASSIGNED (worker 127.0.0.1:18083)")
    assert f"{settings.connect_url}/connectors/shop-postgres/restart?includeTasks=true" in warning
    paused = {"connector": {"state": "PAUSED"}, "tasks": [{"id": 0, "state": "PAUSED"}]}
    assert [w.split(" is ")[0] for w in state_warnings(settings, "shop-postgres", paused)] == [
        "shop-postgres connector", "shop-postgres task 0"]
    failed = {"connector": {"state": "RUNNING"},
              "tasks": [{"id": 0, "state": "FAILED", "trace": "org.x.ConnectException: slot gone\n\tat y"}]}
    [warning] = state_warnings(settings, "shop-postgres", failed)
    assert "task 0 FAILED: org.x.ConnectException: slot gone;" in warning
    assert state_warnings(settings, "shop-postgres", {"connector": {"state": "RUNNING"}, "tasks": []}) == [
        f"shop-postgres is RUNNING with no task: nothing is captured; {kafka_auth.connect_curl(settings)} -X POST "
        f"'{settings.connect_url}/connectors/shop-postgres/restart?includeTasks=true'"]
