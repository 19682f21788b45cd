from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack.connectors import CONNECTORS_DIR, ConnectorError, load_connector


@pytest.fixture()
def settings(tmp_path: Path) -> Settings:
    return load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_PG_PORT": "25432"})


def test_shop_connector_renders_with_settings_and_no_password_literal(settings: Settings) -> None:
    name, config = load_connector(CONNECTORS_DIR / "shop-postgres.json", settings)
    assert name == "shop-postgres"
    assert config["database.port"] == "25432"
    assert config["plugin.name"] == "pgoutput"
    assert config["publication.autocreate.mode"] == "disabled"
    assert config["decimal.handling.mode"] == "string"
    assert int(config["heartbeat.interval.ms"]) > 0
    assert config["database.password"] == f"${{file:{settings.state_dir}/secrets/postgres.properties:cdc.password}}"
    assert settings.cdc_password == "" or settings.cdc_password not in json.dumps(config)


def test_literal_password_is_rejected(tmp_path: Path, settings: Settings) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "config": {"database.password": "hunter2"}}))
    with pytest.raises(ConnectorError, match=r"database\.password holds a literal value"):
        load_connector(bad, settings)


def test_malformed_connector_file_names_the_file(tmp_path: Path, settings: Settings) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"name": "x", "config": ')
    with pytest.raises(ConnectorError, match=r"broken\.json"):
        load_connector(bad, settings)


def test_shop_connector_sends_records_without_the_json_schema(settings: Settings) -> None:
    # ~4 KB of schema per record otherwise; the streaming app types added columns from the catalog instead.
    _name, config = load_connector(CONNECTORS_DIR / "shop-postgres.json", settings)
    assert config["value.converter.schemas.enable"] == "false"
    assert config["key.converter.schemas.enable"] == "false"
