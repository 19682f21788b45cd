"""``lake bench contract`` (spark_jobs/bench/contract.py) on a small corpus: the figures of every installed
validator and their verdict disagreements with ours (no wall-clock assertions)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from spark_jobs.bench import contract, contract_report
from spark_jobs.loadgen.clickstream import BAD_KINDS

N = 2_000


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return contract.bench(N, seed=3, repeat=1, progress=lambda line: None)


def test_the_corpus_is_the_loadgen_mix_with_every_bad_kind() -> None:
    corpus = contract.generate(N, seed=3)
    assert len(corpus.values) == len(corpus.kafka_us) == N
    assert all(corpus.kinds[k] > 0 for k in (*BAD_KINDS, "valid", "late", "duplicate"))
    assert contract.generate(50, seed=3).values == corpus.values[:50]  # seeded: the same bytes every run


def test_every_installed_validator_has_figures_and_disagreement_counts(result: dict[str, Any]) -> None:
    rows = {r["name"]: r for r in result["validators"]}
    installed = {c.name for c in contract.CANDIDATES if contract.available(c)}
    assert set(rows) == installed
    assert {"ours", "ours_check_records", "jsonschema", "parse_only"} <= installed  # pinned: always measured
    assert sorted(result["not_installed"]) == sorted(c.name for c in contract.CANDIDATES if c.name not in installed)
    for name, row in rows.items():
        assert len(row["seconds"]) == 1 and row["records_per_s_best"] > 0 and row["x_ours_median"] > 0, name
        if name in ("ours", "parse_only"):
            assert "agreement" not in row
            continue
        agreement = row["agreement"]
        assert agreement["disagreements"] == agreement["accepts_what_ours_rejects"] + agreement["rejects_what_ours_accepts"]
        assert len(agreement["examples"]) == min(3, agreement["disagreements"])
    assert rows["ours"]["x_ours_median"] == 1.0
    assert result["rejected_by_ours"] == sum(result["ours_reasons"].values()) > 0
    json.dumps(result)  # the --json output


def test_ours_is_check_records_verdict_for_verdict(result: dict[str, Any]) -> None:
    rows = {r["name"]: r for r in result["validators"]}
    agreement = rows["ours_check_records"]["agreement"]
    assert (agreement["disagreements"], agreement["reason_codes_differ"]) == (0, 0)
    assert not [e for e in result["edge_cases"]["ours_check_records"] if not e["same_code"]]


def test_jsonschema_agrees_on_generated_records_but_not_on_integer_floats_or_event_time_rules(
        result: dict[str, Any]) -> None:
    rows = {r["name"]: r for r in result["validators"]}
    assert rows["jsonschema"]["agreement"]["disagreements"] == 0
    differ = {e["case"] for e in result["edge_cases"]["jsonschema"] if not e["same_valid"]}
    assert {"user_id 42.0", "event_time not a real date", "event_time 10 min after the Kafka timestamp"} <= differ
    assert "valid page_view" not in differ


def test_the_table_and_the_verdict_name_the_measured_validators(result: dict[str, Any]) -> None:
    text = contract_report.table(result)
    for row in result["validators"]:
        assert row["name"] in text
    assert result["verdict"] in text


def test_verdict_keeps_ours_unless_a_library_is_within_the_limit_and_agrees() -> None:
    def row(name: str, x: float, disagreements: int) -> dict[str, Any]:
        return {"name": name, "x_ours_median": x, "agreement": {"disagreements": disagreements}}

    slow = {"validators": [row("a", 2.0, 0), row("b", 1.2, 5)], "edge_cases": {}}
    assert contract.verdict(slow).startswith("ours stays")
    fits = {"validators": [row("a", 1.4, 0)], "edge_cases": {"a": [{"case": "x", "same_valid": False}]}}
    assert contract.verdict(fits) == ("a takes 1.4x ours' time (median; limit 1.5x) and agrees on every generated "
                                      "record but not on 1 of 1 edge cases (x)")


def test_lake_bench_contract_prints_json_with_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.cli import bench

    calls: list[tuple[int, int, int]] = []

    def fake(events: int, seed: int, repeat: int, step: Any = None) -> dict[str, Any]:
        calls.append((events, seed, repeat))
        return {"verdict": "ours stays", "validators": []}

    monkeypatch.setattr(contract, "bench", fake)
    out = CliRunner().invoke(bench.group, ["contract", "--events", "10", "--repeat", "2", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"verdict": "ours stays", "validators": []}
    assert calls == [(10, 42, 2)]
    assert CliRunner().invoke(bench.group, ["contract", "--events", "0"]).exit_code == 2
