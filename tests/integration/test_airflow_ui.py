"""The Airflow UI end to end in a real browser: log in, backfill ``lake_gold_daily`` through Trigger -> Backfill,
see the runs succeed.

Headless Chromium (Debian's ``/usr/bin/chromium``; Playwright's own browser download is not used) drives the
Airflow 3.3 React UI as a user would. The REST client only waits for the runs and finds their ids; everything
the test *does* goes through the UI. The days are 19 and 18 days before today (UTC; two days, one wave of the
DAG's two concurrent runs) so they never overlap the other tests' days (the last 7), and "All Runs"
reprocessing makes a re-run of the test run them again.

Screenshots land in ``.lake/artifacts/`` (``airflow_backfill_form.png``, ``airflow_backfill_done.png``, and
``airflow_ui_failed_<step>.png`` when a step fails).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect, sync_playwright

from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack.airflow_api import GOLD_DAG, AirflowClient
from tests.integration.lakehelpers import CHROMIUM, start_streaming, wait_stream, wait_until

ARTIFACTS = load_settings().state_dir / "artifacts"  # the state dir the stack under test uses
UI_TIMEOUT_MS = 60_000
RUNS_TIMEOUT_S = 15 * 60
ACTIVE_BACKFILL_TIMEOUT_S = 15 * 60


class UIStepError(AssertionError):
    """A UI step failed; the message names the step, the page URL and a screenshot."""


@contextmanager
def ui_step(page: Page, name: str) -> Iterator[None]:
    """Run one UI step; on failure, screenshot the page and say which step failed, where."""
    try:
        yield
    except Exception as exc:
        shot = ARTIFACTS / f"airflow_ui_failed_{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
            where = f"screenshot {shot}"
        except Exception as shot_exc:
            where = f"no screenshot ({shot_exc})"
        raise UIStepError(f"Airflow UI step {name!r} failed at {page.url}; {where}\n{exc}") from exc


@contextmanager
def logged_in_page(settings: Settings) -> Iterator[Page]:
    """A headless Chromium page logged in to the Airflow UI (closed on exit)."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US", timezone_id="UTC")
            context.set_default_timeout(UI_TIMEOUT_MS)
            expect.set_options(timeout=UI_TIMEOUT_MS)
            page = context.new_page()
            _log_in(page, settings)
            yield page
        finally:
            browser.close()


def _unpaused(client: AirflowClient, dag_id: str) -> None:
    """Wait until the DAG is parsed, and unpause it (a new stack's DAGs start paused)."""
    client.wait_for_dag(dag_id)
    if client._call("GET", f"/api/v2/dags/{dag_id}")["is_paused"]:
        client.unpause(dag_id)


def _screenshot(page: Page, name: str) -> Path:
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    assert path.is_file() and path.stat().st_size > 0, f"screenshot {path} missing or empty"
    return path


def _wait_no_active_backfill(client: AirflowClient) -> None:
    """Airflow allows one active backfill per DAG (the UI form refuses a second): wait for another test's."""
    def active() -> list[dict[str, Any]]:
        doc = client._call("GET", f"/api/v2/backfills?dag_id={GOLD_DAG}&limit=100&order_by=-id")
        return [b for b in doc["backfills"] if not b.get("completed_at")]

    wait_until(lambda: not active(), f"{GOLD_DAG} to have no active backfill (the UI cannot start another)",
               ACTIVE_BACKFILL_TIMEOUT_S, every=5, detail=active)


def _wait_backfill_runs(client: AirflowClient, backfill_id: int, days: list[date]) -> dict[str, dict[str, Any]]:
    """Wait until backfill ``backfill_id`` completed; returns {day: run} for the runs whose interval starts on
    ``days``. A run counts only if it ended after the backfill was created (reprocessing reuses old run ids)."""
    want = {d.isoformat() for d in days}
    seen = {"line": "", "completed_at": None}

    def finished() -> dict[str, dict[str, Any]] | None:
        bf = client._call("GET", f"/api/v2/backfills/{backfill_id}")
        created = str(bf["created_at"])
        runs = {r["data_interval_start"][:10]: r for r in client.runs(GOLD_DAG, run_type="backfill")
                if (r.get("data_interval_start") or "")[:10] in want}
        fresh = {d: r for d, r in runs.items() if r.get("end_date") and _ts(r["end_date"]) >= _ts(created)}
        line = ", ".join(f"{d}={fresh[d]['state'] if d in fresh else runs.get(d, {}).get('state', 'missing')}"
                         for d in sorted(want))
        if line != seen["line"]:
            print(f"  UI backfill {backfill_id}: {line}", flush=True)
        seen.update(line=line, completed_at=bf.get("completed_at"))
        if bf.get("completed_at") and set(fresh) == want and all(r["state"] in ("success", "failed")
                                                                 for r in fresh.values()):
            return fresh
        return None

    return wait_until(finished, f"backfill {backfill_id} of {GOLD_DAG} (started in the UI) to finish", RUNS_TIMEOUT_S,
                      every=5, detail=lambda: f"{seen['line']}; completed_at={seen['completed_at']}")


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _log_in(page: Page, settings: Settings) -> None:
    with ui_step(page, "open login page"):
        page.goto(f"{settings.airflow_url.rstrip('/')}/")
        page.wait_for_url(re.compile(r"/auth/login"))
        expect(page.get_by_text("Sign into Airflow")).to_be_visible()
    with ui_step(page, "log in"):
        page.get_by_label("Username").fill(settings.airflow_admin_user)
        page.get_by_label("Password").fill(settings.airflow_admin_password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(lambda url: "/auth/login" not in url)
        expect(page.get_by_role("button", name="User")).to_be_visible()


def _choose_radio(page: Page, dialog: Locator, name: str) -> None:
    """Click a radio card (the <label> around a visually hidden radio input) and check it took."""
    radio = dialog.get_by_role("radio", name=name, exact=True)
    dialog.locator("label").filter(has=page.get_by_role("radio", name=name, exact=True)).click()
    expect(radio).to_be_checked()


def _pick_datetime(page: Page, dialog: Locator, label: str, day: date) -> None:
    """Fill one of the backfill form's date-time pickers (a popover with Date and Time text inputs, in UTC)."""
    field = dialog.get_by_role("group").filter(has=page.get_by_text(label, exact=True))
    field.get_by_test_id("datetime-input").click()
    popover = page.get_by_role("dialog").filter(has=page.get_by_placeholder("YYYY/MM/DD"))
    expect(popover).to_be_visible()
    expect(popover.get_by_text("UTC", exact=True)).to_be_visible()
    popover.get_by_placeholder("YYYY/MM/DD").fill(day.strftime("%Y/%m/%d"))
    popover.get_by_placeholder("HH:mm").fill("00:00")
    page.keyboard.press("Escape")  # closes only the popover
    expect(popover).to_be_hidden()
    expect(field).to_contain_text(f"{day.strftime('%b %d, %Y')} 00:00")


def _start_backfill(page: Page, settings: Settings, first: date, last: date) -> int | None:
    """Trigger -> Backfill on the DAG page; returns the id of the backfill the form created, or None when Airflow
    refused it because another backfill of the DAG is active (HTTP 409)."""
    base = settings.airflow_url.rstrip("/")
    with ui_step(page, "open DAG page"):
        page.goto(f"{base}/dags/{GOLD_DAG}")
        expect(page.get_by_role("button", name="Trigger Dag")).to_be_visible()
    with ui_step(page, "open Trigger dialog"):
        page.get_by_role("button", name="Trigger Dag").click()
        dialog = page.get_by_role("dialog").filter(has_text=f"- {GOLD_DAG}")
        expect(dialog).to_be_visible()
    with ui_step(page, "choose Backfill"):
        _choose_radio(page, dialog, "Backfill")
        expect(dialog.get_by_text(f"Run Backfill - {GOLD_DAG}")).to_be_visible()
    with ui_step(page, "fill date range From"):
        _pick_datetime(page, dialog, "From", first)
    with ui_step(page, "fill date range To"):
        _pick_datetime(page, dialog, "To", last)
    with ui_step(page, "choose reprocess behaviour All Runs"):
        _choose_radio(page, dialog, "All Runs")
    with ui_step(page, "set max active runs"):
        max_runs = dialog.get_by_role("spinbutton")
        expect(max_runs).to_have_count(1)
        max_runs.fill("2")
        expect(max_runs).to_have_value("2")
        expect(dialog.get_by_role("checkbox", name="Run Backwards")).not_to_be_checked()
    with ui_step(page, "dry run shows 3 runs"):
        ndays = (last - first).days + 1
        expect(dialog.get_by_text(f"{ndays} runs will be triggered.")).to_be_visible()
        submit = dialog.get_by_role("button", name="Run Backfill")
        expect(submit).to_be_enabled()
    _screenshot(page, "airflow_backfill_form.png")
    with ui_step(page, "submit Run Backfill"):
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and r.url.split("?")[0].endswith("/api/v2/backfills")) as resp_info:
            submit.click()
        resp = resp_info.value
        if resp.status == 409:  # another test's backfill of this DAG started since we looked: try again later
            print(f"  UI backfill refused, another backfill is active: {resp.text()[:300]}", flush=True)
            return None
        assert resp.ok, f"POST /api/v2/backfills from the UI answered HTTP {resp.status}: {resp.text()[:800]}"
        backfill = resp.json()
        expect(dialog).to_be_hidden()
        expect(page.get_by_text("Backfill in progress:")).to_be_visible()
    assert backfill["from_date"].startswith(first.isoformat()) and backfill["to_date"].startswith(last.isoformat()), backfill
    assert backfill["reprocess_behavior"] == "completed" and backfill["max_active_runs"] == 2, backfill
    return int(backfill["id"])


def _check_runs_in_ui(page: Page, settings: Settings, runs: dict[str, dict[str, Any]], first: date, last: date) -> None:
    """The DAG's runs list (filtered to the backfill's run_after range) shows each run as a successful backfill."""
    after_gte = (first + timedelta(days=1)).isoformat()
    after_lte = (last + timedelta(days=1)).isoformat()
    url = (f"{settings.airflow_url.rstrip('/')}/dags/{GOLD_DAG}/runs?run_type=backfill"
           f"&run_after_gte={after_gte}T00:00:00Z&run_after_lte={after_lte}T00:00:00Z")
    with ui_step(page, "runs list shows the backfill runs as success"):
        page.goto(url)
        expect(page.get_by_text(f"{len(runs)} Dag Runs", exact=True)).to_be_visible()
        for day, run in sorted(runs.items()):
            row = page.get_by_role("row").filter(has=page.get_by_role("link", name=run["dag_run_id"], exact=True))
            expect(row, f"run {run['dag_run_id']} (day {day}) in the runs list").to_have_count(1)
            expect(row.get_by_test_id("state-badge")).to_have_text("Success")
            expect(row).to_contain_text("Backfill")


@pytest.fixture(scope="module")
def lake_tables(stack: Settings) -> Settings:
    """The gold tasks read bronze/silver: the connector and the streaming app must have created them (this file
    runs first in a fresh state dir)."""
    start_streaming()
    wait_stream(600)
    return stack


@pytest.mark.extended  # the gold backfill is proved by test_gold (REST); the browser path by the replay trigger below
def test_backfill_from_the_ui(lake_tables: Settings) -> None:
    stack = lake_tables
    t0 = time.monotonic()
    today = datetime.now(UTC).date()
    first, last = today - timedelta(days=19), today - timedelta(days=18)
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("airflow_*.png"):
        stale.unlink()

    client = AirflowClient(stack)
    _unpaused(client, GOLD_DAG)

    with logged_in_page(stack) as page:
        backfill_id = None
        for _attempt in range(3):  # Airflow runs one backfill per DAG at a time; other tests start theirs
            _wait_no_active_backfill(client)
            backfill_id = _start_backfill(page, stack, first, last)
            if backfill_id is not None:
                break
        assert backfill_id is not None, f"Airflow kept refusing the UI's backfill of {GOLD_DAG} (another active)"
        print(f"  UI backfill {backfill_id}: {first}..{last} started from the form", flush=True)

        runs = _wait_backfill_runs(client, backfill_id, days)
        bad = {d: r["state"] for d, r in runs.items() if r["state"] != "success"}
        assert not bad, f"backfill {backfill_id} started in the UI: runs not successful {bad} (see the task logs)"

        _check_runs_in_ui(page, stack, runs, first, last)
        done = _screenshot(page, "airflow_backfill_done.png")

    form = ARTIFACTS / "airflow_backfill_form.png"
    for shot in (form, done):
        assert shot.is_file() and shot.stat().st_size > 0, f"screenshot {shot} missing or empty"
    print(f"  UI backfill test took {time.monotonic() - t0:.0f} s; screenshots {form}, {done}", flush=True)


REPLAY_DAG = "lake_replay"


def _trigger_replay(page: Page, settings: Settings, tables: list[str]) -> str:
    """Trigger -> Single Run of ``lake_replay`` with ``tables`` in its params form (``switch`` left false: a dry run
    that builds, checks and diffs only); returns the run id the form created. The form's fields have the ids
    ``element_<param>`` (Airflow 3.3's trigger form); an array of strings is a textarea, one item per line."""
    base = settings.airflow_url.rstrip("/")
    with ui_step(page, "open lake_replay page"):
        page.goto(f"{base}/dags/{REPLAY_DAG}")
        expect(page.get_by_role("button", name="Trigger Dag")).to_be_visible()
    with ui_step(page, "open lake_replay Trigger dialog"):
        page.get_by_role("button", name="Trigger Dag").click()
        dialog = page.get_by_role("dialog").filter(has_text=f"- {REPLAY_DAG}")
        expect(dialog).to_be_visible()
        _choose_radio(page, dialog, "Single Run")
    with ui_step(page, "fill the tables param"):
        field = dialog.locator("#element_tables")
        expect(field).to_be_visible()
        field.fill("\n".join(tables))
        expect(field).to_have_value("\n".join(tables))
        expect(dialog.locator("#element_until")).to_have_value("")
    _screenshot(page, "airflow_replay_form.png")
    with ui_step(page, "submit Trigger"):
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and r.url.split("?")[0].endswith(f"/dags/{REPLAY_DAG}/dagRuns")) as resp_info:
            dialog.get_by_role("button", name="Trigger", exact=True).click()
        resp = resp_info.value
        assert resp.ok, f"POST dagRuns from the UI answered HTTP {resp.status}: {resp.text()[:800]}"
        run = resp.json()
    assert run["conf"].get("tables") == tables and run["conf"].get("switch") is False, run["conf"]
    return str(run["dag_run_id"])


def test_trigger_lake_replay_from_the_ui_with_params(lake_tables: Settings) -> None:
    """The replay DAG triggered in the browser with its params: the run (a dry replay of silver.products into its
    shadow) succeeds and its task log carries the replay's report."""
    stack = lake_tables
    client = AirflowClient(stack)
    _unpaused(client, REPLAY_DAG)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with logged_in_page(stack) as page:
        run_id = _trigger_replay(page, stack, ["silver.products"])

    def finished() -> dict[str, Any] | None:
        runs = [r for r in client.runs(REPLAY_DAG) if r["dag_run_id"] == run_id]
        return runs[0] if runs and runs[0]["state"] in ("success", "failed") else None

    run = wait_until(finished, f"{REPLAY_DAG} run {run_id} (triggered in the UI) to finish", RUNS_TIMEOUT_S, every=5)
    log = client.task_log(REPLAY_DAG, run_id, "replay")
    assert run["state"] == "success", f"{REPLAY_DAG} run {run_id}: {run['state']}\n{log[-3000:]}"
    assert "silver.products <- bronze.shop__public__products" in log and "dry run" in log, log[-3000:]
