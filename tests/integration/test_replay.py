"""The Kappa rebuild on the real stack: `lake replay` from the bronze archive after Kafka lost the beginning of a
topic, the switch, a rollback that restores exactly, and a compacted CDC topic that really compacts while bronze
keeps every change (docs/operations.md, Replay (Kappa)).

The tests share the stack's tables and run in file order: the rollback test rolls back the switch the first test
made. Each starts the stream again in a ``finally`` and drains it, so the tests after these find it running.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs import kafka_auth
from spark_jobs.contracts.clickstream import TOPIC as EVENTS_TOPIC
from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.loadgen.cdc.runner import run as run_loadgen
from spark_jobs.settings import Settings
from spark_jobs.stack import supervisor
from tests.integration.lakehelpers import (
    lake_sql,
    run_lake,
    running_info,
    shop_cursor,
    start_streaming,
    wait_and_verify_cdc,
    wait_stream,
    wait_until,
)

#: `make test-full` only (tests/README.md): 13 min for the first test alone on our 2 cores. The core suite replays
#: through the Airflow UI (test_airflow_ui, a dry run); the switch and the rollback are unit-tested on local Delta
#: tables (tests/unit/test_replay.py) with the same code.
pytestmark = pytest.mark.extended

HOT = ("hot.sales_per_minute", "hot.active_users_5m", "hot.funnel_15m")
SWITCHED = (*[c.silver for c in CDC_TABLES.values()], "silver.events", *HOT)
#: What must be equal before and after a replay, per table: the bookkeeping the stream sets per batch is left out,
#: and so are an event's Kafka coordinates (of two copies of an event in one micro-batch the stream keeps either).
FINGERPRINT = {
    # (sums of 64-bit hashes as decimals: a bigint sum overflows under ANSI)
    "silver.events": "count(*) AS n, count(DISTINCT event_id) AS ids, sum(CAST(xxhash64(event_id, event_type, "
                     "user_id, event_time, properties, revenue, _late) AS DECIMAL(38,0))) AS h",
    **{t: "count(*) AS n, sum(CAST(xxhash64(window_start, window_end, late_events, "
          + ("orders, revenue" if t == "hot.sales_per_minute" else
             "active_users, user_ids" if t == "hot.active_users_5m" else
             "page_views, add_to_carts, checkouts, purchases") + ") AS DECIMAL(38,0))) AS h" for t in HOT},
}


def _fingerprints() -> dict[str, dict[str, Any]]:
    return {t: lake_sql(f"SELECT {select} FROM {t}")[-1] for t, select in FINGERPRINT.items()}


def _admin(settings: Settings) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(kafka_auth.client_conf(settings, "tools"))


def _watermarks(settings: Settings, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": "_lake_test_replay",
                         "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
    finally:
        consumer.close()


def _delete_beginning(settings: Settings, topic: str) -> None:
    """Kafka's DeleteRecords up to each partition's end: the topic no longer holds any record bronze archived."""
    from confluent_kafka import TopicPartition

    ends = _watermarks(settings, topic)
    admin = _admin(settings)  # held: a collected AdminClient never completes its futures
    futures = admin.delete_records([TopicPartition(topic, p, high) for p, (_low, high) in ends.items()])
    for future in futures.values():
        future.result(60)
    after = _watermarks(settings, topic)
    assert all(low == ends[p][1] for p, (low, _high) in after.items()), (ends, after)


@pytest.fixture(scope="module")
def loaded(stack: Settings) -> Iterator[Settings]:
    """A CDC and an events load through the running stream, fully applied."""
    start_streaming()
    run_loadgen(stack, rate=200, duration=6, seed=515)
    run_lake("loadgen", "events", "--rate", "300", "--duration", "4", "--seed", "5151", "--users", "80",
             "--dup", "0.05", "--bad", "0.02", "--late", "0.05")
    wait_and_verify_cdc()
    yield stack


def test_replay_all_after_kafka_lost_the_beginning_equals_postgres_and_the_stream(loaded: Settings) -> None:
    before = _fingerprints()
    assert before["silver.events"]["n"] > 0
    # Kafka keeps none of the events it delivered, and the CDC topics only the newest record per key: the replay
    # can only come from bronze.
    _delete_beginning(loaded, EVENTS_TOPIC)
    stream_pid = running_info(loaded, "stream")["pid"]
    proc = run_lake("replay", "--all", "--yes", timeout=5400)
    assert "replay " in proc.stdout and ": switched" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    # One writer: the stream was stopped for the switch and started again afterwards (a new driver).
    assert "stopping the streaming app" in proc.stderr and "restarting the streaming app" in proc.stderr
    after = supervisor.program_info(loaded, "stream") or {}
    assert after.get("statename") in ("STARTING", "RUNNING") and after.get("pid") != stream_pid, after
    wait_and_verify_cdc()  # every silver CDC table equals PostgreSQL (after the restarted stream caught up)
    assert _fingerprints() == before, "silver.events and the hot tables differ from what the stream had built"
    ledger = run_lake("reconcile", "events", "--all-windows", check=False, timeout=900)
    assert ledger.returncode == 0, ledger.stdout[-3000:]
    for table in SWITCHED:
        rows = lake_sql(f"DESCRIBE HISTORY {table}")
        switch = [r for r in rows if (r.get("userMetadata") or "").startswith("lake replay ")]
        assert switch and switch[0]["operation"] == "WRITE", (table, rows[:3])
    recorded = {r["table_name"] for r in lake_sql("SELECT table_name FROM ops.replays WHERE action = 'switch'")}
    assert set(SWITCHED) <= recorded


def test_rollback_restores_the_version_before_the_switch_exactly(loaded: Settings) -> None:
    tables = ("silver.orders", "silver.events", "hot.funnel_15m")
    switched = {r["table_name"]: r for r in lake_sql(
        "SELECT table_name, version_before, version_after FROM (SELECT *, row_number() OVER (PARTITION BY "
        "table_name ORDER BY at DESC) AS n FROM ops.replays WHERE action = 'switch') WHERE n = 1")}
    run_lake("stream", "stop")  # nothing else writes meanwhile: the restore must give back that version exactly
    try:
        proc = run_lake("replay", "rollback", *tables, timeout=1800)
        for table in tables:
            assert f"{table}: restored version {switched[table]['version_before']}" in proc.stdout, proc.stdout
            v = switched[table]["version_before"]
            differs = lake_sql(f"SELECT (SELECT count(*) FROM (SELECT * FROM {table} EXCEPT ALL "
                               f"SELECT * FROM {table} VERSION AS OF {v})) + (SELECT count(*) FROM (SELECT * FROM "
                               f"{table} VERSION AS OF {v} EXCEPT ALL SELECT * FROM {table})) AS n")
            assert differs[-1]["n"] == 0, (table, v, differs)
        again = run_lake("replay", "rollback", "silver.orders", check=False)
        assert again.returncode != 0 and "no switch to roll back" in again.stderr, again.stderr
    finally:
        run_lake("stream", "start")
        wait_stream(900)


def _kafka_records_of_key(settings: Settings, topic: str, key: bytes) -> int:
    """Records with ``key`` Kafka still holds in ``topic`` (read from the start of every partition)."""
    from confluent_kafka import Consumer, TopicPartition

    ends = _watermarks(settings, topic)
    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": "_lake_test_replay",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    found, done = 0, set[int]()
    try:
        consumer.assign([TopicPartition(topic, p, low) for p, (low, high) in ends.items() if high > low])
        todo = {p for p, (low, high) in ends.items() if high > low}
        deadline = time.monotonic() + 60
        while done != todo and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            part, offset = int(msg.partition() or 0), int(msg.offset() or 0)
            if msg.error():
                done.add(part)  # end of the partition (enable.partition.eof)
                continue
            if msg.key() == key:
                found += 1
            if offset + 1 >= ends[part][1]:
                done.add(part)
    finally:
        consumer.close()
    return found


def _alter(settings: Settings, topic: str, configs: dict[str, str | None]) -> None:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public API the stubs do not re-export
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    entries = [ConfigEntry(k, v or "", incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin = _admin(settings)  # held: a collected AdminClient never completes its futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)


def _archived_versions(key: bytes) -> int:
    return int(lake_sql(f"SELECT count(*) AS n FROM bronze.shop__public__products WHERE CAST(key AS STRING) = "
                        f"'{key.decode()}'")[-1]["n"])


def test_a_compacted_cdc_topic_compacts_while_bronze_and_silver_stay_complete(loaded: Settings) -> None:
    topic, updates = "shop.public.products", 8
    with shop_cursor(loaded) as cur:  # a product the shop has (ids depend on the loads before this test)
        cur.execute("SELECT min(product_id) FROM products")
        (product,) = cur.fetchone() or (None,)
    assert product is not None, "the shop has no product to change"
    key = json.dumps({"product_id": product}, separators=(",", ":")).encode()

    def change_the_product() -> None:
        with shop_cursor(loaded) as cur:
            cur.execute("UPDATE products SET price = price + 0.01, updated_at = now() WHERE product_id = %s",
                        (product,))
            cur.connection.commit()

    for _ in range(updates):
        change_the_product()
    wait_and_verify_cdc()  # archived before any compaction may touch it
    archived = _archived_versions(key)
    assert archived >= updates + 1  # the snapshot read and every update
    # Segments roll quickly and the cleaner may take any superseded record: compaction happens within the test.
    _alter(loaded, topic, {"segment.ms": "1000", "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.01"})
    try:
        def compacted() -> tuple[int, int] | None:
            # A new record of the same key lands in the same partition and rolls its active segment (the cleaner
            # never reads an active segment; a change of another key may go to another of the topic's partitions).
            change_the_product()
            wait_stream(300)  # archived before the cleaner (lag 0 now) may compact it: no hole in bronze
            now_archived, held = _archived_versions(key), _kafka_records_of_key(loaded, topic, key)
            return (held, now_archived) if held < now_archived else None

        held, archived = wait_until(compacted, f"Kafka's log cleaner to compact {topic}", 300, every=10)
        assert held >= 1, "compaction keeps the newest record of a key"
    finally:
        _alter(loaded, topic, {"segment.ms": None, "min.cleanable.dirty.ratio": None,
                               "min.compaction.lag.ms": str(loaded.kafka_cdc_min_compaction_lag_ms)})
    wait_and_verify_cdc()  # silver still equals PostgreSQL
    assert _archived_versions(key) >= archived > held  # bronze, the SCD2 history's source, keeps every version
    gaps = run_lake("replay", "gaps", "silver.products", check=False, timeout=900)
    assert gaps.returncode == 0 and "no holes" in gaps.stdout, gaps.stdout[-2000:]


def test_status_warns_before_an_unread_change_reaches_the_compaction_lag(loaded: Settings) -> None:
    run_lake("stream", "stop")
    try:
        with shop_cursor(loaded) as cur:
            cur.execute("UPDATE customers SET notes = coalesce(notes, '') || '.' WHERE customer_id = 1")
            cur.connection.commit()

        def warned() -> list[str] | None:
            env = {"LAKE_RETENTION_WARN_FRACTION": "0.0000001", "LAKE_RETENTION_FAIL_FRACTION": "1.0"}
            proc = run_lake("stack", "status", "--json", env=env, check=False, timeout=300)
            found = [w for w in json.loads(proc.stdout)["warnings"]
                     if isinstance(w, str) and w.startswith("shop.public.customers:")]
            return found or None

        warnings = wait_until(warned, "a compaction-lag warning for shop.public.customers", 120, every=5)
        assert "min.compaction.lag.ms" in warnings[0] and "LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS" in warnings[0]
    finally:
        run_lake("stream", "start")
        wait_stream(600)
