"""docs/configuration.md is generated from the settings model and kept so (spark_jobs.settings.reference)."""

from __future__ import annotations

import re

import pytest

from spark_jobs.settings import REPO_ROOT, Settings, env_name, reference
from spark_jobs.settings.model import public_name


def test_configuration_md_is_the_generators_output() -> None:
    assert reference.PATH == REPO_ROOT / "docs" / "configuration.md"
    assert reference.PATH.read_text(encoding="utf-8") == reference.render(), (
        f"docs/configuration.md differs from the settings model: regenerate it with {reference.COMMAND}")


def test_every_setting_is_listed_once_in_model_order() -> None:
    text = reference.render()
    listed = re.findall(r"^\| `(LAKE_[A-Z0-9_]+)` \|", text, flags=re.MULTILINE)
    assert listed == [env_name(public_name(name)) for name in Settings.model_fields]


def test_sections_follow_the_models_group_comments() -> None:
    titles = [s.title for s in reference.sections()]
    assert titles[0] == "General"
    assert "Kafka and Connect" in titles and "Airflow" in titles
    assert sum(len(s.fields) for s in reference.sections()) == len(Settings.model_fields)


def test_secrets_show_no_value_and_the_header_names_the_command() -> None:
    text = reference.render()
    assert reference.COMMAND in text.split("## ", 1)[0]
    row = next(line for line in text.splitlines() if line.startswith("| `LAKE_KAFKA_TOOLS_PASSWORD` |"))
    assert "| generated | secret |" in row and "LAKE_KAFKA_BROKER_PASSWORD" in row


def test_main_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert reference.main() == 0
    assert capsys.readouterr().out == reference.render()
