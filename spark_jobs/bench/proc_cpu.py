"""CPU seconds of a streaming app's processes and threads, split into driver and executor work (from /proc).

The benches report the driver's share of the CPU during catch-up (goal <= 10%):
:func:`cpu_snapshot` before and after, :func:`cpu_split` of the two. In ``local[*]`` the driver JVM also
runs the tasks, so its threads are told apart by name; GC/JIT/VM threads serve both sides and are
reported apart (``jvm_shared``), as are threads that exited in between. On a standalone cluster the
executors' JVMs are separate processes, found by the driver URL in their command line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

#: JVM thread names (``/proc/<pid>/task/<tid>/comm``, 15 characters) of work done for Spark tasks: task threads,
#: the Python runner's writer threads feeding the Python workers, RocksDB's and the state store's background
#: threads, shuffle and block transfer.
EXECUTOR_THREADS = ("Executor task", "stdout writer", "stdin writer", "writer for", "rocksdb", "state-store",
                    "shuffle-", "block-manager-s", "RemoteBlock")
#: JVM threads no side owns: garbage collection, JIT compilers, VM housekeeping.
SHARED_THREADS = ("GC Thread", "G1 ", "C1 Compiler", "C2 Compiler", "VM ", "Sweeper", "Service Thread",
                  "Monitor Deflati", "Common-Cleaner", "Finalizer", "Reference Handl", "Signal Dispatch")


def _stat(path: Path) -> tuple[str, list[str]] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def _ticks(fields: list[str], children: bool = False) -> int:
    # fields[0] is the state (field 3 of proc(5)); utime, stime are 14, 15; cutime, cstime 16, 17.
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if children else 0)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(entry / "stat")
            if stat and int(stat[1][1]) == pid:
                out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def cluster_executors(app: str) -> list[int]:
    """Pids of the executor JVMs a standalone cluster's workers run for one application: ``app`` is its
    application id or its driver's RPC URL (``spark://CoarseGrainedScheduler@host:port``), both in their argv."""
    wanted = app.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            argv = _cmdline(int(entry.name)).split(b"\0")
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and wanted in argv:
                pids.append(int(entry.name))
    return pids


def stream_executors_of(settings: Settings) -> str | None:
    """The streaming driver's RPC URL when it runs on a standalone cluster (its executors are other processes),
    else None (``local[*]``: the tasks run in the driver's JVM)."""
    if not settings.spark_master.startswith("spark://"):
        return None
    return f"spark://CoarseGrainedScheduler@{settings.host}:{settings.stream_driver_port}"


def _tree(out: dict[str, tuple[str, int]], root: int, bucket: str) -> None:
    """Every process under ``root`` (Python workers), with their reaped children, into ``bucket``."""
    todo = _children(root)
    while todo:
        pid = todo.pop()
        pstat = _stat(Path(f"/proc/{pid}/stat"))
        if pstat is not None:
            out[f"pid:{pid}"] = (bucket, _ticks(pstat[1], children=True))
            todo.extend(_children(pid))


def cpu_snapshot(driver_pid: int, executors_of: str | None = None) -> dict[str, tuple[str, int]]:
    """CPU ticks of the streaming app now: ``{entity: (bucket, ticks)}``.

    Entities: the driver Python process (bucket ``driver_python``); each thread
    of its JVM child (``executor`` for task work, see :data:`EXECUTOR_THREADS`;
    ``jvm_shared`` for GC/JIT/VM; ``driver_jvm`` for the rest: scheduler, RPC,
    the streaming query's thread, Delta's commit code); the JVM's own total
    (``jvm_total``, which keeps the CPU of threads that already exited); every
    process under the JVM (Spark's Python workers: ``executor``, with their
    reaped children). With ``executors_of`` (the driver's RPC URL, on a standalone cluster) also the executor
    JVMs the workers run for it, whole (``executor``: every thread of an executor JVM, GC included, works for
    tasks) with their Python workers.
    """
    out: dict[str, tuple[str, int]] = {}
    driver = _stat(Path(f"/proc/{driver_pid}/stat"))
    if driver is None:
        return out
    out["driver"] = ("driver_python", _ticks(driver[1]))
    for jvm in _children(driver_pid):
        stat = _stat(Path(f"/proc/{jvm}/stat"))
        if stat is None or stat[0] != "java":
            continue
        out[f"jvm:{jvm}"] = ("jvm_total", _ticks(stat[1]))
        for task in Path(f"/proc/{jvm}/task").iterdir():
            tstat = _stat(task / "stat")
            if tstat is None:
                continue
            name = tstat[0]
            bucket = ("executor" if name.startswith(EXECUTOR_THREADS)
                      else "jvm_shared" if name.startswith(SHARED_THREADS) else "driver_jvm")
            out[f"tid:{task.name}"] = (bucket, _ticks(tstat[1]))
        _tree(out, jvm, "executor")
    for pid in cluster_executors(executors_of) if executors_of else []:
        stat = _stat(Path(f"/proc/{pid}/stat"))
        if stat is not None:
            out[f"exec:{pid}"] = ("executor", _ticks(stat[1]))
            _tree(out, pid, "executor")
    return out


def cpu_split(before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """CPU seconds per bucket between two :func:`cpu_snapshot`, and the driver's share of all of it.

    JVM threads that exited in between are not in ``after``: their CPU is the
    JVM total's delta minus its live threads' (``jvm_exited_threads``), owner
    unknown. ``driver_share`` counts the driver Python process and the JVM's
    driver-side threads over everything; ``driver_share_upper`` adds the shared
    GC/JIT and the exited threads to the driver's side (a bound, not an estimate).
    """
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = {"driver_python": 0.0, "driver_jvm": 0.0, "executor": 0.0, "jvm_shared": 0.0,
                                 "jvm_total": 0.0}
    for key, (bucket, ticks) in after.items():
        seconds[bucket] += (ticks - before.get(key, (bucket, 0))[1]) / tick
    threads = seconds["driver_jvm"] + seconds["jvm_shared"] + sum(
        (ticks - before.get(k, (b, 0))[1]) / tick for k, (b, ticks) in after.items()
        if b == "executor" and k.startswith("tid:"))
    seconds["jvm_exited_threads"] = max(0.0, seconds.pop("jvm_total") - threads)
    total = sum(seconds.values())
    driver = seconds["driver_python"] + seconds["driver_jvm"]
    upper = driver + seconds["jvm_shared"] + seconds["jvm_exited_threads"]
    return {"cpu_seconds": {k: round(v, 1) for k, v in seconds.items()}, "total_cpu_seconds": round(total, 1),
            "driver_share": round(driver / total, 3) if total else None,
            "driver_share_upper": round(upper / total, 3) if total else None}
