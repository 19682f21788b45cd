"""The plan values: one planned transaction (:class:`Op`) and its statements.

Plans are plain frozen values, so a plan can be compared, digested and
replayed; only ``Now`` placeholders are resolved when an op runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

TABLES = ("customers", "products", "orders", "order_items")

ChangeKind = Literal["insert", "update", "delete"]
Key = tuple[str, int]  # ("customers", 1001): a row the scheduler orders ops on
StmtKind = Literal["insert", "update", "delete", "savepoint", "rollback_to_savepoint"]


@dataclass(frozen=True)
class Now:
    """Placeholder for the transaction's wall-clock time (+ offset), resolved when executed."""

    offset_us: int = 0


@dataclass(frozen=True)
class Stmt:
    """One SQL statement and the rows it must change (checked against ``cursor.rowcount``)."""

    kind: StmtKind
    table: str
    sql: str
    params: tuple[Any, ...] = ()
    rows: int = 0
    cascade_items: int = 0  # order_items removed by ON DELETE CASCADE (deletes of orders)


@dataclass(frozen=True)
class Op:
    """One planned transaction.

    ``interleave`` runs on a second connection after ``statements[:interleave_at]``
    and commits before the rest of ``statements``: two concurrent transactions
    whose commit order differs from their start order.
    """

    name: str
    statements: tuple[Stmt, ...]
    rollback: bool = False
    interleave: tuple[Stmt, ...] = ()
    interleave_at: int = 0
    writes: frozenset[Key] = frozenset()  # rows the op inserts, updates or deletes (an order stands for its items)
    reads: frozenset[Key] = frozenset()  # rows it needs to exist: foreign-key parents it does not change

    def committed_changes(self) -> int:
        """Row changes this op leaves behind when it commits (0 for a rolled-back op)."""
        if self.rollback:
            return 0
        return sum(n for _, _, n, committed in iter_changes(self) if committed)

    def signature(self) -> str:
        """Stable text of the whole plan (for determinism checks)."""
        parts = [self.name, "R" if self.rollback else "C", str(self.interleave_at)]
        for s in (*self.statements, *self.interleave):
            parts.append(f"{s.kind}|{s.table}|{s.sql}|{s.params!r}|{s.rows}|{s.cascade_items}")
        return "\n".join(parts)


def iter_changes(op: Op) -> Iterator[tuple[str, ChangeKind, int, bool]]:
    """``(table, kind, rows, survives_savepoints)`` for every row change in ``op``.

    ``survives_savepoints`` is False for changes undone by ``ROLLBACK TO SAVEPOINT``.
    """
    for stmts in (op.statements, op.interleave):
        pending: list[tuple[str, ChangeKind, int]] = []
        marks: list[int] = []
        for s in stmts:
            if s.kind == "savepoint":
                marks.append(len(pending))
            elif s.kind == "rollback_to_savepoint":
                start = marks.pop()
                for table, kind, n in pending[start:]:
                    yield table, kind, n, False
                del pending[start:]
            else:
                pending.append((s.table, s.kind, s.rows))
                if s.cascade_items:
                    pending.append(("order_items", "delete", s.cascade_items))
        for table, kind, n in pending:
            yield table, kind, n, True


def plan_digest(ops: Sequence[Op]) -> str:
    """SHA-256 over the signatures of ``ops``, in order."""
    h = hashlib.sha256()
    for op in ops:
        h.update(op.signature().encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()
