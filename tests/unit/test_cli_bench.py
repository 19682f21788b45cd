"""``lake bench`` (spark_jobs/cli/bench.py): the phase bars it hands the CDC and events benches."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner


def test_phase_bars_are_none_off_a_terminal_and_rich_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.bench.cdc import NO_BARS
    from spark_jobs.cli import bench, progress

    assert bench.phase_bars() is NO_BARS  # pytest's output is no terminal
    monkeypatch.setattr(progress, "enabled", lambda: True)
    bars = bench.phase_bars()
    assert (bars.timed, bars.remaining) == (progress.timed, progress.remaining)


def test_bench_cdc_and_events_pass_the_phase_bars_and_print_the_same_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.bench import cdc as bench_cdc
    from spark_jobs.bench import events as bench_events
    from spark_jobs.bench.cdc import NO_BARS
    from spark_jobs.cli import bench

    given: list[Any] = []

    def fake_cdc(*args: Any, bars: Any) -> dict[str, Any]:
        given.append(bars)
        return {"steady": {"caught_up": True}}

    def fake_events(**kwargs: Any) -> dict[str, Any]:
        given.append(kwargs["bars"])
        return {"catchup": {"batches": 2}}

    monkeypatch.setattr(bench_cdc, "bench_cdc", fake_cdc)
    monkeypatch.setattr(bench_events, "bench", fake_events)
    cdc = CliRunner().invoke(bench.group, ["cdc", "--duration", "5"])
    events = CliRunner().invoke(bench.group, ["events", "--skip-steady"])
    assert (cdc.exit_code, events.exit_code) == (0, 0), cdc.output + events.output
    assert cdc.output == '{\n  "steady": {\n    "caught_up": true\n  }\n}\n'
    assert events.output == '{\n  "catchup": {\n    "batches": 2\n  }\n}\n'
    assert given == [NO_BARS, NO_BARS]
