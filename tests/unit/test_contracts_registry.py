"""The CDC contracts (spark_jobs/contracts/shop.py) are the one list of captured tables: the connector's
table list and the publication the migrations create are checked against them."""

from __future__ import annotations

import re
from pathlib import Path

from spark_jobs.connectors import CONNECTORS_DIR, load_connector
from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.settings import load_settings

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
