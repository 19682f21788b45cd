"""Debezium captures the shop database: connector registered idempotently, secrets never shown."""

from __future__ import annotations

import json
import time
from typing import Any

from spark_jobs import kafka_auth
from spark_jobs.settings import Settings
from spark_jobs.stack import health
from spark_jobs.stack.connectors import apply, connector_status
from tests.integration.lakehelpers import run_lake, shop_cursor


def _snapshot_events(stack: Settings, topic: str, want: int, timeout: float = 120) -> list[dict[str, Any]]:
    """Snapshot reads (op=r) of ``topic``; other events (and non-JSON records other tests inject) are skipped."""
    from confluent_kafka import Consumer

    consumer = Consumer({**kafka_auth.client_conf(stack, "tools"), "group.id": f"it-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            value = None if msg is None or msg.error() else msg.value()
            if value is None:
                continue
            try:
                payload = json.loads(value)  # schemas.enable=false: the record is the Debezium payload
            except ValueError:
                continue
            assert "schema" not in payload, "the connector should send records without the JSON schema"
            if isinstance(payload, dict) and payload.get("op") == "r":
                out.append(payload)
    finally:
        consumer.close()
    return out


def test_apply_registers_shop_connector_and_snapshot_arrives(stack: Settings) -> None:
    assert apply(stack) == ["shop-postgres"]
    # Idempotent: applying again changes nothing and still runs.
    run_lake("connectors", "apply")
    status = connector_status(stack, "shop-postgres")
    assert status["connector"]["state"] == "RUNNING"
    assert [t["state"] for t in status["tasks"]] == ["RUNNING"]

    events = _snapshot_events(stack, "shop.public.customers", want=3)
    by_id = {e["after"]["customer_id"]: e for e in events if e["after"]}
    assert {1, 2, 3} <= set(by_id)
    assert by_id[1]["after"]["full_name"] == "Ana Müller"
    assert by_id[3]["after"]["full_name"] == "佐藤 由紀"
    assert by_id[1]["source"]["snapshot"] in {"true", "first", "first_in_data_collection", "last", "last_in_data_collection"}
    products = {e["after"]["product_id"]: e["after"] for e in _snapshot_events(stack, "shop.public.products", want=3)}
    assert products[10]["price"] == "18.90"  # decimal.handling.mode=string keeps money exact


def test_connector_config_never_shows_the_password(stack: Settings) -> None:
    apply(stack)
    for path in ("/connectors/shop-postgres", "/connectors/shop-postgres/config"):
        body = json.dumps(health.http_json(f"{stack.connect_url}{path}", headers=kafka_auth.connect_rest_headers(stack)))
        assert stack.cdc_password not in body
        assert "${file:" in body
    status = run_lake("connectors", "status", "--json")
    rows = json.loads(status.stdout)
    assert rows[0]["name"] == "shop-postgres" and rows[0]["state"] == "RUNNING"
    assert isinstance(rows[0]["slot_lag_bytes"], int)


#: PostgreSQL type (information_schema) -> the contract's Spark type string.
_PG_TO_SPARK = {"bigint": "bigint", "integer": "int", "text": "string", "character varying": "string",
                "character": "string", "jsonb": "string", "boolean": "boolean",
                "timestamp with time zone": "timestamp"}


def test_shop_schema_in_postgres_matches_the_contracts(stack: Settings) -> None:
    """Every contract column exists in PostgreSQL with the type the contract maps it to, and the keys are the
    primary keys (PostgreSQL may have more columns: added ones flow into silver on their own)."""

    from spark_jobs.contracts.shop import CDC_TABLES

    with shop_cursor(stack) as cur:
        cur.execute("SELECT table_name, column_name, data_type, numeric_precision, numeric_scale "
                    "FROM information_schema.columns WHERE table_schema = 'public'")
        columns: dict[str, dict[str, str]] = {}
        for table, column, pg_type, precision, scale in cur.fetchall():
            spark_type = f"decimal({precision},{scale})" if pg_type == "numeric" else _PG_TO_SPARK.get(pg_type, pg_type)
            columns.setdefault(table, {})[column] = spark_type
        cur.execute("SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
                    "JOIN information_schema.key_column_usage kcu USING (constraint_schema, constraint_name) "
                    "WHERE tc.table_schema = 'public' AND tc.constraint_type = 'PRIMARY KEY' "
                    "ORDER BY kcu.ordinal_position")
        keys: dict[str, list[str]] = {}
        for table, column in cur.fetchall():
            keys.setdefault(table, []).append(column)
    problems = []
    for contract in CDC_TABLES.values():
        have = columns.get(contract.table, {})
        for field in contract.schema.fields:
            if have.get(field.name) != field.dataType.simpleString():
                problems.append(f"{contract.table}.{field.name}: contract {field.dataType.simpleString()}, "
                                f"PostgreSQL {have.get(field.name, 'missing')}")
        if tuple(keys.get(contract.table, [])) != contract.keys:
            problems.append(f"{contract.table}: contract keys {contract.keys}, primary key {keys.get(contract.table)}")
    assert not problems, "\n".join(problems)
