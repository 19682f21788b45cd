"""Which ops may run at once (:class:`Scheduler`), and the sessions that run them (:class:`Workers`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.loadgen.cdc.execute import Executor
from spark_jobs.loadgen.cdc.plan import Key, Op

if TYPE_CHECKING:
    from spark_jobs.settings import Settings


class Scheduler:
    """Orders ops that touch the same rows; ops on disjoint rows may run concurrently.

    Ops are submitted in plan order. An op waits for the last earlier op that
    wrote any row it reads or writes, and, if it writes a row, for every earlier
    op that read that row since. Two ops that may run at once therefore change
    disjoint rows and only share foreign-key parents that neither changes
    (PostgreSQL's KEY SHARE locks on those parents do not conflict), so any
    order of them leaves the same rows as the plan order, and every statement
    finds the rows the planner expected. ``serial=True`` makes every op wait for
    the one before it (one session: the commit order is the plan order).
    """

    def __init__(self, *, serial: bool = False) -> None:
        self.serial = serial
        self._last_write: dict[Key, int] = {}
        self._reads: dict[Key, list[int]] = {}
        self._waiting_on: dict[int, set[int]] = {}
        self._dependents: dict[int, list[int]] = {}
        self._done: set[int] = set()
        self._next = 0

    def submit(self, op: Op) -> tuple[int, bool]:
        """Register the next op in plan order; return its number and whether it may run now."""
        seq = self._next
        self._next += 1
        deps: set[int] = {seq - 1} if self.serial and seq > 0 else set()
        for key in op.reads:
            if key in self._last_write:
                deps.add(self._last_write[key])
            self._reads.setdefault(key, []).append(seq)
        for key in op.writes:
            if key in self._last_write:
                deps.add(self._last_write[key])
            deps.update(self._reads.pop(key, ()))
            self._last_write[key] = seq
        deps.discard(seq)
        deps -= self._done
        if deps:
            self._waiting_on[seq] = deps
            for d in deps:
                self._dependents.setdefault(d, []).append(seq)
        return seq, not deps

    def done(self, seq: int) -> list[int]:
        """Mark ``seq`` finished; return the ops that may run now (in plan order)."""
        self._done.add(seq)
        ready = []
        for dep in self._dependents.pop(seq, ()):
            waiting = self._waiting_on[dep]
            waiting.discard(seq)
            if not waiting:
                del self._waiting_on[dep]
                ready.append(dep)
        return sorted(ready)


class Workers:
    """``n`` threads, each with its own :class:`Executor`, running ops the scheduler released."""

    def __init__(self, settings: Settings, n: int, *, synchronous_commit: bool) -> None:
        import queue
        import threading

        self.todo: queue.Queue[tuple[int, Op] | None] = queue.Queue()
        self.finished: queue.Queue[tuple[int, Op, Exception | None]] = queue.Queue()
        self.executors: list[Executor] = []
        try:
            for _ in range(n):
                self.executors.append(Executor(settings, synchronous_commit=synchronous_commit))
        except BaseException:
            self.close()
            raise
        self.threads = [threading.Thread(target=self._work, args=(ex,), name=f"loadgen-cdc-{i}", daemon=True)
                        for i, ex in enumerate(self.executors)]
        for t in self.threads:
            t.start()

    def _work(self, executor: Executor) -> None:
        while (item := self.todo.get()) is not None:
            seq, op = item
            try:
                executor.run(op)
            except Exception as exc:  # noqa: BLE001 - handed to the planning thread, which raises it
                self.finished.put((seq, op, exc))
            else:
                self.finished.put((seq, op, None))

    def close(self) -> None:
        for _ in getattr(self, "threads", ()):
            self.todo.put(None)
        for t in getattr(self, "threads", ()):
            t.join()
        for ex in self.executors:
            ex.close()
