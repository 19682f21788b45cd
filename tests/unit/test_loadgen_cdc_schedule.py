"""The CDC loadgen's concurrent execution: which ops may overlap, and that ``run`` keeps to it.

The real proof that concurrent ops leave the plan's rows is the integration
test (``test_executed_sequence_is_the_seeded_plan`` runs with several
connections against PostgreSQL). Here: the scheduler's rules on small inline
ops, that every op names the rows its statements touch, and ``run`` driven
with a recording executor (our own code's unit test, no database).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from spark_jobs.loadgen.cdc import runner, schedule
from spark_jobs.loadgen.cdc.execute import LoadgenError
from spark_jobs.loadgen.cdc.plan import Key, Op, Stmt, plan_digest
from spark_jobs.loadgen.cdc.planner import Planner, plan_ops
from spark_jobs.loadgen.cdc.schedule import Scheduler
from tests.unit.shop_snapshot import seeded_state


def _op(name: str, writes: frozenset[Key] | set[Key] = frozenset(), reads: frozenset[Key] | set[Key] = frozenset()) -> Op:
    return Op(name, (Stmt("update", "customers", "SELECT 1", rows=1),), writes=frozenset(writes), reads=frozenset(reads))


C1, C2, P1, O1 = ("customers", 1), ("customers", 2), ("products", 1), ("orders", 1)


def test_ops_on_disjoint_rows_run_at_once():
    s = Scheduler()
    assert s.submit(_op("a", {C1})) == (0, True)
    assert s.submit(_op("b", {C2})) == (1, True)
    assert s.submit(_op("c", {O1}, {P1})) == (2, True)


def test_a_write_waits_for_the_earlier_write_of_the_same_row():
    s = Scheduler()
    s.submit(_op("a", {C1}))
    assert s.submit(_op("b", {C1, C2})) == (1, False)
    assert s.submit(_op("c", {C2})) == (2, False)  # waits for b, which waits for a
    assert s.done(0) == [1]
    assert s.done(1) == [2]


def test_readers_share_a_row_and_a_later_writer_waits_for_all_of_them():
    s = Scheduler()
    s.submit(_op("insert product", {P1}))
    assert s.submit(_op("order 1 reads it", {O1}, {P1})) == (1, False)
    assert s.submit(_op("order 2 reads it", {("orders", 2)}, {P1})) == (2, False)
    assert s.done(0) == [1, 2]  # both readers at once
    assert s.submit(_op("price update", {P1})) == (3, False)
    assert s.done(2) == []
    assert s.done(1) == [3]


def test_an_order_delete_holds_back_the_delete_of_its_customer():
    """The customer may be deleted only once it has no orders: after the order delete committed."""
    s = Scheduler()
    s.submit(_op("order delete", {O1}, {C1}))
    assert s.submit(_op("customer delete", {C1})) == (1, False)
    assert s.done(0) == [1]


def test_serial_scheduler_releases_one_op_after_the_other():
    s = Scheduler(serial=True)
    assert s.submit(_op("a", {C1})) == (0, True)
    assert s.submit(_op("b", {C2})) == (1, False)
    assert s.done(0) == [1]


def test_finished_ops_hold_nothing_back():
    s = Scheduler()
    s.submit(_op("a", {C1}))
    s.done(0)
    assert s.submit(_op("b", {C1})) == (1, True)


def _targets(stmt: Stmt) -> tuple[set[Key], set[Key]]:
    """Rows a statement changes and foreign-key parents it references, read off its SQL and parameters."""
    p = stmt.params
    if stmt.kind == "insert":
        if stmt.table == "order_items":  # (order_id, line_no, product_id, ...) per row, six values each
            rows = [p[i:i + 6] for i in range(0, len(p), 6)]
            return {("orders", r[0]) for r in rows}, {("products", r[2]) for r in rows}
        if stmt.table == "orders":
            return {("orders", p[0])}, {("customers", p[1])}
        return {(stmt.table, p[0])}, set()
    if stmt.kind == "update" and stmt.table == "customers" and "SET customer_id" in stmt.sql:
        return {("customers", p[0]), ("customers", p[-1])}, set()
    if stmt.table == "order_items":  # ... WHERE order_id = %s AND line_no = %s
        return {("orders", p[-2] if stmt.kind == "update" else p[0])}, set()
    return {(stmt.table, p[-1] if stmt.kind == "update" else p[0])}, set()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_op_names_the_rows_its_statements_touch(seed):
    state = seeded_state()
    owner = {oid: o.customer_id for oid, o in state.orders.items()}
    for op in plan_ops(state, seed, 3000):
        for stmt in (*op.statements, *op.interleave):
            if stmt.kind in ("savepoint", "rollback_to_savepoint"):
                continue
            changed, parents = _targets(stmt)
            assert changed <= op.writes, (op.name, stmt.sql, op.writes)
            assert parents <= op.writes | op.reads, (op.name, stmt.sql, op.reads)
            if stmt.table == "orders" and stmt.kind == "insert":
                owner[stmt.params[0]] = stmt.params[1]
            if stmt.table == "orders" and stmt.kind == "delete":
                # its customer may become deletable: a later customer delete must wait for this op
                assert ("customers", owner[stmt.params[0]]) in op.reads, op


class RecordingExecutor:
    """Stands in for a PostgreSQL session: logs when each op started and ended on one shared tick counter (no
    wall clock), fails on a chosen op. With ``hold_first`` the first op to run waits until a second op has
    started, so a run that may overlap ops on disjoint rows does so in every run, not by timing luck. The op
    chosen to fail waits until the planner has planned a later op on its rows, so there is one to hold back."""

    log: ClassVar[list[tuple[Op, int, int]]] = []
    planned: ClassVar[list[Op]] = []
    changed = threading.Condition()
    ticks: ClassVar[Iterator[int]] = itertools.count()
    running = 0
    hold_first = False
    fail_on: str | None = None

    def __init__(self, settings: Any, *, synchronous_commit: bool = True) -> None:
        pass

    def run(self, op: Op) -> None:
        cls = RecordingExecutor
        with cls.changed:
            start = next(cls.ticks)
            cls.running += 1
            cls.changed.notify_all()
            if cls.hold_first:
                cls.hold_first = False
                # Bounded only so a scheduler that never overlaps fails the test instead of hanging it.
                cls.changed.wait_for(lambda: cls.running > 1, timeout=60)
        time.sleep(0)  # yield to the other sessions' threads: more interleavings, no waiting
        try:
            if op.name == self.fail_on:
                with cls.changed:
                    cls.changed.wait_for(lambda: _later_conflicting(op), timeout=60)  # bound: fail, not hang
                raise LoadgenError(f"op {op.name!r} failed on purpose")
        finally:
            with cls.changed:
                cls.running -= 1
                if op.name != self.fail_on:
                    cls.log.append((op, start, next(cls.ticks)))

    def close(self) -> None:
        pass


class _NoConnection:
    def cursor(self) -> Any:
        class _Cur:
            def __enter__(self) -> _Cur:
                return self

            def __exit__(self, *exc: object) -> None:
                pass
        return _Cur()

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def recording(monkeypatch):
    """``run`` with the recording executor; ``recording.planned`` lists the planner's ops in plan order."""
    RecordingExecutor.log = []
    RecordingExecutor.fail_on = None
    RecordingExecutor.hold_first = False
    RecordingExecutor.running = 0
    RecordingExecutor.planned = []
    next_op = Planner.next_op

    def planned(self: Planner) -> Op:
        op = next_op(self)
        with RecordingExecutor.changed:
            RecordingExecutor.planned.append(op)
            RecordingExecutor.changed.notify_all()
        return op

    monkeypatch.setattr(Planner, "next_op", planned)
    monkeypatch.setattr(schedule, "Executor", RecordingExecutor)
    monkeypatch.setattr(runner, "connect", lambda settings: _NoConnection())
    monkeypatch.setattr(runner, "load_state", lambda cur: seeded_state())
    return RecordingExecutor


def _conflict(a: Op, b: Op) -> frozenset[Key]:
    return (a.writes & (b.writes | b.reads)) | (b.writes & a.reads)


def _later_conflicting(op: Op) -> list[Op]:
    """Ops planned after ``op`` that share rows with it (they must wait for it)."""
    planned = RecordingExecutor.planned
    position = next(i for i, o in enumerate(planned) if o is op)
    return [o for o in planned[position + 1:] if _conflict(op, o)]


def test_run_overlaps_only_ops_on_disjoint_rows_and_keeps_the_plan_order_of_the_rest(recording):
    recording.hold_first = True
    report = runner.run(None, rate=1e9, duration=60, seed=7, max_changes=4000, connections=4)  # type: ignore[arg-type]
    ops = recording.planned[:sum(report.ops.values())]  # the planner may have planned one op it did not submit
    assert report.digest == plan_digest(ops) == plan_digest(plan_ops(seeded_state(), 7, len(ops)))
    when = {id(op): (start, end) for op, start, end in recording.log}
    assert len(when) == len(ops) and all(id(op) in when for op in ops)
    overlapped = 0
    for i, a in enumerate(ops):
        a_start, a_end = when[id(a)]
        for b in ops[i + 1:]:
            b_start, b_end = when[id(b)]
            if shared := _conflict(a, b):
                assert a_end < b_start, f"op {i} {a.name} and the later {b.name} share {set(shared)}, ran out of plan order"
            elif b_start < a_end and a_start < b_end:
                overlapped += 1
    assert overlapped > 0, "no two ops ever ran at once: the sessions are not used concurrently"
    assert report.stopped_by == "max-changes" and report.total_changes <= 4000


def test_one_connection_runs_the_plan_in_order(recording):
    report = runner.run(None, rate=1e9, duration=60, seed=3, max_changes=500, connections=1)  # type: ignore[arg-type]
    assert [id(op) for op, _, _ in recording.log] == [id(op) for op in recording.planned[:sum(report.ops.values())]]


def test_a_failed_op_stops_the_run_and_nothing_waiting_on_it_runs(recording):
    recording.fail_on = "customer_reinsert"  # the prelude's second op
    with pytest.raises(LoadgenError, match="customer_reinsert' failed on purpose"):
        runner.run(None, rate=1e9, duration=60, seed=5, max_changes=2000, connections=3)  # type: ignore[arg-type]
    ran = {id(op) for op, _, _ in recording.log}
    position = next(i for i, op in enumerate(recording.planned) if op.name == "customer_reinsert")
    failed = recording.planned[position]
    later = [op for op in recording.planned[position + 1:] if _conflict(failed, op)]
    assert later, "the plan has no later op on the failed op's rows: pick another seed"
    assert not [op.name for op in later if id(op) in ran], "an op waiting on the failed one ran"


def test_connections_must_be_positive():
    with pytest.raises(ValueError, match="connections must be >= 1"):
        runner.run(None, rate=10, duration=1, seed=0, connections=0)  # type: ignore[arg-type]


def test_row_sets_do_not_change_the_plan():
    """The rows an op names come from its plan; the plan and its digest are what they were."""
    ops = plan_ops(seeded_state(), 11, 300)
    bare = [Op(op.name, op.statements, op.rollback, op.interleave, op.interleave_at) for op in ops]
    assert plan_digest(ops) == plan_digest(bare)
    assert all(op.writes for op in ops), [op.name for op in ops if not op.writes]
