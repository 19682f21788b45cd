"""Running planned ops on PostgreSQL, and the report of what a run committed and rolled back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_jobs.loadgen.cdc.plan import TABLES, Now, Op, Stmt, iter_changes

if TYPE_CHECKING:
    from psycopg2.extensions import connection as PgConnection
    from psycopg2.extensions import cursor as PgCursor

    from spark_jobs.settings import Settings


class LoadgenError(RuntimeError):
    """The workload could not run; the message says what to do."""


def _empty_counts() -> dict[str, dict[str, int]]:
    return {t: {"insert": 0, "update": 0, "delete": 0} for t in TABLES}


@dataclass
class LoadReport:
    """What one run did. ``changes`` are committed row changes per table and kind;
    ``rolled_back_changes`` were executed then rolled back (whole transaction or
    to a savepoint) and must leave no trace in CDC."""

    seed: int
    target_rate: float
    changes: dict[str, dict[str, int]] = field(default_factory=_empty_counts)
    rolled_back_changes: dict[str, dict[str, int]] = field(default_factory=_empty_counts)
    ops: Counter[str] = field(default_factory=Counter)
    transactions: int = 0  # committed transactions (an interleaved op commits two)
    rollbacks: int = 0  # whole transactions rolled back
    savepoint_rollbacks: int = 0
    elapsed_s: float = 0.0
    digest: str = ""  # plan_digest of the ops executed
    stopped_by: str = ""  # "duration" or "max-changes"

    @property
    def total_changes(self) -> int:
        return sum(sum(k.values()) for k in self.changes.values())

    @property
    def total_rolled_back(self) -> int:
        return sum(sum(k.values()) for k in self.rolled_back_changes.values())

    @property
    def actual_rate(self) -> float:
        return self.total_changes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        lines = [f"loadgen cdc: seed={self.seed} target={self.target_rate:g}/s stopped by {self.stopped_by} "
                 f"after {self.elapsed_s:.1f}s",
                 f"  committed changes: {self.total_changes} ({self.actual_rate:.0f}/s) in {self.transactions} transactions; "
                 f"rolled back: {self.rollbacks} transactions + {self.savepoint_rollbacks} savepoints "
                 f"({self.total_rolled_back} row changes)",
                 f"  {'table':<12} {'insert':>8} {'update':>8} {'delete':>8}   rolled back (i/u/d)"]
        for t in TABLES:
            c, r = self.changes[t], self.rolled_back_changes[t]
            lines.append(f"  {t:<12} {c['insert']:>8} {c['update']:>8} {c['delete']:>8}   "
                         f"{r['insert']}/{r['update']}/{r['delete']}")
        lines.append("  operations: " + ", ".join(f"{k}={v}" for k, v in sorted(self.ops.items())))
        lines.append(f"  plan digest: {self.digest}")
        return "\n".join(lines)


def _resolve(params: tuple[Any, ...], tx_time: datetime) -> tuple[Any, ...]:
    return tuple(tx_time + timedelta(microseconds=p.offset_us) if isinstance(p, Now) else p for p in params)


def _execute(cur: PgCursor, stmts: Sequence[Stmt], tx_time: datetime, op: Op) -> None:
    import psycopg2

    for s in stmts:
        try:
            cur.execute(s.sql, _resolve(s.params, tx_time))
        except psycopg2.Error as exc:
            raise LoadgenError(f"op {op.name!r} failed on {s.sql[:80]!r} with {s.params[:3]!r}...: "
                               f"{str(exc).strip()}; the shop rows no longer match what the loadgen read at start "
                               "(another writer?)") from exc
        if s.kind in ("insert", "update", "delete") and cur.rowcount != s.rows:
            raise LoadgenError(f"op {op.name!r}: {s.sql[:80]!r} with {s.params[:3]!r}... changed {cur.rowcount} rows, "
                               f"expected {s.rows}; the shop rows changed under the loadgen (another writer?)")


def connect(settings: Settings) -> PgConnection:
    """Open a connection to the shop database, or say how to start it."""
    import psycopg2

    try:
        return psycopg2.connect(settings.pg_app_dsn(), connect_timeout=5,
                                application_name="lake-loadgen-cdc")
    except psycopg2.OperationalError as exc:
        raise LoadgenError(
            f"cannot connect to PostgreSQL at {settings.pg_host}:{settings.pg_port} "
            f"(database {settings.pg_shop_db!r}): {str(exc).strip()}; start it with `lake stack up`") from exc


class Executor:
    """Runs planned ops on one session (plus a second one for the interleaved op's other transaction)."""

    def __init__(self, settings: Settings, *, synchronous_commit: bool = True) -> None:
        self.conn = connect(settings)
        self.conn2 = connect(settings)
        if not synchronous_commit:
            # Commits stop waiting for the WAL flush (the walwriter flushes within
            # wal_writer_delay); order and content of what is committed are unchanged.
            for conn in (self.conn, self.conn2):
                with conn.cursor() as cur:
                    cur.execute("SET synchronous_commit = off")
                conn.commit()

    def close(self) -> None:
        self.conn.close()
        self.conn2.close()

    def run(self, op: Op) -> None:
        tx_time = datetime.now(UTC)
        try:
            with self.conn.cursor() as cur:
                if op.interleave:
                    _execute(cur, op.statements[:op.interleave_at], tx_time, op)
                    with self.conn2.cursor() as cur2:
                        _execute(cur2, op.interleave, datetime.now(UTC), op)
                    self.conn2.commit()
                    _execute(cur, op.statements[op.interleave_at:], tx_time, op)
                else:
                    _execute(cur, op.statements, tx_time, op)
        except LoadgenError:
            self.conn.rollback()
            self.conn2.rollback()
            raise
        if op.rollback:
            self.conn.rollback()
        else:
            self.conn.commit()


def account(report: LoadReport, op: Op) -> None:
    """Count what ``op`` did once it has run (committed or rolled back)."""
    if op.rollback:
        report.rollbacks += 1
    else:
        report.transactions += 2 if op.interleave else 1
    report.savepoint_rollbacks += sum(1 for s in (*op.statements, *op.interleave) if s.kind == "rollback_to_savepoint")
    for table, kind, n, survives in iter_changes(op):
        target = report.changes if survives and not op.rollback else report.rolled_back_changes
        target[table][kind] += n
    report.ops[op.name + (" (rolled back)" if op.rollback else "")] += 1
