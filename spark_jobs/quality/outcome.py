"""What a data quality validation found: per-expectation results, the split frames, the verdict and its summary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Rows of unexpected values kept per expectation (result, ops.dq_results, the task log).
SAMPLE_ROWS = 20
#: Column of ``quarantined``: the names of the quarantine expectations the row failed.
EXPECTATIONS_COLUMN = "_dq_expectations"


class DqBlocked(RuntimeError):
    """A ``block`` expectation failed: the message is the outcome's summary."""


@dataclass(frozen=True)
class ExpectationResult:
    """The verdict of one expectation of one validation (one row of ``ops.dq_results``)."""

    table: str
    expectation: str
    expectation_type: str
    severity: str
    success: bool
    observed_value: str | None
    unexpected_count: int | None
    unexpected_sample: str  # JSON array of up to SAMPLE_ROWS rows (objects)
    error: str | None = None

    @property
    def sample_rows(self) -> list[Any]:
        rows: list[Any] = json.loads(self.unexpected_sample)
        return rows


@dataclass
class DqOutcome:
    """What :func:`validate` found and what may be published."""

    table: str
    interval: tuple[datetime, datetime] | None
    run_id: str
    dag_id: str
    task_id: str
    validated_at: datetime
    results: list[ExpectationResult]
    passed: DataFrame
    quarantined: DataFrame | None
    blocked: bool
    docs_url: str | None = None
    row_keys: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> list[ExpectationResult]:
        return [r for r in self.results if not r.success]

    def summary(self) -> str:
        """Table, interval, run, verdict and per failed expectation its count and up to 20 sample rows."""
        iv = (f"[{self.interval[0].isoformat()}, {self.interval[1].isoformat()})" if self.interval
              else "whole table (no interval)")
        failed = self.failed
        verdict = ("BLOCKED (a block expectation failed: do not publish)" if self.blocked
                   else "quarantined failing rows" if any(r.severity == "quarantine" for r in failed)
                   else "warnings only" if failed else "all passed")
        lines = [f"DQ {self.table} interval {iv} run {self.run_id} (dag {self.dag_id}, task {self.task_id}): "
                 f"{len(failed)} of {len(self.results)} expectations failed; {verdict}"]
        for r in failed:
            count = "?" if r.unexpected_count is None else str(r.unexpected_count)
            lines.append(f"  FAILED [{r.severity}] {r.expectation} ({r.expectation_type}): unexpected {count}, "
                         f"observed {r.observed_value}")
            if r.error:
                lines.append(f"    error: {r.error}")
            for row in r.sample_rows[:SAMPLE_ROWS]:
                lines.append(f"    sample: {json.dumps(row, default=str, ensure_ascii=False)}")
        if self.docs_url:
            lines.append(f"  Data Docs: {self.docs_url}")
        return "\n".join(lines)
