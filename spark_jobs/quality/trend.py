"""The Data Docs trend page: per table, passed / failed expectations and unexpected rows over its validations.

``trend.html`` sits beside GX's ``index.html`` in the served site (the ``dq-docs`` service) and is linked
from it. It is drawn from ``ops.dq_results`` (one small aggregate row per validation, the newest
``MAX_RUNS`` per table) as inline SVG: no script, no external asset, readable offline.
"""

from __future__ import annotations

import html
import logging
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)

TREND_PAGE = "trend.html"
#: Validations per table drawn (the newest ones).
MAX_RUNS = 60
_LINK_ID = "lake-dq-trend-link"
_W, _H, _PAD = 640, 160, 34


@dataclass(frozen=True)
class Point:
    """One validation of one table."""

    validated_at: datetime
    run_id: str
    task_id: str
    expectations: int
    passed: int
    unexpected: int
    blocking: int

    @property
    def failed(self) -> int:
        return self.expectations - self.passed


def trend_points(spark: SparkSession, max_runs: int = MAX_RUNS) -> dict[str, list[Point]]:
    """``ops.dq_results`` -> table -> its newest ``max_runs`` validations, oldest first."""
    from spark_jobs.quality.store import RESULTS_TABLE

    rows = spark.sql(f"""
        SELECT * FROM (
          SELECT table_name, validated_at, first(run_id) AS run_id, first(task_id) AS task_id,
                 count(*) AS expectations, count_if(success) AS passed,
                 coalesce(sum(unexpected_count), 0) AS unexpected,
                 count_if(NOT success AND severity = 'block') AS blocking,
                 row_number() OVER (PARTITION BY table_name ORDER BY validated_at DESC) AS n
          FROM {RESULTS_TABLE} GROUP BY table_name, validated_at)
        WHERE n <= {int(max_runs)}""").collect()
    out: dict[str, list[Point]] = {}
    for r in rows:
        out.setdefault(r["table_name"], []).append(Point(r["validated_at"], r["run_id"], r["task_id"],
                                                         int(r["expectations"]), int(r["passed"]),
                                                         int(r["unexpected"]), int(r["blocking"])))
    return {t: sorted(points, key=lambda p: p.validated_at) for t, points in sorted(out.items())}


def _slug(table: str) -> str:
    return "trend-" + table.replace(".", "-")


def svg_plot(table: str, points: list[Point]) -> str:
    """Inline SVG: pass rate (%) as a line, each validation a dot (red when an expectation failed), unexpected
    rows as bars on their own scale."""
    e = html.escape
    inner_w, inner_h = _W - 2 * _PAD, _H - 2 * _PAD
    n = len(points)

    def x(i: int) -> float:
        return _PAD + (inner_w * i / (n - 1) if n > 1 else inner_w / 2)

    def y_rate(p: Point) -> float:
        rate = p.passed / p.expectations if p.expectations else 1.0
        return _PAD + inner_h * (1 - rate)

    top = max((p.unexpected for p in points), default=0) or 1
    bar_w = max(2.0, min(14.0, inner_w / max(n, 1) * 0.6))
    parts = [f'<svg class="dq-trend" role="img" data-table="{e(table)}" width="{_W}" height="{_H}" '
             f'viewBox="0 0 {_W} {_H}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{e(table)}: pass rate and unexpected rows over {n} validation(s)</title>",
             f'<rect x="{_PAD}" y="{_PAD}" width="{inner_w}" height="{inner_h}" fill="#fafafa" stroke="#ccc"/>',
             f'<text x="4" y="{_PAD + 4}" font-size="10">100%</text>',
             f'<text x="4" y="{_PAD + inner_h}" font-size="10">0%</text>',
             f'<text x="{_W - _PAD + 2}" y="{_PAD + 4}" font-size="10" fill="#b36b00">{top}</text>']
    for i, p in enumerate(points):
        h = inner_h * p.unexpected / top
        parts.append(f'<rect class="unexpected" x="{x(i) - bar_w / 2:.1f}" y="{_PAD + inner_h - h:.1f}" '
                     f'width="{bar_w:.1f}" height="{h:.1f}" fill="#f0ad4e" opacity="0.6">'
                     f"<title>{p.unexpected} unexpected rows</title></rect>")
    if n > 1:
        line = " ".join(f"{x(i):.1f},{y_rate(p):.1f}" for i, p in enumerate(points))
        parts.append(f'<polyline class="pass-rate" points="{line}" fill="none" stroke="#337ab7" stroke-width="2"/>')
    for i, p in enumerate(points):
        color = "#d9534f" if p.failed else "#5cb85c"
        label = (f"{p.validated_at.isoformat(sep=' ', timespec='seconds')} run {p.run_id} ({p.task_id}): "
                 f"{p.passed}/{p.expectations} passed, {p.unexpected} unexpected rows"
                 + (f", {p.blocking} blocking" if p.blocking else ""))
        parts.append(f'<circle class="validation" cx="{x(i):.1f}" cy="{y_rate(p):.1f}" r="4" fill="{color}">'
                     f"<title>{e(label)}</title></circle>")
    if points:
        first, last = points[0].validated_at, points[-1].validated_at
        parts.append(f'<text x="{_PAD}" y="{_H - 8}" font-size="10">{e(first.isoformat(sep=" ", timespec="minutes"))}'
                     "</text>")
        parts.append(f'<text x="{_W - _PAD}" y="{_H - 8}" font-size="10" text-anchor="end">'
                     f'{e(last.isoformat(sep=" ", timespec="minutes"))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_trend_page(trend: dict[str, list[Point]], generated_at: datetime) -> str:
    """The whole trend page: one section per table (plot + its newest validations)."""
    e = html.escape
    body = [f"<h1>Data quality trend</h1><p>From <code>ops.dq_results</code>, newest {MAX_RUNS} validations per "
            f"table; generated {e(generated_at.strftime('%Y-%m-%d %H:%M:%S'))} UTC. "
            '<a href="index.html">Back to the Data Docs index</a>.</p>',
            '<p class="legend"><span style="color:#337ab7">line: pass rate</span> · '
            '<span style="color:#5cb85c">green dot: all passed</span> · '
            '<span style="color:#d9534f">red dot: an expectation failed</span> · '
            '<span style="color:#f0ad4e">bars: unexpected rows</span></p>']
    if not trend:
        body.append("<p>No validations recorded yet.</p>")
    body.append("<ul>" + "".join(f'<li><a href="#{_slug(t)}">{e(t)}</a></li>' for t in trend) + "</ul>")
    for table, points in trend.items():
        last = points[-1]
        rows = "".join(
            f"<tr><td>{e(p.validated_at.isoformat(sep=' ', timespec='seconds'))}</td><td>{e(p.run_id)}</td>"
            f"<td>{e(p.task_id)}</td><td>{p.passed}/{p.expectations}</td><td>{p.failed}</td>"
            f"<td>{p.unexpected}</td><td>{p.blocking}</td></tr>" for p in reversed(points[-10:]))
        body.append(
            f'<section id="{_slug(table)}" class="table-trend"><h2>{e(table)}</h2>'
            f"<p>Latest: {last.passed}/{last.expectations} passed, {last.unexpected} unexpected rows"
            f"{', BLOCKED' if last.blocking else ''}.</p>{svg_plot(table, points)}"
            "<table><thead><tr><th>validated at (UTC)</th><th>run</th><th>task</th><th>passed</th><th>failed</th>"
            f"<th>unexpected rows</th><th>blocking</th></tr></thead><tbody>{rows}</tbody></table></section>")
    style = ("body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:12px;"
             "margin:.5em 0 2em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}"
             "section{margin-bottom:1.5em}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Data quality trend</title>'
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>")


def link_trend(site: Path) -> None:
    """Put a link to the trend page on GX's ``index.html`` (GX rewrites the index on every build)."""
    index = site / "index.html"
    if not index.is_file():
        return
    text = index.read_text(encoding="utf-8")
    if _LINK_ID in text:
        return
    link = (f'<p id="{_LINK_ID}" style="margin:0.5em 3em"><a href="{TREND_PAGE}">Data quality trend per table '
            "(pass rate and unexpected rows over runs)</a></p>")
    marker = '<div class="container-fluid'
    at = text.find(marker)
    if at < 0:
        at = text.find("<body>") + len("<body>") if "<body>" in text else 0
    write_atomic(index, text[:at] + link + text[at:])


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` atomically: the dq-docs server may be reading it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trend-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)  # mkstemp's 0600: the state dir is private (the dq-docs server runs as its owner)
