"""CPU seconds of a Spark application on this machine, split into driver and executor work (from /proc).

The benches report the driver's share of the CPU during catch-up (issue 19: goal <= 10%). What counts:

* executor work: Spark task threads (``Executor task launch worker ...``) of every JVM of the application,
  the executor JVMs of a standalone cluster (``CoarseGrainedExecutorBackend`` with the application's id:
  all their threads), and the Python workers (``pyspark.daemon`` and its forks: ``mapInArrow`` code);
* driver work: the Python driver process and every other thread of the driver JVM (scheduler, Delta
  commits, planning, and also its GC and JIT threads: in ``local[*]`` those serve the tasks too, so the
  driver's share is an upper bound there).

Threads or processes that end between two samples take their CPU with them, so sample a running app.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_TASK_THREAD = "Executor task"  # comm is cut at 15 characters: "Executor task l"


@dataclass(frozen=True)
class CpuSample:
    driver_s: float
    executor_s: float


def _stat_seconds(path: Path) -> float:
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime (fields 14 and 15 of stat)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _tree(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += _children(p)
    return seen


def sample(driver_pid: int, app_id: str | None = None) -> CpuSample:
    """CPU seconds so far of the application whose Python driver is ``driver_pid`` (and, on a standalone
    cluster, whose executors carry ``app_id``)."""
    driver = executor = 0.0
    for pid in _tree(driver_pid):
        argv = _cmdline(pid)
        if any(a.startswith(b"pyspark.daemon") or a == b"pyspark.daemon" for a in argv) or b"pyspark.worker" in argv:
            executor += _stat_seconds(Path(f"/proc/{pid}/stat"))
            continue
        if pid != driver_pid and argv and argv[0].endswith(b"java"):
            for task in Path(f"/proc/{pid}/task").iterdir():
                seconds = _stat_seconds(task / "stat")
                try:
                    name = (task / "comm").read_text()
                except OSError:
                    continue
                if name.startswith(_TASK_THREAD):
                    executor += seconds
                else:
                    driver += seconds
            continue
        driver += _stat_seconds(Path(f"/proc/{pid}/stat"))
    if app_id:
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                argv = _cmdline(int(proc.name))
                if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and app_id.encode() in argv:
                    executor += sum(_stat_seconds(Path(f"/proc/{p}/stat")) for p in _tree(int(proc.name)))
    return CpuSample(driver, executor)


def share(before: CpuSample, after: CpuSample) -> dict[str, float | None]:
    """CPU seconds between two samples and the driver's share of them."""
    driver = after.driver_s - before.driver_s
    executor = after.executor_s - before.executor_s
    total = driver + executor
    return {"driver_cpu_s": round(driver, 1), "executor_cpu_s": round(executor, 1),
            "driver_cpu_share": round(driver / total, 3) if total > 0 else None}
