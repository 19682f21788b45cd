"""The dq-docs server on its own (no stack): the login on every request, pages served with local assets only,
and a real browser that sees a styled, filled validation page without a request leaving the machine.

The site is rendered by GX itself (a pandas validation with failing e-mails and names, through
:func:`spark_jobs.quality.docs.build_data_docs`), so a GX upgrade that changes its pages is tested here. The
assets are the ones ``make setup`` installed in the cache (``LAKE_CACHE_DIR``).
"""

from __future__ import annotations

import base64
import os
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.quality import docs, docs_assets, docs_server
from spark_jobs.quality.trend import TREND_PAGE, Point, link_trend, render_trend_page
from spark_jobs.settings import load_settings

CHROMIUM = "/usr/bin/chromium"
USER, PASSWORD = "lake", "test-password-1"
#: Sample failing rows GX shows on the validation page: what the login protects.
BAD_EMAIL, BAD_NAME_ROW = "jane.doe@example", "not-a-mail"


@dataclass(frozen=True)
class Site:
    base: str
    root: Path
    validation_page: str  # URL path of the rendered validation page


def _render(state_dir: Path) -> str:
    """A GX validation of a small pandas frame (two expectations fail) stored and rendered into ``state_dir``'s
    Data Docs; -> the validation page's URL path."""
    import great_expectations as gx
    import pandas as pd  # type: ignore[import-untyped]
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import DataContextConfig, InMemoryStoreBackendDefaults

    settings = load_settings({"LAKE_STATE_DIR": str(state_dir)}, dotenv=False)
    ctx = gx.get_context(mode="ephemeral", project_config=DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False)))
    bd = ctx.data_sources.add_pandas(name="t").add_dataframe_asset(name="customers") \
        .add_batch_definition_whole_dataframe("whole")
    expect: Any = gx.expectations  # its classes are not re-exported for mypy
    suite = ctx.suites.add(gx.ExpectationSuite(name="silver.customers", expectations=[
        expect.ExpectColumnValuesToMatchRegex(column="email", regex=r"^[^@]+@[^@]+\.[a-z]+$"),
        expect.ExpectColumnValuesToNotBeNull(column="full_name"),
        expect.ExpectColumnValuesToBeBetween(column="age", min_value=0, max_value=120),
    ]))
    vd = ctx.validation_definitions.add(gx.ValidationDefinition(name="v", data=bd, suite=suite))
    frame = pd.DataFrame({"customer_id": [1, 2, 3, 4], "email": ["a@x.io", BAD_NAME_ROW, BAD_EMAIL, "c@y.org"],
                          "full_name": ["Ann Smith", None, "Jane Doe", "Carl Berg"], "age": [30, 40, 200, 50]})
    validation = vd.run(batch_parameters={"dataframe": frame},
                        run_id=RunIdentifier(run_name="run-1", run_time=datetime(2026, 3, 2, tzinfo=UTC)),
                        result_format={"result_format": "SUMMARY", "unexpected_index_column_names": ["customer_id"]})
    url = docs.build_data_docs(settings, suite, validation, "dag.task")
    assert url
    site = docs.data_docs_dir(settings)
    point = Point(datetime(2026, 3, 2, tzinfo=UTC), "run-1", "task", 3, 1, 2, 0)
    (site / TREND_PAGE).write_text(render_trend_page({"silver.customers": [point]}, datetime.now(UTC)),
                                   encoding="utf-8")
    link_trend(site)
    return "/" + url.split("/", 3)[3]


@pytest.fixture(scope="module")
def vendored() -> Path:
    """The assets ``make setup`` installed (``<cache dir>/web/npm``)."""
    root = docs_assets.assets_dir(load_settings().cache_dir)
    missing = docs_assets.missing_files(root)
    if missing:
        pytest.fail(f"Data Docs assets missing from {root} ({missing[0]}, ...): run `make setup` "
                    f"(or python -m spark_jobs.quality.docs_assets install --cache-dir <cache dir>)")
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, vendored: Path) -> Iterator[Site]:
    state = tmp_path_factory.mktemp("state")
    page = _render(state)
    root = docs.data_docs_dir(load_settings({"LAKE_STATE_DIR": str(state)}, dotenv=False))
    server = docs_server.make_server(root, vendored, "127.0.0.1", 0, USER, PASSWORD)
    thread = threading.Thread(target=server.serve_forever, name="dq-docs-test", daemon=True)
    thread.start()
    try:
        yield Site(f"http://127.0.0.1:{server.server_address[1]}", root, page)
    finally:
        server.shutdown()
        server.server_close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _get(url: str, auth: str | None = None, method: str = "GET") -> tuple[int, Message, bytes]:
    """-> status, headers (names in any case), body."""
    request = urllib.request.Request(url, method=method, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def _pages(root: Path) -> list[str]:
    return sorted("/" + p.relative_to(root).as_posix() for p in root.rglob("*.html"))


# ------------------------------------------------------------------------------------------ the login


@pytest.mark.parametrize("auth", [None, _basic(USER, "wrong"), _basic("admin", PASSWORD), _basic(USER, ""),
                                  "Bearer " + PASSWORD, "Basic !!!", "Basic " + base64.b64encode(b"lake").decode()])
def test_without_the_login_every_path_is_401_and_shows_nothing(site: Site, auth: str | None) -> None:
    paths = [*_pages(site.root), "/", "/static/images/logo-long.png",
             docs_assets.BOOTSTRAP.url_path("dist/css/bootstrap.min.css"), "/nowhere", "/validations/"]
    assert site.validation_page in paths and f"/{TREND_PAGE}" in paths
    for path in paths:
        for method in ("GET", "HEAD"):
            status, headers, body = _get(site.base + path, auth, method)
            assert status == 401, (path, method, status)
            assert headers["WWW-Authenticate"].startswith('Basic realm="Lakestream Data Docs"')
            assert BAD_EMAIL.encode() not in body and b"silver.customers" not in body and b"<html" not in body


def test_the_login_opens_every_page(site: Site) -> None:
    auth = _basic(USER, PASSWORD)
    status, headers, body = _get(site.base + site.validation_page, auth)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-store" and "default-src 'self'" in headers["Content-Security-Policy"]
    assert BAD_EMAIL.encode() in body  # the failing sample the login protects
    assert _get(site.base + "/", auth)[0] == 200 and b"silver.customers" in _get(site.base + "/", auth)[2]


def test_check_basic_auth() -> None:
    ok = docs_server.check_basic_auth
    assert ok(_basic("lake", "pw:with:colons"), "lake", "pw:with:colons")
    assert ok("basic " + base64.b64encode(b"lake:pw").decode(), "lake", "pw")
    assert not ok(_basic("lake", ""), "lake", "")  # an empty configured password never lets anyone in
    assert not ok(None, "lake", "pw") and not ok("", "lake", "pw") and not ok("Basic", "lake", "pw")
    assert not ok("Basic " + base64.b64encode("lake:pw\u00e9".encode()).decode(), "lake", "pw")


def test_no_server_without_a_password(tmp_path: Path) -> None:
    import click

    with pytest.raises(click.ClickException, match="LAKE_DQ_DOCS_PASSWORD"):
        docs_server.make_server(tmp_path, tmp_path, "127.0.0.1", 0, USER, "")


# ------------------------------------------------------------------------------------------ offline pages


def test_no_served_page_loads_anything_from_another_machine(site: Site) -> None:
    # Every page on disk, as served: the rewrite is total (any external asset URL left fails here).
    auth = _basic(USER, PASSWORD)
    pages = _pages(site.root)
    assert len(pages) >= 4  # index, suite, validation, trend
    local: set[str] = set()
    for path in pages:
        on_disk = (site.root / path.lstrip("/")).read_text(encoding="utf-8")
        status, _, body = _get(site.base + path, auth)
        text = body.decode("utf-8")
        assert status == 200, path
        assert docs_assets.external_asset_urls(text) == [], path
        assert "/static/vendor/missing/" not in text, path
        if path != f"/{TREND_PAGE}":  # GX's pages load CDN assets on disk; the served ones do not
            assert docs_assets.external_asset_urls(on_disk), path
            assert docs_assets.BOOTSTRAP.url_path("dist/css/bootstrap.min.css") in text, path
        local |= set(re.findall(r'(?:src|href)="(/static/[^"?#]+)', text))
    # Every asset the pages name is served, with the type a browser checks (nosniff).
    types = {".css": "text/css", ".js": "text/javascript", ".png": "image/png"}
    assert len(local) >= 16, sorted(local)
    for path in sorted(local):
        status, headers, body = _get(site.base + path, auth)
        assert status == 200 and body, path
        want = types.get(Path(path).suffix)
        assert want is None or headers["Content-Type"].startswith(want), (path, headers["Content-Type"])


def test_vendored_scripts_match_the_templates_subresource_integrity(site: Site, vendored: Path) -> None:
    # The templates pin popper and bootstrap's scripts with integrity=sha384-...: the local copies must be the
    # same bytes, or the browser refuses them.
    import hashlib

    text = _get(site.base + site.validation_page, _basic(USER, PASSWORD))[2].decode()
    pinned = re.findall(r'<script src="/static/vendor/([^"]+)" integrity="sha384-([^"]+)"', text)
    assert len(pinned) == 2
    for rel, digest in pinned:
        assert base64.b64encode(hashlib.sha384((vendored / rel).read_bytes()).digest()).decode() == digest, rel


def test_paths_stay_inside_the_site_and_folders_are_not_listed(site: Site, tmp_path: Path) -> None:
    auth = _basic(USER, PASSWORD)
    assert _get(site.base + "/validations/", auth)[0] == 404
    for path in ("/../../../../etc/passwd", "/static/vendor/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                 "/static/vendor/..%2f..%2f..%2fetc%2fpasswd"):
        status, _, body = _get(site.base + path, auth)
        assert status == 404 and b"root:" not in body, path


# ------------------------------------------------------------------------------------------ in a browser


def test_a_browser_shows_the_validation_page_styled_and_filled_from_this_machine_only(site: Site) -> None:
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} not found: `make setup` installs Debian's chromium as root (apt-get install chromium)")
    requests: list[str] = []
    failed: list[str] = []
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            context = browser.new_context(http_credentials={"username": USER, "password": PASSWORD},
                                          viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(30_000)
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failed.append(f"{r.url}: {r.failure}"))
            page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text} ({m.location.get('url')})")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))

            page.goto(site.base + site.validation_page, wait_until="networkidle")
            # bootstrap-table's script turned the results table into its widget, rows filled.
            page.locator("div.bootstrap-table").first.wait_for()
            rows = page.locator("table.table tbody tr")
            assert rows.count() >= 3
            assert page.locator("td", has_text=BAD_EMAIL).count() >= 1
            # bootstrap.min.css is what styles them: a .table-sm cell gets its padding (.3rem) and top border
            # (1px solid #dee2e6); unstyled, a cell has 1px padding and no border.
            cell = page.locator("table.table.table-sm tbody td").first
            style = cell.evaluate("e => { const s = getComputedStyle(e);"
                                  " return [s.paddingTop, s.borderTopColor, s.borderTopStyle]; }")
            assert style == ["4.8px", "rgb(222, 226, 230)", "solid"], style
            navbar = page.locator("nav.navbar").first.evaluate("e => getComputedStyle(e).display")
            assert navbar == "flex"  # bootstrap's .navbar
            # font-awesome's web fonts came from the stack too.
            assert page.evaluate("document.fonts.check('900 16px \"Font Awesome 6 Free\"')")

            page.goto(site.base + "/index.html", wait_until="networkidle")
            index_rows = page.locator("table.ge-index-page-validation-results-table tbody tr[data-href]")
            index_rows.first.wait_for()  # the index's table is filled by bootstrap-table's script
            assert index_rows.count() >= 1
            page.goto(site.base + f"/{TREND_PAGE}", wait_until="networkidle")
            assert page.locator("svg.dq-trend").count() == 1
        finally:
            browser.close()
    assert failed == [] and errors == [], failed + errors
    assert requests and all(docs_assets.is_loopback_url(u) and u.startswith(site.base) for u in requests), \
        [u for u in requests if not u.startswith(site.base)]
    assert any("/static/vendor/vega@5.33.1/" in u for u in requests)
