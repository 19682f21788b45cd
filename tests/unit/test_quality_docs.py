"""Data Docs keep the newest N validations per table: stored results and their pages go together."""

from __future__ import annotations

from pathlib import Path

from spark_jobs.quality.docs import prune_validations


def _validation(project: Path, suite: str, run_id: str, run_time: str) -> tuple[Path, Path]:
    rel = Path(*suite.split(".")) / run_id / run_time / f"lake_gold_daily.{suite.split('.')[1]}"
    stored = project / "gx" / "uncommitted" / "validations" / rel.with_suffix(".json")
    page = project / "gx" / "uncommitted" / "data_docs" / "local_site" / "validations" / rel.with_suffix(".html")
    for f in (stored, page):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    return stored, page


def test_keeps_the_newest_per_suite_and_removes_the_pages_of_the_rest(tmp_path: Path) -> None:
    # Run ids do not sort by time (backfills run old days later): the run time decides.
    old = _validation(tmp_path, "gold.fct_orders", "backfill__2026-11-20", "20261124T100000.000000Z")
    mid = _validation(tmp_path, "gold.fct_orders", "backfill__2026-11-01", "20261124T110000.000000Z")
    new = _validation(tmp_path, "gold.fct_orders", "scheduled__2026-11-25", "20261125T000100.000000Z")
    other = _validation(tmp_path, "gold.fct_daily_sales", "backfill__2026-11-20", "20261124T090000.000000Z")

    removed = prune_validations(tmp_path, "gold.fct_orders", keep=2)

    assert sorted(removed) == sorted(old)
    assert not any(f.exists() for f in old) and not old[0].parent.exists() and not old[1].parent.parent.exists()
    assert all(f.exists() for f in (*mid, *new, *other))


def test_nothing_to_prune(tmp_path: Path) -> None:
    assert prune_validations(tmp_path, "silver.orders", keep=5) == []
    kept = _validation(tmp_path, "silver.orders", "manual__x", "20261125T000000.000000Z")
    assert prune_validations(tmp_path, "silver.orders", keep=1) == [] and all(f.exists() for f in kept)
