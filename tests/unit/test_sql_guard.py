"""`lake sql` refuses writes to stream-owned tables (spark_jobs.cli.sql_guard), reads and other tables pass."""

from __future__ import annotations

import pytest

from spark_jobs.cli.sql_guard import STREAM_TABLES, stream_owned_write, used_database
from spark_jobs.contracts.tables import CDC_QUERY, GOLD_DAG, TABLES


@pytest.mark.parametrize("stmt", [
    "INSERT INTO silver.orders VALUES (1)",
    "insert overwrite table bronze.shop__public__orders select * from x",
    "DELETE FROM silver.customers WHERE customer_id = 1",
    "UPDATE hot.sales_per_minute SET orders = 0",
    "MERGE INTO silver.orders t USING src s ON t.order_id = s.order_id WHEN MATCHED THEN DELETE",
    "TRUNCATE TABLE quarantine.cdc",
    "DROP TABLE IF EXISTS ops.stream_hot_ledger",
    "ALTER TABLE silver.events SET TBLPROPERTIES ('x' = 'y')",
    "CREATE OR REPLACE TABLE silver.orders AS SELECT 1",
    "OPTIMIZE silver.orders",
    "VACUUM bronze.events__clickstream RETAIN 0 HOURS",
    "RESTORE TABLE silver.orders TO VERSION AS OF 3",
    "INSERT INTO `silver`.`orders` VALUES (1)",
    "INSERT INTO spark_catalog.silver.orders VALUES (1)",
    "INSERT INTO delta.`s3a://lake/warehouse/silver/orders` VALUES (1)",
    "DELETE FROM delta.`s3a://lake/warehouse/silver/orders/` WHERE true",
    "WITH s AS (SELECT 1 AS id) INSERT INTO silver.orders SELECT * FROM s",
    "/* fix */ DELETE\n  FROM\tsilver.orders",
    "DROP DATABASE silver CASCADE",
    "drop schema if exists hot cascade",
])
def test_writes_to_stream_tables_are_refused(stmt: str) -> None:
    assert stream_owned_write(stmt) is not None


@pytest.mark.parametrize("stmt", [
    "SELECT * FROM silver.orders",
    "SELECT 'DELETE FROM silver.orders' AS s",
    "SELECT 1 -- DELETE FROM silver.orders",
    "DESCRIBE HISTORY silver.orders",
    "SELECT * FROM table_changes('silver.orders', 0)",
    "INSERT INTO gold.fct_orders SELECT * FROM silver.orders",
    "CREATE TABLE ops.scratch AS SELECT * FROM silver.orders",
    "DELETE FROM quarantine.dq_gold_fct_orders WHERE true",
    "INSERT INTO silver.my_own_table VALUES (1)",
    "DROP DATABASE scratch CASCADE",
    "SELECT last_update FROM silver.orders",
])
def test_reads_and_other_tables_pass(stmt: str) -> None:
    assert stream_owned_write(stmt) is None


def test_unqualified_name_resolves_in_the_current_database() -> None:
    assert stream_owned_write("DELETE FROM orders", "silver") is not None
    assert stream_owned_write("DELETE FROM orders", "gold") is None
    assert used_database("USE silver") == "silver"
    assert used_database("use `hot`") == "hot"
    assert used_database("SELECT 1") is None


def test_message_names_table_and_owner() -> None:
    assert stream_owned_write("DELETE FROM silver.orders") == f"silver.orders is written by the {CDC_QUERY} alone"


def test_stream_tables_come_from_the_registry() -> None:
    assert "silver.orders" in STREAM_TABLES and "ops.stream_events_ledger" in STREAM_TABLES
    assert "gold.fct_orders" not in STREAM_TABLES and TABLES["gold.fct_orders"].writer == GOLD_DAG
    assert {t.split(".")[0] for t in STREAM_TABLES} == {"bronze", "silver", "hot", "quarantine", "ops"}


class _FakeResult:
    columns = ("x",)

    def collect(self) -> list[tuple[int]]:
        return [(1,)]


class _FakeSpark:
    def __init__(self) -> None:
        self.ran: list[str] = []

    def sql(self, stmt: str) -> _FakeResult:
        self.ran.append(stmt)
        return _FakeResult()

    def stop(self) -> None:
        pass


def test_lake_sql_stops_at_the_refused_statement(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from spark_jobs.cli import sql_shell as sql

    spark = _FakeSpark()
    one_shot: list[bool] = []

    def session(local: bool, one_shot_driver: bool = True) -> _FakeSpark:
        one_shot.append(one_shot_driver)
        return spark

    monkeypatch.setattr(sql, "_session", session)
    assert sql.run("SELECT 1; USE silver; DELETE FROM orders WHERE true; SELECT 2", "table") == 1
    assert one_shot == [True]  # `-e` statements: a --local driver runs them and exits (short-lived JVM options)
    assert spark.ran == ["SELECT 1", "USE silver"]
    err = capsys.readouterr().err
    assert "lake sql: refusing 'DELETE FROM orders WHERE true': silver.orders is written by the streaming app" in err
