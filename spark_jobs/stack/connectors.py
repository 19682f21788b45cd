"""``lake connectors apply|status``: Kafka Connect connectors from ``connectors/*.json``.

Each file holds ``{"name": ..., "config": {...}}``. ``@@NAME@@`` placeholders
are filled from settings (hosts, ports, the secrets folder); credentials stay
``${file:...}`` references that Connect's FileConfigProvider resolves inside
the worker, so neither the files nor ``GET /connectors/<name>`` show a password.
``apply`` PUTs each config (create or update, idempotent) and waits until the
connector and all its tasks run, printing a failed task's trace otherwise.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx

from spark_jobs import kafka_auth
from spark_jobs.settings import REPO_ROOT, Settings
from spark_jobs.stack.configs import template_values
from spark_jobs.stack.health import failure_line, status_parts
from spark_jobs.stack.templates import render_template
from spark_jobs.waits import poll_until

log = logging.getLogger(__name__)

CONNECTORS_DIR = REPO_ROOT / "connectors"
_SECRET_WORDS = ("password", "secret", "credential")


class ConnectorError(RuntimeError):
    """A connector could not be registered or does not run; the message says why."""


def load_connector(path: Path, settings: Settings) -> tuple[str, dict[str, str]]:
    values = {**template_values(settings), "PG_SHOP_DB": settings.pg_shop_db}
    try:
        doc = json.loads(render_template(path.read_text(encoding="utf-8"), values))
    except (ValueError, json.JSONDecodeError) as exc:
        raise ConnectorError(f"{path}: {exc}") from exc
    if set(doc) != {"name", "config"} or not isinstance(doc["config"], dict):
        raise ConnectorError(f"{path}: expected an object with exactly 'name' and 'config'")
    config = {str(k): str(v) for k, v in doc["config"].items()}
    for key, value in config.items():
        if any(w in key.lower() for w in _SECRET_WORDS) and not value.startswith("${"):
            raise ConnectorError(
                f"{path}: {key} holds a literal value; reference a secret with ${{file:<secrets>/x.properties:key}}")
    return str(doc["name"]), config


def _request(settings: Settings, method: str, path: str, body: Any = None) -> Any:
    url = f"{settings.connect_url}{path}"
    if not url.startswith(("http://", "https://")):
        raise ConnectorError(f"LAKE_CONNECT_URL must be http(s), got {settings.connect_url}")
    try:
        response = httpx.request(method, url, json=body, timeout=30,
                                 headers={"Accept": "application/json", **kafka_auth.connect_rest_headers(settings)})
    except httpx.HTTPError as exc:
        raise ConnectorError(f"Kafka Connect at {settings.connect_url} is not reachable ({exc}); "
                             "is the stack up? (lake stack up)") from exc
    if response.is_error:
        raise ConnectorError(f"Connect {method} {path} -> HTTP {response.status_code}: {response.text[:2000]}")
    return response.json() if response.content else None


def connector_status(settings: Settings, name: str) -> dict[str, Any]:
    result: dict[str, Any] = _request(settings, "GET", f"/connectors/{name}/status")
    return result


def _failures(status: dict[str, Any]) -> list[str]:
    out = []
    if status["connector"]["state"] == "FAILED":
        out.append(f"connector: {status['connector'].get('trace', '')}")
    for task in status.get("tasks", []):
        if task["state"] == "FAILED":
            out.append(f"task {task['id']}: {task.get('trace', '')}")
    return out


def _wait_running(settings: Settings, name: str, needed: int, timeout: float) -> None:
    """Wait until connector ``name`` and all its tasks are RUNNING in ``needed`` polls in a row (after a PUT the
    worker restarts it asynchronously and may still report the old RUNNING state); a FAILED one raises at once."""
    seen = 0
    status: dict[str, Any] = {}

    def running() -> bool:
        nonlocal seen, status
        try:
            status = connector_status(settings, name)
        except ConnectorError:
            status = {"connector": {"state": "UNASSIGNED"}, "tasks": []}
        failed = _failures(status)
        if failed:
            raise ConnectorError(f"connector {name} failed:\n" + "\n".join(f[:4000] for f in failed))
        tasks = status.get("tasks", [])
        ok = status["connector"]["state"] == "RUNNING" and bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)
        seen = seen + 1 if ok else 0
        return seen >= needed

    if not poll_until(running, lambda done: done, timeout, 1.5):
        raise ConnectorError(f"connector {name} not RUNNING after {timeout:.0f}s: {json.dumps(status)[:1000]}")
    log.info("  %s: RUNNING (%d task(s))", name, len(status.get("tasks", [])))


def apply(settings: Settings, timeout: float = 120) -> list[str]:
    """Register or update every connector, then wait until all run."""
    names = []
    files = sorted(CONNECTORS_DIR.glob("*.json"))
    if not files:
        raise ConnectorError(f"no connector configs in {CONNECTORS_DIR}")
    changed: set[str] = set()
    for path in files:
        name, config = load_connector(path, settings)
        try:
            current = _request(settings, "GET", f"/connectors/{name}/config")
        except ConnectorError:
            current = None
        if current is not None and {k: v for k, v in current.items() if k != "name"} == config:
            # A PUT of the same config restarts the connector; unchanged means untouched.
            log.info("%s unchanged (%s)", name, path.relative_to(REPO_ROOT))
        else:
            _request(settings, "PUT", f"/connectors/{name}/config", config)
            log.info("applied %s from %s", name, path.relative_to(REPO_ROOT))
            changed.add(name)
        names.append(name)
    deadline = time.monotonic() + timeout
    for name in names:
        _wait_running(settings, name, needed=3 if name in changed else 1, timeout=deadline - time.monotonic())
    # CDC topics created before topic.creation.default.retention.* was set (or under other settings) keep
    # what they were created with: align them.
    from spark_jobs.kafka_topics import TopicError, ensure_retention

    try:
        for line in ensure_retention(settings, create_events=False):
            log.info("  kafka: %s", line)
    except TopicError as exc:
        raise ConnectorError(str(exc)) from exc
    return names


def status_report(settings: Settings) -> list[dict[str, Any]]:
    """State of every registered connector and, for Debezium PG, its slot: lag, ``wal_status``,
    ``safe_wal_size`` and warnings (``slot_lost``: the slot's WAL is gone, changes were missed)."""
    report = []
    for name in _request(settings, "GET", "/connectors") or []:
        st = connector_status(settings, name)
        slot = slot_health(settings)
        report.append({"name": name, "state": st["connector"]["state"],
                       "tasks": [t["state"] for t in st.get("tasks", [])],
                       "slot_lag_bytes": _slot_lag(settings),
                       "wal_status": slot.get("wal_status"), "safe_wal_size": slot.get("safe_wal_size"),
                       "slot_lost": slot.get("wal_status") == "lost",
                       "warnings": state_warnings(settings, name, st) + slot_warnings(settings, name, slot)})
    return report


def state_warnings(settings: Settings, connector: str, status: dict[str, Any]) -> list[str]:
    """A connector or task that is not RUNNING, with what to do. FAILED also turns ``connect`` DOWN in
    ``lake stack status``; UNASSIGNED (no worker took it: a rebalance, or a worker gone) and PAUSED only warn
    here, because both are normal for a moment."""
    restart = (f"{kafka_auth.connect_curl(settings)} -X POST "
               f"'{settings.connect_url}/connectors/{connector}/restart?includeTasks=true'")
    out = []
    for what, part in status_parts(status):
        state = part.get("state")
        if state == "UNASSIGNED":
            out.append(f"{connector} {what} is UNASSIGNED (worker {part.get('worker_id', '?')}): no Connect worker "
                       f"runs it, so no change is captured. If it stays so, check `lake stack status` and "
                       f"`lake stack logs connect`, then: {restart}")
        elif state == "PAUSED":
            out.append(f"{connector} {what} is PAUSED: nothing is captured until "
                       f"{kafka_auth.connect_curl(settings)} -X PUT {settings.connect_url}/connectors/{connector}/resume")
        elif state == "FAILED":
            out.append(f"{failure_line(connector, what, part)}; after fixing the cause: {restart}")
    if not status.get("tasks") and (status.get("connector") or {}).get("state") == "RUNNING":
        out.append(f"{connector} is RUNNING with no task: nothing is captured; {restart}")
    return out


SLOT = "lakestream_shop"


def format_bytes(n: int | None) -> str:
    """``safe_wal_size`` for people: None is PostgreSQL's "no limit" (``max_slot_wal_keep_size = -1``)."""
    if n is None:
        return "unlimited"
    return f"{n / 1024 / 1024:.0f}MB"


def slot_health(settings: Settings) -> dict[str, Any]:
    """The replication slot's ``wal_status`` and ``safe_wal_size`` (bytes) from ``pg_replication_slots``.

    ``{}`` if PostgreSQL cannot be asked; ``{"wal_status": None}`` if the slot does not exist (yet).
    """
    import psycopg2

    try:
        with psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5) as conn, \
                conn.cursor() as cur:
            cur.execute("SELECT wal_status, safe_wal_size FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
            row = cur.fetchone()
        conn.close()
    except psycopg2.Error as exc:
        return {"error": f"{type(exc).__name__}: {str(exc).strip()}"}
    if row is None:
        return {"wal_status": None, "safe_wal_size": None, "exists": False}
    return {"wal_status": row[0], "safe_wal_size": None if row[1] is None else int(row[1]), "exists": True}


def slot_warnings(settings: Settings, connector: str, slot: dict[str, Any]) -> list[str]:
    """What a person must do about the slot, worst first; empty when it is fine."""
    if "error" in slot:
        return [f"could not read replication slot {SLOT} from PostgreSQL at {settings.pg_host}:{settings.pg_port} "
                f"({slot['error']}); is postgres up? (lake stack status)"]
    if not slot.get("exists"):
        return [f"replication slot {SLOT} does not exist in {settings.pg_shop_db}: the connector creates it when it "
                "starts (lake connectors apply)"]
    status, safe = slot.get("wal_status"), slot.get("safe_wal_size")
    curl, url = kafka_auth.connect_curl(settings), f"{settings.connect_url}/connectors/{connector}"
    reset = (f"{curl} -X PUT {url}/stop; {curl} -X DELETE {url}/offsets; "
             f"SELECT pg_drop_replication_slot('{SLOT}'); {curl} -X PUT {url}/resume")
    if status == "lost":
        return [f"replication slot {SLOT} is LOST: PostgreSQL removed WAL it had not sent (max_slot_wal_keep_size), so "
                "changes in the gap never reach silver. Re-snapshot: " + reset + " (snapshot.mode=initial reads every "
                "table again; rows deleted in the gap stay in silver until removed: `lake verify cdc` lists them)"]
    if status == "unreserved":
        return [f"replication slot {SLOT} is unreserved: it is more than max_slot_wal_keep_size behind and its WAL "
                "is removed at the next checkpoint unless the connector catches up now. Check the connector "
                f"(`lake connectors status`, `lake stack logs connect`) and restart it: {curl} -X POST "
                f"'{url}/restart?includeTasks=true&onlyFailed=true'"]
    minimum = settings.slot_min_safe_wal_mb * 1024 * 1024
    if safe is not None and minimum and safe < minimum:
        return [f"replication slot {SLOT} can fall only {format_bytes(safe)} further behind before PostgreSQL "
                f"drops its WAL (warns below LAKE_SLOT_MIN_SAFE_WAL_MB={settings.slot_min_safe_wal_mb}): make sure "
                f"connector {connector} is RUNNING and confirming (`lake connectors status`), or raise "
                "max_slot_wal_keep_size"]
    return []


def slot_positions(settings: Settings) -> tuple[int, int] | None:
    """(current WAL position, slot's confirmed flush position) in bytes, or None without a confirmed slot."""
    import psycopg2

    with psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, confirmed_flush_lsn - '0/0'::pg_lsn "
                    "FROM pg_replication_slots WHERE slot_name = %s", (SLOT,))
        row = cur.fetchone()
    conn.close()
    return (int(row[0]), int(row[1])) if row and row[1] is not None else None


def _slot_lag(settings: Settings) -> int | None:
    """Bytes of WAL the replication slot has not confirmed yet (source lag)."""
    import psycopg2

    try:
        positions = slot_positions(settings)
    except psycopg2.Error:
        return None
    return positions[0] - positions[1] if positions else None
