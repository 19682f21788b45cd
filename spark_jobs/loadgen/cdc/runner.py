"""One loadgen run: plan, pace, schedule and execute until the duration or change budget is spent."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from spark_jobs.loadgen.cdc.execute import LoadgenError, LoadReport, account, connect
from spark_jobs.loadgen.cdc.model import load_state
from spark_jobs.loadgen.cdc.pacing import TokenBucket
from spark_jobs.loadgen.cdc.plan import Op
from spark_jobs.loadgen.cdc.planner import Planner
from spark_jobs.loadgen.cdc.schedule import Scheduler, Workers

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

DEFAULT_CONNECTIONS = 4  # sessions running ops at once (see Scheduler); 1 gives the plan's commit order


def run(settings: Settings, rate: float, duration: float, seed: int, max_changes: int | None = None,
        *, progress: Callable[[str], None] | None = None, progress_every: float = 5.0,
        synchronous_commit: bool = True, connections: int = DEFAULT_CONNECTIONS) -> LoadReport:
    """Run the workload at ``rate`` committed changes/s until ``duration`` seconds or ``max_changes``.

    One thread plans the seeded ops in order and paces them; ``connections``
    sessions run them, concurrently where :class:`Scheduler` allows (ops on the
    same rows keep their plan order), so the rows left behind are the plan's
    whatever the interleaving. With ``connections=1`` the commit order is the plan order.
    Never commits more than ``max_changes`` (stops before an op that would exceed it).
    ``synchronous_commit=False`` sets it off for the loadgen's sessions: roughly
    doubles the reachable rate when WAL fsync is the bottleneck, at the price of
    up to ``wal_writer_delay`` (200 ms) before a commit is visible to CDC.
    """
    import queue

    if duration <= 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")
    if max_changes is not None and max_changes < 1:
        raise ValueError(f"max_changes must be >= 1, got {max_changes}")
    if connections < 1:
        raise ValueError(f"connections must be >= 1, got {connections}")
    report = LoadReport(seed=seed, target_rate=rate)
    conn = connect(settings)
    try:
        with conn.cursor() as cur:
            state = load_state(cur)
        conn.rollback()
    finally:
        conn.close()
    planner = Planner(state, seed)
    scheduler = Scheduler(serial=connections == 1)
    workers = Workers(settings, connections, synchronous_commit=synchronous_commit)
    digest = hashlib.sha256()
    in_flight: dict[int, Op] = {}  # submitted, not finished
    running: set[int] = set()  # handed to the sessions (queued or executing)
    max_in_flight = 4 * connections  # how far planning may run ahead of the sessions
    planned_changes = 0
    failure: tuple[Op, Exception] | None = None

    def dispatch(seq: int) -> None:
        running.add(seq)
        workers.todo.put((seq, in_flight[seq]))

    def finish(block_until: float | None) -> None:
        """Take finished ops off the queue (waiting until ``block_until`` for the first); release dependents."""
        nonlocal failure
        while True:
            try:
                if block_until is None:
                    seq, op, exc = workers.finished.get_nowait()
                else:
                    seq, op, exc = workers.finished.get(timeout=max(0.0, block_until - time.monotonic()))
            except queue.Empty:
                return
            block_until = None
            del in_flight[seq]
            running.discard(seq)
            if exc is not None:
                failure = failure or (op, exc)
                continue
            account(report, op)
            if failure is None:
                for ready in scheduler.done(seq):
                    dispatch(ready)

    try:
        start = time.monotonic()
        bucket = TokenBucket(rate, burst=max(10.0, rate * 0.05), now=start)
        next_progress = start + progress_every
        report.stopped_by = "duration"
        while failure is None:
            now = time.monotonic()
            if now - start >= duration:
                break
            if now >= next_progress and progress is not None:
                report.elapsed_s = now - start
                progress(f"  {report.elapsed_s:5.0f}s  {report.total_changes} changes ({report.actual_rate:.0f}/s), "
                         f"{report.transactions} commits, {report.rollbacks} rollbacks, {len(in_flight)} in flight")
                next_progress += progress_every
            op = planner.next_op()
            n = op.committed_changes()
            if max_changes is not None and planned_changes + n > max_changes:
                report.stopped_by = "max-changes"
                break
            wait = bucket.take(n, now)
            if wait > 0:
                if now + wait - start >= duration:
                    break
                until = now + wait
                while time.monotonic() < until and failure is None:
                    finish(until)
            while len(in_flight) >= max_in_flight and failure is None:
                finish(time.monotonic() + 1.0)
            if failure is not None:
                break
            finish(None)
            seq, ready = scheduler.submit(op)
            in_flight[seq] = op
            planned_changes += n
            digest.update(op.signature().encode("utf-8"))
            digest.update(b"\x00")
            if ready:
                dispatch(seq)
            if max_changes is not None and planned_changes == max_changes:
                report.stopped_by = "max-changes"
                break
        # Let what was handed out finish; it releases the rest, unless an op failed (then nothing more starts).
        while running:
            finish(time.monotonic() + 1.0)
        report.elapsed_s = time.monotonic() - start
    finally:
        workers.close()
    if failure is not None:
        op, exc = failure
        if isinstance(exc, LoadgenError):
            raise exc
        raise LoadgenError(f"op {op.name!r} failed: {exc}") from exc
    report.digest = digest.hexdigest()
    return report
