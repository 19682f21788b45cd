"""The Data Docs trend page: per table, passed / failed expectations and unexpected rows over its validations.

``trend.html`` sits beside GX's ``index.html`` in the served site (the ``dq-docs`` service) and is linked
from it. It is drawn from ``ops.dq_results`` (one small aggregate row per validation, the newest
``MAX_RUNS`` per table) as inline SVG: no script, no external asset, readable offline. The markup is in
Jinja templates (:data:`TEMPLATES`) with autoescaping on: table names, run and task ids are data.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs import files

if TYPE_CHECKING:
    import jinja2
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


#: The page (``trend.html``) and the plot of one table (``plot.svg``, also included by the page with ``plot``
#: set). Numbers arrive formatted (:class:`_Plot`); text is escaped by the engine.
TEMPLATES = {
    "plot.svg": """\
<svg class="dq-trend" role="img" data-table="{{ plot.table }}" width="{{ W }}" height="{{ H }}" \
viewBox="0 0 {{ W }} {{ H }}" xmlns="http://www.w3.org/2000/svg">
<title>{{ plot.table }}: pass rate and unexpected rows over {{ plot.dots|length }} validation(s)</title>
<rect x="{{ PAD }}" y="{{ PAD }}" width="{{ INNER_W }}" height="{{ INNER_H }}" fill="#fafafa" stroke="#ccc"/>
<text x="4" y="{{ PAD + 4 }}" font-size="10">100%</text>
<text x="4" y="{{ PAD + INNER_H }}" font-size="10">0%</text>
<text x="{{ W - PAD + 2 }}" y="{{ PAD + 4 }}" font-size="10" fill="#b36b00">{{ plot.top }}</text>
{% for bar in plot.bars %}
<rect class="unexpected" x="{{ bar.x }}" y="{{ bar.y }}" width="{{ bar.width }}" height="{{ bar.height }}" \
fill="#f0ad4e" opacity="0.6"><title>{{ bar.unexpected }} unexpected rows</title></rect>
{% endfor %}
{% if plot.line %}
<polyline class="pass-rate" points="{{ plot.line }}" fill="none" stroke="#337ab7" stroke-width="2"/>
{% endif %}
{% for dot in plot.dots %}
<circle class="validation" cx="{{ dot.x }}" cy="{{ dot.y }}" r="4" fill="{{ dot.color }}"><title>{{ dot.label }}</title>\
</circle>
{% endfor %}
{% if plot.first %}
<text x="{{ PAD }}" y="{{ H - 8 }}" font-size="10">{{ plot.first }}</text>
<text x="{{ W - PAD }}" y="{{ H - 8 }}" font-size="10" text-anchor="end">{{ plot.last }}</text>
{% endif %}
</svg>
""",
    "trend.html": """\
<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Data quality trend</title>
<style>body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:12px;\
margin:.5em 0 2em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}section{margin-bottom:1.5em}</style>
</head><body>
<h1>Data quality trend</h1><p>From <code>ops.dq_results</code>, newest {{ MAX_RUNS }} validations per table; \
generated {{ generated_at.strftime('%Y-%m-%d %H:%M:%S') }} UTC. <a href="index.html">Back to the Data Docs index</a>.</p>
<p class="legend"><span style="color:#337ab7">line: pass rate</span> · \
<span style="color:#5cb85c">green dot: all passed</span> · \
<span style="color:#d9534f">red dot: an expectation failed</span> · \
<span style="color:#f0ad4e">bars: unexpected rows</span></p>
{% if not sections %}
<p>No validations recorded yet.</p>
{% endif %}
<ul>{% for s in sections %}<li><a href="#{{ s.table|slug }}">{{ s.table }}</a></li>{% endfor %}</ul>
{% for s in sections %}
{% set last = s.points[-1] %}
<section id="{{ s.table|slug }}" class="table-trend"><h2>{{ s.table }}</h2>
<p>Latest: {{ last.passed }}/{{ last.expectations }} passed, {{ last.unexpected }} unexpected rows\
{% if last.blocking %}, BLOCKED{% endif %}.</p>
{% with plot = s.plot %}{% include "plot.svg" %}{% endwith %}
<table><thead><tr><th>validated at (UTC)</th><th>run</th><th>task</th><th>passed</th><th>failed</th>\
<th>unexpected rows</th><th>blocking</th></tr></thead><tbody>
{% for p in s.points[-10:]|reverse %}
<tr><td>{{ p.validated_at.isoformat(sep=' ', timespec='seconds') }}</td><td>{{ p.run_id }}</td>\
<td>{{ p.task_id }}</td><td>{{ p.passed }}/{{ p.expectations }}</td><td>{{ p.failed }}</td>\
<td>{{ p.unexpected }}</td><td>{{ p.blocking }}</td></tr>
{% endfor %}
</tbody></table></section>
{% endfor %}
</body></html>
""",
}


@functools.cache
def _templates() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(loader=jinja2.DictLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.globals.update(W=_W, H=_H, PAD=_PAD, INNER_W=_W - 2 * _PAD, INNER_H=_H - 2 * _PAD, MAX_RUNS=MAX_RUNS)
    env.filters["slug"] = _slug
    return env


@dataclass(frozen=True)
class _Bar:
    x: str
    y: str
    width: str
    height: str
    unexpected: int


@dataclass(frozen=True)
class _Dot:
    x: str
    y: str
    color: str
    label: str


@dataclass(frozen=True)
class _Plot:
    """What ``plot.svg`` draws for one table, in SVG user units (formatted to one decimal)."""

    table: str
    top: int
    bars: list[_Bar]
    line: str
    dots: list[_Dot]
    first: str
    last: str


def _plot(table: str, points: list[Point]) -> _Plot:
    """Pass rate (%) as a line, each validation a dot (red when an expectation failed), unexpected rows as bars
    on their own scale."""
    inner_w, inner_h = _W - 2 * _PAD, _H - 2 * _PAD
    n = len(points)

    def x(i: int) -> float:
        return _PAD + (inner_w * i / (n - 1) if n > 1 else inner_w / 2)

    def y_rate(p: Point) -> float:
        rate = p.passed / p.expectations if p.expectations else 1.0
        return _PAD + inner_h * (1 - rate)

    top = max((p.unexpected for p in points), default=0) or 1
    bar_w = max(2.0, min(14.0, inner_w / max(n, 1) * 0.6))
    bars = []
    for i, p in enumerate(points):
        h = inner_h * p.unexpected / top
        bars.append(_Bar(f"{x(i) - bar_w / 2:.1f}", f"{_PAD + inner_h - h:.1f}", f"{bar_w:.1f}", f"{h:.1f}",
                         p.unexpected))
    line = " ".join(f"{x(i):.1f},{y_rate(p):.1f}" for i, p in enumerate(points)) if n > 1 else ""
    dots = [_Dot(f"{x(i):.1f}", f"{y_rate(p):.1f}", "#d9534f" if p.failed else "#5cb85c",
                 f"{p.validated_at.isoformat(sep=' ', timespec='seconds')} run {p.run_id} ({p.task_id}): "
                 f"{p.passed}/{p.expectations} passed, {p.unexpected} unexpected rows"
                 + (f", {p.blocking} blocking" if p.blocking else ""))
            for i, p in enumerate(points)]
    first, last = ((points[0].validated_at.isoformat(sep=" ", timespec="minutes"),
                    points[-1].validated_at.isoformat(sep=" ", timespec="minutes")) if points else ("", ""))
    return _Plot(table, top, bars, line, dots, first, last)


def svg_plot(table: str, points: list[Point]) -> str:
    """Inline SVG of one table's validations (``plot.svg``): pass rate, a dot per validation, unexpected rows."""
    return _templates().get_template("plot.svg").render(plot=_plot(table, points))


@dataclass(frozen=True)
class _Section:
    table: str
    points: list[Point]
    plot: _Plot


def render_trend_page(trend: dict[str, list[Point]], generated_at: datetime) -> str:
    """The whole trend page (``trend.html``): one section per table (plot + its newest validations)."""
    sections = [_Section(table, points, _plot(table, points)) for table, points in trend.items()]
    return _templates().get_template("trend.html").render(sections=sections, generated_at=generated_at)


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
    files.write_atomic(path, text, private=True)  # 0600: the state dir is private (the dq-docs server runs as its owner)
