"""Airflow 3 REST API client for the lake's own commands: unpause a DAG, start a backfill, wait for its runs.

Authenticates as the stack's admin (``POST /auth/token`` with the generated password, then a bearer
JWT), exactly what a user's script would do. ``lake gold backfill`` and the integration tests use it;
the same backfill can be started from the UI (Trigger -> Backfill).
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import Any

import httpx

from spark_jobs.settings import Settings
from spark_jobs.waits import poll_until, retrying

log = logging.getLogger(__name__)

GOLD_DAG = "lake_gold_daily"
REPROCESS = ("none", "failed", "completed")


class AirflowError(RuntimeError):
    """An Airflow API call failed; the message names the URL, the status and Airflow's answer."""


class AirflowApiError(AirflowError):
    """Airflow answered with an HTTP error: ``status`` is its code, ``body`` its answer (what to retry is decided on
    these, not on the message)."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


def _status_is(exc: BaseException, status: int) -> bool:
    return isinstance(exc, AirflowApiError) and exc.status == status


#: The day states :meth:`AirflowClient.wait_backfill` ends on (``skipped``: no run covers the day).
ENDED = ("success", "failed", "skipped")
#: Runs asked for per request of :meth:`AirflowClient.runs` (Airflow's ``maximum_page_limit`` is 100 by default).
RUNS_PAGE = 100


class AirflowClient:
    def __init__(self, settings: Settings, timeout: float = 30.0) -> None:
        self.base = settings.airflow_url.rstrip("/")
        self.user = settings.airflow_admin_user
        self.password = settings.airflow_admin_password
        self.timeout = timeout
        self._token: str | None = None

    def _call(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        url = f"{self.base}{path}"
        if not url.startswith(("http://", "https://")):
            raise AirflowError(f"refusing to open non-HTTP URL {url!r}")
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        try:
            response = httpx.request(method, url, json=body, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise AirflowError(f"Airflow at {self.base} is not reachable ({exc}); is the stack up? "
                               "(`lake stack status`)") from exc
        if response.is_error:
            raise AirflowApiError(f"Airflow {method} {url}: HTTP {response.status_code}: {response.text[:800]}",
                                  response.status_code, response.text)
        return response.json() if response.content else None

    def token(self) -> str:
        if self._token is None:
            doc = self._call("POST", "/auth/token", {"username": self.user, "password": self.password}, auth=False)
            self._token = str(doc["access_token"])
        return self._token

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Wait until the DAG processor has parsed ``dag_id`` (a fresh stack parses every 30 s)."""
        try:
            retrying(lambda: self._call("GET", f"/api/v2/dags/{dag_id}"), lambda exc: _status_is(exc, 404),
                     every=2, timeout=timeout)
        except AirflowError as exc:
            raise AirflowError(f"DAG {dag_id} not known to Airflow after {timeout:.0f} s: {exc}") from exc

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def backfill(self, dag_id: str, first: date, last: date, reprocess: str = "none",
                 max_active_runs: int = 2, wait_running: float = 1800) -> dict[str, Any]:
        """``POST /api/v2/backfills`` for the runs whose data interval starts on days ``first``..``last``."""
        if reprocess not in REPROCESS:
            raise ValueError(f"reprocess {reprocess!r}: choose one of {', '.join(REPROCESS)}")
        body = {"dag_id": dag_id, "from_date": f"{first.isoformat()}T00:00:00Z",
                "to_date": f"{last.isoformat()}T00:00:00Z", "reprocess_behavior": reprocess,
                "max_active_runs": max_active_runs, "run_backwards": False, "dag_run_conf": {}}
        # Airflow runs one backfill per DAG at a time (HTTP 409 otherwise): wait for the running one.
        def another_running(exc: BaseException) -> bool:
            return isinstance(exc, AirflowApiError) and exc.status == 409 and "already a running backfill" in exc.body

        return dict(retrying(lambda: self._call("POST", "/api/v2/backfills", body), another_running,
                             every=10, timeout=wait_running,
                             on_retry=lambda _: log.info(f"  another backfill of {dag_id} is running; "
                                                         "waiting for it to finish")))

    def runs(self, dag_id: str, **query: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id`` that ``query`` (the API's filters, e.g. ``run_type``) selects, oldest first.

        Read page by page: the API answers at most a page, its oldest runs first, so a DAG with more runs than
        that (a lake some months old, a backfill of more days) would hide its newest ones, and a wait for them
        would never end."""
        out: list[dict[str, Any]] = []
        while True:
            q = urllib.parse.urlencode({**query, "order_by": "id", "limit": RUNS_PAGE, "offset": len(out)})
            doc = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns?{q}")
            page = list(doc["dag_runs"])
            out.extend(page)
            # The server may cap a page below RUNS_PAGE (``[api] maximum_page_limit``): its total decides the end.
            if not page or len(out) >= int(doc.get("total_entries", 0)):
                return out

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"])

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int | None = None) -> str:
        """The task's log (its latest try unless ``try_number``) as Airflow's API serves it."""
        rid = urllib.parse.quote(run_id, safe="")
        if try_number is None:
            tis = [t for t in self.task_instances(dag_id, rid) if t["task_id"] == task_id]
            try_number = int(tis[0].get("try_number") or 1) if tis else 1
        doc = self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances/{task_id}/logs/{try_number}"
                                "?full_content=true")
        content = doc.get("content") if isinstance(doc, dict) else doc
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # structured log lines: one line of text per event (+ an error's detail)
            return "\n".join(_log_line(e) for e in content)
        return json.dumps(content, default=str, ensure_ascii=False)

    def wait_backfill(self, dag_id: str, backfill_id: int, days: Sequence[date], timeout: float = 1800,
                      progress: bool = True,
                      on_states: Callable[[dict[str, str]], None] | None = None) -> dict[str, str]:
        """Wait until the backfill's run of every day ended; returns {day: state}.

        A day the backfill did not run because another run of it existed (Airflow skips a day whose run is in
        flight, e.g. the scheduled run of the latest interval that unpausing the DAG starts; and, by the
        reprocess behaviour, one already done) is that run's: its state is waited for and returned, and the
        progress line names its run type. A day with no run at all once the backfill completed is ``skipped``.
        ``progress`` logs each change of the days' states; ``on_states`` gets them at every poll (a progress bar).
        """
        want = {d.isoformat() for d in days}
        last = ""

        def poll() -> tuple[bool, dict[str, str], str]:
            nonlocal last
            done = self._call("GET", f"/api/v2/backfills/{backfill_id}")
            created = _instant(done.get("created_at"))
            states: dict[str, str] = {}
            for r in self.runs(dag_id, run_type="backfill"):
                start = (r.get("data_interval_start") or "")[:10]
                # A run of an earlier backfill of the same day counts only once this one has queued it again.
                if start in want and _instant(r.get("queued_at")) >= created:
                    states[start] = r["state"]
            others = self._runs_the_backfill_left(dag_id, want - states.keys()) if done.get("completed_at") else {}
            for day, run in others.items():
                states[day] = run["state"] if run else "skipped"
            if on_states is not None:
                on_states(states)
            left = {d: f" ({run['run_type']} run: the backfill left the day to it)"
                    for d, run in others.items() if run is not None}
            line = ", ".join(f"{d}={states.get(d, 'pending')}{left.get(d, '')}" for d in sorted(want))
            if progress and line != last:
                log.info(f"  backfill {backfill_id}: {line}")
                last = line
            finished = all(states.get(d) in ENDED for d in want)
            return finished and bool(done.get("completed_at") or all(states.get(d) == "success" for d in want)), \
                states, line

        ended, states, line = poll_until(poll, lambda polled: polled[0], timeout, 3)
        if not ended:
            raise AirflowError(f"backfill {backfill_id} of {dag_id} not finished after {timeout:.0f} s: {line}")
        return states

    def _runs_the_backfill_left(self, dag_id: str, days: set[str]) -> dict[str, dict[str, Any] | None]:
        """Per day of ``days`` (the completed backfill ran none of them), the newest run of another type whose data
        interval starts on it, or None."""
        if not days:
            return {}
        found: dict[str, dict[str, Any] | None] = dict.fromkeys(days)
        for r in self.runs(dag_id):
            start = (r.get("data_interval_start") or "")[:10]
            if start in found and r.get("run_type") != "backfill":
                kept = found[start]
                if kept is None or _instant(r.get("queued_at")) > _instant(kept.get("queued_at")):
                    found[start] = r
        return found


def _instant(text: str | None) -> datetime:
    """An API timestamp (ISO-8601, ``Z`` or offset) as an aware datetime; missing -> the epoch."""
    if not text:
        return datetime.fromtimestamp(0, UTC)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _log_line(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    line = str(entry.get("event", ""))
    if entry.get("error_detail"):
        line += "\n" + json.dumps(entry["error_detail"], default=str, ensure_ascii=False)
    return line
