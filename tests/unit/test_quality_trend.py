"""spark_jobs.quality.trend: the Data Docs trend page (inline SVG per table) and its link on GX's index."""

from __future__ import annotations

from datetime import datetime

from spark_jobs.quality.trend import TREND_PAGE, Point, link_trend, render_trend_page, svg_plot

T0 = datetime(2026, 3, 1, 0, 10)


def point(minute: int, passed: int, unexpected: int, blocking: int = 0) -> Point:
    return Point(T0.replace(minute=minute), f"run-{minute}", "silver__orders", 4, passed, unexpected, blocking)


def test_plot_draws_one_dot_per_validation_red_when_one_failed_and_bars_for_unexpected_rows():
    svg = svg_plot("silver.orders", [point(10, 4, 0), point(20, 3, 7), point(30, 2, 14, blocking=1)])
    assert svg.startswith('<svg class="dq-trend" role="img" data-table="silver.orders"')
    assert svg.count('<circle class="validation"') == 3
    assert svg.count('fill="#5cb85c"') == 1 and svg.count('fill="#d9534f"') == 2
    assert svg.count('<rect class="unexpected"') == 3
    # pass rate 100% -> top of the plot area (y = 34), 50% -> its middle (34 + 92 / 2 = 80)
    assert 'points="34.0,34.0 320.0,57.0 606.0,80.0"' in svg
    assert "2026-03-01 00:30:00 run run-30 (silver__orders): 2/4 passed, 14 unexpected rows, 1 blocking" in svg


def test_page_has_a_section_per_table_and_says_when_nothing_is_recorded():
    page = render_trend_page({"gold.fct_orders": [point(10, 4, 0)], "silver.orders": [point(10, 3, 1)]}, T0)
    assert '<section id="trend-gold-fct_orders"' in page and '<section id="trend-silver-orders"' in page
    assert "Latest: 3/4 passed, 1 unexpected rows." in page
    assert "No validations recorded yet." in render_trend_page({}, T0)


def test_index_gets_one_link_to_the_trend_page(tmp_path):
    index = tmp_path / "index.html"
    index.write_text('<html><body><nav>x</nav><div class="container-fluid pt-4">runs</div></body></html>')
    link_trend(tmp_path)
    link_trend(tmp_path)  # idempotent: GX rewrites the index, we add the link once
    text = index.read_text()
    assert text.count(f'href="{TREND_PAGE}"') == 1
    assert text.index('id="lake-dq-trend-link"') < text.index('<div class="container-fluid')


def test_names_and_ids_are_escaped_not_markup():
    table = "gold.<script>alert(1)</script>"
    bad = Point(T0, 'run"><script>x()</script>', "<b>task</b>", 4, 4, 0, 0)
    page = render_trend_page({table: [bad]}, T0)
    assert "<script>" not in page and "<b>" not in page
    assert "<h2>gold.&lt;script&gt;alert(1)&lt;/script&gt;</h2>" in page
    assert 'id="trend-gold-&lt;script&gt;alert(1)&lt;/script&gt;"' in page  # the anchor too
    assert "<td>run&#34;&gt;&lt;script&gt;x()&lt;/script&gt;</td><td>&lt;b&gt;task&lt;/b&gt;</td>" in page
    assert 'data-table="gold.&lt;script&gt;alert(1)&lt;/script&gt;"' in svg_plot(table, [bad])
