"""The CDC contracts (spark_jobs/contracts/shop.py) are the one list of captured tables: the connector's
table list and the publication the migrations create are checked against them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.settings import load_settings
from spark_jobs.stack.connectors import CONNECTORS_DIR, load_connector

MIGRATIONS = Path(__file__).resolve().parents[2] / "infra" / "postgres" / "shop"
#: Published for the connector's heartbeat only (keeps the slot moving); never a topic (V003).
HEARTBEAT = "lake_heartbeat"


def _contract_tables() -> set[str]:
    return {t.table for t in CDC_TABLES.values()}


def test_connector_captures_exactly_the_contract_tables(tmp_path: Path) -> None:
    _name, config = load_connector(CONNECTORS_DIR / "shop-postgres.json", load_settings({"LAKE_STATE_DIR": str(tmp_path)}))
    listed = {t.strip() for t in config["table.include.list"].split(",") if t.strip()}
    assert listed == {f"public.{t}" for t in _contract_tables()}
    assert config["topic.prefix"] == next(iter(CDC_TABLES)).split(".")[0]


def test_publication_holds_exactly_the_contract_tables_and_the_heartbeat() -> None:
    published: set[str] = set()
    for sql in sorted(MIGRATIONS.glob("V*.sql")):
        text = re.sub(r"--[^\n]*", "", sql.read_text())
        for m in re.finditer(r"(?:CREATE\s+PUBLICATION\s+\w+\s+FOR\s+TABLE|ALTER\s+PUBLICATION\s+\w+\s+ADD\s+TABLE)"
                             r"\s+([^;]+);", text, re.IGNORECASE):
            published |= {t.strip() for t in m.group(1).split(",")}
        for m in re.finditer(r"ALTER\s+PUBLICATION\s+\w+\s+DROP\s+TABLE\s+([^;]+);", text, re.IGNORECASE):
            published -= {t.strip() for t in m.group(1).split(",")}
    assert published == _contract_tables() | {HEARTBEAT}


#: PostgreSQL column types of the shop DDL -> the contract's Spark types (see spark_jobs/contracts/shop.py).
_PG_TYPES = {"bigint": "bigint", "integer": "int", "text": "string", "jsonb": "string", "boolean": "boolean",
             "timestamptz": "timestamp"}


def _pg_to_spark(pg_type: str) -> str:
    if m := re.fullmatch(r"numeric\((\d+),(\d+)\)", pg_type):
        return f"decimal({m.group(1)},{m.group(2)})"
    if re.fullmatch(r"char\(\d+\)", pg_type):
        return "string"
    return _PG_TYPES[pg_type]


def _ddl_tables() -> dict[str, tuple[list[tuple[str, str, bool]], list[str]]]:
    """CREATE TABLE statements of the shop migrations: table -> ([(column, spark type, not null)], primary key)."""
    tables = {}
    for sql in sorted(MIGRATIONS.glob("V*.sql")):
        text = re.sub(r"--[^\n]*", "", sql.read_text())
        for m in re.finditer(r"CREATE\s+TABLE\s+(\w+)\s*\((.*?)\);", text, re.IGNORECASE | re.DOTALL):
            cols, pk = [], []
            for line in (part.strip() for part in re.split(r",\s*\n", m.group(2))):
                if mk := re.match(r"PRIMARY\s+KEY\s*\(([^)]*)\)", line, re.IGNORECASE):
                    pk = [c.strip() for c in mk.group(1).split(",")]
                    continue
                name, pg_type = line.split()[:2]
                cols.append((name, _pg_to_spark(pg_type.lower()), "NOT NULL" in line.upper() or "PRIMARY KEY" in
                             line.upper()))
                if "PRIMARY KEY" in line.upper():
                    pk = [name]
            tables[m.group(1)] = (cols, pk)
    return tables


def test_migrations_create_the_contract_tables_column_for_column() -> None:
    ddl = _ddl_tables()
    for contract in CDC_TABLES.values():
        assert contract.table in ddl, f"no CREATE TABLE {contract.table} in {MIGRATIONS}"
        cols, pk = ddl[contract.table]
        assert [(c, t) for c, t, _ in cols] == [(f.name, f.dataType.simpleString()) for f in contract.schema.fields], \
            contract.table
        assert tuple(pk) == contract.keys, contract.table
        not_null = {c for c, _, nn in cols if nn}
        assert set(contract.keys) <= not_null
        assert all(f.nullable or f.name in not_null for f in contract.schema.fields), contract.table


_STATEMENT = re.compile(r'INSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)|UPDATE\s+(\w+)\s+SET\s+([^"\n]*?)\s+WHERE|DELETE\s+FROM\s+(\w+)',
                        re.IGNORECASE | re.DOTALL)


def _written(table: str, columns: list[str]) -> tuple[str, set[str]]:
    return table, {c.strip() for c in columns if c.strip()}


def test_cdc_loadgen_writes_only_contract_tables_and_columns() -> None:
    """Every SQL statement the live load generator sends names a captured table and only its contract columns."""
    schemas = {t.table: set(t.schema.names) for t in CDC_TABLES.values()}
    source = "\n".join(p.read_text() for p in sorted((MIGRATIONS.parents[2] / "spark_jobs" / "loadgen" / "cdc")
                                                      .glob("*.py")))
    # Adjacent string literals form one statement: join them before matching.
    source = re.sub(r'"\s*\n\s*"', "", source)
    seen = set()
    for m in _STATEMENT.finditer(source):
        if m.group(1):
            table, cols = _written(m.group(1), m.group(2).split(","))
        elif m.group(3):
            table, cols = _written(m.group(3), re.findall(r"(\w+)\s*=", m.group(4)))
        else:
            table, cols = m.group(5), set()
        assert table in schemas, f"loadgen writes {table}, which no CDC contract captures"
        assert cols <= schemas[table], f"loadgen writes {sorted(cols - schemas[table])} of {table}: not in its contract"
        seen.add(table)
    assert seen == set(schemas), f"statements found for {sorted(seen)} only: the pattern misses some"


def test_history_plan_writes_only_contract_tables_and_columns() -> None:
    from datetime import date

    from spark_jobs.loadgen.history_plan import plan_history

    contracts = {t.table: t for t in CDC_TABLES.values()}
    plan = plan_history(3, 2, date(2026, 3, 10), orders_per_day=30, events_per_day=50)
    tables = set()
    for tx in plan.txs:
        for change in tx.changes:
            contract = contracts[change.table]
            assert set(change.key) == set(contract.keys), change
            assert set(change.values) <= set(contract.schema.names), change
            if change.kind == "insert":
                required = {f.name for f in contract.schema.fields if not f.nullable}
                assert required <= set(change.values) | set(change.key), change
            tables.add(change.table)
    assert tables == set(contracts)


def test_every_table_the_code_writes_is_in_the_registry_once() -> None:
    from spark_jobs.contracts.tables import TABLES, lake_table
    from spark_jobs.hot.windows import HOT_VIEWS
    from spark_jobs.jobs import gold, smoke
    from spark_jobs.quality.store import RESULTS_TABLE, quarantine_table
    from spark_jobs.replay.targets import REPLAYS
    from spark_jobs.serving.watermark import WATERMARK_TABLE
    from spark_jobs.streaming import archive as events
    from spark_jobs.streaming import cdc, hot

    written = {events.BRONZE, events.SILVER, events.QUARANTINE, events.LEDGER, hot.HOT_LEDGER, cdc.QUARANTINE,
               RESULTS_TABLE, WATERMARK_TABLE, REPLAYS,
               smoke.TABLE, *(v.table for v in HOT_VIEWS), *(f"gold.{s}" for s in gold.STEPS),
               *(n for c in CDC_TABLES.values() for n in (c.bronze, c.silver, c.deleted))}
    assert written == set(TABLES), (sorted(written - set(TABLES)), sorted(set(TABLES) - written))
    for entry in TABLES.values():
        assert entry.grain and entry.writer and entry.keys, entry
    # Facts are replaced per day on their registered date column; dimensions are whole-table rebuilds.
    assert gold.PARTITION == {"fct_orders": "order_date", "fct_daily_sales": "order_date",
                              "fct_daily_funnel": "event_date"}
    assert lake_table(quarantine_table("gold.fct_orders")).writer.startswith("data-quality gate")
    with pytest.raises(KeyError, match=r"silver\.nope is not in the table registry \(spark_jobs/contracts/tables\.py\)"):
        lake_table("silver.nope")
    # A replay's shadow is laid out as its live table (docs/operations.md, Replay (Kappa)).
    shadow = lake_table("replay.silver__orders__deleted")
    assert (shadow.keys, shadow.properties) == (TABLES["silver.orders__deleted"].keys,
                                                TABLES["silver.orders__deleted"].properties)
    assert lake_table("replay.silver__events").partitioned_by == ("event_date",)
    with pytest.raises(KeyError):
        lake_table("replay.silver__nope")


def test_silver_tables_have_the_change_feed_and_no_deletion_vectors() -> None:
    from spark_jobs.contracts.tables import TABLES

    for contract in CDC_TABLES.values():
        props = TABLES[contract.silver].properties
        assert props["delta.enableChangeDataFeed"] == "true"
        assert props["delta.enableDeletionVectors"] == "false"  # measured: docs/benchmarks.md
        assert TABLES[contract.silver].keys == contract.keys
