"""spark_jobs.stack.airflow_api against a stand-in for Airflow's REST API (no Airflow): which answers are waited out
(a DAG not parsed yet, another backfill running) and which fail at once, and the backfill wait."""

from __future__ import annotations

import time
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest

from spark_jobs.settings import load_settings
from spark_jobs.stack.airflow_api import AirflowApiError, AirflowClient, AirflowError

Answer = tuple[int, Any]


class FakeAirflow:
    """``httpx.request`` for the client: a token for anyone, then the queued answers per (method, path); the
    last answer of a queue repeats."""

    def __init__(self, answers: dict[tuple[str, str], list[Answer]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []

    def __call__(self, method: str, url: str, **_: Any) -> httpx.Response:
        path = httpx.URL(url).raw_path.decode()
        if path == "/auth/token":
            return httpx.Response(200, json={"access_token": "jwt"})
        self.calls.append((method, path))
        queue = self.answers[(method, path)]
        status, body = queue.pop(0) if len(queue) > 1 else queue[0]
        return httpx.Response(status, text=body) if isinstance(body, str) else httpx.Response(status, json=body)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between tries, without waiting."""
    out: list[float] = []
    monkeypatch.setattr(time, "sleep", out.append)
    return out


def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[tuple[str, str], list[Answer]]
           ) -> tuple[AirflowClient, FakeAirflow]:
    fake = FakeAirflow(answers)
    monkeypatch.setattr(httpx, "request", fake)
    return AirflowClient(load_settings({"LAKE_STATE_DIR": str(tmp_path)})), fake


DAG = "/api/v2/dags/lake_gold_daily"
NOT_FOUND = (404, {"detail": "The Dag with ID: `lake_gold_daily` was not found"})


def test_wait_for_dag_waits_while_airflow_answers_404(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       slept: list[float]) -> None:
    api, fake = client(tmp_path, monkeypatch, {("GET", DAG): [NOT_FOUND, NOT_FOUND, (200, {"dag_id": "x"})]})
    api.wait_for_dag("lake_gold_daily")
    assert fake.calls == [("GET", DAG)] * 3 and slept == [2, 2]


def test_wait_for_dag_gives_up_at_its_timeout_naming_the_last_answer(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    api, _ = client(tmp_path, monkeypatch, {("GET", DAG): [NOT_FOUND]})
    with pytest.raises(AirflowError, match=r"^DAG lake_gold_daily not known to Airflow after 0 s: Airflow GET "
                                           r"http://\S+/api/v2/dags/lake_gold_daily: HTTP 404: .*was not found"):
        api.wait_for_dag("lake_gold_daily", timeout=0)


def test_wait_for_dag_fails_at_once_on_another_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     slept: list[float]) -> None:
    # Decided on the status code: a 500 whose answer happens to say "HTTP 404" is not a 404.
    api, fake = client(tmp_path, monkeypatch, {("GET", DAG): [(500, "internal error: upstream said HTTP 404")]})
    with pytest.raises(AirflowError, match="HTTP 500: internal error: upstream said HTTP 404") as failed:
        api.wait_for_dag("lake_gold_daily")
    assert fake.calls == [("GET", DAG)] and slept == []
    cause = failed.value.__cause__
    assert isinstance(cause, AirflowApiError) and cause.status == 500 and cause.body.startswith("internal error")


def test_an_http_error_carries_its_status_and_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api, _ = client(tmp_path, monkeypatch, {("GET", DAG): [NOT_FOUND]})
    with pytest.raises(AirflowApiError) as failed:
        api._call("GET", DAG)
    assert failed.value.status == 404 and "was not found" in failed.value.body
    assert str(failed.value).startswith("Airflow GET http://") and ": HTTP 404: " in str(failed.value)
    assert isinstance(failed.value, AirflowError)  # callers that catch AirflowError still do


RUNNING = (409, {"detail": "There is already a running backfill for dag lake_gold_daily"})


def test_backfill_waits_while_another_backfill_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    slept: list[float], caplog: pytest.LogCaptureFixture) -> None:
    api, fake = client(tmp_path, monkeypatch, {("POST", "/api/v2/backfills"): [RUNNING, (200, {"id": 7})]})
    with caplog.at_level("INFO", logger="spark_jobs.stack.airflow_api"):
        assert api.backfill("lake_gold_daily", date(2024, 1, 1), date(2024, 1, 2)) == {"id": 7}
    assert len(fake.calls) == 2 and slept == [10]
    assert "another backfill of lake_gold_daily is running; waiting for it to finish" in caplog.text


def test_backfill_gives_up_after_wait_running_and_fails_at_once_on_another_conflict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slept: list[float]) -> None:
    api, _ = client(tmp_path, monkeypatch, {("POST", "/api/v2/backfills"): [RUNNING]})
    with pytest.raises(AirflowError, match=r"HTTP 409: .*already a running backfill"):
        api.backfill("lake_gold_daily", date(2024, 1, 1), date(2024, 1, 2), wait_running=0)
    api, fake = client(tmp_path, monkeypatch, {("POST", "/api/v2/backfills"): [(409, {"detail": "other"})]})
    with pytest.raises(AirflowError, match="HTTP 409"):
        api.backfill("lake_gold_daily", date(2024, 1, 1), date(2024, 1, 2))
    assert len(fake.calls) == 1 and slept == []
    # The phrase in another status's answer is not the conflict either.
    api, fake = client(tmp_path, monkeypatch, {("POST", "/api/v2/backfills"): [(400, {"detail": "HTTP 409: "
                                                                                      "already a running backfill"})]})
    with pytest.raises(AirflowApiError, match="HTTP 400"):
        api.backfill("lake_gold_daily", date(2024, 1, 1), date(2024, 1, 2))
    assert len(fake.calls) == 1 and slept == []


def _run(day: str, state: str) -> dict[str, str]:
    return {"data_interval_start": f"{day}T00:00:00Z", "queued_at": "2024-02-01T10:00:05Z", "state": state}


def test_wait_backfill_polls_until_every_day_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   slept: list[float]) -> None:
    created = {"created_at": "2024-02-01T10:00:00Z", "completed_at": None}
    runs = "/api/v2/dags/lake_gold_daily/dagRuns?run_type=backfill&order_by=id&limit=100&offset=0"
    api, _ = client(tmp_path, monkeypatch, {
        ("GET", "/api/v2/backfills/7"): [(200, created), (200, created), (200, {**created, "completed_at": "x"})],
        ("GET", runs): [(200, {"dag_runs": [_run("2024-01-01", "running")]}),
                        (200, {"dag_runs": [_run("2024-01-01", "failed")]})],
    })
    seen: list[dict[str, str]] = []
    states = api.wait_backfill("lake_gold_daily", 7, [date(2024, 1, 1)], progress=False, on_states=seen.append)
    assert states == {"2024-01-01": "failed"} and slept == [3, 3]
    assert seen[0] == {"2024-01-01": "running"}
    api, _ = client(tmp_path, monkeypatch, {("GET", "/api/v2/backfills/7"): [(200, created)],
                                            ("GET", runs): [(200, {"dag_runs": [_run("2024-01-01", "running")]})]})
    with pytest.raises(AirflowError, match="backfill 7 of lake_gold_daily not finished after 0 s: 2024-01-01=running"):
        api.wait_backfill("lake_gold_daily", 7, [date(2024, 1, 1)], timeout=0)


def test_wait_backfill_follows_the_run_a_backfill_left_a_day_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                slept: list[float], caplog: pytest.LogCaptureFixture
                                                                ) -> None:
    """Unpausing the DAG starts the scheduled run of the latest interval; a backfill created meanwhile skips that day
    (Airflow leaves a day whose run is in flight to that run). The wait follows that run to its end instead of
    waiting for a backfill run that never comes (the serving test once hung 15 minutes on it); a day no run
    covers once the backfill completed is 'skipped', not waited for."""
    import logging

    done = {"created_at": "2024-02-01T10:00:00Z", "completed_at": "2024-02-01T10:05:00Z"}
    backfill_runs = "/api/v2/dags/lake_gold_daily/dagRuns?run_type=backfill&order_by=id&limit=100&offset=0"
    every_run = "/api/v2/dags/lake_gold_daily/dagRuns?order_by=id&limit=100&offset=0"
    scheduled = {**_run("2024-01-02", "running"), "run_type": "scheduled", "queued_at": "2024-02-01T09:59:00Z"}
    older = {**_run("2024-01-02", "failed"), "run_type": "manual", "queued_at": "2024-01-03T00:00:00Z"}
    api, _ = client(tmp_path, monkeypatch, {
        ("GET", "/api/v2/backfills/7"): [(200, done)],
        ("GET", backfill_runs): [(200, {"dag_runs": [{**_run("2024-01-01", "success"), "run_type": "backfill"}]})],
        ("GET", every_run): [(200, {"dag_runs": [older, scheduled]}),
                             (200, {"dag_runs": [older, {**scheduled, "state": "success"}]})],
    })
    with caplog.at_level(logging.INFO):
        states = api.wait_backfill("lake_gold_daily", 7, [date(2024, 1, 1), date(2024, 1, 2)])
    assert states == {"2024-01-01": "success", "2024-01-02": "success"} and slept == [3]
    assert "2024-01-02=running (scheduled run: the backfill left the day to it)" in caplog.text
    api, _ = client(tmp_path, monkeypatch, {("GET", "/api/v2/backfills/7"): [(200, done)],
                                            ("GET", backfill_runs): [(200, {"dag_runs": []})],
                                            ("GET", every_run): [(200, {"dag_runs": []})]})
    assert api.wait_backfill("lake_gold_daily", 7, [date(2024, 1, 3)], progress=False) == {"2024-01-03": "skipped"}


def test_runs_reads_every_page_so_the_newest_runs_are_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          slept: list[float]) -> None:
    """The API answers its oldest runs first, a page at a time: a backfill whose runs come after the first page
    (a lake with months of runs) is still waited out, not polled forever."""
    old = [{**_run(f"2023-{m:02d}-{d:02d}", "success"), "run_type": "backfill", "queued_at": "2023-12-31T00:00:00Z"}
           for m in range(1, 13) for d in range(1, 18)]  # 204 runs of older backfills
    new = {**_run("2024-01-01", "success"), "run_type": "backfill"}
    runs = [*old, new]
    page = "/api/v2/dags/lake_gold_daily/dagRuns?run_type=backfill&order_by=id&limit=100&offset={}"
    done = {"created_at": "2024-02-01T10:00:00Z", "completed_at": "2024-02-01T10:05:00Z"}
    api, fake = client(tmp_path, monkeypatch, {
        ("GET", "/api/v2/backfills/7"): [(200, done)],
        **{("GET", page.format(at)): [(200, {"dag_runs": runs[at:at + 100], "total_entries": len(runs)})]
           for at in (0, 100, 200)},
    })
    assert api.wait_backfill("lake_gold_daily", 7, [date(2024, 1, 1)], progress=False) == {"2024-01-01": "success"}
    assert [path for _, path in fake.calls if "dagRuns" in path] == [page.format(at) for at in (0, 100, 200)]
    assert len(api.runs("lake_gold_daily", run_type="backfill")) == 205


def test_runs_follows_the_total_when_the_server_caps_a_page_below_the_ask(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An Airflow with ``[api] maximum_page_limit`` under 100 answers fewer runs than asked: not the last page."""
    runs = [_run(f"2024-01-{d:02d}", "success") for d in range(1, 31)]
    page = "/api/v2/dags/lake_gold_daily/dagRuns?order_by=id&limit=100&offset={}"
    api, fake = client(tmp_path, monkeypatch, {
        ("GET", page.format(at)): [(200, {"dag_runs": runs[at:at + 10], "total_entries": len(runs)})]
        for at in (0, 10, 20)})
    assert api.runs("lake_gold_daily") == runs
    assert len(fake.calls) == 3
