"""``lake loadgen history``: write a seeded past of the shop through the real paths.

The plan (:func:`spark_jobs.loadgen.history_plan.plan_history`, pure) says what
happened over the N UTC days before ``--end-date`` (default today); this module
writes it: rows into PostgreSQL ``shop`` in simulated-time order, with explicit
``created_at``/``updated_at``/``placed_at`` (Debezium captures them like any
other change), and the clickstream through :class:`EventProducer` (validated
against the contract, keyed by ``user_id``) to ``events.clickstream``.

Day by day: the day's transactions, then the day's events. Several planned
transactions share a commit (up to ``COMMIT_EVERY`` statements, statements in
plan order), but never two that touch the same row: the gold SCD2 dimensions
make one version per committed transaction, so each simulated change of a row
keeps its own commit (and a planned transaction is never split). Seed K owns ids ``[1,000,000 * (K + 1), 1,000,000 * (K + 2))`` in
customers, products and orders; a run refuses to start when any row already
sits in that range (a re-run of the same seed, or an interrupted one): pick
another ``--seed`` or wipe the stack's state with ``make clean``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.loadgen.history_plan import Change, HistoryPlan, id_range

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection
    from psycopg2.extensions import cursor as PgCursor

    from spark_jobs.loadgen.producer import EventProducer
    from spark_jobs.settings import Settings

COMMIT_EVERY = 1000  # statements per commit (whole planned transactions only)
POLL_EVERY = 500  # events between delivery-report polls
TABLES = ("customers", "products", "orders", "order_items")
KEYS = {"customers": "customer_id", "products": "product_id", "orders": "order_id", "order_items": "order_id"}


class HistoryError(RuntimeError):
    """The history could not be written; the message names the service and what to do."""


def destination(settings: Settings) -> str:
    """Where the rows go, for messages: the shop database's address."""
    return f"PostgreSQL at {settings.pg_host}:{settings.pg_port} (database {settings.pg_shop_db!r})"


def connect(settings: Settings) -> PgConnection:
    """A connection to the shop database, or :class:`HistoryError` saying how to start it."""
    import psycopg2

    try:
        return psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5,
                                application_name="lake-loadgen-history")
    except psycopg2.OperationalError as exc:
        raise HistoryError(f"cannot connect to {destination(settings)}: {str(exc).strip()}; "
                           "start it with `lake stack up`") from exc


def rows_in_range(cur: PgCursor, seed: int) -> dict[str, int]:
    """Rows per table whose id lies in ``seed``'s range (order_items by their order)."""
    low, high = id_range(seed)
    out = {}
    for table in TABLES:
        cur.execute(f"SELECT count(*) FROM {table} WHERE {KEYS[table]} >= %s AND {KEYS[table]} < %s", (low, high))
        row = cur.fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def check_range_free(cur: PgCursor, seed: int, where: str) -> None:
    """Raise :class:`HistoryError` when ``seed``'s id range (or its e-mails/SKUs) already holds rows."""
    taken = {t: n for t, n in rows_in_range(cur, seed).items() if n}
    cur.execute("SELECT (SELECT count(*) FROM customers WHERE email LIKE %s), (SELECT count(*) FROM products "
                "WHERE sku LIKE %s)", (f"h{seed}-%@history.example", f"H{seed}-%"))
    row = cur.fetchone()
    if row and row[0]:
        taken["customers with its e-mails"] = int(row[0])
    if row and row[1]:
        taken["products with its SKUs"] = int(row[1])
    if taken:
        low, high = id_range(seed)
        found = ", ".join(f"{t} {n}" for t, n in taken.items())
        raise HistoryError(f"seed {seed}'s id range [{low:,}, {high:,}) is already used in {where} ({found}): "
                           f"an earlier (or interrupted) `lake loadgen history --seed {seed}` wrote it; "
                           "pass another --seed, or wipe the stack's data with `make clean`")


_SQL: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], str] = {}


def statement(change: Change) -> tuple[str, tuple[Any, ...]]:
    """SQL text and parameters for one planned change (explicit values, no ``now()``)."""
    cols, keys = tuple(change.values), tuple(change.key)
    sig = (change.table, change.kind, cols, keys)
    sql = _SQL.get(sig)
    if sql is None:
        where = " AND ".join(f"{k} = %s" for k in keys)
        if change.kind == "insert":
            sql = f"INSERT INTO {change.table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})"
        elif change.kind == "update":
            sql = f"UPDATE {change.table} SET {', '.join(f'{c} = %s' for c in cols)} WHERE {where}"
        else:
            sql = f"DELETE FROM {change.table} WHERE {where}"
        _SQL[sig] = sql
    params = tuple(change.values.values()) if change.kind == "insert" else (
        *change.values.values(), *change.key.values())
    return sql, params


def _send_day(producer: EventProducer, events: list[dict[str, Any]], sent: Counter[str]) -> None:
    for i, event in enumerate(events, start=1):
        producer.send(event)
        sent[event["event_type"]] += 1
        if i % POLL_EVERY == 0:
            producer.poll(0)
    producer.poll(0)


def write_history(plan: HistoryPlan, settings: Settings, *, conn: PgConnection | None = None,
                  producer: EventProducer | None = None, progress: Callable[[str], None] | None = None,
                  commit_every: int = COMMIT_EVERY, flush_timeout: float = 120.0) -> dict[str, Any]:
    """Write ``plan`` (rows to PostgreSQL, events to Kafka) day by day; return the summary (see :func:`summary`).

    ``conn`` and ``producer`` default to the stack's (settings); tests may pass their own.
    """
    import psycopg2

    from spark_jobs.kafka_topics import events_topic_config
    from spark_jobs.loadgen.producer import EventProducer, ensure_topic

    where = destination(settings)
    own_conn = conn is None
    conn = connect(settings) if conn is None else conn
    try:
        with conn.cursor() as cur:
            check_range_free(cur, plan.seed, where)
        conn.commit()
        if producer is None:
            ensure_topic(settings, TOPIC, config=events_topic_config(settings))
            producer = EventProducer(settings, TOPIC, client_id="lake-loadgen-history")
        written: dict[str, Counter[str]] = {t: Counter() for t in TABLES}
        sent: Counter[str] = Counter()
        started, i = time.monotonic(), 0
        for d in range(plan.days):
            day_end = plan.start + timedelta(days=d + 1)
            n_stmts, touched = 0, set[tuple[Any, ...]]()
            with conn.cursor() as cur:
                while i < len(plan.txs) and plan.txs[i].at < day_end:
                    tx = plan.txs[i]
                    rows = {(c.table, *c.key.values()) for c in tx.changes}
                    if n_stmts >= commit_every or rows & touched:
                        conn.commit()  # a row's changes at different simulated times go in different commits
                        n_stmts, touched = 0, set[tuple[Any, ...]]()
                    touched |= rows
                    for change in tx.changes:
                        sql, params = statement(change)
                        try:
                            cur.execute(sql, params)
                        except psycopg2.Error as exc:
                            conn.rollback()
                            raise HistoryError(f"{tx.label} at {tx.at.isoformat()} failed in {where}: "
                                               f"{str(exc).strip()} (another writer on seed {plan.seed}'s rows?)") from exc
                        if cur.rowcount != 1:
                            conn.rollback()
                            raise HistoryError(f"{tx.label} at {tx.at.isoformat()}: {change.kind} of {change.table} "
                                               f"{change.key} changed {cur.rowcount} rows in {where}, expected 1 "
                                               "(another writer changed the history's rows?)")
                        written[change.table][change.kind] += 1
                        n_stmts += 1
                    i += 1
            conn.commit()
            _send_day(producer, plan.day_events(d), sent)
            if progress is not None:
                changes = sum(sum(c.values()) for c in written.values())
                progress(f"  day {d + 1}/{plan.days} ({(plan.start + timedelta(days=d)).date()}): "
                         f"{changes:,} row changes, {sum(sent.values()):,} events sent, "
                         f"{time.monotonic() - started:.1f}s")
        producer.flush(flush_timeout)
    finally:
        if own_conn:
            conn.close()
    return summary(plan, written, sent, producer.stats.delivered, time.monotonic() - started)


def summary(plan: HistoryPlan, written: dict[str, Counter[str]], sent: Counter[str], delivered: int,
            seconds: float) -> dict[str, Any]:
    """What a run wrote: per-table changes and final rows, events by type, the window, ids and plan digest."""
    times = [tx.at for tx in plan.txs]
    return {
        "seed": plan.seed,
        "days": plan.days,
        "first_day": plan.start.date().isoformat(),
        "last_day": (plan.end - timedelta(days=1)).date().isoformat(),
        "window": [plan.start.isoformat(), plan.end.isoformat()],
        "first_change_at": min(times).isoformat() if times else None,
        "last_change_at": max(times).isoformat() if times else None,
        "id_range": [plan.id_low, plan.id_high],
        "tables": {t: {"insert": c["insert"], "update": c["update"], "delete": c["delete"],
                       "rows": c["insert"] - c["delete"]} for t, c in written.items()},
        "events": {"topic": TOPIC, "sent": sum(sent.values()), "delivered": delivered, "by_type": dict(sorted(sent.items()))},
        "plan_sha256": plan.digest(),
        "seconds": round(seconds, 2),
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"loadgen history: seed {s['seed']}, {s['days']} day(s) {s['first_day']} .. {s['last_day']} (UTC), "
             f"ids [{s['id_range'][0]:,}, {s['id_range'][1]:,}), {s['seconds']}s"]
    for table, c in s["tables"].items():
        lines.append(f"  {table:<12} {c['rows']:>8,} rows  (inserts {c['insert']:,}, updates {c['update']:,}, "
                     f"deletes {c['delete']:,})")
    ev = s["events"]
    lines.append(f"  events       {ev['sent']:>8,} sent to {ev['topic']}, {ev['delivered']:,} delivered  "
                 + ", ".join(f"{k} {v:,}" for k, v in ev["by_type"].items()))
    lines.append(f"  simulated changes {s['first_change_at']} .. {s['last_change_at']}; plan sha256 {s['plan_sha256']}")
    return "\n".join(lines)
