"""CDC end to end on the real stack: PostgreSQL -> Debezium -> Kafka -> bronze -> silver.

Every check compares silver with PostgreSQL row for row and column for column
(`lake verify cdc`), after `lake stream wait` says every committed change is
applied. Crash tests SIGKILL the streaming driver and the Connect worker at
random moments during the load; supervisor restarts them, and silver must still
equal the source.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator

import pytest

from spark_jobs import kafka_auth
from spark_jobs.loadgen.cdc.runner import run as run_loadgen
from spark_jobs.settings import Settings
from spark_jobs.stack import health, supervisor
from tests.integration.lakehelpers import (
    kill_program,
    lake_sql,
    load_in_background,
    run_lake,
    running_info,
    shop_cursor,
    start_streaming,
    wait_and_verify_cdc,
    wait_running,
    wait_until,
)


@pytest.fixture(scope="module")
def cdc(stack: Settings) -> Iterator[Settings]:
    start_streaming()
    yield stack


def _silver_count(sql: str) -> int:
    return int(next(iter(lake_sql(sql)[-1].values())))


def test_initial_snapshot_reaches_silver(cdc: Settings) -> None:
    wait_and_verify_cdc()
    # The seeded rows came through the snapshot (op=r) unless a later change replaced them.
    assert _silver_count("SELECT count(*) FROM silver.customers WHERE customer_id IN (1, 2, 3)") == 3


# Two seeds (each a different random mix of every operation): a third added ~45 s and no path the two miss.
@pytest.mark.parametrize("seed", [11, pytest.param(22, marks=pytest.mark.extended)])  # a second seed: extended
def test_silver_equals_postgres_after_seeded_load(cdc: Settings, seed: int) -> None:
    report = run_loadgen(cdc, rate=400, duration=8, seed=seed)
    assert report.total_changes > 500
    wait_and_verify_cdc()


def test_a_second_driver_is_refused_naming_the_running_one(cdc: Settings) -> None:
    """`lake stream run` beside the supervised app: refused before Spark starts (one writer per checkpoint)."""
    info = running_info(cdc, "stream")
    second = run_lake("stream", "run", check=False, timeout=120)
    assert second.returncode == 3, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"pid {info['pid']}" in second.stderr and "supervised app" in second.stderr, second.stderr
    assert "lake stream stop" in second.stderr, second.stderr
    after = supervisor.program_info(cdc, "stream") or {}
    assert (after.get("statename"), after.get("pid")) == ("RUNNING", info["pid"]), after


def test_streaming_driver_sigkilled_during_load(cdc: Settings) -> None:
    rng = random.Random(7)
    load = load_in_background(cdc, seed=44, seconds=45)
    for _ in range(2):  # the second kill hits a driver that is recovering from the first
        time.sleep(rng.uniform(8, 20))
        pid = kill_program(cdc, "stream")
        wait_running(cdc, "stream", pid)
    load.join()
    wait_and_verify_cdc()


@pytest.mark.extended  # a second kill (the core suite SIGKILLs the streaming driver)
def test_connect_worker_sigkilled_during_load(cdc: Settings) -> None:
    load = load_in_background(cdc, seed=55, seconds=40)
    time.sleep(random.Random(8).uniform(5, 15))
    pid = kill_program(cdc, "connect")
    wait_running(cdc, "connect", pid)
    # the process runs before its REST API answers
    wait_until(lambda: health.connect(cdc)[0], "Connect REST to come back after SIGKILL", 180, every=2)
    run_lake("connectors", "apply")  # waits until the task runs again
    load.join()
    wait_and_verify_cdc()


def test_malformed_record_is_quarantined_and_the_app_keeps_applying(cdc: Settings) -> None:
    from confluent_kafka import Producer

    producer = Producer(kafka_auth.client_conf(cdc, "tools"))
    marker = f"not json {time.time_ns()}".encode()
    producer.produce("shop.public.customers", key=b'{"payload": {"customer_id": 1}}', value=marker)
    producer.produce("shop.public.customers", key=b"k", value=b'{"payload": {"op": "u"}}')
    producer.flush(10)
    with shop_cursor(cdc) as cur:
        cur.execute("UPDATE customers SET loyalty_tier = 'quarantine-test' WHERE customer_id = "
                    "(SELECT min(customer_id) FROM customers)")
    wait_and_verify_cdc()
    rows = lake_sql(f"SELECT error, topic, offset FROM quarantine.cdc WHERE value = X'{marker.hex()}'")
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["topic"] == "shop.public.customers" and row["offset"] >= 0
    assert row["error"]


def test_added_column_flows_into_silver(cdc: Settings) -> None:
    with shop_cursor(cdc) as cur:
        cur.execute("ALTER TABLE customers ADD COLUMN IF NOT EXISTS nickname text")
        cur.execute("UPDATE customers SET nickname = 'Nick ' || customer_id WHERE customer_id IN "
                    "(SELECT customer_id FROM customers ORDER BY customer_id LIMIT 5)")
    run_loadgen(cdc, rate=300, duration=3, seed=66)
    wait_and_verify_cdc()  # verify compares every PostgreSQL column, nickname included
    assert _silver_count("SELECT count(*) FROM silver.customers WHERE nickname LIKE 'Nick %'") == 5


def test_silver_is_a_delta_table_with_history_time_travel_and_change_feed(cdc: Settings) -> None:
    """silver.<t> is one Delta table the stream MERGEs into (change data feed on): its history,
    an older version, table_changes(...) and a streaming read of the feed work from Spark SQL, and the
    deltalake package (no Spark) reads the same rows."""
    from deltalake import DeltaTable, QueryBuilder

    from spark_jobs.session import connect_session
    from spark_jobs.table_io.driver import storage_options, table_uri

    with shop_cursor(cdc) as cur:
        cur.execute("UPDATE customers SET loyalty_tier = 'delta-history' WHERE customer_id = "
                    "(SELECT max(customer_id) FROM customers)")
    wait_and_verify_cdc()
    history = lake_sql("DESCRIBE HISTORY silver.customers")
    merges = [h for h in history if h["operation"] == "MERGE"]
    assert merges, history[:5]
    props = {row["key"]: row["value"] for row in lake_sql("SHOW TBLPROPERTIES silver.customers")}
    assert props.get("delta.enableDeletionVectors") == "false", props  # contracts.tables.SILVER_PROPS
    assert props.get("delta.enableChangeDataFeed") == "true", props
    newest = max(int(h["version"]) for h in merges)
    assert _silver_count(f"SELECT count(*) FROM silver.customers VERSION AS OF {newest}") > 0
    assert _silver_count("SELECT count(*) FROM table_changes('silver.customers', 1) "
                         "WHERE _change_type = 'update_postimage' AND loyalty_tier = 'delta-history'") >= 1
    # A streaming read of the change feed over the stack's Spark Connect server (availableNow: what is there).
    spark = connect_session(cdc)
    name = f"silver_customers_feed_{time.time_ns()}"
    query = (spark.readStream.format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
             .table("silver.customers").writeStream.format("memory").queryName(name)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    feed = spark.sql(f"SELECT count(*) FROM {name} WHERE _change_type = 'update_postimage'").first()
    assert feed is not None and feed[0] >= 1
    # The deltalake package reads the same table (its DataFusion scan, which applies deletion vectors too:
    # a table created by an earlier version keeps the ones it has).
    table = DeltaTable(table_uri(cdc, "silver.customers"), storage_options=storage_options(cdc))
    rows = QueryBuilder().register("c", table).execute("SELECT count(*) AS n FROM c").read_all()
    assert rows.column("n")[0].as_py() == _silver_count("SELECT count(*) FROM silver.customers")


def test_poison_records_are_quarantined_and_the_stream_keeps_running(cdc: Settings) -> None:
    """Records forged into the real CDC topic that once crash-looped the app (every replay failed the batch):
    a value nested ~1,100 levels deep (RecursionError in the JSON fallback), a column name with a backtick
    (unescaped in ALTER TABLE once; Delta's MERGE with the change data feed cannot take it), a column name Delta
    refuses. The app stays up (same pid), quarantines all three with the reason and keeps applying the rest."""
    from confluent_kafka import Producer

    before = supervisor.program_info(cdc, "stream") or {}
    assert before.get("statename") == "RUNNING", before
    tag = time.time_ns()
    deep = ('{"payload": {"op": "c", "source": {"lsn": 1}, "after": {"customer_id": -424242, "profile": '
            + '{"n":' * 1_100 + f'"{tag}"' + "}" * 1_100 + "}}}").encode()
    source = {"lsn": 1, "sequence": '["1", "1"]', "snapshot": "false", "ts_ms": 0}

    def forged_delete(key: int, extra: str) -> bytes:
        # A delete of a key that never existed, at the oldest position: it changes no silver row.
        before_image = {"customer_id": key, "email": f"poison-{tag}@example.com", "full_name": "x", extra: "y"}
        return json.dumps({"before": before_image, "after": None, "source": source, "op": "d"}).encode()

    records = [(b'{"customer_id": -424242}', deep),
               (b'{"customer_id": -424243}', forged_delete(-424243, "we`ird")),
               (b'{"customer_id": -424244}', forged_delete(-424244, "gift note"))]
    offsets: list[tuple[int, int]] = []  # (partition, offset): the topic has LAKE_KAFKA_TOPIC_PARTITIONS
    producer = Producer(kafka_auth.client_conf(cdc, "tools"))
    for key, value in records:
        producer.produce("shop.public.customers", key=key, value=value,
                         on_delivery=lambda err, msg: offsets.append(
                             (-1, -1) if err else (int(msg.partition() or 0), int(msg.offset() or 0))))
    producer.flush(30)
    assert len(offsets) == 3 and min(o for _, o in offsets) >= 0, offsets
    # Changes after the poison must still be applied.
    assert run_loadgen(cdc, rate=200, duration=3, seed=77).total_changes > 0
    wait_and_verify_cdc()

    after = supervisor.program_info(cdc, "stream") or {}
    assert after.get("statename") == "RUNNING" and after.get("pid") == before.get("pid"), (before, after)
    wanted = " OR ".join(f"(partition = {p} AND offset = {o})" for p, o in offsets)
    rows = lake_sql("SELECT partition, offset, error FROM quarantine.cdc WHERE "
                    f"topic = 'shop.public.customers' AND ({wanted})")
    errors = {(row["partition"], row["offset"]): row["error"] for row in rows}
    assert set(errors) == set(offsets), rows
    assert "nested too deeply" in errors[offsets[0]]
    assert "'we`ird'" in errors[offsets[1]] and "rename the column" in errors[offsets[1]]
    assert "'gift note'" in errors[offsets[2]] and "rename the column" in errors[offsets[2]]
